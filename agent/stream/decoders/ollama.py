"""Ollama's native API (/api/chat): one JSON object per NDJSON line.

Each line carries a piece of one message: `message.thinking` (reasoning),
`message.content` (text) and `message.tool_calls`. A tool call arrives whole
in one line, its arguments a JSON object: the call is opened, given the
object's bytes exactly as sent as its argument string, and done at once,
its arguments built without a second check (the core read the line
strictly; jsonscan.loads_checked).
Ollama sends no call ids; a call without one gets `call_ha_0_<position>`,
its position among the message's calls, the scheme of the OpenAI Chat
decoder, so the id is the same however the body was split and a result can
be matched to its call in the next request. A newer server's own id is kept.

The line with `done: true` ends the message: its done_reason ("stop",
"length", "load", ...), token counts (prompt_eval_count, eval_count) and
timings. "stop" after tool calls is TOOL_CALLS, raw_finish_reason keeping
"stop"; no done_reason at all (older servers) is STOP or TOOL_CALLS the same
way, raw_finish_reason None saying it was inferred.

Out of the ordinary (docs/truth-table-ollama.md): `{"error": ...}` lines are
the core's ProviderError; data after the done line is not decoded
(DecodeWarning AFTER_END once); a body cut before it is MessageIncomplete,
and a last line without LF is decoded and also named by Truncated, passed
on even after the end since it says something about the body.
A line the core dropped whole (over the buffer, or JSON it could not
read) that held `message.tool_calls` (the core scans it and names the path)
adds one call for the line's calls, done as TOO_LARGE or DAMAGED: the
model gets an error result saying why nothing ran, rather than silence.

Events out: TextDelta and ReasoningDelta (the core's), ToolCallOpened,
ToolCallDelta, ToolCallDone, MessageFinished, Usage, Timings, and the core's
ProviderError, DecodeWarning, FramingError and Truncated.
"""

from __future__ import annotations

from agent.stream import records as rec
from agent.stream.decoders import events as ev
from agent.stream.decoders.base import (
    CallBuilder,
    ProviderDecoder,
    TextBuilder,
    ThinkingBuilder,
    build_message,
)
from agent.stream.message import (ArgumentsError, FinishReason, Message, merge_usage,
                                  normalise_finish)
from agent.stream.records import Protocol

_CALLS_PATH = "message.tool_calls"  # HA_OLLAMA_CALLS_PATH: a dropped line held calls


class OllamaDecoder(ProviderDecoder):
    PROTOCOL = Protocol.OLLAMA
    END = "a line with done: true"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._msg = Message()
        self._parts: list = []
        self._calls: list[CallBuilder] = []
        self._open: CallBuilder | None = None  # a head whose arguments did not come
        self._usage: rec.Usage | None = None
        self.timings: rec.Timings | None = None

    @property
    def message(self) -> Message:
        self._msg.usage = self._usage
        return build_message(self._msg, self._parts, self.dropped_events)

    def _continued(self, delta):
        return self._parts[-1]

    def _handle(self, events: list, out: list) -> None:
        append = out.append
        parts = self._parts
        for e in events:
            kind = type(e)
            if kind is rec.Truncated:  # about the body: said even after the end
                self._pass_through(e, out)
                continue
            if self._ended and self._after_end(e, out):
                continue
            if kind is rec.TextDelta:
                if not parts or type(parts[-1]) is not TextBuilder:
                    parts.append(TextBuilder())
                parts[-1].pieces.append(e.text)
                append(e)
            elif kind is rec.ReasoningDelta:
                if not parts or type(parts[-1]) is not ThinkingBuilder:
                    parts.append(ThinkingBuilder())
                parts[-1].pieces.append(e.text)
                append(e)
            elif kind is rec.ToolCallStart:
                self._start(e.call_id, e.name, out)
            elif kind is rec.ToolArgsDelta:
                # the core writes a call's arguments right after its head,
                # an object from the line it has just parsed strictly
                call = self._open if self._open is not None else self._start(None, None, out)
                call.add(e.text)
                append(ev.ToolCallDelta(call.call, e.text))
                self._done(call, out, checked=True)
                self._open = None
            elif kind is rec.Finish:
                self._finish(e.reason, out)
            elif kind is rec.Usage:
                self._usage = merge_usage(self._usage, e)
                append(e)
            elif kind is rec.Timings:
                self.timings = e
                append(e)
            elif kind is rec.Meta:
                self._msg.model = e.model if e.model is not None else self._msg.model
            elif kind is rec.StreamEnd:
                self._ended = True
            else:
                self._pass_through(e, out)

    def _start(self, call_id: str | None, name: str | None, out: list) -> CallBuilder:
        self._close_open(out)
        position = len(self._calls)
        call = CallBuilder(position, call_id or f"call_ha_0_{position}", name,
                           max_arguments=self._max_arguments)
        self._calls.append(call)
        self._parts.append(call)
        self._open = call
        out.append(ev.ToolCallOpened(call.call, call.id, call.name))
        return call

    def _close_open(self, out: list) -> None:
        """A head whose arguments were not an object, or none (the core
        warned FIELD_TYPE or MISSING_FIELD): done as NOT_AN_OBJECT, never
        run with no arguments in their place."""
        if self._open is not None:
            self._open.lose(ArgumentsError.NOT_AN_OBJECT,
                            "the call's arguments were missing or not a JSON object")
            self._done(self._open, out)
            self._open = None

    def _lost(self, event, code: str, out: list) -> None:
        """A line dropped whole (over the buffer, or JSON the core could not
        read) that held message.tool_calls, as the core names it: the
        model asked for calls that never arrive. One call stands for them,
        done as the error, so the model hears why nothing ran."""
        if event.detail != _CALLS_PATH:
            return
        if code == "line_too_large":
            error, detail = ArgumentsError.TOO_LARGE, (
                f"a line of tool calls was {event.size} bytes, over the stream buffer of "
                f"{self._buffer_size} bytes, and was lost")
        else:
            error, detail = ArgumentsError.DAMAGED, (
                f"a line of tool calls was not JSON the decoder could read "
                f"({event.json_status.name.lower()}) and was lost")
        call = self._start(None, None, out)
        call.lose(error, detail)
        self._open = None
        self._done(call, out)

    def _finish(self, raw: str | None, out: list) -> None:
        self._close_open(out)
        reason = normalise_finish(raw) if raw is not None else FinishReason.STOP
        if reason is FinishReason.STOP and self._calls:
            reason = FinishReason.TOOL_CALLS
        self._msg.finish_reason, self._msg.raw_finish_reason = reason, raw
        out.append(ev.MessageFinished(reason, raw))

    def _truncate(self, out: list) -> None:
        self._close_open(out)
