"""Local servers' quirks in OpenAI-compatible mode (issue 14), end to end:
`homeagent mock-llm` sends each quirk (x-mock-quirks, one provider per
quirk) to a real daemon with a relay device whose set_relay tool runs a
script, and the ask still switches the relay and ends with done. The
decoder's own rows are in tests/test_chat_decoder.py; each quirk is a row
of docs/truth-table-openai-chat.md.
"""

from __future__ import annotations

import pytest

from helpers import of_type
from test_tool_loop import ARGUMENTS, PROMPT, RESULT, relay_daemon

QUIRKS = ("no-index", "no-id", "no-chunk-id", "object-arguments", "reasoning", "no-finish")
PROVIDERS = {
    **{quirk: {"headers": {"x-mock-quirks": quirk}} for quirk in QUIRKS},
    "all": {"headers": {"x-mock-quirks": ",".join(QUIRKS)}},
    "no-tools": {"headers": {"x-mock-quirks": "tools-400"}},
    "no-tools-retried": {"headers": {"x-mock-quirks": "tools-500"}, "retry_without_tools": True},
}


@pytest.fixture(scope="module")
def relay(tmp_path_factory, mock):
    daemon, log = relay_daemon(tmp_path_factory.mktemp("quirks"), mock.url,
                               providers=PROVIDERS)
    yield daemon, log
    assert daemon.stop() == 0, daemon.log()


def ask(daemon, provider: str, prompt: str = PROMPT) -> list[dict]:
    with daemon.client() as client:
        return list(client.request("ask", prompt=prompt, provider=provider))


@pytest.mark.parametrize("provider", [*QUIRKS, "all"])
def test_the_tool_loop_works_through_each_quirk(relay, provider):
    daemon, _ = relay
    replies = ask(daemon, provider)
    assert replies[-1]["type"] == "done", replies
    [call] = of_type(replies, "tool_call")
    assert (call["name"], call["arguments"]) == ("set_relay", ARGUMENTS)
    sent_none = provider in ("no-id", "all")
    assert call["call_id"] == "call_ha_0_0" if sent_none else call["call_id"].startswith("call_mock_")
    [result] = of_type(replies, "tool_result")
    assert (result["call_id"], result["content"].strip(), result["is_error"]) == (
        call["call_id"], RESULT, False)
    assert replies[-1]["finish_reason"] == "stop" and replies[-1]["steps"] == 2
    assert not of_type(replies, "warning")


def test_reasoning_in_the_reasoning_field_is_reasoning(relay):
    daemon, _ = relay
    replies = ask(daemon, "reasoning", "Why is the heating on?")
    assert "".join(r["text"] for r in of_type(replies, "reasoning"))
    assert replies[-1]["type"] == "done"


def test_a_model_without_tools_is_a_named_error(relay):
    daemon, _ = relay
    replies = ask(daemon, "no-tools")
    error = replies[-1]
    assert (error["type"], error["code"], error["status"]) == ("error", "tools_unsupported", 400)
    assert "does not support tools" in error["message"]
    assert "retry_without_tools" in error["message"]


def test_a_model_without_tools_is_asked_again_without_them_when_configured(relay, mock):
    daemon, _ = relay
    mock.clear()
    replies = ask(daemon, "no-tools-retried", "Hello there")
    [warning] = of_type(replies, "warning")
    assert warning["code"] == "tools_unsupported"
    assert "tools param requires --jinja flag" in warning["detail"]
    assert replies[-1]["type"] == "done" and replies[-1]["text"]
    sent = [r["body"] for r in mock.requests() if r["path"] == "/v1/chat/completions"]
    assert [bool(body.get("tools")) for body in sent] == [True, False]
