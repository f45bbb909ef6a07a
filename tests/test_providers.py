"""The provider layer against the mock server on real loopback sockets: the
exact request bodies of the three wire formats, the streamed answers, and
the retry, timeout and error rules of stream_answer."""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from urllib.parse import quote

import httpx
import pytest
import trio

from agent.mock_llm import scripts
from agent.mock_llm.app import MockApp
from agent.mock_llm.server import serve
from agent.providers import (
    AssistantTurn,
    Backoff,
    Conversation,
    Provider,
    ProviderHTTPError,
    Tool,
    ToolResult,
    UpstreamUnavailable,
    UserTurn,
    build_request,
    stream_answer,
)
from agent.providers.client import INFLATE_PIECE, Inflater
from agent.providers.requests import encode_body
from agent.stream import records as rec
from agent.stream.decoders import events as ev
from agent.stream.message import Message, TextPart, ThinkingPart, ToolCall
from agent.service.daemon import http_client  # the daemon's: our transport
from conftest import timeout

PROTOCOLS = ["openai-chat", "anthropic", "openai-responses"]
by_protocol = pytest.mark.parametrize("protocol", PROTOCOLS)
FAST = Backoff(base=0.01, cap=0.05)

SYSTEM = "You are the house. Answer briefly."
SWITCH = "Please switch relay 1 on"
# Odd spacing and key order: the exact string must go back, not a re-encoding.
ARGS = '{"on":true,  "channel":1}'
SIGNATURE = "EqQBCgIYAhIM+sig/with==padding"
TOOL_RESULT = '{"channel": 1, "on": true, "ok": true}'
SCHEMA = {"type": "object", "properties": {"channel": {"type": "integer"},
                                           "on": {"type": "boolean"}},
          "required": ["channel", "on"]}
TOOLS = [Tool("set_relay", "Switch a relay channel.", SCHEMA)]


def tool_conversation() -> Conversation:
    assistant = Message(parts=[
        ThinkingPart("The user wants relay 1 on.", signature=SIGNATURE),
        TextPart("Switching."),
        ToolCall("call_7", "set_relay", ARGS, parsed={"on": True, "channel": 1},
                 complete=True, item_id="fc_7")])
    return Conversation(SYSTEM, [UserTurn(SWITCH), AssistantTurn(assistant),
                                 ToolResult("call_7", "set_relay", TOOL_RESULT)])


EXPECTED_BODIES = {
    "openai-chat": {
        "model": "mock-1", "stream": True, "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": SWITCH},
            {"role": "assistant", "content": "Switching.",
             "reasoning_content": "The user wants relay 1 on.", "tool_calls": [
                {"id": "call_7", "type": "function",
                 "function": {"name": "set_relay", "arguments": ARGS}}]},
            {"role": "tool", "tool_call_id": "call_7", "content": TOOL_RESULT}],
        "tools": [{"type": "function", "function": {
            "name": "set_relay", "description": "Switch a relay channel.", "parameters": SCHEMA}}],
    },
    # cache = "auto": breakpoints on the tools, the system prompt, the end of
    # the previous request (the prompt) and the last message
    "anthropic": {
        "model": "mock-1", "stream": True, "max_tokens": 4096,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": SWITCH,
                                          "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "The user wants relay 1 on.",
                 "signature": SIGNATURE},
                {"type": "text", "text": "Switching."},
                {"type": "tool_use", "id": "call_7", "name": "set_relay",
                 "input": {"on": True, "channel": 1}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_7", "content": TOOL_RESULT,
                 "cache_control": {"type": "ephemeral"}}]}],
        "tools": [{"name": "set_relay", "description": "Switch a relay channel.",
                   "input_schema": SCHEMA, "cache_control": {"type": "ephemeral"}}],
    },
    "openai-responses": {
        "model": "mock-1", "stream": True, "store": False,
        "include": ["reasoning.encrypted_content"], "instructions": SYSTEM,
        "input": [
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": SWITCH}]},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Switching."}]},
            {"type": "function_call", "call_id": "call_7", "name": "set_relay",
             "arguments": ARGS},
            {"type": "function_call_output", "call_id": "call_7", "output": TOOL_RESULT}],
        "tools": [{"type": "function", "name": "set_relay",
                   "description": "Switch a relay channel.", "parameters": SCHEMA,
                   "strict": False}],
    },
}


@dataclass
class Mock:
    base: str

    def provider(self, protocol: str, **kw) -> Provider:
        return Provider(kw.pop("name", "mock"), protocol, f"{self.base}/v1", "mock-1", **kw)

    async def requests(self) -> list[dict]:
        async with http_client() as client:
            return (await client.get(f"{self.base}/_mock/requests")).json()


async def start(nursery, app: MockApp | None = None) -> Mock:
    port = await nursery.start(lambda task_status: serve(app=app, task_status=task_status))
    return Mock(f"http://127.0.0.1:{port}")


@pytest.fixture
async def mock(nursery):
    return await start(nursery)


class FirstRequestFaults(MockApp):
    """Applies x-mock-fault to the first model request only: the mock's 429
    is permanent, and a retry must be able to succeed."""

    def handle(self, connection, method, target, headers, body):
        if target.startswith("/v1/"):
            if any(r["path"].startswith("/v1/") for r in self.requests):
                headers = [(n, v) for n, v in headers if n != "x-mock-fault"]
        return super().handle(connection, method, target, headers, body)


class Rewritten(MockApp):
    """The mock, with change(reply) applied to each model answer before it is sent."""

    def __init__(self, change) -> None:
        super().__init__()
        self.change = change

    def handle(self, connection, method, target, headers, body):
        reply = super().handle(connection, method, target, headers, body)
        if target.startswith("/v1/"):
            self.change(reply)
        return reply


class Collect:
    def __init__(self) -> None:
        self.events: list = []

    async def __call__(self, event) -> None:
        self.events.append(event)

    def of(self, kind) -> list:
        return [e for e in self.events if isinstance(e, kind)]


# ---- requests, exactly as the server received them ----

@pytest.mark.trio
@by_protocol
async def test_request_body_and_answer(mock, protocol):
    provider = mock.provider(protocol, api_key="sk-test-123")
    collect = Collect()
    async with http_client() as client:
        answer = await stream_answer(client, provider, tool_conversation(), TOOLS,
                                     on_event=collect)
    [recorded] = await mock.requests()
    assert recorded["body"] == EXPECTED_BODIES[protocol]
    headers = recorded["headers"]
    assert headers["accept-encoding"] == "identity"
    if protocol == "anthropic":
        assert headers["x-api-key"] == "***" and headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in headers
    else:
        assert headers["authorization"] == "***" and "x-api-key" not in headers
    assert answer.ok and answer.attempts == 1 and answer.interrupted is None
    assert answer.message.text == scripts.confirmation(TOOL_RESULT)
    assert "".join(e.text for e in collect.of(rec.TextDelta)) == answer.message.text
    assert [e.reason.value for e in collect.of(ev.MessageFinished)] == ["stop"]


def test_build_request_without_key_or_system():
    provider = Provider("local", "openai-chat", "http://127.0.0.1:11434/v1/", "llama3")
    url, headers, body = build_request(provider, Conversation(turns=[UserTurn("hi")]))
    assert url == "http://127.0.0.1:11434/v1/chat/completions"
    assert "authorization" not in headers
    assert body["messages"] == [{"role": "user", "content": "hi"}] and "tools" not in body


def test_anthropic_merges_results_and_drops_unsigned_thinking():
    provider = Provider("a", "anthropic", "https://api.anthropic.com/v1", "claude", max_tokens=100,
                        cache="off")  # no breakpoints: the blocks alone
    message = Message(parts=[ThinkingPart("unsigned"), ToolCall("t1", "a", "{bad", complete=True),
                             ToolCall("t2", "b", "{}", parsed={}, complete=True)])
    conversation = Conversation(turns=[
        UserTurn("go"), AssistantTurn(message), ToolResult("t1", "a", "failed", is_error=True),
        ToolResult("t2", "b", "ok"), UserTurn("and now?")])
    _, _, body = build_request(provider, conversation)
    assert body["max_tokens"] == 100 and "system" not in body
    assistant, results = body["messages"][1:]
    assert assistant["content"] == [{"type": "tool_use", "id": "t1", "name": "a", "input": {}},
                                    {"type": "tool_use", "id": "t2", "name": "b", "input": {}}]
    assert results == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "failed", "is_error": True},
        {"type": "tool_result", "tool_use_id": "t2", "content": "ok"},
        {"type": "text", "text": "and now?"}]}


def test_provider_validation():
    with pytest.raises(ValueError, match="protocol"):
        Provider("x", "gemini", "https://x", "m")
    with pytest.raises(ValueError, match="read_timeout"):
        Provider("x", "anthropic", "https://x", "m", read_timeout=0)


# ---- the tool-call round trip ----

@pytest.mark.trio
@by_protocol
async def test_tool_call_round_trip(mock, protocol):
    provider = mock.provider(protocol)
    conversation = Conversation(SYSTEM, [UserTurn(SWITCH)])
    collect = Collect()
    async with http_client() as client:
        first = await stream_answer(client, provider, conversation, TOOLS, on_event=collect)
        [call] = first.message.tool_calls
        assert (call.name, call.parsed) == ("set_relay", {"channel": 1, "on": True})
        assert first.message.finish_reason.value == "tool_calls"
        assert [e.tool_call for e in collect.of(ev.ToolCallDone)] == [call]
        conversation.turns += [AssistantTurn(first.message),
                               ToolResult(call.id, call.name, TOOL_RESULT)]
        second = await stream_answer(client, provider, conversation, TOOLS)
    assert second.ok and second.message.text == scripts.confirmation(TOOL_RESULT)
    body = (await mock.requests())[1]["body"]
    if protocol == "openai-chat":
        sent = body["messages"][2]["tool_calls"][0]
        assert (sent["id"], sent["function"]["arguments"]) == (call.id, call.arguments)
        assert body["messages"][3] == {"role": "tool", "tool_call_id": call.id,
                                       "content": TOOL_RESULT}
    elif protocol == "anthropic":
        sent = body["messages"][1]["content"][-1]
        assert sent == {"type": "tool_use", "id": call.id, "name": "set_relay",
                        "input": {"channel": 1, "on": True}}
        assert body["messages"][2]["content"][0]["tool_use_id"] == call.id
    else:
        sent = body["input"][-2]
        assert (sent["call_id"], sent["arguments"]) == (call.id, call.arguments)
        assert body["input"][-1]["call_id"] == call.id


# ---- retries ----

@pytest.mark.trio
async def test_429_waits_for_retry_after_then_succeeds(nursery):
    mock = await start(nursery, FirstRequestFaults())
    provider = mock.provider("anthropic", headers={"x-mock-fault": "429"})
    async with http_client() as client:
        began = trio.current_time()
        answer = await stream_answer(client, provider, Conversation(turns=[UserTurn("Hi")]),
                                     backoff=FAST)
        waited = trio.current_time() - began
    assert answer.ok and answer.attempts == 2 and answer.message.text == scripts.ENGLISH
    assert len(await mock.requests()) == 2
    assert waited >= 1.0  # the mock's Retry-After: 1


@pytest.mark.trio
async def test_retry_after_beyond_the_limit_is_not_waited_for(mock):
    provider = mock.provider("openai-chat", headers={"x-mock-fault": "429"})
    async with http_client() as client:
        with pytest.raises(ProviderHTTPError) as caught:
            await stream_answer(client, provider, Conversation(turns=[UserTurn("Hi")]),
                                backoff=Backoff(max_retry_after=0.5))
    assert caught.value.status == 429 and caught.value.retry_after == 1.0
    assert caught.value.message == "rate limit reached (mock)"
    assert len(await mock.requests()) == 1


@pytest.mark.trio
async def test_deadline_during_a_retry_wait_keeps_the_last_error(mock):
    provider = mock.provider("openai-responses", total_timeout=0.3,
                             headers={"x-mock-fault": "429"})
    async with http_client() as client:
        with pytest.raises(UpstreamUnavailable, match="overall deadline") as caught:
            await stream_answer(client, provider, Conversation(turns=[UserTurn("Hi")]))
    assert isinstance(caught.value.__cause__, ProviderHTTPError)
    assert caught.value.__cause__.status == 429


@pytest.mark.trio
@by_protocol
async def test_500_once_then_success(mock, protocol):
    provider = mock.provider(protocol, headers={"x-mock-fault": "500-once",
                                                "x-mock-fault-key": protocol})
    async with http_client() as client:
        answer = await stream_answer(client, provider, Conversation(turns=[UserTurn("Hi")]),
                                     backoff=FAST)
    assert answer.ok and answer.attempts == 2 and answer.message.text == scripts.ENGLISH


@pytest.mark.trio
async def test_5xx_with_no_retries_left_raises(mock):
    provider = mock.provider("openai-responses", headers={"x-mock-fault": "500-once",
                                                          "x-mock-fault-key": "never"})
    async with http_client() as client:
        with pytest.raises(ProviderHTTPError) as caught:
            await stream_answer(client, provider, Conversation(turns=[UserTurn("Hi")]),
                                retries=0)
    assert caught.value.status == 500 and caught.value.message == "internal server error (mock)"


@pytest.mark.trio
async def test_connect_error_is_retried_then_raised():
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sent = []

    async def count(request):
        sent.append(request)

    provider = Provider("gone", "openai-chat", f"http://127.0.0.1:{port}/v1", "m",
                        api_key="sk-never-shown")
    async with httpx.AsyncClient(event_hooks={"request": [count]}) as client:
        with pytest.raises(UpstreamUnavailable) as caught:
            await stream_answer(client, provider, Conversation(turns=[UserTurn("Hi")]),
                                retries=2, backoff=FAST)
    assert len(sent) == 3
    assert str(caught.value).startswith("gone: cannot connect")
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


# ---- a body that stops ----

@pytest.mark.trio
@by_protocol
async def test_drop_after_events_is_not_retried(mock, protocol):
    provider = mock.provider(protocol, headers={"x-mock-fault": "drop"})
    collect = Collect()
    async with http_client() as client:
        answer = await stream_answer(client, provider, Conversation(turns=[UserTurn("Hi")]),
                                     on_event=collect, backoff=FAST)
    assert answer.attempts == 1 and len(await mock.requests()) == 1
    assert answer.interrupted.startswith("connection lost")
    assert answer.incomplete is not None and collect.of(ev.MessageIncomplete) == [answer.incomplete]
    assert answer.message.text and scripts.ENGLISH.startswith(answer.message.text)


@pytest.mark.trio
@by_protocol
async def test_stall_hits_the_read_timeout(mock, protocol):
    provider = mock.provider(protocol, read_timeout=0.3, headers={"x-mock-fault": "stall"})
    async with http_client() as client:
        with trio.fail_after(timeout(10)):
            answer = await stream_answer(client, provider, Conversation(turns=[UserTurn("Hi")]))
    assert answer.interrupted.startswith("read timeout") and answer.incomplete is not None
    assert answer.attempts == 1
    assert answer.message.text and scripts.ENGLISH.startswith(answer.message.text)


@pytest.mark.trio
async def test_overall_deadline_mid_stream(mock):
    provider = mock.provider("openai-chat", total_timeout=0.3,
                             headers={"x-mock-delay-ms": "50"})
    async with http_client() as client:
        with trio.fail_after(timeout(10)):
            answer = await stream_answer(client, provider, Conversation(turns=[UserTurn("Hi")]))
    assert answer.interrupted == "the overall deadline of 0.3 s passed"
    assert answer.incomplete is not None
    assert answer.message.text and scripts.ENGLISH.startswith(answer.message.text)


@pytest.mark.trio
@by_protocol
async def test_error_event_in_a_200_stream(mock, protocol):
    provider = mock.provider(protocol, headers={"x-mock-fault": "error-event"})
    collect = Collect()
    async with http_client() as client:
        answer = await stream_answer(client, provider, Conversation(turns=[UserTurn("Hi")]),
                                     on_event=collect)
    [error] = collect.of(rec.ProviderError)
    assert answer.provider_error is error and "overloaded" in error.message
    assert not answer.ok and answer.attempts == 1


@pytest.mark.trio
async def test_cancel_closes_the_response(mock):
    provider = mock.provider("anthropic", headers={"x-mock-delay-ms": "20"})
    async with http_client() as client:
        with trio.move_on_after(timeout(10)) as scope:
            async def cancel_on_first_text(event):
                if isinstance(event, rec.TextDelta):
                    scope.cancel()
            await stream_answer(client, provider, Conversation(turns=[UserTurn("Hi")]),
                                on_event=cancel_on_first_text)
        assert scope.cancelled_caught
        answer = await stream_answer(client, mock.provider("anthropic"),
                                     Conversation(turns=[UserTurn("Hi")]))
    assert answer.ok
    first, second = (r["connection"] for r in await mock.requests())
    assert first != second  # the cancelled stream's connection was closed, not reused


# ---- errors and keys ----

@pytest.mark.trio
@by_protocol
async def test_401_carries_the_provider_message_and_never_the_key(nursery, protocol):
    mock = await start(nursery, MockApp(require_key="k-right"))
    key = "sk-wrong-SECRET-4242"
    provider = mock.provider(protocol, api_key=key)
    async with http_client() as client:
        with pytest.raises(ProviderHTTPError) as caught:
            await stream_answer(client, provider, Conversation(turns=[UserTurn("Hi")]),
                                backoff=FAST)
        good = await stream_answer(client, mock.provider(protocol, api_key="k-right"),
                                   Conversation(turns=[UserTurn("Hi")]))
    error = caught.value
    assert (error.status, error.message) == (401, "invalid API key (mock)")
    assert len(await mock.requests()) == 2  # not retried
    for shown in (str(error), repr(error), str(provider), repr(provider), repr(error.args)):
        assert key not in shown
    assert "api_key='***'" in repr(provider)
    proxied = mock.provider(protocol, headers={"Proxy-Authorization": "Basic c2VjcmV0"})
    assert "c2VjcmV0" not in repr(proxied) and "'Proxy-Authorization': '***'" in repr(proxied)
    assert good.ok


@pytest.mark.trio
async def test_error_message_with_the_key_in_it_is_redacted(nursery):
    key, token = "sk-echoed/9999", "hdr-token-77"
    echoed = f"{key} (as sent: {quote(key, safe='')}), header {token}"

    def echo(reply) -> None:
        reply.parts = [json.dumps({"error": f"Incorrect API key provided: {echoed}"})
                       .encode()]
        reply.status, reply.headers = 401, [("content-length", str(len(reply.parts[0])))]

    mock = await start(nursery, Rewritten(echo))
    async with http_client() as client:
        with pytest.raises(ProviderHTTPError) as caught:
            await stream_answer(client, mock.provider("openai-chat", api_key=key,
                                                      headers={"api-key": token}),
                                Conversation(turns=[UserTurn("Hi")]))
    assert caught.value.message == "Incorrect API key provided: *** (as sent: ***), header ***"


# ---- keep-alive ----

@pytest.mark.trio
async def test_two_answers_share_one_connection(mock):
    provider = mock.provider("openai-chat")
    async with http_client() as client:
        for prompt in ("Hi", "Why is the heating on?"):
            answer = await stream_answer(client, provider, Conversation(turns=[UserTurn(prompt)]))
            assert answer.ok
    first, second = (r["connection"] for r in await mock.requests())
    assert first == second


@pytest.mark.parametrize(("value", "expected"), [
    (None, None), ("", None), ("2", 2.0), ("0.5", 0.5), ("-1", None), ("nan", None),
    ("inf", None), ("soon", None),
    # An HTTP date, 90 s after "now" (2026-11-29 12:00:00 GMT), and one in the past.
    ("Sun, 29 Nov 2026 12:01:30 GMT", 90.0),
    ("Sun, 29 Nov 2026 11:00:00 GMT", 0.0),
])
def test_retry_after_in_seconds_or_as_an_http_date(value, expected):
    from agent.providers.client import retry_after

    now = 1795953600.0  # 2026-11-29 12:00:00 GMT
    assert retry_after(value, now) == expected


def test_a_providers_secrets_are_its_key_and_its_credential_headers():
    provider = Provider("p", "openai-chat", "http://127.0.0.1:9/v1", "m", api_key="sk-key-1234",
                        headers={"Proxy-Authorization": "Basic dXNlcjpwYXNz",
                                 "x-api-key": "plain-token-1", "x-trace": "on"})
    assert provider.secrets() == ("sk-key-1234", "Basic dXNlcjpwYXNz", "dXNlcjpwYXNz",
                                  "plain-token-1")


# ---- 2xx answers that are no event stream, compressed bodies ----

async def _answer_with(nursery, protocol: str, fault: str, app: MockApp | None = None,
                       **provider):
    mock = await start(nursery, app)
    collect = Collect()
    async with http_client() as client:
        answer = await stream_answer(
            client, mock.provider(protocol, headers={"x-mock-fault": fault}, **provider),
            Conversation(turns=[UserTurn("Hi")]), on_event=collect, retries=0)
    return answer, collect


@pytest.mark.trio
@by_protocol
async def test_a_200_json_error_body_is_the_providers_error(nursery, protocol):
    answer, collect = await _answer_with(nursery, protocol, "json-error")
    assert answer.provider_error.message == "model 'mock-small' not loaded (mock)"
    assert answer.provider_error.type in ("not_found_error", "invalid_request_error")  # per format
    assert answer.refused is None and not answer.ok and collect.events == []


@pytest.mark.trio
@by_protocol
@pytest.mark.parametrize("fault, why", [
    ("not-streamed", "HTTP 200 with a whole completion (application/json) instead of an event "
                     "stream: the server ignored \"stream\": true"),
    ("html", "HTTP 200 with content type 'text/html', not text/event-stream"),
    ("empty", "HTTP 200 with an empty body, no event stream"),
])
async def test_a_200_body_that_is_no_stream_is_refused_by_name(nursery, protocol, fault, why):
    answer, collect = await _answer_with(nursery, protocol, fault)
    assert answer.refused == why
    assert answer.provider_error is None and not answer.ok and collect.events == []


@pytest.mark.trio
@by_protocol
@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_gzip_and_deflate_bodies_are_decoded_before_the_core(nursery, protocol, encoding):
    answer, collect = await _answer_with(nursery, protocol, encoding)
    assert answer.ok and answer.message.text == scripts.ENGLISH, answer
    assert not collect.of(rec.DecodeWarning) and not collect.of(rec.UnknownField)
    assert "".join(e.text for e in collect.of(rec.TextDelta)) == scripts.ENGLISH


def encoded(encoding: str, body: bytes | None = None) -> "Rewritten":
    """Answers with this Content-Encoding header over the stream as it is
    (br, unknown to the daemon), or over body."""
    def change(reply) -> None:
        reply.headers.append(("content-encoding", encoding))
        if body is not None:
            reply.parts = [body]
    return Rewritten(change)


@pytest.mark.trio
async def test_an_unknown_content_encoding_is_refused_by_name(nursery):
    answer, collect = await _answer_with(nursery, "openai-chat", "", encoded("br"))
    assert answer.refused == "HTTP 200 with content encoding 'br': only gzip and deflate are decoded"
    assert collect.events == []


@pytest.mark.trio
async def test_a_gzip_body_that_does_not_decode_is_refused(nursery):
    answer, _ = await _answer_with(nursery, "openai-chat", "",
                                   encoded("gzip", b"\x1f\x8b\x08\x00garbage, not deflate"))
    assert answer.refused.startswith("the gzip body does not decode: "), answer.refused


def test_inflater_output_is_bounded_whatever_the_ratio():
    bomb = zlib.compress(b"\n" * (16 * INFLATE_PIECE))  # about 1 KiB of zlib, 1 MiB inflated
    pieces = list(Inflater("deflate").feed(bomb))
    assert max(map(len, pieces)) == INFLATE_PIECE and b"".join(pieces) == b"\n" * (16 * INFLATE_PIECE)
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)  # raw deflate, as some servers send it
    assert b"".join(Inflater("deflate").feed(raw.compress(b"data: x\n\n") + raw.flush())) \
        == b"data: x\n\n"


@pytest.mark.trio
async def test_the_key_echoed_in_a_bad_event_is_masked_in_the_warning(nursery):
    key = "sk-echoed-4242"

    def echo(reply) -> None:
        reply.parts.insert(1, f'data: {{"echo": "Bearer {key}", cut\n\n'.encode())

    mock = await start(nursery, Rewritten(echo))
    collect = Collect()
    async with http_client() as client:
        answer = await stream_answer(client, mock.provider("openai-chat", api_key=key),
                                     Conversation(turns=[UserTurn("Hi")]), on_event=collect)
    [warning] = collect.of(rec.DecodeWarning)
    assert key.encode() not in warning.raw and b"Bearer ***" in warning.raw
    assert answer.message.dropped_events == {"bad_json": 1}


# ---- reasoning sent back (docs/reasoning-replay.md) ----

# A Responses reasoning item as a provider may write it: spaces, escapes.
REASONING_ITEM = ('{"id": "rs_9", "type": "reasoning", "summary": [{"type": "summary_text", '
                  '"text": "relay \\u2192 on"}], "encrypted_content": "gAAAAB+/=="}')


def reasoned_conversation(thinking: ThinkingPart, *more) -> Conversation:
    assistant = Message(parts=[thinking, *more, TextPart("Switching."),
                               ToolCall("call_7", "set_relay", ARGS, parsed={"on": True,
                                                                             "channel": 1},
                                        complete=True)])
    return Conversation(None, [UserTurn(SWITCH), AssistantTurn(assistant),
                               ToolResult("call_7", "set_relay", TOOL_RESULT)])


def test_chat_sends_the_reasoning_of_a_tool_step_back_as_reasoning_content():
    provider = Provider("d", "openai-chat", "https://api.deepseek.com/v1", "deepseek-chat")
    conversation = reasoned_conversation(ThinkingPart("Relay 1 → on."))
    conversation.turns.append(AssistantTurn(Message(parts=[TextPart("Done.")])))
    _, _, body = build_request(provider, conversation)
    step, answer = [m for m in body["messages"] if m["role"] == "assistant"]
    assert step["reasoning_content"] == "Relay 1 → on." and step["tool_calls"]
    assert "reasoning_content" not in answer  # no reasoning: no field
    assert '"reasoning_content":"Relay 1 → on."'.encode() in encode_body(body)


def test_responses_asks_for_encrypted_reasoning_and_sends_the_item_back_byte_exact():
    provider = Provider("o", "openai-responses", "https://api.openai.com/v1", "gpt-5-mini")
    conversation = reasoned_conversation(
        ThinkingPart("relay → on", item_id="rs_9", summary_index=0, opaque=REASONING_ITEM),
        ThinkingPart("second summary", item_id="rs_9", summary_index=1))
    _, _, body = build_request(provider, conversation)
    assert (body["store"], body["include"]) == (False, ["reasoning.encrypted_content"])
    data = encode_body(body)
    # the item once, as it came, before the items it led to
    assert data.count(REASONING_ITEM.encode()) == 1
    assert json.dumps(json.loads(REASONING_ITEM), separators=(",", ":")).encode() not in data
    items = json.loads(data)["input"]
    assert [i["type"] for i in items] == ["message", "reasoning", "message", "function_call",
                                          "function_call_output"]
    assert items[1] == json.loads(REASONING_ITEM)


def test_responses_leaves_out_a_reasoning_item_with_nothing_after_it():
    provider = Provider("o", "openai-responses", "https://api.openai.com/v1", "gpt-5-mini")
    cut = Message(parts=[ThinkingPart("", item_id="rs_9", opaque=REASONING_ITEM)])
    _, _, body = build_request(provider, Conversation(None, [UserTurn("hi"), AssistantTurn(cut),
                                                             UserTurn("again")]))
    assert [i["type"] for i in body["input"]] == ["message", "message"]


def test_anthropic_thinking_budget_and_blocks_sent_back_byte_exact():
    provider = Provider("a", "anthropic", "https://api.anthropic.com/v1", "claude",
                        max_tokens=8192, thinking_budget=2048)
    conversation = reasoned_conversation(
        ThinkingPart("Relay 1 → on.", signature=SIGNATURE),
        ThinkingPart("", redacted_data="EmwKAhgBEgy3va+/redacted=="))
    _, _, body = build_request(provider, conversation)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    data = encode_body(body)
    assert f'{{"type":"thinking","thinking":"Relay 1 → on.","signature":"{SIGNATURE}"}},' \
           '{"type":"redacted_thinking","data":"EmwKAhgBEgy3va+/redacted=="}'.encode() in data
    _, _, plain = build_request(Provider("a", "anthropic", "https://x/v1", "claude"),
                                conversation)
    assert "thinking" not in plain


@pytest.mark.parametrize("options, problem", [
    ({"protocol": "openai-chat", "thinking_budget": 2048}, "anthropic\" only"),
    ({"protocol": "anthropic", "thinking_budget": 1023}, "from 1024 to below max_tokens (4096)"),
    ({"protocol": "anthropic", "thinking_budget": 4096}, "from 1024 to below max_tokens (4096)"),
    ({"protocol": "anthropic", "thinking_budget": 4096, "max_tokens": 4000},
     "below max_tokens (4000)")])
def test_thinking_budget_is_checked(options, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        Provider("a", base_url="https://x/v1", model="m", **options)
