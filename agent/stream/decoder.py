"""StreamDecoder: the sans-IO face of the C stream core.

Bytes in, events out, no I/O and no clock. One C call per network read
frames, scans and extracts every complete event in it; this module turns the
records that call wrote into the record objects of agent.stream.records. The
text of all records of one call is decoded once into a single str, so a
record's strings are slices of it (a whole-string slice is the str itself).
"""

from __future__ import annotations

import operator
import struct

from agent.stream._binding import Feed, ffi, lib
from agent.stream.records import (
    BlockStart,
    BlockStop,
    Citation,
    DecodeWarning,
    Finish,
    FinishStatus,
    FramingError,
    FramingErrorCode,
    ItemKind,
    JSONStatus,
    Meta,
    Protocol,
    ProviderError,
    ReasoningDelta,
    RefusalDelta,
    SSEEvent,
    SignatureDelta,
    StreamEnd,
    TextDelta,
    Timings,
    ToolArgsDelta,
    ToolCallStart,
    Truncated,
    UnknownField,
    Usage,
    WarningCode,
)

DEFAULT_BUFFER_SIZE = lib.HA_SSE_DEFAULT_CAPACITY
DEFAULT_RECORDS = 512
# The byte areas are output space: C writes before it reads. Not clearing
# them leaves the pages a short answer never reaches untouched, so they
# never become resident (a stream's areas total about 325 KiB).
_unzeroed = ffi.new_allocator(should_clear_after_alloc=False)

_W = lib.HA_REC_WORDS
_HDR = lib.HA_REC_HEADER
_HEADER = struct.Struct(f"={_HDR}q")  # events, text bytes, bytes used, full
_RECORD = struct.Struct(f"={_W}q")
_HDR_BYTES = _HEADER.size
_REC_BYTES = _RECORD.size
# Record words by their header names (ha_rec_word), bound once: the hot loop
# indexes tuples with module ints, no attribute lookup per record.
_KIND, _INDEX, _SUB, _CODE = (lib.HA_WORD_KIND, lib.HA_WORD_INDEX, lib.HA_WORD_SUB,
                              lib.HA_WORD_CODE)
_S1, _S1_END, _S2, _S2_END = (lib.HA_WORD_S1, lib.HA_WORD_S1_END, lib.HA_WORD_S2,
                              lib.HA_WORD_S2_END)
_S3, _S3_END, _RAW, _RAW_END = (lib.HA_WORD_S3, lib.HA_WORD_S3_END, lib.HA_WORD_RAW,
                                lib.HA_WORD_RAW_END)
_USAGE_WORDS = (lib.HA_USAGE_INPUT, lib.HA_USAGE_OUTPUT, lib.HA_USAGE_TOTAL,
                lib.HA_USAGE_CACHE_READ, lib.HA_USAGE_CACHE_WRITE, lib.HA_USAGE_REASONING)
_TIMING_WORDS = (lib.HA_TIMING_TOTAL, lib.HA_TIMING_LOAD, lib.HA_TIMING_PROMPT_EVAL,
                 lib.HA_TIMING_EVAL)


def _words(*positions: int) -> struct.Struct:
    """A Struct that reads only the words at these positions (ascending) of
    the record area, skipping the rest as padding: each word read is an int
    object made, so the one-delta path reads the six it needs."""
    fmt, at = "=", 0
    for w in positions:
        if w < at:
            raise ValueError("word positions must ascend")
        fmt += f"{(w - at) * 8}xq"
        at = w + 1
    return struct.Struct(fmt)


# A read of a stream that keeps up with the model is one event, most often
# one text record: of the header and that record, the words it needs.
_ONE = _words(lib.HA_HDR_TEXT, lib.HA_HDR_FULL, _HDR + _KIND, _HDR + _INDEX, _HDR + _SUB,
              _HDR + _S2)
# and, when it names an item (Responses), where its piece and id are
_ONE_SPANS = _words(_HDR + _S1, _HDR + _S1_END, _HDR + _S2_END)
_TEXT = lib.HA_REC_TEXT
_REASONING = lib.HA_REC_REASONING
_TOOL_ARGS = lib.HA_REC_TOOL_ARGS
_SSE_EVENT = lib.HA_REC_SSE_EVENT
# the records that end an answer, and a tool call's head, tested first
_FINISH_REC, _USAGE_REC, _TIMINGS_REC = lib.HA_REC_FINISH, lib.HA_REC_USAGE, lib.HA_REC_TIMINGS
_END_REC, _META_REC, _TOOL_START_REC = lib.HA_REC_END, lib.HA_REC_META, lib.HA_REC_TOOL_START
# The deltas built alike, (index, text, sub or None, item id or None)
_PLAIN_DELTAS = {_TEXT: TextDelta, _REASONING: ReasoningDelta,
                 lib.HA_REC_REFUSAL: RefusalDelta}
# ha_stream_feed_packed's return for one plain delta: ~n is its text's
# bytes, index and kind (extract.h)
_PACKED_KIND = (1 << lib.HA_PACKED_KIND_BITS) - 1
_PACKED_BY_KIND = {lib.HA_PACKED_TEXT: TextDelta, lib.HA_PACKED_REASONING: ReasoningDelta,
                   lib.HA_PACKED_REFUSAL: RefusalDelta}
_PACKED = tuple(_PACKED_BY_KIND.get(k) for k in range(_PACKED_KIND + 1))
_PACKED_INDEX = lib.HA_PACKED_MAX_INDEX - 1
_PACKED_KIND_BITS = lib.HA_PACKED_KIND_BITS
_PACKED_TEXT_SHIFT = lib.HA_PACKED_TEXT_SHIFT
NO_PACKED_CODE = -1  # matches no packed return: the binding's feed() gives its int


def packed_code(delta) -> int:
    """What ha_stream_feed_packed returns, inverted and masked, for a next
    delta of this one's class and index, or NO_PACKED_CODE when it cannot be
    packed."""
    kind = _PACKED_KIND_OF.get(type(delta))
    if kind is None or not 0 <= delta.index <= _PACKED_INDEX:
        return NO_PACKED_CODE
    return delta.index << _PACKED_KIND_BITS | kind


_PACKED_KIND_OF = {cls: kind for kind, cls in _PACKED_BY_KIND.items()}
_FEED_ADDRESS = int(ffi.cast("uintptr_t", ffi.addressof(lib, "ha_stream_feed_packed")))
_END_SENTINELS = ("[DONE]", "message_stop", "done")  # by HA_REC_END's code
_ITEM_KINDS = {k.value: k for k in ItemKind}
_FINISH = {k.value: k for k in FinishStatus}
_WARNINGS = {k.value: k for k in WarningCode}
_FRAMING = {k.value: k for k in FramingErrorCode}
_JSON_STATUS = {k.value: k for k in JSONStatus}


class StreamClosedError(RuntimeError):
    """feed() after close(): the stream is over."""


class StreamDecoder:
    """Decode one HTTP response body of the given protocol.

    buffer_size bounds one SSE event's data (default 64 KiB); an event of
    JSON over it keeps its small fields, its long strings elided (sse.h); one
    too large even so becomes a FramingError and decoding goes on with the
    next event. For Protocol.OLLAMA it bounds one NDJSON line: a longer line
    is a FramingError (LINE_TOO_LARGE), nothing elided.
    Memory is allocated here, once; feeding allocates nothing in C.
    """

    __slots__ = ("protocol", "_st", "_areas", "_recs", "_recs_view", "_text",
                 "_raw", "_feed", "_closed", "_item_id")

    def __init__(self, protocol: Protocol = Protocol.OPENAI_CHAT,
                 buffer_size: int = DEFAULT_BUFFER_SIZE,
                 records: int = DEFAULT_RECORDS) -> None:
        if buffer_size < lib.HA_SSE_MIN_CAPACITY:
            raise ValueError(f"buffer_size must be at least {lib.HA_SSE_MIN_CAPACITY}")
        if records < 1:
            raise ValueError("records must be at least 1")
        self.protocol = Protocol(protocol)
        sse_buf = _unzeroed("uint8_t[]", buffer_size)
        recs = ffi.new("int64_t[]", _HDR + records * _W)
        text = _unzeroed("uint8_t[]", lib.ha_stream_text_size(buffer_size))
        raw = _unzeroed("uint8_t[]", lib.ha_stream_raw_size(buffer_size))
        st = ffi.new("ha_stream *")
        if lib.ha_stream_init(st, int(self.protocol), sse_buf, buffer_size,
                              recs, len(recs), text, len(text), raw, len(raw)) != 0:
            raise ValueError("stream core rejected the buffer sizes")
        self._st = st
        self._areas = (sse_buf, recs, text, raw)  # owned here, used by C
        self._recs = ffi.buffer(recs)
        self._recs_view = memoryview(self._recs)
        self._text = ffi.buffer(text)
        self._raw = memoryview(ffi.buffer(raw))
        # the per-read call, by the hand-written binding (csrc/pyfeed.c)
        self._feed = Feed(_FEED_ADDRESS, int(ffi.cast("uintptr_t", st)),
                          int(ffi.cast("uintptr_t", text)), (st, self._areas)).feed
        self._closed = False
        self._item_id: str | None = None  # of the last one-delta read

    @property
    def retry(self) -> int | None:
        """The last valid SSE `retry` value in milliseconds, if any."""
        value = lib.ha_stream_retry(self._st)
        return None if value < 0 else value

    def feed(self, data: bytes) -> list:
        """Decode one network read of any size, split anywhere."""
        if self._closed:
            raise StreamClosedError("feed() after close()")
        if type(data) is not bytes:
            data = bytes(data)
        n = self._feed(data, NO_PACKED_CODE)
        if n < 0:
            # The usual read of a stream that keeps up: one plain delta, all
            # the call's text, told by the return value. One decode, one
            # object; no unpack, no record loop.
            n = ~n
            text = self._text[0:n >> _PACKED_TEXT_SHIFT].decode()  # UTF-8, no name to look up
            return [_PACKED[n & _PACKED_KIND](n >> _PACKED_KIND_BITS & _PACKED_INDEX, text)]
        return self._unpacked(n, data)

    def _unpacked(self, n: int, data: bytes) -> list:
        """The events of a call that returned n records (not packed): the
        rest of feed(), and of a provider decoder's short way that found
        another delta than the one it continues."""
        if n == 1:
            # One delta of another shape (a tool call's arguments, an item's
            # piece), whose strings are then all the call's text. One
            # unpack, one decode, one object.
            text_len, full, kind, index, sub, s2 = _ONE.unpack_from(self._recs)
            delta = _PLAIN_DELTAS.get(kind)
            if (delta is not None or kind == _TOOL_ARGS) and not full:
                text = self._text[0:text_len].decode()
                item_id = None
                if s2 >= 0:  # Responses: the item id, then the piece
                    s1, s1_end, s2_end = _ONE_SPANS.unpack_from(self._recs)
                    item_id = text[s2:s2_end]
                    if item_id == self._item_id:
                        item_id = self._item_id  # one str for all of an item's deltas
                    else:
                        self._item_id = item_id
                    text = text[s1:s1_end]
                if delta is None:
                    return [ToolArgsDelta(index, None if sub < 0 else sub, text, item_id)]
                return [delta(index, text, None if sub < 0 else sub, item_id)]
        out: list = []
        while True:
            _, text_len, used, full = _HEADER.unpack_from(self._recs)
            if n:
                self._unpack(n, text_len, out)
            if not full:
                return out
            data = data[used:]
            n = self._feed(data, NO_PACKED_CODE)
            if n < 0:  # packed: its one record is written too
                n = 1

    def close(self) -> list:
        """End of stream: a pending event, then Truncated if it was cut short."""
        if self._closed:
            return []
        self._closed = True
        out: list = []
        n = lib.ha_stream_close(self._st)
        if n:
            self._unpack(n, _HEADER.unpack_from(self._recs)[1], out)
        return out

    def _unpack(self, n: int, text_len: int, out: list) -> None:
        # bytes.decode of a buffer slice is the cheapest way to one str here
        text = self._text[0:text_len].decode() if text_len else ""
        append = out.append
        for w in _RECORD.iter_unpack(self._recs_view[_HDR_BYTES:_HDR_BYTES + n * _REC_BYTES]):
            kind = w[_KIND]
            # The common kinds first, inline: this loop is the Python hot path.
            if kind == _TEXT:
                sub, s2 = w[_SUB], w[_S2]
                append(TextDelta(w[_INDEX], text[w[_S1]:w[_S1_END]], None if sub < 0 else sub,
                                 None if s2 < 0 else text[s2:w[_S2_END]]))
            elif kind == _TOOL_ARGS:
                sub, s2 = w[_SUB], w[_S2]
                append(ToolArgsDelta(w[_INDEX], None if sub < 0 else sub,
                                     text[w[_S1]:w[_S1_END]],
                                     None if s2 < 0 else text[s2:w[_S2_END]]))
            elif kind == _REASONING:
                sub, s2 = w[_SUB], w[_S2]
                append(ReasoningDelta(w[_INDEX], text[w[_S1]:w[_S1_END]],
                                      None if sub < 0 else sub,
                                      None if s2 < 0 else text[s2:w[_S2_END]]))
            elif kind == _SSE_EVENT:
                append(SSEEvent(text[w[_S1]:w[_S1_END]], bytes(self._raw[w[_RAW]:w[_RAW_END]]),
                                text[w[_S2]:w[_S2_END]] if w[_CODE] else None))
            else:
                append(_RARE.get(kind, _unknown)(w, text, self._raw))


def _span(w: tuple, text: str, start: int) -> str | None:
    """The string span of a record that begins at word start."""
    return None if w[start] < 0 else text[w[start]:w[start + 1]]


def _opt(w: tuple, word: int) -> int | None:
    return None if w[word] < 0 else w[word]


def _raw_bytes(w: tuple, raw: memoryview) -> bytes | None:
    return None if w[_RAW] < 0 else bytes(raw[w[_RAW]:w[_RAW_END]])


# The records other than the common deltas, one builder each, found by
# kind in one dict lookup. Those that end every answer (finish, usage,
# timings, end) and a tool call's head test their optional words inline:
# a helper call per word cost more than the object it fills.
_usage_words = operator.itemgetter(*_USAGE_WORDS)
_timing_words = operator.itemgetter(*_TIMING_WORDS)


def _finish(w, text, raw):
    index, s1, s2 = w[_INDEX], w[_S1], w[_S2]
    return Finish(None if index < 0 else index, _FINISH[w[_SUB]],
                  None if s1 < 0 else text[s1:w[_S1_END]],
                  None if s2 < 0 else text[s2:w[_S2_END]])


def _usage(w, text, raw):
    i, o, t, cr, cw, r = _usage_words(w)
    return Usage(None if i < 0 else i, None if o < 0 else o, None if t < 0 else t,
                 None if cr < 0 else cr, None if cw < 0 else cw, None if r < 0 else r)


def _timings(w, text, raw):
    total, load, prompt, ev = _timing_words(w)
    return Timings(None if total < 0 else total, None if load < 0 else load,
                   None if prompt < 0 else prompt, None if ev < 0 else ev)


def _tool_start(w, text, raw):
    sub, s1, s2, s3 = w[_SUB], w[_S1], w[_S2], w[_S3]
    return ToolCallStart(w[_INDEX], None if sub < 0 else sub,
                         None if s1 < 0 else text[s1:w[_S1_END]],
                         None if s2 < 0 else text[s2:w[_S2_END]],
                         None if s3 < 0 else text[s3:w[_S3_END]])


def _block_start(w, text, raw):
    unknown = w[_CODE] == 1
    return BlockStart(w[_INDEX], _ITEM_KINDS[w[_SUB]], _span(w, text, _S1),
                      _span(w, text, _S2), None if unknown else _span(w, text, _S3),
                      _span(w, text, _S3) if unknown else None, _raw_bytes(w, raw))


def _tail(w, text, raw):
    flags = w[_CODE]
    return Truncated(bool(flags & lib.HA_SSE_TAIL_UNTERMINATED_EVENT),
                     bool(flags & lib.HA_SSE_TAIL_PARTIAL_LINE),
                     bool(flags & lib.HA_SSE_TAIL_INCOMPLETE_UTF8),
                     w[_INDEX])


def _unknown(w, text, raw):
    raise AssertionError(f"stream core wrote an unknown record kind {w[_KIND]}")


_RARE = {
    _FINISH_REC: _finish,
    _USAGE_REC: _usage,
    _TIMINGS_REC: _timings,
    _END_REC: lambda w, text, raw: StreamEnd(_END_SENTINELS[w[_CODE]]),
    _META_REC: lambda w, text, raw: Meta(_span(w, text, _S1), _span(w, text, _S2)),
    _TOOL_START_REC: _tool_start,
    lib.HA_REC_REFUSAL: lambda w, text, raw: RefusalDelta(
        w[_INDEX], _span(w, text, _S1), _opt(w, _SUB), _span(w, text, _S2)),
    lib.HA_REC_SIGNATURE: lambda w, text, raw: SignatureDelta(w[_INDEX], _span(w, text, _S1)),
    lib.HA_REC_BLOCK_START: _block_start,
    lib.HA_REC_BLOCK_STOP: lambda w, text, raw: BlockStop(
        w[_INDEX], _ITEM_KINDS.get(w[_SUB]), _span(w, text, _S1), _span(w, text, _S2),
        _span(w, text, _S3), _raw_bytes(w, raw)),
    lib.HA_REC_CITATION: lambda w, text, raw: Citation(w[_INDEX], _raw_bytes(w, raw)),
    lib.HA_REC_ERROR: lambda w, text, raw: ProviderError(
        _span(w, text, _S1), _span(w, text, _S2), _raw_bytes(w, raw)),
    lib.HA_REC_WARNING: lambda w, text, raw: DecodeWarning(
        _WARNINGS[w[_CODE]], _span(w, text, _S1), _raw_bytes(w, raw),
        None if w[_SUB] < 0 else _JSON_STATUS[w[_SUB]], _opt(w, _INDEX)),
    lib.HA_REC_FRAMING_ERROR: lambda w, text, raw: FramingError(
        _FRAMING[w[_CODE]], w[_INDEX], _span(w, text, _S1)),
    lib.HA_REC_TAIL: _tail,
    lib.HA_REC_UNKNOWN_FIELD: lambda w, text, raw: UnknownField(
        _span(w, text, _S1), _raw_bytes(w, raw) or b"", w[_INDEX]),
}
