"""The Wyoming conversation service (agent/wyoming/service.py) against
Home Assistant's side of the protocol: the `wyoming` package's own client
(tests/wyoming_conversation_client.py) in its own process, talking to a real
daemon (`homeagent serve`) whose upstream is the mock model server. Bad
peers are raw sockets: one that sends a transcript and never reads while a
long answer streams is closed at its queue's bound, and Home Assistant's
client then comes back; another client reconnects after the daemon's
restart and keeps its conversation."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import socket
import subprocess
import sys
import os
import time
from pathlib import Path

import pytest
import trio

import wyoming_conversation_client as ha_client
from agent.wyoming.service import ECHO, QUEUE, ConversationService, _Peer, session_for
from agent.mock_llm.scripts import ENGLISH
from agent.wyoming.config import WyomingConfig
from agent.wyoming.framing import Event, Reader, encode
from conftest import timeout
from daemon_harness import MEMORY_HIGH_MIB, Daemon

pytestmark = pytest.mark.skipif(__import__("importlib").util.find_spec("wyoming") is None,
                                reason="the wyoming package is a test dependency")

QUESTION = "What is the temperature in the living room?"


def start(tmp_path, mock, **kwargs) -> tuple[Daemon, str]:
    sock = tmp_path / "wyoming.sock"
    daemon = Daemon(tmp_path / "d", mock.url, extra=f'[wyoming]\nlisten = "unix:{sock}"\n',
                    **kwargs)
    return daemon.start(), f"unix://{sock}"


# the parts of an answer one by one: those that arrive in one network read
# are one delta (one handled-chunk)
PACED = {"mock": {"headers": {"x-mock-delay-ms": "5"}}}


@pytest.fixture
def served(tmp_path, mock):
    (tmp_path / "d").mkdir()
    daemon, uri = start(tmp_path, mock, providers=PACED)
    yield daemon, uri
    assert daemon.stop() == 0, daemon.log()


def converse(uri: str, *transcripts: str) -> list[dict]:
    out = subprocess.run([sys.executable, ha_client.__file__, uri, *transcripts],
                         capture_output=True, text=True, timeout=timeout(60),
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def turns(events: list[dict]) -> list[list[dict]]:
    """The events after info, cut after each handled / not-handled."""
    out, current = [], []
    for event in events[1:]:
        current.append(event)
        if event["type"] in ("handled", "not-handled"):
            out.append(current)
            current = []
    return out


def test_info_offers_a_streaming_handle_program(served):
    _, uri = served
    info = converse(uri)[0]
    assert info["type"] == "info"
    [program] = info["data"]["handle"]
    assert program["supports_handled_streaming"] is True
    assert program["name"] == "homeagent" and program["models"][0]["languages"] == ["en"]


def test_a_transcript_is_answered_as_it_streams(served):
    _, uri = served
    [turn] = turns(converse(uri, QUESTION + "@ha-1"))
    kinds = [e["type"] for e in turn]
    assert kinds[0] == "handled-start" and kinds[-2:] == ["handled-stop", "handled"]
    assert set(kinds[1:-2]) == {"handled-chunk"} and len(kinds) > 4
    chunks = "".join(e["data"]["text"] for e in turn if e["type"] == "handled-chunk")
    assert chunks == turn[-1]["data"]["text"] == ENGLISH
    assert turn[0]["data"]["context"] == turn[-1]["data"]["context"] == {"conversation_id": "ha-1"}


def test_one_conversation_id_is_one_session_across_transcripts(served, mock):
    daemon, uri = served
    first, second = "Hello from the kitchen 9c1e", "And the hallway 9c1e?"
    converse(uri, first + "@conv-9c1e", second + "@conv-9c1e")
    [upstream] = [r for r in mock.requests() if isinstance(r["body"], dict)
                  and r["body"]["messages"][-1] == {"role": "user", "content": second}]
    assert upstream["body"]["messages"][-3:] == [
        {"role": "user", "content": first}, {"role": "assistant", "content": ENGLISH},
        {"role": "user", "content": second}]
    # the session is named by the id's hash, never by the peer's text
    session = "wyoming-" + hashlib.sha256(b"conv-9c1e").hexdigest()[:16]
    with daemon.client() as client:
        assert session in {s["id"] for s in client.call("sessions")["sessions"]}
        status = client.call("status")["wyoming"]
    assert status["transcripts"] == 2 and status["listen"] == "unix:" + uri[len("unix://"):]


def test_a_failing_ask_is_not_handled_with_the_reason(tmp_path, mock):
    (tmp_path / "d").mkdir()
    daemon, uri = start(tmp_path, mock, default_provider="dead",
                        providers={"dead": {"base_url": "http://127.0.0.1:9/v1", "retries": 0}})
    try:
        [turn] = turns(converse(uri, QUESTION))
    finally:
        assert daemon.stop() == 0, daemon.log()
    assert [e["type"] for e in turn] == ["not-handled"]
    assert "upstream" in turn[0]["data"]["text"]


def raw_peer(uri: str, data: bytes) -> bytes:
    """Send data from a raw socket and read until the service closes it."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(timeout(20))
        sock.connect(uri[len("unix://"):])
        received = b""
        try:
            sock.sendall(data)
            while chunk := sock.recv(65536):
                received += chunk
        except (BrokenPipeError, ConnectionResetError):
            # closed before it read all of data: Linux resets a Unix socket
            # whose peer closed with bytes unread, which is a close too
            pass
        return received


@pytest.mark.parametrize("garbage", [
    b"this is not wyoming\n",
    b'{"type": "audio-chunk", "payload_length": 99999999999}\n',
    b'{"type": "transcript", "data_length": -4}\n',
    b"\xff" * 100_000,
])
def test_a_bad_peer_is_closed_and_the_service_goes_on(served, garbage):
    daemon, uri = served
    assert raw_peer(uri, garbage) == b""
    [turn] = turns(converse(uri, QUESTION))
    assert turn[-1]["data"]["text"] == ENGLISH
    assert "closed" in daemon.log()


def test_an_empty_transcript_and_a_ping(served):
    _, uri = served
    reply = raw_peer(uri, encode(Event("ping", {"text": "p1"}))
                     + encode(Event("transcript", {"text": "  "})) + b"not json\n")
    assert Reader().feed(reply) == [Event("pong", {"text": "p1"}),
                                    Event("not-handled", {"text": "empty transcript"})]


@pytest.mark.parametrize(("peer", "allowed"), [
    ("127.0.0.1", True), ("::1", True), ("::ffff:127.0.0.1", True), ("127.8.9.10", True),
    ("192.168.1.20", True), ("192.168.1.21", False), ("10.0.0.1", False),
    ("fe80::1%eth0", False), (None, True),
])
def test_who_may_connect_over_tcp(peer, allowed):
    service = ConversationService(None, WyomingConfig(
        listen=("tcp", "0.0.0.0", 10700), allow=(ipaddress.ip_network("192.168.1.20"),),
        allow_loopback=True), "v")
    assert service._allowed(peer) is allowed


@pytest.mark.parametrize(("peer", "allowed"), [
    ("127.0.0.1", False), ("::1", False), ("::ffff:127.0.0.1", False),
    ("192.168.1.20", True), ("::ffff:192.168.1.20", True), (None, True),
])
def test_loopback_over_tcp_only_by_opt_in(peer, allowed):
    """Anything on the host can connect to loopback TCP, and no uid names it:
    let in only with wyoming.allow_loopback (a Unix socket's peer is checked
    by its credentials instead)."""
    service = ConversationService(None, WyomingConfig(
        listen=("tcp", "0.0.0.0", 10700), allow=(ipaddress.ip_network("192.168.1.20"),)), "v")
    assert service._allowed(peer) is allowed


def test_a_session_for_each_transcript_without_a_conversation_id():
    assert session_for(None) != session_for(None)
    assert session_for({"conversation_id": "x"}) == session_for({"conversation_id": "x"})
    assert session_for({"conversation_id": "../../etc"}).startswith("wyoming-")


# ---- a peer that does not read; a client that comes back ----

@pytest.mark.trio
async def test_a_peer_holds_at_most_its_bound_then_is_closed(caplog):
    peer = _Peer("wyoming peer test")
    with trio.CancelScope() as scope:
        peer.scope = scope
        for _ in range(QUEUE):
            peer.queue(Event("handled-chunk", {"text": "word"}))
        assert not scope.cancel_called
        peer.queue(Event("handled-chunk", {"text": "one too many"}))
        assert scope.cancel_called
        peer.queue(Event("handled-chunk", {"text": "and after the close"}))
        # the events over the bound are dropped, not held
        assert peer._send.statistics().current_buffer_used == QUEUE
    assert caplog.text.count(f"wyoming peer test: closed: it did not read {QUEUE} events") == 1


# Chunks of 4 characters, one every 3 ms: about 1200 handled-chunk events,
# more than the kernel's socket buffer (a few hundred small writes) and the
# peer's queue hold together, at a pace a client that reads keeps up with.
LONG = "The heating schedule for the week ahead. " * 120


def test_a_peer_that_does_not_read_a_long_answer_is_closed_and_its_ask_cancelled(tmp_path, mock):
    (tmp_path / "d").mkdir()
    daemon, uri = start(tmp_path, mock, providers={"mock": {"headers": {
        "x-mock-answer": json.dumps(LONG), "x-mock-delay-ms": "3"}}})
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(uri[len("unix://"):])
            sock.sendall(encode(Event("transcript", {"text": QUESTION,
                                                     "context": {"conversation_id": "ha-7"}})))
            until_logged(daemon, f"closed: it did not read {QUEUE} events")
            with daemon.client() as client:
                # the ask ends, and the connection's own task after it
                until_true(lambda: not client.call("status")["active"])
                until_true(lambda: client.call("status")["wyoming"]["connections"] == 0)
            # what the kernel held before the close, then the end: no final handled
            sock.settimeout(timeout(20))
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
        events = Reader().feed(received)
        assert events[0].type == "handled-start"
        assert {e.type for e in events[1:]} == {"handled-chunk"}
        assert len(events) < len(LONG) // 4

        # Home Assistant connects again with the same conversation: answered
        [turn] = turns(converse(uri, QUESTION + "@ha-7"))
        assert turn[-1]["type"] == "handled" and turn[-1]["data"]["text"] == LONG
        assert daemon.log().count("closed: it did not read") == 1  # named once, the stalled peer
    finally:
        assert daemon.stop() == 0, daemon.log()


RECONNECTING_CLIENT = r"""
import asyncio, json, sys
from wyoming.asr import Transcript
from wyoming.client import AsyncClient

async def turn(client, text):
    await client.write_event(Transcript(text=text, context={"conversation_id": "ha-9"}).event())
    while (event := await client.read_event()).type not in ("handled", "not-handled"):
        pass
    print(json.dumps({"type": event.type, "data": event.data}), flush=True)

async def main(uri):
    async with AsyncClient.from_uri(uri) as client:
        await turn(client, "Hello from the porch")
        # the daemon goes away: the connection ends
        print(json.dumps({"type": "closed" if await client.read_event() is None else "?"}),
              flush=True)
    while True:  # as Home Assistant does: connect again until the service is back
        try:
            async with AsyncClient.from_uri(uri) as client:
                await turn(client, "And the garden?")
                return
        except OSError:
            await asyncio.sleep(0.05)

asyncio.run(main(sys.argv[1]))
"""


def test_a_client_reconnects_after_the_daemon_closed_it_and_keeps_its_session(tmp_path, mock):
    (tmp_path / "d").mkdir()
    daemon, uri = start(tmp_path, mock)
    client = subprocess.Popen([sys.executable, "-c", RECONNECTING_CLIENT, uri],
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        first = json.loads(client.stdout.readline())
        assert first["type"] == "handled" and first["data"]["text"] == ENGLISH
        assert daemon.stop() == 0, daemon.log()  # SIGTERM: the daemon closes its peers
        assert json.loads(client.stdout.readline()) == {"type": "closed"}
        daemon.start()
        second = json.loads(client.stdout.readline())
        assert second["type"] == "handled" and second["data"]["text"] == ENGLISH
        assert client.wait(timeout(20)) == 0
    finally:
        client.kill()
        client.wait()
        client.stdout.close()
        assert daemon.stop() == 0, daemon.log()
    # the session outlived the daemon: the second ask had the first exchange
    [upstream] = [r for r in mock.requests() if isinstance(r["body"], dict)
                  and r["body"]["messages"][-1] == {"role": "user", "content": "And the garden?"}]
    assert upstream["body"]["messages"][-3:-1] == [
        {"role": "user", "content": "Hello from the porch"},
        {"role": "assistant", "content": ENGLISH}]


def until_logged(daemon: Daemon, text: str, seconds: float = 30) -> None:
    until_true(lambda: text in daemon.log(), seconds)


def until_true(condition, seconds: float = 30) -> None:
    deadline = time.monotonic() + timeout(seconds)
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# ---- a door as hard as the socket's (the hardening issue, items 4-6) ----
# Each test below runs a real `homeagent serve` with a [wyoming] table of
# small limits; the peers are raw sockets (the attackers) and the `wyoming`
# package's client (Home Assistant).

from daemon_harness import toml_value  # noqa: E402


def wyoming_daemon(tmp_path, mock, listen: str, providers: dict | None = None,
                   daemon: dict | None = None, **keys) -> Daemon:
    (tmp_path / "d").mkdir(exist_ok=True)
    table = "\n".join(["[wyoming]", f"listen = {toml_value(listen)}",
                       *(f"{key} = {toml_value(value)}" for key, value in keys.items())])
    return Daemon(tmp_path / "d", mock.url, extra=table + "\n", providers=providers,
                  daemon=daemon).start()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tcp_peer(port: int, source: str = "127.0.0.1", host: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET)
    sock.settimeout(timeout(20))
    sock.bind((source, 0))
    sock.connect((host, port))
    return sock


def unix_peer(uri: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(timeout(20))
    sock.connect(uri[len("unix://"):])
    return sock


def until_closed(sock: socket.socket) -> bytes:
    """What the daemon sends until it closes the connection (bounded wait)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def events_until(sock: socket.socket, last: str) -> list[Event]:
    reader, events = Reader(), []
    while not events or events[-1].type != last:
        data = sock.recv(65536)
        assert data, f"closed after {[e.type for e in events]}"
        events += reader.feed(data)
    return events


def wyoming_status(daemon: Daemon) -> dict:
    with daemon.client() as client:
        return client.call("status")["wyoming"]


def test_idle_peers_are_closed_and_home_assistant_gets_in(tmp_path, mock):
    """Item 4: eight idle connections held every slot for as long as they
    stayed open; now a peer silent for idle_timeout is closed."""
    sock_path = tmp_path / "w.sock"
    daemon = wyoming_daemon(tmp_path, mock, f"unix:{sock_path}", idle_timeout=0.5,
                            max_connections=8, max_connections_per_peer=8)
    idle = []
    try:
        idle = [unix_peer(f"unix://{sock_path}") for _ in range(8)]
        for sock in idle:
            assert until_closed(sock) == b""   # closed by the daemon, no event ever sent
        [turn] = turns(converse(f"unix://{sock_path}", QUESTION))
        assert turn[-1]["type"] == "handled"
        assert daemon.log().count("closed: no event for 0.5 s (wyoming.idle_timeout)") == 8
    finally:
        for sock in idle:
            sock.close()
        assert daemon.stop() == 0, daemon.log()


def test_a_dripping_event_is_closed_at_event_timeout(tmp_path, mock):
    """Item 4: a header sent a byte at a time kept its slot (each byte a sign
    of life); an event must now come whole within event_timeout."""
    sock_path = tmp_path / "w.sock"
    daemon = wyoming_daemon(tmp_path, mock, f"unix:{sock_path}", idle_timeout=60.0,
                            event_timeout=0.5)
    try:
        with unix_peer(f"unix://{sock_path}") as sock:
            header = encode(Event("describe"))
            closed = False
            deadline = time.monotonic() + timeout(20)
            for byte in header[:-1] * 100:  # never the newline: the event never ends
                assert time.monotonic() < deadline, "timed out"
                try:
                    sock.send(bytes([byte]))
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
                time.sleep(0.05)
            assert closed
        assert "an event not complete 0.5 s after it began (wyoming.event_timeout)" in daemon.log()
        [turn] = turns(converse(f"unix://{sock_path}", QUESTION))
        assert turn[-1]["type"] == "handled"
    finally:
        assert daemon.stop() == 0, daemon.log()


# An upstream whose first part comes after 30 s: an ask that runs on and on
STALLED = {"mock": {"headers": {"x-mock-delay-ms": "30000"}}}


def test_a_peer_that_leaves_during_its_ask_frees_its_slot_and_ends_its_ask(tmp_path, mock):
    """Item 4: a peer that sent a transcript and left kept its slot (and its
    ask ran on) until the model's first output; EOF is noticed now."""
    sock_path = tmp_path / "w.sock"
    daemon = wyoming_daemon(tmp_path, mock, f"unix:{sock_path}", providers=STALLED)
    try:
        with unix_peer(f"unix://{sock_path}") as sock:
            sock.sendall(encode(Event("transcript", {"text": QUESTION})))
            until_true(lambda: wyoming_status(daemon)["active"], 20)
        until_true(lambda: wyoming_status(daemon)["connections"] == 0, 20)
        until_true(lambda: not wyoming_status(daemon)["active"], 20)
        with daemon.client() as client:
            status = client.call("status")
        assert not status["active"] and status["counters"]["cancelled"] == 1
        assert "left during its ask; the ask is cancelled" in daemon.log()
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_wyoming_asks_in_flight_are_in_status_with_their_peer(tmp_path, mock):
    """Low item: the status listed no Wyoming ask; now each with its peer,
    session and seconds, as the socket door's `active`."""
    sock_path = tmp_path / "w.sock"
    daemon = wyoming_daemon(tmp_path, mock, f"unix:{sock_path}", providers=STALLED)
    try:
        with unix_peer(f"unix://{sock_path}") as sock:
            sock.sendall(encode(Event("transcript", {
                "text": QUESTION, "context": {"conversation_id": "ha-status"}})))
            until_true(lambda: wyoming_status(daemon)["active"], 20)
            [flight] = wyoming_status(daemon)["active"]
            assert flight["peer"] == f"wyoming peer uid={os.getuid()} gid={os.getgid()} " \
                                     f"pid={os.getpid()}"
            assert flight["session"] == session_for({"conversation_id": "ha-status"})
            assert isinstance(flight["seconds"], float) and flight["seconds"] >= 0
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_caps_per_peer_address_and_slots_kept_for_named_peers(tmp_path, mock):
    """Item 4: strangers (loopback TCP, let in by allow_loopback) take at
    most max_connections_per_peer each and never the reserved slots; an
    address allow names one by one still gets in."""
    port = free_port()
    daemon = wyoming_daemon(tmp_path, mock, f"tcp://0.0.0.0:{port}", allow_loopback=True,
                            allow=["127.0.0.9"], max_connections=4,
                            max_connections_per_peer=2, reserved_connections=1)
    held = []
    try:
        held = [tcp_peer(port, "127.0.0.1"), tcp_peer(port, "127.0.0.1")]
        until_true(lambda: wyoming_status(daemon)["connections"] == 2, 20)
        with tcp_peer(port, "127.0.0.1") as third:  # over the per-address cap
            assert until_closed(third) == b""
        held.append(tcp_peer(port, "127.0.0.2"))
        until_true(lambda: wyoming_status(daemon)["connections"] == 3, 20)
        with tcp_peer(port, "127.0.0.3") as stranger:  # the last slot is kept
            assert until_closed(stranger) == b""
        with tcp_peer(port, "127.0.0.9") as named:  # Home Assistant's address
            named.sendall(encode(Event("describe")))
            assert events_until(named, "info")[-1].type == "info"
        status = wyoming_status(daemon)
        assert status["refused"] == 2
        log = daemon.log()
        assert "(wyoming.max_connections_per_peer)" in log
        assert "(wyoming.reserved_connections)" in log
    finally:
        for sock in held:
            sock.close()
        assert daemon.stop() == 0, daemon.log()


def test_peers_that_never_read_echoes_stay_under_memory_high(tmp_path, mock):
    """Item 5: a peer that sends pings with a long text (and transcripts with
    a long context) and never reads got each echoed into a queue of 256
    events of up to 1 MiB: one took the daemon from 44 MB to 311 MB. Four
    such peers now; the peak RSS stays under the unit's MemoryHigh."""
    import threading

    sock_path = tmp_path / "w.sock"
    daemon = wyoming_daemon(tmp_path, mock, f"unix:{sock_path}")
    text = "x" * (512 * 1024)
    ping = encode(Event("ping", {"text": text}))
    empty = encode(Event("transcript", {"text": " ", "context": {"pad": text}}))
    peers = [unix_peer(f"unix://{sock_path}") for _ in range(4)]
    sent = [0] * len(peers)

    def attack(n: int) -> None:
        peers[n].settimeout(2)  # the daemon stopped reading it: the attack is over
        try:
            for index in range(160):
                peers[n].sendall(ping if index % 2 else empty)
                sent[n] += 1
        except OSError:
            pass

    try:
        before = daemon.peak_rss_mib("start")
        threads = [threading.Thread(target=attack, args=(n,)) for n in range(len(peers))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout(120))
        peak = daemon.peak_rss_mib(f"the wyoming echo attack: 4 peers sent {sum(sent)} "
                                   f"events of 512 KiB (VmHWM {before:.1f} MiB at start)")
        assert peak < MEMORY_HIGH_MIB
        for sock in peers:
            sock.close()
        until_true(lambda: wyoming_status(daemon)["connections"] == 0, 30)
        [turn] = turns(converse(f"unix://{sock_path}", QUESTION))
        assert turn[-1]["type"] == "handled"
    finally:
        for sock in peers:
            sock.close()
        assert daemon.stop() == 0, daemon.log()


def test_a_long_context_or_ping_text_is_not_echoed(served):
    """Item 5: what is echoed is capped: a context or a ping text over ECHO
    bytes is not echoed at all, a short one is, whole."""
    _, uri = served
    long = "y" * ECHO
    reply = raw_peer(uri, encode(Event("ping", {"text": long}))
                     + encode(Event("ping", {"text": "short"}))
                     + encode(Event("transcript", {"text": "", "context": {"id": long}}))
                     + encode(Event("transcript", {"text": "", "context": {"id": "c1"}}))
                     + b"not json\n")
    assert Reader().feed(reply) == [
        Event("pong", {}), Event("pong", {"text": "short"}),
        Event("not-handled", {"text": "empty transcript"}),
        Event("not-handled", {"text": "empty transcript", "context": {"id": "c1"}})]


def test_a_peer_that_pipelines_5000_describes_and_reads_gets_every_info(tmp_path, mock):
    """Low item: 5,000 describes in one go were closed with no reply at the
    queue's bound; now the peer is not read while its queue is half full,
    and it gets every reply."""
    import threading

    sock_path = tmp_path / "w.sock"
    daemon = wyoming_daemon(tmp_path, mock, f"unix:{sock_path}")
    try:
        with unix_peer(f"unix://{sock_path}") as sock:
            writer = threading.Thread(target=sock.sendall,
                                      args=(encode(Event("describe")) * 5000,))
            writer.start()
            reader, infos = Reader(), 0
            while infos < 5000:
                data = sock.recv(65536)
                assert data, f"closed after {infos} infos"
                infos += sum(1 for e in reader.feed(data) if e.type == "info")
            writer.join(timeout(20))
        assert "closed" not in daemon.log()
    finally:
        assert daemon.stop() == 0, daemon.log()


def as_user(uid: int, sock_path: str) -> subprocess.CompletedProcess:
    """A peer of another uid on the Unix socket: sends describe, prints what came."""
    code = (f"import os, socket\nos.setgroups([]); os.setgid({uid}); os.setuid({uid})\n"
            f"s = socket.socket(socket.AF_UNIX); s.settimeout({timeout(20)})\n"
            f"s.connect({sock_path!r})\n"
            "data = b''\n"
            "try:\n"
            "    s.sendall(b'{\"type\": \"describe\"}\\n')\n"
            "    while chunk := s.recv(65536):\n"
            "        data += chunk\n"
            "        if b'info' in data: break\n"
            "except (BrokenPipeError, ConnectionResetError):\n"
            "    pass  # closed at once\n"
            "print('info' if b'info' in data else 'closed')\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout(30))


@pytest.mark.skipif(os.geteuid() != 0, reason="a peer of another uid needs root to make")
@pytest.mark.parametrize("allowed", [False, True])
def test_the_unix_socket_lets_in_the_socket_apis_allow_users_only(tmp_path, mock, allowed):
    """Item 6: one access policy for every door. Wyoming's Unix socket reads
    its peer's credentials (SO_PEERCRED) and checks them against
    daemon.allow_users / allow_groups, as the socket API does; its mode
    (and group) are configurable."""
    import shutil
    import tempfile

    where = tempfile.mkdtemp(prefix="homeagent-")  # a directory uid 65534 can traverse
    os.chmod(where, 0o755)
    sock_path = Path(where) / "w.sock"
    nobody = 65534
    daemon = wyoming_daemon(tmp_path, mock, f"unix:{sock_path}", socket_mode=0o666,
                            daemon={"allow_users": [nobody] if allowed else [12345]})
    try:
        assert os.stat(sock_path).st_mode & 0o777 == 0o666
        out = as_user(nobody, str(sock_path))
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == ("info" if allowed else "closed")
        if not allowed:
            assert f"wyoming peer uid={nobody} gid={nobody} pid=" in daemon.log()
            assert "refused: not let in (daemon.allow_users, allow_groups)" in daemon.log()
            assert wyoming_status(daemon)["refused"] == 1
    finally:
        assert daemon.stop() == 0, daemon.log()
        shutil.rmtree(where, ignore_errors=True)


def test_tcp_is_opt_in_and_never_lets_every_local_user_in():
    """Item 6: a loopback TCP listener let every local uid drive the tools.
    TCP now lets in only wyoming.allow's addresses, and this host's with
    allow_loopback = true: a listener that would let nobody in (or, before,
    everybody on the host) is refused at --check."""
    from agent.service.config import ConfigError, parse

    base = 'default_provider = "m"\n[providers.m]\nprotocol = "ollama"\n' \
           'base_url = "http://127.0.0.1:11434"\nmodel = "x"\n[wyoming]\n'
    with pytest.raises(ConfigError, match="allow_loopback"):
        parse(base + 'listen = "tcp://127.0.0.1:10700"\n', "c.toml")
    config = parse(base + 'listen = "tcp://127.0.0.1:10700"\nallow_loopback = true\n',
                   "c.toml").wyoming
    assert config.allow_loopback is True


def test_every_ask_is_logged_with_its_peers_address_and_port(tmp_path, mock):
    """Item 6: the log named no peer port; a TCP peer is its address and port."""
    port = free_port()
    daemon = wyoming_daemon(tmp_path, mock, f"tcp://127.0.0.1:{port}", allow_loopback=True,
                            providers=PACED)
    try:
        with tcp_peer(port) as sock:
            mine = sock.getsockname()[1]
            sock.sendall(encode(Event("transcript", {"text": QUESTION})))
            assert events_until(sock, "handled")[-1].data["text"] == ENGLISH
        assert f"wyoming peer 127.0.0.1:{mine}: transcript: an ask on session wyoming-" \
            in daemon.log()
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_tcp_on_the_ipv6_any_address_takes_ipv4_peers_too(tmp_path, mock):
    """Low item: tcp://[::]:P bound IPv6 only; it is dual-stack now."""
    port = free_port()
    daemon = wyoming_daemon(tmp_path, mock, f"tcp://[::]:{port}", allow_loopback=True)
    try:
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            with socket.socket(family) as sock:
                sock.settimeout(timeout(20))
                sock.connect((host, port))
                sock.sendall(encode(Event("describe")))
                assert events_until(sock, "info")[-1].type == "info"
        assert "wyoming peer 127.0.0.1:" in daemon.log()  # unmapped in the log
    finally:
        assert daemon.stop() == 0, daemon.log()


def own_address() -> str | None:
    """An IPv4 address of this host that is not loopback, if it has one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
            address = probe.getsockname()[0]
    except OSError:
        return None
    return None if ipaddress.ip_address(address).is_loopback else address


def test_an_ipv4_mapped_allow_entry_matches_its_ipv4_peer(tmp_path, mock):
    """Low item: allow = ["::ffff:192.168.1.5"] passed --check but never
    matched (peers are compared unmapped); it is normalised at load."""
    from agent.service.config import parse

    base = 'default_provider = "m"\n[providers.m]\nprotocol = "ollama"\n' \
           'base_url = "http://127.0.0.1:11434"\nmodel = "x"\n[wyoming]\n' \
           'listen = "tcp://0.0.0.0:10700"\n'
    config = parse(base + 'allow = ["::ffff:192.168.1.5", "::ffff:10.1.0.0/112"]\n',
                   "c.toml").wyoming
    assert config.allow == (ipaddress.ip_network("192.168.1.5"),
                            ipaddress.ip_network("10.1.0.0/16"))
    address = own_address()
    if address is None:
        pytest.skip("no non-loopback IPv4 address to connect from")
    port = free_port()
    daemon = wyoming_daemon(tmp_path, mock, f"tcp://0.0.0.0:{port}", allow=[f"::ffff:{address}"])
    try:
        with tcp_peer(port, address, address) as sock:
            sock.sendall(encode(Event("describe")))
            assert events_until(sock, "info")[-1].type == "info"
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_refused_connections_cost_one_log_line_per_interval_and_are_counted(tmp_path, mock):
    """Low item: each refused connection logged a line of its own."""
    port = free_port()
    daemon = wyoming_daemon(tmp_path, mock, f"tcp://127.0.0.1:{port}", allow=["10.9.9.9"])
    try:
        for _ in range(50):
            with tcp_peer(port) as sock:
                assert until_closed(sock) == b""
        until_true(lambda: wyoming_status(daemon)["refused"] == 50, 20)
        assert daemon.log().count("refused: not let in (wyoming.allow, allow_loopback)") == 1
    finally:
        assert daemon.stop() == 0, daemon.log()
