"""The socket API server, the daemon's first door: trio tasks around the
line protocol (protocol.py). An ask becomes the center's command
(agent/core/center.py) like any door's; `stop` and `announce` too.

Per connection, one nursery holds a reader (lines in, requests dispatched),
a writer (the bounded outbox to the socket) and one task per ask. Replies
never wait for a slow reader: they go into the connection's outbox with
send_nowait, and a full outbox closes that connection with an overflow
error, so one stuck client costs its own asks and nothing else. The reader
in turn stops reading a client's requests while its outbox is more than
half full, so a client that pipelines many requests but reads is slowed,
never overflowed.

- Connections are capped in total and per uid (Limits); one over a cap gets
  an error line and is closed. The total cap is what keeps descriptors for
  history commits and upstream connections (the daemon sizes it).
- EOF on the read side (a half-close, `printf ... | socat`) ends the
  subscription, lets the connection's asks finish, then closes it.
- A client gone (a full close, seen at EOF or while half-closed, or a
  failed write): its own asks are cancelled (the upstream request is
  closed), nobody else's.
- A reload that no longer allows a peer disconnects it with not_allowed.
- `cancel` names a request of the same connection; other clients' requests
  cannot be reached. `stop` (barge-in) reaches every ask, of a session, of
  the connection or all (the center), and ends each with its answer so far
  kept.

Every reply is encoded (wire.encode) once, when it is sent: the replies of
an ask as the center gives them, masked already, and the server's own
replies through reply_line(), which passes them through the masking edge. A reply
with nothing queued before it goes straight to the socket when the socket
takes it, without waking the writer: one streamed token costs one write,
not a queue round trip and a task switch. Only what the socket does not
take at once is queued, and then everything after it, so the order holds;
the outbox holds lines. The replies of every ask also go to the center's
listeners: subscribers (subscribers.py), devices, the MQTT board.
"""

from __future__ import annotations

import logging
import math
import os
import select
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import trio

from agent.api import protocol
from agent.api.protocol import Request, RequestError
from agent.api.subscribers import Subscribers, Subscription
from agent.api.wire import PROTOCOL_VERSION, UNADDRESSED, encode
from agent.core import replies
from agent.core.access import Access, Peer, peer_of
from agent.core.accept import accept_loop
from agent.core.center import Cancel, Center
from agent.core.commands import Announce, Ask, Door, Refused, StopAsks
from agent.core.edge import masked, outgoing
from agent.tools.timers.provider import TimerTools
from agent.tools.timers.schedule import UnknownTimer
from agent.tools.timers.store import TimerStoreError
from agent.core.replies import ErrorCode, RequestId
from agent.core.statistics import ActiveAsk, Outcome, Statistics
from agent.core.throttled import Throttled
from agent.lines import Line, LineReader
from agent.session.codec import turn_summary
from agent.session.store import StorageError

log = logging.getLogger("homeagent.api")

RECEIVE_SIZE = 65536
WRITE_BATCH = 64 * 1024          # replies joined into one send, up to this many bytes
GOODBYE_TIMEOUT = 1.0            # for the last line to a client being closed
HANGUP_POLL = 0.5                # seconds between checks of a half-closed client for a full close
CAPABILITIES = ("stream", "reasoning", "subscribe", "cancel", "announce", "stop")


@dataclass(frozen=True, slots=True)
class Limits:
    max_line: int = protocol.DEFAULT_MAX_LINE
    client_queue: int = 256
    max_clients: int = 64            # connections open at once, in total
    max_clients_per_user: int = 16   # of them from one uid
    # Streamed pieces (deltas, reasoning) are written to a connection at
    # most once per this many seconds: those that come sooner go out
    # together at its end, with whatever replies came behind them. At a
    # board's model pace (tokens 20-50 ms apart) each goes out at once, the
    # first of an answer always does; a faster stream costs a write per interval
    # and connection, not one per token (each write wakes the reader). 16 ms
    # is a frame of a 60 Hz display: what shows text can show no faster.
    delta_interval: float = 0.016


def hung_up(stream: trio.abc.Stream) -> bool:
    """Whether the peer closed its socket entirely, not only its sending
    side: a full close shows POLLHUP at once, a half-close never does. A
    stream without a socket (in-process tests) never hangs up this way."""
    sock = getattr(stream, "socket", None)
    if sock is None or sock.fileno() < 0:
        return False
    poller = select.poll()
    poller.register(sock.fileno(), 0)  # POLLHUP and POLLERR are always reported
    return any(events & (select.POLLHUP | select.POLLERR) for _, events in poller.poll(0))


async def _send_lines(conn: "_Connection", batch: bytearray) -> None:
    """Write whole lines. On a socket each send either happens or is
    cancelled, so conn.mid_line knows whether a cut-off write left half a
    line with the client (a memory stream takes a whole write at once)."""
    sock = getattr(conn.stream, "socket", None)
    conn.sending = True
    try:
        if sock is None:
            await conn.stream.send_all(batch)
            return
        view = memoryview(batch)
        sent = 0
        while sent < len(batch):
            fd = sock.fileno()
            try:  # straight to a socket that takes it: no scheduler pass after the write
                if fd < 0:
                    raise BlockingIOError  # closed: trio's send names it
                sent += os.write(fd, view[sent:])
            except BlockingIOError:
                sent += await sock.send(view[sent:])
            conn.mid_line = view[sent - 1] != ord("\n")
    finally:
        conn.sending = False


def reply_line(reply: replies.Reply, request_id: RequestId | None = UNADDRESSED) -> bytes:
    """A reply the server makes itself, as its line: through the masking
    edge, the request's id too (a client's own words)."""
    return encode(masked(reply), request_id if request_id is UNADDRESSED
                  else outgoing(request_id))


@dataclass(eq=False)
class _Flight:
    """An ask in flight."""
    connection: "_Connection"
    request_id: RequestId
    cancel: Cancel
    started: float
    session: str | None = None
    provider: str | None = None

    def active(self, now: float) -> ActiveAsk:
        """As the status reply lists it: the request id masked (a client's words)."""
        conn = self.connection
        return ActiveAsk(conn.number, outgoing(self.request_id), self.session, self.provider,
                         conn.peer.uid, round(now - self.started, 3))


@dataclass(eq=False)
class _Connection:
    number: int
    peer: Peer
    stream: trio.abc.HalfCloseableStream
    outbox: trio.MemorySendChannel
    inbox: trio.MemoryReceiveChannel
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    flights: dict[RequestId, _Flight] = field(default_factory=dict)
    subscription: Subscription | None = None
    ending: replies.Error | None = None  # why the daemon ends it: its last line
    mid_line: bool = False  # a send was cut off inside a line: the client holds half of it
    drained: trio.Event = field(default_factory=trio.Event)  # set when the writer takes replies
    queued: bool = False  # lines wait in the outbox or in the writer's hands
    # Streamed pieces at most one write per interval (Limits.delta_interval):
    # those that come sooner gather in `held` with every line behind them,
    # and the writer sends them at the interval's end; `flushing` while the
    # writer is at that (it needs no wake-up then), `waiting` while it waits
    # for the interval's end, `sending` while a write of it waits for the
    # client to take bytes.
    interval: float = 0.0
    last_delta: float = -math.inf  # the last piece's write, by trio's clock
    held: bytearray | None = None
    held_lines: int = 0
    flushing: bool = False
    waiting: trio.CancelScope | None = None
    sending: bool = False
    capacity: int = 0  # the outbox's, which bounds the held lines too

    def __post_init__(self) -> None:
        self.capacity = self.outbox.statistics().max_buffer_size

    def send(self, line: bytes) -> None:
        """Send an encoded reply without waiting: straight to the socket when
        nothing waits before it, else behind what waits: the held pieces,
        or the outbox (with whatever the socket did not take). Past
        client_queue lines waiting, the connection ends."""
        if self.held is not None:
            self._hold(line)
            return
        self.last_delta = -math.inf  # the next piece, the first of an answer, goes at once
        self._write(line)

    def send_piece(self, line: bytes) -> None:
        """A streamed piece (a delta, reasoning): as send(), but held when the
        last piece was written less than an interval ago, and no other reply
        since."""
        if self.held is None:
            if self.queued or not self.interval:
                self._write(line)
                return
            now = trio.current_time()
            if now - self.last_delta >= self.interval:
                self.last_delta = now
                self._write(line)
                return
        self._hold(line)

    def _write(self, line: bytes) -> None:
        if not self.queued and self.ending is None:
            sock = getattr(self.stream, "socket", None)
            # fileno() is -1 once closed: never a write to a descriptor reused since.
            fd = sock.fileno() if sock is not None else -1
            if fd >= 0:
                try:
                    sent = os.write(fd, line)  # non-blocking: trio's sockets are
                except BlockingIOError:
                    sent = 0
                except OSError:
                    sent = 0  # gone: the writer's send meets the same error and says so
                if sent == len(line):
                    return
                if sent:
                    self.mid_line = True
                    line = line[sent:]
        self.queued = True
        self._put(line)

    def _hold(self, line: bytes) -> None:
        """Behind the held pieces. The first starts them and wakes the
        writer, unless it is flushing them already. More than client_queue
        of them while the writer waits for the client to take bytes: the
        client is not reading, and the connection ends. More while the
        writer only waits for the interval's end: a burst of a fast
        upstream, sent at once, never held against a client that reads."""
        if self.held is None:
            self.held, self.held_lines = bytearray(), 0
            if not self.flushing:
                self._put(b"")  # an empty line: only a wake-up
        self.held += line
        self.held_lines += 1
        if self.held_lines > self.capacity:
            if self.sending:
                self._overflow()
            elif self.waiting is not None:
                self.waiting.cancel()

    def _put(self, line: bytes) -> None:
        try:
            self.outbox.send_nowait(line)
        except trio.WouldBlock:
            self._overflow()
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # closing: nothing more goes out

    def _overflow(self) -> None:
        self.end(replies.Error(ErrorCode.OVERFLOW, f"more than {self.capacity} replies were "
                               "waiting to be read; the connection is closed"))

    def end(self, reason: replies.Error) -> None:
        """Close the connection, cancelling its asks; the client is told `reason`."""
        if self.ending is None:
            self.ending = reason
            self.scope.cancel()

    async def until_outbox_has_room(self) -> None:
        """Wait while more than half of the outbox is unread."""
        while True:
            stats = self.outbox.statistics()
            if stats.current_buffer_used <= stats.max_buffer_size // 2:
                return
            self.drained = trio.Event()
            await self.drained.wait()


class ApiServer:
    """Serves the protocol on listeners; `status_extra()` adds the daemon's
    own fields (uptime, providers, devices) to status replies. `subscribers`
    is the listener the daemon adds to the center."""

    def __init__(self, center: Center, *, server_name: str, access: Access = Access(),
                 limits: Limits = Limits(),
                 status_extra: Callable[[], dict[str, Any]] = dict,
                 timers: TimerTools | None = None) -> None:
        self.center = center
        self.runner = center.runner
        self.server_name = server_name
        self.status_extra = status_extra
        self.timers = timers
        self.subscribers = Subscribers()
        self._access = access
        self._limits = limits
        self._counters = center.counters
        self._connections: dict[int, _Connection] = {}
        self._open = 0  # accepted sockets not yet closed, admitted or not
        self._refusals = Throttled(log)
        self._flights: set[_Flight] = set()
        self._draining = False
        self._numbers = 0
        self._own_uid = os.getuid()
        self._idle = trio.Event()
        self._idle.set()
        self._accepting = trio.CancelScope()

    def reconfigure(self, *, access: Access | None = None, limits: Limits | None = None) -> None:
        """New settings (a config reload): access for every connection, open
        ones included (a peer no longer allowed is disconnected); limits for
        the next connections' line and queue sizes, and the caps from now on."""
        if access is not None:
            self._access = access
            for conn in list(self._connections.values()):
                if not access.allows(conn.peer, self._own_uid):
                    self._counters.revoked += 1
                    log.warning("client %d %s: no longer in the allow-list; disconnected",
                                conn.number, conn.peer)
                    conn.end(replies.Error(ErrorCode.NOT_ALLOWED, f"uid {conn.peer.uid} gid "
                                           f"{conn.peer.gid} may no longer use this daemon"))
        if limits is not None:
            self._limits = limits

    def statistics(self) -> Statistics:
        now = time.monotonic()
        return Statistics(
            clients=len(self._connections),
            active=tuple(flight.active(now) for flight in self._flights),
            counters=replace(self._counters), draining=self._draining)

    # ---- accepting ----

    async def serve(self, listeners: list, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Accept until drain() or cancellation; connection tasks run in this
        task's nursery, so they end with it."""
        async with trio.open_nursery() as connections:
            with self._accepting:
                try:
                    async with trio.open_nursery() as accepting:
                        for listener in listeners:
                            accepting.start_soon(self._accept, listener, connections)
                        task_status.started()
                finally:
                    for listener in listeners:
                        await trio.aclose_forcefully(listener)
            # Draining: the listeners are closed; connections finish in the nursery.

    async def _accept(self, listener: trio.SocketListener, connections: trio.Nursery) -> None:
        def accepted(stream: trio.SocketStream) -> None:
            if self._open >= self._limits.max_clients:
                self._refuse_at_once(stream)
                return
            self._open += 1
            connections.start_soon(self._serve_accepted, stream)

        await accept_loop(listener, accepted, log)

    async def _serve_accepted(self, stream: trio.SocketStream) -> None:
        try:
            await self.serve_connection(stream)
        finally:
            self._open -= 1

    def _refuse_at_once(self, stream: trio.SocketStream) -> None:
        """Over the total cap: one write that does not wait, then closed, so a
        flood of connections holds no descriptor beyond its accept."""
        self._counters.refused += 1
        self._refusals.note("a client over daemon.max_clients (%d connections open); refused",
                            self._open)
        refusal = reply_line(replies.Error(ErrorCode.TOO_MANY_CONNECTIONS, f"{self._open} connections "
                                     "are open, the most this daemon takes; try again later"),
                       None)
        try:
            os.write(stream.socket.fileno(), refusal)
        except OSError:
            pass  # its buffer is full or it is gone: closing says enough
        stream.socket.close()

    async def serve_connection(self, stream: trio.abc.HalfCloseableStream,
                               peer: Peer | None = None) -> None:
        """One client, to its end. peer: who it is; None reads it from the
        kernel (a socket stream's SO_PEERCRED)."""
        self._numbers += 1
        number = self._numbers
        try:
            await self._serve_connection(number, stream, peer)
        except Exception:
            # Whatever went wrong costs this connection, never the daemon.
            log.exception("client %d: connection failed inside the daemon", number)
            await trio.aclose_forcefully(stream)

    async def _serve_connection(self, number: int, stream: trio.abc.HalfCloseableStream,
                                peer: Peer | None) -> None:
        if peer is None:
            try:
                peer = peer_of(stream.socket)
            except OSError as exc:
                log.warning("client %d: no peer credentials (%s); refused", number, exc)
                await trio.aclose_forcefully(stream)
                return
        if not self._access.allows(peer, self._own_uid):
            self._counters.refused += 1
            log.warning("client %d %s: not in the allow-list; refused", number, peer)
            await self._goodbye(stream, reply_line(replies.Error(
                ErrorCode.NOT_ALLOWED, f"uid {peer.uid} gid {peer.gid} may not use this "
                "daemon"), None))
            return
        # Root and the daemon's own user can stop the daemon anyway: only
        # the total cap holds for them.
        same_user = sum(1 for c in self._connections.values() if c.peer.uid == peer.uid)
        if peer.uid not in (0, self._own_uid) and same_user >= self._limits.max_clients_per_user:
            self._counters.refused += 1
            self._refusals.note("client %d %s: over daemon.max_clients_per_user (%d); refused",
                                number, peer, same_user)
            await self._goodbye(stream, reply_line(replies.Error(
                ErrorCode.TOO_MANY_CONNECTIONS, f"uid {peer.uid} has {same_user} connections "
                "open, the most this daemon takes from one user"), None))
            return
        outbox, inbox = trio.open_memory_channel(self._limits.client_queue)
        conn = _Connection(number, peer, stream, outbox, inbox,
                           interval=self._limits.delta_interval)
        self._connections[number] = conn
        self._counters.connections += 1
        log.info("client %d %s: connected", number, peer)
        try:
            with conn.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer, conn)
                    async with trio.open_nursery() as requests:
                        conn.send(reply_line(replies.Hello(PROTOCOL_VERSION, self.server_name,
                                                       protocol.OPERATIONS, CAPABILITIES,
                                                       self._limits.max_line)))
                        await self._reader(conn, requests)
                        if hung_up(stream):
                            self._gone(conn)
                        else:
                            # A half-close: no more requests; those in progress finish,
                            # unless the client closes entirely meanwhile.
                            nursery.start_soon(self._watch_hangup, conn)
                        self._subscribe(conn, None)
                    # The writer sends what is left, then ends the connection.
                    conn.outbox.close()
        finally:
            self._subscribe(conn, None)
            del self._connections[number]
            if conn.ending is not None:
                if conn.ending.code is ErrorCode.OVERFLOW:
                    self._counters.overflows += 1
                    log.warning("client %d %s: more than %d replies unread; disconnected",
                                number, peer, conn.outbox.statistics().max_buffer_size)
                await self._goodbye(stream, reply_line(conn.ending, None), conn.mid_line)
            else:
                await trio.aclose_forcefully(stream)
            log.info("client %d: disconnected", number)

    async def _goodbye(self, stream: trio.abc.Stream, line: bytes,
                       after_partial_line: bool = False) -> None:
        """A last line, if the client's socket takes it soon, then close. After
        a send that was cut off, a newline first ends the broken line."""
        with trio.move_on_after(GOODBYE_TIMEOUT):
            try:
                await stream.send_all(b"\n" * after_partial_line + line)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await trio.aclose_forcefully(stream)

    # ---- the two directions ----

    async def _reader(self, conn: _Connection, nursery: trio.Nursery) -> None:
        reader = LineReader(self._limits.max_line)
        while True:
            await conn.until_outbox_has_room()
            try:
                data = await conn.stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                if reader.pending:
                    conn.send(reply_line(replies.Error(
                        ErrorCode.INCOMPLETE_LINE, f"the input ended inside a line of "
                        f"{reader.pending} bytes; it was ignored"), None))
                return
            for item in reader.feed(data):
                # The replies of the last request have room, and their writer a turn.
                await conn.until_outbox_has_room()
                await trio.lowlevel.checkpoint()
                if isinstance(item, Line):
                    if item.data.strip():
                        self._dispatch(conn, item.data, nursery)
                else:
                    self._counters.bad_requests += 1
                    conn.send(reply_line(replies.Error(
                        ErrorCode.LINE_TOO_LONG, f"a line is longer than {item.limit} bytes; "
                        "it was skipped"), None))

    async def _writer(self, conn: _Connection) -> None:
        try:
            async for line in conn.inbox:
                batch = bytearray(line)
                while len(batch) < WRITE_BATCH:
                    try:
                        batch += conn.inbox.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                conn.drained.set()
                await _send_lines(conn, batch)
                if not conn.inbox.statistics().current_buffer_used:
                    conn.queued = False  # the next reply may go straight to the socket
                if conn.held is not None:
                    await self._flush_held(conn)
        except (trio.BrokenResourceError, trio.ClosedResourceError, BrokenPipeError,
                ConnectionResetError):
            self._gone(conn)
        conn.scope.cancel()

    @staticmethod
    async def _flush_held(conn: _Connection) -> None:
        """A connection's held pieces, one write an interval, until an
        interval passes with nothing held. While a stream goes on this is
        the writer's one wake-up per interval."""
        conn.flushing = True
        try:
            while True:
                with trio.CancelScope(deadline=conn.last_delta + conn.interval) as waiting:
                    conn.waiting = waiting
                    await trio.sleep_forever()
                conn.waiting = None
                held = conn.held
                if not held:
                    conn.held = None
                    return
                conn.held, conn.held_lines = bytearray(), 0  # what comes meanwhile waits behind
                await _send_lines(conn, held)
                conn.last_delta = trio.current_time()
                if not conn.held:
                    # Nothing came during the write: a reply goes out at once
                    # again; a piece within the interval is held anew, and
                    # this loop, still running, sends it at the interval's end.
                    conn.held = None
        finally:
            conn.flushing, conn.waiting = False, None

    async def _watch_hangup(self, conn: _Connection) -> None:
        """A half-closed client that then closes entirely is gone: its asks
        stop now, not when a reply finally fails to be written."""
        while not hung_up(conn.stream):
            await trio.sleep(HANGUP_POLL)
        self._gone(conn)

    def _gone(self, conn: _Connection) -> None:
        log.info("client %d: gone; its requests are cancelled", conn.number)
        conn.scope.cancel()

    # ---- requests ----

    def _dispatch(self, conn: _Connection, line: bytes, nursery: trio.Nursery) -> None:
        self._counters.requests += 1
        try:
            self._handle(conn, line, nursery)
        except Exception:
            # A bug must cost one request, never the daemon.
            log.exception("client %d %s: internal error on a request", conn.number, conn.peer)
            conn.send(reply_line(replies.internal_error("request"), None))

    def _handle(self, conn: _Connection, line: bytes, nursery: trio.Nursery) -> None:
        request = protocol.parse_request(line)
        if isinstance(request, RequestError):
            self._counters.bad_requests += 1
            log.info("client %d %s: bad request: %s", conn.number, conn.peer, request.message)
            conn.send(reply_line(replies.Error(request.code, request.message), request.id))
            return
        log.info("client %d %s: %s id=%r", conn.number, conn.peer, request.op, request.id)
        busy = (request.id in conn.flights
                or (conn.subscription is not None and conn.subscription.request_id == request.id))
        if busy:
            conn.send(reply_line(replies.Error(ErrorCode.DUPLICATE_ID, f"request {request.id!r} is "
                                           "still in progress on this connection"), request.id))
        elif request.op == "ask":
            self._start_ask(conn, request, nursery)
        elif request.op == "cancel":
            self._cancel(conn, request)
        elif request.op == "stop":
            nursery.start_soon(self._stop, conn, request)
        elif request.op == "announce":
            nursery.start_soon(self._announce, conn, request)
        elif request.op == "status":
            conn.send(reply_line(self._status(), request.id))
        elif request.op == "timers":
            conn.send(reply_line(self._timers(request), request.id))
        elif request.op == "subscribe":
            self._subscribe(conn, Subscription(request.id, request.args.get("reasoning", True),
                                               conn.send, conn.send_piece))
            conn.send(reply_line(replies.Subscribed(), request.id))
        else:
            nursery.start_soon(self._session_op, conn, request)

    def _start_ask(self, conn: _Connection, request: Request, nursery: trio.Nursery) -> None:
        if self._draining:
            conn.send(reply_line(replies.Error(ErrorCode.SHUTTING_DOWN, "the daemon is shutting "
                                         "down; ask again when it is back"), request.id))
            return
        if "speak_on" in request.args:
            try:
                self.center.board(request.args["speak_on"])
            except Refused as refusal:
                conn.send(reply_line(replies.Error(refusal.code, str(refusal)), request.id))
                return
        flight = _Flight(conn, request.id, Cancel(), time.monotonic(),
                         request.args.get("session"), request.args.get("provider"))
        conn.flights[request.id] = flight
        self._flights.add(flight)
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        nursery.start_soon(self._ask, flight, request)

    async def _ask(self, flight: _Flight, request: Request) -> None:
        conn, args = flight.connection, request.args
        streaming = args.get("stream", True)
        reasoning = args.get("reasoning", True)
        reply_id = outgoing(flight.request_id)  # masked once: a client's own words
        origin = self.center.origin(Door.SOCKET, flight.request_id, flight.session,
                                    speak_on=args.get("speak_on"), client=conn.number)

        async def on_reply(reply: replies.Reply) -> None:
            if type(reply) is replies.Delta:  # the per-token path: nothing else to note
                if streaming:
                    conn.send_piece(encode(reply, reply_id))
                return
            if isinstance(reply, replies.Started):
                flight.session, flight.provider = reply.session, reply.provider
            elif isinstance(reply, replies.Failover):
                flight.provider = reply.provider
            if isinstance(reply, replies.STREAMED):
                if streaming and (reasoning or not isinstance(reply, replies.Reasoning)):
                    conn.send_piece(encode(reply, reply_id))
            else:
                conn.send(encode(reply, reply_id))

        outcome = Outcome.CANCELLED  # unless the center returns: the whole connection went
        try:
            outcome = await self.center.ask(
                Ask(origin, args["prompt"], args.get("provider"),
                    f"client {conn.number} ask id={flight.request_id!r}"),
                on_reply, flight.cancel)
        finally:
            del conn.flights[flight.request_id]
            self._flights.discard(flight)
            if not self._flights:
                self._idle.set()
            log.info("client %d: ask id=%r %s after %.3f s", conn.number, flight.request_id,
                     outcome.value, time.monotonic() - flight.started)

    def _cancel(self, conn: _Connection, request: Request) -> None:
        target = request.args["target"]
        flight = conn.flights.get(target)
        if flight is not None:
            flight.cancel(replies.Error(ErrorCode.CANCELLED,
                                        f"cancelled by request {request.id!r}"))
        elif conn.subscription is not None and conn.subscription.request_id == target:
            self._subscribe(conn, None)
        else:
            conn.send(reply_line(replies.Error(ErrorCode.UNKNOWN_REQUEST, f"no request {target!r} "
                                         "in progress on this connection"), request.id))
            return
        conn.send(reply_line(replies.Ok(), request.id))

    async def _stop(self, conn: _Connection, request: Request) -> None:
        args = request.args
        try:
            reply = await self.center.stop(StopAsks(f"client {conn.number}", args.get("session"),
                                                    conn.number if args.get("mine") else None))
        except Exception:
            log.exception("client %d: stop id=%r failed inside the daemon", conn.number,
                          request.id)
            reply = replies.internal_error("request")
        if reply is None:
            whose = " ".join(filter(None, ["of this connection" if args.get("mine") else "",
                                           f"on session {args['session']!r}"
                                           if "session" in args else ""]))
            reply = replies.Error(ErrorCode.NOTHING_TO_STOP, f"no ask {whose} is running"
                                  if whose else "no ask is running and no speech device "
                                  "is speaking")
        conn.send(reply_line(reply, request.id))

    async def _announce(self, conn: _Connection, request: Request) -> None:
        args = request.args
        try:
            spoken_on = await self.center.announce(Announce(args["text"], args.get("device"),
                                                            args.get("board")))
            reply = replies.Announced(tuple(spoken_on))
        except Refused as refusal:
            reply = replies.Error(refusal.code, str(refusal))
        except Exception:
            log.exception("client %d: announce id=%r failed inside the daemon", conn.number,
                          request.id)
            reply = replies.internal_error("request")
        conn.send(reply_line(reply, request.id))

    def _subscribe(self, conn: _Connection, subscription: Subscription | None) -> None:
        """Start, replace (a second subscribe) or end (None) the connection's subscription."""
        if conn.subscription is not None:
            self.subscribers.unsubscribe(conn.subscription)
        conn.subscription = subscription
        if subscription is not None:
            self.subscribers.subscribe(subscription)

    async def _session_op(self, conn: _Connection, request: Request) -> None:
        session = request.args["session"] if request.op != "sessions" else None
        try:
            if request.op == "sessions":
                reply = replies.Sessions(await self.runner.sessions())
            elif request.op == "history":
                turns = await self.runner.history(session)
                reply = replies.History(session, [turn_summary(t) for t in turns])
            else:
                reply = replies.Ok(forgotten=await self.runner.forget(session))
        except ValueError as exc:
            reply = replies.Error(ErrorCode.BAD_SESSION, str(exc))
        except StorageError as exc:
            log.error("client %d: %s id=%r: the disk refused: %s", conn.number, request.op,
                      request.id, exc)
            reply = replies.Error(ErrorCode.STORAGE_ERROR, str(exc))
        except Exception:
            log.exception("client %d: %s id=%r failed inside the daemon", conn.number,
                          request.op, request.id)
            reply = replies.internal_error("request")
        conn.send(reply_line(reply, request.id))

    def _timers(self, request: Request) -> replies.Reply:
        """List the timers, cancelling one first when asked (the file is
        written before the reply says so)."""
        if self.timers is None:
            return replies.Error(ErrorCode.TIMERS_DISABLED, "this daemon has [timers] "
                                 "enabled = false")
        cancelled = None
        if "cancel" in request.args:
            try:
                cancelled = self.timers.cancel(request.args["cancel"])
            except UnknownTimer as exc:
                return replies.Error(ErrorCode.UNKNOWN_TIMER, str(exc))
            except TimerStoreError as exc:
                return replies.Error(ErrorCode.STORAGE_ERROR, str(exc))
        return replies.Timers(self.timers.listing(), cancelled)

    # ---- status and shutdown ----

    def _status(self) -> replies.Status:
        stats = self.statistics()
        return replies.Status(self.status_extra(), stats.clients,
                              tuple(asdict(a) for a in stats.active), asdict(stats.counters),
                              stats.draining)

    async def drain(self, grace: float, reason: str) -> None:
        """Stop accepting; give asks in flight `grace` seconds to finish,
        cancel the rest telling their clients why, then say goodbye to every
        client and close the connections."""
        self._draining = True
        self.center.close()
        self._accepting.cancel()
        with trio.move_on_after(grace):
            await self._idle.wait()
        for flight in list(self._flights):
            flight.cancel(replies.Error(ErrorCode.SHUTTING_DOWN, f"{reason}; the answer was "
                                        f"cut off after the {grace:g} s grace time"))
        with trio.move_on_after(GOODBYE_TIMEOUT):
            await self._idle.wait()
        for conn in list(self._connections.values()):
            conn.send(reply_line(replies.Shutdown(reason)))
            conn.outbox.close()
