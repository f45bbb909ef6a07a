"""The answer vocabulary: every reply of an ask and of the daemon's other
operations, and ErrorCode, the one list of what can go wrong.

One frozen class per reply type, as h11 has one per event. Every door turns
these into its own wire (agent/api/wire.py: JSON lines; agent/mqtt/messages.py;
agent/wyoming/service.py) and the devices receive them as they are
(agent/core/deliveries.py). They leave the daemon only through the masking
edge (agent/core/edge.py).

This module loads dataclasses and enum only: the blocking client
(agent/api/client.py) uses it too, and must start without trio, httpx or the
C core.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, ClassVar, Mapping

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
    UNKNOWN_TIMER = "unknown_timer"
    TIMERS_DISABLED = "timers_disabled"


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


@_reply("failover", omitted_when_none=("status", "resumed_at"))
class Failover(Reply):
    """The provider named in started (or the last failover) failed; the ask
    goes to provider now (which may be the same one). code, message and
    status are what its error would have been. Without resumed_at it failed
    before any reply of its answer was sent; with it, its stream broke
    mid-answer and the answer goes on from that character (code points of
    the ask's text, every step's: done's text up to there)."""
    failed: str
    code: ErrorCode
    message: str
    provider: str
    model: str
    status: int | None = None
    resumed_at: int | None = None


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


@_reply("sentence")
class Sentence(Reply):
    """A whole sentence of an answer, cut by the segmenter for the devices
    (agent/core/deliveries.py); never on a door's wire."""
    text: str


@_reply("sound")
class Sound(Reply):
    """A short sound (the voice door's wake sound) for the speech devices
    that play audio: PCM of rate Hz, width bytes a sample (8 bits unsigned,
    more signed little-endian) and channels; never on a door's wire."""
    pcm: bytes
    rate: int
    width: int
    channels: int

    @property
    def seconds(self) -> float:
        return len(self.pcm) / (self.rate * self.width * self.channels)


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


@_reply("timers", omitted_when_none=("cancelled",))
class Timers(Reply):
    """The timers and reminders set, the soonest first, and the one this
    request cancelled."""
    timers: list[Mapping[str, Any]]
    cancelled: Mapping[str, Any] | None = None


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


@_reply("voice")
class VoiceState(Reply):
    """The voice door (agent/voice/service.py) changed state: idle (waiting
    for a wake word), listening, thinking or speaking; a notice, of no ask."""
    state: str


@_reply("timer", omitted_when_none=("board",))
class TimerRing(Reply):
    """A timer or reminder (agent/tools/timers/) began ringing (state
    "ringing") or went quiet (state "quiet": a stop, or its limit); a notice,
    of no ask. board names the board it rings on when that is another one,
    through the broker; without it, it rings on this daemon's speech devices."""
    state: str
    timer: str  # its id, such as "t3"
    kind: str   # "timer" or "reminder"
    label: str
    board: str | None = None


def internal_error(what: str) -> Error:
    """A bug in the daemon, costing one request or ask: the log has the rest."""
    return Error(ErrorCode.INTERNAL_ERROR, f"the daemon failed on this {what}; its log has "
                 "the details")


VOICE_STATES = ("idle", "listening", "thinking", "speaking")
STREAMED = (Delta, Reasoning, Refusal)  # left out with "stream": false
TEXT = (Delta, Sentence, Reasoning)  # text a coalescing device inbox joins
ENDS_ASK = (Done, Error)
