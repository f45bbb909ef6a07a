"""TLS under agent/providers/transport.py: a provider's own CA file, and
the body read path (an ssl.SSLObject over the socket's reads) against real
loopback TLS peers: a server in the test that writes TLS records byte by
byte where it matters (its own ssl.SSLObject over a raw trio socket), and
`openssl s_server` for what Python's ssl module cannot send (a key update,
a renegotiation).

Every wait is bounded (conftest.timeout); nothing asserts how long
anything took. Where a piece must reach the client apart from the next,
the server waits for the client to block again
(trio.testing.wait_all_tasks_blocked), not for a time.
"""

from __future__ import annotations

import re
import shutil
import ssl
import subprocess
from contextlib import asynccontextmanager
from functools import partial

import httpx
import pytest
import trio
import trio.testing

from agent.providers import Conversation, Provider, UpstreamUnavailable, UserTurn, stream_answer
from agent.providers.transport import BODY_READ, CA_FILE, UpstreamTransport, _ssl_context
from agent.service.config import load
from agent.settings.reader import ConfigError
from conftest import timeout
from helpers import make_certificates, until

pytestmark = pytest.mark.trio

HOST = "127.0.0.1"
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    make_certificates(d, "homeagent TLS test CA")
    return d


@pytest.fixture(autouse=True)
def default_trust_only(monkeypatch):
    """The client's default bundle is the shipped one: the test CA is
    trusted only where a test names it."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


def server_context(certificates) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certificates / "server.pem", certificates / "server.key")
    return ctx


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=UpstreamTransport(), timeout=httpx.Timeout(timeout(5)))


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


# ---------------------------------------------------------------------------
# A TLS server whose records the test writes
# ---------------------------------------------------------------------------

class RecordPeer:
    """The server side of one TLS connection: its ssl.SSLObject over memory
    buffers and the raw socket, so that a test sends records whole, in
    pieces, or cut."""

    def __init__(self, stream: trio.SocketStream, context: ssl.SSLContext) -> None:
        self.stream = stream
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)

    async def handshake(self) -> None:
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self.stream.send_all(self.outgoing.read())
                self.incoming.write(await self.stream.receive_some(65536))
        await self.stream.send_all(self.outgoing.read())  # TLS 1.3: its session tickets

    async def request(self) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            try:
                data += self.tls.read(65536)
            except ssl.SSLWantReadError:
                self.incoming.write(await self.stream.receive_some(65536))
        return data

    def records(self, data: bytes) -> bytes:
        """data as the raw bytes of its TLS records."""
        self.tls.write(data)
        return self.outgoing.read()

    def close_notify(self) -> bytes:
        try:
            self.tls.unwrap()
        except ssl.SSLWantReadError:
            pass  # the client's close_notify is not waited for
        return self.outgoing.read()

    async def send(self, raw: bytes) -> None:
        await self.stream.send_all(raw)


@asynccontextmanager
async def record_server(certificates, handler):
    """A loopback TLS server running handler(peer) on each connection, after
    the handshake and the request; it yields the server's base URL."""
    context = server_context(certificates)

    async def serve(stream):
        peer = RecordPeer(stream, context)
        try:
            await peer.handshake()
            await peer.request()
            await handler(peer)
        except (trio.BrokenResourceError, ssl.SSLError):
            pass  # the client went away
        finally:
            await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host=HOST))
        port = listeners[0].socket.getsockname()[1]
        yield f"https://{HOST}:{port}/"
        nursery.cancel_scope.cancel()


async def settled() -> None:
    """Until every other task waits: the client took what was sent."""
    with trio.fail_after(timeout(5)):
        await trio.testing.wait_all_tasks_blocked()


# ---------------------------------------------------------------------------
# A provider's CA file
# ---------------------------------------------------------------------------

def answer(body: bytes):
    async def handler(peer: RecordPeer) -> None:
        await peer.send(peer.records(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                                     % (len(body), body)))
        await trio.sleep_forever()
    return handler


async def test_a_ca_file_makes_a_private_ca_trusted(certificates):
    async with record_server(certificates, answer(b"private")) as url, client() as c:
        with trio.fail_after(timeout(10)):
            r = await c.get(url, extensions={CA_FILE: str(certificates / "ca.pem")})
    assert r.content == b"private"


async def test_without_the_ca_file_the_certificate_is_refused(certificates):
    async with record_server(certificates, answer(b"private")) as url, client() as c:
        with trio.fail_after(timeout(10)):
            with pytest.raises(httpx.ConnectError, match="certificate verify failed"):
                await c.get(url)


async def test_a_ca_file_adds_to_the_default_bundle(certificates):
    default = _ssl_context(None).get_ca_certs()
    with_file = _ssl_context(str(certificates / "ca.pem")).get_ca_certs()
    test_ca = [ca for ca in with_file if ca not in default]
    assert len(with_file) == len(default) + 1 and len(default) > 1
    assert test_ca[0]["subject"] == ((("commonName", "homeagent TLS test CA"),),)


async def test_a_ca_file_gone_since_the_config_was_read_is_a_connect_error(
        certificates, tmp_path):
    async with record_server(certificates, answer(b"")) as url, client() as c:
        with trio.fail_after(timeout(10)):
            with pytest.raises(httpx.ConnectError, match="CA file .*gone.pem"):
                await c.get(url, extensions={CA_FILE: str(tmp_path / "gone.pem")})


async def test_connections_are_pooled_apart_by_ca_file(certificates):
    """A connection verified against one provider's trust does not serve
    another's request."""
    async with record_server(certificates, answer(b"x")) as url, client() as c:
        ca = str(certificates / "ca.pem")
        with trio.fail_after(timeout(10)):
            assert (await c.get(url, extensions={CA_FILE: ca})).content == b"x"
            with pytest.raises(httpx.ConnectError, match="certificate verify failed"):
                await c.get(url)


def provider_config(ca_file: str | None) -> str:
    return ('[providers.private]\nprotocol = "openai-chat"\nmodel = "m"\n'
            'base_url = "https://127.0.0.1:8443/v1"\n'
            + ("" if ca_file is None else f'ca_file = "{ca_file}"\n'))


async def test_the_ca_file_key_is_relative_to_the_config(certificates, tmp_path):
    (tmp_path / "ca").mkdir()
    (tmp_path / "ca" / "private.pem").write_bytes((certificates / "ca.pem").read_bytes())
    (tmp_path / "config.toml").write_text(provider_config("ca/private.pem"))
    provider = load(str(tmp_path / "config.toml"), {}).providers["private"].provider
    assert provider.ca_file == str(tmp_path / "ca" / "private.pem")
    (tmp_path / "config.toml").write_text(provider_config(None))
    assert load(str(tmp_path / "config.toml"), {}).providers["private"].provider.ca_file is None


@pytest.mark.parametrize("name,content,match", [
    ("missing.pem", None, "CA file not found: .*missing.pem"),
    ("a-directory", "dir", "cannot read .*a-directory: Is a directory"),
    ("empty.pem", b"", "empty.pem holds no PEM certificate"),
    ("key.pem", "server.key", "key.pem holds no PEM certificate"),
], ids=["missing", "unreadable", "empty", "a-key-not-a-certificate"])
async def test_a_ca_file_that_does_not_load_is_a_config_error(certificates, tmp_path, name,
                                                        content, match):
    if content == "dir":
        (tmp_path / name).mkdir()
    elif content is not None:
        (tmp_path / name).write_bytes(
            content if isinstance(content, bytes) else (certificates / content).read_bytes())
    (tmp_path / "config.toml").write_text(provider_config(name))
    with pytest.raises(ConfigError, match=match) as caught:
        load(str(tmp_path / "config.toml"), {})
    assert caught.value.key == "providers.private.ca_file" and caught.value.line == 5


SSE_ANSWER = (b'data: {"choices":[{"index":0,"delta":{"content":"from the private CA"}}]}\n\n'
              b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
              b"data: [DONE]\n\n")


async def test_a_provider_with_its_ca_file_streams_and_without_it_is_refused(certificates):
    async def handler(peer):
        await peer.send(peer.records(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                     b"Content-Length: %d\r\n\r\n%s"
                                     % (len(SSE_ANSWER), SSE_ANSWER)))
        await trio.sleep_forever()

    conversation = Conversation("", [UserTurn("hello")])
    async with record_server(certificates, handler) as url, client() as c:
        with trio.fail_after(timeout(20)):
            trusted = Provider("private", "openai-chat", url + "v1", "m",
                               ca_file=str(certificates / "ca.pem"))
            answer = await stream_answer(c, trusted, conversation)
            assert answer.ok and answer.message.text == "from the private CA"
            untrusted = Provider("public", "openai-chat", url + "v1", "m")
            with pytest.raises(UpstreamUnavailable, match="certificate verify failed"):
                await stream_answer(c, untrusted, conversation, retries=0)


# ---------------------------------------------------------------------------
# The body read path
# ---------------------------------------------------------------------------

def ca_of(certificates) -> dict:
    return {CA_FILE: str(certificates / "ca.pem")}


async def read_all(c: httpx.AsyncClient, url: str, certificates) -> list[bytes]:
    pieces = []
    with trio.fail_after(timeout(10)):
        async with c.stream("GET", url, extensions=ca_of(certificates)) as r:
            read = r.extensions[BODY_READ]
            while piece := await read():
                pieces.append(piece)
    return pieces


async def test_a_record_in_pieces_is_one_read(certificates):
    """A record whose header and body come in several reads, the header
    itself cut, is read once whole."""
    async def handler(peer):
        await peer.send(peer.records(CHUNKED_HEAD))
        raw = peer.records(chunk(b"one record"))
        for piece in (raw[:2], raw[2:4], raw[4:9], raw[9:-1], raw[-1:]):
            await settled()
            await peer.send(piece)
        await settled()
        await peer.send(peer.records(chunk(b"two") + chunk(b"three")) +
                        peer.records(b"0\r\n\r\n"))
        await trio.sleep_forever()

    async with record_server(certificates, handler) as url, client() as c:
        pieces = await read_all(c, url, certificates)
    assert b"".join(pieces) == b"one recordtwothree"
    assert pieces[0] == b"one record"


async def test_a_large_body_of_many_records_in_few_reads(certificates):
    body = bytes(range(256)) * 4096  # 1 MiB: 64 records of 16 KiB

    async def handler(peer):
        while True:
            await peer.send(peer.records(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n"
                                         % len(body)) + peer.records(body))
            await peer.request()

    async with record_server(certificates, handler) as url, client() as c:
        assert b"".join(await read_all(c, url, certificates)) == body
        with trio.fail_after(timeout(10)):  # read to its end: kept alive, reused
            assert (await c.get(url, extensions=ca_of(certificates))).content == body


async def test_close_notify_ends_a_close_delimited_body(certificates):
    async def handler(peer):
        await peer.send(peer.records(b"HTTP/1.1 200 OK\r\n\r\nuntil the close"))
        await settled()
        await peer.send(peer.records(b", and no more") + peer.close_notify())
        await trio.sleep_forever()  # the TCP connection stays open

    async with record_server(certificates, handler) as url, client() as c:
        assert b"".join(await read_all(c, url, certificates)) == b"until the close, and no more"


async def test_a_close_between_records_leaves_the_verdict_to_the_http_framing(certificates):
    async def handler(peer):
        await peer.send(peer.records(CHUNKED_HEAD + chunk(b"cut")))
        await settled()

    async with record_server(certificates, handler) as url, client() as c:
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked body"):
            await read_all(c, url, certificates)


@pytest.mark.parametrize("cut", [3, 20], ids=["in-the-header", "in-the-body"])
async def test_a_close_inside_a_record_is_a_named_read_error(certificates, cut):
    async def handler(peer):
        await peer.send(peer.records(CHUNKED_HEAD + chunk(b"whole")))
        await settled()
        await peer.send(peer.records(chunk(b"never whole"))[:cut])
        await settled()

    async with record_server(certificates, handler) as url, client() as c:
        pieces = []
        with trio.fail_after(timeout(10)):
            async with c.stream("GET", url, extensions=ca_of(certificates)) as r:
                read = r.extensions[BODY_READ]
                pieces.append(await read())
                with pytest.raises(httpx.ReadError, match="inside a TLS record"):
                    await read()
    assert pieces == [b"whole"]


async def test_a_peer_stalled_inside_a_record_is_a_read_timeout(certificates):
    async def handler(peer):
        await peer.send(peer.records(CHUNKED_HEAD + chunk(b"first")))
        await settled()
        await peer.send(peer.records(chunk(b"second"))[:-4])
        await trio.sleep_forever()

    async with record_server(certificates, handler) as url, client() as c:
        with trio.fail_after(timeout(10)):
            async with c.stream("GET", url, extensions=ca_of(certificates),
                                timeout=httpx.Timeout(timeout(5), read=0.05)) as r:
                read = r.extensions[BODY_READ]
                assert await read() == b"first"
                with pytest.raises(httpx.ReadTimeout):
                    await read()


async def test_garbage_instead_of_a_record_is_a_named_read_error(certificates):
    async def handler(peer):
        await peer.send(peer.records(CHUNKED_HEAD + chunk(b"first")))
        await settled()
        await peer.send(b"\x17\x03\x03\x00\x20" + b"\x00" * 32)  # a record that fails its MAC
        await trio.sleep_forever()

    async with record_server(certificates, handler) as url, client() as c:
        with trio.fail_after(timeout(10)):
            async with c.stream("GET", url, extensions=ca_of(certificates)) as r:
                read = r.extensions[BODY_READ]
                assert await read() == b"first"
                with pytest.raises(httpx.ReadError, match="BAD_RECORD_MAC|DECRYPTION_FAILED"):
                    await read()


# ---------------------------------------------------------------------------
# Post-handshake messages from openssl s_server
# ---------------------------------------------------------------------------

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl CLI")


class SServer:
    """`openssl s_server` on loopback: what it writes (with -msg, every
    TLS message) and a stdin whose lines it sends to the client, but for
    its commands: "K" (a key update asking the client for its own) and "r"
    (a renegotiation, TLS 1.2)."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.output = b""
        self.port = 0

    async def read_output(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        started = False
        while data := await self.process.stdout.receive_some(65536):
            self.output += data
            m = re.search(rb"ACCEPT 127\.0\.0\.1:(\d+)", self.output)
            if m and not started:
                self.port, started = int(m.group(1)), True
                task_status.started()

    async def type(self, text: bytes, then: bytes) -> None:
        """Send one input, then wait until the output shows `then` once
        more (so that the next input is read on its own)."""
        seen = self.output.count(then)
        await self.process.stdin.send_all(text)
        await until(lambda: self.output.count(then) > seen, 10)


@asynccontextmanager
async def s_server(certificates, version: str):
    process = await trio.lowlevel.open_process(
        ["openssl", "s_server", "-accept", f"{HOST}:0", "-naccept", "1", "-msg",
         "-cert", str(certificates / "server.pem"), "-key", str(certificates / "server.key"),
         f"-{version}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)
    server = SServer(process)
    try:
        async with trio.open_nursery() as nursery:
            with trio.fail_after(timeout(10)):
                await nursery.start(server.read_output)
            yield server
            nursery.cancel_scope.cancel()
    finally:
        process.kill()
        await process.wait()


@needs_openssl
@pytest.mark.parametrize("version,command,sent,answered,answered_in_read", [
    ("tls1_3", b"K\n", b">>> TLS 1.3, Handshake [length 0005], KeyUpdate",
     b"<<< TLS 1.3, Handshake [length 0005], KeyUpdate", False),
    ("tls1_2", b"r\n", b">>> TLS 1.2, Handshake [length 0004], HelloRequest",
     b"<<< TLS 1.2, Handshake [length 0010], Finished", True),
], ids=["key-update", "renegotiation"])
async def test_a_post_handshake_message_is_answered_and_the_body_goes_on(
        certificates, version, command, sent, answered, answered_in_read):
    """A key update from the peer (asking for the client's, which OpenSSL
    sends before its next write) and a renegotiation (a new handshake,
    answered from the read) in the middle of a body: the body goes on, and
    the connection serves the next request."""
    async with s_server(certificates, version) as server, client() as c:
        url = f"https://{HOST}:{server.port}/"
        got = []

        async def ask():
            async with c.stream("GET", url, extensions=ca_of(certificates)) as r:
                read = r.extensions[BODY_READ]
                while piece := await read():
                    got.append(piece)
            got.append((await c.get(url, extensions=ca_of(certificates))).content)

        with trio.fail_after(timeout(20)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask)
                await until(lambda: b"GET / HTTP/1.1" in server.output, 10)
                await server.type(CHUNKED_HEAD + chunk(b"before"), b">>> ")
                await until(lambda: got == [b"before"], 10)
                answers = server.output.count(answered)
                await server.type(command, sent)
                await server.type(chunk(b"after"), b">>> ")
                await until(lambda: got == [b"before", b"after"], 10)
                if answered_in_read:
                    await until(lambda: server.output.count(answered) > answers, 10)
                await server.process.stdin.send_all(b"0\r\n\r\n")
                await until(lambda: server.output.count(b"GET / HTTP/1.1") == 2, 10)
                await server.process.stdin.send_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext")
        second_request = server.output.rindex(b"GET / HTTP/1.1")
        assert server.output.count(answered, 0, second_request) > answers
    assert got == [b"before", b"after", b"next"]
