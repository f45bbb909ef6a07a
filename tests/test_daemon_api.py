"""The socket API against a real daemon: `homeagent serve` as a subprocess,
the scripted mock model server as its upstream, real Unix sockets and real
CLI processes. The protocol's reference is docs/protocol.md."""

from __future__ import annotations

import grp
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from agent.api.client import DaemonUnavailable
from agent.api.protocol import OPERATIONS
from agent.api.wire import PROTOCOL_VERSION
from agent.api.server import HANGUP_POLL
from agent.service.daemon import FD_RESERVE
from agent.mock_llm.scripts import CHINESE, EMOJI, ENGLISH, REASONED, REASONING
from conftest import timeout
from daemon_harness import REPO, Daemon, MockServer, Raw, _env, ask_text
from helpers import of_type

# x-mock-delay-ms is a wait before every part of an answer but the first.
# PACED: the parts of an answer arrive one by one, yet an answer is quick.
PACED = {"headers": {"x-mock-delay-ms": "5"}}
# SLOW: an ask is still streaming long after its first delta has arrived.
SLOW = {"headers": {"x-mock-delay-ms": str(round(timeout(0.2) * 1000))}}
PROVIDERS = {"slow": SLOW, "paced": PACED}
NOBODY = 65534
GENERATED_SESSION = re.compile(r"s-[0-9a-f]{12}")
FINAL = ("done", "error")


@pytest.fixture
def start_daemon(tmp_path, mock):
    """start_daemon(**Daemon kwargs) -> a started daemon; every one is stopped
    at the end of the test, and must exit 0."""
    daemons = []

    def start(**kwargs) -> Daemon:
        kwargs.setdefault("providers", PROVIDERS)
        directory = tmp_path / f"d{len(daemons)}"
        directory.mkdir()
        daemon = Daemon(directory, mock.url, **kwargs)
        # A socket set in the config is where clients connect.
        daemon.socket_path = daemon.daemon_settings["socket"]
        daemons.append(daemon)
        return daemon.start()

    yield start
    statuses = [(daemon.stop(), daemon) for daemon in daemons if daemon.process is not None]
    for status, daemon in statuses:
        assert status == 0, f"the daemon exited {status}:\n{daemon.log()}"


@pytest.fixture
def daemon(start_daemon):
    """A fresh daemon, for a test that counts connections, asks or sessions."""
    return start_daemon()


@pytest.fixture(scope="module")
def shared(tmp_path_factory, mock):
    """One daemon for the tests that only look at their own requests and
    sessions (each test uses session names of its own)."""
    daemon = Daemon(tmp_path_factory.mktemp("shared"), mock.url, providers=PROVIDERS).start()
    yield daemon
    assert daemon.stop() == 0, daemon.log()


def read_request(raw: Raw, request_id) -> list[dict]:
    """Lines up to the done or error of request_id, or to an error without an
    id (which ends the wait: the caller checks the ids). Lines of other ids
    are included."""
    lines = []
    while True:
        reply = raw.line()
        lines.append(reply)
        if reply["type"] in FINAL and reply.get("id") in (request_id, None):
            return lines


def joined(replies: list[dict], kind: str) -> str:
    return "".join(r["text"] for r in of_type(replies, kind))


def wait_status(client, check, wait: float = timeout(5)) -> dict:
    """The first status reply for which check(status) holds, polled for `wait` seconds."""
    deadline = time.monotonic() + wait
    while True:
        status = client.call("status")
        if check(status):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"status never matched within {wait:g} s: {status}")
        time.sleep(0.02)


def recorded_with(mock: MockServer, prompt: str) -> list[dict]:
    """The upstream requests whose last message is the user prompt `prompt`."""
    return [r for r in mock.requests()
            if isinstance(r["body"], dict) and r["body"].get("messages")
            and r["body"]["messages"][-1] == {"role": "user", "content": prompt}]


def session_ids(client) -> set[str]:
    return {s["id"] for s in client.call("sessions")["sessions"]}


def stream_shape(replies: list[dict]) -> list[str]:
    """The reply types with runs collapsed: ["started", "delta", "done"]."""
    shape: list[str] = []
    for reply in replies:
        if not shape or shape[-1] != reply["type"]:
            shape.append(reply["type"])
    return shape


# ---------------------------------------------------------------- connecting

def test_hello_on_connect(shared):
    raw = Raw(shared.socket_path)
    hello = raw.line()
    raw.close()
    assert hello == {"type": "hello", "protocol": PROTOCOL_VERSION, "server": hello["server"],
                     "operations": list(OPERATIONS),
                     "capabilities": ["stream", "reasoning", "subscribe", "cancel", "announce",
                                      "stop"],
                     "max_line_bytes": 65536}
    assert hello["protocol"] == 1
    assert set(OPERATIONS) == {"ask", "cancel", "status", "subscribe", "sessions", "history",
                               "forget", "announce", "stop", "timers"}
    assert hello["server"].startswith("homeagent ")


# Runs argv[2:] with RLIMIT_NOFILE set to argv[1], soft and hard.
WITH_NOFILE = ("import os, resource, sys; n = int(sys.argv[1]); "
               "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); os.execv(sys.argv[2], sys.argv[2:])")
DAEMON_NOFILE = 400
FLOOD = 1100


def connect_by(path: str, deadline: float) -> socket.socket:
    """A connection, retried while the listen backlog is full, until the deadline."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout(5))
    while True:
        try:
            sock.connect(path)
            return sock
        except BlockingIOError:
            if time.monotonic() > deadline:
                sock.close()
                raise AssertionError("the daemon stopped accepting connections") from None
            time.sleep(0.01)


def first_line(sock: socket.socket, deadline: float) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        if not (chunk := sock.recv(4096)):
            break
        data += chunk
    return data


def test_a_flood_of_idle_connections_leaves_descriptors_for_asks_and_commits(tmp_path, mock):
    """1100 connections that never send anything, against a daemon with 400
    descriptors: the ones over the cap get too_many_connections at once, an
    ask streaming meanwhile is answered and committed, the log does not
    flood, and once the flood is gone a new client is served."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < FLOOD + 200:
        pytest.skip(f"the test needs {FLOOD + 200} descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, FLOOD + 200), hard))
    daemon = Daemon(tmp_path, mock.url, providers=PROVIDERS,
                    daemon={"max_clients": 1000})  # root: held to the total cap only
    daemon.start(argv_prefix=[sys.executable, "-c", WITH_NOFILE, str(DAEMON_NOFILE)])
    flood: list[socket.socket] = []
    try:
        with daemon.client() as asker:
            request_id = asker.send("ask", prompt="Hello", provider="slow", session="flooded")
            replies = asker.replies(request_id, "ask")
            assert next(replies)["type"] == "started"
            deadline = time.monotonic() + timeout(60)
            for _ in range(FLOOD):
                flood.append(connect_by(daemon.socket_path, deadline))
            firsts = [json.loads(first_line(sock, deadline)) for sock in flood]
            refused = [i for i, reply in enumerate(firsts) if reply["type"] == "error"]
            admitted = len(firsts) - len(refused)
            assert {firsts[i]["code"] for i in refused} == {"too_many_connections"}
            assert all(flood[i].recv(1) == b"" for i in refused)  # and closed
            assert 0 < admitted < DAEMON_NOFILE - FD_RESERVE
            rest = list(replies)
            assert rest[-1]["type"] == "done", rest[-1]
            assert joined(rest, "delta") == ENGLISH
            # A new upstream request, while the flood still holds its connections.
            text, _ = ask_text(asker, "Hello", provider="paced", session="flooded")
            assert text == ENGLISH
            assert len(asker.call("history", session="flooded")["turns"]) == 4  # both kept
            assert asker.call("status")["counters"]["refused"] == len(refused)
        for sock in flood:
            sock.close()
        flood.clear()
        late: list = []

        def admitted() -> bool:
            try:
                late.append(daemon.client())
            except DaemonUnavailable:  # the daemon has not seen every close yet
                return False
            return True

        wait_for(admitted, "a new client admitted after the flood", timeout(10))
        with late[0] as client:
            assert ask_text(client, "Hello", session="late")[0] == ENGLISH
        log = daemon.log()
        assert "Traceback" not in log
        assert f"the descriptor limit (RLIMIT_NOFILE {DAEMON_NOFILE}) leaves room for" in log
        assert log.count("over daemon.max_clients") <= 3  # one line per interval, not per client
        assert "accept failed" not in log  # the cap kept accept() from running out
    finally:
        for sock in flood:
            sock.close()
        assert daemon.stop() == 0, daemon.log()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ---------------------------------------------------------------- asks

@pytest.mark.parametrize("prompt, answer, session", [
    ("Hello there", ENGLISH, "stream-en"),
    ("客厅现在几度？", CHINESE, "stream-zh"),
    ("Some emoji for the night", EMOJI, "stream-emoji")])
def test_ask_streams_started_deltas_done(shared, prompt, answer, session):
    # paced: the parts that arrive in one network read come out as one delta
    with shared.client() as client:
        text, replies = ask_text(client, prompt, session=session, provider="paced")
    assert stream_shape(replies) == ["started", "delta", "done"]
    started, done = replies[0], replies[-1]
    assert started == {"id": 1, "type": "started", "session": session, "provider": "paced",
                       "model": "mock-small"}
    assert text == done["text"] == answer
    assert len(of_type(replies, "delta")) > 1  # streamed, not in one piece
    assert done["session"] == session
    assert done["finish_reason"] == "stop"
    assert done["attempts"] == 1
    assert done["usage"]["output_tokens"] > 0
    assert all(r["id"] == 1 for r in replies)


@pytest.mark.parametrize("request_id", ["ask-α/1 ✓", 42, -7, 0, 2 ** 62, "x" * 128])
def test_every_reply_echoes_the_request_id(shared, request_id):
    raw = shared.raw()
    raw.send(json.dumps({"id": request_id, "op": "ask", "prompt": "Hello"}).encode() + b"\n")
    replies = read_request(raw, request_id)
    raw.close()
    assert [r["id"] for r in replies] == [request_id] * len(replies)
    assert type(replies[-1]["id"]) is type(request_id)
    assert replies[-1]["type"] == "done" and joined(replies, "delta") == ENGLISH


def test_a_why_question_streams_reasoning_before_the_answer(shared):
    with shared.client() as client:
        text, replies = ask_text(client, "Why is the heating on?")
    assert stream_shape(replies) == ["started", "reasoning", "delta", "done"]
    assert joined(replies, "reasoning") == REASONING
    assert text == replies[-1]["text"] == REASONED


def test_reasoning_false_hides_reasoning_replies(shared):
    with shared.client() as client:
        text, replies = ask_text(client, "Why is the heating on?", reasoning=False)
        history = client.call("history", session=replies[-1]["session"])
    assert stream_shape(replies) == ["started", "delta", "done"]
    assert text == replies[-1]["text"] == REASONED
    # Hidden from this client only: the answer still had its reasoning.
    assert history["turns"][1]["reasoning"] == REASONING


def test_stream_false_gives_only_started_and_done(shared):
    with shared.client() as client:
        _, plain = ask_text(client, "Hello", stream=False)
        _, reasoned = ask_text(client, "Why is the heating on?", stream=False)
    assert [r["type"] for r in plain] == ["started", "done"]
    assert plain[-1]["text"] == ENGLISH
    assert [r["type"] for r in reasoned] == ["started", "done"]
    assert reasoned[-1]["text"] == REASONED


def test_ask_with_an_unknown_provider_is_an_error(shared):
    with shared.client() as client:
        _, replies = ask_text(client, "Hello", provider="nope")
        text, _ = ask_text(client, "Hello")
    assert [(r["type"], r["code"]) for r in replies] == [("error", "unknown_provider")]
    assert "mock, paced, slow" in replies[0]["message"]
    assert text == ENGLISH


# ---------------------------------------------------------------- sessions

def test_a_second_ask_on_a_session_carries_the_first_exchange(shared, mock):
    first, second = "Hello from the kitchen 7f3a", "And the hallway 7f3a?"
    with shared.client() as client:
        text1, _ = ask_text(client, first, session="kitchen")
        text2, replies = ask_text(client, second, session="kitchen")
        history = client.call("history", session="kitchen")
        sessions = client.call("sessions")
    assert text1 == text2 == ENGLISH
    assert replies[0]["session"] == replies[-1]["session"] == "kitchen"

    [upstream] = recorded_with(mock, second)
    assert upstream["body"]["messages"][-4:] == [
        {"role": "system", "content": "You are a helpful assistant in a home."},
        {"role": "user", "content": first},
        {"role": "assistant", "content": ENGLISH},
        {"role": "user", "content": second}]
    [first_upstream] = recorded_with(mock, first)
    assert [m["role"] for m in first_upstream["body"]["messages"]] == ["system", "user"]

    assert history["type"] == "history" and history["session"] == "kitchen"
    assert [(t["role"], t["text"]) for t in history["turns"]] == [
        ("user", first), ("assistant", ENGLISH), ("user", second), ("assistant", ENGLISH)]
    assert [s["turns"] for s in sessions["sessions"] if s["id"] == "kitchen"] == [4]


def test_forget_removes_a_session(shared):
    with shared.client() as client:
        ask_text(client, "Hello", session="short-lived")
        ask_text(client, "Hello", session="kept")
        assert {"short-lived", "kept"} <= session_ids(client)
        assert client.call("forget", session="short-lived") == {
            "id": 4, "type": "ok", "forgotten": True}
        assert client.call("history", session="short-lived")["turns"] == []
        assert "short-lived" not in session_ids(client)
        assert "kept" in session_ids(client)
        assert client.call("forget", session="short-lived")["forgotten"] is False
        assert len(client.call("history", session="kept")["turns"]) == 2


def test_a_bad_session_id_is_refused_and_the_connection_stays_usable(shared):
    raw = shared.raw()
    for op in ("history", "forget"):
        raw.send(json.dumps({"id": op, "op": op, "session": "../x"}).encode() + b"\n")
        reply = raw.line()
        assert (reply["id"], reply["type"], reply["code"]) == (op, "error", "bad_session")
        assert "../x" in reply["message"]
    raw.send(b'{"id":"a","op":"ask","prompt":"Hello","session":"../x"}\n')
    replies = read_request(raw, "a")
    assert [(r["type"], r["code"]) for r in replies] == [("error", "bad_session")]
    raw.send(b'{"id":"s","op":"sessions"}\n')
    listed = raw.line()
    assert (listed["id"], listed["type"]) == ("s", "sessions")
    assert not [s for s in listed["sessions"] if "x" in s["id"]]
    raw.send(b'{"id":"b","op":"ask","prompt":"Hello"}\n')
    assert joined(read_request(raw, "b"), "delta") == ENGLISH
    raw.close()


def test_an_ask_without_a_session_gets_a_new_one(shared):
    with shared.client() as client:
        _, first = ask_text(client, "Hello")
        _, second = ask_text(client, "Hello")
        session = first[0]["session"]
        history = client.call("history", session=session)
    assert GENERATED_SESSION.fullmatch(session)
    assert first[-1]["session"] == session
    assert GENERATED_SESSION.fullmatch(second[0]["session"])
    assert second[0]["session"] != session
    assert [t["role"] for t in history["turns"]] == ["user", "assistant"]


# ---------------------------------------------------------------- status

def test_status_fields(daemon):
    with daemon.client() as client, daemon.client() as other:
        ask_text(client, "Hello", session="st")
        status = client.call("status")
        request_id = other.send("ask", prompt="Hello", provider="slow", session="busy")
        replies = other.replies(request_id, "ask")
        assert next(replies)["type"] == "started"
        busy = client.call("status")
        other.send("cancel", target=request_id)
        assert [r.get("code") for r in replies][-1] == "cancelled"
    assert status["type"] == "status" and status["id"] == 2
    assert status["protocol"] == 1 and status["server"].startswith("homeagent ")
    assert status["pid"] == daemon.process.pid
    assert 0 <= status["uptime"] < timeout(60)
    assert status["socket"] == daemon.socket_path
    assert status["config"] == str(daemon.config_path)
    assert status["default_provider"] == "mock"
    configured = ("name", "protocol", "model", "base_url", "default", "key", "fallback")
    assert [{k: p[k] for k in configured} for p in status["providers"]] == [
        {"name": name, "protocol": "openai-chat", "model": "mock-small",
         "base_url": daemon.mock_url + "/v1", "default": name == "mock", "key": False,
         "fallback": []}
        for name in ("mock", "slow", "paced")]
    mock = status["providers"][0]
    assert (mock["state"], mock["last_error"], mock["failures_in_a_row"]) == ("healthy", None, 0)
    assert mock["counts"] == {"answered": 1, "failed": 0, "failovers": 0, "skipped": 0}
    assert mock["first_delta"]["samples"] == 1
    assert 0 <= mock["first_delta"]["p50"] == mock["first_delta"]["p99"]
    assert status["clients"] == 2
    assert status["active"] == []
    assert status["counters"] == {"connections": 2, "refused": 0, "requests": 2,
                                  "bad_requests": 0, "asks": 1, "answered": 1, "failed": 0,
                                  "cancelled": 0, "overflows": 0, "revoked": 0}
    assert status["draining"] is False

    [active] = busy["active"]
    assert {k: active[k] for k in ("client", "id", "session", "provider", "uid")} == {
        "client": 2, "id": request_id, "session": "busy", "provider": "slow",
        "uid": os.getuid()}
    assert active["seconds"] >= 0
    assert busy["uptime"] >= status["uptime"]
    assert busy["counters"]["asks"] == 2


SECRET = "sk-homeagent-test-9f8e7d6c5b4a39281706"


def test_api_keys_never_appear_in_replies_or_the_log(start_daemon, mock):
    keyed = {"api_key_env": "HOMEAGENT_TEST_API_KEY"}
    daemon = start_daemon(
        daemon={"log_level": "debug"}, env={"HOMEAGENT_TEST_API_KEY": SECRET},
        providers={"keyed": keyed,
                   "limited": {**keyed, "retries": 0, "headers": {"x-mock-fault": "429"}}})
    seen = []
    with daemon.client() as client:
        seen.append(client.hello)
        text, replies = ask_text(client, "Hello with a key 51c2", provider="keyed")
        seen += replies
        _, failed = ask_text(client, "Hello", provider="limited")
        seen += failed
        status = client.call("status")
        seen.append(status)
    assert text == ENGLISH
    [error] = [r for r in failed if r["type"] == "error"]
    assert (error["code"], error["status"]) == ("upstream_http", 429)
    assert "rate limit" in error["message"]
    assert {p["name"]: p["key"] for p in status["providers"]} == {
        "mock": False, "keyed": True, "limited": True}
    for provider in status["providers"]:
        assert set(provider) - {"retry_in", "until"} == {
            "name", "protocol", "model", "base_url", "default", "key", "fallback", "state",
            "last_error", "failures_in_a_row", "counts", "first_delta", "cache", "tokens"}
    # The 429's message is the provider's last error, shown as every line: masked.
    limited = next(p for p in status["providers"] if p["name"] == "limited")
    assert limited["state"] == "cooling" and "rate limit" in limited["last_error"]
    # The key did go upstream (the mock masks it when recording) ...
    [upstream] = recorded_with(mock, "Hello with a key 51c2")
    assert upstream["headers"]["authorization"] == "***"
    # ... and nowhere else.
    assert SECRET not in json.dumps(seen, ensure_ascii=False)
    assert "client 1" in daemon.log()  # debug logging did write
    assert SECRET not in daemon.log()
    assert SECRET[3:-3] not in daemon.log()


# ---------------------------------------------------------------- cancel and ids

def test_cancel_after_the_first_delta(daemon, mock):
    raw = daemon.raw()
    prompt = "Hello, cancel me 2b9c"
    raw.send(json.dumps({"id": "a", "op": "ask", "prompt": prompt, "provider": "slow",
                         "session": "cut"}).encode() + b"\n")
    assert raw.line()["type"] == "started"
    first = raw.line()
    assert (first["id"], first["type"]) == ("a", "delta")
    raw.send(b'{"id":"c","op":"cancel","target":"a"}\n')
    replies = read_request(raw, "a")
    assert {"id": "c", "type": "ok"} in replies
    assert (replies[-1]["type"], replies[-1]["code"]) == ("error", "cancelled")
    assert replies[-1]["id"] == "a"  # every reply to an ask carries its id
    assert "request 'c'" in replies[-1]["message"]
    assert {r["type"] for r in replies} <= {"ok", "delta", "error"}
    got = first["text"] + joined(replies, "delta")
    assert ENGLISH.startswith(got) and got != ENGLISH
    raw.send(b'{"id":"h","op":"history","session":"cut"}\n')
    assert raw.line() == {"id": "h", "type": "history", "session": "cut", "turns": []}
    raw.send(b'{"id":"s","op":"status"}\n')
    status = raw.line()
    assert status["active"] == []
    assert (status["counters"]["cancelled"], status["counters"]["answered"]) == (1, 0)
    raw.close()
    assert len(recorded_with(mock, prompt)) == 1


def test_cancel_of_an_unknown_request(shared):
    raw = shared.raw()
    raw.send(b'{"id":1,"op":"cancel","target":"never-sent"}\n')
    reply = raw.line()
    assert (reply["id"], reply["type"], reply["code"]) == (1, "error", "unknown_request")
    raw.send(b'{"id":2,"op":"ask","prompt":"Hello"}\n')
    done = read_request(raw, 2)[-1]
    raw.send(b'{"id":3,"op":"cancel","target":2}\n')  # finished: no longer in progress
    assert raw.line()["code"] == "unknown_request"
    assert done["type"] == "done"
    raw.close()


def test_cancel_cannot_reach_another_connections_ask(shared):
    with shared.client() as asker:
        raw = shared.raw()
        request_id = asker.send("ask", prompt="Hello", provider="paced")
        raw.send(json.dumps({"id": 9, "op": "cancel", "target": request_id}).encode() + b"\n")
        reply = raw.line()
        text = "".join(r["text"] for r in asker.replies(request_id, "ask")
                       if r["type"] == "delta")
        raw.close()
    assert (reply["type"], reply["code"]) == ("error", "unknown_request")
    assert text == ENGLISH


def test_a_duplicate_id_in_flight_is_refused(shared):
    raw = shared.raw()
    # One write, and a paced answer: the first ask is in flight when the others are read.
    raw.send(b'{"id":7,"op":"ask","prompt":"Hello","provider":"paced","session":"dup"}\n'
             b'{"id":7,"op":"ask","prompt":"Hello again","session":"dup"}\n'
             b'{"id":7,"op":"status"}\n')
    replies = [raw.line()]
    while replies[-1]["type"] != "done":
        replies.append(raw.line())
    assert {r["id"] for r in replies} == {7}
    duplicates = of_type(replies, "error")
    assert [r["code"] for r in duplicates] == ["duplicate_id"] * 2
    assert "7" in duplicates[0]["message"]
    assert joined(replies, "delta") == ENGLISH
    assert replies[-1]["type"] == "done"
    # Done: the id is free again.
    raw.send(b'{"id":7,"op":"history","session":"dup"}\n')
    assert [t["text"] for t in raw.line()["turns"]] == ["Hello", ENGLISH]
    raw.close()


# ---------------------------------------------------------------- bad input

BAD_LINES = [
    (b"{not json}\n", "invalid_json", None),
    (b'{"id":1,"op":"status","x":"\xff\xfe"}\n', "invalid_utf8", None),
    (b'{"id":1,"op":"ask","prompt":"\\ud800"}\n', "invalid_utf8", None),
    (b'[{"id":1,"op":"status"}]\n', "not_an_object", None),
    (b'"status"\n', "not_an_object", None),
    (b'{"op":"status"}\n', "missing_field", None),
    (b'{"id":true,"op":"status"}\n', "bad_field", None),
    (b'{"id":"u1"}\n', "missing_field", "u1"),
    (b'{"id":"u2","op":"frobnicate"}\n', "unknown_op", "u2"),
    (b'{"id":3,"op":"ask"}\n', "missing_field", 3),
    (b'{"id":4,"op":"ask","prompt":5}\n', "bad_field", 4),
    (b'{"id":5,"op":"ask","prompt":"Hello","stream":"yes"}\n', "bad_field", 5),
    (b'{"id":6,"op":"ask","prompt":" \\t\\n "}\n', "bad_field", 6),
    (b'{"id":7,"op":"ask","prompt":"Hello","temperature":1}\n', "unknown_field", 7),
    (b'{"id":8,"op":"history"}\n', "missing_field", 8),
    (b'{"id":9,"op":"cancel","target":1.5}\n', "bad_field", 9),
]


def test_bad_lines_get_errors_and_the_connection_stays_usable(shared):
    raw = shared.raw()
    raw.send(b'{"id":"first","op":"status"}\n')
    before = raw.line()["counters"]["bad_requests"]
    for number, (line, code, request_id) in enumerate(BAD_LINES):
        raw.send(line)
        reply = raw.line()
        assert (reply["type"], reply["code"], reply["id"]) == ("error", code, request_id), line
        assert reply["message"]
        raw.send(json.dumps({"id": f"ok{number}", "op": "status"}).encode() + b"\n")
        assert raw.line()["id"] == f"ok{number}", line
    raw.send(b"\n  \r\n")  # blank lines: no reply at all
    raw.send(b'{"id":"last","op":"status"}\r\n')
    status = raw.line()
    assert status["id"] == "last"
    assert status["counters"]["bad_requests"] - before == len(BAD_LINES)
    raw.close()


def test_an_unknown_op_names_the_known_ones(shared):
    raw = shared.raw()
    raw.send(b'{"id":"u","op":"frobnicate"}\n')
    message = raw.line()["message"]
    raw.close()
    assert "frobnicate" in message
    assert all(op in message for op in OPERATIONS)


def test_an_overlong_line_is_skipped(start_daemon):
    daemon = start_daemon(daemon={"max_line_bytes": 2048})
    raw = Raw(daemon.socket_path)
    assert raw.line()["max_line_bytes"] == 2048
    # A valid ask, were it not 10 KB: it must not run.
    big = json.dumps({"id": "big", "op": "ask", "prompt": "Hello " * 1700}).encode()
    assert len(big) > 10_000
    raw.send(big + b'\n{"id":"after","op":"status"}\n')
    reply = raw.line()
    assert (reply["type"], reply["code"], reply["id"]) == ("error", "line_too_long", None)
    assert "2048" in reply["message"]
    status = raw.line()
    assert status["id"] == "after"
    assert status["counters"]["asks"] == 0
    # Exactly at the limit is still a line.
    request = b'{"id":"edge","op":"ask","prompt":"Hello' + b" " * 2048
    request = request[:2048 - 2] + b'"}'
    assert len(request) == 2048
    raw.send(request + b"\n")
    assert read_request(raw, "edge")[-1]["text"] == ENGLISH
    # Ended by CRLF, in two reads that part the CR from its LF: the CR is not counted.
    crlf = request.replace(b'"edge"', b'"crlf"')
    raw.send(crlf + b"\r")
    time.sleep(0.05)
    raw.send(b"\n")
    assert read_request(raw, "crlf")[-1]["text"] == ENGLISH
    raw.close()


def test_an_unterminated_last_line_is_reported(shared):
    raw = shared.raw()
    raw.send(b'{"id":1,"op":"status"}\n{"id":2,"op":"status"}')
    raw.sock.shutdown(socket.SHUT_WR)
    assert raw.line()["id"] == 1
    reply = raw.line()
    assert (reply["type"], reply["code"], reply["id"]) == ("error", "incomplete_line", None)
    assert "22 bytes" in reply["message"]
    with pytest.raises(EOFError):
        raw.line()
    raw.close()


def test_half_close_still_gets_the_whole_answer(shared):
    raw = shared.raw()
    raw.send(b'{"id":"h","op":"ask","prompt":"Why is the heating on?","provider":"paced"}\n')
    raw.sock.shutdown(socket.SHUT_WR)
    replies = read_request(raw, "h")
    with pytest.raises(EOFError):
        raw.line()
    raw.close()
    assert stream_shape(replies) == ["started", "reasoning", "delta", "done"]
    assert joined(replies, "delta") == replies[-1]["text"] == REASONED


# ---------------------------------------------------------------- disconnects

def _disconnect_mid_stream(daemon) -> tuple[str, dict]:
    """Client 1 asks the slow provider and hangs up after the first delta while
    client 2 asks too. Client 2's answer and the status after."""
    quitter = daemon.raw()
    with daemon.client() as other:
        quitter.send(b'{"id":1,"op":"ask","prompt":"Hello","provider":"slow","session":"q"}\n')
        request_id = other.send("ask", prompt="Hello", provider="paced", session="o")
        assert quitter.line()["type"] == "started"
        assert quitter.line()["type"] == "delta"
        quitter.close()
        text = "".join(r["text"] for r in other.replies(request_id, "ask")
                       if r["type"] == "delta")
        # The hung-up ask ends first, its connection's teardown just after:
        # wait for both (under qemu the gap is visible).
        status = wait_status(other, lambda s: not s["active"] and s["clients"] == 1)
        assert other.call("history", session="q")["turns"] == []
    return text, status


def test_a_client_that_hangs_up_does_not_disturb_another(daemon):
    text, status = _disconnect_mid_stream(daemon)
    assert text == ENGLISH
    assert status["active"] == [] and status["clients"] == 1
    assert status["counters"]["answered"] == 1
    assert "client 1: gone; its requests are cancelled" in daemon.log()


def test_a_hung_up_clients_ask_is_counted_and_logged_as_cancelled(daemon):
    _, status = _disconnect_mid_stream(daemon)
    assert (status["counters"]["cancelled"], status["counters"]["failed"]) == (1, 0)
    assert re.search(r"client 1: ask id=1 cancelled after", daemon.log()), daemon.log()


def _reader(raw: Raw, replies: list, last_session: str) -> threading.Thread:
    """A thread reading raw's lines into replies, up to the done of an ask
    on last_session (or an error, or the end of the connection)."""
    def run():
        try:
            while True:
                reply = raw.line()
                replies.append(reply)
                if reply["type"] == "error" or (
                        reply["type"] == "done" and reply["session"] == last_session):
                    return
        except (EOFError, OSError):
            return
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


MAX_ASKS = 40  # at most, to fill the socket buffers of the stuck client


def test_a_client_that_never_reads_is_disconnected_and_nobody_else_is(start_daemon):
    daemon = start_daemon(daemon={"client_queue": 16})
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.connect(daemon.socket_path)
    stuck.sendall(b'{"id":"stuck","op":"subscribe"}\n')
    watcher = daemon.raw()
    watcher.send(b'{"id":"watch","op":"subscribe"}\n')
    assert watcher.line() == {"id": "watch", "type": "subscribed"}
    watched: list[dict] = []
    thread = _reader(watcher, watched, "last")
    answers = []
    with daemon.client() as asker:
        for _ in range(MAX_ASKS):
            text, _ = ask_text(asker, "Why is the heating on?", provider="paced")
            answers.append(text)
            if asker.call("status")["counters"]["overflows"]:
                break
        text, _ = ask_text(asker, "Why is the heating on?", provider="paced", session="last")
        answers.append(text)
        status = asker.call("status")
    thread.join(timeout(10))
    asks = len(answers)
    assert not thread.is_alive()
    assert status["counters"]["overflows"] == 1, f"no overflow after {asks} asks"
    assert answers == [REASONED] * asks
    assert status["clients"] == 2  # the watcher and the asker
    assert "more than 16 replies unread; disconnected" in daemon.log()
    # The watcher, reading all along, saw every reply of every ask.
    assert len(of_type(watched, "done")) == asks
    assert not of_type(watched, "error")
    assert joined(watched, "delta") == REASONED * asks
    # The stuck client: what the kernel buffered, then the end of the connection.
    stuck.settimeout(timeout(10))
    received = bytearray()
    while chunk := stuck.recv(65536):
        received += chunk
    stuck.close()
    *complete, _ = bytes(received).split(b"\n")
    assert b"" not in complete  # a newline ends a broken line only, never a whole one
    replies = []
    for index, line in enumerate(complete):
        try:
            replies.append(json.loads(line))
        except ValueError:
            # A send cut off by the overflow: the goodbye's leading newline ends
            # the broken line, and only the goodbye may follow it.
            assert index == len(complete) - 2, line[:80]
            assert json.loads(complete[-1])["code"] == "overflow"
    assert replies[0]["type"] == "hello"
    assert replies[1] == {"id": "stuck", "type": "subscribed"}
    copies = replies[2:]
    if copies[-1]["type"] == "error":  # the goodbye, if the socket had room for it
        assert copies.pop()["code"] == "overflow"
    assert len(copies) > 100  # the buffers did fill up before the daemon gave up
    assert {r["id"] for r in copies} == {"stuck"}
    assert {r["type"] for r in copies} <= {"started", "reasoning", "delta", "done"}
    watcher.close()


def test_a_client_that_reads_gets_a_long_answer_with_the_smallest_queue(start_daemon):
    """An answer arriving in one burst (an upstream that is fast and local)
    must not overflow a client that reads: the queue is for clients that do
    not read, not for how the upstream's bytes happen to be chunked."""
    daemon = start_daemon(daemon={"client_queue": 16})
    raw = daemon.raw()
    raw.send(b'{"id":1,"op":"ask","prompt":"Why is the heating on?"}\n')
    replies = []
    try:
        while not replies or replies[-1]["type"] not in FINAL:
            replies.append(raw.line())
    except (EOFError, OSError) as exc:
        replies.append({"type": "connection lost", "error": repr(exc)})
    raw.close()
    assert [r for r in replies if r["type"] not in ("started", "reasoning", "delta", "done")] \
        == []
    assert joined(replies, "delta") == REASONED
    with daemon.client() as client:
        assert client.call("status")["counters"]["overflows"] == 0


def test_a_client_that_pipelines_300_requests_and_reads_gets_every_reply(start_daemon, mock):
    """300 requests in one write: the daemon reads them no faster than the
    client reads the replies, so nothing overflows and every request is
    answered, in order for the quick ones. The bound holds by construction,
    however slowly the client reads: the reader stops while more than half
    of the 32-reply queue (17 replies at most) is unread, and the 5 asks,
    not streamed, add at most 2 replies each (started, done)."""
    daemon = start_daemon(daemon={"client_queue": 32})
    asks = set(range(0, 300, 60))
    lines = [json.dumps({"id": n, "op": "ask", "prompt": "Hello", "provider": "paced",
                         "session": f"pipelined-{n}", "stream": False}) if n in asks
             else json.dumps({"id": n, "op": "status"}) for n in range(300)]
    raw = daemon.raw()
    raw.send("".join(line + "\n" for line in lines).encode())
    final: dict[int, dict] = {}
    while len(final) < 300:
        reply = raw.line()
        assert reply["type"] not in ("error", "delta"), reply
        if reply["type"] in ("status", "done"):
            final[reply["id"]] = reply
    raw.close()
    statuses = [n for n in final if n not in asks]
    assert statuses == sorted(statuses)
    assert all(final[n]["type"] == "done" and final[n]["text"] == ENGLISH for n in asks)
    with daemon.client() as client:
        assert client.call("status")["counters"]["overflows"] == 0
    assert "replies unread" not in daemon.log()


def daemon_upstream_sockets(daemon: Daemon, mock: MockServer) -> int:
    """The daemon's TCP connections to the mock that are established, read
    from /proc: its socket inodes matched against the kernel's TCP table."""
    port = int(mock.url.rsplit(":", 1)[1])
    fd_dir = f"/proc/{daemon.process.pid}/fd"
    inodes = set()
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    count = 0
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{daemon.process.pid}/net/{table}") as f:
            for row in f.readlines()[1:]:
                fields = row.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if fields[9] in inodes and remote_port == port and fields[3] == "01":
                    count += 1
    return count


def wait_for(check, what: str, wait: float = timeout(5)) -> None:
    deadline = time.monotonic() + wait
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {wait:g} s")
        time.sleep(0.02)


@pytest.mark.parametrize("half_close_first", [False, True], ids=["close", "half-close-then-close"])
def test_a_client_gone_closes_its_silent_upstream_at_once(start_daemon, mock, half_close_first):
    """The upstream stalls (sends half an answer, then nothing, for longer
    than the test); the client closes its socket: the ask is cancelled and
    its upstream connection closed within seconds, not after read_timeout."""
    stalled = {"headers": {"x-mock-fault": "stall"}, "read_timeout": 600.0}
    daemon = start_daemon(providers={**PROVIDERS, "stalled": stalled})
    raw = daemon.raw()
    raw.send(b'{"id":1,"op":"ask","prompt":"Hello","provider":"stalled","session":"gone"}\n')
    if half_close_first:
        raw.sock.shutdown(socket.SHUT_WR)
    assert raw.line()["type"] == "started"
    assert raw.line()["type"] == "delta"  # the upstream connection is open
    assert daemon_upstream_sockets(daemon, mock) == 1
    if half_close_first:
        time.sleep(HANGUP_POLL * 2)  # the half-close alone keeps the ask
        assert daemon_upstream_sockets(daemon, mock) == 1
    raw.close()
    # within wait_for's seconds, not the provider's read_timeout of 600
    wait_for(lambda: daemon_upstream_sockets(daemon, mock) == 0,
             "the upstream connection closed")
    with daemon.client() as client:
        status = wait_status(client, lambda s: not s["active"])
        assert client.call("history", session="gone")["turns"] == []
    assert status["counters"]["cancelled"] == 1
    assert "client 1: gone; its requests are cancelled" in daemon.log()
    assert re.search(r"client 1: ask id=1 cancelled after", daemon.log()), daemon.log()


# ---------------------------------------------------------------- subscribe

def test_a_subscriber_sees_another_clients_ask(daemon):
    full, quiet = daemon.raw(), daemon.raw()
    full.send(b'{"id":"sub","op":"subscribe"}\n')
    quiet.send(b'{"id":99,"op":"subscribe","reasoning":false}\n')
    assert full.line() == {"id": "sub", "type": "subscribed"}
    assert quiet.line() == {"id": 99, "type": "subscribed"}
    with daemon.client() as asker:  # client 3
        _, asked = ask_text(asker, "Why is the heating on?", session="watched")
    seen = read_request(full, "sub")
    seen_quietly = read_request(quiet, 99)
    origin = {"client": 3, "id": 1, "session": "watched"}
    assert [{**r, "id": 1, "request": None} for r in seen] == [
        {**r, "request": None} for r in asked]
    assert all(r["id"] == "sub" and r["request"] == origin for r in seen)
    assert stream_shape(seen) == ["started", "reasoning", "delta", "done"]
    assert joined(seen, "reasoning") == REASONING
    assert joined(seen, "delta") == seen[-1]["text"] == REASONED
    assert all(r["id"] == 99 and r["request"] == origin for r in seen_quietly)
    assert stream_shape(seen_quietly) == ["started", "delta", "done"]
    assert joined(seen_quietly, "delta") == REASONED

    # Cancelled, the subscription ends: the next ask is not shown.
    full.send(b'{"id":"c","op":"cancel","target":"sub"}\n')
    assert full.line() == {"id": "c", "type": "ok"}
    with daemon.client() as asker:
        ask_text(asker, "Hello", session="unwatched")
    # Copies to subscribers are queued before the asker's done is: the
    # status comes first only when no copy was queued.
    full.send(b'{"id":"st","op":"status"}\n')
    assert full.line()["id"] == "st"
    assert read_request(quiet, 99)[-1]["request"]["session"] == "unwatched"
    full.send(b'{"id":"c2","op":"cancel","target":"sub"}\n')
    assert full.line()["code"] == "unknown_request"
    full.close()
    quiet.close()


def test_streamed_pieces_go_out_at_most_once_an_interval(start_daemon):
    """Deltas that come within delta_interval_ms of the last one written go
    out together at the interval's end, to the asker and to a subscriber
    alike: a fast stream costs a connection a write per interval, not one per
    token, and every reply still arrives, in order."""
    daemon = start_daemon(daemon={"delta_interval_ms": 1000})
    sub, asker = daemon.raw(), daemon.raw()
    sub.send(b'{"id":"sub","op":"subscribe"}\n')
    assert sub.line() == {"id": "sub", "type": "subscribed"}
    reads = {"sub": [], "asker": []}
    received = {"sub": bytearray(), "asker": bytearray()}

    def read_until_done(name: str, raw: Raw) -> None:  # as the replies come
        while b'"type":"done"' not in received[name]:
            chunk = raw.sock.recv(65536)
            if not chunk:
                return
            reads[name].append(time.monotonic())
            received[name].extend(chunk)

    readers = [threading.Thread(target=read_until_done, args=(name, raw))
               for name, raw in (("sub", sub), ("asker", asker))]
    for reader in readers:
        reader.start()
    asker.send(b'{"id":1,"op":"ask","prompt":"Hello","provider":"paced","session":"fast"}\n')
    for reader in readers:
        reader.join(timeout(20))
    asked = [json.loads(line) for line in bytes(received["asker"]).splitlines()]
    seen = [json.loads(line) for line in bytes(received["sub"]).splitlines()]
    assert len(of_type(asked, "delta")) > 5 and asked[-1]["type"] == "done"
    assert joined(asked, "delta") == asked[-1]["text"] == ENGLISH
    assert [{**r, "id": 1, "request": None} for r in seen] == [
        {**r, "request": None} for r in asked]
    # Held pieces go out once a second at most. Besides those batches, at
    # once: the started, the first delta, a done that came after the last
    # batch; and a write may reach the reader in two reads. So a stream that
    # lasted D seconds came in at most 4 + D reads. Each reply written at
    # once would be a read each (19 here).
    for name, times in reads.items():
        assert len(times) <= 4 + (times[-1] - times[0]), (name, len(times), len(asked))
    sub.close()
    asker.close()


def test_a_subscriber_sees_its_own_asks_too(daemon):
    raw = daemon.raw()
    raw.send(b'{"id":"sub","op":"subscribe"}\n{"id":"a","op":"ask","prompt":"Hello"}\n')
    assert raw.line() == {"id": "sub", "type": "subscribed"}
    replies = read_request(raw, "a")
    replies.append(raw.line())  # the copy of the done follows the done
    own = [r for r in replies if r["id"] == "a"]
    copies = [r for r in replies if r["id"] == "sub"]
    assert joined(own, "delta") == ENGLISH
    assert [r["type"] for r in copies] == [r["type"] for r in own]
    assert all(r["request"] == {"client": 1, "id": "a", "session": own[0]["session"]}
               for r in copies)
    raw.send(b'{"id":"sub","op":"subscribe"}\n')  # still subscribed under that id
    reply = raw.line()
    assert (reply["id"], reply["code"]) == ("sub", "duplicate_id")
    raw.close()


# ---------------------------------------------------------------- access

# A child's first lines: it drops to uid/gid argv[2] first, then makes the
# socket it connects with (to argv[1], timeout argv[3]): the kernel's peer
# credentials are that user's.
AS_NOBODY = """
import json, os, socket, sys
os.setgroups([])
os.setgid(int(sys.argv[2]))
os.setuid(int(sys.argv[2]))
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(float(sys.argv[3]))
"""

CONNECT_AS_NOBODY = AS_NOBODY + """
try:
    sock.connect(sys.argv[1])
    print(sock.makefile("rb").readline().decode().strip())
except OSError as exc:
    print(json.dumps({"exception": type(exc).__name__}))
"""

root_only = pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a child as "
                               "another user (uid 65534) and to chown the socket")


@pytest.fixture
def open_dir():
    """A directory that uid 65534 can traverse, for the socket."""
    path = tempfile.mkdtemp(prefix="homeagent-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def first_line_as_nobody(socket_path: str) -> dict:
    result = subprocess.run([sys.executable, "-c", CONNECT_AS_NOBODY, socket_path,
                             str(NOBODY), str(timeout(10))],
                            capture_output=True, text=True, timeout=timeout(30))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@root_only
def test_a_user_not_allowed_is_refused(start_daemon, open_dir):
    path = os.path.join(open_dir, "agent.sock")
    daemon = start_daemon(daemon={"socket": path, "socket_mode": 0o666,
                                  "allow_users": [4242]})
    reply = first_line_as_nobody(path)
    assert (reply["type"], reply["code"], reply["id"]) == ("error", "not_allowed", None)
    assert f"uid {NOBODY}" in reply["message"]
    with daemon.client() as client:  # root always is allowed
        status = client.call("status")
    assert status["counters"]["refused"] == 1
    assert status["counters"]["connections"] == 1
    assert f"uid={NOBODY} gid={NOBODY}" in daemon.log()
    assert "not in the allow-list; refused" in daemon.log()


@root_only
@pytest.mark.parametrize("allow", [{"allow_users": [NOBODY]},
                                   {"allow_users": [4242], "allow_groups": [NOBODY]}],
                         ids=["by-user", "by-group"])
def test_an_allowed_user_gets_hello(start_daemon, open_dir, allow):
    path = os.path.join(open_dir, "agent.sock")
    start_daemon(daemon={"socket": path, "socket_mode": 0o666, **allow})
    reply = first_line_as_nobody(path)
    assert reply["type"] == "hello" and reply["protocol"] == 1


@root_only
def test_the_socket_mode_and_group(start_daemon, open_dir):
    default = start_daemon(daemon={"socket": os.path.join(open_dir, "default.sock")})
    info = os.stat(default.socket_path)
    assert info.st_mode & 0o777 == 0o660
    assert info.st_gid == os.getgid()
    # The mode is what keeps other users out when no allow-list is set.
    assert first_line_as_nobody(default.socket_path) == {"exception": "PermissionError"}

    group = grp.getgrgid(NOBODY).gr_name
    grouped = start_daemon(daemon={"socket": os.path.join(open_dir, "group.sock"),
                                   "socket_group": group, "socket_mode": 0o640})
    info = os.stat(grouped.socket_path)
    assert info.st_gid == NOBODY
    assert info.st_mode & 0o777 == 0o640
    # Group read but not write: connecting to a Unix socket needs write permission.
    assert first_line_as_nobody(grouped.socket_path) == {"exception": "PermissionError"}


# Subscribes, then prints every line it receives, up to the end.
LISTEN_AS_NOBODY = AS_NOBODY + """
sock.connect(sys.argv[1])
sock.sendall(b'{"id":"watch","op":"subscribe"}\\n')
for line in sock.makefile("rb"):
    sys.stdout.write(line.decode())
    sys.stdout.flush()
"""


@root_only
@pytest.mark.parametrize(("allowed", "tightened"), [
    ({"allow_users": [NOBODY]}, {"allow_users": [4242]}),
    ({"allow_users": [4242], "allow_groups": [NOBODY]}, {"allow_users": [4242], "allow_groups": []}),
], ids=["by-user", "by-group"])
def test_a_reload_that_tightens_access_disconnects_who_is_no_longer_allowed(
        start_daemon, open_dir, allowed, tightened):
    path = os.path.join(open_dir, "agent.sock")
    daemon = start_daemon(daemon={"socket": path, "socket_mode": 0o666, **allowed})
    child = subprocess.Popen([sys.executable, "-c", LISTEN_AS_NOBODY, path, str(NOBODY),
                              str(timeout(20))], stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(child.stdout.readline())["type"] == "hello"
        assert json.loads(child.stdout.readline()) == {"id": "watch", "type": "subscribed"}
        with daemon.client() as root:  # root stays allowed, and connected
            daemon.daemon_settings.update(tightened)
            daemon.write_config()
            daemon.signal(signal.SIGHUP)
            goodbye = json.loads(child.stdout.readline())
            assert child.stdout.read() == ""  # then the end of the connection
            status = root.call("status")
    finally:
        child.kill()
        child.wait()
    assert goodbye == {"id": None, "type": "error", "code": "not_allowed",
                       "message": f"uid {NOBODY} gid {NOBODY} may no longer use this daemon"}
    assert status["counters"]["revoked"] == 1
    assert status["clients"] == 1
    assert f"uid={NOBODY} gid={NOBODY}" in daemon.log()
    assert "no longer in the allow-list; disconnected" in daemon.log()


# ---------------------------------------------------------------- the CLI

def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True,
                          text=True, env=_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                          timeout=timeout(30))


def test_cli_ask_status_history_forget(daemon):
    sock = ["--socket", daemon.socket_path]
    shown = cli("ask", "Why is the heating on?", "--reasoning", "show", "--session", "c1",
                *sock)
    assert (shown.returncode, shown.stdout) == (0, REASONED + "\n")
    assert shown.stderr == f"[reasoning] {REASONING}\n"

    hidden = cli("ask", "Why is the heating on?", "--reasoning", "hide", *sock)
    assert (hidden.returncode, hidden.stdout, hidden.stderr) == (0, REASONED + "\n", "")

    status = cli("status", *sock)
    assert status.returncode == 0, status.stderr
    assert re.search(r"^homeagent \S+ \(protocol 1\), pid \d+, up \d+ s$", status.stdout, re.M)
    assert f"provider mock (default): openai-chat mock-small at {daemon.mock_url}/v1" \
        in status.stdout
    assert "asks 2, answered 2" in status.stdout

    listed = cli("history", *sock)
    assert listed.returncode == 0, listed.stderr
    assert "c1: 2 turns" in listed.stdout.splitlines()

    history = cli("history", "c1", *sock)
    assert (history.returncode, history.stdout) == (
        0, f"you:   Why is the heating on?\nagent: {REASONED}\n")

    forgot = cli("forget", "c1", *sock)
    assert (forgot.returncode, forgot.stdout) == (0, "forgot session c1\n")
    again = cli("forget", "c1", *sock)
    assert (again.returncode, again.stdout) == (0, "no session c1\n")
    assert cli("history", "c1", *sock).stdout == "session c1: no history\n"

    bad = cli("history", "../x", *sock)
    assert bad.returncode == 1 and "bad session id" in bad.stderr


def test_cli_without_a_daemon_exits_3(tmp_path):
    path = str(tmp_path / "nobody-here.sock")
    for args in (["ask", "Hello"], ["history"]):
        result = cli(*args, "--socket", path)
        assert result.returncode == 3, args
        assert result.stdout == ""
        assert path in result.stderr and "not running" in result.stderr
