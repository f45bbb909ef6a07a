"""The device handler interface: what a handler is given and what it offers.

A handler (SerialDevice, CommandDevice, ...) is configured by a
`[devices.NAME]` table. The hub (agent/devices/hub.py) runs each one in
its own task with its own bounded inbox, restarts it with backoff when
run() raises, and reaches its tools through call_tool(). Handlers never see
each other, and a handler never blocks the stream: while it is down, its
events are dropped and counted.

Speech devices (`speaks`: wyoming-tts, a command device with `speech =
true`) are what `announce` speaks on and `stop` silences: the hub gives them
an announcement as the deliveries of an answer (an Origin of the announce
door), and calls silence() when a stop concerns what they say.

A device receives Deliveries (agent/core/deliveries.py): a reply of an ask,
typed (agent/core/replies.py: Started, Delta, Reasoning, ToolCall,
ToolResult, Done, Error, and Sentence: the answer's text cut by the
segmenter for handlers that speak or display it), with its Origin. Its
`events` setting names the kinds it wants.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, ClassVar, Mapping, Protocol

import trio

from agent.core import replies
from agent.core.deliveries import KINDS, Delivery
from agent.settings.errors import SettingError, refuse_unknown
from agent.text.speech import SpeechOptions
from agent.tools.base import ToolError, ToolSpec

__all__ = ["Common", "Delivery", "Device", "DeviceSpec", "Inbox", "Overflow", "Prompt",
           "Requests", "SettingError", "ToolError", "ToolSpec", "refuse_unknown",
           "speech_options", "refuse_notices", "EVENT_TYPES", "SPEECH_KEYS"]

EVENT_TYPES = frozenset(KINDS)  # what a device's `events` setting may name


class Overflow(enum.Enum):
    """What a full inbox does with the next event."""
    BLOCK = "block"              # the stream waits, up to the device's block_timeout, then drops
                                 # (and drops at once until the device makes room again)
    DROP_OLDEST = "drop_oldest"  # the oldest queued event makes room
    COALESCE = "coalesce"        # text joins the newest queued text of its kind; else drop oldest


_SAID = (replies.Sentence, replies.Sound)  # what a speech device's `speaking` counts queued
SPEECH_KEYS = frozenset({"speech", "code_placeholder", "emoji", "speak_tool_calls"})
_PLACEHOLDER_MAX = 200


def speech_options(common: "Common", settings: Mapping[str, Any],
                   default: bool) -> SpeechOptions | None:
    """The speech keys of a device that may speak (agent/text/speech.py):
    None when `speech` is false, and its text goes out as the model wrote it."""
    speech = settings.get("speech", default)
    if not isinstance(speech, bool):
        raise SettingError("speech", "must be true or false")
    if not speech:
        extra = sorted(SPEECH_KEYS & set(settings) - {"speech"})
        if extra:
            raise SettingError(extra[0], "only with speech = true")
        return None
    placeholder = settings.get("code_placeholder", "")
    if not (isinstance(placeholder, str) and len(placeholder) <= _PLACEHOLDER_MAX
            and placeholder.isprintable()):
        raise SettingError("code_placeholder", f"a line of at most {_PLACEHOLDER_MAX} "
                                               "characters, said for a code block")
    emoji = settings.get("emoji", "drop")
    if emoji not in ("drop", "name"):
        raise SettingError("emoji", '"drop" or "name"')
    speak_tool_calls = settings.get("speak_tool_calls", False)
    if not isinstance(speak_tool_calls, bool):
        raise SettingError("speak_tool_calls", "must be true or false")
    if speak_tool_calls and "tool_call" not in common.events:
        raise SettingError("speak_tool_calls", 'the device must take "tool_call" events '
                                               "(its events setting)")
    return SpeechOptions(placeholder, emoji == "name", speak_tool_calls)


_NOTICES = ((replies.VoiceState.type, "the voice door's state", "VOICE"),
            (replies.TimerRing.type, "a timer ringing", "TIMER"))


def refuse_notices(common: "Common", kind: str) -> None:
    """A device that does nothing with the notices a board shows (the voice
    door's state, a timer ringing) refuses them in its events: a serial
    device shows them (its VOICE and TIMER lines)."""
    for event, what, line in _NOTICES:
        if event in common.events:
            raise SettingError("events", f'a {kind} device takes no "{event}" events '
                                         f"({what}): a serial device shows them (its "
                                         f"{line} line)")


Prompt = Callable[[str], Awaitable[None]]  # a line from the device becomes an ask


class Requests(Protocol):
    """What a device may ask of the daemon, the `prompt` its run() is given:
    `await prompt(text)` an ask; announce() speaks a text on every speech
    device; stop() stops every ask and silences every speech device (a
    board's barge-in)."""

    async def __call__(self, text: str) -> None: ...

    async def announce(self, text: str) -> None: ...

    async def stop(self) -> None: ...


@dataclass(frozen=True)
class Common:
    """Settings every device has (see the README's device section)."""
    name: str
    events: frozenset[str]
    queue: int = 64
    overflow: Overflow = Overflow.COALESCE
    block_timeout: float = 2.0
    restart_max_delay: float = 30.0
    sentence_max_chars: int = 200
    first_sentence_chars: int = 0
    tools: tuple[ToolSpec, ...] = ()


class Device:
    """Base of the handlers. A subclass sets `kind` and DEFAULT_EVENTS and
    implements from_settings(), run() and, if it offers tools, call_tool()."""

    kind: ClassVar[str]
    DEFAULT_EVENTS: ClassVar[frozenset[str]]
    # A device that speaks sets this: the hub cleans the text it cuts into
    # sentences for it (agent/text/speech.py) before it is cut.
    speech: SpeechOptions | None = None
    speaks = False  # a speech device: announce and stop concern it
    plays_audio = False  # a speech device that plays a Sound (the wake sound) on its sink
    on_speech: Callable[[], None] | None = None  # the hub's, when a board state follows speech

    def __init__(self, common: Common) -> None:
        self.common = common
        self.name = common.name

    @property
    def speaking(self) -> bool:
        """A speech device is saying something now: its program runs, its
        audio is asked for, buffered or playing."""
        return False

    def speech_changed(self) -> None:
        """A speech device calls this where `speaking` may have changed."""
        if self.on_speech is not None:
            self.on_speech()

    @classmethod
    def from_settings(cls, common: Common, settings: Mapping[str, Any]) -> "Device":
        """Build from the device's own keys (the common ones are removed);
        raise SettingError naming a bad key."""
        raise NotImplementedError

    async def run(self, inbox: "Inbox", prompt: "Requests",
                  task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Open the device, call task_status.started(), then handle events
        until cancelled; prompt is what it may ask of the daemon. Raise (any exception) when the device fails or is
        lost: the hub reports it and runs this again after a backoff."""
        raise NotImplementedError

    def own_tools(self) -> tuple[ToolSpec, ...]:
        """Tools the device type itself offers, beside the configured ones."""
        return ()

    def secrets(self) -> tuple[str, ...]:
        """Credentials from its settings, for the masker (agent/masking.py)."""
        return ()

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one of this device's tools (arguments already valid against
        its schema); the hub applies the timeout. Raise ToolError on failure."""
        raise ToolError(f"device {self.name} has no tool {name!r}")

    def silence(self, keys: frozenset[int] | None) -> bool:
        """A speech device stops at once what it says for these asks (their
        Origin keys; None: whatever it says): playback, synthesis, a speech
        program. Never waits; True when it was saying something."""
        return False

    def status(self) -> dict[str, Any]:
        """Extra fields for the status reply (port, connected, ...)."""
        return {}


@dataclass(frozen=True)
class DeviceSpec:
    """A configured device (or tool provider, in a device's table): its
    common settings, its class and own settings (already checked once by the
    config loader through from_settings)."""
    common: Common  # its tools include the type's own (own_tools())
    cls: type
    settings: Mapping[str, Any]
    secrets: tuple[str, ...] = ()  # its secrets(), read when the config loaded

    def build(self):
        return self.cls.from_settings(self.common, self.settings)


@dataclass
class Inbox:
    """A device's bounded queue of deliveries, with its overflow policy. The
    hub puts; the device gets (`async for delivery in inbox`)."""
    size: int
    overflow: Overflow
    block_timeout: float = 2.0
    dropped: int = 0
    coalesced: int = 0
    # A BLOCK wait that ran out: the device is not keeping up, so later
    # events are dropped at once instead of each costing the stream a wait.
    stalled: bool = False
    sentences: int = 0  # Sentences and Sounds queued: what a speech device has still to say
    watch: Callable[[], None] | None = None  # called when `sentences` changes
    _events: deque = field(default_factory=deque)
    _readable: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)
    _writable: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)

    def __len__(self) -> int:
        return len(self._events)

    def clear(self) -> None:
        self.discard(lambda event: True)

    def discard(self, unwanted: Callable[[Delivery], bool]) -> None:
        """Drop the queued deliveries unwanted() says, counted as dropped."""
        kept = deque(item for item in self._events if not unwanted(item))
        self.dropped += len(self._events) - len(kept)
        self._events = kept
        self.stalled = False
        self._writable.unpark_all()
        self._counted(sum(type(item.reply) in _SAID for item in kept)
                      - self.sentences)

    async def put(self, event: Delivery) -> None:
        if len(self._events) >= self.size and self.overflow is Overflow.BLOCK:
            if not self.stalled:
                with trio.move_on_after(self.block_timeout):
                    while len(self._events) >= self.size:
                        await self._writable.park()
            if len(self._events) >= self.size:
                self.stalled = True
                self.dropped += 1
                return
        self.put_nowait(event)

    def put_nowait(self, event: Delivery) -> None:
        """put() for a caller that cannot wait (a notice): a full BLOCK inbox
        drops the event at once."""
        if len(self._events) >= self.size:
            if self.overflow is Overflow.BLOCK:
                self.dropped += 1
                return
            if not (self.overflow is Overflow.COALESCE and self._coalesce(event)):
                self._counted(-(type(self._events.popleft().reply) in _SAID))
                self.dropped += 1
            else:
                return
        self._events.append(event)
        self._readable.unpark()
        if type(event.reply) in _SAID:  # not a call per delta: the per-token path
            self._counted(1)

    def _counted(self, change: int) -> None:
        if change:
            self.sentences += change
            if self.watch is not None:
                self.watch()

    def _coalesce(self, event: Delivery) -> bool:
        """Join a text delivery to the newest queued one when that is text of
        the same kind and ask (joining further back would reorder)."""
        kind = type(event.reply)
        if kind not in replies.TEXT or not self._events:
            return False
        newest = self._events[-1]
        if type(newest.reply) is not kind or newest.origin.key != event.origin.key:
            return False
        joiner = " " if kind is replies.Sentence else ""
        self._events[-1] = Delivery(kind(newest.reply.text + joiner + event.reply.text),
                                    newest.origin)
        self.coalesced += 1
        return True

    async def get(self) -> Delivery:
        # A cancelled reader takes nothing: without this check, a device whose
        # connection a stop cancelled would go on taking queued events until
        # its next checkpoint, and lose them there (the next connection's).
        # Not cancelled, it does not yield: a serial board's TEXT before a
        # CALL relies on the forwarder taking a queued sentence at once.
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self._events:
            await self._readable.park()
        event = self._events.popleft()
        self.stalled = False  # room again: the next full inbox is waited for
        self._writable.unpark()
        if type(event.reply) in _SAID:
            self._counted(-1)
        return event

    def __aiter__(self):
        return self

    async def __anext__(self) -> Delivery:
        return await self.get()
