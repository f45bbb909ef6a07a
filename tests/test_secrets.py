"""Secrets never leave the daemon (issue 11, item 5): the masker and the
encoder alone, then a real daemon against a hostile model server on loopback
that sends the key back in every place a stream can hold it, with a client
and a subscriber checked byte for byte and the daemon's log; and `serve
--check` refusing the keys and URLs that would leak or fail later."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import pytest

from agent import masking
from agent.api.wire import encode
from agent.core import edge, replies
from agent.masking import MASK, Masker
from conftest import timeout
from daemon_harness import REPO, Daemon, Raw, child_env, toml_value

# '/', '+' and '=' change when URL-quoted, so every form is tried for real.
SECRET = "sk-hostile/9f8e+7d6c=5b4a"
FORMS = (SECRET, quote(SECRET, safe=""), json.dumps(SECRET)[1:-1])


@pytest.fixture
def masked():
    """SECRET installed as the process's masker for one test."""
    masking.install(Masker([SECRET]))
    yield
    masking.install(Masker())


# ---- the masker and the encoder ----

def test_masker_hides_every_form_of_a_secret():
    masker = Masker([SECRET, "other-secret-1"])
    text = " ".join([*FORMS, quote(SECRET, safe="").lower(), "other-secret-1", "kept"])
    shown = masker.mask(text)
    assert shown.split(" ") == [MASK, MASK, MASK, quote(SECRET, safe="").lower(), MASK,
                                "kept"]


def test_a_secret_inside_a_longer_one_is_masked_whole():
    assert Masker(["abcdefgh", "abcdefgh-longer"]).mask("x abcdefgh-longer y") == "x *** y"


def test_masker_without_secrets_changes_nothing():
    assert Masker(["", ""]).mask("any text") == "any text"


def test_the_edge_masks_every_string_keys_included(masked):
    error = replies.Error(replies.ErrorCode.PROVIDER_ERROR, f"Invalid key {SECRET}")
    line = encode(edge.masked(error), edge.outgoing(SECRET),
                  edge.outgoing({"prompt": f"a\n{quote(SECRET, safe='')}",
                                 SECRET: [json.dumps({"k": SECRET})]}))
    assert not any(form.encode() in line for form in FORMS)
    assert json.loads(line) == {
        "id": MASK, "type": "error", "code": "provider_error", "message": "Invalid key ***",
        "request": {"prompt": "a\n***", MASK: ['{"k": "***"}']}}
    assert json.loads(encode(edge.masked(replies.Delta(f"{SECRET}!")), 1))["text"] == "***!"


@pytest.mark.parametrize("text", [f"{SECRET}!", f"a\n{quote(SECRET, safe='')}\u2028", "plain"])
def test_the_delta_fast_path_encodes_as_every_other_reply(masked, text):
    """A delta to an integer id skips the generic walk; its bytes are the
    walk's (a string id takes the walk)."""
    fast = encode(edge.masked(replies.Delta(text)), 7)
    walked = encode(edge.masked(replies.Delta(text)), "7")
    assert fast == walked.replace(b'"id":"7"', b'"id":7')
    assert not any(form.encode() in fast for form in FORMS)


def test_the_edge_makes_nan_and_infinity_null():
    sessions = replies.Sessions([{"name": "s", "turns": 2, "score": float("nan"),
                                  "more": [float("inf"), -float("inf"), 1.5]}])
    line = encode(edge.masked(sessions), 7)
    assert b"NaN" not in line and b"Infinity" not in line
    assert json.loads(line)["sessions"] == [{"name": "s", "turns": 2, "score": None,
                                             "more": [None, None, 1.5]}]


# ---- a hostile model server on loopback ----

def _sse(*events: dict, field: str | None = None) -> bytes:
    lines = [f"{field}: 1\n\n".encode()] if field else []
    lines += [f"data: {json.dumps(e)}\n\n".encode() for e in events]
    return b"".join(lines)


def _delta(text: str) -> dict:
    return {"id": "c", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


class _Hostile(BaseHTTPRequestHandler):
    """An OpenAI Chat server that sends the caller's key back: in an unknown
    SSE field named after it, in the answer's text (which the history keeps)
    and, when the prompt says "fail", in an error event after HTTP 200."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        key = self.headers["authorization"].removeprefix("Bearer ")
        if body["messages"][-1]["content"] == "fail":
            stream = _sse(_delta("so far "), {"error": {
                "message": f"Invalid key {key} (quoted: {quote(key, safe='')})",
                "type": "invalid_request_error"}})
        else:
            finish = {**_delta(""), "choices": [{"index": 0, "delta": {},
                                                  "finish_reason": "stop"}]}
            stream = _sse(_delta(f"your key is {key}; "), _delta(json.dumps({"key": key})),
                          finish, field=key)
            stream += b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        self.wfile.write(stream)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def hostile():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _request(raw: Raw, **fields) -> None:
    raw.send(json.dumps(fields).encode() + b"\n")


def _until(raw: Raw, kind: str) -> list[dict]:
    """The lines up to and including the first of type kind."""
    lines = [raw.line()]
    while lines[-1]["type"] != kind:
        lines.append(raw.line())
    return lines


def test_a_key_sent_back_by_the_model_reaches_no_client_subscriber_device_or_log(
        tmp_path, hostile):
    heard = tmp_path / "heard"  # what a program device is given: each answer, each error
    argv = ["sh", "-c", 'printf %s@ "$1" >> "$2"', "sh", "{text}", str(heard)]
    speaker = ["[devices.speaker]", 'type = "command"', 'per = "answer"',
               f"argv = {toml_value(argv)}"]
    daemon = Daemon(tmp_path, hostile, daemon={"log_level": "debug"},
                    # the error after "so far " ends the ask: not resumed
                    providers={"mock": {"api_key_env": "HOSTILE_KEY", "resume": "off"}},
                    env={"HOSTILE_KEY": SECRET, "HOMEAGENT_LOG_PREFIX": "1"},
                    extra="\n".join(speaker)).start()
    try:
        subscriber = Raw(daemon.socket_path)
        _until(subscriber, "hello")
        _request(subscriber, id="sub", op="subscribe")
        _until(subscriber, "subscribed")
        client = Raw(daemon.socket_path)
        _until(client, "hello")
        _request(client, id=1, op="ask", prompt="echo", session="kept")
        answered = _until(client, "done")
        _request(client, id=2, op="ask", prompt="fail", session="kept")
        failed = _until(client, "error")
        _request(client, id=3, op="history", session="kept")
        history = _until(client, "history")
        _request(client, id=4, op="status")
        _until(client, "status")
        _until(subscriber, "error")  # the failed ask, shown to the subscriber too
        deadline = time.monotonic() + timeout(10)
        while not (heard.exists() and heard.read_text().count("@") == 2):
            assert time.monotonic() < deadline, "the speaker did not run twice"
            time.sleep(0.05)
    finally:
        assert daemon.stop() == 0
    assert [r["code"] for r in answered if r["type"] == "warning"] == ["unknown_sse_field"]
    assert [r["detail"] for r in answered if r["type"] == "warning"] == [
        f"an SSE field the specification does not know, '{MASK}', was ignored (1 bytes): 1"]
    assert answered[-1]["text"] == 'your key is ***; {"key": "***"}'
    assert failed[-1]["code"] == "provider_error"
    assert failed[-1]["message"] == "mock: Invalid key *** (quoted: ***)"
    assert MASK in json.dumps(history[-1]["turns"])
    assert heard.read_text() == ('your key is ***; {"key": "***"}@'
                                 'mock: Invalid key *** (quoted: ***)@')
    for received in (client.received, subscriber.received, daemon.log().encode(),
                     heard.read_bytes()):
        assert not any(form.encode() in received for form in FORMS)
    assert "client 1" in daemon.log()  # debug logging did write


# ---- serve --check refuses what would leak or fail later ----

def _check(tmp_path, provider: str, env: dict | None = None) -> subprocess.CompletedProcess:
    config = tmp_path / "config.toml"
    config.write_text(f"""\
[daemon]
socket = "{tmp_path}/agent.sock"
state_directory = "{tmp_path}/state"

[providers.p]
protocol = "openai-chat"
model = "m"
{provider}
""")
    return subprocess.run([sys.executable, "-m", "agent.cli", "serve", "--check", "--config",
                           str(config)], env=child_env(env), cwd=REPO, capture_output=True,
                          text=True, timeout=timeout(30))


@pytest.mark.parametrize("key", [SECRET[:10] + "\n" + SECRET[10:], SECRET[:10] + " " + SECRET[10:],
                                 SECRET + "\t" + SECRET])
def test_serve_check_refuses_a_key_with_whitespace_inside(tmp_path, key):
    (tmp_path / "p.key").write_text(key + "\n")
    os.chmod(tmp_path / "p.key", 0o600)
    from_file = _check(tmp_path, 'base_url = "http://127.0.0.1:9/v1"\napi_key_file = "p.key"')
    from_env = _check(tmp_path, 'base_url = "http://127.0.0.1:9/v1"\napi_key_env = "P_KEY"',
                      {"P_KEY": key})
    for checked, source in ((from_file, f"key file {tmp_path}/p.key"),
                            (from_env, "environment variable P_KEY")):
        assert checked.returncode == 2, checked
        assert (f"providers.p.api_key_{'file' if 'file' in source else 'env'}: {source} holds "
                "whitespace, a control character or a non-ASCII character in the key"
                in checked.stderr)
        assert SECRET[:10] not in checked.stderr + checked.stdout


@pytest.mark.parametrize("userinfo", ["user:pw-of-user", "user", ":pw-of-user"])
def test_serve_check_refuses_userinfo_in_base_url(tmp_path, userinfo):
    # httpx would send it as Basic auth in place of the key, and show it with the URL
    checked = _check(tmp_path, f'base_url = "http://{userinfo}@127.0.0.1:9/v1"')
    assert checked.returncode == 2
    assert "providers.p.base_url: base_url must not hold a user or password" in checked.stderr
    assert "pw-of-user" not in checked.stderr


def test_serve_check_warns_of_a_key_file_others_can_read(tmp_path):
    (tmp_path / "p.key").write_text(SECRET + "\n")
    os.chmod(tmp_path / "p.key", 0o644)
    checked = _check(tmp_path, 'base_url = "http://127.0.0.1:9/v1"\napi_key_file = "p.key"')
    assert checked.returncode == 0, checked
    assert checked.stderr == (f"homeagent: warning: {tmp_path}/config.toml:9: "
                              f"providers.p.api_key_file: key file {tmp_path}/p.key is readable "
                              "by group or others (mode 0o644); chmod 600 it\n")


# ---- replies are always JSON ----

def _strict(line: bytes):
    def refuse(constant: str):
        raise AssertionError(f"{constant} in a reply: not JSON")
    return json.loads(line, parse_constant=refuse)


def test_a_session_file_holding_nan_is_set_aside_and_replies_stay_json(tmp_path):
    sessions = tmp_path / "state" / "sessions"
    sessions.mkdir(parents=True)
    for name, updated in (("nan", "NaN"), ("inf", "Infinity"), ("minus", "-Infinity")):
        (sessions / f"{name}.json").write_text(
            f'{{"version": 1, "id": "{name}", "updated": {updated}, "turns": [\n'
            '{"role": "user", "text": "hello"}\n]}\n')
    daemon = Daemon(tmp_path, "http://127.0.0.1:9").start()
    try:
        client = Raw(daemon.socket_path)
        _until(client, "hello")
        _request(client, id=1, op="sessions")
        _until(client, "sessions")
        _request(client, id=2, op="history", session="nan")
        _until(client, "history")
    finally:
        assert daemon.stop() == 0
    # The strict scanner refuses NaN and Infinity: each file is set aside as
    # corrupt at start (tests/test_storage_failures.py), and no reply can
    # carry them.
    lines = [_strict(line) for line in client.received.splitlines()]
    assert lines[1]["sessions"] == []
    assert lines[2]["turns"] == []
    assert sorted(p.name.split(".json")[0] for p in sessions.iterdir()) == ["inf", "minus", "nan"]
    assert all(".json.corrupt-" in p.name for p in sessions.iterdir())
