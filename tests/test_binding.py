"""The Python face of the C stream core (agent/stream/_binding.py,
agent/stream/decoder.py): the import failure message, argument checks, the
stream life cycle, and the output-full path of ha_stream_feed (an event's
records are committed whole; a full area makes feed() call again)."""

from __future__ import annotations

import gc
import json
import re
import subprocess
import sys
import textwrap
import tracemalloc
import weakref
from pathlib import Path

import pytest

import agent
from agent.stream import DEFAULT_BUFFER_SIZE, Protocol, StreamClosedError, StreamDecoder
from agent.stream import records
from agent.stream._binding import Feed, ffi, lib
from agent.stream.decoder import _FEED_ADDRESS as _FEED
from agent.stream.decoder import NO_PACKED_CODE, packed_code
from agent.stream.decoders.ollama import OllamaDecoder
from agent.stream.decoders.openai_chat import OpenAIChatDecoder
from agent.stream.records import (
    FramingError,
    FramingErrorCode,
    Meta,
    ReasoningDelta,
    SSEEvent,
    StreamEnd,
    TextDelta,
    Truncated,
)

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------
# the enums of csrc/ in Python
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("header, c_type", [
    ("extract.h", "ha_rec_word"), ("extract.h", "ha_usage_word"), ("extract.h", "ha_protocol"),
    ("extract.h", "ha_header_word"), ("extract.h", "ha_rec_kind"), ("extract.h", "ha_item_kind"),
    ("extract.h", "ha_finish_status"), ("extract.h", "ha_warning"),
    ("extract.h", "ha_framing_error"), ("json.h", "ha_json_status"), ("json.h", "ha_json_kind"),
])
def test_cdef_lists_every_value_of_the_c_enums(header, c_type):
    # records.py makes its enums from the cdef: a value the header adds must
    # be listed there too
    text = re.sub(r"/\*.*?\*/", "", (ROOT / "csrc" / header).read_text(), flags=re.S)
    body = re.search(r"typedef enum \{([^}]*)\} " + c_type + ";", text).group(1)
    names = re.findall(r"\b(HA_\w+)\s*(?:=[^,]*)?(?:,|$)", body.strip())
    assert sorted(names) == sorted(ffi.typeof(c_type).relements)


@pytest.mark.parametrize("enum, c_type", [
    (records.Protocol, "ha_protocol"), (records.ItemKind, "ha_item_kind"),
    (records.FinishStatus, "ha_finish_status"), (records.WarningCode, "ha_warning"),
    (records.FramingErrorCode, "ha_framing_error"), (records.JSONStatus, "ha_json_status"),
])
def test_enums_are_the_c_values(enum, c_type):
    # the decoders' own warning codes are above the core's
    assert sorted(m.value for m in enum if m.value < 100) == sorted(
        ffi.typeof(c_type).relements.values())


# ---------------------------------------------------------------------------
# import failure
# ---------------------------------------------------------------------------

_BLOCKED_IMPORT = textwrap.dedent("""
    import sys

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == sys.argv[1]:
                raise ModuleNotFoundError("blocked by the test", name=name)
            return None

    sys.meta_path.insert(0, Block())
    try:
        import agent.stream
    except ImportError as exc:
        cause = exc.__cause__
        print("CAUSE:", type(cause).__name__, cause)
        print("MESSAGE:", exc)
        sys.exit(3)
    print("imported anyway")
    sys.exit(0)
""")


@pytest.mark.parametrize("extension", ["agent.stream._core", "agent.stream._feed"])
def test_import_without_extension_says_how_to_build(extension):
    proc = subprocess.run([sys.executable, "-c", _BLOCKED_IMPORT, extension], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    message = proc.stdout.split("MESSAGE:", 1)[1]
    assert extension in message
    assert "pip install -e ." in message
    assert "C compiler" in message and "python3-dev" in message
    # the original failure is chained, not swallowed
    assert "CAUSE: ModuleNotFoundError blocked by the test" in proc.stdout


def test_import_with_extension_works_in_a_subprocess():
    # the control for the test above: the same script without the blocker
    script = "import agent.stream, sys; print(agent.stream.StreamDecoder.__name__)"
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "StreamDecoder"


# ---------------------------------------------------------------------------
# arguments
# ---------------------------------------------------------------------------

def test_buffer_size_below_minimum_rejected():
    for size in (15, 1, 0, -1):
        with pytest.raises(ValueError, match="buffer_size must be at least 16"):
            StreamDecoder(Protocol.SSE, buffer_size=size)
    StreamDecoder(Protocol.SSE, buffer_size=16)  # the minimum itself is fine


def test_records_below_one_rejected():
    for count in (0, -5):
        with pytest.raises(ValueError, match="records must be at least 1"):
            StreamDecoder(Protocol.OPENAI_CHAT, records=count)
    StreamDecoder(Protocol.OPENAI_CHAT, records=1)


def test_unknown_protocol_rejected():
    with pytest.raises(ValueError):
        StreamDecoder(7)
    with pytest.raises(ValueError):
        StreamDecoder(-1)


def test_protocol_given_as_int():
    dec = StreamDecoder(0)
    assert dec.protocol is Protocol.SSE
    assert dec.feed(b"data: x\n\n") == [SSEEvent("", b"x", None)]


def test_default_buffer_size_bounds_events():
    assert DEFAULT_BUFFER_SIZE == 64 * 1024
    body = b"data: " + b"x" * DEFAULT_BUFFER_SIZE + b"\n\n"
    assert StreamDecoder(Protocol.SSE).feed(body) == [SSEEvent("", b"x" * DEFAULT_BUFFER_SIZE, None)]
    body = b"data: " + b"x" * (DEFAULT_BUFFER_SIZE + 1) + b"\n\n"
    assert StreamDecoder(Protocol.SSE).feed(body) == \
        [FramingError(FramingErrorCode.EVENT_TOO_LARGE, DEFAULT_BUFFER_SIZE + 1)]


def test_feed_accepts_bytes_like():
    dec = StreamDecoder(Protocol.SSE)
    assert dec.feed(bytearray(b"data: a\n")) == []
    assert dec.feed(memoryview(b"\ndata: b\n\n")) == [SSEEvent("", b"a", None),
                                                       SSEEvent("", b"b", None)]


def test_retry_property():
    dec = StreamDecoder(Protocol.SSE)
    assert dec.retry is None
    dec.feed(b"retry: 2500\n")
    assert dec.retry == 2500
    dec.feed(b"retry: x\n")
    assert dec.retry == 2500


# ---------------------------------------------------------------------------
# the per-read call's binding (csrc/pyfeed.c)
# ---------------------------------------------------------------------------

def _address(cdata) -> int:
    return int(ffi.cast("uintptr_t", cdata))


def test_feed_returns_the_piece_it_was_told_to_continue():
    dec = StreamDecoder(Protocol.OLLAMA)
    feed = dec._feed
    text = packed_code(TextDelta(0, ""))
    # the first line: the model's Meta and the delta, two records
    assert feed(_line({"content": "a"}), text) == 2
    # a read of one delta with the code it packs to: its text as a str
    assert feed(_line({"content": "wörld 🙂"}), text) == "wörld 🙂"
    # the same read, no code to match: the call's packed return, as is
    n = feed(_line({"content": "héllo"}), NO_PACKED_CODE)
    assert n == ~(len("héllo".encode()) << lib.HA_PACKED_TEXT_SHIFT | text)
    # another kind than the code's: the packed return, its record written
    n = feed(_line({"thinking": "hm"}), text)
    assert type(n) is int and n < 0
    assert dec._unpacked(1, b"") == [ReasoningDelta(0, "hm")]
    # no event in the read, or a read that is not one delta: the count
    assert feed(b'{"model":"m","message":{"content":"b"}', text) == 0
    data = b',"done":false}\n{"model":"m","done":true}\n'
    n = feed(data, text)
    assert n > 1 and dec._unpacked(n, data)[0] == TextDelta(0, "b")


def test_feed_refuses_what_is_not_a_read_and_a_code():
    feed = StreamDecoder(Protocol.OLLAMA)._feed
    for args in [(bytearray(b"{}\n"), 0), ("{}\n", 0), (b"{}\n",), (b"{}\n", 0, 0)]:
        with pytest.raises(TypeError):
            feed(*args)
    with pytest.raises(TypeError):
        feed(b"{}\n", "0")
    with pytest.raises(OverflowError):
        feed(b"{}\n", 1 << 64)


def test_feed_object_needs_addresses_and_no_keywords():
    dec = StreamDecoder(Protocol.OLLAMA)
    st, text = _address(dec._st), _address(dec._areas[2])
    for addresses in [(0, st, text), (_FEED, 0, text), (_FEED, st, 0)]:
        with pytest.raises(ValueError, match="non-null"):
            Feed(*addresses, None)
    with pytest.raises(TypeError):
        Feed(_FEED, st, text)
    with pytest.raises(TypeError, match="keyword"):
        Feed(_FEED, st, text, owner=None)


def test_feed_object_keeps_its_owner_alive():
    # the raw addresses it keeps are of memory its owner holds: the owner
    # lives as long as the Feed, and no longer
    class Owner:
        pass

    dec = StreamDecoder(Protocol.OLLAMA)
    owner = Owner()
    alive = weakref.ref(owner)
    feed = Feed(_FEED, _address(dec._st), _address(dec._areas[2]), owner).feed
    del owner
    gc.collect()
    assert alive() is not None
    assert feed(_line({"content": "x"}), NO_PACKED_CODE) == 2  # Meta and the delta
    del feed
    gc.collect()
    assert alive() is None


# ---------------------------------------------------------------------------
# life cycle
# ---------------------------------------------------------------------------

def test_feed_after_close_raises():
    dec = StreamDecoder(Protocol.OPENAI_CHAT)
    dec.feed(b"data: [DONE]\n\n")
    dec.close()
    with pytest.raises(StreamClosedError, match="after close"):
        dec.feed(b"data: [DONE]\n\n")
    with pytest.raises(StreamClosedError):
        dec.feed(b"")
    assert issubclass(StreamClosedError, RuntimeError)


def test_close_twice_returns_empty():
    dec = StreamDecoder(Protocol.SSE)
    dec.feed(b"data: cut")
    assert dec.close() == [Truncated(True, True, False, 3)]
    assert dec.close() == []
    assert dec.close() == []


def test_close_of_a_clean_stream_returns_empty():
    dec = StreamDecoder(Protocol.OPENAI_CHAT)
    assert dec.feed(b"data: [DONE]\n\n") == [StreamEnd("[DONE]")]
    assert dec.close() == []


# ---------------------------------------------------------------------------
# output full
# ---------------------------------------------------------------------------

def _chunk(delta: dict, index: int = 0, **top) -> bytes:
    body = {**top, "choices": [{"index": index, "delta": delta, "finish_reason": None}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _texts(events: list) -> dict:
    """Concatenated text per (kind, index)."""
    out: dict = {}
    for e in events:
        if isinstance(e, (TextDelta, ReasoningDelta)):
            key = (type(e).__name__, e.index)
            out[key] = out.get(key, "") + e.text
    return out


def _many_events() -> bytes:
    # Deltas that do not coalesce with their neighbours (the choice index and
    # the kind alternate), so every event needs a record of its own.
    parts = []
    for i in range(60):
        if i % 3 == 2:
            parts.append(_chunk({"reasoning_content": f"r{i} "}, index=i % 2))
        else:
            parts.append(_chunk({"content": f"t{i}-é🙂 "}, index=i % 2))
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def test_output_full_gives_the_same_text_as_default():
    body = _many_events()
    default = StreamDecoder(Protocol.OPENAI_CHAT)
    want = default.feed(body) + default.close()
    tiny = StreamDecoder(Protocol.OPENAI_CHAT, records=1)
    got = tiny.feed(body) + tiny.close()
    assert _texts(got) == _texts(want)
    assert _texts(got)[("TextDelta", 0)].startswith("t0-é🙂 t4-é🙂 ")
    assert got[-1] == want[-1] == StreamEnd("[DONE]")
    # one record per call: feed() went round the output-full loop
    assert len(got) == 61
    assert not [e for e in got if isinstance(e, FramingError)]


def test_output_full_every_split_same_text():
    body = _many_events()
    want = _texts(StreamDecoder(Protocol.OPENAI_CHAT).feed(body))
    for step in (1, 7, 100, 1000):
        dec = StreamDecoder(Protocol.OPENAI_CHAT, records=2)
        got: list = []
        for i in range(0, len(body), step):
            got += dec.feed(body[i:i + step])
        got += dec.close()
        assert _texts(got) == want, f"reads of {step} bytes"


def test_event_needing_more_records_than_the_area_is_output_too_large():
    # id and model make a Meta record besides the text: two records, and the
    # area holds one. The event is reported by name and decoding goes on.
    first = _chunk({"content": "lost"}, id="chatcmpl-1", model="m")
    data_len = len(first) - len(b"data: ") - 2
    rest = _chunk({"content": "kept"}) + b"data: [DONE]\n\n"
    dec = StreamDecoder(Protocol.OPENAI_CHAT, records=1)
    got = dec.feed(first + rest) + dec.close()
    assert got == [FramingError(FramingErrorCode.OUTPUT_TOO_LARGE, data_len),
                   TextDelta(0, "kept"), StreamEnd("[DONE]")]
    # the same event with room enough
    dec = StreamDecoder(Protocol.OPENAI_CHAT, records=2)
    assert dec.feed(first + rest) == [Meta("chatcmpl-1", "m"), TextDelta(0, "lostkept"),
                                      StreamEnd("[DONE]")]


def test_output_too_large_in_its_own_read_and_split():
    first = _chunk({"content": "a"}, id="x", model="m")
    rest = _chunk({"content": "b"}, index=1)
    body = first + rest
    for i in range(1, len(body)):
        dec = StreamDecoder(Protocol.OPENAI_CHAT, records=1)
        got = dec.feed(body[:i]) + dec.feed(body[i:]) + dec.close()
        assert got == [FramingError(FramingErrorCode.OUTPUT_TOO_LARGE, len(first) - 8),
                       TextDelta(1, "b")], f"split at {i}"


def test_sse_event_with_a_warning_needs_two_records():
    # Protocol.SSE: an invalid UTF-8 event name costs the event and a warning
    dec = StreamDecoder(Protocol.SSE, records=1)
    got = dec.feed(b"event: \xff\ndata: abc\n\ndata: ok\n\n")
    assert got == [FramingError(FramingErrorCode.OUTPUT_TOO_LARGE, 3), SSEEvent("", b"ok", None)]


# ---------------------------------------------------------------------------
# the one-delta read, and what a text delta costs in Python objects
# ---------------------------------------------------------------------------

def _line(message: dict) -> bytes:
    return json.dumps({"model": "m", "message": message, "done": False}).encode() + b"\n"


@pytest.mark.parametrize("protocol, events", [
    (Protocol.OPENAI_CHAT, [_chunk({"content": "héllo 🙂"}), _chunk({"reasoning_content": "r"}),
                            _chunk({"refusal": "no"}), _chunk({"content": "x"}, index=3),
                            _chunk({"tool_calls": [{"index": 2, "function": {"arguments": "{\"a"}}]}),
                            _chunk({"tool_calls": [{"function": {"arguments": "1}"}}]})]),
    (Protocol.OLLAMA, [_line({"content": "héllo 🙂"}), _line({"thinking": "t"})]),
    (Protocol.OPENAI_RESPONSES, [
        b"data: " + json.dumps({"type": "response.output_text.delta", "output_index": 1,
                                "content_index": 2, "item_id": "msg_1",
                                "delta": "hi"}).encode() + b"\n\n"]),
])
def test_a_read_of_one_delta_decodes_as_within_a_longer_read(protocol, events):
    # One delta in a read takes feed()'s short way; the same delta after
    # another event in one read is read from its record's spans.
    first = StreamDecoder(protocol)
    first.feed(events[0])  # Meta and the like come with the first event
    for event in events:
        alone = first.feed(event)
        other = StreamDecoder(protocol)
        other.feed(events[0])
        merged = other.feed(_chunk({"content": "-"}, index=9) + event
                            if protocol is not Protocol.OLLAMA
                            else _line({"thinking": "-"} if b'"content"' in event
                                       else {"content": "-"}) + event)
        assert len(alone) == 1
        assert merged[-1] == alone[0], event


# tracemalloc sees every thread's allocations; under pytest-xdist the
# worker's channel thread allocates too, at moments of its own. Only what
# the package allocated (the call site of C's allocations is the Python line
# that called it) is the decoder's.
_PACKAGE = tracemalloc.Filter(True, str(Path(agent.__file__).parent / "*"))


def _retained_blocks(decoder, reads: list[bytes]) -> int:
    """Blocks the package allocated while the reads were decoded that are
    still alive, with every event the decoder returned kept."""
    kept: list = []
    keep = kept.extend
    decoder.feed(reads[0])  # the first read's Meta, and warm caches
    tracemalloc.start()
    try:
        for r in reads[1:]:
            keep(decoder.feed(r))
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert len(kept) == len(reads) - 1
    return sum(s.count for s in snapshot.filter_traces([_PACKAGE]).statistics("filename"))


def _output_text(delta: dict) -> bytes:
    return b"data: " + json.dumps({"type": "response.output_text.delta", "output_index": 0,
                                   "content_index": 0, "item_id": "msg_1",
                                   "delta": delta["content"]}).encode() + b"\n\n"


@pytest.mark.parametrize("make, frame", [
    (lambda: StreamDecoder(Protocol.OPENAI_CHAT), _chunk), (OpenAIChatDecoder, _chunk),
    (lambda: StreamDecoder(Protocol.OLLAMA), _line), (OllamaDecoder, _line),
    # the item id every delta names is one str, not one per delta
    (lambda: StreamDecoder(Protocol.OPENAI_RESPONSES), _output_text)])
def test_a_text_delta_costs_at_most_two_python_objects(make, frame):
    # Its event and its string, both kept by the caller: feed() leaves
    # nothing else behind per read (the caller's list grows in place).
    n = 400
    reads = [frame({"content": f"word{i} "}) for i in range(n + 1)]  # no str shared
    gc.disable()
    try:
        blocks = _retained_blocks(make(), reads)
    finally:
        gc.enable()
    assert blocks <= 2 * n + 8, f"{blocks / n:.2f} blocks per text delta"
