"""Upstream answers that are no stream, and damaged streams, through the
real daemon: `homeagent mock-llm` on loopback answers HTTP 200 with a JSON
error body, a whole completion, an HTML page, nothing, a gzip or deflate
body, or a stream with one event's JSON cut in the middle; the client, the
done reply, the CLI's output and the stored history are checked."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agent.mock_llm import scripts
from conftest import timeout
from daemon_harness import REPO, Daemon, ask_text, child_env
from helpers import of_type

ANSWER = scripts.ENGLISH
PROTOCOLS = {"chat": "openai-chat", "anthropic": "anthropic", "responses": "openai-responses"}
FAULTS = ("json-error", "not-streamed", "html", "empty", "gzip", "deflate")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, mock):
    providers = {fault: {"headers": {"x-mock-fault": fault}, "retries": 0} for fault in FAULTS}
    for name, protocol in PROTOCOLS.items():
        providers[f"cut-{name}"] = {"protocol": protocol, "retries": 0,
                                    "headers": {"x-mock-fault": "cut-json"}}
    daemon = Daemon(tmp_path_factory.mktemp("hostile"), mock.url, providers=providers)
    daemon.start()
    yield daemon
    assert daemon.stop() == 0, daemon.log()


def _ask(daemon: Daemon, provider: str, **fields) -> tuple[str, list[dict]]:
    """One ask to a hostile provider; then a normal ask on the same
    connection still works."""
    with daemon.client() as client:
        text, replies = ask_text(client, "hello", provider=provider, **fields)
        assert replies[0]["type"] == "started", replies
        after, normal = ask_text(client, "hello")
        assert normal[-1]["type"] == "done" and after == ANSWER, normal
    return text, replies


@pytest.mark.parametrize("stream", [True, False])
def test_a_200_json_error_body_is_a_provider_error_with_its_message(hostile, stream):
    _, replies = _ask(hostile, "json-error", stream=stream)
    assert [r["type"] for r in replies] == ["started", "error"], replies
    error = replies[-1]
    assert error["code"] == "provider_error", error
    assert error["message"] == "json-error: model 'mock-small' not loaded (mock)", error


@pytest.mark.parametrize("fault, why", [
    ("not-streamed", "a whole completion (application/json) instead of an event stream"),
    ("html", "content type 'text/html', not text/event-stream"),
    ("empty", "an empty body, no event stream"),
])
def test_a_200_body_that_is_no_stream_is_named_not_interrupted(hostile, fault, why):
    _, replies = _ask(hostile, fault)
    assert [r["type"] for r in replies] == ["started", "error"], replies
    error = replies[-1]
    assert error["code"] == "not_a_stream", error
    assert error["message"] == f"{fault}: HTTP 200 with {why}" + (
        ": the server ignored \"stream\": true" if fault == "not-streamed" else ""), error


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_gzip_and_deflate_answers_arrive_whole(hostile, encoding):
    text, replies = _ask(hostile, encoding)
    assert text == ANSWER and replies[-1]["type"] == "done", replies
    assert not of_type(replies, "warning") and "dropped_events" not in replies[-1]


@pytest.mark.parametrize("name", PROTOCOLS)
def test_a_cut_json_event_marks_the_answer_damaged_everywhere(hostile, name):
    provider = f"cut-{name}"
    text, replies = _ask(hostile, provider, session=f"damaged-{name}")
    # the client: a warning saying what failed, where, and what it looked like
    [warning] = of_type(replies, "warning")
    assert warning["code"] == "bad_json", warning
    assert warning["detail"].startswith("event data is not valid JSON ("), warning
    assert " at byte " in warning["detail"] and '{"' in warning["detail"], warning
    # done: the answer is not whole, and says so
    done = replies[-1]
    assert done["type"] == "done" and done["dropped_events"] == {"bad_json": 1}, done
    assert done["kept"] is True and text == done["text"] and text != ANSWER, done
    # the history: the turn is marked, also after the CLI reads it
    with hostile.client() as client:
        [history] = client.request("history", session=f"damaged-{name}")
    assert history["turns"][-1]["dropped_events"] == {"bad_json": 1}, history
    shown = _cli(hostile, "history", f"damaged-{name}")
    assert "(part of the answer was lost: 1 event was not valid JSON)" in shown.stdout


def test_the_cli_says_in_plain_words_that_part_of_the_answer_was_lost(hostile):
    shown = _cli(hostile, "ask", "--provider", "cut-chat", "hello")
    assert shown.returncode == 0, shown.stderr
    assert "homeagent: part of the answer was lost: 1 event was not valid JSON\n" in shown.stderr
    assert "[warning bad_json: event data is not valid JSON" in shown.stderr


def _cli(daemon: Daemon, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *argv[:1], "--socket",
                           daemon.socket_path, *argv[1:]], capture_output=True, text=True,
                          env=child_env(), cwd=REPO, timeout=timeout(30))
