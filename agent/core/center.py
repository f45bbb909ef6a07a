"""The center: one ask lifecycle for every door, and the listeners every
reply goes to.

A door builds a command (agent/core/commands.py) and hands it here:
- ask(): counts the ask, registers its Stop so that any `stop` reaches it,
  runs it on the runner, passes each reply through the masking edge once,
  gives it to the asker (on_reply) and then to every listener, in the
  order the daemon added them, maps a failure inside the daemon to an
  internal_error reply, and counts how it ended. An ask that comes while
  the daemon stops gets shutting_down and is not counted.
- announce(): speaks a text on the speech devices or, through the broker,
  on another board.
- stop(): barge-in; stops the chosen asks, silences the speech devices
  and, for a stop of everything, the ringing timers (alarms), and returns
  once the stopped asks' model streams are closed.
- claim_utterance(): whether this board answers a wake word it heard, or
  another board on the broker that heard it too.
- notice(): a reply of no ask (a device's or the voice door's state, a timer
  ringing), to every listener.

Listeners are registered by agent/service/daemon.py in this order: the
socket's subscribers (they see a reply first), the device hub (an answer's
done queues its last sentences), the MQTT board (its state, read after
the devices, says speaking rather than idle at that done).

The center never imports a door or a device: speech (the hub), boards
(the MQTT service) and alarms (the timers) are what the daemon gives it.

asking() is the Origin of the ask whose task calls it: a tool call runs in
a task of its ask, so a tool provider (the timers) knows who asked without
every provider's call_tool taking an argument most do not need.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterator, Protocol

import trio

from agent import masking
from agent.core import replies
from agent.core.commands import Announce, Ask, Door, Origin, Refused, Stop, StopAsks
from agent.core.edge import masked, outgoing
from agent.core.replies import ErrorCode, RequestId
from agent.core.statistics import Counters, Outcome

log = logging.getLogger("homeagent.center")

STOP_WAIT = 2.0  # seconds a stop waits for the stopped asks' streams to close

OnReply = Callable[[replies.Reply], Awaitable[Any]]
_ASKING: contextvars.ContextVar[Origin] = contextvars.ContextVar("asking")


def asking() -> Origin | None:
    """The Origin of the ask running in this task (its tool calls'
    tasks inherit it); None outside every ask."""
    return _ASKING.get(None)


class Listener(Protocol):
    """Sees every reply of every ask, masked, after its asker."""

    async def deliver(self, reply: replies.Reply, origin: Origin) -> None: ...

    def notice(self, reply: replies.Reply) -> None:
        """A reply of no ask: a device's or the voice door's state, a timer ringing."""


class Speech(Protocol):
    """The speech devices (agent/devices/hub.py)."""

    async def announce(self, text: str, device: str | None, origin: Origin) -> list[str]: ...

    def silence(self, origins: list[Origin], everything: bool) -> list[str]: ...

    async def play(self, sound: replies.Sound, origin: Origin) -> list[str]: ...


class Boards(Protocol):
    """The other boards on the broker (agent/mqtt/service.py)."""

    def check_board(self, board: str) -> None: ...

    def announce_on(self, board: str, text: str, device: str | None) -> list[str]: ...

    async def claim(self, wake: str, probability: float, window: float) -> bool: ...


class Alarms(Protocol):
    """What rings until stopped (agent/tools/timers/provider.py)."""

    def silence(self) -> int:
        """End every ring now; how many were ringing."""


@dataclass(eq=False)
class Cancel:
    """A door's own cancellation of one ask (the socket's `cancel`, its
    connection gone): the scope the ask runs in, and what its asker is told."""
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    reason: replies.Error | None = None

    def __call__(self, reason: replies.Error) -> None:
        self.reason = reason
        self.scope.cancel()


class Center:
    def __init__(self, runner, counters: Counters | None = None) -> None:
        self.runner = runner
        self.counters = counters if counters is not None else Counters()
        self.speech: Speech | None = None
        self.boards: Boards | None = None
        self.alarms: Alarms | None = None
        self._listeners: list[Listener] = []
        self._keys = itertools.count(1)
        self._accepting = True
        self._asks: dict[Stop, Origin] = {}  # running, with their origin as it is now

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def origin(self, door: Door, name: RequestId | None, session: str | None = None, *,
               speak_on: str | None = None, client: int | None = None) -> Origin:
        """A new ask's Origin, with a key no other ask of this daemon has."""
        return Origin(door, next(self._keys), name, session, speak_on, client)

    def close(self) -> None:
        """The daemon is stopping: asks are refused from now on."""
        self._accepting = False

    @property
    def accepting(self) -> bool:
        return self._accepting

    # ---- the ask lifecycle ----

    async def ask(self, ask: Ask, on_reply: OnReply, cancel: Cancel | None = None) -> Outcome:
        """Run one ask to its end; on_reply gets each reply first (the asker's
        own copy). cancel: the door's scope and reason, when it can cancel."""
        if not self._accepting:
            log.info("%s: ask refused, the daemon is stopping", ask.who)
            await on_reply(replies.Error(ErrorCode.SHUTTING_DOWN, "the daemon is shutting "
                                         "down; ask again when it is back"))
            return Outcome.FAILED
        self.counters.asks += 1
        outcome = Outcome.FAILED
        origin = ask.origin
        listeners = tuple(self._listeners)
        stop = Stop()
        delta, mask = replies.Delta, masking.mask

        async def emit(reply: replies.Reply) -> None:
            nonlocal outcome, origin
            if type(reply) is delta:  # the per-token path: masked here, nothing else to note
                text = mask(reply.text)
                if text is not reply.text:
                    reply = delta(text)
            else:
                reply = masked(reply)
                if isinstance(reply, replies.Started):
                    origin = origin.on_session(reply.session)
                    self._asks[stop] = origin
                elif isinstance(reply, replies.Done):
                    outcome = Outcome.ANSWERED
            await on_reply(reply)
            for listener in listeners:
                await listener.deliver(reply, origin)

        scope = cancel.scope if cancel is not None else contextlib.nullcontext()
        asker = _ASKING.set(origin)
        try:
            with scope, self._running(stop, origin):
                try:
                    await self.runner.ask(ask.prompt, origin.session, ask.provider, emit, stop)
                except Exception:
                    # A bug costs this ask, never the door's nursery and the daemon.
                    log.exception("%s: ask failed inside the daemon", ask.who)
                    await emit(replies.internal_error("ask"))
            if cancel is not None and cancel.scope.cancelled_caught:
                outcome = Outcome.CANCELLED
                await emit(cancel.reason)
        except BaseException:  # Cancelled, maybe grouped by a nursery on the way
            outcome = Outcome.CANCELLED
            raise
        finally:
            _ASKING.reset(asker)
            self.counters.ended(outcome)
        return outcome

    @contextlib.contextmanager
    def _running(self, stop: Stop, origin: Origin) -> Iterator[None]:
        self._asks[stop] = origin
        try:
            yield
        finally:
            del self._asks[stop]

    def notice(self, reply: replies.Reply) -> None:
        reply = masked(reply)
        for listener in self._listeners:
            listener.notice(reply)

    # ---- announce and stop ----

    async def announce(self, command: Announce) -> list[str]:
        """Where the text was given to; Refused when nowhere."""
        text = outgoing(command.text)
        if command.board is not None:
            return self.board(command.board).announce_on(command.board, text, command.device)
        if self.speech is None:
            raise Refused(ErrorCode.NO_SPEECH_DEVICE, "this daemon has no devices")
        origin = self.origin(Door.ANNOUNCE, None)
        return await self.speech.announce(text, command.device, origin)

    async def play(self, sound: replies.Sound) -> list[str]:
        """A sound (the voice door's wake sound) on the speech devices that
        play audio: where it was given to; Refused when nowhere."""
        if self.speech is None:
            raise Refused(ErrorCode.NO_SPEECH_DEVICE, "this daemon has no devices")
        return await self.speech.play(sound, self.origin(Door.ANNOUNCE, None))

    def board(self, board: str) -> Boards:
        """The broker's boards, if board can be reached now; Refused if not."""
        if self.boards is None:
            raise Refused(ErrorCode.BROKER_UNAVAILABLE, f"board {board!r}: this daemon is on "
                          "no MQTT broker ([mqtt] is not configured)")
        self.boards.check_board(board)
        return self.boards

    async def claim_utterance(self, wake: str, probability: float, window: float) -> bool:
        """Whether this board answers an utterance it heard (its wake word,
        at probability): the boards on the broker that heard it too agree on
        one within window seconds (agent/mqtt/claims.py). True at once
        without [mqtt]."""
        if self.boards is None:
            return True
        return await self.boards.claim(wake, probability, window)

    async def stop(self, command: StopAsks) -> replies.Stopped | None:
        """Stop the chosen asks and silence the speech devices; None when
        there was nothing to stop."""
        began = trio.current_time()
        chosen = [(stop, origin) for stop, origin in self._asks.items()
                  if command.chooses(origin)]
        for stop, _ in chosen:
            stop.stop()
        # A ring is no ask and no session's: a stop of everything ends it,
        # before the speech devices drop what it queued.
        rang = self.alarms.silence() if self.alarms is not None and command.everything else 0
        silenced = self.speech.silence([origin for _, origin in chosen], command.everything) \
            if self.speech is not None else []
        if not chosen and not silenced and not rang:
            return None
        with trio.move_on_after(STOP_WAIT):
            for stop, _ in chosen:
                await stop.closed.wait()
        seconds = trio.current_time() - began
        log.info("%s: stopped %d asks and silenced %s in %.3f s", command.who, len(chosen),
                 ", ".join(silenced) or "no device", seconds)
        return masked(replies.Stopped(tuple(origin.request for _, origin in chosen),
                                      tuple(silenced), round(seconds, 4)))

    def running(self) -> list[Origin]:
        """The asks in flight, as they are now."""
        return list(self._asks.values())
