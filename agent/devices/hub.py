"""The device hub: a listener of the center (agent/core/center.py) that
gives every reply of every ask to the devices, and the speech the center
announces on and silences.

- deliver(): each reply goes into the inbox of every device that wants its
  kind, under the device's overflow policy, as a Delivery with its Origin;
  deltas are also cut into Sentences (one segmenter per device and ask,
  by the Origin's key) for devices that want those, after cleaning them
  for speech for a device that speaks (its lines' markdown is whole before
  the segmenter cuts them). A device that is down gets nothing: its
  deliveries are dropped and counted.
- notice(): the voice door's state, and a timer of this daemon ringing or
  gone quiet, go to the devices that want them, at once (an inbox that
  would block drops it).
- run(): one supervisor task per device. run() of a device that raises is
  reported (log, status, a `device` reply to the listeners) and started
  again after a backoff that doubles up to the device's restart_max_delay.
- providers(): each device with tools is a tool provider (agent/tools/base.py)
  while it runs; the toolbox validates and times its calls.
- A line typed on a device (prompt) becomes an ask through the center, run
  in the hub's own nursery so the device keeps reading while it is
  answered; a device's announce and stop (a board's ANNOUNCE and STOP
  lines) are the center's commands like any door's.
- announce(): a text spoken on one or every speech device without the
  model, given to each as the deliveries of an answer (delta, its
  sentences, done) under an Origin of the announce door.
- play(): a sound (the wake sound) on the speech devices that play audio.
- silence(): what a stop does to the speech devices: the stopped asks'
  queued deliveries are dropped, and the rest of theirs until their done
  or error, and each device stops what it says at once.
"""

from __future__ import annotations

import enum
import logging
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Mapping

import trio

from agent.core import replies
from agent.core.commands import Announce, Ask, Door, Origin, Refused, StopAsks
from agent.core.deliveries import Delivery
from agent.core.replies import ErrorCode
from agent.devices.base import Common, Device, DeviceSpec, Inbox, Requests, ToolSpec
from agent.text.segmenter import Segmenter, SegmenterConfig
from agent.text.speech import SpeechCleaner, SpeechOptions

log = logging.getLogger("homeagent.devices")

INITIAL_BACKOFF = 0.5
STABLE_AFTER = 30.0          # a device that ran this long restarts with the initial backoff
MAX_PENDING_PROMPTS = 4      # asks from one device waiting or running; more are refused
DEFAULT_MAX_ANNOUNCE = 2000  # characters of an announcement (daemon.max_announce_chars)


class DeviceState(enum.Enum):
    STARTING = "starting"  # run() called, not yet reported started
    RUNNING = "running"    # started: gets events, offers its tools
    FAILED = "failed"      # run() raised or returned; started again after a backoff


# An ask's replies that end what a segmenter has of its text.
_ENDS_TEXT = (replies.ToolCall, replies.Done, replies.Error)
_ENDS_ASK = replies.ENDS_ASK
SENTENCE = replies.Sentence.type
# the notices a board shows, and the door each stands for
_NOTICE_DOORS = {replies.VoiceState: Door.VOICE, replies.TimerRing: Door.ANNOUNCE}


@dataclass(eq=False)
class _Running:
    device: Device
    inbox: Inbox
    state: DeviceState = DeviceState.STARTING
    since: float = field(default_factory=time.monotonic)
    restarts: int = 0
    last_error: str | None = None
    prompts: int = 0
    segmenters: dict = field(default_factory=dict)  # Origin key -> _Sentences
    stopped: set = field(default_factory=set)  # Origin keys silenced until their done or error


class _Sentences:
    """One ask's text cut into sentences for one device, cleaned for speech
    first when the device speaks."""

    def __init__(self, common: Common, speech: SpeechOptions | None) -> None:
        self._cleaner = SpeechCleaner(speech) if speech is not None else None
        self._segmenter = Segmenter(SegmenterConfig(max_chars=common.sentence_max_chars,
                                                    first_min_chars=common.first_sentence_chars))

    def feed(self, text: str) -> list[str]:
        return self._segmenter.feed(self._cleaner.feed(text) if self._cleaner else text)

    def close(self) -> list[str]:
        rest = self._segmenter.feed(self._cleaner.close()) if self._cleaner else []
        return rest + self._segmenter.close()


class _Started:
    """The task_status a device's run() reports to: it marks the device running."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback

    def started(self, value: object = None) -> None:
        self._callback()


def _describe(exc: BaseException) -> str:
    # A handler's own nursery wraps its failure in a group of one.
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


class _Link(Requests):
    """A device's requests to the daemon (its run()'s `prompt`)."""

    def __init__(self, hub: "DeviceHub", running: _Running) -> None:
        self._hub, self._running = hub, running

    async def __call__(self, text: str) -> None:
        await self._hub._prompt(self._running, text)

    async def announce(self, text: str) -> None:
        name = self._running.device.name
        try:
            spoken_on = await self._hub.center.announce(Announce(text))
        except Refused as refusal:
            log.warning("device %s: an announcement was refused: %s: %s", name,
                        refusal.code.value, refusal)
            return
        log.info("device %s: announcement on %s", name, ", ".join(spoken_on))

    async def stop(self) -> None:
        await self._hub.center.stop(StopAsks(f"device {self._running.device.name}"))


class _DeviceTools:
    """A device with tools, as a tool provider: available while it runs."""

    def __init__(self, running: _Running) -> None:
        self._running = running
        self.name = f"device {running.device.name}"

    def offered(self) -> tuple[ToolSpec, ...]:
        return self._running.device.common.tools

    def unavailable(self) -> str | None:
        running = self._running
        if running.state is DeviceState.RUNNING:
            return None
        return (f"device {running.device.name} is not available ({running.state.value}: "
                f"{running.last_error or 'starting'})")

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        return await self._running.device.call_tool(name, arguments)

    def status(self) -> dict[str, Any]:
        return {}


class DeviceHub:
    def __init__(self, specs: Mapping[str, DeviceSpec],
                 max_announce_chars: int = DEFAULT_MAX_ANNOUNCE) -> None:
        self.max_announce_chars = max_announce_chars
        self._devices: dict[str, _Running] = {}
        for name, spec in specs.items():
            common = spec.common
            self._devices[name] = _Running(spec.build(), Inbox(common.queue, common.overflow,
                                                                 common.block_timeout))
        self._nursery: trio.Nursery | None = None
        self.center = None  # the daemon's Center, from run() on
        self._on_speech: Callable[[], None] | None = None
        self._speaking = False
        self._speech_check = False  # a check of `speaking` is scheduled
        # the Origin of each kind of notice, made at its first
        self._notices: dict[type, Origin] = {}

    def __bool__(self) -> bool:
        return bool(self._devices)

    # ---- running the devices ----

    def providers(self) -> list[_DeviceTools]:
        """The devices that offer tools, as tool providers."""
        return [_DeviceTools(running) for running in self._devices.values()
                if running.device.common.tools]

    async def run(self, center, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Supervise every device until cancelled; their prompts, announces
        and stops go to center, their states to its listeners."""
        self.center = center
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for running in self._devices.values():
                nursery.start_soon(self._supervise, running)
            task_status.started()

    async def _supervise(self, running: _Running) -> None:
        device = running.device
        initial = min(INITIAL_BACKOFF, device.common.restart_max_delay)
        backoff = initial
        while True:
            running.state, running.since = DeviceState.STARTING, time.monotonic()
            try:
                await device.run(running.inbox, _Link(self, running),
                                 task_status=_Started(partial(self._set_state, running,
                                                              DeviceState.RUNNING)))
                error = "run() returned"  # a handler should run until cancelled
            except Exception as exc:  # any failure of one device is that device's alone
                error = _describe(exc)
            if time.monotonic() - running.since >= STABLE_AFTER:
                backoff = initial
            running.restarts += 1
            self._set_state(running, DeviceState.FAILED, error, backoff)
            running.inbox.clear()
            running.segmenters.clear()  # text cut off here must not start the next answer
            running.stopped.clear()
            await trio.sleep(backoff)
            backoff = min(backoff * 2, device.common.restart_max_delay)

    def _set_state(self, running: _Running, state: DeviceState, error: str | None = None,
                   retry_in: float | None = None) -> None:
        running.state, running.since = state, time.monotonic()
        if error is not None:
            running.last_error = error
            log.warning("device %s failed (%s); next start in %g s", running.device.name,
                        error, retry_in)
        else:
            log.info("device %s %s", running.device.name, state.value)
        if self.center is not None:
            self.center.notice(replies.Device(running.device.name, state.value, error, retry_in))

    async def _prompt(self, running: _Running, text: str) -> None:
        name = running.device.name
        if running.prompts >= MAX_PENDING_PROMPTS:
            log.warning("device %s: a prompt was refused: %d of its asks are still pending",
                        name, running.prompts)
            return
        running.prompts += 1
        self._nursery.start_soon(self._device_ask, running, text)

    async def _device_ask(self, running: _Running, text: str) -> None:
        name = running.device.name
        center = self.center
        try:
            origin = center.origin(Door.DEVICE, name, f"device-{name}")
            await center.ask(Ask(origin, text, who=f"device {name}"), _ignore)
        finally:
            running.prompts -= 1

    # ---- deliveries ----

    def notice(self, reply: replies.Reply) -> None:
        """A reply of no ask to the devices that want it, never waiting: the
        voice door's state (a serial board's LEDs) and a timer ringing here
        (its display). A device's state is not theirs, nor a ring on another
        board: that board's daemon rings it."""
        door = _NOTICE_DOORS.get(type(reply))
        if door is None or self.center is None:
            return
        if type(reply) is replies.TimerRing and reply.board is not None:
            return
        origin = self._notices.get(type(reply))
        if origin is None:
            origin = self._notices[type(reply)] = self.center.origin(door, None)
        kind = reply.type
        for running in self._devices.values():
            if kind in running.device.common.events:
                if running.state is DeviceState.RUNNING:
                    running.inbox.put_nowait(Delivery(reply, origin))
                else:
                    running.inbox.dropped += 1

    async def deliver(self, reply: replies.Reply, origin: Origin) -> None:
        """One reply of an ask to every device that wants it."""
        kind = reply.type
        key = origin.key
        is_delta = type(reply) is replies.Delta
        spoken_elsewhere = origin.speak_on is not None  # on another board
        for running in self._devices.values():
            wants = running.device.common.events
            if spoken_elsewhere and running.device.speaks:
                continue
            if running.stopped and key in running.stopped:
                if isinstance(reply, _ENDS_ASK):
                    running.stopped.discard(key)
                continue
            if running.state is not DeviceState.RUNNING:
                if kind in wants or (SENTENCE in wants and (is_delta
                                                            or isinstance(reply, _ENDS_ASK))):
                    running.inbox.dropped += 1
                if isinstance(reply, _ENDS_ASK):
                    running.segmenters.pop(key, None)  # its half sentence goes too
                continue
            events = [Delivery(reply, origin)] if kind in wants else []
            if SENTENCE in wants and (is_delta or isinstance(reply, _ENDS_TEXT)):
                text = reply.text if is_delta else ""
                sentences = [Delivery(replies.Sentence(sentence), origin) for sentence
                             in self._sentences(running, key, is_delta, text)]
                # The text before a tool call, or the answer's last sentences,
                # come before the tool call, done or error.
                events = events + sentences if is_delta else sentences + events
            for event in events:
                await running.inbox.put(event)

    @staticmethod
    def _sentences(running: _Running, key, is_delta: bool, text: str) -> list[str]:
        sentences = running.segmenters.get(key)
        if is_delta:
            if sentences is None:
                sentences = running.segmenters[key] = _Sentences(running.device.common,
                                                                 running.device.speech)
            return sentences.feed(text)
        running.segmenters.pop(key, None)  # a step or the ask ended: the rest of its text
        return sentences.close() if sentences is not None else []

    # ---- speech, for the board's state ----

    @property
    def speaking(self) -> bool:
        """A speech device has sentences queued or says something."""
        return any(r.inbox.sentences or r.device.speaking for r in self._speech())

    def watch_speech(self, listener: Callable[[], None]) -> None:
        """listener() once `speaking` has changed."""
        self._on_speech = listener
        for running in self._speech():
            running.device.on_speech = running.inbox.watch = self._speech_changed

    def _speech_changed(self) -> None:
        # Checked once the task that changed it yields: a device takes its
        # next sentence and starts saying it in one step, never seen as silence.
        if not self._speech_check:
            self._speech_check = True
            trio.lowlevel.current_trio_token().run_sync_soon(self._check_speech)

    def _check_speech(self) -> None:
        self._speech_check = False
        speaking = self.speaking
        if speaking != self._speaking:
            self._speaking = speaking
            self._on_speech()

    # ---- announcements and stops ----

    def _speech(self) -> list[_Running]:
        return [r for r in self._devices.values() if r.device.speaks]

    def _chosen(self, device: str | None) -> list[_Running]:
        """Where an announcement goes; Refused when nowhere."""
        speech = ", ".join(r.device.name for r in self._speech()) or "none"
        if device is None:
            running = [r for r in self._speech() if r.state is DeviceState.RUNNING]
            if not running:
                raise Refused(ErrorCode.NO_SPEECH_DEVICE, "no speech device is running "
                                    f"(speech devices: {speech})")
            return running
        chosen = self._devices.get(device)
        if chosen is None:
            raise Refused(ErrorCode.UNKNOWN_DEVICE, f"no device named {device!r} "
                                f"(speech devices: {speech})")
        if not chosen.device.speaks:
            raise Refused(ErrorCode.NOT_A_SPEECH_DEVICE, f"device {device} is of type "
                                f"{chosen.device.kind}, which does not speak (speech devices: "
                                f"{speech})")
        if chosen.state is not DeviceState.RUNNING:
            raise Refused(ErrorCode.DEVICE_UNAVAILABLE, f"device {device} is "
                                f"{chosen.state.value} ({chosen.last_error or 'starting'})")
        return [chosen]

    async def announce(self, text: str, device: str | None, origin: Origin) -> list[str]:
        """Speak text on the named speech device, or on every one running;
        the names it was given to. Raises Refused."""
        if len(text) > self.max_announce_chars:
            raise Refused(ErrorCode.TEXT_TOO_LONG, f"the text has {len(text)} "
                                f"characters, more than daemon.max_announce_chars "
                                f"({self.max_announce_chars})")
        chosen = self._chosen(device)
        for running in chosen:
            common = running.device.common
            wants = common.events
            events = [Delivery(replies.Delta(text), origin)] \
                if replies.Delta.type in wants else []
            if SENTENCE in wants:  # cleaned for speech and cut as an answer's text is
                sentences = _Sentences(common, running.device.speech)
                events += [Delivery(replies.Sentence(sentence), origin)
                           for sentence in [*sentences.feed(text), *sentences.close()]]
            if replies.Done.type in wants:
                events.append(Delivery(_announced(text), origin))
            for event in events:
                await running.inbox.put(event)
        return [running.device.name for running in chosen]

    async def play(self, sound: replies.Sound, origin: Origin) -> list[str]:
        """A sound on every running speech device that plays audio; their
        names. Raises Refused when none does. Queued as a Sentence is, so
        `speaking` holds from now until it has been played."""
        chosen = [r for r in self._speech()
                  if r.device.plays_audio and r.state is DeviceState.RUNNING]
        if not chosen:
            raise Refused(ErrorCode.NO_SPEECH_DEVICE, "no speech device that plays audio "
                                                      "(wyoming-tts) is running")
        for running in chosen:
            await running.inbox.put(Delivery(sound, origin))
        return [running.device.name for running in chosen]

    def silence(self, origins: list[Origin], everything: bool) -> list[str]:
        """Stopped asks off every speech device: what they queued is dropped,
        so is the rest of their deliveries, and the devices stop saying them
        at once; with everything, whatever the speech devices have queued or
        say. The names of the devices that were saying something."""
        keys = frozenset(origin.key for origin in origins)
        silenced = []
        for running in self._speech():
            running.stopped |= keys
            running.inbox.discard(lambda event: everything or event.origin.key in keys)
            for key in list(running.segmenters) if everything else keys:
                running.segmenters.pop(key, None)
            if running.state is DeviceState.RUNNING \
                    and running.device.silence(None if everything else keys):
                silenced.append(running.device.name)
        return silenced

    # ---- status ----

    def status(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [{"name": name, "kind": r.device.kind, "state": r.state.value,
                 "seconds_in_state": round(now - r.since, 3), "restarts": r.restarts,
                 "last_error": r.last_error, "queued": len(r.inbox), "dropped": r.inbox.dropped,
                 "coalesced": r.inbox.coalesced,
                 "tools": [spec.name for spec in r.device.common.tools],
                 **({"speaking": r.device.speaking} if r.device.speaks else {}),
                 **r.device.status()}
                for name, r in self._devices.items()]


async def _ignore(reply: replies.Reply) -> None:
    """A device's own ask: its replies reach it as everyone's do, through deliver()."""


def _announced(text: str) -> replies.Done:
    """The done that ends an announcement for a device that takes dones."""
    return replies.Done(None, None, None, None, text, 0, 0)
