"""homeagent mock-llm: real sockets on 127.0.0.1, real httpx on trio, and the
stream core's decoders reading what the server sends."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from agent.mock_llm import scripts, wire
from agent.mock_llm.scripts import Conversation, ToolUse
from agent.mock_llm.app import MockApp
from agent.mock_llm.server import serve, spawn
from agent.stream import records as rec
from agent.stream.decoders import events as ev
from agent.stream.decoders import AnthropicDecoder, OpenAIChatDecoder, OpenAIResponsesDecoder
from conftest import timeout

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = (rec.DecodeWarning, rec.FramingError, rec.Truncated, rec.ProviderError,
            ev.MessageIncomplete, rec.UnknownField)
TOOLS = ("read_sensor", "set_relay")
SWITCH_PROMPT = "Please switch relay 1 on"
TOOL_RESULT = '{"channel": 1, "on": true, "ok": true}'


@dataclass(frozen=True)
class Format:
    """One wire format as a client sees it: requests to build, answers to read."""
    name: str
    path: str
    decoder: type

    def request(self, prompt: str, stream: bool = True, tools: bool = False) -> dict:
        body: dict = {"model": "mock-1", "stream": stream}
        if self.name == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
            tool_list = [{"type": "function", "function": {"name": n, "parameters": {}}}
                         for n in TOOLS]
        elif self.name == "anthropic":
            body["max_tokens"] = 512
            body["messages"] = [{"role": "user", "content": prompt}]
            tool_list = [{"name": n, "input_schema": {"type": "object"}} for n in TOOLS]
        else:
            body["input"] = [{"role": "user", "content": [{"type": "input_text", "text": prompt}]}]
            tool_list = [{"type": "function", "name": n, "parameters": {}} for n in TOOLS]
        if tools:
            body["tools"] = tool_list
        return body

    def follow_up(self, first: dict, call: ev.ToolCallDone, result: str) -> dict:
        """The first request plus the assistant's tool call and its result."""
        body = dict(first)
        tc = call.tool_call
        if self.name == "chat":
            body["messages"] = first["messages"] + [
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": tc.id, "type": "function",
                     "function": {"name": tc.name, "arguments": tc.arguments}}]},
                {"role": "tool", "tool_call_id": tc.id, "content": result}]
        elif self.name == "anthropic":
            body["messages"] = first["messages"] + [
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": tc.id, "name": tc.name, "input": tc.parsed}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": tc.id, "content": result}]}]
        else:
            body["input"] = first["input"] + [
                {"type": "function_call", "call_id": tc.id, "name": tc.name,
                 "arguments": tc.arguments},
                {"type": "function_call_output", "call_id": tc.id, "output": result}]
        return body

    def complete_text(self, answer: dict) -> tuple[str, str, list[tuple[str, dict]]]:
        """Text, reasoning and tool calls (name, arguments) of a non-stream answer."""
        if self.name == "chat":
            message = answer["choices"][0]["message"]
            calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                     for c in message.get("tool_calls", [])]
            return message["content"] or "", message.get("reasoning_content", ""), calls
        if self.name == "anthropic":
            blocks = answer["content"]
            return ("".join(b["text"] for b in blocks if b["type"] == "text"),
                    "".join(b["thinking"] for b in blocks if b["type"] == "thinking"),
                    [(b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"])
        items = answer["output"]
        return ("".join(c["text"] for i in items if i["type"] == "message" for c in i["content"]),
                "".join(s["text"] for i in items if i["type"] == "reasoning" for s in i["summary"]),
                [(i["name"], json.loads(i["arguments"])) for i in items
                 if i["type"] == "function_call"])


FORMATS = [Format("chat", "/v1/chat/completions", OpenAIChatDecoder),
           Format("anthropic", "/v1/messages", AnthropicDecoder),
           Format("responses", "/v1/responses", OpenAIResponsesDecoder)]
by_name = pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)

SCENARIOS = {
    "english": ("What is the temperature?", scripts.ENGLISH, ""),
    "chinese": ("客厅温度是多少？", scripts.CHINESE, ""),
    "german": ("Wie warm ist es? Bitte auf Deutsch.", scripts.GERMAN, ""),
    "emoji": ("Good night, with emoji please", scripts.EMOJI, ""),
    "reasoning": ("Why is the heating on?", scripts.REASONED, scripts.REASONING),
}


@pytest.fixture
async def base_url(nursery):
    port = await nursery.start(serve)
    return f"http://127.0.0.1:{port}"


async def decode_stream(client: httpx.AsyncClient, fmt: Format, body: dict,
                        headers: dict | None = None):
    """POST body, feed every raw read to a fresh decoder; (decoder, events, bytes)."""
    decoder, events, raw = fmt.decoder(), [], bytearray()
    async with client.stream("POST", fmt.path, json=body, headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for read in response.aiter_raw():
            raw += read
            events += decoder.feed(read)
    events += decoder.close()
    return decoder, events, bytes(raw)


def problems(events: list) -> list:
    return [e for e in events if isinstance(e, PROBLEMS)]


# ---- the scripted answers, through the real decoders ----

@pytest.mark.trio
@pytest.mark.parametrize("scenario", SCENARIOS)
@by_name
async def test_streamed_text_decodes_exactly(base_url, fmt, scenario):
    prompt, text, reasoning = SCENARIOS[scenario]
    async with httpx.AsyncClient(base_url=base_url) as client:
        decoder, events, _ = await decode_stream(client, fmt, fmt.request(prompt))
    assert problems(events) == []
    assert decoder.message.text == text
    assert decoder.message.reasoning == reasoning
    assert [e.reason.value for e in events if isinstance(e, ev.MessageFinished)] == ["stop"]
    # A few characters per delta: many events, as a real stream has.
    assert sum(isinstance(e, rec.TextDelta) for e in events) >= len(text) // wire.DELTA_CHARS


@pytest.mark.trio
@by_name
async def test_tool_call_then_tool_result(base_url, fmt):
    first = fmt.request(SWITCH_PROMPT, tools=True)
    async with httpx.AsyncClient(base_url=base_url) as client:
        decoder, events, _ = await decode_stream(client, fmt, first)
        assert problems(events) == []
        done = [e for e in events if isinstance(e, ev.ToolCallDone)]
        assert len(done) == 1
        assert done[0].tool_call.name == "set_relay"
        assert done[0].tool_call.parsed == {"channel": 1, "on": True}
        assert sum(isinstance(e, ev.ToolCallDelta) for e in events) > 3  # arguments in pieces
        assert decoder.message.text == "Switching channel 1 on."
        assert decoder.message.finish_reason.value == "tool_calls"

        decoder, events, _ = await decode_stream(client, fmt,
                                                 fmt.follow_up(first, done[0], TOOL_RESULT))
    assert problems(events) == []
    assert decoder.message.text == scripts.confirmation(TOOL_RESULT)
    assert decoder.message.tool_calls == []


# Each quirk as it shows in the bytes (a check on the JSON of every chunk) and
# what the decoder then gives.
QUIRK_SHOWS = {
    "no-index": lambda c: all("index" not in t for t in _calls_in(c)),
    "no-id": lambda c: all("id" not in t for t in _calls_in(c)),
    "no-chunk-id": lambda c: "id" not in c,
    "object-arguments": lambda c: all(isinstance(t["function"].get("arguments", {}), dict)
                                      for t in _calls_in(c)),
    "no-finish": lambda c: all(ch["finish_reason"] is None for ch in c["choices"]),
    "reasoning": lambda c: all("reasoning_content" not in ch["delta"] for ch in c["choices"]),
}


def _calls_in(chunk: dict) -> list[dict]:
    return [t for ch in chunk["choices"] for t in ch["delta"].get("tool_calls", [])]


@pytest.mark.trio
@pytest.mark.parametrize("quirk", QUIRK_SHOWS)
async def test_chat_quirks_show_in_the_stream_and_decode_the_same(base_url, quirk):
    chat, reasoned = FORMATS[0], quirk == "reasoning"
    request = (chat.request("Why is the heating on?") if reasoned
               else chat.request(SWITCH_PROMPT, tools=True))
    async with httpx.AsyncClient(base_url=base_url) as client:
        decoder, events, raw = await decode_stream(client, chat, request,
                                                   {"x-mock-quirks": quirk})
    chunks = [json.loads(line[6:]) for line in raw.decode().splitlines()
              if line.startswith("data: {")]
    assert all(map(QUIRK_SHOWS[quirk], chunks))
    assert problems(events) == []
    if reasoned:
        assert b'"reasoning":' in raw and decoder.message.reasoning == scripts.REASONING
        return
    assert any(_calls_in(c) for c in chunks)
    [call] = decoder.message.tool_calls
    assert (call.name, call.parsed) == ("set_relay", {"channel": 1, "on": True})
    assert decoder.message.text == "Switching channel 1 on."


@pytest.mark.trio
@pytest.mark.parametrize("quirk, status, words", [("tools-400", 400, "does not support tools"),
                                                   ("tools-500", 500, "requires --jinja")])
async def test_tools_refused_as_a_model_without_them(base_url, quirk, status, words):
    chat = FORMATS[0]
    headers = {"x-mock-quirks": quirk}
    async with httpx.AsyncClient(base_url=base_url) as client:
        refused = await client.post(chat.path, json=chat.request("Hi", tools=True),
                                    headers=headers)
        assert refused.status_code == status and words in refused.json()["error"]["message"]
        decoder, _, _ = await decode_stream(client, chat, chat.request("Hi"), headers)
        assert decoder.message.text  # without tools the same server answers
        other = await client.post(FORMATS[1].path, json=FORMATS[1].request("Hi"),
                                  headers=headers)
        assert other.status_code == 400  # quirks are Chat Completions' only


@pytest.mark.trio
@by_name
async def test_non_stream_answers_carry_the_same_content(base_url, fmt):
    async with httpx.AsyncClient(base_url=base_url) as client:
        response = await client.post(fmt.path, json=fmt.request("Why?", stream=False))
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert fmt.complete_text(response.json()) == (scripts.REASONED, scripts.REASONING, [])

        response = await client.post(fmt.path, json=fmt.request(SWITCH_PROMPT, stream=False,
                                                                tools=True))
    assert fmt.complete_text(response.json()) == (
        "Switching channel 1 on.", "", [("set_relay", {"channel": 1, "on": True})])


@pytest.mark.trio
async def test_chat_usage_chunk_crlf_and_same_bytes(base_url):
    fmt = FORMATS[0]
    body = fmt.request("Hello") | {"stream_options": {"include_usage": True}}
    headers = {"x-mock-line-ends": "crlf"}
    async with httpx.AsyncClient(base_url=base_url) as client:
        decoder, events, raw = await decode_stream(client, fmt, body, headers)
        _, _, again = await decode_stream(client, fmt, body, headers)
    assert raw == again  # same request, same bytes
    assert raw.count(b"\r\n\r\n") == raw.count(b"data: ") and b"\n\n" not in raw
    assert raw.endswith(b"data: [DONE]\r\n\r\n")
    assert problems(events) == []
    assert decoder.message.text == scripts.ENGLISH
    assert decoder.message.usage.input_tokens > 0 and decoder.message.usage.output_tokens > 0


@pytest.mark.trio
async def test_keep_alive_reuses_one_connection(base_url):
    fmt = FORMATS[0]
    async with httpx.AsyncClient(base_url=base_url) as client:
        await decode_stream(client, fmt, fmt.request("one"))
        await client.post(fmt.path, json=fmt.request("two", stream=False))
    async with httpx.AsyncClient(base_url=base_url) as other:
        await other.post(fmt.path, json=fmt.request("three", stream=False))
        recorded = (await other.get("/_mock/requests")).json()
    assert [r["body"]["messages"][0]["content"] for r in recorded] == ["one", "two", "three"]
    first, second, third = (r["connection"] for r in recorded)
    assert first == second != third


# ---- faults ----

@pytest.mark.trio
@by_name
async def test_drop_leaves_a_truncated_stream(base_url, fmt):
    decoder, events = fmt.decoder(), []
    async with httpx.AsyncClient(base_url=base_url) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            async with client.stream("POST", fmt.path, json=fmt.request("Hello"),
                                     headers={"x-mock-fault": "drop"}) as response:
                assert response.status_code == 200
                async for read in response.aiter_raw():
                    events += decoder.feed(read)
        events += decoder.close()
        # The server keeps serving after dropping a connection.
        assert (await client.post(fmt.path, json=fmt.request("Hi", stream=False))).status_code == 200
    assert any(isinstance(e, rec.Truncated) and e.unterminated_event for e in events)
    assert any(isinstance(e, ev.MessageIncomplete) for e in events)
    assert scripts.ENGLISH.startswith(decoder.message.text) and decoder.message.text


@pytest.mark.trio
@by_name
async def test_stall_ends_in_a_read_timeout(base_url, fmt):
    decoder = fmt.decoder()
    limits = httpx.Timeout(timeout(5.0), read=0.5)
    async with httpx.AsyncClient(base_url=base_url, timeout=limits) as client:
        with pytest.raises(httpx.ReadTimeout):
            async with client.stream("POST", fmt.path, json=fmt.request("Hello"),
                                     headers={"x-mock-fault": "stall"}) as response:
                async for read in response.aiter_raw():
                    decoder.feed(read)
        assert (await client.post(fmt.path, json=fmt.request("Hi", stream=False))).status_code == 200
    assert decoder.message.text and scripts.ENGLISH.startswith(decoder.message.text)


@pytest.mark.trio
@by_name
async def test_429_with_retry_after_and_provider_error_body(base_url, fmt):
    async with httpx.AsyncClient(base_url=base_url) as client:
        response = await client.post(fmt.path, json=fmt.request("Hello"),
                                     headers={"x-mock-fault": "429"})
    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    body = response.json()
    if fmt.name == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"
    else:
        assert body["error"]["code"] == "rate_limit_exceeded"
    assert body["error"]["message"]


@pytest.mark.trio
@by_name
async def test_500_once_then_success(base_url, fmt):
    fault = {"x-mock-fault": "500-once"}
    async with httpx.AsyncClient(base_url=base_url) as client:
        first = await client.post(fmt.path, json=fmt.request("Hello", stream=False), headers=fault)
        assert first.status_code == 500 and first.json()["error"]["message"]
        decoder, events, _ = await decode_stream(client, fmt, fmt.request("Hello"), fault)
        assert decoder.message.text == scripts.ENGLISH and problems(events) == []
        # The count is per fault key: a new key fails once again.
        other = await client.post(fmt.path, json=fmt.request("Hello", stream=False),
                                  headers=fault | {"x-mock-fault-key": "retry-test-2"})
    assert other.status_code == 500


@pytest.mark.trio
@by_name
async def test_error_event_after_200(base_url, fmt):
    async with httpx.AsyncClient(base_url=base_url) as client:
        decoder, events, _ = await decode_stream(client, fmt, fmt.request("Hello"),
                                                 {"x-mock-fault": "error-event"})
    errors = [e for e in events if isinstance(e, rec.ProviderError)]
    assert len(errors) == 1 and "overloaded" in errors[0].message
    assert any(isinstance(e, ev.MessageIncomplete) for e in events)
    assert decoder.message.text and scripts.ENGLISH.startswith(decoder.message.text)


@pytest.mark.trio
@by_name
async def test_garbage_is_reported_not_raised(base_url, fmt):
    async with httpx.AsyncClient(base_url=base_url) as client:
        decoder, events, raw = await decode_stream(client, fmt, fmt.request("Hello"),
                                                   {"x-mock-fault": "garbage"})
    assert b"data:" not in raw
    assert any(isinstance(e, (rec.UnknownField, rec.DecodeWarning)) for e in events)
    assert any(isinstance(e, ev.MessageIncomplete) for e in events)
    assert decoder.message.text == ""


@pytest.fixture
async def instance(nursery):
    """A mock whose instance faults the test sets, and its base URL."""
    app = MockApp()
    port = await nursery.start(partial(serve, app=app))
    return app, f"http://127.0.0.1:{port}"


@pytest.mark.trio
@by_name
async def test_instance_faults_apply_to_every_request_until_cleared(instance, fmt):
    app, url = instance
    async with httpx.AsyncClient(base_url=url) as client:
        put = await client.put("/_mock/faults", json={"faults": ["500"]})
        assert put.json() == {"faults": ["500"], "retry_after": 1}
        for _ in range(2):
            response = await client.post(fmt.path, json=fmt.request("Hello"))
            assert response.status_code == 500
        await client.put("/_mock/faults", json={"faults": ["401"]})
        assert (await client.post(fmt.path, json=fmt.request("Hello"))).status_code == 401
        await client.put("/_mock/faults", json={"faults": ["429"], "retry_after": 120})
        limited = await client.post(fmt.path, json=fmt.request("Hello"))
        assert (limited.status_code, limited.headers["retry-after"]) == (429, "120")

        await client.put("/_mock/faults", json={"faults": ["error-first"]})
        decoder, events, _ = await decode_stream(client, fmt, fmt.request("Hello"))
        first = next(e for e in events if not isinstance(e, rec.UnknownField))
        assert isinstance(first, rec.ProviderError) and "overloaded" in first.message
        assert decoder.message.text == ""

        await client.put("/_mock/faults", json={"faults": []})
        decoder, events, _ = await decode_stream(client, fmt, fmt.request("Hello"))
        assert decoder.message.text == scripts.ENGLISH and problems(events) == []
        bad = await client.put("/_mock/faults", json={"faults": ["explode"]})
        assert bad.status_code == 400 and app.faults == frozenset()


@pytest.mark.trio
async def test_stall_start_sends_the_head_and_no_event(instance):
    app, url = instance
    app.faults = frozenset({"stall-start"})
    fmt = FORMATS[0]
    received = bytearray()
    async with httpx.AsyncClient(base_url=url, timeout=None) as client:
        async with client.stream("POST", fmt.path, json=fmt.request("Hello")) as response:
            assert response.status_code == 200
            # An observation, not a wait for something: a right mock never sends a byte.
            with trio.move_on_after(0.2):
                async for read in response.aiter_raw():
                    received += read
    assert received == b""


@pytest.mark.trio
async def test_refuse_binds_the_port_and_refuses_connections():
    process, url = spawn(sys.executable, "--fault", "refuse", cwd=ROOT)
    try:
        async with httpx.AsyncClient() as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(url + "/_mock/requests")
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout(10)) == 0
        process.stdout.close()


def test_an_unknown_fault_on_the_command_line_is_refused():
    done = subprocess.run([sys.executable, "-m", "agent.cli", "mock-llm", "--fault", "explode"],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout(30))
    assert done.returncode == 2 and "unknown --fault explode" in done.stderr


@pytest.mark.trio
async def test_delay_and_unknown_fault(base_url):
    fmt = FORMATS[2]
    async with httpx.AsyncClient(base_url=base_url) as client:
        decoder, events, _ = await decode_stream(client, fmt, fmt.request("Hello"),
                                                 {"x-mock-delay-ms": "1"})
        assert decoder.message.text == scripts.ENGLISH and problems(events) == []
        response = await client.post(fmt.path, json=fmt.request("Hello"),
                                     headers={"x-mock-fault": "drop, explode"})
    assert response.status_code == 400
    assert "explode" in response.json()["error"]["message"]


@pytest.mark.trio
@by_name
async def test_a_forced_tool_call_sends_its_arguments_as_given(base_url, fmt):
    forced = {"name": "no_such_tool", "arguments": '{"a": tru'}
    async with httpx.AsyncClient(base_url=base_url) as client:
        decoder, events, _ = await decode_stream(client, fmt, fmt.request("Hello"),
                                                 {"x-mock-tool-call": json.dumps(forced)})
        response = await client.post(fmt.path, json=fmt.request("Hello"),
                                     headers={"x-mock-tool-call": '{"name": 1}'})
    [call] = decoder.message.tool_calls
    assert (call.name, call.arguments) == ("no_such_tool", '{"a": tru')
    assert call.error is not None  # invalid JSON, as the test asked for
    assert response.status_code == 400
    assert "x-mock-tool-call" in response.text


# ---- the request log and the key ----

@pytest.mark.trio
async def test_requests_are_recorded_with_keys_masked(base_url):
    chat, anthropic = FORMATS[0], FORMATS[1]
    first = chat.request(SWITCH_PROMPT, tools=True)
    async with httpx.AsyncClient(base_url=base_url) as client:
        _, events, _ = await decode_stream(client, chat, first,
                                           {"authorization": "Bearer sk-secret-1"})
        call = next(e for e in events if isinstance(e, ev.ToolCallDone))
        await client.post(chat.path, json=chat.follow_up(first, call, TOOL_RESULT),
                          headers={"authorization": "Bearer sk-secret-1"})
        await client.post(anthropic.path, json=anthropic.request("Hi", stream=False),
                          headers={"x-api-key": "sk-ant-secret-2"})
        listing = await client.get("/_mock/requests")
        cleared = await client.delete("/_mock/requests")
        after = await client.get("/_mock/requests")
    assert "secret" not in listing.text
    recorded = listing.json()
    assert [(r["method"], r["path"]) for r in recorded] == [
        ("POST", chat.path), ("POST", chat.path), ("POST", anthropic.path)]
    assert recorded[0]["headers"]["authorization"] == "***"
    assert recorded[2]["headers"]["x-api-key"] == "***"
    assert recorded[1]["body"]["messages"][-1] == {
        "role": "tool", "tool_call_id": call.tool_call.id, "content": TOOL_RESULT}
    assert cleared.json() == {"cleared": 3}
    assert after.json() == []


@pytest.mark.trio
async def test_require_key(nursery):
    port = await nursery.start(lambda task_status: serve(require_key="k-123",
                                                         task_status=task_status))
    chat, anthropic = FORMATS[0], FORMATS[1]
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        missing = await client.post(chat.path, json=chat.request("Hi", stream=False))
        wrong = await client.post(chat.path, json=chat.request("Hi", stream=False),
                                  headers={"authorization": "Bearer nope"})
        right = await client.post(chat.path, json=chat.request("Hi", stream=False),
                                  headers={"authorization": "Bearer k-123"})
        anthropic_wrong = await client.post(anthropic.path, json=anthropic.request("Hi"),
                                            headers={"x-api-key": "nope"})
        anthropic_right = await client.post(anthropic.path,
                                            json=anthropic.request("Hi", stream=False),
                                            headers={"x-api-key": "k-123"})
    assert missing.status_code == wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    assert "k-123" not in wrong.text
    assert right.status_code == 200
    assert anthropic_wrong.status_code == 401
    assert anthropic_wrong.json()["error"]["type"] == "authentication_error"
    assert anthropic_right.status_code == 200


# ---- the scripts alone (pure) ----

def test_switch_picks_the_first_fitting_tool_and_reads_the_request():
    answer = scripts.choose_answer(Conversation("Bitte Licht ausschalten, schalte es aus", None,
                                                ("get_time", "light_power", "set_relay")))
    assert answer.tool_use == ToolUse("light_power", {"on": False})
    answer = scripts.choose_answer(Conversation("switch relay 3 off", None, ("set_relay",)))
    assert answer.tool_use == ToolUse("set_relay", {"channel": 3, "on": False})
    assert scripts.choose_answer(Conversation("switch it on", None, ())).text == \
        scripts.NO_SWITCH_TOOL


def test_stream_events_are_pure():
    answer = scripts.choose_answer(Conversation("why?", None, ()))
    turn = wire.Turn(model="m", seed="abc", input_tokens=3)
    for fmt in wire.FORMATS.values():
        assert fmt.stream(answer, turn) == fmt.stream(answer, turn)
        # an SSE event ends in a blank line; an NDJSON line in its one LF
        if fmt.stream_type == "application/x-ndjson":
            assert all(e.endswith(b"\n") and e.count(b"\n") == 1 for e in fmt.stream(answer, turn))
        else:
            assert all(e.endswith(b"\n\n") for e in fmt.stream(answer, turn))


# ---- the command ----

@pytest.mark.trio
async def test_cli_serves_and_exits_0_on_sigterm():
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "agent.cli", "mock-llm", "--port", "0"],
        cwd=ROOT, stdout=subprocess.PIPE)
    try:
        line = b""
        with trio.fail_after(timeout(10)):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                assert chunk, "mock-llm exited before listening"
                line += chunk
        assert line.startswith(b"mock-llm listening on http://127.0.0.1:")
        url = line.split(b" on ")[1].strip().decode()
        async with httpx.AsyncClient(base_url=url) as client:
            response = await client.post("/v1/responses", json={"input": "Hello"})
        assert FORMATS[2].complete_text(response.json())[0] == scripts.ENGLISH
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(timeout(10)):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
