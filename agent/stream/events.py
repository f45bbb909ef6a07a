"""Events produced by the stream core, one class per record kind of csrc/extract.h.

Plain slotted dataclasses: one allocation each, cheap to build on the hot path,
comparable and printable in tests. Optional fields are None when the wire
did not carry them (absent is distinct from empty).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Protocol(enum.IntEnum):
    SSE = 0
    OPENAI_CHAT = 1
    ANTHROPIC = 2
    OPENAI_RESPONSES = 3


class ItemKind(enum.IntEnum):
    TEXT = 0
    THINKING = 1
    REDACTED_THINKING = 2
    TOOL_USE = 3
    OTHER = 4


class FinishStatus(enum.IntEnum):
    STOP = 0
    COMPLETED = 1
    INCOMPLETE = 2
    FAILED = 3


class WarningCode(enum.IntEnum):
    # from the C core (csrc/extract.h ha_warning)
    BAD_JSON = 1
    NOT_OBJECT = 2
    UNKNOWN_EVENT = 3
    UNKNOWN_DELTA = 4
    FIELD_TYPE = 5
    REPLACED_UTF8 = 6
    MISSING_FIELD = 7
    # from the provider decoders (agent/stream/decoders)
    UNKNOWN_BLOCK = 101       # a delta for a block or item never started
    UNKNOWN_ITEM_TYPE = 102   # a block or item type we do not know: carried through
    TOOL_ID_CONFLICT = 103    # a later chunk names another id for a call: first kept
    TOOL_NAME_CONFLICT = 104  # likewise for the function name
    ARGUMENTS_MISMATCH = 105  # Responses: output_item.done's arguments differ from the deltas
    AFTER_END = 106           # data after the end sentinel


class FramingErrorCode(enum.IntEnum):
    EVENT_TOO_LARGE = 3
    NAME_TOO_LONG = 4
    ID_TOO_LONG = 5
    OUTPUT_TOO_LARGE = 10


class JSONStatus(enum.IntEnum):
    OK = 0
    EMPTY = 1
    SYNTAX = 2
    DEPTH = 3
    TRAILING = 4
    TYPE = 5
    RANGE = 6
    SPACE = 7


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
    """The protocol's end sentinel: "[DONE]" or "message_stop"."""
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
    """An event dropped by name: too large for the buffer, and so on."""
    code: FramingErrorCode
    size: int


# ---- events of the provider decoders (agent/stream/decoders) ----
# TextDelta, ReasoningDelta, RefusalDelta, Usage, ProviderError, DecodeWarning,
# FramingError and Truncated pass through them unchanged. TextDelta.index is
# the choice for OpenAI Chat; for the others it is the content block (Anthropic)
# or output item (Responses) position.


@dataclass(slots=True)
class ToolCallStarted:
    """A tool call's head: call is its position among the message's calls."""
    call: int
    id: str | None
    name: str | None
    choice: int = 0


@dataclass(slots=True)
class ToolCallDelta:
    call: int
    text: str
    choice: int = 0


@dataclass(slots=True)
class ToolCallDone:
    """A call whose arguments are complete (or cut off: tool_call.error says)."""
    call: int
    tool_call: "ToolCall"  # noqa: F821 - agent.stream.message.ToolCall
    choice: int = 0


@dataclass(slots=True)
class Finished:
    reason: "FinishReason"  # noqa: F821 - agent.stream.message.FinishReason
    raw_reason: str | None
    choice: int = 0


@dataclass(slots=True)
class StreamIncomplete:
    """The body ended before the protocol's end ([DONE], message_stop,
    response.completed/incomplete/failed): the message may be partial."""
    detail: str


@dataclass(slots=True)
class Truncated:
    """close() found the stream cut short: what was left undelivered."""
    unterminated_event: bool
    partial_line: bool
    incomplete_utf8: bool
    pending: int
