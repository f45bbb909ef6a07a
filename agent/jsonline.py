"""One compact JSON line, for every wire that sends JSON text: the socket
API's replies and requests (agent/api/), the MQTT payloads (agent/mqtt/).

UTF-8 as is; a string holding a lone surrogate (which UTF-8 cannot carry)
makes the whole line ASCII with \\u escapes, so what leaves is always valid.
NaN and Infinity are refused (allow_nan=False): the masking edge has made
them null before anything reaches here.
"""

from __future__ import annotations

import json
from typing import Any

_UTF8 = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_ASCII = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def dump_utf8(value: Any) -> bytes:
    """value as compact JSON in UTF-8; UnicodeEncodeError for a lone surrogate."""
    return _UTF8.encode(value).encode("utf-8")


def dump_line(value: Any) -> bytes:
    """value as one JSON line, with its b"\\n"."""
    try:
        return dump_utf8(value) + b"\n"
    except UnicodeEncodeError:
        return _ASCII.encode(value).encode("ascii") + b"\n"
