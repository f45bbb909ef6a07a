"""What may arrive on the board's topics, and the daemon's replies as the
messages it publishes (topic tree version 1, docs/mqtt.md). Sans-IO.

A payload is checked for size before it is parsed, parsed by the daemon's
strict JSON scanner, and must be an object of the topic's fields and types
exactly: anything else is a Refusal with a named code, which the shell
publishes on the error topic. The replies of asks come masked from the
center; what this module adds to them (the asker's id and session, a
refusal's text) passes the masking edge (agent/core/edge.py) here.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from agent.core import replies
from agent.core.edge import outgoing
from agent.jsonline import dump_line
from agent.text.segmenter import Segmenter, SegmenterConfig
from agent.mqtt.topics import BOARD_NAME, Topics
from agent.session.store import SESSION_ID
from agent.stream.jsonscan import FLAG_BAD_UTF8, FLAG_LONE_SURROGATE, JSONError, loads_flagged

MAX_ID = 128
SENTENCE_MAX_CHARS = 400
SESSION_PREFIX = "mqtt-"  # the broker's own session namespace
ERROR_BURST = 20          # error messages per topic at once
ERROR_INTERVAL = 1.0      # seconds: then one per topic per interval
MAX_LIMITED_TOPICS = 64


class PayloadError(enum.StrEnum):
    EMPTY = "empty_payload"
    TOO_LARGE = "payload_too_large"
    INVALID_UTF8 = "invalid_utf8"
    INVALID_JSON = "invalid_json"
    NOT_AN_OBJECT = "not_an_object"
    MISSING_FIELD = "missing_field"
    BAD_FIELD = "bad_field"
    UNKNOWN_FIELD = "unknown_field"
    TOO_MANY_ASKS = "too_many_asks"
    RETAINED = "retained_command"


@dataclass(frozen=True, slots=True)
class Refusal:
    code: PayloadError | replies.ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class Ask:
    text: str
    session: str | None = None
    id: str | None = None
    speak_on: str | None = None


@dataclass(frozen=True, slots=True)
class Announce:
    text: str
    device: str | None = None


@dataclass(frozen=True, slots=True)
class Stop:
    session: str | None = None


# topic kind -> (class, {field: required})
_FIELDS = {"ask": (Ask, {"text": True, "session": False, "id": False, "speak_on": False}),
           "announce": (Announce, {"text": True, "device": False}),
           "stop": (Stop, {"session": False})}


def parse(kind: str, payload: bytes, max_payload: int) -> Ask | Announce | Stop | Refusal:
    """The command of a payload on the ask, announce or stop topic."""
    if not payload:
        return Refusal(PayloadError.EMPTY, f"{kind}: the payload is empty; it is a JSON object")
    if len(payload) > max_payload:
        return Refusal(PayloadError.TOO_LARGE, f"{kind}: {len(payload)} bytes, more than "
                       f"mqtt.max_payload ({max_payload})")
    try:
        value, flags = loads_flagged(payload)
    except JSONError as error:
        return Refusal(PayloadError.INVALID_JSON, f"{kind}: {error}")
    if flags & (FLAG_BAD_UTF8 | FLAG_LONE_SURROGATE):
        return Refusal(PayloadError.INVALID_UTF8, f"{kind}: the payload is not valid UTF-8")
    if not isinstance(value, dict):
        return Refusal(PayloadError.NOT_AN_OBJECT, f"{kind}: the payload is a JSON object")
    cls, fields = _FIELDS[kind]
    for name, field_value in value.items():
        if name not in fields:
            return Refusal(PayloadError.UNKNOWN_FIELD, f"{kind}: unknown field "
                           f"{json.dumps(name)[:40]}; known: {', '.join(fields)}")
        if not isinstance(field_value, str):
            return Refusal(PayloadError.BAD_FIELD, f"{kind}: {name} must be a string")
    for name, required in fields.items():
        if required and name not in value:
            return Refusal(PayloadError.MISSING_FIELD, f"{kind}: missing field: {name}")
    if "text" in fields and not value["text"].strip():
        return Refusal(PayloadError.BAD_FIELD, f"{kind}: text is empty")
    if not 0 < len(value.get("id", "x")) <= MAX_ID:
        return Refusal(PayloadError.BAD_FIELD, f"{kind}: id is 1 to {MAX_ID} characters")
    if "speak_on" in value and not BOARD_NAME.fullmatch(value["speak_on"]):
        return Refusal(PayloadError.BAD_FIELD, f"{kind}: speak_on is a board name "
                       "([a-z0-9_-], at most 64)")
    return cls(**value)


def error_message(topic: str | None, refusal: Refusal, suppressed: int = 0) -> dict[str, Any]:
    """A refusal as published on the error topic; suppressed: how many on
    its topic were left out before it (ErrorLimit)."""
    return outgoing({"topic": topic, "error": refusal.code.value, "message": refusal.message,
                     **({"suppressed": suppressed} if suppressed else {})})


class ErrorLimit:
    """At most ERROR_BURST error messages per topic at once, then one per
    ERROR_INTERVAL (a token bucket on a clock passed in); the next one
    allowed says how many were left out."""

    def __init__(self, burst: int = ERROR_BURST, interval: float = ERROR_INTERVAL) -> None:
        self.burst, self.interval = burst, interval
        self._buckets: dict[str | None, tuple[float, float, int]] = {}  # tokens, at, left out
        self.suppressed_total = 0

    def allow(self, topic: str | None, now: float) -> int | None:
        """None: leave this one out; else how many were left out before it."""
        tokens, at, left_out = self._buckets.get(topic, (float(self.burst), now, 0))
        tokens = min(float(self.burst), tokens + (now - at) / self.interval)
        if tokens < 1:
            self._buckets[topic] = (tokens, now, left_out + 1)
            self.suppressed_total += 1
            return None
        if topic not in self._buckets and len(self._buckets) >= MAX_LIMITED_TOPICS:
            self._buckets.pop(next(iter(self._buckets)))
        self._buckets[topic] = (tokens - 1, now, 0)
        return left_out


class SessionNames:
    """The broker's sessions: a name an MQTT ask (or stop) gives is the
    daemon's session `mqtt-<name>`, never a socket client's or a device's;
    only the names in `shared` (mqtt.sessions) are the daemon's sessions of
    that name. The asker sees its own names back."""

    def __init__(self, shared: tuple[str, ...] = ()) -> None:
        self.shared = frozenset(shared)

    def stored(self, name: str) -> str | None:
        """The daemon's session for name; None if name cannot be one."""
        session = name if name in self.shared else SESSION_PREFIX + name
        return session if SESSION_ID.fullmatch(session) else None

    def shown(self, session: str) -> str:
        """The asker's name of the daemon's session."""
        return session if session in self.shared else session.removeprefix(SESSION_PREFIX)


class SpokenElsewhere:
    """An ask's text, cut into sentences as it streams, as announces on
    another board (speak_on): speech starts there while the answer streams."""

    def __init__(self, topics: Topics, board: str) -> None:
        self.topic = topics.of(board, "announce")
        self._segmenter = Segmenter(SegmenterConfig(max_chars=SENTENCE_MAX_CHARS))

    def sentences(self, reply: replies.Reply) -> list[str]:
        if isinstance(reply, replies.Delta):
            return self._segmenter.feed(reply.text)
        if isinstance(reply, (replies.ToolCall, replies.Done, replies.Error)):
            return self._segmenter.close()
        return []

    def on(self, reply: replies.Reply) -> list[tuple[str, dict]]:
        return [(self.topic, outgoing({"text": sentence}))
                for sentence in self.sentences(reply)]


class AskMessages:
    """One ask's replies as (topic, payload object) to publish: a sentence
    on answer as each is cut, done, tool calls and their results, errors; deltas only with
    deltas on. Every string goes through the masking edge."""

    def __init__(self, topics: Topics, ask_id: str, session: str, *, deltas: bool,
                 names: SessionNames | None = None) -> None:
        self.topics = topics
        self.id, self.session = ask_id, session
        self.deltas = deltas
        self.names = names
        self._segmenter = Segmenter(SegmenterConfig(max_chars=SENTENCE_MAX_CHARS))

    def _head(self) -> dict[str, Any]:
        return {"id": self.id, "session": self.session}

    def _sentences(self, sentences: list[str]) -> list[tuple[str, dict]]:
        return [(self.topics.answer, {**self._head(), "text": s}) for s in sentences]

    def on(self, reply: replies.Reply) -> list[tuple[str, dict]]:
        topics = self.topics
        out: list[tuple[str, dict]] = []
        if isinstance(reply, replies.Started):
            self.session = self.names.shown(reply.session) if self.names else reply.session
        elif isinstance(reply, replies.Delta):
            if self.deltas:
                out.append((topics.delta, {**self._head(), "text": reply.text}))
            out += self._sentences(self._segmenter.feed(reply.text))
        elif isinstance(reply, replies.ToolCall):
            out += self._sentences(self._segmenter.close())
            call = {**self._head(), "call_id": reply.call_id, "name": reply.name,
                    "arguments": reply.arguments}
            out += [(topics.tool_call, call),
                    (topics.event, {"event_type": "tool_call", **call})]
        elif isinstance(reply, replies.ToolResult):
            out.append((topics.tool_result, {**self._head(), "call_id": reply.call_id,
                                             "name": reply.name, "content": reply.content,
                                             "is_error": reply.is_error}))
        elif isinstance(reply, replies.Done):
            out += self._sentences(self._segmenter.close())
            done = {**self._head(), "text": reply.text, "finish_reason": reply.finish_reason,
                    "usage": reply.usage}
            out += [(topics.done, done), (topics.event, {"event_type": "answer", **done})]
        elif isinstance(reply, replies.Error):
            out.append((topics.error, {"topic": topics.ask, "error": reply.code.value,
                                       "message": reply.message, **self._head()}))
        return [(topic, outgoing(payload)) for topic, payload in out]


def encode(payload: dict[str, Any]) -> bytes:
    return dump_line(payload)[:-1]
