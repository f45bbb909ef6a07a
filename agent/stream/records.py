"""The stream core's records: what StreamDecoder.feed() returns, one class
per record kind of csrc/extract.h.

Plain slotted dataclasses: one allocation each, cheap to build on the hot path,
comparable and printable in tests. Optional fields are None when the wire
did not carry them (absent is distinct from empty). The enums are made
from the C enums as the cdef resolved them, so csrc/ is their only source.
The provider decoders pass some of these records through and add events of
their own (agent.stream.decoders.events).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agent.stream._binding import ffi


def _from_c(name: str, c_type: str, prefix: str, **more: int) -> type[enum.IntEnum]:
    """An IntEnum of the C enum c_type as the cdef resolved it: HA_ITEM_TEXT
    becomes ItemKind.TEXT (an ERR_ after the prefix goes too). more adds
    members that exist only in Python."""
    members = {c_name.removeprefix(prefix).removeprefix("ERR_"): value
               for c_name, value in ffi.typeof(c_type).relements.items()}
    return enum.IntEnum(name, sorted({**members, **more}.items(), key=lambda m: m[1]),
                        module=__name__)


Protocol = _from_c("Protocol", "ha_protocol", "HA_PROTO_")
ItemKind = _from_c("ItemKind", "ha_item_kind", "HA_ITEM_")
FinishStatus = _from_c("FinishStatus", "ha_finish_status", "HA_FINISH_")
FramingErrorCode = _from_c("FramingErrorCode", "ha_framing_error", "HA_ERR_")
JSONStatus = _from_c("JSONStatus", "ha_json_status", "HA_JSON_")
# The core's warnings (ha_warning), then the provider decoders' own, above them.
WarningCode = _from_c(
    "WarningCode", "ha_warning", "HA_WARN_",
    UNKNOWN_BLOCK=101,       # a delta for a block or item never started
    UNKNOWN_ITEM_TYPE=102,   # a block or item type we do not know: carried through
    TOOL_ID_CONFLICT=103,    # a later chunk names another id for a call: first kept
    TOOL_NAME_CONFLICT=104,  # likewise for the function name
    ARGUMENTS_MISMATCH=105,  # Responses: output_item.done's arguments differ from the deltas
    AFTER_END=106,           # data after the end sentinel
)


@dataclass(slots=True)
class SSEEvent:
    """A raw server-sent event (Protocol.SSE). name "" means "message"."""
    name: str
    data: bytes
    id: str | None


@dataclass(slots=True)
class UnknownField:
    """A field the SSE specification ignores, reported instead of dropped."""
    name: str
    preview: bytes
    size: int


@dataclass(slots=True)
class TextDelta:
    index: int
    text: str
    content_index: int | None = None
    item_id: str | None = None


@dataclass(slots=True)
class ReasoningDelta:
    index: int
    text: str
    summary_index: int | None = None
    item_id: str | None = None


@dataclass(slots=True)
class RefusalDelta:
    index: int
    text: str
    content_index: int | None = None
    item_id: str | None = None


@dataclass(slots=True)
class SignatureDelta:
    index: int
    signature: str


@dataclass(slots=True)
class ToolCallStart:
    """OpenAI Chat tool call head; tool_index is None when the server omits it."""
    index: int
    tool_index: int | None
    call_id: str | None
    name: str | None
    type: str | None


@dataclass(slots=True)
class ToolArgsDelta:
    index: int
    tool_index: int | None
    text: str
    item_id: str | None = None


@dataclass(slots=True)
class BlockStart:
    """Anthropic content_block_start / Responses output_item.added."""
    index: int
    kind: ItemKind
    call_id: str | None
    name: str | None
    item_id: str | None
    unknown_type: str | None = None
    raw: bytes | None = None


@dataclass(slots=True)
class BlockStop:
    """Anthropic content_block_stop (kind None: the block's start says it) /
    Responses output_item.done."""
    index: int
    kind: ItemKind | None
    call_id: str | None
    arguments: str | None
    item_id: str | None
    raw: bytes | None = None


@dataclass(slots=True)
class Citation:
    index: int
    raw: bytes


@dataclass(slots=True)
class Finish:
    index: int | None
    status: FinishStatus
    reason: str | None
    stop_sequence: str | None = None


@dataclass(slots=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None


@dataclass(slots=True)
class Timings:
    """Ollama's durations of the answer, in nanoseconds (its done line)."""
    total_ns: int | None = None
    load_ns: int | None = None
    prompt_eval_ns: int | None = None
    eval_ns: int | None = None


@dataclass(slots=True)
class Meta:
    id: str | None
    model: str | None


@dataclass(slots=True)
class ProviderError:
    """An error event inside a 200 stream: its type or code, and its message."""
    type: str | None
    message: str | None
    raw: bytes | None


@dataclass(slots=True)
class StreamEnd:
    """The protocol's end sentinel: "[DONE]", "message_stop" or "done"
    (Ollama's done: true)."""
    sentinel: str


@dataclass(slots=True)
class DecodeWarning:
    """A chunk or field that could not be used; raw is the event data."""
    code: WarningCode
    detail: str | None
    raw: bytes | None
    json_status: JSONStatus | None = None
    offset: int | None = None


@dataclass(slots=True)
class FramingError:
    """An event dropped by name: too large for the buffer, and so on.
    detail: the path of what the dropped data is known to have held, when
    that matters (Ollama: "message.tool_calls", a tool call was lost)."""
    code: FramingErrorCode
    size: int
    detail: str | None = None


@dataclass(slots=True)
class Truncated:
    """close() found the stream cut short: what was left undelivered."""
    unterminated_event: bool
    partial_line: bool
    incomplete_utf8: bool
    pending: int
