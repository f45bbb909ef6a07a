"""The Wyoming conversation service: Home Assistant (or any Wyoming client)
hands the daemon what was said, and gets the answer back as it streams.

Home Assistant's Wyoming integration can use an external "handle" service
as its conversation agent. This is one: it answers `describe` with an
`info` that offers a handle program with `supports_handled_streaming`, and
each `transcript` becomes an ask, published to subscribers and devices like
any other (the speech devices speak it too). The replies go back as
`handled-start`, a `handled-chunk` per delta, `handled-stop` and the final
`handled` with the whole text; a failed ask as `not-handled` with the reason
(after `handled-stop` if chunks had gone). `ping` gets `pong`. A transcript's
`context` is echoed in those events, and a ping's `text` in its pong, only
up to ECHO bytes: a longer one is not echoed at all (never cut).

Sessions: a transcript's `context.conversation_id` names its session, so a
conversation Home Assistant continues keeps its history; the id is the
peer's text, so the session is named by its hash (`wyoming-<16 hex>`),
never by the text itself. A transcript without one gets a fresh session.

Access, one policy with the socket API (agent/core/access.py): on a Unix
socket (wyoming.socket_mode, socket_group) the peer is known by its
credentials and let in by daemon.allow_users / allow_groups. A TCP peer
cannot be identified by uid: it is let in by its address, in
`wyoming.allow`, or, with `wyoming.allow_loopback` (an explicit opt-in),
from this host, which lets in anything on it. Every connection and ask is
logged with its peer: address and port, or uid, gid and pid.

Caps: at most `max_connections` peers at a time, `max_connections_per_peer`
of one address (one uid; root's and the daemon's own are not capped), and
the last `reserved_connections` only for Unix-socket peers and addresses
allow names one by one, so strangers cannot take them all. Refusals are
counted and logged throttled. A peer that sends no event for `idle_timeout`
seconds while no ask of its runs is closed, and so is one whose event has
not come whole `event_timeout` seconds after it began (a drip). A peer that
leaves during its ask (EOF) has its ask cancelled and its slot freed at once.

Backpressure: each peer's outgoing events wait in a queue of at most QUEUE
events and `queue_bytes` bytes (one event over that when the queue is
empty: an answer's last `handled`). While more than half of it is unread,
the peer's next events are not read, so a peer that pipelines requests but
reads gets every reply; one that stops reading while its ask's replies fill
the queue is dropped rather than let it hold up the answer for the other
receivers (its ask is cancelled). A peer that breaks the framing is closed
with the reason logged.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import math
import os
import secrets
import select
import stat
import time
from dataclasses import dataclass
from typing import Any

import trio

from agent.core import replies
from agent.core.accept import accept_loop
from agent.core.access import Access, peer_of
from agent.core.center import Center
from agent.core.commands import Ask, Door
from agent.core.edge import outgoing
from agent.core.throttled import Throttled
from agent.wyoming import framing as wyoming
from agent.wyoming.config import WyomingConfig

log = logging.getLogger("homeagent.wyoming")

QUEUE = 256            # events waiting for one peer
QUEUE_BYTES = 1 << 20  # bytes of them, unless wyoming.queue_bytes says otherwise
ECHO = 1024            # bytes of a context or a ping's text echoed back; longer: not echoed
DRAIN = 5.0            # seconds a closing peer's queued events may take
READ = 65536
HANGUP_POLL = 0.5      # seconds between checks of a peer that left, while its next events wait
BACKLOG = 16
PROGRAM = "homeagent"


class ListenError(Exception):
    """wyoming.listen cannot be listened on: the daemon does not start."""


def session_for(context: Any) -> str:
    conversation = context.get("conversation_id") if isinstance(context, dict) else None
    if isinstance(conversation, str) and conversation:
        return "wyoming-" + hashlib.sha256(conversation.encode("utf-8", "replace")).hexdigest()[:16]
    return "wyoming-" + secrets.token_hex(8)


def echoed(value: Any) -> Any:
    """value, masked, if its JSON is at most ECHO bytes; else None: not echoed."""
    if len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()) > ECHO:
        return None
    return outgoing(value)


@dataclass(frozen=True, slots=True)
class _Source:
    """Who a connection is: its key for the per-peer cap, its name in the
    log, whether it may take a reserved slot and is free of the per-peer cap."""
    key: object
    who: str
    named: bool
    uncapped: bool = False


@dataclass(eq=False, slots=True)
class _Flight:
    who: str
    session: str
    started: float


class ConversationService:
    def __init__(self, center: Center, config: WyomingConfig, version: str,
                 access: Access = Access()) -> None:
        self.center = center
        self.config = config
        self.version = version
        self.access = access
        self.connections = 0
        self.refused = 0   # peers closed at once: not allowed, or over a cap
        self.transcripts = 0
        self._per_peer: dict[object, int] = {}
        self._flights: set[_Flight] = set()
        self._refusals: dict[str, Throttled] = {}
        self._own_uid = os.getuid()

    @property
    def where(self) -> str:
        family, host, port = self.config.listen
        if family == "unix":
            return f"unix:{host}"
        return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"

    def status(self) -> dict:
        now = time.monotonic()
        return {"listen": self.where, "connections": self.connections,
                "refused": self.refused, "transcripts": self.transcripts,
                "active": [{"peer": f.who, "session": f.session,
                            "seconds": round(now - f.started, 3)} for f in self._flights]}

    def info(self) -> wyoming.Event:
        attribution = {"name": "homeagent", "url": ""}
        return wyoming.Event("info", {"handle": [{
            "name": PROGRAM, "attribution": attribution, "installed": True,
            "description": "homeagent, the LLM agent daemon", "version": self.version,
            "supports_handled_streaming": True,
            "models": [{"name": PROGRAM, "attribution": attribution, "installed": True,
                        "description": None, "version": self.version,
                        "languages": list(self.config.languages)}]}]})

    async def listen(self) -> list:
        """The listeners of wyoming.listen; raises ListenError naming it."""
        family, host, port = self.config.listen
        where = self.where
        try:
            if family == "tcp":
                listeners = await _tcp_listeners(host, port)
            else:
                listeners = [await _unix_listener(host, self.config.socket_mode,
                                                  self.config.socket_gid)]
        except OSError as error:
            raise ListenError(f"wyoming.listen {where}: {error.strerror or error}") from None
        log.info("wyoming conversation service on %s", where)
        return listeners

    async def serve(self, listeners: list) -> None:
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(self._accept, listener, nursery)

    async def _accept(self, listener, nursery: trio.Nursery) -> None:
        def accepted(stream) -> None:
            source, refusal = self._admit(stream)
            if refusal is not None:
                self.refused += 1
                # one throttled line per kind of refusal: a flood of one hides no other
                throttled = self._refusals.setdefault(refusal.split("(")[-1], Throttled(log))
                throttled.note("wyoming: %s refused: %s", source, refusal)
                stream.socket.close()
                return
            self.connections += 1
            self._per_peer[source.key] = self._per_peer.get(source.key, 0) + 1
            nursery.start_soon(self._connection, stream, source)

        async with listener:
            await accept_loop(listener, accepted, log)

    def _admit(self, stream) -> tuple[Any, str | None]:
        """The connection's _Source, or what names it and why it is refused,
        the setting that refuses it last, in parentheses."""
        sock = stream.socket
        if sock.family == trio.socket.AF_UNIX:
            try:
                peer = peer_of(sock)
            except OSError as error:
                return "a peer on the unix socket", f"no peer credentials: {error} (SO_PEERCRED)"
            source = _Source(("uid", peer.uid), f"wyoming peer {peer}", True,
                             peer.uid in (0, self._own_uid))
            if not self.access.allows(peer, self._own_uid):
                return source.who, "not let in (daemon.allow_users, allow_groups)"
        else:
            host, port = sock.getpeername()[:2]
            address = _unmapped(host)
            shown = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
            source = _Source(address, f"wyoming peer {shown}", any(
                net.num_addresses == 1 and address in net for net in self.config.allow))
            if not self._allowed(host):
                return source.who, "not let in (wyoming.allow, allow_loopback)"
        config = self.config
        if self.connections >= config.max_connections:
            return source.who, (f"{self.connections} connections already "
                                "(wyoming.max_connections)")
        if not source.named and (self.connections
                                 >= config.max_connections - config.reserved_connections):
            return source.who, (f"the last {config.reserved_connections} connections are kept "
                                "for unix-socket peers and addresses wyoming.allow names "
                                "(wyoming.reserved_connections)")
        mine = self._per_peer.get(source.key, 0)
        if not source.uncapped and mine >= config.max_connections_per_peer:
            return source.who, (f"{mine} connections of this peer already "
                                "(wyoming.max_connections_per_peer)")
        return source, None

    def _allowed(self, peer: str | None) -> bool:
        if peer is None:  # a Unix socket: its peer's credentials decide
            return True
        address = _unmapped(peer)
        return ((address.is_loopback and self.config.allow_loopback)
                or any(address in net for net in self.config.allow))

    async def _connection(self, stream, source: _Source) -> None:
        connection = _Peer(source.who, self.config.queue_bytes)
        log.info("%s: connected", connection.who)
        try:
            async with stream, trio.open_nursery() as nursery:
                connection.scope = nursery.cancel_scope
                nursery.start_soon(connection.write, stream)
                await self._read(stream, connection)
                # what was queued before the end still goes out, for a while
                connection.close()
                nursery.cancel_scope.deadline = trio.current_time() + DRAIN
        except Exception:
            # Whatever went wrong costs this connection, never the daemon.
            log.exception("%s: connection failed inside the daemon", connection.who)
        finally:
            self.connections -= 1
            self._per_peer[source.key] -= 1
            if not self._per_peer[source.key]:
                del self._per_peer[source.key]

    async def _read(self, stream, peer: _Peer) -> None:
        """The peer's events, in order, until it ends, breaks the framing, or
        is silent or dripping past its time limits."""
        config = self.config
        reader = wyoming.Reader()
        quiet_since = began = trio.current_time()  # the last event's end; this event's start
        while True:
            if not await self._room(peer):
                return
            if reader.mid_event:
                deadline, why = began + config.event_timeout, (
                    f"an event not complete {config.event_timeout:g} s after it began "
                    "(wyoming.event_timeout)")
            else:  # a reply it read counts as a sign of life too
                deadline, why = max(quiet_since, peer.written) + config.idle_timeout, (
                    f"no event for {config.idle_timeout:g} s (wyoming.idle_timeout)")
            with trio.move_on_at(deadline) as timer:
                try:
                    data = await stream.receive_some(READ)
                except trio.BrokenResourceError as error:  # a reset: it is gone
                    log.info("%s: connection lost: %s", peer.who, error.__cause__ or error)
                    peer.scope.cancel()
                    return
            if timer.cancelled_caught:
                log.warning("%s: closed: %s", peer.who, why)
                return
            was_mid_event = reader.mid_event
            for item in reader.feed(data) if data else reader.close():
                if type(item) is wyoming.FramingError:
                    log.warning("%s: closed: %s: %s", peer.who, item.problem.value, item.detail)
                    return
                # The replies of the last event have room, and their writer a turn.
                if not await self._room(peer):
                    return
                await trio.lowlevel.checkpoint()
                await self._event(item, stream, peer)
                quiet_since = trio.current_time()
            if not data:
                return
            if reader.mid_event and not was_mid_event:
                began = trio.current_time()

    async def _room(self, peer: _Peer) -> bool:
        """Wait until the peer's queue is at most half full: False, after it
        was closed, when it has not read that far in idle_timeout seconds."""
        with trio.move_on_after(self.config.idle_timeout):
            await peer.until_room()
            return True
        log.warning("%s: closed: its replies unread for %g s (wyoming.idle_timeout)",
                    peer.who, self.config.idle_timeout)
        return False

    async def _event(self, event: wyoming.Event, stream, peer: _Peer) -> None:
        if event.type == "describe":
            peer.queue(self.info())
        elif event.type == "ping":
            text = event.data.get("text")
            text = echoed(text) if isinstance(text, str) else None
            peer.queue(wyoming.Event("pong", {} if text is None else {"text": text}))
        elif event.type == "transcript":
            async with trio.open_nursery() as watching:
                watching.start_soon(_until_left, stream, peer)
                await self._transcript(event.data, peer)
                watching.cancel_scope.cancel()

    async def _transcript(self, data: dict, peer: _Peer) -> None:
        text, context = data.get("text"), data.get("context")
        context = echoed(context) if isinstance(context, dict) else None
        echo = {} if context is None else {"context": context}
        if not (isinstance(text, str) and text.strip()):
            peer.queue(wyoming.Event("not-handled", {"text": "empty transcript", **echo}))
            return
        self.transcripts += 1
        streamed = False

        async def on_reply(reply: replies.Reply) -> None:
            nonlocal streamed
            if isinstance(reply, replies.Delta):
                if not streamed:
                    streamed = True
                    peer.queue(wyoming.Event("handled-start", echo))
                peer.queue(wyoming.Event("handled-chunk", {"text": reply.text}))
                # The writer's turn: the deltas of one upstream read come
                # without a checkpoint, and hundreds of them would fill the
                # queue of a peer that reads as fast as it can.
                await trio.lowlevel.checkpoint()
            elif isinstance(reply, (replies.Done, replies.Error)):
                if streamed:
                    peer.queue(wyoming.Event("handled-stop"))
                if isinstance(reply, replies.Done):
                    peer.queue(wyoming.Event("handled", {"text": reply.text, **echo}))
                else:
                    peer.queue(wyoming.Event("not-handled", {
                        "text": f"{reply.code.value}: {reply.message}", **echo}))

        flight = _Flight(peer.who, session_for(data.get("context")), time.monotonic())
        self._flights.add(flight)
        log.info("%s: transcript: an ask on session %s", peer.who, flight.session)
        outcome = "cancelled"
        try:
            origin = self.center.origin(Door.WYOMING, peer.who, flight.session)
            outcome = (await self.center.ask(Ask(origin, text, who=peer.who), on_reply)).value
        finally:
            self._flights.discard(flight)
            log.info("%s: ask on session %s %s after %.3f s", peer.who, flight.session,
                     outcome, time.monotonic() - flight.started)


class _Peer:
    """One connection's outgoing events: a bounded queue (QUEUE events and
    max_bytes bytes, the ones being written included) and the task that
    writes it. A peer that lets it fill is closed (its ask is cancelled, as
    when a socket client goes away): queue() never waits, so it never holds
    up the answer for the other receivers. The reader waits in until_room()
    before it takes the peer's next event."""

    def __init__(self, who: str, max_bytes: int = QUEUE_BYTES) -> None:
        self.who = who
        self.scope: trio.CancelScope | None = None
        self.max_bytes = max_bytes
        self.bytes = 0
        self.written = -math.inf  # the end of the last write, by trio's clock
        self._send, self._receive = trio.open_memory_channel(QUEUE)
        self._drained = trio.Event()

    def queue(self, event: wyoming.Event) -> None:
        if self.scope.cancel_called:
            return  # closed: the replies until the ask sees its cancellation go nowhere
        data = wyoming.encode(event)
        if self.bytes and self.bytes + len(data) > self.max_bytes:
            log.warning("%s: closed: it did not read %d bytes of events", self.who, self.bytes)
            self.scope.cancel()
            return
        try:
            self._send.send_nowait(data)
        except trio.WouldBlock:
            log.warning("%s: closed: it did not read %d events", self.who, QUEUE)
            self.scope.cancel()
            return
        self.bytes += len(data)

    async def until_room(self) -> None:
        """Wait while more than half of the queue (in events or bytes) is unread."""
        while (self._send.statistics().current_buffer_used > QUEUE // 2
               or self.bytes > self.max_bytes // 2):
            self._drained = trio.Event()
            await self._drained.wait()

    def close(self) -> None:
        self._send.close()

    async def write(self, stream) -> None:
        async for data in self._receive:
            # What waits goes out in one write: a Unix socket holds a few
            # hundred small writes but a thousand events in one.
            batch = [data]
            while True:
                try:
                    batch.append(self._receive.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            data = b"".join(batch)
            del batch
            try:
                await stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
                log.info("%s: connection lost: %s", self.who, error.__cause__ or error)
                self.scope.cancel()
                return
            self.bytes -= len(data)
            self.written = trio.current_time()
            self._drained.set()


def _unmapped(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """A peer's address, an IPv4-mapped one (a dual-stack listener's) as IPv4."""
    address = ipaddress.ip_address(host.split("%")[0])
    return getattr(address, "ipv4_mapped", None) or address


def _left(sock) -> tuple[bool, bool]:
    """(whether the peer has shut down its side, whether bytes wait to be read)."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLRDHUP)
    events = 0
    for _, mask in poller.poll(0):
        events |= mask
    return bool(events & (select.POLLRDHUP | select.POLLHUP | select.POLLERR)), \
        bool(events & select.POLLIN)


async def _until_left(stream, peer: _Peer) -> None:
    """While an ask runs, its peer's next events are not read; a peer that
    has left (EOF, a reset) is noticed all the same, and its connection,
    the ask with it, ends at once."""
    sock = getattr(stream, "socket", None)
    if sock is None:
        return
    while True:
        left, waiting = _left(sock)
        if left:
            log.info("%s: left during its ask; the ask is cancelled", peer.who)
            peer.scope.cancel()
            return
        if waiting:  # its next events: not read until the ask ends, so look again later
            await trio.sleep(HANGUP_POLL)
        else:
            await trio.lowlevel.wait_readable(sock)


async def _tcp_listeners(host: str, port: int) -> list:
    """trio's listeners, but "::" dual-stack: IPv4 peers too, as IPv4-mapped
    addresses (trio binds every IPv6 socket IPv6-only)."""
    if not _any_address6(host):
        return await trio.open_tcp_listeners(port, host=host)
    sock = trio.socket.socket(trio.socket.AF_INET6, trio.socket.SOCK_STREAM)
    try:
        sock.setsockopt(trio.socket.IPPROTO_IPV6, trio.socket.IPV6_V6ONLY, 0)
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
        await sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return [trio.SocketListener(sock)]


def _any_address6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host) == ipaddress.IPv6Address("::")
    except ValueError:
        return False


async def _unix_listener(path: str, mode: int = 0o660, gid: int | None = None
                         ) -> trio.SocketListener:
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)  # a socket left by an earlier daemon
    except FileNotFoundError:
        pass
    sock = trio.socket.socket(trio.socket.AF_UNIX)
    await sock.bind(path)
    if gid is not None:
        os.chown(path, -1, gid)
    os.chmod(path, mode)
    sock.listen(BACKLOG)
    return trio.SocketListener(sock)
