"""The socket API's line protocol, sans-IO (docs/protocol.md is its reference).

One JSON object per line each way. agent.lines frames the bytes of reads into
lines without decoding anything; parse_request turns one line into a Request
or a RequestError that names what was wrong. The replies are the center's
(agent/core/replies.py), their lines wire.py; the server (server.py) does the I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent.core.replies import ErrorCode, RequestId
from agent.jsontypes import is_type
from agent.stream.jsonscan import FLAG_BAD_UTF8, FLAG_LONE_SURROGATE, JSONError, loads_flagged

DEFAULT_MAX_LINE = 64 * 1024
MAX_ID_LENGTH = 128


# ---- requests ----

@dataclass(frozen=True, slots=True)
class Request:
    id: RequestId
    op: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RequestError:
    """A line that is not a valid request. id is the request's when it could be read."""
    code: ErrorCode
    message: str
    id: RequestId | None = None


# Each operation's fields: name -> (types, required). bool is not an int here.
_OPERATIONS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "ask": {"prompt": ((str,), True), "session": ((str,), False),
            "provider": ((str,), False), "stream": ((bool,), False),
            "reasoning": ((bool,), False), "speak_on": ((str,), False)},
    "cancel": {"target": ((str, int), True)},
    "status": {},
    "subscribe": {"reasoning": ((bool,), False)},
    "sessions": {},
    "history": {"session": ((str,), True)},
    "forget": {"session": ((str,), True)},
    "announce": {"text": ((str,), True), "device": ((str,), False),
                 "board": ((str,), False)},
    "stop": {"session": ((str,), False), "mine": ((bool,), False)},
    "timers": {"cancel": ((str,), False)},
}
OPERATIONS = tuple(_OPERATIONS)
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false"}


def parse_request(line: bytes) -> Request | RequestError:
    try:
        value, flags = loads_flagged(line)
    except JSONError as exc:
        return RequestError(ErrorCode.INVALID_JSON, str(exc))
    if flags & FLAG_BAD_UTF8:
        return RequestError(ErrorCode.INVALID_UTF8, "the line is not valid UTF-8")
    if flags & FLAG_LONE_SURROGATE:
        return RequestError(ErrorCode.INVALID_UTF8, "a string escapes a lone UTF-16 surrogate")
    if not isinstance(value, dict):
        return RequestError(ErrorCode.NOT_AN_OBJECT, "a request is a JSON object")
    request_id = value.get("id")
    if request_id is None:
        return RequestError(ErrorCode.MISSING_FIELD, "missing field: id")
    if not _is_id(request_id):
        return RequestError(ErrorCode.BAD_FIELD, f"id must be a string of at most "
                            f"{MAX_ID_LENGTH} characters or an integer")
    op = value.get("op")
    if op is None:
        return RequestError(ErrorCode.MISSING_FIELD, "missing field: op", request_id)
    if not isinstance(op, str) or op not in _OPERATIONS:
        return RequestError(ErrorCode.UNKNOWN_OP, f"unknown op {_shown(op)}; known: "
                            f"{', '.join(OPERATIONS)}", request_id)
    fields = _OPERATIONS[op]
    args: dict[str, Any] = {}
    for name, raw in value.items():
        if name in ("id", "op"):
            continue
        if name not in fields:
            known = ", ".join(fields) or "none"
            return RequestError(ErrorCode.UNKNOWN_FIELD,
                                f"{op}: unknown field {name!r}; known: {known}", request_id)
        types, _ = fields[name]
        if not is_type(raw, types):
            return RequestError(ErrorCode.BAD_FIELD, f"{op}: {name} must be "
                                f"{' or '.join(_TYPE_NAMES[t] for t in types)}", request_id)
        args[name] = raw
    for name, (_, required) in fields.items():
        if required and name not in args:
            return RequestError(ErrorCode.MISSING_FIELD, f"{op}: missing field: {name}", request_id)
    if op == "ask" and not args["prompt"].strip():
        return RequestError(ErrorCode.BAD_FIELD, "ask: prompt is empty", request_id)
    if op == "cancel" and not _is_id(args["target"]):
        return RequestError(ErrorCode.BAD_FIELD, "cancel: target is not a request id", request_id)
    if op == "announce" and not args["text"].strip():
        return RequestError(ErrorCode.BAD_FIELD, "announce: text is empty", request_id)
    return Request(request_id, op, args)


def _is_id(value: Any) -> bool:
    if is_type(value, str):
        return 0 < len(value) <= MAX_ID_LENGTH
    return is_type(value, int) and -2 ** 63 <= value < 2 ** 63


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."
