"""The upstream transport: httpx's client over connections of our own.

httpx stays the client (the request, redirects, the Response and its
errors); this transport replaces httpcore under it for the daemon's
requests, because on a board the streamed body is the hot path and
httpcore's layers (a cancel scope, a trace context and h11's event machine
for every network read) cost the daemon more per token than decoding the
token did. Here a body read is one non-blocking read of the socket, waiting
for readability only when it finds nothing, and its bytes go through
agent/providers/http11.py's ResponseReader to the decoder.

HTTP/1.1 only: no HTTP/2 and no proxies (agent.service.daemon keeps
httpx's own transport when the environment names a proxy). TLS is an
ssl.SSLObject over memory buffers on the same socket reads, so that a TLS
body read costs what a plain one does (trio's SSLStream pays a cancel scope
and its own machinery a read); its context is httpx's default one, and a
request's CA_FILE extension adds that file's CAs to it (a provider's
ca_file). Connections are kept alive per (scheme, host, port, CA file), at
most max_keepalive idle per host for keepalive_expiry seconds,
max_connections open in all; an idle connection
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
CA_FILE = "homeagent.ca_file"  # the request extension: a PEM file of CAs trusted besides the default
TLS_HEADER = 5  # a TLS record's type, version and length
_FORBIDDEN = (b"\r", b"\n", b"\0")


class _Watchdog:
    """The read timeouts of the connections of one trio run, without
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


class TlsCut(OSError):
    """The peer closed the connection inside a TLS record: what it sent last
    never arrived whole."""


class _Connection:
    """One plain TCP connection to an upstream."""

    __slots__ = ("key", "stream", "fd", "idle_since", "drained", "watchdog", "deadline",
                 "timed_out")

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.stream: trio.SocketStream | None = None  # for writes; reads go to fd
        self.fd = -1
        self.idle_since = 0.0
        self.drained = True  # the socket was read empty: wait before the next read
        self.watchdog: _Watchdog | None = None  # the run's
        self.deadline = math.inf  # of the wait in progress
        self.timed_out = False

    def attach(self, tcp: trio.SocketStream) -> None:
        self.stream, self.fd = tcp, tcp.socket.fileno()

    def has_unread(self) -> bool:
        """Bytes that came and were not read yet, for an idle connection."""
        poll = select.poll()
        poll.register(self.fd, select.POLLIN)
        return bool(poll.poll(0))

    async def send_all(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def read_socket(self, timeout: float | None) -> bytes:
        """One read of the socket: its bytes, b"" at the peer's close;
        trio.TooSlowError when nothing came for timeout seconds."""
        fd = self.fd
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
            return await self.read_socket(timeout)
        self.drained = len(data) < READ_SIZE
        return data

    receive = read_socket  # a plain body read is one socket read

    async def close(self) -> None:
        await trio.aclose_forcefully(self.stream)


class _TlsConnection(_Connection):
    """One TLS connection: the socket's bytes go through an ssl.SSLObject's
    memory buffers, read as a plain connection reads them."""

    __slots__ = ("tls", "incoming", "outgoing", "record_left", "header")

    def __init__(self, key: tuple, context: ssl.SSLContext, host: str) -> None:
        super().__init__(key)
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname=host)
        # Where the record being received ends, to tell a close between two
        # records from one inside a record (OpenSSL names both alike).
        self.record_left = 0   # its bytes not received yet
        self.header = b""      # the start of a header cut by a read

    async def handshake(self) -> None:
        tls, incoming = self.tls, self.incoming
        while True:
            try:
                tls.do_handshake()
            except ssl.SSLWantReadError:
                await self._flush()
                data = await self.stream.receive_some(READ_SIZE)
                if not data:
                    raise ssl.SSLEOFError("the server closed the connection in the TLS handshake")
                self._track(data)
                incoming.write(data)
            else:
                await self._flush()
                return

    def has_unread(self) -> bool:
        return bool(self.incoming.pending or self.tls.pending()) or super().has_unread()

    async def send_all(self, data: bytes) -> None:
        self.tls.write(data)
        await self._flush()

    async def _flush(self) -> None:
        if self.outgoing.pending:
            await self.stream.send_all(self.outgoing.read())

    async def receive(self, timeout: float | None) -> bytes:
        """One read of application data: its bytes, b"" at the peer's
        close_notify or its close between two records; TlsCut at its close
        inside one; trio.TooSlowError as a plain read."""
        tls, incoming = self.tls, self.incoming
        while True:
            if incoming.pending:
                try:
                    data = tls.read(READ_SIZE)
                except ssl.SSLWantReadError:
                    # A record not whole yet, or one with nothing for the
                    # application (a TLS 1.3 session ticket, a key update).
                    data = None
                if self.outgoing.pending:  # the peer wants an answer (a key update)
                    with trio.move_on_after(_inf(timeout)):
                        await self._flush()
                    if self.outgoing.pending:
                        raise trio.TooSlowError
                if data is not None:
                    return data
            data = await self.read_socket(timeout)
            if not data:
                if self.record_left or self.header:
                    raise TlsCut("the server closed the connection inside a TLS record")
                # No close_notify: as for HTTPS generally, the body's own
                # framing tells a whole body from a cut one.
                return b""
            self._track(data)
            incoming.write(data)

    def _track(self, data: bytes) -> None:
        """Move record_left and header past data."""
        left = self.record_left - len(data)
        if left >= 0:  # within the record (the usual bulk read)
            self.record_left = left
            return
        if self.header:
            data = self.header + data
            at = 0
        else:
            at = self.record_left
        end = len(data)
        while at + TLS_HEADER <= end:
            at += TLS_HEADER + (data[at + 3] << 8 | data[at + 4])
        self.header = data[at:] if at < end else b""
        self.record_left = at - end if at > end else 0


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
        self._ssl: dict[str | None, ssl.SSLContext] = {}  # by CA file
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
                    await conn.send_all(payload)
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
        ca_file = request.extensions.get(CA_FILE) if url.scheme == "https" else None
        key = (url.scheme, url.host, url.port, ca_file)
        idle = self._idle.get(key)
        now = trio.current_time()
        while idle:
            conn = idle.pop()
            if now - conn.idle_since < self._expiry and not conn.has_unread():
                conn.watchdog = self._watchdog()
                return conn
            await self._release(conn, False)
        if url.scheme == "http":
            conn = _Connection(key)
        else:
            conn = _TlsConnection(key, await self._ssl_context(request, ca_file), url.host)
        if self._slots.available_tokens == 0:
            await self._drop_an_idle_connection()
        # the connection holds a slot from before its connect until its close
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
        conn.watchdog = self._watchdog()
        return conn

    async def _connect(self, conn: _Connection, request: httpx.Request, url: httpx.URL,
                       timeout: float | None) -> None:
        port = url.port or (443 if url.scheme == "https" else 80)
        with trio.move_on_after(_inf(timeout)):
            try:
                conn.attach(await trio.open_tcp_stream(url.host, port))
            except OSError as exc:
                raise httpx.ConnectError(_why(exc), request=request) from exc
            if isinstance(conn, _TlsConnection):
                try:
                    await conn.handshake()
                except (trio.BrokenResourceError, OSError) as exc:  # ssl.SSLError included
                    await conn.close()
                    cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
                    raise httpx.ConnectError(_why(cause or exc), request=request) from exc
                except BaseException:
                    await conn.close()
                    raise
            return
        raise httpx.ConnectTimeout(f"no connection in {timeout:g} s", request=request)

    def _watchdog(self) -> _Watchdog:
        """This run's (a transport may outlive a trio run: a test's)."""
        if self._watchdog_of_run is None or \
                self._watchdog_of_run.token is not trio.lowlevel.current_trio_token():
            self._watchdog_of_run = _Watchdog()
        return self._watchdog_of_run

    async def _ssl_context(self, request: httpx.Request, ca_file: str | None) -> ssl.SSLContext:
        """httpx's default context, with ca_file's CAs besides its own.
        Loading the CA bundle takes long on a board: once per CA file, in a
        worker thread, at its first https request (never for a local server)."""
        async with self._ssl_lock:
            if ca_file not in self._ssl:
                try:
                    self._ssl[ca_file] = await trio.to_thread.run_sync(_ssl_context, ca_file)
                except OSError as exc:  # ssl.SSLError included
                    raise httpx.ConnectError(f"CA file {ca_file}: {_why(exc)}",
                                             request=request) from exc
        return self._ssl[ca_file]

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


def _ssl_context(ca_file: str | None) -> ssl.SSLContext:
    context = httpx.create_ssl_context()
    if ca_file is not None:
        context.load_verify_locations(cafile=ca_file)
    return context


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
