"""The reply bus: where the replies of every ask go besides the client that
asked, and where a line typed on a device becomes an ask.

The socket server (server.py) publishes its clients' asks here; the device
hub (agent/devices/hub.py) is given ask_from_device() for a device's prompt
and notify_subscribers() for a device's state. Subscribers are the
connections that sent `subscribe`: each sees every reply under its own id,
with the ask it came from.

Every ask in flight, a client's or the daemon's own, is registered here
with its Stop (agent/session/runner.py), so that `stop` (the socket op, a
board's STOP) reaches all of them: stop() stops the chosen asks, silences
the speech devices (DeviceHub.silence) and returns once the asks' model
streams are closed.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import trio

from agent.api import replies
from agent.api.replies import ErrorCode, RequestId, address_prefix, encode, readdress
from agent.api.statistics import Counters, Outcome
from agent.session.runner import Stop

log = logging.getLogger("homeagent.api")

STOP_WAIT = 2.0  # seconds a stop waits for the stopped asks' streams to close


@dataclass(frozen=True, slots=True, eq=False)
class Subscription:
    """A connection's `subscribe` in effect."""
    request_id: RequestId
    reasoning: bool                # reasoning replies too
    send: Callable[[bytes], None]  # the connection's queue; never waits
    send_piece: Callable[[bytes], None]  # the same for a streamed piece (it may be held)
    prefix: bytes = field(init=False)  # of its lines: address_prefix(request_id)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix", address_prefix(self.request_id))


class Bus:
    def __init__(self, runner, devices, counters: Counters) -> None:
        self.runner = runner
        self.devices = devices  # a DeviceHub, or None
        self.counters = counters
        self._accepting_asks = True
        self._subscriptions: dict[Subscription, None] = {}  # in the order they came
        self._asks: dict = {}  # Stop -> the origin of its ask (updated in place by its owner)
        # the MQTT service, when there is one: it sees every ask's replies
        # (the board's state, the speech of an ask with speak_on on another
        # board) and reaches the other boards for an announce
        self.boards = None

    def stop_asks(self) -> None:
        """The daemon is stopping: prompts from devices are ignored from now on."""
        self._accepting_asks = False

    def subscribe(self, subscription: Subscription) -> None:
        self._subscriptions[subscription] = None

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.pop(subscription, None)

    async def publish(self, reply: replies.Reply, origin: Mapping[str, Any]) -> None:
        """A reply of any ask to the subscribers and the devices; origin names
        the ask: {client, id, session}, or {device, session} for a device's."""
        self.notify_subscribers(reply, origin)
        if self.devices:
            await self.devices.publish(reply, origin)
        # after the devices: at an answer's done its last sentences are
        # queued for speech, so the board's state goes to speaking, not idle
        if self.boards is not None:
            self.boards.observe(reply, origin)

    def notify_subscribers(self, reply: replies.Reply,
                           origin: Mapping[str, Any] | None = None) -> None:
        """A reply to every subscriber; without origin (a device's state) it
        has no `request`."""
        if not self._subscriptions:
            return
        line = encode(reply, request=origin)  # once for all, then addressed to each
        if isinstance(reply, replies.STREAMED):
            reasoning = isinstance(reply, replies.Reasoning)
            for subscription in self._subscriptions:
                if subscription.reasoning or not reasoning:
                    subscription.send_piece(readdress(line, subscription.prefix))
        else:
            for subscription in self._subscriptions:
                subscription.send(readdress(line, subscription.prefix))

    @contextlib.contextmanager
    def stoppable(self, origin: dict) -> Iterator:
        """Register an ask while it runs: the Stop to give the runner."""
        stop = Stop()
        self._asks[stop] = origin
        try:
            yield stop
        finally:
            del self._asks[stop]

    async def stop(self, who: str, session: str | None = None,
                   client: int | None = None) -> replies.Stopped | None:
        """Stop the asks of a session, of a client (a connection's number),
        of both, or with neither every ask and whatever the speech devices
        say. None when there was nothing to stop."""
        began = trio.current_time()
        chosen = [(stop, origin) for stop, origin in self._asks.items()
                  if (session is None or origin.get("session") == session)
                  and (client is None or origin.get("client") == client)]
        for stop, _ in chosen:
            stop.stop()
        everything = session is None and client is None
        silenced = self.devices.silence([origin for _, origin in chosen], everything) \
            if self.devices else []
        if not chosen and not silenced:
            return None
        with trio.move_on_after(STOP_WAIT):
            for stop, _ in chosen:
                await stop.closed.wait()
        seconds = trio.current_time() - began
        log.info("%s: stopped %d asks and silenced %s in %.3f s", who, len(chosen),
                 ", ".join(silenced) or "no device", seconds)
        return replies.Stopped(tuple(dict(origin) for _, origin in chosen), tuple(silenced),
                               round(seconds, 4))

    async def stop_from_device(self, device: str) -> None:
        """A board's STOP: every ask, every speech device."""
        await self.stop(f"device {device}")

    async def ask_from_device(self, device: str, prompt: str) -> None:
        """A prompt typed on a device: an ask on the session device-NAME,
        seen by subscribers and devices like any other."""
        await self.ask_from({"device": device, "session": f"device-{device}"}, prompt,
                            f"device {device}")

    async def ask_from(self, origin: Mapping[str, Any], prompt: str, who: str,
                       on_reply: Callable[[replies.Reply], Any] | None = None) -> None:
        """An ask from inside the daemon (a device, the Wyoming service) on
        origin["session"]: published like a client's; on_reply, if given, is
        awaited with each reply first (the asker's own copy)."""
        if not self._accepting_asks:
            log.info("%s: prompt ignored, the daemon is stopping", who)
            if on_reply is not None:
                await on_reply(replies.Error(ErrorCode.SHUTTING_DOWN,
                                             "the daemon is shutting down"))
            return
        self.counters.asks += 1
        outcome = Outcome.FAILED
        log.info("%s: ask", who)

        async def emit(reply: replies.Reply) -> None:
            nonlocal outcome
            if isinstance(reply, replies.Done):
                outcome = Outcome.ANSWERED
            if on_reply is not None:
                await on_reply(reply)
            await self.publish(reply, origin)

        try:
            with self.stoppable(dict(origin)) as stop:
                await self.runner.ask(prompt, origin["session"], None, emit, stop)
        except Exception:
            # A bug costs this ask, never the hub's nursery and the daemon.
            log.exception("%s: ask failed inside the daemon", who)
            await emit(replies.internal_error("ask"))
        finally:
            self.counters.ended(outcome)
