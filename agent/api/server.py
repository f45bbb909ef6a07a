"""The socket API server: trio tasks around the line protocol (protocol.py).

Per connection, one nursery holds a reader (lines in, requests dispatched),
a writer (the bounded outbox to the socket) and one task per ask. Replies
never wait for a slow reader: they go into the connection's outbox with
send_nowait, and a full outbox closes that connection with an overflow
error, so one stuck client costs its own asks and nothing else.

- EOF on the read side (a half-close, `printf ... | socat`) ends the
  subscription, lets the connection's asks finish, then closes it.
- A failed write means the client is gone: its own asks are cancelled
  (the upstream request is closed), nobody else's.
- `cancel` names a request of the same connection; other clients' requests
  cannot be reached.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import trio

from agent.api import protocol
from agent.api.protocol import Request, RequestError, encode, error, internal_error
from agent.lines import Line, LineReader
from agent.session.codec import turn_summary

log = logging.getLogger("homeagent.api")

RECEIVE_SIZE = 65536
WRITE_BATCH = 64 * 1024          # replies joined into one send, up to this many bytes
GOODBYE_TIMEOUT = 1.0            # for the last line to a client being closed
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux 4.13+
MAX_PEER_GROUPS = 256


@dataclass(frozen=True, slots=True)
class Peer:
    pid: int
    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"uid={self.uid} gid={self.gid} pid={self.pid}"


@dataclass(frozen=True, slots=True)
class Access:
    """Who may talk to the daemon beyond root and the daemon's own user. Both
    lists empty: whoever the socket's file mode lets connect."""
    allow_users: tuple[int, ...] = ()
    allow_groups: tuple[int, ...] = ()

    def allows(self, peer: Peer, own_uid: int) -> bool:
        if not self.allow_users and not self.allow_groups:
            return True
        if peer.uid in (0, own_uid) or peer.uid in self.allow_users:
            return True
        return any(g in self.allow_groups for g in (peer.gid, *peer.groups))


@dataclass(slots=True)
class Limits:
    max_line: int = protocol.DEFAULT_MAX_LINE
    client_queue: int = 256


def peer_of(sock) -> Peer:
    """The connecting process, from the kernel (SO_PEERCRED), not from anything it says."""
    pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                        struct.calcsize("3i")))
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 4 * MAX_PEER_GROUPS)
        groups = struct.unpack(f"{len(raw) // 4}I", raw)
    except OSError as exc:  # an older kernel, or more groups than we ask for
        if exc.errno not in (errno.ENOPROTOOPT, errno.ERANGE):
            raise
        groups = ()
    return Peer(pid, uid, gid, tuple(groups))


@dataclass(eq=False)
class _Flight:
    """An ask in flight."""
    connection: "_Connection"
    request_id: Any
    scope: trio.CancelScope
    started: float
    session: str | None = None
    provider: str | None = None
    cancel_reason: tuple[str, str] | None = None  # (code, message) once cancelled


@dataclass(eq=False)
class _Connection:
    number: int
    peer: Peer
    stream: trio.SocketStream
    outbox: trio.MemorySendChannel
    inbox: trio.MemoryReceiveChannel
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    flights: dict = field(default_factory=dict)     # request id -> _Flight
    subscription: tuple[Any, bool] | None = None    # (request id, with reasoning)
    overflowed: bool = False
    mid_write: bool = False  # a send was cut off: the client may hold half a line

    def send(self, reply: dict[str, Any]) -> None:
        """Queue a reply without waiting; a full queue ends the connection."""
        try:
            self.outbox.send_nowait(reply)
        except trio.WouldBlock:
            if not self.overflowed:
                self.overflowed = True
                self.scope.cancel()
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # closing: nothing more goes out


class ApiServer:
    """Serves the protocol on listeners; `status_extra()` adds the daemon's
    own fields (uptime, providers, devices) to status replies."""

    def __init__(self, runner, *, server_name: str, access: Access = Access(),
                 limits: Limits = Limits(), devices=None,
                 status_extra: Callable[[], dict[str, Any]] = dict) -> None:
        self.runner = runner
        self.devices = devices  # a DeviceHub: every reply goes to its devices too
        self.server_name = server_name
        self.access = access
        self.limits = limits
        self.status_extra = status_extra
        self.connections: dict[int, _Connection] = {}
        self.flights: set[_Flight] = set()
        self.draining = False
        self.counters = {"connections": 0, "refused": 0, "requests": 0, "bad_requests": 0,
                         "asks": 0, "answered": 0, "failed": 0, "cancelled": 0,
                         "overflows": 0}
        self._numbers = 0
        self._own_uid = os.getuid()
        self._idle = trio.Event()
        self._idle.set()
        self._accepting = trio.CancelScope()

    # ---- accepting ----

    async def serve(self, listeners: list, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Accept until drain() or cancellation; connection tasks run in this
        task's nursery, so they end with it."""
        async with trio.open_nursery() as connections:
            with self._accepting:
                await trio.serve_listeners(self._connection, listeners,
                                           handler_nursery=connections,
                                           task_status=task_status)
            # Draining: the listeners are closed; connections finish in the nursery.

    async def _connection(self, stream: trio.SocketStream) -> None:
        self._numbers += 1
        number = self._numbers
        try:
            await self._serve_connection(number, stream)
        except Exception:
            # Whatever went wrong costs this connection, never the daemon.
            log.exception("client %d: connection failed inside the daemon", number)
            await trio.aclose_forcefully(stream)

    async def _serve_connection(self, number: int, stream: trio.SocketStream) -> None:
        try:
            peer = peer_of(stream.socket)
        except OSError as exc:
            log.warning("client %d: no peer credentials (%s); refused", number, exc)
            await trio.aclose_forcefully(stream)
            return
        if not self.access.allows(peer, self._own_uid):
            self.counters["refused"] += 1
            log.warning("client %d %s: not in the allow-list; refused", number, peer)
            await self._goodbye(stream, error("not_allowed", f"uid {peer.uid} gid {peer.gid} "
                                              "may not use this daemon"))
            return
        outbox, inbox = trio.open_memory_channel(self.limits.client_queue)
        conn = _Connection(number, peer, stream, outbox, inbox)
        self.connections[number] = conn
        self.counters["connections"] += 1
        log.info("client %d %s: connected", number, peer)
        try:
            with conn.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer, conn)
                    async with trio.open_nursery() as requests:
                        conn.send(protocol.hello(self.server_name, self.limits.max_line,
                                                 ["stream", "reasoning", "subscribe", "cancel"]))
                        await self._reader(conn, requests)
                        # EOF: no more requests; those in progress finish.
                        conn.subscription = None
                    # The writer sends what is left, then ends the connection.
                    conn.outbox.close()
        finally:
            del self.connections[number]
            if conn.overflowed:
                self.counters["overflows"] += 1
                log.warning("client %d %s: more than %d replies unread; disconnected",
                            number, peer, self.limits.client_queue)
                await self._goodbye(stream, error(
                    "overflow", f"more than {self.limits.client_queue} replies were "
                    "waiting to be read; the connection is closed"), conn.mid_write)
            else:
                await trio.aclose_forcefully(stream)
            log.info("client %d: disconnected", number)

    async def _goodbye(self, stream: trio.SocketStream, reply: dict[str, Any],
                       after_partial_line: bool = False) -> None:
        """A last line, if the client's socket takes it soon, then close. After
        a send that was cut off, a newline first ends the broken line."""
        with trio.move_on_after(GOODBYE_TIMEOUT):
            try:
                await stream.send_all(b"\n" * after_partial_line + encode(reply))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await trio.aclose_forcefully(stream)

    # ---- the two directions ----

    async def _reader(self, conn: _Connection, nursery: trio.Nursery) -> None:
        reader = LineReader(self.limits.max_line)
        while True:
            try:
                data = await conn.stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                if reader.pending:
                    conn.send(error("incomplete_line", f"the input ended inside a line of "
                                    f"{reader.pending} bytes; it was ignored"))
                return
            for item in reader.feed(data):
                if isinstance(item, Line):
                    if item.data.strip():
                        self._dispatch(conn, item.data, nursery)
                else:
                    self.counters["bad_requests"] += 1
                    conn.send(error("line_too_long", f"a line is longer than {item.limit} "
                                    "bytes; it was skipped"))

    async def _writer(self, conn: _Connection) -> None:
        try:
            async for reply in conn.inbox:
                batch = bytearray(encode(reply))
                while len(batch) < WRITE_BATCH:
                    try:
                        batch += encode(conn.inbox.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                conn.mid_write = True
                await conn.stream.send_all(batch)
                conn.mid_write = False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            log.info("client %d: gone; its requests are cancelled", conn.number)
        conn.scope.cancel()

    # ---- requests ----

    def _dispatch(self, conn: _Connection, line: bytes, nursery: trio.Nursery) -> None:
        self.counters["requests"] += 1
        try:
            self._handle(conn, line, nursery)
        except Exception:
            # A bug must cost one request, never the daemon.
            log.exception("client %d %s: internal error on a request", conn.number, conn.peer)
            conn.send(internal_error("request"))

    def _handle(self, conn: _Connection, line: bytes, nursery: trio.Nursery) -> None:
        request = protocol.parse_request(line)
        if isinstance(request, RequestError):
            self.counters["bad_requests"] += 1
            log.info("client %d %s: bad request: %s", conn.number, conn.peer, request.message)
            conn.send(error(request.code, request.message, request.id))
            return
        log.info("client %d %s: %s id=%r", conn.number, conn.peer, request.op, request.id)
        busy = (request.id in conn.flights
                or (conn.subscription is not None and conn.subscription[0] == request.id))
        if busy:
            conn.send(error("duplicate_id", f"request {request.id!r} is still in progress "
                            "on this connection", request.id))
        elif request.op == "ask":
            self._start_ask(conn, request, nursery)
        elif request.op == "cancel":
            self._cancel(conn, request)
        elif request.op == "status":
            conn.send(self.status(request.id))
        elif request.op == "subscribe":
            conn.subscription = (request.id, request.args.get("reasoning", True))
            conn.send({"id": request.id, "type": "subscribed"})
        else:
            nursery.start_soon(self._session_op, conn, request)

    def _start_ask(self, conn: _Connection, request: Request, nursery: trio.Nursery) -> None:
        if self.draining:
            conn.send(error("shutting_down", "the daemon is shutting down; ask again "
                            "when it is back", request.id))
            return
        flight = _Flight(conn, request.id, trio.CancelScope(), time.monotonic(),
                         request.args.get("session"), request.args.get("provider"))
        conn.flights[request.id] = flight
        self.flights.add(flight)
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        self.counters["asks"] += 1
        nursery.start_soon(self._ask, flight, request)

    async def _ask(self, flight: _Flight, request: Request) -> None:
        conn, args = flight.connection, request.args
        streaming = args.get("stream", True)
        reasoning = args.get("reasoning", True)
        outcome = "failed"

        async def emit(reply: dict[str, Any]) -> None:
            nonlocal outcome
            kind = reply["type"]
            if kind == "started":
                flight.session, flight.provider = reply["session"], reply["provider"]
            elif kind == "done":
                outcome = "answered"
            reply = {"id": flight.request_id, **reply}
            if streaming or kind not in ("delta", "reasoning", "refusal"):
                if reasoning or kind != "reasoning":
                    conn.send(reply)
            origin = {"client": conn.number, "id": flight.request_id, "session": flight.session}
            await self.publish(reply, origin)

        try:
            with flight.scope:
                try:
                    await self.runner.ask(args["prompt"], args.get("session"),
                                          args.get("provider"), emit)
                except Exception:
                    log.exception("client %d: ask id=%r failed inside the daemon", conn.number,
                                  flight.request_id)
                    await emit(internal_error("ask", flight.request_id))
            if flight.scope.cancelled_caught:
                outcome = "cancelled"
                code, message = flight.cancel_reason or ("cancelled", "cancelled")
                await emit(error(code, message, flight.request_id))
        except BaseException:  # Cancelled, maybe grouped by a nursery on the way
            outcome = "cancelled"  # the whole connection: gone, overflowed or shut down
            raise
        finally:
            self.counters[outcome] += 1
            del conn.flights[flight.request_id]
            self.flights.discard(flight)
            if not self.flights:
                self._idle.set()
            log.info("client %d: ask id=%r %s after %.3f s", conn.number, flight.request_id,
                     outcome, time.monotonic() - flight.started)

    def _cancel(self, conn: _Connection, request: Request) -> None:
        target = request.args["target"]
        flight = conn.flights.get(target)
        if flight is not None:
            flight.cancel_reason = ("cancelled", f"cancelled by request {request.id!r}")
            flight.scope.cancel()
        elif conn.subscription is not None and conn.subscription[0] == target:
            conn.subscription = None
        else:
            conn.send(error("unknown_request", f"no request {target!r} in progress on "
                            "this connection", request.id))
            return
        conn.send({"id": request.id, "type": "ok"})

    async def _session_op(self, conn: _Connection, request: Request) -> None:
        session = request.args["session"] if request.op != "sessions" else None
        try:
            if request.op == "sessions":
                conn.send({"id": request.id, "type": "sessions",
                           "sessions": await self.runner.sessions()})
            elif request.op == "history":
                turns = await self.runner.history(session)
                conn.send({"id": request.id, "type": "history", "session": session,
                           "turns": [turn_summary(t) for t in turns]})
            else:
                forgotten = await self.runner.forget(session)
                conn.send({"id": request.id, "type": "ok", "forgotten": forgotten})
        except ValueError as exc:
            conn.send(error("bad_session", str(exc), request.id))
        except Exception:
            log.exception("client %d: %s id=%r failed inside the daemon", conn.number,
                          request.op, request.id)
            conn.send(internal_error("request", request.id))

    async def publish(self, reply: dict[str, Any], origin: dict[str, Any]) -> None:
        """A reply of any ask to the subscribers and the devices; origin names
        the ask: {client, id, session}, or {device, session} for a device's."""
        self.notify_subscribers(reply, origin)
        if self.devices:
            await self.devices.publish(reply, origin)

    def notify_subscribers(self, reply: dict[str, Any], origin: dict[str, Any] | None) -> None:
        for conn in self.connections.values():
            if conn.subscription is None:
                continue
            subscription_id, reasoning = conn.subscription
            if reasoning or reply["type"] != "reasoning":
                shown = {**reply, "id": subscription_id}
                if origin is not None:
                    shown["request"] = origin
                conn.send(shown)

    async def ask_from_device(self, device: str, prompt: str) -> None:
        """A prompt typed on a device: an ask on the session device-NAME,
        seen by subscribers and devices like any other."""
        if self.draining:
            log.info("device %s: prompt ignored, the daemon is stopping", device)
            return
        origin = {"device": device, "session": f"device-{device}"}
        self.counters["asks"] += 1
        outcome = "failed"
        log.info("device %s: ask", device)

        async def emit(reply: dict[str, Any]) -> None:
            nonlocal outcome
            if reply["type"] == "done":
                outcome = "answered"
            await self.publish(reply, origin)

        try:
            await self.runner.ask(prompt, origin["session"], None, emit)
        except Exception:
            # A bug costs this ask, never the hub's nursery and the daemon.
            log.exception("device %s: ask failed inside the daemon", device)
            await emit(internal_error("ask"))
        finally:
            self.counters[outcome] += 1

    # ---- status and shutdown ----

    def status(self, request_id: Any) -> dict[str, Any]:
        now = time.monotonic()
        active = [{"client": f.connection.number, "id": f.request_id, "session": f.session,
                   "provider": f.provider, "uid": f.connection.peer.uid,
                   "seconds": round(now - f.started, 3)} for f in self.flights]
        return {"id": request_id, "type": "status", **self.status_extra(),
                "clients": len(self.connections), "active": active,
                "counters": dict(self.counters), "draining": self.draining}

    async def drain(self, grace: float, reason: str) -> None:
        """Stop accepting; give asks in flight `grace` seconds to finish,
        cancel the rest telling their clients why, then say goodbye to every
        client and close the connections."""
        self.draining = True
        self._accepting.cancel()
        with trio.move_on_after(grace):
            await self._idle.wait()
        for flight in list(self.flights):
            flight.cancel_reason = ("shutting_down", f"{reason}; the answer was cut off "
                                    f"after the {grace:g} s grace time")
            flight.scope.cancel()
        with trio.move_on_after(GOODBYE_TIMEOUT):
            await self._idle.wait()
        for conn in list(self.connections.values()):
            conn.send({"type": "shutdown", "reason": reason})
            conn.outbox.close()
