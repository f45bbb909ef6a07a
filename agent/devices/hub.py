"""The device hub: where the replies of every ask go after the socket API,
and where the model's tool calls reach a device.

- publish(): each reply goes into the inbox of every device that wants its
  type, under the device's overflow policy; deltas are also cut into
  sentences (one segmenter per device and ask) for devices that want those,
  after cleaning them for speech for a device that speaks (its lines'
  markdown is whole before the segmenter cuts them).
  A device that is down gets nothing: its events are dropped and counted.
- run(): one supervisor task per device. run() of a device that raises is
  reported (log, status, a `device` event to subscribers) and started again
  after a backoff that doubles up to the device's restart_max_delay.
- call_tool(): validates the model's arguments against the tool's schema
  and runs the tool on its device under the tool's timeout. The tools of one
  device run one at a time, in the order asked (the timeout starts when the
  call's turn comes), so many calls at once never make a device run many
  programs or commands at once. Every failure becomes an error result for
  the model, never an exception.
- A line typed on a device (prompt) becomes an ask, run in the hub's own
  nursery so the device keeps reading while it is answered; a device's
  announce and stop (a board's ANNOUNCE and STOP lines) go where the
  socket API's do.
- announce(): a text spoken on one or every speech device without the
  model, given to each as the events of an answer (delta, its sentences,
  done) under request {"announce": N}.
- silence(): what a stop does to the speech devices: the stopped asks'
  queued events are dropped, and the rest of their events until their
  done or error, and each device stops what it says at once.
"""

from __future__ import annotations

import enum
import itertools
import logging
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Awaitable, Callable, Mapping

import trio

from agent.api import replies
from agent.api.replies import ErrorCode
from agent.devices.base import (SENTENCE, Common, Device, Event, Inbox, Requests, ToolError,
                                ToolSpec)
from agent.devices.segmenter import Segmenter, SegmenterConfig
from agent.devices.speech_text import SpeechCleaner, SpeechOptions
from agent.providers.requests import Tool
from agent.stream.message import ToolCall

log = logging.getLogger("homeagent.devices")

INITIAL_BACKOFF = 0.5
STABLE_AFTER = 30.0          # a device that ran this long restarts with the initial backoff
MAX_PENDING_PROMPTS = 4      # asks from one device waiting or running; more are refused
RESULT_LIMIT = 16 * 1024     # characters of a tool result sent to the model
DEFAULT_MAX_ANNOUNCE = 2000  # characters of an announcement (daemon.max_announce_chars)


def request_key(request: Mapping[str, Any]) -> tuple:
    """Which ask (or announcement) an event belongs to, whatever its session."""
    return (request.get("client"), request.get("id"), request.get("device"),
            request.get("wyoming"), request.get("announce"), request.get("mqtt"))


class AnnounceError(Exception):
    """An announcement that cannot be spoken: code is the socket API's."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class DeviceSpec:
    """A configured device: its common settings, its class and own settings
    (already checked once by the config loader through from_settings)."""
    common: Common  # its tools include the type's own (Device.own_tools())
    cls: type
    settings: Mapping[str, Any]
    secrets: tuple[str, ...] = ()  # Device.secrets(), read when the config loaded

    def build(self) -> Device:
        return self.cls.from_settings(self.common, self.settings)


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    content: str
    is_error: bool


class DeviceState(enum.Enum):
    STARTING = "starting"  # run() called, not yet reported started
    RUNNING = "running"    # started: gets events, offers its tools
    FAILED = "failed"      # run() raised or returned; started again after a backoff


# An ask's replies that end what a segmenter has of its text.
_ENDS_TEXT = (replies.ToolCall, replies.Done, replies.Error)
_ENDS_ASK = (replies.Done, replies.Error)


@dataclass(eq=False)
class _Running:
    device: Device
    inbox: Inbox
    state: DeviceState = DeviceState.STARTING
    since: float = field(default_factory=time.monotonic)
    restarts: int = 0
    last_error: str | None = None
    prompts: int = 0
    segmenters: dict = field(default_factory=dict)  # request key -> _Sentences
    stopped: set = field(default_factory=set)  # request keys silenced until their done or error
    tool_turn: trio.Lock = field(default_factory=trio.Lock)  # one tool run at a time, FIFO


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


AskHook = Callable[[str, str], Awaitable[None]]        # (device name, prompt)
StateHook = Callable[[replies.Device], None]          # for subscribers
StopHook = Callable[[str], Awaitable[None]]            # (device name): stop everything


class _Link(Requests):
    """A device's requests to the daemon (its run()'s `prompt`)."""

    def __init__(self, hub: "DeviceHub", running: _Running) -> None:
        self._hub, self._running = hub, running

    async def __call__(self, text: str) -> None:
        await self._hub._prompt(self._running, text)

    async def announce(self, text: str) -> None:
        name = self._running.device.name
        try:
            spoken_on = await self._hub.announce(text)
        except AnnounceError as refusal:
            log.warning("device %s: an announcement was refused: %s: %s", name,
                        refusal.code.value, refusal)
            return
        log.info("device %s: announcement on %s", name, ", ".join(spoken_on))

    async def stop(self) -> None:
        if self._hub._stop is not None:
            await self._hub._stop(self._running.device.name)


class DeviceHub:
    def __init__(self, specs: Mapping[str, DeviceSpec],
                 max_announce_chars: int = DEFAULT_MAX_ANNOUNCE) -> None:
        self.max_announce_chars = max_announce_chars
        self._announcements = itertools.count(1)
        self._devices: dict[str, _Running] = {}
        self._tools: dict[str, tuple[str, ToolSpec]] = {}
        for name, spec in specs.items():
            common = spec.common
            self._devices[name] = _Running(spec.build(), Inbox(common.queue, common.overflow,
                                                                 common.block_timeout))
            for tool in common.tools:
                self._tools[tool.name] = (name, tool)
        self._nursery: trio.Nursery | None = None
        self._ask: AskHook | None = None
        self._on_state: StateHook | None = None
        self._stop: StopHook | None = None
        self._on_speech: Callable[[], None] | None = None
        self._speaking = False
        self._speech_check = False  # a check of `speaking` is scheduled

    def __bool__(self) -> bool:
        return bool(self._devices)

    # ---- running the devices ----

    async def run(self, ask: AskHook, on_state: StateHook, stop: StopHook | None = None,
                  task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Supervise every device until cancelled."""
        self._ask, self._on_state, self._stop = ask, on_state, stop
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
        if self._on_state is not None:
            self._on_state(replies.Device(running.device.name, state.value, error, retry_in))

    async def _prompt(self, running: _Running, text: str) -> None:
        name = running.device.name
        if running.prompts >= MAX_PENDING_PROMPTS:
            log.warning("device %s: a prompt was refused: %d of its asks are still pending",
                        name, running.prompts)
            return
        running.prompts += 1
        self._nursery.start_soon(self._device_ask, running, text)

    async def _device_ask(self, running: _Running, text: str) -> None:
        try:
            await self._ask(running.device.name, text)
        finally:
            running.prompts -= 1

    # ---- events ----

    async def publish(self, reply: replies.Reply, request: Mapping[str, Any]) -> None:
        """One reply of an ask to every device that wants it."""
        kind = reply.type
        data, request = replies.outgoing(reply.fields()), replies.outgoing(request)
        key = request_key(request)
        is_delta = isinstance(reply, replies.Delta)
        spoken_elsewhere = request.get("speak_on") is not None  # on another board
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
            events = [Event(kind, data, request)] if kind in wants else []
            if SENTENCE in wants and (is_delta or isinstance(reply, _ENDS_TEXT)):
                sentences = [Event(SENTENCE, {"text": sentence}, request) for sentence
                             in self._sentences(running, key, is_delta, data.get("text", ""))]
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
        """Where an announcement goes; AnnounceError when nowhere."""
        speech = ", ".join(r.device.name for r in self._speech()) or "none"
        if device is None:
            running = [r for r in self._speech() if r.state is DeviceState.RUNNING]
            if not running:
                raise AnnounceError(ErrorCode.NO_SPEECH_DEVICE, "no speech device is running "
                                    f"(speech devices: {speech})")
            return running
        chosen = self._devices.get(device)
        if chosen is None:
            raise AnnounceError(ErrorCode.UNKNOWN_DEVICE, f"no device named {device!r} "
                                f"(speech devices: {speech})")
        if not chosen.device.speaks:
            raise AnnounceError(ErrorCode.NOT_A_SPEECH_DEVICE, f"device {device} is of type "
                                f"{chosen.device.kind}, which does not speak (speech devices: "
                                f"{speech})")
        if chosen.state is not DeviceState.RUNNING:
            raise AnnounceError(ErrorCode.DEVICE_UNAVAILABLE, f"device {device} is "
                                f"{chosen.state.value} ({chosen.last_error or 'starting'})")
        return [chosen]

    async def announce(self, text: str, device: str | None = None) -> list[str]:
        """Speak text on the named speech device, or on every one running;
        the names it was given to. Raises AnnounceError."""
        if len(text) > self.max_announce_chars:
            raise AnnounceError(ErrorCode.TEXT_TOO_LONG, f"the text has {len(text)} "
                                f"characters, more than daemon.max_announce_chars "
                                f"({self.max_announce_chars})")
        chosen = self._chosen(device)
        request = {"announce": next(self._announcements)}
        for running in chosen:
            common = running.device.common
            wants = common.events
            events = [Event(replies.Delta.type, {"text": text}, request)] \
                if replies.Delta.type in wants else []
            if SENTENCE in wants:  # cleaned for speech and cut as an answer's text is
                sentences = _Sentences(common, running.device.speech)
                events += [Event(SENTENCE, {"text": sentence}, request)
                           for sentence in [*sentences.feed(text), *sentences.close()]]
            if replies.Done.type in wants:
                events.append(Event(replies.Done.type, {"text": text}, request))
            for event in events:
                await running.inbox.put(event)
        return [running.device.name for running in chosen]

    def silence(self, requests: list[Mapping[str, Any]], everything: bool) -> list[str]:
        """Stopped asks (their requests, as publish() is given them) off every
        speech device: what they queued is dropped, so is the rest of their
        events, and the devices stop saying them at once; with everything,
        whatever the speech devices have queued or say. The names of the
        devices that were saying something."""
        keys = frozenset(request_key(replies.outgoing(r)) for r in requests)
        silenced = []
        for running in self._speech():
            running.stopped |= keys
            running.inbox.discard(lambda event: everything
                                  or request_key(event.request) in keys)
            for key in list(running.segmenters) if everything else keys:
                running.segmenters.pop(key, None)
            if running.state is DeviceState.RUNNING \
                    and running.device.silence(None if everything else keys):
                silenced.append(running.device.name)
        return silenced

    # ---- tools ----

    def tools(self) -> list[Tool]:
        """The tools of the devices that are running, for the next request."""
        return [Tool(spec.name, spec.description, spec.parameters)
                for name, spec in self._tools.values()
                if self._devices[name].state is DeviceState.RUNNING]

    async def call_tool(self, call: ToolCall) -> ToolOutcome:
        if call.error is not None:
            return ToolOutcome(f"the arguments were not usable ({call.error.value}: "
                               f"{call.error_detail or 'no detail'}); nothing was run", True)
        entry = self._tools.get(call.name or "")
        if entry is None:
            known = ", ".join(sorted(self._tools)) or "none"
            return ToolOutcome(f"there is no tool named {call.name!r} (tools: {known})", True)
        from agent.devices.schema import validate

        device_name, spec = entry
        problems = validate(call.parsed, spec.parameters)
        if problems:
            return ToolOutcome("invalid arguments, nothing was run: " + "; ".join(problems),
                               True)
        running = self._devices[device_name]
        async with running.tool_turn:
            return await self._run_tool(running, spec, call.parsed)

    @staticmethod
    async def _run_tool(running: _Running, spec: ToolSpec, arguments) -> ToolOutcome:
        device_name = running.device.name
        if running.state is not DeviceState.RUNNING:  # checked when its turn comes
            return ToolOutcome(f"device {device_name} is not available ({running.state.value}: "
                               f"{running.last_error or 'starting'})", True)
        try:
            with trio.fail_after(spec.timeout):
                content = await running.device.call_tool(spec.name, arguments)
        except trio.TooSlowError:
            return ToolOutcome(f"{spec.name} did not finish within {spec.timeout:g} s", True)
        except ToolError as exc:
            return ToolOutcome(str(exc)[:RESULT_LIMIT], True)
        except Exception as exc:
            log.exception("device %s: tool %s failed", device_name, spec.name)
            return ToolOutcome(f"{spec.name} failed in the device handler: "
                               f"{type(exc).__name__}", True)
        return ToolOutcome(str(content)[:RESULT_LIMIT], False)

    # ---- status ----

    def status(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [{"name": name, "kind": r.device.kind, "state": r.state.value,
                 "seconds_in_state": round(now - r.since, 3), "restarts": r.restarts,
                 "last_error": r.last_error, "queued": len(r.inbox), "dropped": r.inbox.dropped,
                 "coalesced": r.inbox.coalesced,
                 "tools": [spec.name for dev, spec in self._tools.values() if dev == name],
                 **({"speaking": r.device.speaking} if r.device.speaks else {}),
                 **r.device.status()}
                for name, r in self._devices.items()]
