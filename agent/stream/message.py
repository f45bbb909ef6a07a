"""What a provider decoder accumulates: the assistant message of one answer.

The session stores it and sends it back on the next turn, so it keeps what
each wire format needs for that: the exact argument string of every tool
call, thinking blocks with their signatures in order (Anthropic), item ids and
whole reasoning items (Responses).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from agent.stream.jsonscan import JSONError, loads, loads_checked
from agent.stream.records import Usage


class FinishReason(enum.Enum):
    """A provider's stop reason, normalised; the raw string is kept beside it."""
    STOP = "stop"                      # stop, end_turn, stop_sequence, completed
    LENGTH = "length"                  # length, max_tokens, max_output_tokens
    TOOL_CALLS = "tool_calls"          # tool_calls, function_call, tool_use
    CONTENT_FILTER = "content_filter"  # content_filter, refusal
    PAUSE = "pause"                    # Anthropic pause_turn
    ERROR = "error"                    # Responses response.failed
    OTHER = "other"                    # anything else: see raw_finish_reason
    STOPPED = "stopped"                # never from a provider: a `stop` cut the answer here


_FINISH_REASONS = {
    "stop": FinishReason.STOP,
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "completed": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "max_tokens": FinishReason.LENGTH,
    "max_output_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "tool_use": FinishReason.TOOL_CALLS,
    "content_filter": FinishReason.CONTENT_FILTER,
    "refusal": FinishReason.CONTENT_FILTER,
    "pause_turn": FinishReason.PAUSE,
    "failed": FinishReason.ERROR,
}


def normalise_finish(raw: str | None) -> FinishReason:
    return _FINISH_REASONS.get(raw or "", FinishReason.OTHER)


class ArgumentsError(enum.Enum):
    """Why a tool call's arguments did not parse."""
    INVALID_JSON = "invalid_json"    # complete, but not strict JSON
    NOT_AN_OBJECT = "not_an_object"  # JSON, but tools take an object
    TRUNCATED = "truncated"          # the stream ended before the call did
    TOO_LARGE = "too_large"          # longer than the decoder's limit: not kept
    DAMAGED = "damaged"              # bytes of them were lost on the way: not kept


@dataclass(slots=True)
class ToolCall:
    """One tool call. arguments is the exact string the model produced;
    parsed is its JSON object when it is one, else error says why."""
    id: str | None
    name: str | None
    arguments: str = ""
    parsed: dict | None = None
    error: ArgumentsError | None = None
    error_detail: str | None = None
    complete: bool = False
    item_id: str | None = None  # OpenAI Responses output item id


@dataclass(slots=True)
class TextPart:
    text: str


@dataclass(slots=True)
class ThinkingPart:
    """Reasoning. signature (Anthropic) is kept byte-exact; summary_index
    (OpenAI Responses) tells the summaries of one reasoning item apart;
    opaque (OpenAI Responses) is the whole reasoning item as the provider
    sent it in output_item.done (id, summary, encrypted_content): JSON text
    kept byte-exact and sent back as it is, on the item's first part only."""
    text: str
    signature: str | None = None
    redacted_data: str | None = None
    item_id: str | None = None
    summary_index: int | None = None
    opaque: str | None = None


@dataclass
class Message:
    """The accumulated answer of one choice."""
    id: str | None = None
    model: str | None = None
    parts: list = field(default_factory=list)  # TextPart, ThinkingPart, ToolCall in order
    refusal: str | None = None
    citations: list = field(default_factory=list)  # parsed citation objects
    usage: Usage | None = None
    finish_reason: FinishReason | None = None
    raw_finish_reason: str | None = None
    stop_sequence: str | None = None
    # Upstream events dropped whole, by reason (a warning code): the answer
    # is damaged, missing what they carried (agent/stream/decoders/damage.py).
    dropped_events: dict[str, int] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def reasoning(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, ThinkingPart))

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [p for p in self.parts if isinstance(p, ToolCall)]


def merge_usage(old: Usage | None, new: Usage) -> Usage:
    """Usage counts arrive cumulative: a present count replaces, an absent
    one keeps the earlier value (Anthropic's message_delta omits some)."""
    if old is None:
        return new
    return Usage(*(n if n is not None else o for o, n in zip(_usage_tuple(old), _usage_tuple(new))))


def _usage_tuple(u: Usage) -> tuple:
    return (u.input_tokens, u.output_tokens, u.total_tokens, u.cache_read_tokens,
            u.cache_write_tokens, u.reasoning_tokens)


def parse_arguments(call: ToolCall, checked: bool = False) -> None:
    """Parse a complete call's argument string once, with the strict scanner,
    or without it when the stream core has already checked it (checked).
    Empty arguments mean no arguments: {} (Anthropic's input_json may send
    nothing at all for a tool without parameters)."""
    if not call.arguments.strip():
        call.parsed = {}
        return
    try:
        value: Any = (loads_checked(call.arguments) if checked
                      else loads(call.arguments.encode("utf-8")))
    except JSONError as exc:
        call.error, call.error_detail = ArgumentsError.INVALID_JSON, str(exc)
        return
    if isinstance(value, dict):
        call.parsed = value
    else:
        call.error = ArgumentsError.NOT_AN_OBJECT
        call.error_detail = f"arguments are a JSON {type(value).__name__}, not an object"
