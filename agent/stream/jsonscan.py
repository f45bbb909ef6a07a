"""Strict JSON to Python objects through the C scanner (csrc/json.h).

For whole documents outside the per-chunk hot path, such as a tool call's
complete arguments. The rules are the scanner's: RFC 8259 exactly, a depth
limit, invalid UTF-8 and lone surrogate escapes in strings replaced by U+FFFD
and flagged, duplicate keys resolved to the last. Integers outside int64 are
still exact Python ints; a float that overflows a double is a RANGE error.

Most documents (a socket request, a tool call's arguments, a stored
history) are valid UTF-8 with no lone surrogate and no number beyond what
int() and a double take: those the scanner checks and the standard
library's C decoder builds, which reads such a document exactly as the
rules above do, in about a third of the time the value-by-value build
takes. Everything else is built from the scanner's own values.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

from agent.stream._binding import ffi, lib
from agent.stream.records import JSONStatus

MAX_DEPTH = lib.HA_JSON_MAX_DEPTH
FLAG_BAD_UTF8 = lib.HA_JSON_FLAG_BAD_UTF8
FLAG_LONE_SURROGATE = lib.HA_JSON_FLAG_LONE_SURROGATE

_NULL, _FALSE, _TRUE = lib.HA_JSON_NULL, lib.HA_JSON_FALSE, lib.HA_JSON_TRUE
_NUMBER, _STRING = lib.HA_JSON_NUMBER, lib.HA_JSON_STRING
_ARRAY, _OBJECT = lib.HA_JSON_ARRAY, lib.HA_JSON_OBJECT
_FLAT, _FLAT_INT, _FLAT_F64 = lib.HA_JSON_FLAT_WORDS, lib.HA_JSON_FLAT_INT, lib.HA_JSON_FLAT_F64
_LITERALS = {_NULL: None, _TRUE: True, _FALSE: False}
_GUESS_VALUES = 256  # words for this many values cover most documents in one call
# output space: C writes before Python reads
_unzeroed = ffi.new_allocator(should_clear_after_alloc=False)


class JSONError(ValueError):
    """A document the strict scanner refused, with the reason and where."""

    def __init__(self, status: JSONStatus, offset: int | None = None) -> None:
        where = "" if offset is None else f" at byte {offset}"
        super().__init__(f"invalid JSON: {status.name.lower()}{where}")
        self.status = status
        self.offset = offset


def loads(data: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """Parse one strict JSON document; raises JSONError."""
    return loads_flagged(data, max_depth)[0]


class _NotPlain(Exception):
    """A float the standard decoder would make inf: the scanner's RANGE."""


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NotPlain
    return value


def _no_constant(name: str):
    raise _NotPlain  # NaN, Infinity: never JSON, whatever loads_checked is given


# The standard decoder's C scanner itself, called at the value's first byte:
# decode() would find the value's bounds again with two regular expressions,
# where the C scanner has already checked that the document is one value
# between whitespace.
_SCAN = json.JSONDecoder(parse_float=_finite, parse_constant=_no_constant).scan_once
_WS = " \t\n\r"  # JSON's whitespace, around a document
_UNREAD = object()


def _standard(text: str) -> Any:
    """The standard scanner's value of a document that is already known to
    be JSON, or _UNREAD when it cannot read it as the rules say: a float
    past a double, an int past int()'s digits, a deep nest."""
    try:
        return _SCAN(text, len(text) - len(text.lstrip(_WS)))[0]
    except (_NotPlain, ValueError, RecursionError):
        return _UNREAD


def loads_flagged(data: bytes, max_depth: int = MAX_DEPTH) -> tuple[Any, int]:
    """Parse one document; also return its FLAG_* bits (replacements made)."""
    if not isinstance(data, bytes):
        data = bytes(data)
    offset = ffi.new("size_t *")
    flags = ffi.new("unsigned *")
    status = lib.ha_json_parse(data, len(data), max_depth, ffi.NULL, offset, flags)
    if status != lib.HA_JSON_OK:
        return _raise(status, offset[0])
    if not flags[0] & (FLAG_BAD_UTF8 | FLAG_LONE_SURROGATE):
        value = _standard(data.decode())
        if value is not _UNREAD:
            return value, 0
    return built(data, max_depth)


def loads_checked(text: str) -> Any:
    """loads() of a document the C scanner has already accepted as part of
    a larger one (an Ollama call's arguments, copied from a line the stream
    core parsed strictly), without checking it again: the standard decoder's
    scanner builds it. A \\u escape (a lone surrogate is the scanner's to
    replace) or a number past a double or int() takes loads() instead."""
    if "\\u" not in text:
        value = _standard(text)
        if value is not _UNREAD:
            return value
    return loads(text.encode())


def built(data: bytes, max_depth: int = MAX_DEPTH) -> tuple[Any, int]:
    """loads_flagged() with every value built from the scanner's own: the
    way of the documents the standard decoder cannot read as the rules say."""
    n = len(data)
    out = ffi.new("size_t[3]")  # values, text bytes, error offset
    flags = ffi.new("unsigned *")
    # One C call writes every value (ha_json_flatten); a first guess at
    # their number, the exact one when it was short.
    values = min(n // 2 + 2, _GUESS_VALUES)
    text = _unzeroed("uint8_t[]", 3 * n + 1)
    while True:
        words = _unzeroed("int64_t[]", values * _FLAT)
        status = lib.ha_json_flatten(data, n, max_depth, words, values * _FLAT, out, text,
                                     len(text), out + 1, out + 2, flags)
        if status != lib.HA_JSON_ERR_SPACE:
            break
        values = out[0]
    if status != lib.HA_JSON_OK:
        return _raise(status, out[2])
    value = _build(ffi.unpack(words, out[0] * _FLAT), str(ffi.buffer(text, out[1]), "utf-8"),
                   data, words)
    return value, flags[0] & (FLAG_BAD_UTF8 | FLAG_LONE_SURROGATE)


def _build(w: list, text: str, doc: bytes, words, _str=_STRING, _obj=_OBJECT, _arr=_ARRAY,
           _num=_NUMBER, _int=_FLAT_INT, _f64=_FLAT_F64) -> Any:
    """Python objects from ha_json_flatten's values (postorder), on a stack:
    a container takes the values just before it. Nesting as deep as the
    scanner allows costs no recursion."""
    stack: list = []
    push = stack.append
    i = 0
    for kind, a, b, form in zip(*[iter(w)] * _FLAT):
        if kind == _str:
            push(text[a:b])
        elif kind == _obj:
            if a:
                pairs = iter(stack[-2 * a:])
                del stack[-2 * a:]
                push(dict(zip(pairs, pairs)))  # a duplicate key: the last wins
            else:
                push({})
        elif kind == _arr:
            if a:
                items = stack[-a:]
                del stack[-a:]
                push(items)
            else:
                push([])
        elif kind == _num:
            if form == _int:
                push(a)
            elif form == _f64:
                push(ffi.cast("double *", words + i + 1)[0])
            else:
                # an exact integer beyond int64; through Decimal, which has
                # no limit on digits (int(str) stops at 4300)
                push(int(Decimal(doc[a:b].decode("ascii"))))
        else:
            push(_LITERALS[kind])
        i += _FLAT
    return stack[0]


def _raise(status: int, offset: int | None = None):
    raise JSONError(JSONStatus(status), offset)
