"""What the three provider decoders share: the core stream they sit on, the
builders of an answer's parts, and the end-of-stream rule.

A provider decoder is sans-IO like the core: feed(bytes) -> events,
close() -> events, never raising on bad input. It passes the core's events
through when they mean the same for every protocol (text, reasoning,
usage, errors, warnings) and turns the protocol-specific ones (blocks,
items, tool-call pieces, finish records) into the common events of
agent.stream.decoders.events, while building the final Message. Events
the core had to drop are counted by reason (agent/stream/decoders/damage.py)
into the Message's dropped_events.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.stream.decoder import (DEFAULT_BUFFER_SIZE, NO_PACKED_CODE, StreamDecoder,
                                  packed_code)
from agent.stream.records import (
    DecodeWarning,
    Protocol,
    ReasoningDelta,
    TextDelta,
    WarningCode,
)
from agent.stream.decoders.damage import dropped_code
from agent.stream.decoders.events import MessageIncomplete, ToolCallDone
from agent.stream.message import (
    ArgumentsError,
    Message,
    TextPart,
    ThinkingPart,
    ToolCall,
    parse_arguments,
)


class TextBuilder:
    """A text part under construction: pieces joined once, at the end."""
    __slots__ = ("pieces",)

    def __init__(self) -> None:
        self.pieces: list[str] = []

    def build(self) -> TextPart:
        return TextPart("".join(self.pieces))


class ThinkingBuilder:
    __slots__ = ("pieces", "signature", "redacted_data", "item_id", "summary_index", "opaque")

    def __init__(self, item_id: str | None = None, summary_index: int | None = None,
                 redacted_data: str | None = None) -> None:
        self.pieces: list[str] = []
        self.signature: str | None = None
        self.redacted_data = redacted_data
        self.item_id = item_id
        self.summary_index = summary_index
        self.opaque: str | None = None

    def build(self) -> ThinkingPart:
        return ThinkingPart("".join(self.pieces), self.signature, self.redacted_data,
                            self.item_id, self.summary_index, self.opaque)


DEFAULT_MAX_ARGUMENTS = 64 * 1024  # bytes of one call's arguments
_PIECES = (TextDelta, ReasoningDelta)  # the deltas feed()'s short way continues


class CallBuilder:
    """A tool call under construction; `call` is its position in the message.
    Arguments past max_arguments bytes are counted, not kept: a model cannot
    make the daemon hold (or echo, or store) more than that of one call.
    A call that lost bytes of its arguments on the way (lose()) is never
    whole again: it finishes as that error, its arguments not kept."""
    __slots__ = ("call", "id", "name", "item_id", "pieces", "done", "size", "max_arguments",
                 "initial", "initial_lost", "lost")

    def __init__(self, call: int, id: str | None, name: str | None,
                 item_id: str | None = None, *,
                 max_arguments: int = DEFAULT_MAX_ARGUMENTS) -> None:
        self.call = call
        self.id = id
        self.name = name
        self.item_id = item_id
        self.pieces: list[str] = []
        self.done: ToolCall | None = None
        self.size = 0  # bytes of the arguments so far, kept or not
        self.max_arguments = max_arguments
        # the arguments given whole before any piece (Anthropic's
        # content_block_start input): they stand when no piece follows
        self.initial: str | None = None
        # ... or the loss of them (an event over the buffer): it stands
        # as initial would, when no piece follows
        self.initial_lost: tuple[ArgumentsError, str] | None = None
        self.lost: tuple[ArgumentsError, str] | None = None  # the first loss

    def add(self, piece: str) -> None:
        # most argument pieces are ASCII: their length is their size, no copy
        self.size += len(piece) if piece.isascii() else len(piece.encode("utf-8"))
        if self.size > self.max_arguments:
            self.pieces.clear()
        else:
            self.pieces.append(piece)

    def lose(self, error: ArgumentsError, detail: str) -> None:
        """Bytes of the arguments were lost (an event or a piece dropped):
        what arrives is not what the model sent. The first loss is named."""
        if self.done is None and self.lost is None:
            self.lost = (error, detail)

    def finish(self, arguments: str | None = None, truncated: bool = False,
               checked: bool = False) -> ToolCall:
        """Complete the call once: parse its arguments (checked: the core has
        already read them as strict JSON), or mark it cut off, too large or
        damaged (its arguments then empty)."""
        if self.done is None:
            if arguments is None and not self.size:
                if self.initial_lost is not None:
                    self.lose(*self.initial_lost)
                elif self.initial is not None:
                    arguments = self.initial
            size = self.size if arguments is None else len(arguments.encode("utf-8"))
            if size > self.max_arguments:
                call = ToolCall(self.id, self.name, "", item_id=self.item_id,
                                error=ArgumentsError.TOO_LARGE,
                                error_detail=f"the arguments are {size} bytes, more than the "
                                             f"limit of {self.max_arguments}; not kept")
                self.done = call
                return call
            if self.lost is not None:
                self.done = ToolCall(self.id, self.name, "", item_id=self.item_id,
                                     error=self.lost[0], error_detail=self.lost[1])
                return self.done
            call = ToolCall(self.id, self.name,
                            "".join(self.pieces) if arguments is None else arguments,
                            item_id=self.item_id)
            if truncated:
                call.error = ArgumentsError.TRUNCATED
                call.error_detail = "the stream ended before the call's arguments did"
            else:
                call.complete = True
                parse_arguments(call, checked)
            self.done = call
        return self.done

    def build(self) -> ToolCall:
        """The finished call, or a snapshot of one still arriving (complete
        False, no error yet): reading a message mid-stream changes nothing."""
        if self.done is not None:
            return self.done
        return ToolCall(self.id, self.name, "".join(self.pieces) if self.size or self.initial is None
                        else self.initial, item_id=self.item_id)


@dataclass(slots=True)
class OtherPart:
    """An output item or block of a type we do not know, carried through."""
    type: str | None
    raw: bytes | None

    def build(self) -> "OtherPart":
        return self


class ProviderDecoder:
    """Base of the three decoders. A subclass sets PROTOCOL and END and
    defines _handle(core_events, out), which turns the core's events into
    common ones (setting self._ended at the protocol's end), and
    _truncate(out), which closes what an early end of body left open."""

    PROTOCOL: Protocol
    END: str  # what the protocol's end looks like, for MessageIncomplete
    # the warning paths of a tool call's argument piece: a DELTA_ELIDED
    # warning with one of them lost bytes of a call's arguments
    ARGUMENT_PATHS: frozenset[str] = frozenset()

    def __init__(self, buffer_size: int = DEFAULT_BUFFER_SIZE,
                 max_arguments: int = DEFAULT_MAX_ARGUMENTS) -> None:
        self._core = StreamDecoder(self.PROTOCOL, buffer_size)
        self._buffer_size = buffer_size
        self._max_arguments = max_arguments  # of each tool call, in bytes
        self._ended = False   # the protocol's end was seen
        self._closed = False
        self._after_end_warned = False
        self.dropped_events: dict[str, int] = {}  # reason -> events the core dropped
        # feed()'s short way: the packed code (decoder.packed_code) of the
        # delta that continues the part in progress, its class and index,
        # and where that part's pieces go
        self._continuing = NO_PACKED_CODE
        self._continuing_class: type | None = None
        self._continuing_index = -1
        self._add_piece = None
        self._core_feed = self._core._feed

    def feed(self, data: bytes) -> list:
        if type(data) is not bytes or self._closed:
            events = self._core.feed(data)  # made bytes, or refused after close
        else:
            # The usual read: one piece of the part the last read's delta
            # went to, told by the core's packed return. Passed on as it
            # came, the core's feed() and _handle's loop skipped: one C
            # call that returns the piece's str, one event.
            n = self._core_feed(data, self._continuing)
            if type(n) is str:
                self._add_piece(n)
                return [self._continuing_class(self._continuing_index, n)]
            # a packed return writes its one record too
            events = self._core._unpacked(n if n >= 0 else 1, data)
        out: list = []
        self._handle(events, out)
        self._continuing = NO_PACKED_CODE
        last = events[-1] if events and not self._ended else None
        if type(last) in _PIECES:
            builder = self._continued(last)
            if builder is not None:
                self._continuing = packed_code(last)
                self._continuing_class, self._continuing_index = type(last), last.index
                self._add_piece = builder.pieces.append
        return out

    def _continued(self, delta):
        """The builder that _handle gave this text or reasoning delta's text
        to, if a next delta of its class and index goes to it too; None when
        that is not certain (each goes through _handle then)."""
        return None

    def _pass_through(self, event, out: list) -> None:
        """A core event that means the same for every protocol (ProviderError,
        DecodeWarning, FramingError, Truncated, UnknownField), counted when it
        stands for an event dropped whole, and then the damage of the calls
        it may have carried bytes of (_lost). Counted here, on the rare branch,
        rather than by a walk over every feed's output."""
        code = dropped_code(event)
        out.append(event)
        if code is not None:
            self.dropped_events[code] = self.dropped_events.get(code, 0) + 1
            self._lost(event, code, out)

    def _lost(self, event, code: str, out: list) -> None:
        """An event dropped whole, or a delta's piece. A piece elided from an
        event over the buffer is named by its path: an argument piece lost
        bytes of the calls still open, which then never run. (A whole event
        dropped is not known to have carried arguments: it is counted and
        warned, the calls are kept, docs/stream-core.md.)"""
        if code == "delta_elided" and event.detail in self.ARGUMENT_PATHS:
            for call in self._open_calls():
                call.lose(ArgumentsError.TOO_LARGE, self._too_large_piece())

    def _too_large_piece(self) -> str:
        return (f"a piece of the arguments came in an event over the stream buffer of "
                f"{self._buffer_size} bytes and was lost; what arrived is not kept")

    def _open_calls(self) -> list[CallBuilder]:
        """The calls whose arguments are still arriving."""
        return [c for c in self._calls if c.done is None]

    def close(self) -> list:
        """End of body: pending events, then what was left unfinished."""
        if self._closed:
            return []
        self._closed = True
        out: list = []
        self._handle(self._core.close(), out)
        if not self._ended:
            self._truncate(out)
            out.append(MessageIncomplete(f"the stream ended without {self.END}"))
        return out

    def _after_end(self, event, out: list) -> bool:
        """Data after the end sentinel is not decoded, and reported once, naming
        its first record: the core merges the deltas of one read, so a warning
        per record would count the reads, not the data."""
        if self._ended:
            if not self._after_end_warned:
                self._after_end_warned = True
                out.append(DecodeWarning(WarningCode.AFTER_END, type(event).__name__, None))
            return True
        return False

    @staticmethod
    def _done(builder: CallBuilder, out: list, choice: int = 0, **finish) -> None:
        if builder.done is None:
            out.append(ToolCallDone(builder.call, builder.finish(**finish), choice))


def build_message(message: Message, parts: list, dropped_events: dict[str, int]) -> Message:
    message.parts = [p.build() for p in parts]
    message.dropped_events = dict(dropped_events)
    return message
