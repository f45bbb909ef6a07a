"""The socket API's replies (docs/protocol.md), and the one encoder every
byte to a client or subscriber passes through.

One frozen class per reply type, as h11 has one per event; `encode()` turns a
reply into its line, with the id of the request it answers (or of the
subscription it is shown to) and, for subscribers, the ask it came from. The
same replies go to the devices (agent/devices/hub.py), as `fields()`.

Every line encode() makes has the configured secrets masked in each of its
strings (agent/masking.py) and a float JSON cannot hold (NaN, Infinity, as
a damaged session file may give) as null: what leaves is always JSON, and
never a key.

This module loads json, enum and agent.masking only: the blocking client
(client.py) uses it too, and must start without trio, httpx or the C core.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any, ClassVar, Mapping

from agent import masking

PROTOCOL_VERSION = 1

RequestId = str | int


class ErrorCode(enum.StrEnum):
    """Every `code` of an `error` reply, for bad requests and failed asks alike."""
    LINE_TOO_LONG = "line_too_long"
    INCOMPLETE_LINE = "incomplete_line"
    INVALID_JSON = "invalid_json"
    INVALID_UTF8 = "invalid_utf8"
    NOT_AN_OBJECT = "not_an_object"
    MISSING_FIELD = "missing_field"
    BAD_FIELD = "bad_field"
    UNKNOWN_OP = "unknown_op"
    UNKNOWN_FIELD = "unknown_field"
    DUPLICATE_ID = "duplicate_id"
    UNKNOWN_REQUEST = "unknown_request"
    UNKNOWN_PROVIDER = "unknown_provider"
    BAD_SESSION = "bad_session"
    UPSTREAM_HTTP = "upstream_http"
    UPSTREAM_UNAVAILABLE = "upstream_unavailable"
    PROVIDER_ERROR = "provider_error"
    INTERRUPTED = "interrupted"
    ANSWER_TOO_LARGE = "answer_too_large"
    CANCELLED = "cancelled"
    SHUTTING_DOWN = "shutting_down"
    NOT_A_STREAM = "not_a_stream"
    FORGOTTEN = "forgotten"
    STORAGE_ERROR = "storage_error"
    TOO_LARGE_TO_KEEP = "too_large_to_keep"
    OVERFLOW = "overflow"
    NOT_ALLOWED = "not_allowed"
    INTERNAL_ERROR = "internal_error"
    TOO_MANY_CONNECTIONS = "too_many_connections"
    PROVIDER_DISABLED = "provider_disabled"
    TOOLS_UNSUPPORTED = "tools_unsupported"
    STOPPED = "stopped"
    NOTHING_TO_STOP = "nothing_to_stop"
    UNKNOWN_DEVICE = "unknown_device"
    NOT_A_SPEECH_DEVICE = "not_a_speech_device"
    DEVICE_UNAVAILABLE = "device_unavailable"
    NO_SPEECH_DEVICE = "no_speech_device"
    TEXT_TOO_LONG = "text_too_long"
    UNKNOWN_BOARD = "unknown_board"
    BROKER_UNAVAILABLE = "broker_unavailable"


class Reply:
    """Base of the replies. `type` is the wire's "type"; fields() the rest."""
    __slots__ = ()
    type: ClassVar[str]
    _names: ClassVar[tuple[str, ...]]
    _omitted_when_none: ClassVar[frozenset[str]]

    def fields(self) -> dict[str, Any]:
        """The reply's own fields in wire order, without type, id and request."""
        fields = {name: getattr(self, name) for name in self._names}
        for name in self._omitted_when_none:
            if fields[name] is None:
                del fields[name]
        return fields


def _reply(type_name: str, omitted_when_none: tuple[str, ...] = ()):
    """A frozen, slotted reply class whose wire "type" is type_name; the
    fields named in omitted_when_none are left out, not null, when None."""
    def make(cls):
        cls = dataclasses.dataclass(frozen=True, slots=True)(cls)
        cls.type = type_name
        cls._names = tuple(f.name for f in dataclasses.fields(cls))
        cls._omitted_when_none = frozenset(omitted_when_none)
        return cls
    return make


# ---- the replies of an ask ----

@_reply("started")
class Started(Reply):
    session: str
    provider: str
    model: str


@_reply("failover", omitted_when_none=("status",))
class Failover(Reply):
    """The provider named in started (or the last failover) failed before
    any reply of its answer was sent; the ask goes to provider now. code,
    message and status are what its error would have been."""
    failed: str
    code: ErrorCode
    message: str
    provider: str
    model: str
    status: int | None = None


@_reply("delta")
class Delta(Reply):
    text: str

    def fields(self) -> dict[str, Any]:
        return {"text": self.text}  # the per-token path: no generic walk


@_reply("reasoning")
class Reasoning(Reply):
    text: str


@_reply("refusal")
class Refusal(Reply):
    text: str


@_reply("tool_call", omitted_when_none=("error",))
class ToolCall(Reply):
    call_id: str | None
    name: str | None
    arguments: Any          # the parsed object, or the raw string when it did not parse
    error: str | None = None


@_reply("tool_result")
class ToolResult(Reply):
    call_id: str | None
    name: str | None
    content: str
    is_error: bool


@_reply("warning")
class UpstreamWarning(Reply):
    code: str               # the stream core's warning code, lower case
    detail: str


@_reply("done", omitted_when_none=("dropped_events", "error"))
class Done(Reply):
    """dropped_events: upstream events lost, counted by warning code (a
    damaged answer); error: why the exchange was not kept (kept false)."""
    session: str
    finish_reason: str | None
    raw_finish_reason: str | None
    usage: Mapping[str, int] | None
    text: str
    steps: int
    attempts: int
    dropped_events: Mapping[str, int] | None = None
    kept: bool = True
    error: Mapping[str, str] | None = None


class _Absent:
    """An Error field the reply leaves out (None is a value: JSON null)."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


@dataclasses.dataclass(frozen=True, slots=True)
class Error(Reply):
    """An error: a bad request or a failed ask. status (upstream_http),
    provider_type (provider_error) and text (interrupted, answer_too_large)
    only with their code."""
    type: ClassVar[str] = "error"
    code: ErrorCode
    message: str
    status: int = ABSENT
    provider_type: str | None = ABSENT
    text: str = ABSENT

    def fields(self) -> dict[str, Any]:
        fields = {"code": self.code, "message": self.message}
        for name in ("status", "provider_type", "text"):
            value = getattr(self, name)
            if value is not ABSENT:
                fields[name] = value
        return fields


# ---- the replies of the other operations ----

@_reply("hello")
class Hello(Reply):
    protocol: int
    server: str
    operations: tuple[str, ...]
    capabilities: tuple[str, ...]
    max_line_bytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class Status(Reply):
    """daemon: the daemon's own fields (server, uptime, providers, devices...),
    first; then the server's."""
    type: ClassVar[str] = "status"
    daemon: Mapping[str, Any]
    clients: int
    active: tuple[Mapping[str, Any], ...]
    counters: Mapping[str, int]
    draining: bool

    def fields(self) -> dict[str, Any]:
        return {**self.daemon, "clients": self.clients, "active": self.active,
                "counters": self.counters, "draining": self.draining}


@_reply("sessions")
class Sessions(Reply):
    sessions: list[Mapping[str, Any]]


@_reply("history")
class History(Reply):
    session: str
    turns: list[Mapping[str, Any]]


@_reply("ok", omitted_when_none=("forgotten",))
class Ok(Reply):
    forgotten: bool | None = None   # forget's answer only


@_reply("announced")
class Announced(Reply):
    """An announce queued on these speech devices."""
    devices: tuple[str, ...]


@_reply("stopped")
class Stopped(Reply):
    """A stop's answer, once the asks it stopped have closed their model
    streams and the speech devices are silent: asks (where each came from,
    as a subscriber's request), devices silenced, seconds that took."""
    asks: tuple[Mapping[str, Any], ...]
    devices: tuple[str, ...]
    seconds: float


@_reply("subscribed")
class Subscribed(Reply):
    pass


@_reply("shutdown")
class Shutdown(Reply):
    reason: str


@_reply("device", omitted_when_none=("error", "retry_in"))
class Device(Reply):
    """A device started or failed (error and retry_in with failed); subscribers only."""
    device: str
    state: str
    error: str | None = None
    retry_in: float | None = None


def internal_error(what: str) -> Error:
    """A bug in the daemon, costing one request or ask: the log has the rest."""
    return Error(ErrorCode.INTERNAL_ERROR, f"the daemon failed on this {what}; its log has "
                 "the details")


STREAMED = (Delta, Reasoning, Refusal)  # left out with "stream": false
# The reply that ends a request, by operation; ask and subscribe stream until it.
FINAL = {"ask": frozenset({Done.type, Error.type}), "subscribe": frozenset({Error.type})}
FINAL_DEFAULT = frozenset({Status.type, Sessions.type, History.type, Ok.type, Announced.type,
                           Stopped.type, Error.type})


# ---- the encoder ----

class _Unaddressed:
    __slots__ = ()


UNADDRESSED: Any = _Unaddressed()  # a reply without an id: hello, shutdown, a device's state

# allow_nan=False: a bare NaN would be no JSON; encode() has made them null already.
_UTF8 = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_ASCII = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode(reply: Reply, request_id: RequestId | None = UNADDRESSED,
           request: Mapping[str, Any] | None = None) -> bytes:
    """The line of a reply: id (when addressed; None is null), type, the
    reply's fields, then request (the ask a subscriber is shown); secrets
    masked, NaN and Infinity null."""
    if type(reply) is Delta:
        # The per-token path: one string to mask, nothing that can be a
        # float, the line made as the encoder would make it.
        if request is None and type(request_id) is int:
            return delta_line(request_id, reply.text)
        if request is not None and request_id is UNADDRESSED:  # for subscribers
            return _delta_for(reply.text, request)
    line = {} if request_id is UNADDRESSED else {"id": request_id}
    line["type"] = reply.type
    line.update(reply.fields())
    if request is not None:
        line["request"] = request
    return dump_line(outgoing(line))


def delta_line(request_id: int, text: str) -> bytes:
    """encode(Delta(text), request_id) without the generic walk: the line of
    every streamed token. UTF-8 as is, ASCII escapes for a lone surrogate."""
    text = masking.mask(text)
    try:
        return f'{{"id":{request_id},"type":"delta","text":{encode_basestring(text)}}}\n' \
            .encode("utf-8")
    except UnicodeEncodeError:
        return f'{{"id":{request_id},"type":"delta","text":{encode_basestring_ascii(text)}}}\n' \
            .encode("ascii")


class _RequestCache:
    """The encoded `request` of the last ask whose deltas went to the
    subscribers: the same object, unchanged, for all of an answer's."""
    __slots__ = ("items", "json")

    def __init__(self) -> None:
        self.items: tuple = ()  # in order: the JSON keeps the keys' order
        self.json: bytes | None = b"{}"


_last_request = _RequestCache()


def _delta_for(text: str, request: Mapping[str, Any]) -> bytes:
    """encode(Delta(text), request=request), the generic walk only for the
    request when it changed."""
    cache = _last_request
    items = tuple(request.items())
    if items != cache.items:
        cache.items = items
        try:
            cache.json = _UTF8.encode(outgoing(request)).encode("utf-8")
        except UnicodeEncodeError:
            cache.json = None  # a lone surrogate: the whole line goes ASCII
    text = masking.mask(text)
    if cache.json is not None:
        try:
            return (f'{{"type":"delta","text":{encode_basestring(text)},"request":'
                    .encode("utf-8") + cache.json + b"}\n")
        except UnicodeEncodeError:
            pass
    return dump_line(outgoing({"type": "delta", "text": text, "request": request}))


def address_prefix(request_id: RequestId) -> bytes:
    """The start of a line addressed to request_id (masked like the rest),
    for a reply encoded once without an id and sent to many: `readdress`."""
    return dump_line(outgoing({"id": request_id}))[:-2] + b","


def readdress(unaddressed: bytes, prefix: bytes) -> bytes:
    """The line encode(reply, request_id, request) would give, from
    encode(reply, request=request) and address_prefix(request_id)."""
    return prefix + unaddressed[1:]


def outgoing(value: Any) -> Any:
    """value as it may leave the daemon, to a client or a device: each string
    (keys too) masked, each float JSON cannot hold null."""
    if isinstance(value, str):
        return masking.mask(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {outgoing(k): outgoing(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [outgoing(item) for item in value]
    return value


def dump_line(value: Mapping[str, Any]) -> bytes:
    """One compact JSON line. UTF-8 as is; a string holding a lone surrogate
    (which UTF-8 cannot carry) makes the whole line ASCII with \\u escapes."""
    try:
        return _UTF8.encode(value).encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return _ASCII.encode(value).encode("ascii") + b"\n"

