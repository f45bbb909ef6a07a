"""The runner (agent/session/runner.py) in process: the replies of one ask,
in order, as typed replies; the upstream is an httpx MockTransport serving
an OpenAI Chat stream, the history a real SessionStore in tmp_path. The
tool loop and the upstream's faults are covered end to end elsewhere
(test_tool_loop.py, test_daemon_api.py); these are the runner's own outcomes.
"""

from __future__ import annotations

import json

import httpx
import pytest

from agent.core import replies
from agent.core.replies import ErrorCode
from agent.providers.requests import Provider
from agent.session.runner import AskLimits, Runner, Upstream
from agent.session.store import SessionStore

PROVIDER = Provider("mock", "openai-chat", "http://mock.invalid/v1", "mock-1")


def chunk(delta: dict, finish: str | None = None, **extra) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({"choices": [choice], **extra}).encode() + b"\n\n"


ANSWER = (chunk({"role": "assistant", "content": "Hel"}), chunk({"content": "lo."}, "stop"),
          chunk({}, usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})
          + b"data: [DONE]\n\n")


class Body(httpx.AsyncByteStream):
    """A response body streamed in these reads, as a network's is (content=
    would be read at once)."""

    def __init__(self, reads: tuple[bytes, ...]) -> None:
        self.reads = reads

    async def __aiter__(self):
        for read in self.reads:
            yield read


def sse(*reads: bytes) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Body(reads))


def runner_for(tmp_path, respond, max_bytes: int = 1 << 20,
               limits: AskLimits = AskLimits()) -> tuple[Runner, httpx.AsyncClient]:
    client = httpx.AsyncClient(transport=httpx.MockTransport(respond))
    store = SessionStore(str(tmp_path / "sessions"), max_turns=100, max_bytes=max_bytes)
    return Runner(store, client, {"mock": Upstream(PROVIDER, retries=0)}, "mock", None,
                  ask_limits=limits), client


async def ask(runner: Runner, prompt: str = "Hi", session: str | None = "kitchen",
              provider: str | None = None) -> list[replies.Reply]:
    got: list[replies.Reply] = []

    async def emit(reply: replies.Reply) -> None:
        got.append(reply)

    await runner.ask(prompt, session, provider, emit)
    return got


@pytest.mark.trio
async def test_an_answer_streams_and_is_kept(tmp_path):
    runner, client = runner_for(tmp_path, lambda request: sse(*ANSWER))
    async with client:
        got = await ask(runner)
        assert got == [
            replies.Started("kitchen", "mock", "mock-1"),
            replies.Delta("Hel"), replies.Delta("lo."),
            replies.Done("kitchen", "stop", "stop",
                         {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
                         "Hello.", 1, 1)]
        assert len(await runner.history("kitchen")) == 2  # the prompt and the answer


@pytest.mark.trio
async def test_failures_are_error_replies(tmp_path):
    def respond(request: httpx.Request) -> httpx.Response:
        if b"cut" in request.content:
            return sse(chunk({"content": "Half"}))
        return httpx.Response(400, json={"error": {"message": "bad model"}})

    runner, client = runner_for(tmp_path, respond)
    async with client:
        assert await ask(runner, provider="other") == [replies.Error(
            ErrorCode.UNKNOWN_PROVIDER, "no provider named 'other'; configured: mock")]
        [bad_session] = await ask(runner, session="../x")
        assert bad_session.code is ErrorCode.BAD_SESSION
        started, refused = await ask(runner, "bad")
        assert isinstance(started, replies.Started)
        assert (refused.code, refused.status) == (ErrorCode.UPSTREAM_HTTP, 400)
        assert "bad model" in refused.message
        *_, cut = await ask(runner, "cut")
        assert (cut.code, cut.text) == (ErrorCode.INTERRUPTED, "Half")
        assert await runner.history("kitchen") == []  # nothing failed is kept


class Endless(httpx.AsyncByteStream):
    """A body that never ends: the same read again and again, until the
    response is closed."""

    def __init__(self, read: bytes) -> None:
        self.read = read
        self.reads = 0
        self.closed = False

    async def __aiter__(self):
        while not self.closed:
            self.reads += 1
            yield self.read

    async def aclose(self) -> None:
        self.closed = True


@pytest.mark.trio
async def test_an_answer_past_max_answer_bytes_is_closed_there_and_named(tmp_path):
    # Reasoning and text both count, in UTF-8 bytes: "é" is 2.
    body = Endless(chunk({"reasoning_content": "hmm "}) + chunk({"content": "é" * 50}))
    runner, client = runner_for(tmp_path, lambda request: httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=body),
        limits=AskLimits(answer_bytes=4096))
    async with client:
        got = await ask(runner)
    assert body.closed and body.reads < 100
    *streamed, error = got
    assert error.code is ErrorCode.ANSWER_TOO_LARGE
    assert error.message == ("mock: the answer passed the limit of 4096 bytes of text; the "
                             "stream was closed there (sessions.max_answer_bytes); not kept "
                             "in the history")
    deltas = "".join(r.text for r in streamed if isinstance(r, replies.Delta))
    reasoning = "".join(r.text for r in streamed if isinstance(r, replies.Reasoning))
    # Nothing past the limit was forwarded; the text says what arrived.
    assert len(deltas.encode()) + len(reasoning.encode()) <= 4096
    assert len(deltas.encode()) + len(reasoning.encode()) > 4096 - 100
    assert error.text.startswith(deltas) and len(error.text.encode()) <= 4096 + 100
    assert await runner.history("kitchen") == []


@pytest.mark.trio
async def test_an_exchange_too_large_to_keep_is_done_with_kept_false_and_history_as_before(
        tmp_path):
    def respond(request: httpx.Request) -> httpx.Response:
        if b"long" in request.content:
            return sse(chunk({"content": "x" * 5000}, "stop") + b"data: [DONE]\n\n")
        return sse(*ANSWER)

    runner, client = runner_for(tmp_path, respond, max_bytes=4096)
    async with client:
        await ask(runner)
        before = await runner.history("kitchen")
        *_, done = await ask(runner, "say it long")
    assert isinstance(done, replies.Done) and done.text == "x" * 5000
    assert done.kept is False and done.error["code"] == "too_large_to_keep"
    assert "over sessions.max_bytes (4096)" in done.error["message"]
    assert await runner.history("kitchen") == before
