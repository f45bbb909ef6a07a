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

import pytest
import trio

import wyoming_conversation_client as ha_client
from agent.wyoming.service import QUEUE, ConversationService, _Peer, session_for
from agent.mock_llm.scripts import ENGLISH
from agent.wyoming.config import WyomingConfig
from agent.wyoming.framing import Event, Reader, encode
from conftest import timeout
from daemon_harness import Daemon

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
