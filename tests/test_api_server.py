"""The API server (agent/api/server.py), the socket door, in process on a
real center: connections are trio's memory streams (lockstep ones where a
client must not read), the peer is
given, not read from a socket, and the runner is a fake whose prompts say
what the ask does. On the autojump clock, so the server's timeouts cost no
wall-clock time. The subprocess tests (test_daemon_api.py) cover the same
behaviour through a real socket and the real runner.
"""

from __future__ import annotations

import json
import os
import resource
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from agent.api.server import Access, ApiServer, Limits, Peer
from agent.core import replies
from agent.core.accept import ACCEPT_RETRY
from agent.core.center import Center
from agent.core.commands import Stop
from agent.core.statistics import Counters
from conftest import timeout

PEER = Peer(pid=4242, uid=1000, gid=1000)
STRANGER = Peer(pid=4343, uid=2000, gid=2000)


class FakeRunner:
    """An ask's prompt is its script: "hello" answers at once, "hang" waits
    to be cancelled (or stopped: then done, "stopped"), "flood N" streams N
    deltas, "burst N" N deltas in one go, as one upstream read decodes."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.forgotten: list[str] = []

    async def ask(self, prompt, session, provider, emit, stop=None) -> None:
        session = session or "s-fake"
        await emit(replies.Started(session, provider or "fake", "m"))
        word, _, count = prompt.partition(" ")
        try:
            if word == "hang":
                with (stop or Stop()).cuts():
                    await trio.sleep_forever()
                await emit(replies.Done(session, "stopped", None, None, "", 1, 1))
                return
            deltas = ["Hi."] if word == "hello" else [f"{n} " for n in range(int(count))]
            for n, delta in enumerate(deltas, 1):
                await emit(replies.Delta(delta))
                # "burst": many deltas of one upstream read, a yield every
                # 8 as the runner does; the rest: one a read
                if word != "burst" or n % 8 == 0:
                    await trio.lowlevel.checkpoint()
        except trio.Cancelled:
            self.cancelled.append(prompt)
            raise
        await emit(replies.Done(session, "stop", "stop", None, "".join(deltas), 1, 1))

    async def sessions(self) -> list[dict]:
        return [{"session": "kitchen", "turns": 2}]

    async def history(self, session: str) -> list:
        if session == "..":
            raise ValueError("not a session id")
        return []

    async def forget(self, session: str) -> bool:
        self.forgotten.append(session)
        return True


class Client:
    """The client end of one connection: requests out, reply lines in."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self._buffer = b""

    async def send(self, **request) -> None:
        await self.stream.send_all(json.dumps(request).encode() + b"\n")

    async def raw_line(self) -> bytes | None:
        """The next line without its newline; None at the end of the stream."""
        while b"\n" not in self._buffer:
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    async def line(self) -> dict | None:
        line = await self.raw_line()
        return None if line is None else json.loads(line)

    async def until(self, kind: str, request_id=None) -> list[dict]:
        """Replies up to and including the first of this type (and id)."""
        seen = []
        while True:
            reply = await self.line()
            assert reply is not None, f"the connection ended before a {kind}: {seen}"
            seen.append(reply)
            if reply["type"] == kind and (request_id is None or reply.get("id") == request_id):
                return seen


@asynccontextmanager
async def connected(server: ApiServer, peer: Peer = PEER, pair=trio.testing.memory_stream_pair,
                    hello: bool = True):
    """A connection to the server, its hello read into .hello (unless told
    not to); the server's side runs until the test leaves."""
    client_end, server_end = pair()
    async with trio.open_nursery() as nursery:
        ended = trio.Event()

        async def serve() -> None:
            await server.serve_connection(server_end, peer)
            ended.set()

        nursery.start_soon(serve)
        client = Client(client_end)
        client.ended = ended
        if hello:
            client.hello = await client.line()
            assert client.hello["type"] == "hello"
        yield client
        nursery.cancel_scope.cancel()


class StuckClient:
    """A connection whose client reads nothing: the server's first send
    blocks, its bytes written but never taken (a full socket buffer), until
    deliver() hands the client all that was written."""

    def __init__(self) -> None:
        self._requests = trio.testing.memory_stream_one_way_pair()
        self._written = trio.testing.MemorySendStream(send_all_hook=trio.sleep_forever)
        self._received = trio.testing.MemoryReceiveStream()

    def __call__(self):
        return (trio.StapledStream(self._requests[0], self._received),
                trio.StapledStream(self._written, self._requests[1]))

    def deliver(self) -> None:
        self._received.put_data(self._written.get_data_nowait())
        self._received.put_eof()


def serving(runner, **settings) -> ApiServer:
    """The socket door on a real center around runner, its subscribers the
    center's listener as the daemon adds them."""
    center = Center(runner)
    server = ApiServer(center, server_name="homeagent test", **settings)
    center.add_listener(server.subscribers)
    return server


def new_server(**settings) -> tuple[ApiServer, FakeRunner]:
    runner = FakeRunner()
    return serving(runner, **settings), runner


@pytest.mark.trio
async def test_hello_ask_and_status(autojump_clock):
    server, _ = new_server(status_extra=lambda: {"server": "homeagent test"})
    async with connected(server) as client:
        assert client.hello["server"] == "homeagent test" and "id" not in client.hello
        await client.send(id=1, op="ask", prompt="hello", session="kitchen")
        assert await client.until("done") == [
            {"id": 1, "type": "started", "session": "kitchen", "provider": "fake", "model": "m"},
            {"id": 1, "type": "delta", "text": "Hi."},
            {"id": 1, "type": "done", "session": "kitchen", "finish_reason": "stop",
             "raw_finish_reason": "stop", "usage": None, "text": "Hi.", "steps": 1,
             "attempts": 1, "kept": True}]
        await client.send(id="st", op="status")
        status = await client.line()
        assert status == {"id": "st", "type": "status", "server": "homeagent test",
                          "clients": 1, "active": [], "draining": False,
                          "counters": {"connections": 1, "refused": 0, "requests": 2,
                                       "bad_requests": 0, "asks": 1, "answered": 1,
                                       "failed": 0, "cancelled": 0, "overflows": 0,
                                       "revoked": 0}}
    stats = server.statistics()
    assert (stats.clients, stats.active, stats.counters.answered) == (0, (), 1)


@pytest.mark.trio
async def test_session_operations(autojump_clock):
    server, runner = new_server()
    async with connected(server) as client:
        await client.send(id=1, op="sessions")
        assert await client.line() == {"id": 1, "type": "sessions",
                                       "sessions": [{"session": "kitchen", "turns": 2}]}
        await client.send(id=2, op="history", session="kitchen")
        assert await client.line() == {"id": 2, "type": "history", "session": "kitchen",
                                       "turns": []}
        await client.send(id=3, op="history", session="..")
        assert await client.line() == {"id": 3, "type": "error", "code": "bad_session",
                                       "message": "not a session id"}
        await client.send(id=4, op="forget", session="kitchen")
        assert await client.line() == {"id": 4, "type": "ok", "forgotten": True}
    assert runner.forgotten == ["kitchen"]


@pytest.mark.trio
async def test_duplicate_ids_and_cancel(autojump_clock):
    server, runner = new_server()
    async with connected(server) as client:
        await client.send(id=1, op="ask", prompt="hang")
        assert (await client.line())["type"] == "started"
        await client.send(id="sub", op="subscribe")
        # The subscription sees its own connection's ask from now on; reply
        # order between connections is the server's, so only types are checked.
        assert (await client.line()) == {"id": "sub", "type": "subscribed"}
        for request in ({"op": "ask", "prompt": "hello"}, {"op": "status"},
                        {"op": "subscribe"}):
            for request_id in (1, "sub"):
                await client.send(id=request_id, **request)
                assert await client.line() == {
                    "id": request_id, "type": "error", "code": "duplicate_id",
                    "message": f"request {request_id!r} is still in progress on this "
                               "connection"}
        assert len(server.statistics().active) == 1
        await client.send(id=2, op="cancel", target=7)
        assert await client.line() == {"id": 2, "type": "error", "code": "unknown_request",
                                       "message": "no request 7 in progress on this "
                                                  "connection"}
        await client.send(id=3, op="cancel", target=1)
        got = await client.until("error", 1)
        assert {"id": 3, "type": "ok"} in got
        assert got[-1] == {"id": 1, "type": "error", "code": "cancelled",
                           "message": "cancelled by request 3"}
        # the subscriber saw the cancelled ask's error too, naming where it came from
        assert (await client.line()) == {"id": "sub", "type": "error", "code": "cancelled",
                                         "message": "cancelled by request 3",
                                         "request": {"client": 1, "id": 1, "session": "s-fake"}}
        assert runner.cancelled == ["hang"]
        # the id is free again; the subscription ends with its cancel
        await client.send(id=4, op="cancel", target="sub")
        assert await client.line() == {"id": 4, "type": "ok"}
        await client.send(id=1, op="ask", prompt="hello")
        assert [r["type"] for r in await client.until("done")] == ["started", "delta", "done"]
    assert server.statistics().counters == Counters(connections=1, requests=12, asks=2,
                                                    answered=1, cancelled=1)


@pytest.mark.trio
async def test_stop_reaches_the_asks_it_chooses(autojump_clock):
    server, runner = new_server()
    async with connected(server) as asker, connected(server) as other:
        for request_id, session in ((1, "kitchen"), (2, "hall")):
            await asker.send(id=request_id, op="ask", prompt="hang", session=session)
            assert (await asker.line())["type"] == "started"
        await other.send(id=1, op="stop", mine=True)
        assert await other.line() == {"id": 1, "type": "error", "code": "nothing_to_stop",
                                      "message": "no ask of this connection is running"}
        await other.send(id=2, op="stop", session="kitchen")
        stopped = await other.line()
        assert (stopped["type"], stopped["asks"], stopped["devices"]) == (
            "stopped", [{"client": 1, "id": 1, "session": "kitchen"}], [])
        done = await asker.line()
        assert (done["id"], done["type"], done["finish_reason"]) == (1, "done", "stopped")
        await other.send(id=3, op="stop")  # every ask: the other one
        assert [a["session"] for a in (await other.line())["asks"]] == ["hall"]
        assert (await asker.line())["finish_reason"] == "stopped"
        await other.send(id=4, op="stop")
        assert (await other.line())["code"] == "nothing_to_stop"
        await other.send(id=5, op="announce", text="Dinner is ready.")
        assert await other.line() == {"id": 5, "type": "error", "code": "no_speech_device",
                                      "message": "this daemon has no devices"}
    assert runner.cancelled == []  # stopped, not cancelled
    assert server.statistics().counters.answered == 2


@pytest.mark.trio
async def test_subscribers_see_every_ask(autojump_clock):
    server, _ = new_server()
    async with connected(server) as watcher, connected(server) as asker:
        await watcher.send(id="w", op="subscribe", reasoning=False)
        assert await watcher.line() == {"id": "w", "type": "subscribed"}
        await asker.send(id=5, op="ask", prompt="hello", stream=False)
        assert [r["type"] for r in await asker.until("done")] == ["started", "done"]
        seen = await watcher.until("done")
        origin = {"client": 2, "id": 5, "session": "s-fake"}
        assert [(r["id"], r["type"], r["request"]) for r in seen] == [
            ("w", "started", origin), ("w", "delta", origin), ("w", "done", origin)]
        server.center.notice(replies.Device("relay", "running"))
        assert await watcher.line() == {"id": "w", "type": "device", "device": "relay",
                                        "state": "running"}


@pytest.mark.trio
async def test_overflow_costs_only_the_client_that_does_not_read(autojump_clock):
    server, runner = new_server(limits=Limits(client_queue=4))
    pair = StuckClient()
    async with connected(server) as reader, connected(server, pair=pair, hello=False) as stuck:
        await stuck.send(id="f", op="ask", prompt="flood 50")
        await reader.send(id="r", op="ask", prompt="flood 20")
        assert len(await reader.until("done")) == 22
        await stuck.ended.wait()
        pair.deliver()
        # The hello (its send was cut off after the whole line was written:
        # no empty line follows it), the overflow error; then the end.
        lines = []
        while (line := await stuck.raw_line()) is not None:
            lines.append(line)
    assert json.loads(lines[0])["type"] == "hello"
    assert len(lines) == 2
    assert json.loads(lines[1]) == {
        "id": None, "type": "error", "code": "overflow",
        "message": "more than 4 replies were waiting to be read; the connection is closed"}
    assert runner.cancelled == ["flood 50"]
    assert server.statistics().counters == Counters(connections=2, requests=2, asks=2,
                                                    answered=1, cancelled=1, overflows=1)


def socket_pair():
    """A connection over a real socket pair: the server writes straight to it."""
    ours, theirs = trio.socket.socketpair()
    return trio.SocketStream(ours), trio.SocketStream(theirs)


@pytest.mark.trio
async def test_a_burst_within_one_delta_interval_never_overflows_a_client_that_reads(
        autojump_clock):
    """More pieces than client_queue within one interval (a fast local
    upstream's burst) are sent at once, not held against a client that
    reads; one that does not read is still closed (the test above)."""
    server, _ = new_server(limits=Limits(client_queue=4))
    async with connected(server, pair=socket_pair) as reader:
        await reader.send(id="r", op="ask", prompt="burst 40")
        got = await reader.until("done")
    assert [r["type"] for r in got] == ["started", *["delta"] * 40, "done"]
    assert "".join(r["text"] for r in got[1:-1]) == "".join(f"{n} " for n in range(40))
    assert server.statistics().counters.overflows == 0


@pytest.mark.trio
async def test_drain(autojump_clock):
    server, runner = new_server()
    async with connected(server) as client, connected(server) as late:
        await client.send(id=1, op="ask", prompt="hang")
        await client.send(id=2, op="ask", prompt="hello")
        assert [r["type"] for r in await client.until("done", 2)] == [
            "started", "started", "delta", "done"]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.drain, 3, "the daemon is stopping (SIGTERM)")
            await trio.sleep(1)
            assert server.statistics().draining
            await late.send(id="x", op="ask", prompt="hello")
            assert await late.line() == {
                "id": "x", "type": "error", "code": "shutting_down",
                "message": "the daemon is shutting down; ask again when it is back"}
        assert await client.line() == {
            "id": 1, "type": "error", "code": "shutting_down",
            "message": "the daemon is stopping (SIGTERM); the answer was cut off after the "
                       "3 s grace time"}
        for conn in (client, late):
            assert await conn.line() == {"type": "shutdown",
                                         "reason": "the daemon is stopping (SIGTERM)"}
            assert await conn.line() is None
    assert runner.cancelled == ["hang"]
    assert trio.current_time() >= 3


@pytest.mark.trio
async def test_reconfigure_access_and_limits(autojump_clock):
    server, _ = new_server()
    server.reconfigure(access=Access(allow_users=(PEER.uid,)), limits=Limits(max_line=64))
    async with connected(server, STRANGER, hello=False) as refused:
        assert await refused.line() == {"id": None, "type": "error", "code": "not_allowed",
                                        "message": "uid 2000 gid 2000 may not use this daemon"}
        assert await refused.line() is None
    async with connected(server) as allowed:
        assert allowed.hello["max_line_bytes"] == 64
        await allowed.send(id=1, op="ask", prompt="x" * 64)
        assert await allowed.line() == {"id": None, "type": "error", "code": "line_too_long",
                                        "message": "a line is longer than 64 bytes; it was "
                                                   "skipped"}
    counters = server.statistics().counters
    assert (counters.refused, counters.connections, counters.bad_requests) == (1, 1, 1)


@pytest.mark.trio
async def test_connections_over_the_per_user_cap_are_refused(autojump_clock):
    server, _ = new_server(limits=Limits(max_clients_per_user=2))
    user = Peer(pid=4444, uid=3000, gid=3000)  # neither root nor the daemon's own user
    async with connected(server, user), connected(server, user):
        async with connected(server, user, hello=False) as third:
            assert await third.line() == {
                "id": None, "type": "error", "code": "too_many_connections",
                "message": "uid 3000 has 2 connections open, the most this daemon takes "
                           "from one user"}
            assert await third.line() is None
        async with connected(server, STRANGER) as other_user:  # another uid is not locked out
            assert other_user.hello["type"] == "hello"
    assert server.statistics().counters.refused == 1


@pytest.mark.trio
async def test_accept_out_of_descriptors_logs_one_line_and_recovers(tmp_path, caplog):
    """A real EMFILE: the soft RLIMIT_NOFILE is lowered to the descriptors
    open, so accept() fails while clients wait in the backlog; they are
    served once descriptors are back, and the failure is one log line."""
    path = str(tmp_path / "agent.sock")
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await listener.bind(path)
    listener.listen(8)
    server, _ = new_server()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, [trio.SocketListener(listener)])
        clients = [trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
                   for _ in range(3)]
        try:
            # Not one descriptor more (listdir's own is closed again).
            resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) - 1,
                                                        hard))
            for client in clients:
                await client.connect(path)
            await trio.sleep(ACCEPT_RETRY * 10)  # about ten failed accepts
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for client in clients:
            with trio.fail_after(timeout(10)):
                line = b""
                while not line.endswith(b"\n"):
                    line += await client.recv(65536)
            assert json.loads(line)["type"] == "hello"
            client.close()
        nursery.cancel_scope.cancel()
    failures = [r for r in caplog.records if "accept failed" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in failures]
    assert failures[0].getMessage() == ("accept failed: Too many open files; retrying every "
                                        f"{ACCEPT_RETRY:g} s")
    assert not any(r.exc_info for r in caplog.records)


@pytest.mark.trio
async def test_pieces_within_the_delta_interval_are_held_and_go_out_together(autojump_clock):
    """A streamed piece less than an interval after the last one written is
    held, with every reply behind it, until the interval's end; one that
    comes an interval after the last goes out at once (a real socket: the
    daemon writes to one straight when it can)."""
    import socket

    from agent.api.server import _Connection

    mine, theirs = socket.socketpair()
    theirs.setblocking(False)

    def received() -> bytes:
        try:
            return theirs.recv(65536)
        except BlockingIOError:
            return b""

    outbox, inbox = trio.open_memory_channel(16)
    conn = _Connection(1, PEER, trio.SocketStream(trio.socket.from_stdlib_socket(mine)),
                       outbox, inbox, interval=1.0)
    server = serving(FakeRunner())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server._writer, conn)
        conn.send(b"started\n")
        conn.send_piece(b"one\n")  # the first piece: at once
        assert received() == b"started\none\n"
        conn.send_piece(b"two\n")
        conn.send_piece(b"three\n")
        conn.send(b"done\n")  # behind the held pieces
        await trio.sleep(0.5)
        assert received() == b""
        await trio.sleep(0.6)
        assert received() == b"two\nthree\ndone\n"
        await trio.sleep(3)  # an interval with nothing held: the next piece is not held
        conn.send_piece(b"four\n")
        assert received() == b"four\n"
        conn.send_piece(b"five\n")  # within the interval: held
        assert received() == b""
        await trio.sleep(1.1)
        assert received() == b"five\n"
        conn.send(b"done\n")
        conn.send(b"started\n")  # another answer, within the interval of the last piece:
        conn.send_piece(b"first\n")  # its first piece goes at once all the same
        assert received() == b"done\nstarted\nfirst\n"
        nursery.cancel_scope.cancel()
    theirs.close()
