"""agent/providers/transport.py: UpstreamTransport under httpx, against raw
loopback servers started by each test, so that each test decides the exact
bytes, their pacing and when the server closes.

Every wait is bounded (conftest.timeout); nothing asserts how long
anything took. Where the transport's state matters (an idle connection the
server closed), the test waits for that state rather than sleeping.
"""

from __future__ import annotations

import re
import ssl
from contextlib import asynccontextmanager
from functools import partial

import httpx
import pytest
import trio
import trio.testing

from agent.providers.transport import BODY_READ, UpstreamTransport
from conftest import timeout
from helpers import make_certificates

pytestmark = pytest.mark.trio

HOST = "127.0.0.1"


# ---------------------------------------------------------------------------
# A raw server
# ---------------------------------------------------------------------------

class Peer:
    """One accepted connection, as the server sees it."""

    def __init__(self, stream: trio.abc.Stream, index: int) -> None:
        self.stream = stream
        self.index = index
        self.buf = b""
        self.received = b""  # every byte the client sent on it
        self.requests = 0
        self.closed = trio.Event()  # the client's EOF (or reset) was seen

    async def _recv(self) -> bytes:
        try:
            data = await self.stream.receive_some(65536)
        except trio.BrokenResourceError:
            data = b""
        self.received += data
        if not data:
            self.closed.set()
        return data

    async def request(self) -> bytes | None:
        """The next request, head and (Content-Length) body; None at the client's close."""
        while b"\r\n\r\n" not in self.buf:
            data = await self._recv()
            if not data:
                assert not self.buf, f"the client closed mid-request: {self.buf[:200]!r}"
                return None
            self.buf += data
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        m = re.search(rb"(?im)^content-length: *(\d+)\r?$", head)
        n = int(m.group(1)) if m else 0
        while len(rest) < n:
            data = await self._recv()
            assert data, "the client closed mid-body"
            rest += data
        self.buf = rest[n:]
        self.requests += 1
        return head + b"\r\n\r\n" + rest[:n]

    async def send(self, data: bytes) -> None:
        try:
            await self.stream.send_all(data)
        except trio.BrokenResourceError:
            self.closed.set()  # the client closed (or reset) the connection
            raise

    async def until_eof(self) -> None:
        """Read (and drop) until the client closes."""
        while await self._recv():
            pass


class Server:
    def __init__(self, scheme: str) -> None:
        self.scheme = scheme
        self.port = 0
        self.peers: list[Peer] = []

    @property
    def connections(self) -> int:
        return len(self.peers)

    def url(self, path: str = "/") -> str:
        return f"{self.scheme}://{HOST}:{self.port}{path}"


@asynccontextmanager
async def serve(handler, ssl_context: ssl.SSLContext | None = None):
    """A loopback server in a nursery; handler(peer) serves each connection,
    which is closed when handler returns."""
    server = Server("https" if ssl_context else "http")

    async def on_connection(stream):
        peer = Peer(stream, len(server.peers))
        server.peers.append(peer)
        try:
            await handler(peer)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away (or its TLS handshake failed)
        finally:
            await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        if ssl_context is None:
            listeners = await nursery.start(partial(trio.serve_tcp, on_connection, 0, host=HOST))
        else:
            listeners = await nursery.start(partial(
                trio.serve_ssl_over_tcp, on_connection, 0, ssl_context, host=HOST))
        listener = listeners[0]
        if isinstance(listener, trio.SSLListener):
            listener = listener.transport_listener
        server.port = listener.socket.getsockname()[1]
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


def ok(body: bytes = b"hello", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def answer_each(response: bytes):
    """A handler answering every request on a connection with response."""
    async def handler(peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.send(response)
    return handler


def client(**limits) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=UpstreamTransport(**limits),
                             timeout=httpx.Timeout(timeout(5)))


async def wait(event: trio.Event, seconds: float = 5) -> None:
    with trio.fail_after(timeout(seconds)):
        await event.wait()


async def wait_idle_readable(transport: UpstreamTransport) -> None:
    """Until every idle connection of the pool has something to read (the
    server's close or bytes): the state the next request must notice."""
    with trio.fail_after(timeout(5)):
        for conns in transport._idle.values():
            for conn in conns:
                await trio.lowlevel.wait_readable(conn.fd)


# ---------------------------------------------------------------------------
# TLS: a test CA and a certificate for 127.0.0.1
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    make_certificates(d, "homeagent transport test CA")
    return d


@pytest.fixture
def server_tls(certificates) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certificates / "server.pem", certificates / "server.key")
    return ctx


@pytest.fixture
def trust_ca(certificates, monkeypatch):
    """The client trusts the test CA: httpx.create_ssl_context() reads SSL_CERT_FILE."""
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates / "ca.pem"))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


@pytest.fixture(params=["http", "https"])
def scheme_tls(request):
    """None for plain HTTP, else the server's TLS context (the client trusts its CA)."""
    if request.param == "http":
        return None
    request.getfixturevalue("trust_ca")
    return request.getfixturevalue("server_tls")


# ---------------------------------------------------------------------------
# Requests and bodies
# ---------------------------------------------------------------------------

async def test_request_bytes():
    seen = []

    async def handler(peer):
        seen.append(await peer.request())
        await peer.send(ok(b"done"))
        await peer.until_eof()

    async with serve(handler) as server, client() as c:
        r = await c.post(server.url("/v1/chat?stream=1&x=%20"), content=b"12345",
                         headers={"X-Key": "value"})
        assert r.status_code == 200 and r.content == b"done"
        assert r.http_version == "HTTP/1.1" and r.reason_phrase == "OK"
    head, _, body = seen[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat?stream=1&x=%20 HTTP/1.1"
    fields = [tuple(line.split(b": ", 1)) for line in lines[1:]]
    assert (b"Host", b"%s:%d" % (HOST.encode(), server.port)) in fields
    assert (b"Content-Length", b"5") in fields
    assert (b"X-Key", b"value") in fields
    assert body == b"12345"


async def test_a_streamed_request_body_goes_whole_with_its_content_length():
    """httpx marks a streamed body Transfer-Encoding: chunked; the transport
    reads it whole first, so it is sent with its length, unframed."""
    seen = []

    async def handler(peer):
        data = b""
        while not data.endswith(b"\r\n\r\nhello world"):
            more = await peer._recv()
            if not more:
                break
            data += more
        seen.append(data)
        await peer.send(ok())

    async def body():
        yield b"hello "
        yield b"world"

    async with serve(handler) as server, client() as c:
        with trio.fail_after(timeout(5)):
            response = await c.post(server.url(), content=body())
    assert response.status_code == 200
    head, _, raw = seen[0].partition(b"\r\n\r\n")
    fields = [line.partition(b": ")[::2] for line in head.split(b"\r\n")[1:]]
    assert (b"Content-Length", b"11") in fields
    assert not any(name.lower() == b"transfer-encoding" for name, _ in fields)
    assert raw == b"hello world"


PIECES = [b"data: one\n\n", b"data: two\n\n", b"x" * 900, b"data: [DONE]\n\n"]


@pytest.mark.parametrize("way", ["body_read", "aiter_raw"])
async def test_streamed_chunked_body_piece_by_piece(way, scheme_tls):
    """Each paced write comes out as one piece, before the next is written."""
    got = [trio.Event() for _ in PIECES]

    async def handler(peer):
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece, event in zip(PIECES, got):
            await peer.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            await event.wait()  # the next only once the client has this one
        await peer.send(b"0\r\n\r\n")
        await peer.until_eof()

    async with serve(handler, scheme_tls) as server, client() as c:
        out = []
        with trio.fail_after(timeout(10)):
            async with c.stream("GET", server.url()) as r:
                assert r.status_code == 200
                if way == "body_read":
                    read = r.extensions[BODY_READ]
                    for event in got:
                        out.append(await read())
                        event.set()
                    assert await read() == b""
                else:
                    async for piece in r.aiter_raw():
                        out.append(piece)
                        got[len(out) - 1].set()
        assert out == PIECES


async def test_several_chunks_in_one_write_are_one_piece():
    async def handler(peer):
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await peer.send(b"3\r\nabc\r\n2\r\nde\r\n1\r\nf\r\n")
        await peer.until_eof()

    async with serve(handler) as server, client() as c:
        with trio.fail_after(timeout(5)):
            async with c.stream("GET", server.url()) as r:
                read = r.extensions[BODY_READ]
                first = await read()
                if first != b"abcdef":  # the head and the chunks may come in one read
                    first += await read()
                assert first == b"abcdef"


# ---------------------------------------------------------------------------
# Keep-alive
# ---------------------------------------------------------------------------

RESPONSES = {
    "content-length": (b"GET", ok(b"hello"), b"hello"),
    "chunked": (b"GET", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        b"2\r\nhe\r\n3\r\nllo\r\n0\r\nX-T: 1\r\n\r\n", b"hello"),
    "204": (b"DELETE", b"HTTP/1.1 204 No Content\r\n\r\n", b""),
    "head": (b"HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", b""),
    "interim": (b"GET", b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"hello"), b"hello"),
    "http10-keep-alive": (b"GET", b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n"
                                  b"Content-Length: 5\r\n\r\nhello", b"hello"),
}


@pytest.mark.parametrize("kind", list(RESPONSES))
async def test_keep_alive_reuse(kind, scheme_tls):
    method, response, body = RESPONSES[kind]
    async with serve(answer_each(response), scheme_tls) as server, client() as c:
        for _ in range(3):
            with trio.fail_after(timeout(5)):
                r = await c.request(method.decode(), server.url())
            assert r.content == body
        assert server.connections == 1
        assert server.peers[0].requests == 3


@pytest.mark.parametrize("response", [
    ok(b"bye", b"Connection: close\r\n"),
    b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nbye",
    ok(b"bye") + b"garbage after the body",
], ids=["connection-close", "http10", "bytes-after-body"])
async def test_not_kept_alive(response):
    async with serve(answer_each(response)) as server, client() as c:
        for i in range(2):
            with trio.fail_after(timeout(5)):
                r = await c.get(server.url())
            assert r.content == b"bye"
            await wait(server.peers[i].closed)  # the transport closed it
        assert server.connections == 2


async def test_close_delimited_body():
    async def handler(peer):
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\n\r\nall of it")
        await peer.send(b" until the close")

    async with serve(handler) as server, client() as c:
        with trio.fail_after(timeout(5)):
            r = await c.get(server.url())
            assert r.content == b"all of it until the close"
            r = await c.get(server.url())
        assert server.connections == 2


async def test_body_not_read_to_end_closes_connection():
    async def handler(peer):
        if await peer.request() is None:
            return
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await peer.until_eof()

    async with serve(handler) as server, client() as c:
        with trio.fail_after(timeout(5)):
            async with c.stream("GET", server.url()) as r:
                assert await r.extensions[BODY_READ]() == b"first"
        await wait(server.peers[0].closed)
        with trio.fail_after(timeout(5)):
            async with c.stream("GET", server.url()) as r:
                assert await r.extensions[BODY_READ]() == b"first"
        assert server.connections == 2


async def test_body_never_read_closes_connection():
    """A body over one read, not read at all: the connection closes."""
    big = b"z" * (1 << 20)

    async def handler(peer):
        while await peer.request() is not None:
            await peer.send(ok(big))

    async with serve(handler) as server, client() as c:
        with trio.fail_after(timeout(5)):
            async with c.stream("GET", server.url()) as r:
                assert r.status_code == 200
        await wait(server.peers[0].closed)
        with trio.fail_after(timeout(5)):
            assert (await c.get(server.url())).content == big
        assert server.connections == 2


async def test_server_closed_idle_connection_is_not_reused():
    async def handler(peer):
        await peer.request()
        await peer.send(ok(b"one"))
        # and the server closes the kept-alive connection

    async with serve(handler) as server:
        transport = UpstreamTransport()
        async with httpx.AsyncClient(transport=transport, timeout=timeout(5)) as c:
            with trio.fail_after(timeout(5)):
                assert (await c.get(server.url())).content == b"one"
            await wait_idle_readable(transport)
            with trio.fail_after(timeout(5)):
                assert (await c.get(server.url())).content == b"one"
        assert server.connections == 2


async def test_idle_connection_with_stray_bytes_is_not_reused():
    async def handler(peer):
        await peer.request()
        await peer.send(ok(b"first"))
        await peer.send(ok(b"stale"))  # unasked: must never be taken as an answer
        await peer.until_eof()

    async with serve(handler) as server:
        transport = UpstreamTransport()
        async with httpx.AsyncClient(transport=transport, timeout=timeout(5)) as c:
            with trio.fail_after(timeout(5)):
                r = await c.get(server.url())
            await wait_idle_readable(transport)
            with trio.fail_after(timeout(5)):
                r2 = await c.get(server.url())
        assert r.content == b"first"
        assert r2.content == b"first"
        assert server.connections == 2
        await wait(server.peers[0].closed)


async def test_keepalive_expiry():
    async with serve(answer_each(ok())) as server, client(keepalive_expiry=0.001) as c:
        with trio.fail_after(timeout(5)):
            await c.get(server.url())
        await trio.sleep(0.01)  # trio's clock moves at least this far: past the expiry
        with trio.fail_after(timeout(5)):
            await c.get(server.url())
        assert server.connections == 2
        await wait(server.peers[0].closed)  # the expired one is closed, not leaked


async def test_max_keepalive_per_host():
    async def handler(peer):
        while await peer.request() is not None:
            await peer.send(ok())

    async with serve(handler) as server, client(max_keepalive=1) as c:
        with trio.fail_after(timeout(5)):
            async with c.stream("GET", server.url()) as r1, c.stream("GET", server.url()) as r2:
                await r1.aread()
                await r2.aread()
        assert server.connections == 2
        # one of the two was not kept: closed
        with trio.fail_after(timeout(5)):
            while not any(p.closed.is_set() for p in server.peers):
                await trio.sleep(0.001)
        assert sum(p.closed.is_set() for p in server.peers) == 1
        with trio.fail_after(timeout(5)):
            await c.get(server.url())
        assert server.connections == 2


async def test_transport_aclose_closes_idle_connections():
    async with serve(answer_each(ok())) as server:
        c = client()
        with trio.fail_after(timeout(5)):
            await c.get(server.url())
        await c.aclose()
        await wait(server.peers[0].closed)
        with pytest.raises(RuntimeError, match="closed"):
            await c._transport.handle_async_request(httpx.Request("GET", server.url()))


# ---------------------------------------------------------------------------
# Pool
# ---------------------------------------------------------------------------

async def test_pool_timeout():
    async with serve(answer_each(ok())) as server, client(max_connections=1) as c:
        with trio.fail_after(timeout(5)):
            async with c.stream("GET", server.url()) as r:
                assert r.status_code == 200
                with pytest.raises(httpx.PoolTimeout):
                    await c.get(server.url(), timeout=httpx.Timeout(timeout(5), pool=0.05))
            # the first one closed: its slot is free again
            assert (await c.get(server.url())).content == b"hello"


async def test_pool_full_of_idle_connections_to_another_host():
    """max_connections=1 and that one idle to another server: it gives way."""
    async with serve(answer_each(ok(b"a"))) as a, serve(answer_each(ok(b"b"))) as b, \
            client(max_connections=1) as c:
        with trio.fail_after(timeout(5)):
            assert (await c.get(a.url())).content == b"a"
            assert (await c.get(b.url(), timeout=httpx.Timeout(timeout(5), pool=0.05))
                    ).content == b"b"
        await wait(a.peers[0].closed)


async def test_pool_waiter_gets_released_connection():
    async def handler(peer):
        while await peer.request() is not None:
            await peer.send(ok())

    async with serve(handler) as server, client(max_connections=1) as c:
        results = []

        async def second():
            r = await c.get(server.url(), timeout=httpx.Timeout(timeout(5), pool=timeout(1)))
            results.append(r.content)

        with trio.fail_after(timeout(10)):
            async with trio.open_nursery() as nursery:
                async with c.stream("GET", server.url()) as r:
                    nursery.start_soon(second)
                    await trio.testing.wait_all_tasks_blocked()  # second waits for the slot
                    await r.aread()
        assert results == [b"hello"]


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------

async def test_connect_refused():
    sock = trio.socket.socket()
    await sock.bind((HOST, 0))
    port = sock.getsockname()[1]
    sock.close()  # bound, never listening, closed: connecting is refused
    async with client(max_connections=1) as c:
        for _ in range(2):  # the failed connect gave its slot back
            with trio.fail_after(timeout(5)):
                with pytest.raises(httpx.ConnectError):
                    await c.get(f"http://{HOST}:{port}/",
                                timeout=httpx.Timeout(timeout(5), pool=0.05))


async def test_read_timeout_during_head():
    async def handler(peer):
        await peer.request()
        await peer.until_eof()  # never answers

    async with serve(handler) as server, client(max_connections=1) as c:
        with trio.fail_after(timeout(5)):
            with pytest.raises(httpx.ReadTimeout):
                await c.get(server.url(), timeout=httpx.Timeout(timeout(5), read=0.05))
        await wait(server.peers[0].closed)


async def test_read_timeout_during_body(scheme_tls):
    async def handler(peer):
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
        await peer.until_eof()  # the other 5 never come

    async with serve(handler, scheme_tls) as server, client() as c:
        with trio.fail_after(timeout(5)):
            async with c.stream("GET", server.url(),
                                timeout=httpx.Timeout(timeout(5), read=0.05)) as r:
                read = r.extensions[BODY_READ]
                assert await read() == b"hello"
                with pytest.raises(httpx.ReadTimeout):
                    await read()
        await wait(server.peers[0].closed)


async def test_write_timeout():
    """The server never reads: a body far over both sockets' buffers cannot
    be written (tcp_wmem and tcp_rmem maxima are a few MB; the receive
    buffer only grows as the application reads)."""
    release = trio.Event()

    async def handler(peer):
        await release.wait()

    async with serve(handler) as server, client() as c:
        with trio.fail_after(timeout(10)):
            with pytest.raises(httpx.WriteTimeout):
                await c.post(server.url(), content=b"x" * (64 << 20),
                             timeout=httpx.Timeout(timeout(5), write=0.2))
        release.set()


async def test_tls_handshake_never_answered_is_connect_timeout():
    async def handler(peer):
        await peer.until_eof()  # plain TCP: the ClientHello gets no answer

    async with serve(handler) as server, client(max_connections=1) as c:
        url = f"https://{HOST}:{server.port}/"
        with trio.fail_after(timeout(5)):
            with pytest.raises(httpx.ConnectTimeout):
                await c.get(url, timeout=httpx.Timeout(timeout(5), connect=0.1))
        await wait(server.peers[0].closed)
        with trio.fail_after(timeout(5)):  # and the slot is free again
            with pytest.raises(httpx.ConnectTimeout):
                await c.get(url, timeout=httpx.Timeout(timeout(5), connect=0.1, pool=0.05))


@pytest.mark.parametrize("response,match", [
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
     "incomplete chunked body"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", "5 bytes before the end"),
], ids=["chunked", "content-length"])
async def test_body_cut_by_close(response, match):
    async def handler(peer):
        await peer.request()
        await peer.send(response)

    async with serve(handler) as server, client() as c:
        with trio.fail_after(timeout(5)):
            async with c.stream("GET", server.url()) as r:
                out = b""
                with pytest.raises(httpx.RemoteProtocolError, match=match):
                    async for piece in r.aiter_raw():
                        out += piece
                assert out == b"hello"


@pytest.mark.parametrize("response,match", [
    (b"", "without a response"),
    (b"HTTP/1.1 200 OK\r\nContent-Ty", "middle of the response head"),
    (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not an HTTP/1.1 status line"),
    (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "switched protocols"),
], ids=["nothing", "cut-head", "not-http", "101"])
async def test_bad_head(response, match):
    async def handler(peer):
        await peer.request()
        await peer.send(response)

    async with serve(handler) as server, client(max_connections=1) as c:
        with trio.fail_after(timeout(5)):
            with pytest.raises(httpx.RemoteProtocolError, match=match):
                await c.get(server.url(), timeout=httpx.Timeout(timeout(5), pool=0.05))
            with pytest.raises(httpx.RemoteProtocolError):  # the slot was given back
                await c.get(server.url(), timeout=httpx.Timeout(timeout(5), pool=0.05))


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("response,match", [
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
     "Transfer-Encoding other than chunked"),
    (CHUNKED_HEAD.replace(b"chunked", b"chunked, chunked") + b"5\r\nhello\r\n0\r\n\r\n",
     "chunked more than once"),
    (b"HTTP/1.1 200 O\x00K\r\nContent-Length: 5\r\n\r\nhello", "reason phrase"),
    (CHUNKED_HEAD + b"5\nhello\r\n0\r\n\r\n", "ended by a bare LF"),
    (CHUNKED_HEAD + b"5\r\nhello\r\n0\r\n\x00garbage\r\n\r\n", "not a trailer field"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello!", "disagree"),
], ids=["te-gzip", "te-chunked-twice", "reason-nul", "chunk-line-bare-lf", "trailer-garbage",
        "content-length-list-differs"])
async def test_refused_framing_is_remote_protocol_error_and_closes(response, match):
    """What h11 refuses is refused on a real connection too, named, and the
    connection is not reused."""
    async def handler(peer):
        if await peer.request() is not None:
            await peer.send(response)
            await peer.until_eof()

    async with serve(handler) as server, client(max_connections=1) as c:
        with trio.fail_after(timeout(5)):
            with pytest.raises(httpx.RemoteProtocolError, match=match):
                await c.get(server.url())
            await wait(server.peers[0].closed)


async def test_lax_but_legal_heads_are_read_and_kept_alive():
    """A head ending LF CRLF, a folded field and Content-Length: 2, 2 are
    read as h11 reads them, and the connection serves the next request."""
    response = (b"HTTP/1.1 200 OK\r\nX-Folded: a\r\n\tcontinued\r\n"
                b"Content-Length: 2, 2\n\r\nok")
    async with serve(answer_each(response)) as server, client() as c:
        for _ in range(2):
            with trio.fail_after(timeout(5)):
                r = await c.get(server.url())
            assert r.content == b"ok"
            assert r.headers["x-folded"] == "a continued"
        assert server.connections == 1


BAD_CHUNK_WITH_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"


async def _serve_bad_chunk_with_head(peer):
    if await peer.request() is not None:
        await peer.send(BAD_CHUNK_WITH_HEAD)  # one write: one read for the client
        await peer.until_eof()


async def test_bad_chunk_with_head_is_remote_protocol_error():
    async with serve(_serve_bad_chunk_with_head) as server, client() as c:
        with trio.fail_after(timeout(5)):
            with pytest.raises(httpx.RemoteProtocolError, match="not a chunk-size line"):
                await c.get(server.url())


async def test_bad_chunk_with_head_frees_connection():
    async with serve(_serve_bad_chunk_with_head) as server, client(max_connections=1) as c:
        with trio.fail_after(timeout(5)):
            with pytest.raises(Exception):
                await c.get(server.url())
            await wait(server.peers[0].closed)


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "a\nb", "a\rb", "a\x00b"],
                         ids=["crlf", "lf", "cr", "nul"])
async def test_header_with_cr_lf_nul_is_refused_unsent(value):
    async with serve(answer_each(ok())) as server, client() as c:
        with pytest.raises(httpx.LocalProtocolError, match="X-Evil"):
            await c.get(server.url(), headers={"X-Evil": value})
        with trio.fail_after(timeout(5)):
            assert (await c.get(server.url(), headers={"X-Good": "1"})).content == b"hello"
        assert server.connections == 1
        assert b"X-Evil" not in server.peers[0].received
        assert b"X-Good: 1" in server.peers[0].received


async def test_unsupported_scheme():
    async with client() as c:
        with pytest.raises(httpx.UnsupportedProtocol):
            await c._transport.handle_async_request(httpx.Request("GET", "ftp://x/"))


# ---------------------------------------------------------------------------
# Cancellation
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("way", ["body_read", "aiter_raw"])
async def test_cancel_mid_body_closes_connection(way):
    async def handler(peer):
        if await peer.request() is None:
            return
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await peer.until_eof()

    async with serve(handler) as server, client(max_connections=1) as c:
        with trio.fail_after(timeout(5)):
            with trio.CancelScope() as scope:
                async with c.stream("GET", server.url()) as r:
                    if way == "body_read":
                        read = r.extensions[BODY_READ]
                        assert await read() == b"first"
                        scope.cancel()
                        await read()
                    else:
                        async for piece in r.aiter_raw():
                            assert piece == b"first"
                            scope.cancel()
                    pytest.fail("not cancelled")
            assert scope.cancelled_caught
        await wait(server.peers[0].closed)
        with trio.fail_after(timeout(5)):  # its slot is free: a new request gets one
            async with c.stream("GET", server.url(),
                                timeout=httpx.Timeout(timeout(5), pool=0.05)) as r:
                assert await r.extensions[BODY_READ]() == b"first"
        assert server.connections == 2


async def test_cancel_waiting_for_head_closes_connection():
    async def handler(peer):
        await peer.request()
        await peer.until_eof()

    async with serve(handler) as server, client(max_connections=1) as c:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(c.get, server.url())
                with trio.fail_after(timeout(5)):  # until the server has the request
                    while not server.peers or not server.peers[0].requests:
                        await trio.sleep(0.001)
                scope.cancel()
        assert scope.cancelled_caught
        await wait(server.peers[0].closed)
        with trio.fail_after(timeout(5)):  # and its slot is free
            with pytest.raises(httpx.ReadTimeout):
                await c.get(server.url(), timeout=httpx.Timeout(timeout(5), pool=0.05, read=0.05))


# ---------------------------------------------------------------------------
# TLS
# ---------------------------------------------------------------------------

async def test_https_trusted_ca(server_tls, trust_ca):
    async with serve(answer_each(ok(b"secret")), server_tls) as server, client() as c:
        with trio.fail_after(timeout(10)):
            r = await c.get(server.url())
        assert r.status_code == 200 and r.content == b"secret"


async def test_https_untrusted_ca(server_tls, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    async with serve(answer_each(ok(b"secret")), server_tls) as server, \
            client(max_connections=1) as c:
        for _ in range(2):  # the failed handshake gave its slot back
            with trio.fail_after(timeout(10)):
                with pytest.raises(httpx.ConnectError, match="certificate verify failed"):
                    await c.get(server.url(), timeout=httpx.Timeout(timeout(5), pool=0.05))


# ---------------------------------------------------------------------------
# The daemon's client
# ---------------------------------------------------------------------------

PROXY_VARS = ["http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy"]


def _no_proxies(monkeypatch):
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


async def test_http_client_uses_upstream_transport(monkeypatch):
    from agent.service.daemon import http_client

    _no_proxies(monkeypatch)
    c = http_client()
    try:
        assert isinstance(c._transport, UpstreamTransport)
        async with serve(answer_each(ok(b"daemon"))) as server:
            with trio.fail_after(timeout(5)):
                assert (await c.get(server.url())).content == b"daemon"
    finally:
        await c.aclose()


async def test_http_client_with_proxy_uses_httpx_transport(monkeypatch):
    from agent.service.daemon import http_client

    _no_proxies(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    c = http_client()
    try:
        assert not isinstance(c._transport, UpstreamTransport)
        assert isinstance(c._transport, httpx.AsyncHTTPTransport)
        assert any(not isinstance(t, UpstreamTransport) and t is not None
                   for t in c._mounts.values())
    finally:
        await c.aclose()
