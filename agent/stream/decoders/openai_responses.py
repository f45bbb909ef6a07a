"""OpenAI Responses API (POST /v1/responses with stream: true).

Output items are keyed by their id (`item_id` on deltas), never by position:
items may complete out of order, and an item's deltas may interleave with
another's. The final Message lists the items' parts in output_index order:
a message item gives one TextPart per content part, a reasoning item one
ThinkingPart per summary_index (an item with no summary text gives one empty
ThinkingPart, so its id survives), a function_call a ToolCall, an item of a
type we do not know an OtherPart. A reasoning item's output_item.done, its
whole JSON as it came (id, summary, encrypted_content when asked for), is
kept byte-exact as the item's first ThinkingPart's `opaque`, to be sent back
as it is (agent/providers/requests.py); not when a string of it was elided
(an event over the stream buffer): a damaged item is not sent back.

A function call's arguments stay a string end to end. The string of its
output_item.done is authoritative: when it differs from the joined deltas it
wins, with a DecodeWarning(ARGUMENTS_MISMATCH); a done item whose status is
"incomplete" gives a TRUNCATED call. A call never done completes at
response.completed from its deltas, and is TRUNCATED at response.incomplete,
response.failed or an early end of body.

A field the core spoiled (absent or null where the event needs it,
MISSING_FIELD; of a wrong type, FIELD_TYPE) is absent here:
a delta without item_id falls back to the item at its output_index, and an
item added without an id takes the first id a delta names for that index.
"""

from __future__ import annotations

import json

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
from agent.stream.message import (ArgumentsError, FinishReason, Message, merge_usage,
                                  normalise_finish)

_TEXT = ItemKind.TEXT
_THINKING = ItemKind.THINKING
_TOOL_USE = ItemKind.TOOL_USE
_OTHER = ItemKind.OTHER
_NO_INDEX = 1 << 62  # items whose output_index was spoiled sort last
_ELIDED = "\0"  # what a string the framer elided (sse.h) reads as


def _object(raw: bytes | None) -> dict:
    """An item's raw JSON as a dict; {} otherwise. The core already checked
    it is strict JSON, so the stdlib parser (several times faster here than
    agent.stream.loads) reads it the same."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:  # includes UnicodeDecodeError: invalid UTF-8 in raw
        return {}
    return value if isinstance(value, dict) else {}


def _replayable(raw: bytes | None) -> str | None:
    """A done reasoning item's JSON text, to be sent back byte-exact; None
    when there is none or a string of it was elided (sse.h writes an elided
    string as "\\u0000"; a provider's item never holds that escape)."""
    if not raw or b"\\u0000" in raw:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


class _Item:
    """One output item: its builders, found by item id."""
    __slots__ = ("item_id", "index", "seq", "kind", "texts", "last_content",
                 "refusals", "thinking", "call", "other", "opaque")

    def __init__(self, item_id: str | None, index: int, seq: int, kind: ItemKind) -> None:
        self.item_id = item_id
        self.index = index
        self.seq = seq
        self.kind = kind
        self.texts: dict[int, TextBuilder] = {}
        self.last_content = 0
        self.refusals: dict[int, list[str]] = {}
        self.thinking: dict[int | None, ThinkingBuilder] = {}
        self.call: CallBuilder | None = None
        self.other: OtherPart | None = None
        self.opaque: str | None = None  # a reasoning item's done JSON, as it came

    def order(self) -> tuple:
        return (self.index if self.index >= 0 else _NO_INDEX, self.seq)

    def builders(self) -> list:
        out: list = []
        if self.thinking:
            out += [self.thinking[k] for k in
                    sorted(self.thinking, key=lambda k: (k is None, k or 0))]
        elif self.kind is _THINKING:
            out.append(ThinkingBuilder(self.item_id))  # no summary: keep the item
        if self.opaque is not None and out:
            out[0].opaque = self.opaque
        out += [self.texts[k] for k in sorted(self.texts)]
        if self.call is not None:
            out.append(self.call)
        if self.other is not None:
            out.append(self.other)
        return out


class OpenAIResponsesDecoder(ProviderDecoder):
    PROTOCOL = Protocol.OPENAI_RESPONSES
    END = "response.completed, response.incomplete or response.failed"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._items: dict = {}                  # item id (or ("@", index)) -> _Item
        self._by_index: dict[int, _Item] = {}   # first item seen at each output_index
        self._all: list[_Item] = []
        self._calls: list[CallBuilder] = []
        self._id: str | None = None
        self._model: str | None = None
        self._usage = None
        self._citations: list = []
        self._finish: FinishReason | None = None
        self._raw_finish: str | None = None

    @property
    def message(self) -> Message:
        m = Message(self._id, self._model)
        m.usage = self._usage
        m.citations = list(self._citations)
        m.finish_reason, m.raw_finish_reason = self._finish, self._raw_finish
        parts: list = []
        refusal: list[str] = []
        for item in sorted(self._all, key=_Item.order):
            parts += item.builders()
            for k in sorted(item.refusals):
                refusal += item.refusals[k]
        m.refusal = "".join(refusal) if refusal else None
        return build_message(m, parts, self.dropped_events)

    # ---- items ----

    def _new(self, item_id: str | None, index: int, kind: ItemKind, out: list,
             call_id: str | None = None, name: str | None = None) -> _Item:
        item = _Item(item_id, index, len(self._all), kind)
        self._all.append(item)
        self._items[item_id if item_id is not None else ("@", index)] = item
        self._by_index.setdefault(index, item)
        if kind is _TOOL_USE:
            self._new_call(item, call_id, name, out)
        return item

    def _new_call(self, item: _Item, call_id: str | None, name: str | None,
                  out: list) -> CallBuilder:
        call = item.call = CallBuilder(len(self._calls), call_id, name, item.item_id,
                                       max_arguments=self._max_arguments)
        self._calls.append(call)
        out.append(ev.ToolCallOpened(call.call, call_id, name))
        return call

    def _find(self, item_id: str | None, index: int) -> _Item | None:
        if item_id is not None:
            item = self._items.get(item_id)
            if item is None:
                # an item added without (or with a spoiled) id takes this one
                item = self._by_index.get(index)
                if item is None or item.item_id is not None:
                    return None
                item.item_id = item_id
                self._items[item_id] = item
                if item.call is not None and item.call.item_id is None:
                    item.call.item_id = item_id
            return item
        return self._items.get(("@", index)) or self._by_index.get(index)

    def _item(self, item_id: str | None, index: int, kind: ItemKind, out: list) -> _Item:
        """The item a delta names; one made up, with a warning, if unknown."""
        item = self._find(item_id, index)
        if item is None:
            out.append(rec.DecodeWarning(
                WarningCode.UNKNOWN_BLOCK,
                f"output item {item_id if item_id is not None else index} was never added", None))
            item = self._new(item_id, index, kind, out)
        return item

    def _call_of(self, item_id: str | None, index: int, out: list) -> CallBuilder:
        """The call an argument delta names, made as _item() makes an item."""
        item = self._item(item_id, index, _TOOL_USE, out)
        return item.call or self._new_call(item, None, None, out)

    def _lost(self, event, code: str, out: list) -> None:
        """Every Responses delta's path is "delta": the elided event's type
        says whether the piece was arguments, and its item id whose."""
        if code != "delta_elided":
            super()._lost(event, code, out)
            return
        raw = _object(event.raw)
        if raw.get("type") != "response.function_call_arguments.delta":
            return
        item_id, index = raw.get("item_id"), raw.get("output_index")
        self._call_of(item_id if isinstance(item_id, str) else None,
                      index if type(index) is int and index >= 0 else -1,
                      out).lose(ArgumentsError.TOO_LARGE, self._too_large_piece())

    # ---- events ----

    def _handle(self, events: list, out: list) -> None:
        append = out.append
        for e in events:
            kind = type(e)
            if self._ended and self._after_end(e, out):
                continue
            if kind is rec.TextDelta:
                item = self._item(e.item_id, e.index, _TEXT, out)
                ci = e.content_index
                if ci is None:
                    ci = item.last_content
                item.last_content = ci
                b = item.texts.get(ci)
                if b is None:
                    b = item.texts[ci] = TextBuilder()
                b.pieces.append(e.text)
                append(e)
            elif kind is rec.ToolArgsDelta:
                call = self._call_of(e.item_id, e.index, out)
                call.add(e.text)
                append(ev.ToolCallDelta(call.call, e.text))
            elif kind is rec.ReasoningDelta:
                item = self._item(e.item_id, e.index, _THINKING, out)
                b = item.thinking.get(e.summary_index)
                if b is None:
                    b = item.thinking[e.summary_index] = ThinkingBuilder(item.item_id,
                                                                         e.summary_index)
                b.pieces.append(e.text)
                append(e)
            elif kind is rec.BlockStart:
                self._start(e, out)
            elif kind is rec.BlockStop:
                self._stop(e, out)
            elif kind is rec.RefusalDelta:
                item = self._item(e.item_id, e.index, _TEXT, out)
                ci = e.content_index
                if ci is None:
                    ci = item.last_content
                item.last_content = ci
                item.refusals.setdefault(ci, []).append(e.text)
                append(e)
            elif kind is rec.Citation:
                self._citations.append(_object(e.raw) if e.raw else e.raw)
                append(e)
            elif kind is rec.Finish:
                self._finished(e, out)
            elif kind is rec.Usage:
                self._usage = merge_usage(self._usage, e)
                append(e)
            elif kind is rec.Meta:
                self._id = e.id if e.id is not None else self._id
                self._model = e.model if e.model is not None else self._model
            else:
                self._pass_through(e, out)

    def _start(self, e: rec.BlockStart, out: list) -> None:
        kind = e.kind if e.kind is not ItemKind.REDACTED_THINKING else _THINKING
        item_id = e.item_id
        if kind is _OTHER:
            found = _object(e.raw).get("id")
            item_id = found if isinstance(found, str) else None
            out.append(rec.DecodeWarning(WarningCode.UNKNOWN_ITEM_TYPE, e.unknown_type, e.raw))
        key = item_id if item_id is not None else ("@", e.index)
        item = self._items.get(key)
        if item is None:
            item = self._new(item_id, e.index, kind, out, e.call_id, e.name)
        else:
            # added again, or after its deltas (which warned): fill what is missing
            item.kind = kind
            if item.index < 0 <= e.index:
                item.index = e.index
                self._by_index.setdefault(e.index, item)
            if kind is _TOOL_USE:
                call = item.call
                if call is None:
                    self._new_call(item, e.call_id, e.name, out)
                else:
                    call.id = call.id if call.id is not None else e.call_id
                    call.name = call.name if call.name is not None else e.name
        if kind is _OTHER and item.other is None:
            item.other = OtherPart(e.unknown_type, e.raw)

    def _stop(self, e: rec.BlockStop, out: list) -> None:
        kind = e.kind if e.kind is not ItemKind.REDACTED_THINKING else _THINKING
        item = self._find(e.item_id, e.index)
        raw = None
        if item is None:
            name = e.item_id if e.item_id is not None else e.index
            out.append(rec.DecodeWarning(
                WarningCode.UNKNOWN_BLOCK, f"output item {name} done but never added", e.raw))
            item = self._new(e.item_id, e.index, kind, out, e.call_id)
            if kind is _OTHER:
                raw = _object(e.raw)
                t = raw.get("type")
                item.other = OtherPart(t if isinstance(t, str) else None, e.raw)
        if kind is _OTHER:
            if item.other is not None:
                item.other.raw = e.raw  # the finished item
            return
        if kind is _THINKING:
            item.opaque = _replayable(e.raw)
            return
        if kind is not _TOOL_USE:
            return
        call = item.call or self._new_call(item, e.call_id, None, out)
        if call.done is not None:
            return
        if raw is None:
            # parse the done item only when it can tell something new
            raw = _object(e.raw) if call.name is None or (
                e.raw is not None and b'"incomplete"' in e.raw) else {}
        if call.id is None:
            call.id = e.call_id
        if call.name is None and isinstance(raw.get("name"), str):
            call.name = raw["name"]
        args = e.arguments
        if args is None and not call.size and e.raw is not None \
                and _object(e.raw).get("arguments") == _ELIDED:
            # the arguments came only here, in an event over the buffer:
            # elided, and no delta carried them
            call.lose(ArgumentsError.TOO_LARGE,
                      f"the arguments came only in output_item.done, an event over the "
                      f"stream buffer of {self._buffer_size} bytes, and were lost")
        if args is not None and call.pieces:
            joined = "".join(call.pieces)
            if joined != args:
                out.append(rec.DecodeWarning(
                    WarningCode.ARGUMENTS_MISMATCH,
                    f"call {call.call}: output_item.done has {len(args)} characters of "
                    f"arguments, the deltas {len(joined)}", e.raw))
        self._done(call, out, arguments=args, truncated=raw.get("status") == "incomplete")

    def _finished(self, e: rec.Finish, out: list) -> None:
        status = e.status
        if status is rec.FinishStatus.COMPLETED:
            for call in self._calls:
                self._done(call, out)
            reason = FinishReason.TOOL_CALLS if self._calls else FinishReason.STOP
        else:
            for call in self._calls:
                self._done(call, out, truncated=True)
            reason = (FinishReason.ERROR if status is rec.FinishStatus.FAILED
                      else normalise_finish(e.reason))
        self._finish, self._raw_finish = reason, e.reason
        self._ended = True
        out.append(ev.MessageFinished(reason, e.reason))

    def _truncate(self, out: list) -> None:
        for call in self._calls:
            self._done(call, out, truncated=True)
