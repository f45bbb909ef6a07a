"""The upstream transport: httpx's client over connections of our own.

httpx stays the client (the request, redirects, the Response and its
errors); this transport replaces httpcore under it for the daemon's
requests, because on a board the streamed body is the hot path and
httpcore's layers (a cancel scope, a trace context and h11's event machine
for every network read) cost the daemon more per token than decoding the
token did. Here a body read is one non-blocking read of the socket, waiting
for readability only when it finds nothing, and its bytes go through
agent/providers/http11.py's ResponseReader to the decoder.

Plain HTTP/1.1 only: no HTTP/2 and no proxies (agent.service.daemon keeps
httpx's own transport when the environment names a proxy). TLS goes through
trio's SSLStream with httpx's default context. Connections are kept alive
per (scheme, host, port), at most max_keepalive idle per host for
keepalive_expiry seconds, max_connections open in all; an idle connection
the server closed or wrote to is dropped before it is used. httpx's
timeouts apply: connect (TCP and TLS), write, read (each wait for the
network) and pool (waiting for a free connection).
"""

from __future__ import annotations

import math
import os
import select
import ssl

import httpx
import trio

from agent.providers.http11 import ProtocolError, ResponseReader

READ_SIZE = 64 * 1024
BODY_READ = "homeagent.body_read"  # the response extension that holds _Body.read
_FORBIDDEN = (b"\r", b"\n", b"\0")


class _Watchdog:
    """The read timeouts of the plain connections of one trio run, without
    a cancel scope per read (about 5 us, a tenth of a streamed token's
    cost): a wait for the network notes its deadline here, and this one
    system task wakes a wait that passed it with notify_closing, which the
    wait then reads as its timeout. It sleeps until the earliest deadline
    noted; a streaming connection moves its own on at every read, so the
    task wakes about once per read timeout, and never while nothing waits."""

    def __init__(self) -> None:
        self.token = trio.lowlevel.current_trio_token()  # the run it serves
        self._waits: set[_Connection] = set()
        self._target = math.inf  # when the task wakes next
        self._sleep: trio.CancelScope | None = None
        trio.lowlevel.spawn_system_task(self._run, name="upstream read timeouts")

    def watch(self, conn: "_Connection", deadline: float) -> None:
        conn.deadline = deadline
        self._waits.add(conn)
        if deadline < self._target:
            self._target = deadline
            if self._sleep is not None:
                self._sleep.deadline = deadline

    def forget(self, conn: "_Connection") -> None:
        self._waits.discard(conn)

    async def _run(self) -> None:
        while True:
            with trio.CancelScope(deadline=self._target) as self._sleep:
                await trio.sleep_forever()
            now = trio.current_time()
            target = math.inf
            for conn in list(self._waits):
                if conn.deadline <= now:
                    self._waits.discard(conn)
                    conn.timed_out = True
                    trio.lowlevel.notify_closing(conn.fd)
                elif conn.deadline < target:
                    target = conn.deadline
            self._target = target


class _Connection:
    """One TCP (or TLS) connection to an upstream."""

    __slots__ = ("key", "stream", "fd", "idle_since", "drained", "watchdog", "deadline",
                 "timed_out")

    def __init__(self, key: tuple, stream: trio.abc.Stream | None, fd: int | None) -> None:
        self.key = key
        self.stream = stream
        self.fd = fd           # the plain socket's, read directly; None for TLS
        self.idle_since = 0.0
        self.drained = True  # the socket was read empty: wait before the next read
        self.watchdog: _Watchdog | None = None  # the run's, for a plain connection
        self.deadline = math.inf  # of the wait in progress
        self.timed_out = False

    def raw_fd(self) -> int:
        stream = self.stream
        if isinstance(stream, trio.SSLStream):
            stream = stream.transport_stream
        return stream.socket.fileno()

    async def receive(self, timeout: float | None) -> bytes:
        """One read: its bytes, b"" at the peer's close; trio.TooSlowError
        when nothing came for timeout seconds."""
        fd = self.fd
        if fd is None:
            with trio.move_on_after(_inf(timeout)):
                return await self.stream.receive_some(READ_SIZE)
            raise trio.TooSlowError
        if not self.drained:  # the last read filled the buffer: more may be there
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                pass
            else:
                self.drained = len(data) < READ_SIZE
                await trio.lowlevel.checkpoint()  # bytes at once still let others run
                return data
        # A short read emptied the socket: wait before reading, rather than
        # paying a read that finds nothing (the paced stream's every token).
        watchdog = self.watchdog
        if timeout is not None:
            watchdog.watch(self, trio.current_time() + timeout)
        try:
            await trio.lowlevel.wait_readable(fd)
        except trio.ClosedResourceError:
            if self.timed_out:
                raise trio.TooSlowError from None
            raise
        finally:
            watchdog.forget(self)
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:  # woken with nothing after all: wait again
            return await self.receive(timeout)
        self.drained = len(data) < READ_SIZE
        return data

    async def close(self) -> None:
        await trio.aclose_forcefully(self.stream)


def _inf(timeout: float | None) -> float:
    return float("inf") if timeout is None else timeout


class _Body(httpx.AsyncByteStream):
    """The response body, read as the caller asks; the connection goes back
    to the pool at the close of a body read to its end. Besides httpx's
    iteration, read() is in the response's extensions under BODY_READ: the
    provider client's loop awaits it directly, past httpx's two generators
    a read."""

    def __init__(self, transport: "UpstreamTransport", conn: _Connection,
                 reader: ResponseReader, first: bytes, timeout: float | None,
                 request: httpx.Request) -> None:
        self._transport = transport
        self._conn: _Connection | None = conn
        self._reader = reader
        self._first = first  # the body bytes that came with the head
        self._timeout = timeout
        self._request = request

    async def read(self) -> bytes:
        """The body's next bytes, b"" at its end."""
        if self._first:
            first, self._first = self._first, b""
            return first
        reader, conn = self._reader, self._conn
        if conn is None:
            raise httpx.StreamClosed()
        try:
            while not reader.done:
                data = await conn.receive(self._timeout)
                if not data:
                    reader.eof()
                    break
                piece = reader.body(data)
                if piece:
                    return piece
        except (ProtocolError, OSError, trio.BrokenResourceError, trio.TooSlowError) as exc:
            raise _read_error(exc, self._request, self._timeout) from exc
        return b""

    async def __aiter__(self):
        read = self.read
        while piece := await read():
            yield piece

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._transport._release(conn, self._reader.done and self._reader.keep_alive)


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _read_error(exc: BaseException, request: httpx.Request,
                timeout: float | None) -> httpx.TransportError:
    """What a failed read is in httpx's terms."""
    if isinstance(exc, ProtocolError):
        return httpx.RemoteProtocolError(str(exc), request=request)
    if isinstance(exc, trio.TooSlowError):
        return httpx.ReadTimeout(f"no byte from the server in {timeout:g} s", request=request)
    return httpx.ReadError(_why(exc), request=request)


class UpstreamTransport(httpx.AsyncBaseTransport):
    def __init__(self, *, max_connections: int = 64, max_keepalive: int = 8,
                 keepalive_expiry: float = 60.0) -> None:
        self._max_keepalive = max_keepalive
        self._expiry = keepalive_expiry
        self._slots = trio.CapacityLimiter(max_connections)
        self._idle: dict[tuple, list[_Connection]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._ssl_lock = trio.Lock()
        self._watchdog_of_run: _Watchdog | None = None
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the transport is closed")
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"{url.scheme!r} is not http or https",
                                            request=request)
        timeouts = request.extensions.get("timeout", {})
        body = await request.aread()
        payload = _request_head(request, len(body)) + body
        conn = await self._connection(request, url, timeouts)
        reader = ResponseReader(request.method.encode("ascii"))
        read_timeout = timeouts.get("read")
        try:
            with trio.move_on_after(_inf(timeouts.get("write"))) as scope:
                try:
                    await conn.stream.send_all(payload)
                except (OSError, trio.BrokenResourceError) as exc:
                    raise httpx.WriteError(_why(exc), request=request) from exc
            if scope.cancelled_caught:
                raise httpx.WriteTimeout("the request was not written in "
                                         f"{timeouts.get('write'):g} s", request=request)
            try:
                while True:
                    data = await conn.receive(read_timeout)
                    if not data:
                        reader.eof()
                    if reader.receive_head(data):
                        break
                first = reader.body(b"")  # the body bytes that came with the head
            except (ProtocolError, OSError, trio.BrokenResourceError, trio.TooSlowError) as exc:
                raise _read_error(exc, request, read_timeout) from exc
        except BaseException:
            await self._release(conn, False)
            raise
        body = _Body(self, conn, reader, first, read_timeout, request)
        return httpx.Response(reader.status, headers=reader.headers, stream=body,
                              extensions={"http_version": reader.http_version,
                                          "reason_phrase": reader.reason,
                                          BODY_READ: body.read})

    async def _connection(self, request: httpx.Request, url: httpx.URL,
                          timeouts: dict) -> _Connection:
        key = (url.scheme, url.host, url.port)
        idle = self._idle.get(key)
        now = trio.current_time()
        while idle:
            conn = idle.pop()
            if now - conn.idle_since < self._expiry and _still_idle(conn):
                if conn.fd is not None:
                    conn.watchdog = self._watchdog()
                return conn
            await self._release(conn, False)
        if self._slots.available_tokens == 0:
            await self._drop_an_idle_connection()
        # the connection holds a slot from before its connect until its close
        conn = _Connection(key, None, None)
        with trio.move_on_after(_inf(timeouts.get("pool"))) as scope:
            await self._slots.acquire_on_behalf_of(conn)
        if scope.cancelled_caught:
            raise httpx.PoolTimeout("no free upstream connection in "
                                    f"{timeouts.get('pool'):g} s", request=request)
        try:
            await self._connect(conn, request, url, timeouts.get("connect"))
        except BaseException:
            self._slots.release_on_behalf_of(conn)
            raise
        return conn

    async def _connect(self, conn: _Connection, request: httpx.Request, url: httpx.URL,
                       timeout: float | None) -> None:
        port = url.port or (443 if url.scheme == "https" else 80)
        host = url.host
        with trio.move_on_after(_inf(timeout)):
            try:
                tcp = await trio.open_tcp_stream(host, port)
            except OSError as exc:
                raise httpx.ConnectError(_why(exc), request=request) from exc
            if url.scheme == "http":
                conn.stream, conn.fd = tcp, tcp.socket.fileno()
                conn.watchdog = self._watchdog()
                return
            try:
                context = await self._ssl_context()
                tls = trio.SSLStream(tcp, context, server_hostname=host, https_compatible=True)
                await tls.do_handshake()
            except (trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
                await trio.aclose_forcefully(tcp)
                cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
                raise httpx.ConnectError(_why(cause or exc), request=request) from exc
            except BaseException:
                await trio.aclose_forcefully(tcp)
                raise
            conn.stream = tls
            return
        raise httpx.ConnectTimeout(f"no connection in {timeout:g} s", request=request)

    def _watchdog(self) -> _Watchdog:
        """This run's (a transport may outlive a trio run: a test's)."""
        if self._watchdog_of_run is None or \
                self._watchdog_of_run.token is not trio.lowlevel.current_trio_token():
            self._watchdog_of_run = _Watchdog()
        return self._watchdog_of_run

    async def _ssl_context(self) -> ssl.SSLContext:
        # Loading the CA bundle takes long on a board: once, in a worker
        # thread, at the first https request (never for a local server).
        async with self._ssl_lock:
            if self._ssl is None:
                self._ssl = await trio.to_thread.run_sync(httpx.create_ssl_context)
        return self._ssl

    async def _drop_an_idle_connection(self) -> None:
        """All slots taken: the oldest idle connection of another host gives its way."""
        oldest = min((c for conns in self._idle.values() for c in conns),
                     key=lambda c: c.idle_since, default=None)
        if oldest is not None:
            self._idle[oldest.key].remove(oldest)
            await self._release(oldest, False)

    async def _release(self, conn: _Connection, reusable: bool) -> None:
        # a request waiting for a slot gets this one's: it is closed, not kept
        if reusable and not self._closed and not self._slots.statistics().tasks_waiting:
            idle = self._idle.setdefault(conn.key, [])
            if len(idle) < self._max_keepalive:
                conn.idle_since = trio.current_time()
                idle.append(conn)
                return
        self._slots.release_on_behalf_of(conn)
        with trio.CancelScope(shield=True):
            await conn.close()

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                await self._release(conn, False)


def _still_idle(conn: _Connection) -> bool:
    """An idle connection has nothing to read: a readable one was closed by
    the server (or holds bytes nobody asked for) and is not reused."""
    poll = select.poll()
    poll.register(conn.raw_fd(), select.POLLIN)
    return not poll.poll(0)


def _request_head(request: httpx.Request, length: int) -> bytes:
    """The request line and headers. The body was read whole, so a streamed
    one (Transfer-Encoding: chunked) goes with its Content-Length."""
    url = request.url
    target = url.raw_path or b"/"
    lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), target)]
    headers = request.headers.raw
    if any(name.lower() == b"transfer-encoding" for name, _ in headers):
        headers = [(name, value) for name, value in headers
                   if name.lower() not in (b"transfer-encoding", b"content-length")]
        headers.append((b"Content-Length", b"%d" % length))
    for name, value in headers:
        if any(c in name or c in value for c in _FORBIDDEN):
            raise httpx.LocalProtocolError(
                f"header {name.decode('latin-1')!r} holds CR, LF or NUL", request=request)
        lines.append(name + b": " + value)
    return b"\r\n".join(lines) + b"\r\n\r\n"
