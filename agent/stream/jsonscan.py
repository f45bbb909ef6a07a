"""Strict JSON to Python objects through the C scanner (csrc/json.h).

For whole documents outside the per-chunk hot path, such as a tool call's
complete arguments. The rules are the scanner's: RFC 8259 exactly, a depth
limit, invalid UTF-8 and lone surrogate escapes in strings replaced by U+FFFD
and flagged, duplicate keys resolved to the last. Integers outside int64 are
still exact Python ints; a float that overflows a double is a RANGE error.
"""

from __future__ import annotations

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


def loads_flagged(data: bytes, max_depth: int = MAX_DEPTH) -> tuple[Any, int]:
    """Parse one document; also return its FLAG_* bits (replacements made)."""
    if not isinstance(data, bytes):
        data = bytes(data)
    root = ffi.new("ha_json_val *")
    offset = ffi.new("size_t *")
    flags = ffi.new("unsigned *")
    status = lib.ha_json_parse(data, len(data), max_depth, root, offset, flags)
    if status != lib.HA_JSON_OK:
        return _raise(status, offset[0])
    builder = _Builder(data)
    return builder.value(root[0]), flags[0] & (FLAG_BAD_UTF8 | FLAG_LONE_SURROGATE)


def _raise(status: int, offset: int | None = None):
    raise JSONError(JSONStatus(status), offset)


class _Builder:
    """Python objects from an accepted document, walked with an explicit
    stack: nesting as deep as the scanner allows costs no recursion."""

    __slots__ = ("doc", "key", "val", "out", "out_len", "i64", "f64", "flags")

    def __init__(self, doc: bytes) -> None:
        self.doc = doc
        self.key = ffi.new("ha_json_val *")
        self.val = ffi.new("ha_json_val *")
        self.out = ffi.new("uint8_t[]", 64)
        self.out_len = ffi.new("size_t *")
        self.i64 = ffi.new("int64_t *")
        self.f64 = ffi.new("double *")
        self.flags = ffi.new("unsigned *")

    def value(self, v) -> Any:
        if v.kind != _OBJECT and v.kind != _ARRAY:
            return self.scalar(v)
        root = {} if v.kind == _OBJECT else []
        stack = [(root, self.iterator(v))]
        key, val = self.key, self.val
        while stack:
            container, it = stack[-1]
            if type(container) is dict:
                if not lib.ha_json_obj_next(it, key, val):
                    stack.pop()
                    continue
                name = self.string(key[0])
            elif not lib.ha_json_arr_next(it, val):
                stack.pop()
                continue
            kind = val.kind
            if kind == _OBJECT or kind == _ARRAY:
                child = {} if kind == _OBJECT else []
                stack.append((child, self.iterator(val[0])))
            else:
                child = self.scalar(val[0])
            if type(container) is dict:
                container[name] = child  # a duplicate key: the last wins
            else:
                container.append(child)
        return root

    def iterator(self, v):
        it = ffi.new("ha_json_iter *")
        lib.ha_json_iter_init(it, self.doc, v)
        return it

    def scalar(self, v) -> Any:
        kind = v.kind
        if kind == _STRING:
            return self.string(v)
        if kind == _NUMBER:
            return self.number(v)
        if kind == _NULL:
            return None
        if kind == _TRUE:
            return True
        if kind == _FALSE:
            return False
        raise AssertionError(f"scanner gave an unknown kind {kind}")

    def string(self, v) -> str:
        need = lib.ha_json_str_max(v)
        if len(self.out) < need:
            self.out = ffi.new("uint8_t[]", need)
        status = lib.ha_json_str_decode(self.doc, v, self.out, len(self.out),
                                        self.out_len, self.flags)
        if status != lib.HA_JSON_OK:
            _raise(status, v.start)
        return ffi.buffer(self.out, self.out_len[0])[:].decode("utf-8")

    def number(self, v) -> int | float:
        status = lib.ha_json_get_i64(self.doc, v, self.i64)
        if status == lib.HA_JSON_OK:
            return self.i64[0]
        if status == lib.HA_JSON_ERR_RANGE:
            # an exact integer beyond int64; through Decimal, which has no
            # limit on digits (int(str) stops at 4300)
            return int(Decimal(self.doc[v.start:v.end].decode("ascii")))
        status = lib.ha_json_get_f64(self.doc, v, self.f64)
        if status != lib.HA_JSON_OK:
            _raise(status, v.start)
        return self.f64[0]
