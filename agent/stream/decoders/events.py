"""The provider decoders' own events: what agent/stream/decoders/* emit
beside the core records they pass through unchanged (TextDelta,
ReasoningDelta, RefusalDelta, Usage, ProviderError, DecodeWarning,
FramingError, UnknownField, Truncated of agent.stream.records).

These are protocol-neutral: TextDelta.index is the choice for OpenAI Chat;
for the others it is the content block (Anthropic) or output item
(Responses) position, while `call` and `choice` here mean the same for all
three.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.stream.message import FinishReason, ToolCall


@dataclass(slots=True)
class ToolCallOpened:
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
    tool_call: ToolCall
    choice: int = 0


@dataclass(slots=True)
class MessageFinished:
    reason: FinishReason
    raw_reason: str | None
    choice: int = 0


@dataclass(slots=True)
class MessageIncomplete:
    """The body ended before the protocol's end ([DONE], message_stop,
    response.completed/incomplete/failed): the message may be partial."""
    detail: str
