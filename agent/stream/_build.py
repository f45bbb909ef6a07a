"""cffi build script (API, out-of-line mode) for the C stream core in csrc/.

setuptools runs it through `cffi_modules` at install time; it produces the
extension module agent.stream._core. Constants and enum values are taken from
the C headers by the compiler (the `...` below) and the functions' prototypes
are read from the headers, so csrc/ is their only source.
"""

import os
import re

from cffi import FFI

CSRC = "csrc"
SOURCES = [os.path.join(CSRC, name) for name in ("sse.c", "ndjson.c", "json.c", "record.c",
                                                "extract.c", "openai_chat.c", "anthropic.c",
                                                "openai_responses.c", "ollama.c")]

CDEF = """
#define HA_REC_WORDS ...
#define HA_REC_HEADER ...
#define HA_SSE_DEFAULT_CAPACITY ...
#define HA_SSE_MIN_CAPACITY ...
#define HA_JSON_MAX_DEPTH ...
#define HA_JSON_FLAG_BAD_UTF8 ...
#define HA_JSON_FLAG_LONE_SURROGATE ...
#define HA_JSON_FLAT_WORDS ...
#define HA_JSON_FLAT_INT ...
#define HA_JSON_FLAT_F64 ...
#define HA_JSON_FLAT_BIG ...
#define HA_SSE_TAIL_UNTERMINATED_EVENT ...
#define HA_SSE_TAIL_PARTIAL_LINE ...
#define HA_SSE_TAIL_INCOMPLETE_UTF8 ...
#define HA_PACKED_KIND_BITS ...
#define HA_PACKED_TEXT_SHIFT ...
#define HA_PACKED_MAX_INDEX ...

typedef enum { HA_PACKED_TEXT, HA_PACKED_REASONING, HA_PACKED_REFUSAL, ... } ha_packed_kind;
typedef enum { HA_PROTO_SSE, HA_PROTO_OPENAI_CHAT, HA_PROTO_ANTHROPIC,
               HA_PROTO_OPENAI_RESPONSES, HA_PROTO_OLLAMA, ... } ha_protocol;
typedef enum { HA_HDR_EVENTS, HA_HDR_TEXT, HA_HDR_CONSUMED, HA_HDR_FULL, ... }
    ha_header_word;
typedef enum { HA_WORD_KIND, HA_WORD_INDEX, HA_WORD_SUB, HA_WORD_CODE,
               HA_WORD_S1, HA_WORD_S1_END, HA_WORD_S2, HA_WORD_S2_END,
               HA_WORD_S3, HA_WORD_S3_END, HA_WORD_RAW, HA_WORD_RAW_END, ... }
    ha_rec_word;
typedef enum { HA_USAGE_INPUT, HA_USAGE_OUTPUT, HA_USAGE_TOTAL, HA_USAGE_CACHE_READ,
               HA_USAGE_CACHE_WRITE, HA_USAGE_REASONING, ... } ha_usage_word;
typedef enum { HA_TIMING_TOTAL, HA_TIMING_LOAD, HA_TIMING_PROMPT_EVAL, HA_TIMING_EVAL,
               ... } ha_timing_word;
typedef enum { HA_ITEM_TEXT, HA_ITEM_THINKING, HA_ITEM_REDACTED_THINKING,
               HA_ITEM_TOOL_USE, HA_ITEM_OTHER, ... } ha_item_kind;
typedef enum { HA_FINISH_STOP, HA_FINISH_COMPLETED, HA_FINISH_INCOMPLETE,
               HA_FINISH_FAILED, ... } ha_finish_status;
typedef enum { HA_WARN_BAD_JSON, HA_WARN_NOT_OBJECT, HA_WARN_UNKNOWN_EVENT,
               HA_WARN_UNKNOWN_DELTA, HA_WARN_FIELD_TYPE, HA_WARN_REPLACED_UTF8,
               HA_WARN_MISSING_FIELD, HA_WARN_ELIDED, HA_WARN_DELTA_ELIDED,
               ... } ha_warning;
typedef enum { HA_ERR_EVENT_TOO_LARGE, HA_ERR_NAME_TOO_LONG, HA_ERR_ID_TOO_LONG,
               HA_ERR_LINE_TOO_LARGE, HA_ERR_OUTPUT_TOO_LARGE, ... } ha_framing_error;
typedef enum { HA_REC_SSE_EVENT, HA_REC_TEXT, HA_REC_REASONING, HA_REC_REFUSAL,
               HA_REC_SIGNATURE, HA_REC_TOOL_START, HA_REC_TOOL_ARGS,
               HA_REC_BLOCK_START, HA_REC_BLOCK_STOP, HA_REC_CITATION,
               HA_REC_FINISH, HA_REC_USAGE, HA_REC_META, HA_REC_ERROR,
               HA_REC_END, HA_REC_WARNING, HA_REC_FRAMING_ERROR, HA_REC_TAIL,
               HA_REC_UNKNOWN_FIELD, HA_REC_TIMINGS, ... } ha_rec_kind;
typedef enum { HA_JSON_ABSENT, HA_JSON_NULL, HA_JSON_FALSE, HA_JSON_TRUE,
               HA_JSON_NUMBER, HA_JSON_STRING, HA_JSON_ARRAY, HA_JSON_OBJECT,
               ... } ha_json_kind;
typedef enum { HA_JSON_OK, HA_JSON_ERR_EMPTY, HA_JSON_ERR_SYNTAX,
               HA_JSON_ERR_DEPTH, HA_JSON_ERR_TRAILING, HA_JSON_ERR_TYPE,
               HA_JSON_ERR_RANGE, HA_JSON_ERR_SPACE, ... } ha_json_status;

typedef struct { ...; } ha_stream;
typedef struct { size_t start; size_t end; ha_json_kind kind; uint32_t tape; } ha_json_val;
typedef struct { ...; } ha_json_iter;

"""



def declarations(header: str, names: tuple[str, ...]) -> str:
    """The prototypes of the functions named, copied from the header that
    declares them, so that their signatures have one source."""
    with open(os.path.join(CSRC, header), encoding="utf-8") as f:
        text = f.read()
    found = []
    for name in names:
        match = re.search(rf"^[a-z][\w ]*?\b{name}\([^;]*\);", text, re.M)
        if match is None:
            raise LookupError(f"{header} declares no {name}()")
        found.append(match.group(0))
    return "\n".join(found)


# ha_stream_feed_packed is declared for its address: the hand-written
# binding (csrc/pyfeed.c) makes the per-read call to this module's function
STREAM_FUNCTIONS = ("ha_stream_text_size", "ha_stream_raw_size", "ha_stream_init",
                    "ha_stream_feed_packed", "ha_stream_close", "ha_stream_retry")
JSON_FUNCTIONS = ("ha_json_parse", "ha_json_iter_init", "ha_json_obj_next", "ha_json_arr_next",
                  "ha_json_obj_get", "ha_json_str_max", "ha_json_str_decode",
                  "ha_json_get_i64", "ha_json_get_f64", "ha_json_flatten")

ffibuilder = FFI()
ffibuilder.cdef("\n".join((CDEF, declarations("extract.h", STREAM_FUNCTIONS),
                           declarations("json.h", JSON_FUNCTIONS))))
# cffi's wrappers release the GIL around every call. A call here is bounded
# by one read's bytes, calls back into nothing and takes well under a
# microsecond for a read of one event, where the release and retake cost
# about a tenth of it (callgrind: ~400 instructions of ~6,600 a call): like
# the json module, the core keeps the GIL. The wrappers come after this
# preamble, so the two macros are redefined for them alone.
KEEP_GIL = """
#undef Py_BEGIN_ALLOW_THREADS
#undef Py_END_ALLOW_THREADS
#define Py_BEGIN_ALLOW_THREADS {
#define Py_END_ALLOW_THREADS }
"""

ffibuilder.set_source(
    "agent.stream._core",
    '#include "extract.h"\n' + KEEP_GIL,
    sources=SOURCES,
    include_dirs=[CSRC],
    # The core is one file per concern; -flto inlines across them as within
    # one file, which it may only do for symbols kept inside the extension.
    extra_compile_args=["-std=c11", "-O2", "-flto", "-fvisibility=hidden"],
    extra_link_args=["-O2", "-flto"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
