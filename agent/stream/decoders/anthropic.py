"""Anthropic Messages.

Content blocks are keyed by their `index`, never by arrival order: deltas of
two blocks may alternate, and the final Message lists its parts in index
order. A tool_use block's input_json pieces are joined and parsed once, at
its content_block_stop. Arguments that do not parse there are held until
message_delta says why the answer stopped: with stop_reason "max_tokens" the
call was cut off (TRUNCATED, partial arguments kept), otherwise the model
wrote bad JSON (INVALID_JSON). Held calls are done at message_stop, or as
TRUNCATED when the body ends before the stop reason is known.

Out of the ordinary, and what happens (docs/truth-table-anthropic.md):
- a delta for a block never started: DecodeWarning(UNKNOWN_BLOCK), and the
  block is made from the delta's kind so nothing is lost;
- a block of a type we do not know: OtherPart in the message, and
  DecodeWarning(UNKNOWN_ITEM_TYPE);
- a second start or stop of one block: DecodeWarning(UNKNOWN_BLOCK) naming
  what was kept; a delta whose kind does not fit its block (text_delta for a
  tool_use block), a tool argument piece after its block's stop: one
  DecodeWarning(UNKNOWN_BLOCK) per block and cause, however the reads split;
- a block event whose `index` is absent, null or not a number: the core
  warns (MISSING_FIELD or FIELD_TYPE "index") and drops the event; a number
  that is no usable index (negative, a fraction, over int64): the core warns
  FIELD_TYPE "index" and says -1, and the block is kept as block -1, which
  sorts first.

Events out: TextDelta and ReasoningDelta (the core's objects), Citation (the
core's; parsed into Message.citations, in block order, then arrival order),
ToolCallOpened, ToolCallDelta, ToolCallDone, MessageFinished, Usage, and the core's
ProviderError, DecodeWarning, FramingError, Truncated and UnknownField.
Signatures and Meta only feed the Message.
"""

from __future__ import annotations

from agent.stream import records as rec
from agent.stream.decoders import events as ev
from agent.stream.decoders.base import (
    CallBuilder,
    OtherPart,
    ProviderDecoder,
    TextBuilder,
    ThinkingBuilder,
    build_message,
)
from agent.stream.records import ItemKind, Protocol, WarningCode
from agent.stream.jsonscan import JSONError, loads
from agent.stream.message import ArgumentsError, Message, merge_usage, normalise_finish

_TRUNCATED_DETAIL = "max_tokens cut the call's arguments off"
_CUT_DETAIL = "the stream ended before the call's arguments did"

_DELTA_NAME = {
    rec.TextDelta: "text_delta",
    rec.ReasoningDelta: "thinking_delta",
    rec.SignatureDelta: "signature_delta",
    rec.ToolArgsDelta: "input_json_delta",
}
_PIECE_BUILDER = {rec.TextDelta: TextBuilder, rec.ReasoningDelta: ThinkingBuilder}
_START_BUILDER = {
    ItemKind.TEXT: TextBuilder,
    ItemKind.THINKING: ThinkingBuilder,
    ItemKind.REDACTED_THINKING: ThinkingBuilder,
    ItemKind.TOOL_USE: CallBuilder,
}
_BUILDER_NAME = {
    TextBuilder: "text",
    ThinkingBuilder: "thinking",
    CallBuilder: "tool_use",
    OtherPart: "unknown-type",
}


class AnthropicDecoder(ProviderDecoder):
    PROTOCOL = Protocol.ANTHROPIC
    END = "message_stop"
    ARGUMENT_PATHS = frozenset({"delta.partial_json"})

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._blocks: dict[int, object] = {}   # index -> builder
        self._stopped: set[int] = set()
        self._implicit: set[int] = set()       # blocks made by a delta, not a start
        self._ignored: set[tuple] = set()      # (block index, why) of deltas ignored
        self._calls: list[CallBuilder] = []    # in start order
        self._started: CallBuilder | None = None  # the call the last start made or named
        self._held: list[CallBuilder] = []     # stopped, arguments did not parse
        self._msg = Message()
        self._citations: dict[int, list] = {}  # block index -> parsed citations
        self._usage: rec.Usage | None = None
        self._stop_reason: str | None = None

    @property
    def message(self) -> Message:
        """The answer so far; parts in block index order. Asking mid-stream
        changes nothing: a call still open shows as it stands (complete
        False, no error yet)."""
        m = self._msg
        m.usage = self._usage
        m.citations = [c for _, cs in sorted(self._citations.items()) for c in cs]
        return build_message(m, [b for _, b in sorted(self._blocks.items())],
                             self.dropped_events)

    # ---- dispatch ----

    def _handle(self, events: list, out: list) -> None:
        append = out.append
        for e in events:
            kind = type(e)
            if self._ended and self._after_end(e, out):
                continue
            if kind is rec.TextDelta:
                b = self._block(e, TextBuilder, out)
                if b is not None:
                    b.pieces.append(e.text)
                    append(e)
            elif kind is rec.ToolArgsDelta:
                self._args(e, out)
            elif kind is rec.ReasoningDelta:
                b = self._block(e, ThinkingBuilder, out)
                if b is not None:
                    b.pieces.append(e.text)
                    append(e)
            elif kind is rec.SignatureDelta:
                b = self._block(e, ThinkingBuilder, out)
                if b is not None:
                    b.signature = e.signature  # a later one replaces it
            elif kind is rec.BlockStart:
                self._start(e, out)
            elif kind is rec.BlockStop:
                self._stop(e, out)
            elif kind is rec.Citation:
                self._citation(e, out)
            elif kind is rec.Usage:
                self._usage = merge_usage(self._usage, e)
                append(e)
            elif kind is rec.Meta:
                m = self._msg
                m.id = e.id if e.id is not None else m.id
                m.model = e.model if e.model is not None else m.model
            elif kind is rec.Finish:
                self._finish(e, out)
            elif kind is rec.StreamEnd:
                self._ended = True
                self._complete_calls(out, truncated=self._stop_reason == "max_tokens")
            else:
                self._pass_through(e, out)

    # ---- blocks ----

    def _warn(self, out: list, detail: str, code: WarningCode = WarningCode.UNKNOWN_BLOCK) -> None:
        out.append(rec.DecodeWarning(code, detail, None))

    def _ignore(self, out: list, key: tuple, detail: str) -> None:
        """Warn once per block and cause: the core merges the deltas of one
        read, so a warning (or its text) per record would depend on the reads."""
        if key not in self._ignored:
            self._ignored.add(key)
            self._warn(out, detail)

    def _new_call(self, index: int, call_id: str | None, name: str | None,
                  out: list) -> CallBuilder:
        call = CallBuilder(len(self._calls), call_id, name,
                           max_arguments=self._max_arguments)
        self._calls.append(call)
        self._blocks[index] = call
        out.append(ev.ToolCallOpened(call.call, call.id, call.name))
        return call

    def _continued(self, delta):
        b = self._blocks.get(delta.index)
        return b if type(b) is _PIECE_BUILDER[type(delta)] else None

    def _block(self, e, want: type, out: list):
        """The block a delta extends, made if it was never started; None when
        the delta does not fit the block (then a warning says so)."""
        b = self._blocks.get(e.index)
        if b is None:
            self._warn(out, f"{_DELTA_NAME[type(e)]} for block {e.index}, never started: "
                            f"made a {_BUILDER_NAME[want]} block")
            self._implicit.add(e.index)
            if want is CallBuilder:
                return self._new_call(e.index, None, None, out)
            b = self._blocks[e.index] = want()
            return b
        if type(b) is not want:
            self._ignore(out, (e.index, type(e)),
                         f"{_DELTA_NAME[type(e)]} for {_BUILDER_NAME[type(b)]} block {e.index}: ignored")
            return None
        return b

    def _start(self, e: rec.BlockStart, out: list) -> None:
        self._started = None
        old = self._blocks.get(e.index)
        if old is not None:
            # A repeated start. A block made by an early delta takes a start
            # of its kind (a call gets the id and name it lacked); anything
            # else keeps the first block.
            if e.index in self._implicit and type(old) is _START_BUILDER.get(e.kind):
                self._implicit.discard(e.index)
                if type(old) is CallBuilder:
                    old.id, old.name = e.call_id, e.name
                    self._input(old, e)
                    if old.done is not None:
                        old.done.id, old.done.name = e.call_id, e.name
                elif e.kind is ItemKind.REDACTED_THINKING:
                    old.redacted_data = e.call_id
                named = "" if e.name is None else f" {e.name!r}"
                self._warn(out, f"block {e.index} started after its deltas "
                                f"({e.kind.name.lower()}{named})")
                return
            self._warn(out, f"block {e.index} started again as {e.kind.name.lower()}: "
                            f"kept the first ({_BUILDER_NAME[type(old)]})")
            return
        if e.index < 0:
            self._warn(out, "content_block_start without a usable index: kept as block -1")
        k = e.kind
        if k is ItemKind.TEXT:
            self._blocks[e.index] = TextBuilder()
        elif k is ItemKind.THINKING:
            self._blocks[e.index] = ThinkingBuilder()
        elif k is ItemKind.REDACTED_THINKING:
            # the core puts a redacted block's data in call_id (s1)
            self._blocks[e.index] = ThinkingBuilder(redacted_data=e.call_id)
        elif k is ItemKind.TOOL_USE:
            self._input(self._new_call(e.index, e.call_id, e.name, out), e)
        else:
            self._blocks[e.index] = OtherPart(e.unknown_type, e.raw)
            out.append(rec.DecodeWarning(WarningCode.UNKNOWN_ITEM_TYPE, e.unknown_type, e.raw))

    def _input(self, call: CallBuilder, e: rec.BlockStart) -> None:
        """The input a tool_use start gave whole (the core sends it when it
        is not {}): the call's arguments when no input_json_delta carries
        any, as the SDK keeps content_block.input until a piece replaces it."""
        self._started = call
        if e.raw is not None:
            call.initial = e.raw.decode("utf-8", "replace")

    def _lost(self, event, code: str, out: list) -> None:
        """A start's input elided (the core warns right after the start):
        lost for the call that start made, if no piece brings its input."""
        if code == "delta_elided" and event.detail == "content_block.input":
            if self._started is not None:
                self._started.initial_lost = (
                    ArgumentsError.TOO_LARGE,
                    f"the input came whole in content_block_start, an event over the stream "
                    f"buffer of {self._buffer_size} bytes, and was lost")
            return
        super()._lost(event, code, out)

    def _args(self, e: rec.ToolArgsDelta, out: list) -> None:
        call = self._block(e, CallBuilder, out)
        if call is None:
            return
        if call.done is not None:
            self._ignore(out, (e.index, rec.BlockStop),
                         f"input_json_delta for block {e.index} after its content_block_stop: ignored")
            return
        call.add(e.text)
        out.append(ev.ToolCallDelta(call.call, e.text))

    def _stop(self, e: rec.BlockStop, out: list) -> None:
        b = self._blocks.get(e.index)
        if b is None:
            self._warn(out, f"content_block_stop for block {e.index}, never started")
            return
        if e.index in self._stopped:
            self._warn(out, f"content_block_stop for block {e.index} again")
            return
        self._stopped.add(e.index)
        if type(b) is CallBuilder and b.done is None:
            call = b.finish()
            if call.error is ArgumentsError.INVALID_JSON:
                self._held.append(b)  # cut off or bad JSON: message_delta tells
            else:
                out.append(ev.ToolCallDone(b.call, call))

    def _citation(self, e: rec.Citation, out: list) -> None:
        if e.index not in self._blocks:
            self._warn(out, f"citations_delta for block {e.index}, never started: citation kept")
        try:
            value = loads(e.raw or b"")
        except JSONError as exc:  # the core checked it: not expected
            out.append(rec.DecodeWarning(WarningCode.BAD_JSON, f"citation: {exc}", e.raw))
            return
        self._citations.setdefault(e.index, []).append(value)
        out.append(e)

    # ---- the end ----

    def _finish(self, e: rec.Finish, out: list) -> None:
        m = self._msg
        m.finish_reason = normalise_finish(e.reason)
        m.raw_finish_reason = e.reason
        m.stop_sequence = e.stop_sequence
        self._stop_reason = e.reason
        self._complete_calls(out, truncated=e.reason == "max_tokens")
        out.append(ev.MessageFinished(m.finish_reason, e.reason))

    def _complete_calls(self, out: list, truncated: bool) -> None:
        """Done every call not yet reported: open ones are parsed now; those
        whose arguments do not parse are TRUNCATED when `truncated` (max_tokens,
        or an early end of body), else INVALID_JSON."""
        for b in self._calls:
            if b.done is None:
                b.finish()
                if b.done.error is ArgumentsError.INVALID_JSON:
                    self._held.append(b)
                else:
                    out.append(ev.ToolCallDone(b.call, b.done))
        held, self._held = self._held, []
        for b in sorted(held, key=lambda c: c.call):
            call = b.done
            if truncated:
                call.error = ArgumentsError.TRUNCATED
                call.complete = False
                call.error_detail = (_TRUNCATED_DETAIL if self._stop_reason == "max_tokens"
                                     else _CUT_DETAIL)
            out.append(ev.ToolCallDone(b.call, call))

    def _truncate(self, out: list) -> None:
        # The body ended before message_stop: what is open or held was cut.
        for b in self._calls:
            if b.done is None:
                self._done(b, out, truncated=True)
        self._complete_calls(out, truncated=True)
