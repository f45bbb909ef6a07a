"""Who asked, and what every door may ask of the center.

Every way in (the socket, a device's line, MQTT, Wyoming, the microphone) builds the same
commands: Ask, Announce, StopAsks. An Ask carries its Origin: frozen, made
by the center (Center.origin) with a key the daemon assigns, never a
client's id or a peer's address, so two asks never share one, whatever the
doors they came through say. The door's own name for the ask (a request
id, a device, an MQTT ask id) is only shown: in `request`, the wire form
subscribers and `stopped` see, masked when the origin is made.

Stop is the barge-in handle of one running ask: the center makes one per
ask and the runner watches it (agent/session/runner.py).
"""

from __future__ import annotations

import contextlib
import enum
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import trio

from agent.core.edge import outgoing
from agent.core.replies import ErrorCode, RequestId


class Door(enum.Enum):
    """Where an ask or announcement came in."""
    SOCKET = "client"      # a connection of the socket API
    DEVICE = "device"      # a line typed on a device (a serial board's PROMPT)
    WYOMING = "wyoming"    # a transcript from Home Assistant's conversation agent
    MQTT = "mqtt"          # the board's ask topic on the broker
    VOICE = "voice"        # the board's microphone: a wake word, then speech-to-text
    ANNOUNCE = "announce"  # an announcement: spoken, never asked


@dataclass(frozen=True, slots=True)
class Origin:
    """Who asked: the door, the key the center assigned, the session (None
    until the runner names it), the board to speak on instead of here, and
    the door's own words for it (`name`: a request id, a device, a peer, an
    MQTT ask id; `client`: the socket connection's number)."""
    door: Door
    key: int
    name: RequestId | None
    session: str | None = None
    speak_on: str | None = None
    client: int | None = None
    request: Mapping[str, Any] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # The wire form, masked once: what subscribers and `stopped` show.
        if self.door is Door.SOCKET:
            shown = {"client": self.client, "id": self.name, "session": self.session}
        elif self.door is Door.ANNOUNCE:
            shown = {"announce": self.key}
        else:
            shown = {self.door.value: self.name, "session": self.session}
        if self.speak_on is not None:
            shown["speak_on"] = self.speak_on
        object.__setattr__(self, "request", outgoing(shown))

    def on_session(self, session: str) -> "Origin":
        """The same ask, its session named (the runner's started)."""
        return self if session == self.session else replace(self, session=session)


@dataclass(frozen=True, slots=True)
class Ask:
    origin: Origin
    prompt: str
    provider: str | None = None
    who: str = ""  # for the log: "client 3", "device panel", "mqtt ask a1"


@dataclass(frozen=True, slots=True)
class Announce:
    """A text spoken on one speech device or every one (device None), or
    on another board through the broker (board)."""
    text: str
    device: str | None = None
    board: str | None = None


@dataclass(frozen=True, slots=True)
class StopAsks:
    """Barge-in: the asks of a session, of a socket connection (client), of
    both, or with neither every ask and whatever the speech devices say."""
    who: str
    session: str | None = None
    client: int | None = None

    @property
    def everything(self) -> bool:
        return self.session is None and self.client is None

    def chooses(self, origin: Origin) -> bool:
        return (self.session is None or origin.session == self.session) \
            and (self.client is None or origin.client == self.client)


class Refused(Exception):
    """A command the center cannot carry out: code is the API's ErrorCode,
    the message says why (an announcement with no speech device, a board
    that is not online...)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Stop:
    """Barge-in for one ask (the socket API's `stop`, a board's STOP):
    stop() ends its model stream and its tool calls at once, and the ask
    ends with done, finish_reason "stopped", the answer said so far kept.
    closed is set once its model stream is closed, before the history is
    written."""

    def __init__(self) -> None:
        self.requested = False
        self.closed = trio.Event()
        self._scopes: set[trio.CancelScope] = set()

    def stop(self) -> None:
        self.requested = True
        for scope in self._scopes:
            scope.cancel()

    @contextlib.contextmanager
    def cuts(self):
        """A cancel scope that stop() cancels, at once when it came before."""
        with trio.CancelScope() as scope:
            if self.requested:
                scope.cancel()
            self._scopes.add(scope)
            try:
                yield scope
            finally:
                self._scopes.discard(scope)
