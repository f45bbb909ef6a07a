"""The socket API's line protocol, sans-IO (docs/protocol.md is its reference).

One JSON object per line each way. agent.lines frames the bytes of reads into
lines without decoding anything; parse_request turns one line into a Request
or a RequestError that names what was wrong; encode turns a reply into its
line. The server (agent/api/server.py) does the I/O around these.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent.jsontypes import is_type
from agent.stream.jsonscan import FLAG_BAD_UTF8, FLAG_LONE_SURROGATE, JSONError, loads_flagged

PROTOCOL_VERSION = 1
DEFAULT_MAX_LINE = 64 * 1024
MAX_ID_LENGTH = 128


# ---- requests ----

@dataclass(frozen=True, slots=True)
class Request:
    id: str | int
    op: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RequestError:
    """A line that is not a valid request. id is the request's when it could be read."""
    code: str
    message: str
    id: str | int | None = None


# Each operation's fields: name -> (types, required). bool is not an int here.
_OPERATIONS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "ask": {"prompt": ((str,), True), "session": ((str,), False),
            "provider": ((str,), False), "stream": ((bool,), False),
            "reasoning": ((bool,), False)},
    "cancel": {"target": ((str, int), True)},
    "status": {},
    "subscribe": {"reasoning": ((bool,), False)},
    "sessions": {},
    "history": {"session": ((str,), True)},
    "forget": {"session": ((str,), True)},
}
OPERATIONS = tuple(_OPERATIONS)
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false"}


def parse_request(line: bytes) -> Request | RequestError:
    try:
        value, flags = loads_flagged(line)
    except JSONError as exc:
        return RequestError("invalid_json", str(exc))
    if flags & FLAG_BAD_UTF8:
        return RequestError("invalid_utf8", "the line is not valid UTF-8")
    if flags & FLAG_LONE_SURROGATE:
        return RequestError("invalid_utf8", "a string escapes a lone UTF-16 surrogate")
    if not isinstance(value, dict):
        return RequestError("not_an_object", "a request is a JSON object")
    request_id = value.get("id")
    if request_id is None:
        return RequestError("missing_field", "missing field: id")
    if not _is_id(request_id):
        return RequestError("bad_field", f"id must be a string of at most {MAX_ID_LENGTH} "
                            "characters or an integer")
    op = value.get("op")
    if op is None:
        return RequestError("missing_field", "missing field: op", request_id)
    if not isinstance(op, str) or op not in _OPERATIONS:
        return RequestError("unknown_op", f"unknown op {_shown(op)}; known: "
                            f"{', '.join(OPERATIONS)}", request_id)
    fields = _OPERATIONS[op]
    args: dict[str, Any] = {}
    for name, raw in value.items():
        if name in ("id", "op"):
            continue
        if name not in fields:
            known = ", ".join(fields) or "none"
            return RequestError("unknown_field", f"{op}: unknown field {name!r}; known: {known}",
                                request_id)
        types, _ = fields[name]
        if not is_type(raw, types):
            return RequestError("bad_field", f"{op}: {name} must be "
                                f"{' or '.join(_TYPE_NAMES[t] for t in types)}", request_id)
        args[name] = raw
    for name, (_, required) in fields.items():
        if required and name not in args:
            return RequestError("missing_field", f"{op}: missing field: {name}", request_id)
    if op == "ask" and not args["prompt"].strip():
        return RequestError("bad_field", "ask: prompt is empty", request_id)
    if op == "cancel" and not _is_id(args["target"]):
        return RequestError("bad_field", "cancel: target is not a request id", request_id)
    return Request(request_id, op, args)


def _is_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return 0 < len(value) <= MAX_ID_LENGTH
    return isinstance(value, int) and -2 ** 63 <= value < 2 ** 63


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


# ---- replies ----

def encode(reply: dict[str, Any]) -> bytes:
    """One reply line. UTF-8 as is; a string holding a lone surrogate (which
    UTF-8 cannot carry) makes the whole line ASCII with \\u escapes instead."""
    try:
        return (json.dumps(reply, ensure_ascii=False, separators=(",", ":"))
                .encode("utf-8") + b"\n")
    except UnicodeEncodeError:
        return json.dumps(reply, separators=(",", ":")).encode("ascii") + b"\n"


def error(code: str, message: str, request_id: str | int | None = None,
          **extra: Any) -> dict[str, Any]:
    return {"id": request_id, "type": "error", "code": code, "message": message, **extra}


def internal_error(what: str, request_id: str | int | None = None) -> dict[str, Any]:
    """A bug in the daemon, costing one request or ask: the log has the rest."""
    return error("internal_error", f"the daemon failed on this {what}; its log has the "
                 "details", request_id)


def hello(server: str, max_line: int, capabilities: list[str]) -> dict[str, Any]:
    return {"type": "hello", "protocol": PROTOCOL_VERSION, "server": server,
            "operations": list(OPERATIONS), "capabilities": capabilities,
            "max_line_bytes": max_line}
