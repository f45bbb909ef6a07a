"""The stream core's records: what StreamDecoder.feed() returns, one class
per record kind of csrc/extract.h.

Plain slotted dataclasses: one allocation each, cheap to build on the hot path,
comparable and printable in tests. Optional fields are None when the wire
did not carry them (absent is distinct from empty). The enums take their
values from the C header through the cdef, so csrc/ is their only source.
The provider decoders pass some of these records through and add events of
their own (agent.stream.decoders.events).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agent.stream._binding import lib


class Protocol(enum.IntEnum):
    SSE = lib.HA_PROTO_SSE
    OPENAI_CHAT = lib.HA_PROTO_OPENAI_CHAT
    ANTHROPIC = lib.HA_PROTO_ANTHROPIC
    OPENAI_RESPONSES = lib.HA_PROTO_OPENAI_RESPONSES


class ItemKind(enum.IntEnum):
    TEXT = lib.HA_ITEM_TEXT
    THINKING = lib.HA_ITEM_THINKING
    REDACTED_THINKING = lib.HA_ITEM_REDACTED_THINKING
    TOOL_USE = lib.HA_ITEM_TOOL_USE
    OTHER = lib.HA_ITEM_OTHER


class FinishStatus(enum.IntEnum):
    STOP = lib.HA_FINISH_STOP
    COMPLETED = lib.HA_FINISH_COMPLETED
    INCOMPLETE = lib.HA_FINISH_INCOMPLETE
    FAILED = lib.HA_FINISH_FAILED


class WarningCode(enum.IntEnum):
    # from the C core (ha_warning)
    BAD_JSON = lib.HA_WARN_BAD_JSON
    NOT_OBJECT = lib.HA_WARN_NOT_OBJECT
    UNKNOWN_EVENT = lib.HA_WARN_UNKNOWN_EVENT
    UNKNOWN_DELTA = lib.HA_WARN_UNKNOWN_DELTA
    FIELD_TYPE = lib.HA_WARN_FIELD_TYPE
    REPLACED_UTF8 = lib.HA_WARN_REPLACED_UTF8
    MISSING_FIELD = lib.HA_WARN_MISSING_FIELD
    # from the provider decoders (agent/stream/decoders), above the core's
    UNKNOWN_BLOCK = 101       # a delta for a block or item never started
    UNKNOWN_ITEM_TYPE = 102   # a block or item type we do not know: carried through
    TOOL_ID_CONFLICT = 103    # a later chunk names another id for a call: first kept
    TOOL_NAME_CONFLICT = 104  # likewise for the function name
    ARGUMENTS_MISMATCH = 105  # Responses: output_item.done's arguments differ from the deltas
    AFTER_END = 106           # data after the end sentinel


class FramingErrorCode(enum.IntEnum):
    EVENT_TOO_LARGE = lib.HA_ERR_EVENT_TOO_LARGE
    NAME_TOO_LONG = lib.HA_ERR_NAME_TOO_LONG
    ID_TOO_LONG = lib.HA_ERR_ID_TOO_LONG
    OUTPUT_TOO_LARGE = lib.HA_ERR_OUTPUT_TOO_LARGE


class JSONStatus(enum.IntEnum):
    OK = lib.HA_JSON_OK
    EMPTY = lib.HA_JSON_ERR_EMPTY
    SYNTAX = lib.HA_JSON_ERR_SYNTAX
    DEPTH = lib.HA_JSON_ERR_DEPTH
    TRAILING = lib.HA_JSON_ERR_TRAILING
    TYPE = lib.HA_JSON_ERR_TYPE
    RANGE = lib.HA_JSON_ERR_RANGE
    SPACE = lib.HA_JSON_ERR_SPACE


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


@dataclass(slots=True)
class Truncated:
    """close() found the stream cut short: what was left undelivered."""
    unterminated_event: bool
    partial_line: bool
    incomplete_utf8: bool
    pending: int
