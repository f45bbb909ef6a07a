"""Pure-Python reference decoders, used ONLY by the tests as oracles.

Nothing in the package imports this module. Both decoders are written the
obvious way (hold the bytes, split them, look at them with Python's own
tools) so that they share no structure with the C core they check:

- RefSSE: the WHATWG "event stream interpretation" (HTML Living Standard,
  server-sent events, 9.2.6) over bytes, plus the named outcomes of
  csrc/sse.h, producing the same event objects as
  StreamDecoder(Protocol.SSE).
- ref_loads: strict RFC 8259 JSON on top of Python's json module, with the
  rules of csrc/json.h, returning what agent.stream.loads_flagged returns.
"""

from __future__ import annotations

import json
import math
import re
import sys
from functools import lru_cache
from typing import Any

from agent.stream.records import (
    DecodeWarning,
    FramingError,
    FramingErrorCode,
    JSONStatus,
    SSEEvent,
    Truncated,
    UnknownField,
    WarningCode,
)

# ---------------------------------------------------------------------------
# SSE
# ---------------------------------------------------------------------------

# Limits from csrc/sse.h.
NAME_MAX = 128      # HA_SSE_NAME_MAX: longest `event` value kept
ID_MAX = 256        # HA_SSE_ID_MAX: longest `id` value kept
FIELD_MAX = 32      # HA_SSE_FIELD_MAX: longest unknown field name reported
PREVIEW_MAX = 256   # HA_SSE_PREVIEW_MAX: bytes of an unknown value reported
DEFAULT_CAPACITY = 64 * 1024

BOM = b"\xef\xbb\xbf"
_EOL = re.compile(rb"[\r\n]")
_INT64_MAX = 2**63 - 1


@lru_cache(maxsize=1)
def _utf8_proper_prefixes() -> frozenset[bytes]:
    """Every proper, non-empty prefix of the UTF-8 encoding of a Unicode scalar
    value. A prefix of length L-1 depends only on the code point without its
    last 6 bits, so one code point per aligned block of 64 is enough (the
    encoding-length boundaries and the surrogate range are 64-aligned)."""
    out = set()
    for cp in range(0x80, 0x110000, 64):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        enc = chr(cp).encode("utf-8")
        for k in range(1, len(enc)):
            out.add(enc[:k])
    return frozenset(out)


def ends_in_unfinished_utf8(stream_tail: bytes) -> bool:
    """sse.h HA_SSE_TAIL_INCOMPLETE_UTF8: "the last bytes start a UTF-8
    sequence that never finished", i.e. some suffix of the stream is a proper
    prefix of a valid character (invalid leads, overlongs, surrogates and
    beyond-U+10FFFF second bytes are not prefixes of anything: sse.c
    utf8_unfinished). Python's incremental decoder is NOT used as the oracle:
    it keeps b"\\xed\\xa0" pending although no character starts that way."""
    prefixes = _utf8_proper_prefixes()
    return any(stream_tail[-k:] in prefixes
               for k in range(1, min(3, len(stream_tail)) + 1))


def _text(b: bytes) -> tuple[str, bool]:
    """Bytes to str the way ha_utf8_sanitize does (json.h: "exactly as
    Python's bytes.decode("utf-8", "replace")"), and whether anything was
    replaced (a U+FFFD already in the input is not a replacement)."""
    s = b.decode("utf-8", "replace")
    replaced = False
    if "\ufffd" in s:
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            replaced = True
    return s, replaced


class RefSSE:
    """Reference SSE framer over bytes.

    feed(read) returns what became known during that read, close() what the
    end of the stream reveals; both in the event classes of
    agent.stream.records, so a result compares with == against
    StreamDecoder(Protocol.SSE, buffer_size=capacity).
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self.retry: int | None = None      # last valid retry, ms
        self._buf = bytearray()            # bytes of lines not yet complete
        self._scanned = 0                  # _buf[:_scanned] holds no CR / LF
        self._bom_decided = False          # the leading BOM question is settled
        self._after_cr = False             # the last line ended in CR
        self._tail = b""                   # last 3 bytes of the stream
        # the event being built (WHATWG: data buffer, event type buffer)
        self._data: list[bytes] | None = None   # None: no data field yet
        self._data_size = 0                # len(b"\n".join(self._data))
        self._name = b""
        self._skipping = False             # sse.h: too large / name too long
        # WHATWG: the last event ID buffer persists across events
        self._id = b""
        self._has_id = False
        self._closed = False

    # -- input ---------------------------------------------------------------

    def feed(self, data: bytes) -> list:
        assert not self._closed
        out: list = []
        self._tail = (self._tail + data)[-3:]
        self._buf += data
        if not self._bom_decided:
            # WHATWG decodes the stream with "UTF-8 decode", which strips one
            # leading BOM. Undecided while what we hold is a BOM prefix.
            if len(self._buf) < 3 and BOM.startswith(self._buf):
                return out
            if self._buf.startswith(BOM):
                del self._buf[:3]
            self._bom_decided = True
        pos = 0
        buf = self._buf
        while True:
            if self._after_cr and pos < len(buf):
                # a CR ended the last line, maybe in the previous read: an LF
                # right after it is the second half of a CRLF pair
                self._after_cr = False
                if buf[pos] == 0x0A:
                    pos += 1
                    continue
            m = _EOL.search(buf, max(pos, self._scanned))
            if m is None:
                break
            end = m.start()
            line = bytes(buf[pos:end])
            if buf[end] == 0x0D:
                self._after_cr = True
            pos = end + 1
            self._scanned = pos
            self._line(line, out)
        del buf[:pos]
        self._scanned = len(buf)
        return out

    # -- one complete line ----------------------------------------------------

    def _reset_event(self) -> None:
        self._data = None
        self._data_size = 0
        self._name = b""

    def _line(self, line: bytes, out: list) -> None:
        if not line:
            self._blank(out)
            return
        if self._skipping:
            # sse.h: "the rest of that event is skipped up to its blank
            # line" - every field of it, id and retry included (sse.c:
            # ST_LINE goes to ST_IGNORE while skipping).
            return
        if line[:1] == b":":
            return  # WHATWG: a comment
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]  # WHATWG: exactly one leading space removed
        if name == b"data":
            if self._data is None:
                self._data = [value]
                self._data_size = len(value)
            else:
                self._data.append(value)
                self._data_size += 1 + len(value)  # the joining LF counts
            if self._data_size > self.capacity:
                # sse.h: EVENT_TOO_LARGE "at the end of the line that no
                # longer fits"; size = the event's data length, joining LFs
                # included, at the end of that line. Skip to the blank line.
                out.append(FramingError(FramingErrorCode.EVENT_TOO_LARGE, self._data_size))
                self._reset_event()
                self._skipping = True
        elif name == b"event":
            if len(value) > NAME_MAX:
                # sse.h: NAME_TOO_LONG, size = value length, event skipped
                out.append(FramingError(FramingErrorCode.NAME_TOO_LONG, len(value)))
                self._reset_event()
                self._skipping = True
            else:
                self._name = value
        elif name == b"id":
            if len(value) > ID_MAX:
                # sse.h: ID_TOO_LONG, the field ignored, the event goes on
                out.append(FramingError(FramingErrorCode.ID_TOO_LONG, len(value)))
            elif b"\x00" not in value:
                # WHATWG: an id containing NUL is ignored (silently)
                self._id = value
                self._has_id = True
        elif name == b"retry" and value.isdigit() and int(value) <= _INT64_MAX:
            # WHATWG: only ASCII digits (bytes.isdigit is ASCII only). sse.c:
            # an empty value and one overflowing int64 are invalid too.
            self.retry = int(value)
        else:
            # sse.h: any other field, and an invalid retry: UNKNOWN_FIELD with
            # the first FIELD_MAX bytes of the name, the first PREVIEW_MAX of
            # the value and the value's full length.
            shown, bad_name = _text(name[:FIELD_MAX])
            out.append(UnknownField(shown, value[:PREVIEW_MAX], len(value)))
            if bad_name:
                # extract.c: the replacement in a field name is reported too
                out.append(DecodeWarning(WarningCode.REPLACED_UTF8, "field name",
                                         value[:PREVIEW_MAX]))

    def _blank(self, out: list) -> None:
        # WHATWG dispatch: nothing when the data buffer is empty (no data
        # field); the event type is reset either way; a skipped event ends.
        if self._skipping or self._data is None:
            self._skipping = False
            self._reset_event()
            return
        data = b"\n".join(self._data)
        name, bad_name = _text(self._name)
        ident, bad_id = _text(self._id)
        out.append(SSEEvent(name, data, ident if self._has_id else None))
        if bad_name or bad_id:
            # extract.c sse_record: names and ids are made valid UTF-8 and
            # the replacement is reported for that event.
            out.append(DecodeWarning(WarningCode.REPLACED_UTF8, "event name or id", data))
        self._reset_event()

    # -- end of stream --------------------------------------------------------

    def close(self) -> list:
        if self._closed:
            return []
        self._closed = True
        partial = bytes(self._buf)          # a line the stream cut short
        pending_size = self._data_size
        has_data = self._data is not None
        if partial and not self._skipping and partial[:1] != b":":
            name, colon, value = partial.partition(b":")
            if colon and name == b"data":
                # sse.c ha_sse_finish: "a data line in progress counts as
                # undelivered data; a line still in its field name does not
                # (it is not known to be data yet)".
                if value[:1] == b" ":
                    value = value[1:]
                pending_size = (pending_size + 1 + len(value)) if has_data else len(value)
                has_data = True
        unterminated = has_data
        incomplete = ends_in_unfinished_utf8(self._tail)
        if unterminated or partial or incomplete:
            return [Truncated(unterminated, bool(partial), incomplete,
                              pending_size if unterminated else 0)]
        return []


def ref_sse_decode(reads, capacity: int = DEFAULT_CAPACITY) -> list:
    """Every event of a stream given as a sequence of reads, close included."""
    ref = RefSSE(capacity)
    out: list = []
    for r in reads:
        out += ref.feed(r)
    out += ref.close()
    return out


# ---------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------

# Limits from csrc/json.h.
JSON_MAX_DEPTH = 64        # HA_JSON_MAX_DEPTH: what max_depth 0 means
JSON_DEPTH_LIMIT = 1024    # HA_JSON_DEPTH_LIMIT: larger max_depth is clamped
FLAG_BAD_UTF8 = 1          # HA_JSON_FLAG_BAD_UTF8
FLAG_LONE_SURROGATE = 2    # HA_JSON_FLAG_LONE_SURROGATE

_JSON_WS = " \t\n\r"       # RFC 8259 whitespace, the same as json's WHITESPACE
# json.scanner.NUMBER_RE is the RFC 8259 number grammar, but as a str pattern
# its \d also matches non-ASCII decimal digits ("1\u0663" would be 13): the
# same pattern compiled with re.ASCII.
_NUMBER_RE = re.compile(json.scanner.NUMBER_RE.pattern,
                        (json.scanner.NUMBER_RE.flags & ~re.UNICODE) | re.ASCII)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

# json.scanner.py_make_scanner, run with the ASCII-only number pattern: the
# same code object with the module's globals but NUMBER_RE swapped.
_py_make_scanner = type(json.scanner.py_make_scanner)(
    json.scanner.py_make_scanner.__code__,
    {**vars(json.scanner), "NUMBER_RE": _NUMBER_RE},
    "py_make_scanner",
)


class RefJSONError(Exception):
    """The reference refused a document; status is a JSONStatus."""

    def __init__(self, status: JSONStatus) -> None:
        super().__init__(status.name)
        self.status = status


class _Context:
    """What py_make_scanner reads off a JSONDecoder, with strict hooks."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.depth = 0
        self.overflow = False
        self.lone = False
        self.strict = True            # raw control characters rejected
        self.object_hook = None
        self.memo: dict = {}
        self.parse_object = self._object
        self.parse_array = self._array
        self.parse_string = self._string
        self.parse_int = self._int
        self.parse_float = self._float
        self.parse_constant = self._constant
        self.object_pairs_hook = self._pairs

    def fix(self, s: str) -> str:
        # json.h: a \u escape of an unpaired surrogate decodes to U+FFFD and
        # sets LONE_SURROGATE (json pairs valid escapes into one character).
        fixed, n = _LONE_SURROGATE.subn("\ufffd", s)
        if n:
            self.lone = True
        return fixed

    def _enter(self) -> None:
        # json.h: "Depth counts open containers: a scalar is depth 0, `[]`
        # depth 1 ... depth == max_depth is accepted, one more is
        # HA_JSON_ERR_DEPTH" - in scan order, at the bracket itself.
        self.depth += 1
        if self.depth > self.max_depth:
            raise RefJSONError(JSONStatus.DEPTH)

    def _array(self, s_and_end, scan_once):
        self._enter()
        try:
            return json.decoder.JSONArray(s_and_end, scan_once)
        finally:
            self.depth -= 1

    def _object(self, s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo):
        self._enter()
        try:
            return json.decoder.JSONObject(s_and_end, strict, scan_once, object_hook,
                                           object_pairs_hook, memo)
        finally:
            self.depth -= 1

    def _string(self, s, end, strict):
        value, end = json.decoder.scanstring(s, end, strict)
        return self.fix(value), end

    def _pairs(self, pairs):
        # json.h: duplicate keys are allowed, the last one wins - after the
        # keys are decoded (two lone surrogates both become U+FFFD).
        out = {}
        for k, v in pairs:
            out[self.fix(k)] = v
        return out

    @staticmethod
    def _int(s: str) -> int:
        # Integers outside int64 are exact Python ints (jsonscan.py), of any
        # length: CPython's 4300-digit str->int limit is lifted in ref_loads.
        return int(s)

    def _float(self, s: str) -> float:
        # json.h: any grammatical number is accepted by the scanner; a float
        # overflowing a double is RANGE only when extracted, i.e. after the
        # whole document was accepted (so "[1e999, x]" is SYNTAX). Underflow
        # rounds to zero or a subnormal, as float() does.
        f = float(s)
        if math.isinf(f):
            self.overflow = True
        return f

    @staticmethod
    def _constant(name: str):
        # json accepts NaN, Infinity and -Infinity; RFC 8259 does not.
        raise RefJSONError(JSONStatus.SYNTAX)


def _continues_number(num: str, c: str) -> bool:
    """After a complete top-level number `num`, does the byte `c` still
    belong to it? json.h: err_offset is "the first byte that cannot continue
    a valid document": a '.' or an exponent opening after "1" continues the
    number (which then fails: SYNTAX, not trailing data), after "1.5" or
    "1e5" it does not (TRAILING). A digit after a leading zero ("01") is the
    "no leading zeros" rule: SYNTAX."""
    if c in "0123456789":
        return True  # only reachable after "0" / "-0": \d* takes the rest
    return _NUMBER_RE.fullmatch(num + c + "0") is not None


def ref_loads(data: bytes, max_depth: int = JSON_MAX_DEPTH) -> tuple[Any, int]:
    """(value, flags) as agent.stream.loads_flagged returns them, or
    RefJSONError(status)."""
    if max_depth == 0:
        max_depth = JSON_MAX_DEPTH                 # json.h: 0 means the default
    max_depth = min(max_depth, JSON_DEPTH_LIMIT)   # json.h: clamped
    text = data.decode("utf-8", "replace")
    flags = 0
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        # json.h: invalid UTF-8 is replaced as decode("utf-8", "replace")
        # does and flagged; outside a string U+FFFD is a syntax error anyway.
        flags |= FLAG_BAD_UTF8
    if not text.strip(_JSON_WS):
        raise RefJSONError(JSONStatus.EMPTY)
    start = len(text) - len(text.lstrip(_JSON_WS))
    if text[start] == "\ufeff":
        raise RefJSONError(JSONStatus.SYNTAX)      # json.h: no BOM
    ctx = _Context(max_depth)
    scan_once = _py_make_scanner(ctx)
    old_digits = sys.get_int_max_str_digits()
    old_recursion = sys.getrecursionlimit()
    sys.set_int_max_str_digits(0)
    sys.setrecursionlimit(max(old_recursion, 8 * JSON_DEPTH_LIMIT + 1000))
    try:
        value, end = scan_once(text, start)
    except StopIteration:
        raise RefJSONError(JSONStatus.SYNTAX) from None   # "Expecting value"
    except json.JSONDecodeError:
        raise RefJSONError(JSONStatus.SYNTAX) from None
    except RecursionError:
        raise RefJSONError(JSONStatus.DEPTH) from None
    finally:
        sys.set_int_max_str_digits(old_digits)
        sys.setrecursionlimit(old_recursion)
    rest = len(text) - len(text[end:].lstrip(_JSON_WS))
    if rest != len(text):
        if rest == end and isinstance(value, (int, float)) and not isinstance(value, bool) \
                and _continues_number(text[start:end], text[end]):
            raise RefJSONError(JSONStatus.SYNTAX)
        raise RefJSONError(JSONStatus.TRAILING)
    if ctx.overflow:
        raise RefJSONError(JSONStatus.RANGE)
    if ctx.lone:
        flags |= FLAG_LONE_SURROGATE
    return value, flags
