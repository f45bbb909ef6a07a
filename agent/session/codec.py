"""Conversation turns as plain JSON objects and back, and the client's view.

A stored turn is sent back to the model on later requests, so the codec
keeps every field each wire format may need (thinking signatures, exact
argument strings, item ids): turn_from_json(turn_to_json(t)) == t.
Citations are kept too: they are already plain JSON. Fields that are None
are left out to keep the files small; a missing one reads back as None.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from agent.jsontypes import is_type
from agent.providers.requests import AssistantTurn, ToolResult, UserTurn
from agent.stream.records import Usage
from agent.stream.message import (ArgumentsError, FinishReason, Message, TextPart, ThinkingPart,
                                  ToolCall, parse_arguments)

_USAGE_FIELDS = tuple(f.name for f in fields(Usage))
_JSON_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
               int: "an integer", float: "a number", type(None): "null"}


def turn_to_json(turn) -> dict:
    if isinstance(turn, UserTurn):
        return {"role": "user", "text": turn.text}
    if isinstance(turn, AssistantTurn):
        return {"role": "assistant", **_message_to_json(turn.message)}
    if isinstance(turn, ToolResult):
        return {"role": "tool", "call_id": turn.call_id, "name": turn.name,
                "content": turn.content, "is_error": turn.is_error}
    raise TypeError(f"not a conversation turn: {turn!r}")


def turn_from_json(obj: dict):
    """The turn of a turn_to_json object; ValueError says what is wrong."""
    turn = _Reader(obj, "")
    role = turn.required("role", str)
    if role == "user":
        return UserTurn(turn.required("text", str))
    if role == "assistant":
        return AssistantTurn(_message_from_json(turn))
    if role == "tool":
        return ToolResult(turn.required("call_id", str), turn.required("name", str),
                          turn.required("content", str), turn.optional("is_error", bool, False))
    raise ValueError(f"unknown role {role!r}")


def turn_summary(turn) -> dict:
    """What a client is shown of a turn (the socket API's history)."""
    if not isinstance(turn, AssistantTurn):
        return turn_to_json(turn)  # a user text or a tool result has nothing to leave out
    message = turn.message
    summary: dict = {"role": "assistant", "text": message.text}
    if message.reasoning:
        summary["reasoning"] = message.reasoning
    if message.tool_calls:
        summary["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments}
                                 for c in message.tool_calls]
    summary["finish_reason"] = _value(message.finish_reason)
    if message.dropped_events:
        summary["dropped_events"] = dict(message.dropped_events)  # a damaged answer
    return summary


def _message_to_json(message: Message) -> dict:
    usage = message.usage
    return _present({
        "id": message.id,
        "model": message.model,
        "parts": [_part_to_json(part) for part in message.parts],
        "refusal": message.refusal,
        "citations": message.citations or None,
        "usage": None if usage is None else _present({name: getattr(usage, name)
                                                       for name in _USAGE_FIELDS}),
        "finish_reason": _value(message.finish_reason),
        "raw_finish_reason": message.raw_finish_reason,
        "stop_sequence": message.stop_sequence,
        "dropped_events": message.dropped_events or None,
    })


def _part_to_json(part) -> dict:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ThinkingPart):
        return _present({"type": "thinking", "text": part.text, "signature": part.signature,
                         "redacted_data": part.redacted_data, "item_id": part.item_id,
                         "summary_index": part.summary_index, "opaque": part.opaque})
    if isinstance(part, ToolCall):
        # The arguments once, as the model sent them; parsed again on reading.
        return _present({"type": "tool_call", "id": part.id, "name": part.name,
                         "arguments": part.arguments,
                         "error": _value(part.error), "error_detail": part.error_detail,
                         "complete": part.complete, "item_id": part.item_id})
    raise TypeError(f"not a message part: {part!r}")


def _message_from_json(message: _Reader) -> Message:
    usage = message.optional("usage", dict)
    if usage is not None:
        counts = _Reader(usage, "usage")
        usage = Usage(**{name: counts.optional(name, int) for name in _USAGE_FIELDS})
    return Message(
        id=message.optional("id", str),
        model=message.optional("model", str),
        parts=[_part_from_json(part, f"parts[{i}]")
               for i, part in enumerate(message.required("parts", list))],
        refusal=message.optional("refusal", str),
        citations=message.optional("citations", list) or [],
        usage=usage,
        finish_reason=message.enum("finish_reason", FinishReason),
        raw_finish_reason=message.optional("raw_finish_reason", str),
        stop_sequence=message.optional("stop_sequence", str),
        dropped_events=_counts(message.optional("dropped_events", dict) or {}, "dropped_events"),
    )


def _counts(obj: dict, where: str) -> dict[str, int]:
    """A JSON object of names to counts, each checked."""
    counts = _Reader(obj, where)
    return {name: counts.required(name, int) for name in obj}


def _part_from_json(obj: Any, where: str):
    part = _Reader(obj, where)
    kind = part.required("type", str)
    if kind == "text":
        return TextPart(part.required("text", str))
    if kind == "thinking":
        return ThinkingPart(part.required("text", str), signature=part.optional("signature", str),
                            redacted_data=part.optional("redacted_data", str),
                            item_id=part.optional("item_id", str),
                            summary_index=part.optional("summary_index", int),
                            opaque=part.optional("opaque", str))  # older files: none
    if kind == "tool_call":
        call = ToolCall(id=part.optional("id", str), name=part.optional("name", str),
                        arguments=part.required("arguments", str),
                        parsed=part.optional("parsed", dict),  # older files stored it too
                        error=part.enum("error", ArgumentsError),
                        error_detail=part.optional("error_detail", str),
                        complete=part.required("complete", bool),
                        item_id=part.optional("item_id", str))
        if call.parsed is None and call.complete and call.error is None:
            parse_arguments(call)
        return call
    raise ValueError(f"{where}: unknown part type {kind!r}")


class _Reader:
    """Typed fields of one JSON object; errors name the object by where."""

    def __init__(self, obj: Any, where: str) -> None:
        if not isinstance(obj, dict):
            raise ValueError(f"{where or 'a turn'} must be an object, not {_kind(obj)}")
        self.obj = obj
        self.prefix = f"{where}: " if where else ""

    def required(self, key: str, kind: type) -> Any:
        if key not in self.obj:
            raise ValueError(f"{self.prefix}missing {key!r}")
        return self._checked(key, kind)

    def optional(self, key: str, kind: type, default: Any = None) -> Any:
        return default if self.obj.get(key) is None else self._checked(key, kind)

    def enum(self, key: str, kind: type) -> Any:
        value = self.optional(key, str)
        try:
            return None if value is None else kind(value)
        except ValueError:
            raise ValueError(f"{self.prefix}unknown {key} {value!r}") from None

    def _checked(self, key: str, kind: type) -> Any:
        value = self.obj[key]
        if not is_type(value, kind):
            raise ValueError(f"{self.prefix}{key!r} must be {_JSON_KINDS[kind]}, "
                             f"not {_kind(value)}")
        return value


def _kind(value: Any) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _present(obj: dict) -> dict:
    return {key: value for key, value in obj.items() if value is not None}


def _value(member) -> str | None:
    return None if member is None else member.value
