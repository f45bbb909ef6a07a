"""Hardening item 15: a reasoning model's reasoning goes back across tool
steps and later turns, as each provider requires (docs/reasoning-replay.md).

End to end: a real `homeagent serve` with a relay tool against
`homeagent mock-llm`. A prompt with switch and reason words makes the mock
reason before its tool call, with opaque tokens of the provider's kind
(Anthropic: a signed thinking block and a redacted_thinking block, only with
thinking enabled; Responses: a reasoning item with encrypted_content, its
output_item.done written with ASCII escapes and spaces so that only its
bytes as they came match; Chat Completions: reasoning_content). A request
after the tool step, and a later ask on the same session, must carry it
back, or the mock answers 400 as DeepSeek, Anthropic and OpenAI do.
"""

from __future__ import annotations

import json

import pytest

from agent.mock_llm import scripts, wire
from conftest import timeout
from helpers import of_type
from test_tool_loop import relay_daemon

PROMPT = "Think first, then switch on relay 2"
LATER = "And why did you switch it? Switch relay 2 on again."
PROVIDERS = {"chat": {"protocol": "openai-chat"},
             "anthropic": {"protocol": "anthropic", "thinking_budget": 1024},
             "responses": {"protocol": "openai-responses"}}
PATHS = {"chat": "/v1/chat/completions", "anthropic": "/v1/messages",
         "responses": "/v1/responses"}


@pytest.fixture(scope="module")
def relay(tmp_path_factory, mock):
    daemon, log = relay_daemon(tmp_path_factory.mktemp("reasoning"), mock.url,
                               providers=PROVIDERS)
    yield daemon
    assert daemon.stop() == 0, daemon.log()


def ask(daemon, provider: str, prompt: str, session: str) -> list[dict]:
    with daemon.client(wait=timeout(30)) as client:
        return list(client.request("ask", prompt=prompt, provider=provider, session=session))


def model_requests(mock, provider: str) -> list[dict]:
    return [r for r in mock.requests() if r["path"] == PATHS[provider]]


def sent_back(provider: str, body: dict, user_text: str) -> None:
    """The request body carries the reasoning of user_text's tool step back
    as the provider requires."""
    if provider == "chat":
        [assistant] = [m for m in body["messages"]
                       if m["role"] == "assistant" and m.get("tool_calls")
                       and m.get("reasoning_content") == scripts.REASONING_TOOL][:1] or [None]
        assert assistant is not None, body["messages"]
    elif provider == "anthropic":
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
        blocks = wire.AnthropicMessages._reasoned_blocks(user_text)
        assert any(m["role"] == "assistant" and m["content"][:2] == blocks
                   for m in body["messages"]), body["messages"]
    else:
        assert (body["store"], body["include"]) == (False, ["reasoning.encrypted_content"])
        item = json.loads(wire.Responses.reasoned_item(user_text))
        kinds = [i.get("type") for i in body["input"]]
        at = body["input"].index(item)
        assert kinds[at + 1:at + 3] == ["message", "function_call"], kinds


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_reasoning_goes_back_after_the_tool_step_and_in_later_turns(relay, mock, provider):
    daemon = relay
    session = f"reasoned-{provider}"
    mock.clear()
    replies = ask(daemon, provider, PROMPT, session)
    done = replies[-1]
    assert done["type"] == "done" and done["steps"] == 2 and done["kept"], replies
    assert "".join(r["text"] for r in of_type(replies, "reasoning")) \
        .startswith(scripts.REASONING_TOOL)
    [result] = of_type(replies, "tool_result")
    assert not result["is_error"], result
    first, second = model_requests(mock, provider)
    assert second["body"] != first["body"]
    sent_back(provider, second["body"], PROMPT)
    # From the history, in a later ask of the session (DeepSeek: "in all
    # subsequent requests"; the others take it and ignore what they need not).
    mock.clear()
    replies = ask(daemon, provider, LATER, session)
    assert replies[-1]["type"] == "done", replies
    for request in model_requests(mock, provider):
        sent_back(provider, request["body"], PROMPT)


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_the_mock_refuses_a_request_without_the_reasoning(mock, provider):
    """What the daemon did before: the tool step's request without its
    reasoning is a 400, as the providers answer."""
    import httpx
    from agent.providers.requests import (AssistantTurn, Conversation, Provider, Tool,
                                          ToolResult, UserTurn, build_request, encode_body)
    from agent.stream.message import Message, TextPart, ThinkingPart, ToolCall

    protocol = PROVIDERS[provider]["protocol"]
    call = ToolCall("call_1", "set_relay", '{"channel": 2, "on": true}',
                    parsed={"channel": 2, "on": True}, complete=True)
    bare = Message(parts=[TextPart("Switching channel 2 on."), call])
    reasoned = Message(parts=[ThinkingPart(scripts.REASONING_TOOL), *bare.parts])
    tools = [Tool("set_relay", "Switch a relay", {"type": "object"})]
    options = {"thinking_budget": 1024} if protocol == "anthropic" else {}
    model = Provider("m", protocol, mock.url + "/v1", "mock-small", **options)
    for message, status in ((bare, 400), (reasoned, 400 if protocol != "openai-chat" else 200)):
        # an unsigned thinking without its opaque tokens is no replay either
        conversation = Conversation(None, [UserTurn(PROMPT), AssistantTurn(message),
                                           ToolResult("call_1", "set_relay", "relay 2 is true")])
        url, headers, body = build_request(model, conversation, tools)
        response = httpx.post(url, headers={**headers, "content-type": "application/json"},
                              content=encode_body(body), timeout=timeout(10))
        assert response.status_code == status, response.text
