/* Batch stream decoding: one call per network read.
 *
 * ha_stream_feed() frames every complete SSE event in a read (sse.h), or
 * every NDJSON line for HA_PROTO_OLLAMA (ndjson.h: "event" below is then a
 * line),
 * validates each event's JSON (json.h) and runs the protocol's extraction
 * table over it, writing compact records into an output area that the
 * caller allocated once per stream. Python then builds only the objects it
 * needs: the text of all records of one call is written to one UTF-8 area,
 * decoded once, and records address it in code points.
 *
 * Record layout: HA_REC_WORDS int64 words, named by ha_rec_word (C and
 * Python use the names, never the numbers). Strings are spans [start, end)
 * in code points of the call's text; raw is a span in bytes of the raw area;
 * -1,-1 is absent. HA_REC_USAGE reuses the span words as token counts
 * (ha_usage_word), -1 = absent.
 * What index, sub, code and the strings mean for each kind is listed at
 * ha_rec_kind. The header of the record area (HA_REC_HEADER words before the
 * first record) holds the call's totals: see ha_header_word.
 *
 * The text area holds the strings of the call's records and nothing else
 * (an event rolled back takes its strings with it): a call whose only
 * record is a delta without an item id has that delta's piece as all of
 * its text, which decoder.py decodes without reading the spans.
 *
 * Consecutive records of a coalescing kind (text, reasoning, refusal, tool
 * arguments) with the same index, sub and s2 are merged
 * into one within a call: a read holding twenty text chunks costs Python one
 * string. Record boundaries are therefore not chunk boundaries.
 *
 * Output full: an event's records are committed whole or not at all. When
 * the area cannot take the next event, the call stops with that event
 * kept pending, HA_HDR_FULL set and HA_HDR_CONSUMED telling how much input
 * was used; the caller unpacks the records and calls again with
 * the rest of the input (possibly empty). An event that cannot fit even in
 * an empty area becomes an HA_REC_FRAMING_ERROR with code
 * HA_ERR_OUTPUT_TOO_LARGE.
 */
#ifndef HA_EXTRACT_H
#define HA_EXTRACT_H

#include <stddef.h>
#include <stdint.h>

#include "json.h"
#include "ndjson.h"
#include "sse.h"

#define HA_REC_WORDS 12
#define HA_REC_HEADER 4
#define HA_META_MAX 256u /* longest id / model kept to emit META only on change */
/* Ollama: a line dropped (over the buffer, or not parsed) is scanned for
 * this member of its message (ha_json_keyscan): the record that drops it
 * names the path, so that the caller knows a tool call was lost. */
#define HA_OLLAMA_CALLS_KEY "tool_calls"
#define HA_OLLAMA_CALLS_DEPTH 2u /* root {message {tool_calls */
#define HA_OLLAMA_CALLS_PATH "message.tool_calls"
#define HA_TAPE_MAX 1024u /* values and keys of one event on the tape (json.h); more: scanned */

typedef enum {
    HA_WORD_KIND,                              /* ha_rec_kind */
    HA_WORD_INDEX, HA_WORD_SUB, HA_WORD_CODE,  /* meaning per kind: ha_rec_kind */
    HA_WORD_S1, HA_WORD_S1_END,                /* the spans, each [start, end) */
    HA_WORD_S2, HA_WORD_S2_END,
    HA_WORD_S3, HA_WORD_S3_END,
    HA_WORD_RAW, HA_WORD_RAW_END
} ha_rec_word;

_Static_assert(HA_WORD_RAW_END + 1 == HA_REC_WORDS, "ha_rec_word names every word");

typedef enum {
    HA_PROTO_SSE = 0,              /* raw SSE events, no JSON */
    HA_PROTO_OPENAI_CHAT = 1,
    HA_PROTO_ANTHROPIC = 2,
    HA_PROTO_OPENAI_RESPONSES = 3,
    HA_PROTO_OLLAMA = 4            /* NDJSON lines, Ollama's /api/chat */
} ha_protocol;

typedef enum {
    HA_HDR_EVENTS = 0,   /* SSE events dispatched during this call */
    HA_HDR_TEXT = 1,     /* bytes of UTF-8 text written */
    HA_HDR_CONSUMED = 2, /* input bytes consumed */
    HA_HDR_FULL = 3      /* 1: the area filled up; unpack, then feed the
                            unconsumed rest (possibly empty) */
} ha_header_word;

typedef enum {
    /* raw mode: s1 event type ("" = message), s2 last event id, raw data;
       code 1 when an id has ever been set */
    HA_REC_SSE_EVENT = 1,
    /* text deltas. index: choice (chat), block (anthropic), output_index
       (responses). sub: content_index (responses) else -1. s1 text,
       s2 item_id (responses) */
    HA_REC_TEXT = 2,
    /* reasoning: chat reasoning_content / reasoning, anthropic thinking,
       responses reasoning summary (sub = summary_index) or reasoning text
       (sub = -1, code 1). s1 text, s2 item_id */
    HA_REC_REASONING = 3,
    HA_REC_REFUSAL = 4,     /* as TEXT */
    HA_REC_SIGNATURE = 5,   /* anthropic signature: index, s1 the whole
                               signature (a later one replaces it) */
    /* chat tool call head: index choice, sub tool_calls[].index (-1 when
       absent), s1 id, s2 function.name, s3 type (each absent if absent);
       ollama: index 0, sub function.index, s1 id, s2 name, its arguments
       object whole in the TOOL_ARGS record that follows */
    HA_REC_TOOL_START = 6,
    /* tool arguments piece: chat (index choice, sub tool index or -1),
       anthropic input_json_delta (index block, sub -1), responses
       function_call_arguments.delta (index output_index, s2 item_id);
       s1 the piece */
    HA_REC_TOOL_ARGS = 7,
    /* anthropic content_block_start / responses output_item.added: index,
       sub ha_item_kind, s1 id (tool_use id / call_id), s2 name, s3 item id
       (responses) ; code 1 when the item type is not one we know: s3 is
       then the type string and raw the item JSON. Anthropic tool_use: raw
       the input's JSON as sent when content_block.input is anything but
       {} (absent otherwise; an input with an elided string warns
       DELTA_ELIDED "content_block.input" after this record) */
    HA_REC_BLOCK_START = 8,
    /* anthropic content_block_stop / responses output_item.done: index,
       sub ha_item_kind, s1 call_id, s2 arguments (responses function_call),
       s3 item id, raw the item JSON (responses) */
    HA_REC_BLOCK_STOP = 9,
    /* citation or annotation: index, raw its JSON */
    HA_REC_CITATION = 10,
    /* finish: index choice (-1 when not per choice), sub ha_finish_status,
       s1 the provider's raw reason (ollama done_reason), s2 stop_sequence
       (anthropic) */
    HA_REC_FINISH = 11,
    HA_REC_USAGE = 12,
    /* s1 response / message id, s2 model: emitted when either changes */
    HA_REC_META = 13,
    /* a provider error after HTTP 200: s1 type or code, s2 message,
       raw the error JSON */
    HA_REC_ERROR = 14,
    /* end sentinel: chat [DONE] (code 0), anthropic message_stop (code 1),
       ollama done: true (code 2) */
    HA_REC_END = 15,
    /* a chunk or field we could not use: code ha_warning, index JSON error
       offset or -1, sub json status or -1, s1 detail (field path, event
       name; ollama's BAD_JSON: HA_OLLAMA_CALLS_PATH when the line held
       that member), raw the event data */
    HA_REC_WARNING = 16,
    /* framing: code ha_framing_error, index size; ollama's LINE_TOO_LARGE:
       s1 "message.tool_calls" when the dropped line held that member
       (HA_OLLAMA_CALLS_PATH) */
    HA_REC_FRAMING_ERROR = 17,
    /* from ha_stream_close only: code HA_SSE_TAIL_* flags (ollama:
       HA_NDJSON_TAIL_PARTIAL_LINE, the last line, delivered, had no LF),
       index pending size (ollama: that line's) */
    HA_REC_TAIL = 18,
    /* an SSE field the spec ignores: s1 field name, raw value preview,
       index full value length */
    HA_REC_UNKNOWN_FIELD = 19,
    /* ollama's timings of the done line: the span words hold nanoseconds
       (ha_timing_word), -1 = absent */
    HA_REC_TIMINGS = 20
} ha_rec_kind;

typedef enum {
    HA_ITEM_TEXT = 0,              /* anthropic text, responses message */
    HA_ITEM_THINKING = 1,          /* anthropic thinking, responses reasoning */
    HA_ITEM_REDACTED_THINKING = 2, /* s1 = its data */
    HA_ITEM_TOOL_USE = 3,          /* anthropic tool_use, responses function_call */
    HA_ITEM_OTHER = 4              /* code 1, s3 the type, raw the JSON */
} ha_item_kind;

typedef enum {
    HA_FINISH_STOP = 0,        /* chat finish_reason / anthropic stop_reason */
    HA_FINISH_COMPLETED = 1,   /* responses response.completed */
    HA_FINISH_INCOMPLETE = 2,  /* responses response.incomplete (s1 reason) */
    HA_FINISH_FAILED = 3       /* responses response.failed */
} ha_finish_status;

/* The words of an HA_REC_USAGE record after its kind: the span words hold
 * token counts instead. */
typedef enum {
    HA_USAGE_INPUT = HA_WORD_S1,
    HA_USAGE_OUTPUT = HA_WORD_S1_END,
    HA_USAGE_TOTAL = HA_WORD_S2,
    HA_USAGE_CACHE_READ = HA_WORD_S2_END,
    HA_USAGE_CACHE_WRITE = HA_WORD_S3,
    HA_USAGE_REASONING = HA_WORD_S3_END
} ha_usage_word;

/* The words of an HA_REC_TIMINGS record after its kind: durations in ns. */
typedef enum {
    HA_TIMING_TOTAL = HA_WORD_S1,
    HA_TIMING_LOAD = HA_WORD_S1_END,
    HA_TIMING_PROMPT_EVAL = HA_WORD_S2,
    HA_TIMING_EVAL = HA_WORD_S2_END
} ha_timing_word;

typedef enum {
    HA_WARN_BAD_JSON = 1,        /* event data is not strict JSON */
    HA_WARN_NOT_OBJECT = 2,      /* JSON, but not an object */
    HA_WARN_UNKNOWN_EVENT = 3,   /* event type we do not know (s1 the type) */
    HA_WARN_UNKNOWN_DELTA = 4,   /* delta type we do not know (s1 the type) */
    HA_WARN_FIELD_TYPE = 5,      /* a known field of the wrong type (s1 path) */
    HA_WARN_REPLACED_UTF8 = 6,   /* invalid UTF-8 or lone surrogate replaced
                                    by U+FFFD somewhere in this event */
    HA_WARN_MISSING_FIELD = 7,   /* a field the event type needs is absent
                                    or null (s1 path) */
    HA_WARN_ELIDED = 8,          /* a long string of an event over the SSE
                                    buffer was elided and reads as absent;
                                    the deltas carried it (s1 path) */
    HA_WARN_DELTA_ELIDED = 9     /* a delta's piece was elided: that text is
                                    lost (s1 path) */
} ha_warning;

typedef enum {
    HA_ERR_EVENT_TOO_LARGE = HA_SSE_ERR_EVENT_TOO_LARGE,
    HA_ERR_NAME_TOO_LONG = HA_SSE_ERR_NAME_TOO_LONG,
    HA_ERR_ID_TOO_LONG = HA_SSE_ERR_ID_TOO_LONG,
    HA_ERR_LINE_TOO_LARGE = HA_NDJSON_ERR_LINE_TOO_LARGE, /* an NDJSON line */
    HA_ERR_OUTPUT_TOO_LARGE = 10
} ha_framing_error;

/* How far a call's output has come: one event's output is rolled back by
 * restoring it. Private to the core, like ha_stream's members. */
typedef struct {
    size_t n_recs, text_len, text_chars, raw_len;
    /* the delta record a next piece may extend: its index or -1, where its
       text ends and where its item id lies (bytes of the text area) */
    long co_rec;
    size_t co_end, co_id_start, co_id_end;
    int co_has_id;
} ha_stream_out;

/* The stream. Members are private to the core (extract.c, record.c and the
 * protocols); placed by the caller. */
typedef struct {
    ha_sse sse;
    ha_ndjson nd;                      /* HA_PROTO_OLLAMA frames with this */
    ha_protocol proto;
    int64_t *recs; size_t rec_words;   /* header + records */
    uint8_t *text; size_t text_cap;
    uint8_t *raw; size_t raw_cap;
    ha_stream_out out;
    size_t events;
    int pending;                       /* a framed event awaits extraction */
    int pending_status;                /* ha_sse_status or ha_ndjson_status */
    int pending_held;                  /* ollama: the dropped line held a call */
    ha_sse_event ev;
    uint8_t meta_id[HA_META_MAX]; size_t meta_id_len;
    uint8_t meta_model[HA_META_MAX]; size_t meta_model_len;
    ha_json_tape tape;
    ha_json_tape_entry tape_entries[HA_TAPE_MAX];
} ha_stream;

/* Sizes of an output area that always holds one event of an SSE buffer (or
 * one line of an NDJSON buffer) of sse_cap bytes: the text area (every string of an event decodes to at most
 * three times its bytes) and the raw area. */
size_t ha_stream_text_size(size_t sse_cap);
size_t ha_stream_raw_size(size_t sse_cap);

/* recs holds rec_words int64 words: HA_REC_HEADER plus a multiple of
 * HA_REC_WORDS. Returns 0, or -1 if an area is smaller than the minimum. */
int ha_stream_init(ha_stream *st, ha_protocol proto,
                   uint8_t *sse_buf, size_t sse_cap,
                   int64_t *recs, size_t rec_words,
                   uint8_t *text, size_t text_cap,
                   uint8_t *raw, size_t raw_cap);

/* Feed one read. Writes the header and records afresh on every call and
 * returns the number of records. */
size_t ha_stream_feed(ha_stream *st, const uint8_t *in, size_t len);

/* ha_stream_feed() for a caller that decodes the usual read fast: the
 * read of a stream that keeps up with the model is one plain delta (TEXT,
 * REASONING or REFUSAL) of a small index, no sub index and no item id,
 * whose text is then the call's whole text. Such a call returns, instead
 * of its count 1, the negative
 *     -1 - (text_bytes << HA_PACKED_TEXT_SHIFT | index << HA_PACKED_KIND_BITS
 *           | kind)
 * with kind HA_PACKED_TEXT, _REASONING or _REFUSAL and index below
 * HA_PACKED_MAX_INDEX; any other call returns ha_stream_feed()'s count.
 * The header and the record are written either way. */
#define HA_PACKED_KIND_BITS 2
#define HA_PACKED_INDEX_BITS 6
#define HA_PACKED_TEXT_SHIFT (HA_PACKED_KIND_BITS + HA_PACKED_INDEX_BITS)
#define HA_PACKED_MAX_INDEX (1 << HA_PACKED_INDEX_BITS)
typedef enum { HA_PACKED_TEXT, HA_PACKED_REASONING, HA_PACKED_REFUSAL } ha_packed_kind;
int64_t ha_stream_feed_packed(ha_stream *st, const uint8_t *in, size_t len);

/* End of stream: delivers a pending event (ollama: or the last line if it
 * had no LF), then a HA_REC_TAIL record if anything was left undelivered or
 * cut. Same return and header as feed. */
size_t ha_stream_close(ha_stream *st);

/* The stream's last valid SSE `retry` value in milliseconds, or -1. */
int64_t ha_stream_retry(const ha_stream *st);

#endif
