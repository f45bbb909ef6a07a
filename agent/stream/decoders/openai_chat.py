"""OpenAI Chat Completions and compatible servers (Ollama, llama.cpp, vLLM,
DeepSeek, Azure).

Tool calls are keyed by their `index` within a choice; a server that omits it
(Ollama, Gemini's compatibility layer) gets call order: a head without index
starts a new call, arguments without index extend the latest one. Ids and
names are set once: DeepSeek and Qwen repeat them in every chunk, and a later
chunk never erases or extends them. Calls complete at the choice's
finish_reason or at [DONE]; a call that never got an id (Ollama, some
proxies) then gets `call_ha_<choice>_<position>`, so that its result can be
matched to it in the next request. A choice that [DONE] ends without a
finish_reason (some local servers send none) finished: `tool_calls` when it
called tools, else `stop`, with raw_finish_reason None saying it was inferred.
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
from agent.stream.records import Protocol
from agent.stream.message import FinishReason, Message, merge_usage, normalise_finish


class _Choice:
    __slots__ = ("message", "parts", "calls", "by_index", "last_call", "refusal")

    def __init__(self) -> None:
        self.message = Message()
        self.parts: list = []
        self.calls: list[CallBuilder] = []
        self.by_index: dict[int, CallBuilder] = {}
        self.last_call: CallBuilder | None = None
        self.refusal: list[str] = []


class OpenAIChatDecoder(ProviderDecoder):
    PROTOCOL = Protocol.OPENAI_CHAT
    END = "[DONE]"
    ARGUMENT_PATHS = frozenset({"choices[].delta.tool_calls[].function.arguments"})

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._choices: dict[int, _Choice] = {}
        self._id: str | None = None
        self._model: str | None = None
        self._usage = None

    @property
    def messages(self) -> list[Message]:
        """One message per choice, in choice order."""
        return [self._message(i) for i in sorted(self._choices)] or [self._message(0)]

    @property
    def message(self) -> Message:
        return self._message(0)

    def _message(self, index: int) -> Message:
        choice = self._choices.get(index) or _Choice()
        m = choice.message
        m.id, m.model, m.usage = self._id, self._model, self._usage
        m.refusal = "".join(choice.refusal) if choice.refusal else None
        return build_message(m, choice.parts, self.dropped_events)

    def _choice(self, index: int) -> _Choice:
        choice = self._choices.get(index)
        if choice is None:
            choice = self._choices[index] = _Choice()
        return choice

    def _continued(self, delta):
        return self._choice(delta.index).parts[-1]

    def _open_calls(self) -> list:
        return [c for choice in self._choices.values() for c in choice.calls if c.done is None]

    def _handle(self, events: list, out: list) -> None:
        append = out.append
        for e in events:
            kind = type(e)
            if self._ended and self._after_end(e, out):
                continue
            if kind is rec.TextDelta:
                parts = self._choice(e.index).parts
                if not parts or type(parts[-1]) is not TextBuilder:
                    parts.append(TextBuilder())
                parts[-1].pieces.append(e.text)
                append(e)
            elif kind is rec.ToolArgsDelta:
                self._args(e, out)
            elif kind is rec.ToolCallStart:
                self._start(e, out)
            elif kind is rec.ReasoningDelta:
                parts = self._choice(e.index).parts
                if not parts or type(parts[-1]) is not ThinkingBuilder:
                    parts.append(ThinkingBuilder())
                parts[-1].pieces.append(e.text)
                append(e)
            elif kind is rec.RefusalDelta:
                self._choice(e.index).refusal.append(e.text)
                append(e)
            elif kind is rec.Finish:
                self._finish(e, out)
            elif kind is rec.Usage:
                self._usage = merge_usage(self._usage, e)
                append(e)
            elif kind is rec.Meta:
                self._id = e.id if e.id is not None else self._id
                self._model = e.model if e.model is not None else self._model
            elif kind is rec.StreamEnd:
                self._ended = True
                for index, choice in sorted(self._choices.items()):
                    self._complete(choice, index, out)
                    if choice.message.finish_reason is None:
                        reason = FinishReason.TOOL_CALLS if choice.calls else FinishReason.STOP
                        choice.message.finish_reason = reason
                        out.append(ev.MessageFinished(reason, None, index))
            else:
                self._pass_through(e, out)

    def _start(self, e: rec.ToolCallStart, out: list) -> None:
        choice = self._choice(e.index)
        call = choice.by_index.get(e.tool_index) if e.tool_index is not None else None
        if call is None:
            call = CallBuilder(len(choice.calls), e.call_id, e.name,
                               max_arguments=self._max_arguments)
            choice.calls.append(call)
            choice.parts.append(call)
            if e.tool_index is not None:
                choice.by_index[e.tool_index] = call
            choice.last_call = call
            out.append(ev.ToolCallOpened(call.call, call.id, call.name, e.index))
            return
        # a repeated head: fill what was missing, never overwrite
        for attr, value, code in (("id", e.call_id, rec.WarningCode.TOOL_ID_CONFLICT),
                                  ("name", e.name, rec.WarningCode.TOOL_NAME_CONFLICT)):
            old = getattr(call, attr)
            if value is None or value == old:
                continue
            if old is None:
                setattr(call, attr, value)
            else:
                out.append(rec.DecodeWarning(code, f"call {call.call}: kept {old!r}, got {value!r}", None))

    def _args(self, e: rec.ToolArgsDelta, out: list) -> None:
        choice = self._choice(e.index)
        call = choice.by_index.get(e.tool_index) if e.tool_index is not None else choice.last_call
        if call is None:  # arguments before any head: a call with no id or name yet
            self._start(rec.ToolCallStart(e.index, e.tool_index, None, None, None), out)
            call = choice.calls[-1]
        call.add(e.text)
        out.append(ev.ToolCallDelta(call.call, e.text, e.index))

    def _finish(self, e: rec.Finish, out: list) -> None:
        index = 0 if e.index is None else e.index
        choice = self._choice(index)
        choice.message.finish_reason = normalise_finish(e.reason)
        choice.message.raw_finish_reason = e.reason
        self._complete(choice, index, out)
        out.append(ev.MessageFinished(choice.message.finish_reason, e.reason, index))

    def _truncate(self, out: list) -> None:
        for index, choice in sorted(self._choices.items()):
            self._complete(choice, index, out, truncated=True)

    def _complete(self, choice: _Choice, index: int, out: list, **finish) -> None:
        for call in choice.calls:
            if call.id is None and call.done is None:
                call.id = f"call_ha_{index}_{call.call}"
            self._done(call, out, index, **finish)
