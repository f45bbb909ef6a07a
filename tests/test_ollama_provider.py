"""Protocol "ollama" as a provider: the /api/chat request (messages, tool
results, tools, the options num_ctx, keep_alive, think and format), their
checks at config load, and end to end: a real daemon asks `homeagent
mock-llm` in its Ollama format (by path /api/chat) for text, thinking and a
tool call whose result goes back in Ollama's shape. Failover from an ollama
provider whose first line is an error is in tests/test_failover.py.
"""

from __future__ import annotations

import pytest

from agent.providers.requests import (
    AssistantTurn,
    Conversation,
    Provider,
    Tool,
    ToolResult,
    UserTurn,
    build_request,
)
from agent.service.config import ConfigError, load
from agent.stream.message import Message, TextPart, ThinkingPart, ToolCall
from helpers import of_type
from test_tool_loop import ARGUMENTS, PROMPT, RESULT, SCHEMA, relay_daemon

BASE = "http://127.0.0.1:11434"


def ollama(**options) -> Provider:
    return Provider("local", "ollama", BASE, "qwen3:8b", **options)


def test_the_request_carries_the_conversation_in_ollamas_shape():
    call = ToolCall("call_ha_0_0", "set_relay", '{"channel": 2, "on": true}',
                    parsed={"channel": 2, "on": True}, complete=True)
    bad = ToolCall("call_ha_0_1", "set_relay", "{not json", complete=True)
    turns = [UserTurn(PROMPT),
             AssistantTurn(Message(parts=[ThinkingPart("I should switch it."),
                                          TextPart("Switching."), call, bad])),
             ToolResult("call_ha_0_0", "set_relay", RESULT),
             ToolResult("call_ha_0_1", "set_relay", "bad arguments", is_error=True)]
    url, headers, body = build_request(
        ollama(num_ctx=8192, keep_alive="30m", think="high", format={"type": "object"},
               max_tokens=256),
        Conversation("Be brief.", turns), [Tool("set_relay", "Switch a relay", SCHEMA)])
    assert url == BASE + "/api/chat"
    assert headers["accept"] == "application/x-ndjson"
    assert "authorization" not in headers
    assert body == {
        "model": "qwen3:8b", "stream": True,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": PROMPT},
            # no ids, arguments the parsed object ({} for those that did not parse)
            {"role": "assistant", "content": "Switching.", "tool_calls": [
                {"function": {"name": "set_relay", "arguments": {"channel": 2, "on": True}}},
                {"function": {"name": "set_relay", "arguments": {}}}]},
            {"role": "tool", "tool_name": "set_relay", "content": RESULT},
            {"role": "tool", "tool_name": "set_relay", "content": "bad arguments"}],
        "options": {"num_ctx": 8192, "num_predict": 256},
        "keep_alive": "30m", "think": "high", "format": {"type": "object"},
        "tools": [{"type": "function", "function": {
            "name": "set_relay", "description": "Switch a relay", "parameters": SCHEMA}}]}


def test_options_unset_are_not_sent():
    _, _, body = build_request(ollama(), Conversation(None, [UserTurn("hi")]))
    assert body == {"model": "qwen3:8b", "stream": True,
                    "messages": [{"role": "user", "content": "hi"}]}
    _, _, body = build_request(ollama(think=False, keep_alive=0, format="json"),
                               Conversation(None, [UserTurn("hi")]))
    assert (body["think"], body["keep_alive"], body["format"]) == (False, 0, "json")


@pytest.mark.parametrize("options, problem", [
    ({"num_ctx": 0}, "num_ctx must be a positive integer"),
    ({"keep_alive": "5 minutes"}, "keep_alive must be seconds, or a duration"),
    ({"keep_alive": "m5"}, "keep_alive must be seconds, or a duration"),
    ({"think": "max"}, "think must be true, false or one of low, medium, high"),
    ({"format": "yaml"}, 'format must be "json" or a JSON Schema table'),
    ({"format": {}}, 'format must be "json" or a JSON Schema table'),
])
def test_bad_options_are_refused(options, problem):
    with pytest.raises(ValueError, match=problem):
        ollama(**options)


@pytest.mark.parametrize("keep_alive", ["5m", "1h30m", "-1s", "0", "2.5s", "300ms", 60, 0.5, -1])
def test_keep_alive_takes_go_durations_and_seconds(keep_alive):
    assert ollama(keep_alive=keep_alive).keep_alive == keep_alive


def test_ollama_options_are_for_protocol_ollama_only():
    with pytest.raises(ValueError, match='num_ctx is an option of protocol "ollama" only'):
        Provider("p", "openai-chat", BASE + "/v1", "m", num_ctx=4096)


def write(tmp_path, provider: str):
    path = tmp_path / "config.toml"
    path.write_text('default_provider = "local"\n[daemon]\n'
                    f'socket = "{tmp_path}/agent.sock"\nstate_directory = "{tmp_path}/state"\n'
                    f'[providers.local]\nbase_url = "{BASE}"\nmodel = "qwen3:8b"\n' + provider,
                    encoding="utf-8")
    return str(path)


def test_the_config_reads_the_options(tmp_path):
    config = load(write(tmp_path, 'protocol = "ollama"\nnum_ctx = 8192\nkeep_alive = "30m"\n'
                                  'think = true\n[providers.local.format]\ntype = "object"\n'),
                  environ={})
    provider = config.providers["local"].provider
    assert (provider.num_ctx, provider.keep_alive, provider.think, provider.format) == (
        8192, "30m", True, {"type": "object"})


@pytest.mark.parametrize("provider, key, words", [
    ('protocol = "ollama"\nkeep_alive = "soon"\n', "keep_alive", "a duration"),
    ('protocol = "ollama"\nthink = 1\n', "think", "think must be true, false"),
    ('protocol = "ollama"\nnum_ctx = "big"\n', "num_ctx", "expected"),
    ('protocol = "anthropic"\nthink = true\n', "think", 'of protocol "ollama" only'),
])
def test_the_config_names_a_bad_option(tmp_path, provider, key, words):
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path, provider), environ={})
    assert f"providers.local.{key}" in str(caught.value) and words in str(caught.value)


# ---------------------------------------------------------------------------
# end to end: the daemon against the mock's Ollama format
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def relay(tmp_path_factory, mock):
    providers = {"ollama": {"protocol": "ollama", "base_url": mock.url, "num_ctx": 4096,
                            "keep_alive": "10m", "think": True}}
    daemon, log = relay_daemon(tmp_path_factory.mktemp("ollama"), mock.url, providers=providers)
    yield daemon, log
    assert daemon.stop() == 0, daemon.log()


def ask(daemon, prompt: str) -> list[dict]:
    with daemon.client() as client:
        return list(client.request("ask", prompt=prompt, provider="ollama"))


def sent(mock) -> list[dict]:
    return [r["body"] for r in mock.requests() if r["path"] == "/api/chat"]


def test_text_through_the_daemon(relay, mock):
    daemon, _ = relay
    mock.clear()
    replies = ask(daemon, "Hello there")
    done = replies[-1]
    assert done["type"] == "done", replies
    assert done["text"] == "".join(r["text"] for r in of_type(replies, "delta"))
    assert done["text"].startswith("The living room") and done["finish_reason"] == "stop"
    [body] = sent(mock)
    assert (body["options"], body["keep_alive"], body["think"]) == ({"num_ctx": 4096}, "10m", True)


def test_thinking_through_the_daemon(relay):
    daemon, _ = relay
    replies = ask(daemon, "Why is the heating on?")
    assert "".join(r["text"] for r in of_type(replies, "reasoning")).startswith(
        "The user asks why")
    assert replies[-1]["type"] == "done" and "schedule" in replies[-1]["text"]


def test_a_tool_call_through_the_daemon(relay, mock):
    daemon, log = relay
    mock.clear()
    replies = ask(daemon, PROMPT)
    assert replies[-1]["type"] == "done", replies
    [call] = of_type(replies, "tool_call")
    assert (call["call_id"], call["name"], call["arguments"]) == (
        "call_ha_0_0", "set_relay", ARGUMENTS)
    [result] = of_type(replies, "tool_result")
    assert (result["call_id"], result["content"].strip(), result["is_error"]) == (
        "call_ha_0_0", RESULT, False)
    assert replies[-1]["steps"] == 2 and not of_type(replies, "warning")
    first, second = sent(mock)
    assert first["tools"][0]["function"]["name"] == "set_relay"
    # the result goes back in Ollama's shape: the call without id, the result by tool name
    assert second["messages"][-2]["tool_calls"] == [
        {"function": {"name": "set_relay", "arguments": ARGUMENTS}}]
    assert second["messages"][-1] == {"role": "tool", "tool_name": "set_relay",
                                      "content": result["content"]}
