"""Attacks the daemon held before issue 11, reproduced for real at the scale
the issue names: a real `homeagent serve` subprocess (tests/daemon_harness.py),
real Unix sockets, the scripted mock model server, and a small hostile HTTP
server on loopback (tests/hostile.py) for what the mock does not do (a 50 MB
event without an end, a 1 byte/s drip, odd chunked bodies, a redirect).
docs/robustness.md's "Held before this issue" section lists each with its
outcome."""

from __future__ import annotations

import json
import random
import signal
import threading
import time

import pytest

from agent.mock_llm.scripts import ENGLISH
from conftest import TEST_SCALE, timeout
from daemon_harness import Daemon, Raw, ask_text
from helpers import of_type
from hostile import ANSWER, Hostile

HOST_ONLY = "minutes under qemu-user emulation"


@pytest.fixture(scope="module")
def hostile():
    server = Hostile()
    yield server
    server.close()


@pytest.fixture
def start_daemon(tmp_path, mock):
    """start_daemon(**Daemon kwargs) -> a started daemon, stopped at the end;
    it must exit 0."""
    daemons = []

    def start(**kwargs) -> Daemon:
        directory = tmp_path / f"d{len(daemons)}"
        directory.mkdir()
        daemon = Daemon(directory, mock.url, **kwargs)
        daemons.append(daemon)
        return daemon.start()

    yield start
    for daemon in daemons:
        if daemon.process is not None:
            assert daemon.stop() == 0, daemon.log()
            assert "Traceback" not in daemon.log()


def upstream(hostile: Hostile, behaviour: str, **settings) -> dict:
    return {behaviour: {"base_url": hostile.base_url(behaviour), "retries": 0, **settings}}


def still_answers(daemon: Daemon) -> None:
    with daemon.client() as client:
        text, replies = ask_text(client, "hello")
    assert replies[-1]["type"] == "done" and text == ENGLISH, replies


# ---------------------------------------------------------------- upstream

def test_an_endless_50_mb_upstream_event_is_dropped_and_memory_stays_bounded(start_daemon,
                                                                             hostile):
    daemon = start_daemon(providers=upstream(hostile, "endless-event", read_timeout=timeout(2)))
    before = daemon.rss_kib()
    with daemon.client(wait=timeout(60)) as client:
        _, replies = ask_text(client, "hello", provider="endless-event")
    assert hostile.sent["endless-event"] >= 50 * 1024 * 1024
    # The core keeps at most its event buffer of the unended event; the
    # silence after it is the read timeout's.
    assert (daemon.rss_kib() - before) < 32 * 1024
    last = replies[-1]
    assert (last["id"], last["type"], last["code"]) == (
        replies[0]["id"], "error", "upstream_unavailable"), replies
    assert last["message"].startswith("endless-event: read timeout: no byte from the server in")
    still_answers(daemon)


def test_a_1_byte_per_second_drip_ends_at_the_overall_deadline(start_daemon, hostile):
    daemon = start_daemon(providers=upstream(hostile, "drip", read_timeout=timeout(5),
                                             total_timeout=3))
    with daemon.client() as client:
        _, replies = ask_text(client, "hello", provider="drip")
    # Each byte comes well within the read timeout: the deadline of the
    # whole answer is what ends it, before the first delta could be read.
    assert 1 <= hostile.sent["drip"] <= timeout(5)
    assert replies[-1]["code"] == "upstream_unavailable", replies
    assert replies[-1]["message"] == "drip: no answer within the overall deadline of 3 s"
    still_answers(daemon)


def test_odd_but_legal_chunked_bodies_arrive_whole(start_daemon, hostile):
    daemon = start_daemon(providers=upstream(hostile, "odd-chunked"))
    with daemon.client() as client:
        text, replies = ask_text(client, "hello", provider="odd-chunked")
    assert replies[-1]["type"] == "done" and text == ANSWER, replies
    assert not of_type(replies, "warning")


def test_a_broken_chunked_body_is_named(start_daemon, hostile):
    daemon = start_daemon(providers=upstream(hostile, "bad-chunked"))
    with daemon.client() as client:
        _, replies = ask_text(client, "hello", provider="bad-chunked")
    assert replies[-1]["code"] == "upstream_unavailable", replies
    assert replies[-1]["message"].startswith("bad-chunked: connection lost: not a chunk-size line")
    still_answers(daemon)


def test_a_redirect_is_not_followed(start_daemon, hostile):
    daemon = start_daemon(providers=upstream(hostile, "redirect"))
    count = hostile.requests.count("odd-chunked")
    with daemon.client() as client:
        _, replies = ask_text(client, "hello", provider="redirect")
    assert replies[-1] == {"id": replies[0]["id"], "type": "error", "code": "upstream_http",
                           "message": "redirect: HTTP 307: Temporary Redirect",
                           "status": 307}, replies
    assert hostile.requests.count("odd-chunked") == count
    still_answers(daemon)


# ---------------------------------------------------------------- clients

MANY = {"max_clients": 256, "max_clients_per_user": 256}
PACED = {"paced": {"headers": {"x-mock-delay-ms": "5"}}}


def replies_until(raw: Raw, count: int, kinds=("done", "error")) -> list[dict]:
    """Lines up to the count-th of the given types."""
    lines: list[dict] = []
    while sum(r["type"] in kinds for r in lines) < count:
        lines.append(raw.line())
    return lines


def test_a_100_mb_line_without_a_newline_is_skipped_in_bounded_memory(start_daemon):
    daemon = start_daemon()
    raw = daemon.raw()
    before = daemon.rss_kib()
    block = b"x" * (1 << 20)
    sender = threading.Thread(target=lambda: [raw.send(block) for _ in range(100)])
    sender.start()
    error = raw.line()  # said at once, while the rest is still coming
    sender.join(timeout(60))
    assert not sender.is_alive()
    assert (error["type"], error["code"], error["id"]) == ("error", "line_too_long", None)
    assert (daemon.rss_kib() - before) < 16 * 1024
    raw.send(b'\n{"id":"after","op":"status"}\n')
    status = raw.line()
    assert status["id"] == "after" and status["counters"]["bad_requests"] == 1, status
    raw.close()


def test_deep_nesting_is_invalid_json_and_the_connection_stays(start_daemon):
    daemon = start_daemon(daemon={"max_line_bytes": 1 << 20})
    raw = daemon.raw()
    deep = b"[" * 400_000 + b"]" * 400_000
    for number, line in enumerate([deep, b'{"id":1,"op":"status","x":' + deep + b"}",
                                   b'{"id":2,"op":' + b"{\"a\":" * 100_000]):
        raw.send(line + b"\n")
        reply = raw.line()
        # The scanner stops at its depth limit, before the bytes that follow.
        assert (reply["code"], reply["id"]) == ("invalid_json", None), reply
        assert reply["message"].startswith("invalid JSON: depth at byte "), reply
        raw.send(b'{"id":"ok%d","op":"status"}\n' % number)
        assert raw.line()["id"] == f"ok{number}"
    raw.close()


def test_slowloris_clients_do_not_delay_anyone_else(start_daemon):
    """50 clients sending their request a byte at a time, 50 ms apart."""
    daemon = start_daemon(daemon=MANY)
    slow = [daemon.raw() for _ in range(50)]
    request = b'{"id":"slow","op":"status"}\n'
    asked = threading.Event()
    answers = []

    def ask():
        with daemon.client() as client:
            answers.append(ask_text(client, "hello")[0])
        asked.set()

    for index, byte in enumerate(request):
        for raw in slow:
            raw.send(bytes([byte]))
        if index == 5:
            threading.Thread(target=ask, daemon=True).start()
        time.sleep(0.05)
    # The ask did not wait for any slow line to end.
    assert asked.wait(timeout(10)) and answers == [ENGLISH]
    for raw in slow:
        assert raw.line()["id"] == "slow"
        raw.close()


@pytest.mark.not_emulated(reason=f"500 asks take {HOST_ONLY}")
def test_500_concurrent_asks_are_all_answered(start_daemon):
    """50 connections, each pipelining 10 asks in one write: 500 in flight."""
    daemon = start_daemon(daemon=MANY, providers=PACED)
    clients = [daemon.raw() for _ in range(50)]
    for number, raw in enumerate(clients):
        raw.send(b"".join(json.dumps({"id": i, "op": "ask", "prompt": "hello",
                                      "provider": "paced",
                                      "session": f"c{number}-{i}"}).encode() + b"\n"
                          for i in range(10)))
    texts = []
    for raw in clients:
        finals = of_type(replies_until(raw, 10), "done")
        texts += [r["text"] for r in finals]
        raw.close()
    assert texts == [ENGLISH] * 500
    with daemon.client() as client:
        status = client.call("status")
        assert status["counters"]["answered"] == 500 and status["active"] == []
        assert len(client.call("sessions")["sessions"]) == 500


def test_a_cancel_storm_cancels_each_ask_once_and_commits_none(start_daemon):
    """200 asks each cancelled at once, and 200 cancels of ids not in
    progress, in one write."""
    daemon = start_daemon(providers={"slow": {"headers": {"x-mock-delay-ms": "200"}}})
    raw = daemon.raw()
    storm = []
    for i in range(200):
        storm.append({"id": f"a{i}", "op": "ask", "prompt": "hello", "provider": "slow",
                      "session": f"storm{i}"})
        storm.append({"id": f"c{i}", "op": "cancel", "target": f"a{i}"})
        storm.append({"id": f"u{i}", "op": "cancel", "target": f"nothing{i}"})
    raw.send(b"".join(json.dumps(r).encode() + b"\n" for r in storm))
    replies = replies_until(raw, 600, kinds=("done", "error", "ok"))
    by_id = {}
    for reply in replies:
        by_id.setdefault(reply["id"], []).append(reply)
    assert all(by_id[f"c{i}"] == [{"id": f"c{i}", "type": "ok"}] for i in range(200))
    assert all(by_id[f"u{i}"][-1]["code"] == "unknown_request" for i in range(200))
    assert all(by_id[f"a{i}"][-1]["code"] == "cancelled" for i in range(200))
    raw.send(b'{"id":"st","op":"status"}\n')
    status = raw.line()
    assert status["active"] == [] and status["counters"]["cancelled"] == 200, status
    assert status["counters"]["answered"] == 0
    raw.close()
    with daemon.client() as client:
        assert all(client.call("history", session=f"storm{i}")["turns"] == []
                   for i in range(0, 200, 20))
    still_answers(daemon)


def test_200_subscribers_each_see_the_whole_answer(start_daemon):
    daemon = start_daemon(daemon=MANY)
    subscribers = [daemon.raw() for _ in range(200)]
    for raw in subscribers:
        raw.send(b'{"id":"s","op":"subscribe"}\n')
        assert raw.line() == {"id": "s", "type": "subscribed"}
    with daemon.client() as client:
        text, _ = ask_text(client, "hello")
    assert text == ENGLISH
    for raw in subscribers:
        seen = replies_until(raw, 1)
        assert "".join(r["text"] for r in of_type(seen, "delta")) == ENGLISH
        assert seen[-1]["type"] == "done"
        raw.close()


# ---------------------------------------------------------------- sessions

KILLS = max(1, round(20 * TEST_SCALE))  # HOMEAGENT_TEST_SCALE=5: the hundred


@pytest.mark.not_emulated(reason=f"{KILLS} daemon starts take {HOST_ONLY}")
def test_kill_9_again_and_again_mid_ask_leaves_every_session_file_intact(tmp_path, mock):
    """Each run: three asks on three sessions in flight (their commits
    among them), then SIGKILL at a random instant. 20 runs hit every phase
    of an ask as surely as the issue's hundred; the scale makes it 100."""
    daemon = Daemon(tmp_path, mock.url, providers=PACED)
    sessions = tmp_path / "state" / "sessions"
    chance = random.Random(11)
    for run in range(KILLS):
        daemon.start()
        raw = daemon.raw()
        raw.send(b"".join(json.dumps({"id": s, "op": "ask", "prompt": f"run {run}",
                                      "provider": "paced", "session": f"k{s}"}).encode()
                          + b"\n" for s in range(3)))
        time.sleep(chance.uniform(0, timeout(0.5)))
        daemon.kill()
        raw.close()
        assert daemon.stop() == -signal.SIGKILL
        # Every session file whole; a temporary file cut off by the kill is
        # what the next start removes.
        for path in sessions.glob("*.json"):
            json.loads(path.read_bytes())
        assert not list(sessions.glob("*.corrupt-*"))
    daemon.start()
    try:
        with daemon.client() as client:
            for s in range(3):
                # one whole exchange after the kills: every session has a
                # file, whether or not a kill came after one of its commits
                text, _ = ask_text(client, f"run {KILLS}", session=f"k{s}", provider="paced")
                assert text == ENGLISH
                turns = client.call("history", session=f"k{s}")["turns"]
                runs = [int(t["text"].split()[1]) for t in turns[0::2]]
                assert [t["role"] for t in turns] == ["user", "assistant"] * len(runs)
                assert all(t["text"] == ENGLISH for t in turns[1::2]), turns
                assert runs == sorted(set(runs)), runs  # each exchange once, in order
                assert runs[-1] == KILLS, runs
        assert "does not read" not in daemon.log()
        assert sorted(p.name for p in sessions.iterdir()) == ["k0.json", "k1.json", "k2.json"]
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_a_symlinked_session_file_is_set_aside_and_its_target_untouched(tmp_path, mock):
    daemon = Daemon(tmp_path, mock.url)
    sessions = tmp_path / "state" / "sessions"
    sessions.mkdir(parents=True)
    target = tmp_path / "secret.json"
    target.write_text('{"not": "a session"}\n')
    (sessions / "link.json").symlink_to(target)
    daemon.start()
    try:
        with daemon.client() as client:
            assert client.call("history", session="link")["turns"] == []
            text, _ = ask_text(client, "hello", session="link")
        assert text == ENGLISH
        assert target.read_text() == '{"not": "a session"}\n'
        aside = [p for p in sessions.iterdir() if p.name.startswith("link.json.corrupt-")]
        assert len(aside) == 1 and aside[0].is_symlink(), list(sessions.iterdir())
        assert "link.json does not read" in daemon.log()
    finally:
        assert daemon.stop() == 0, daemon.log()
