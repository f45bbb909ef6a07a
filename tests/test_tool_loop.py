"""The tool loop end to end: `homeagent serve` and the scripted mock model
as real processes (tests/daemon_harness.py), a `[devices.relay]` of type
"command" whose tool set_relay runs a script from tmp_path, and each
provider protocol's wire format for tools, tool calls and tool results as
the mock recorded them.

Bad calls (an unknown tool, arguments off the schema, arguments that are
not JSON) come from the mock's x-mock-tool-call header, in all three wire
formats; DeviceHub.call_tool() has the same cases in tests/test_devices_hub.py.
"""

from __future__ import annotations

import json
import shlex

import pytest

from agent.mock_llm.scripts import confirmation
from conftest import timeout
from daemon_harness import Daemon, toml_value
from helpers import of_type

PROMPT = "switch on relay 2"
ARGUMENTS = {"channel": 2, "on": True}
RESULT = "relay 2 is true"
FIRST = "Switching channel 2 on."  # the mock's text before its tool call
SCHEMA = {"type": "object",
          "properties": {"channel": {"type": "integer", "minimum": 1, "maximum": 8},
                         "on": {"type": "boolean"}},
          "required": ["channel", "on"], "additionalProperties": False}
DESCRIPTION = "Switch relay CHANNEL (1-8) on or off"
# Anthropic without cache breakpoints: the blocks as the format has them
# (the breakpoints are tests/test_prompt_cache.py's)
PROVIDERS = {"chat": {"protocol": "openai-chat"},
             "anthropic": {"protocol": "anthropic", "cache": "off"},
             "responses": {"protocol": "openai-responses"}}
PATHS = {"chat": "/v1/chat/completions", "anthropic": "/v1/messages",
         "responses": "/v1/responses"}


def relay_daemon(directory, mock_url: str, *, sleep: float = 0, tool_timeout: float = 10,
                 sessions: dict | None = None,
                 providers: dict | None = None) -> tuple[Daemon, object]:
    """A daemon in directory with the relay device; (daemon, the script's log)."""
    log = directory / "relay.log"
    program = directory / "relay.sh"
    program.write_text("#!/bin/sh\n"
                       f'echo "$1 $2" >> {shlex.quote(str(log))}\n'
                       + (f"sleep {sleep}\n" if sleep else "")
                       + 'printf "relay %s is %s\\n" "$1" "$2"\n')
    program.chmod(0o755)
    daemon = Daemon(directory, mock_url, providers=providers or PROVIDERS, sessions=sessions)
    tool = {"name": "set_relay", "description": DESCRIPTION, "parameters": SCHEMA,
            "timeout": timeout(tool_timeout)}
    device = ["[devices.relay]", 'type = "command"', 'argv = ["true"]', "events = []",
              f"tool_argv = {toml_value({'set_relay': [str(program), '{channel}', '{on}']})}",
              f"tools = {toml_value([tool])}",
              "[timers]", "enabled = false"]  # the relay's tool alone is offered
    daemon.write_config(daemon.config_text() + "\n".join(device) + "\n")
    return daemon.start(), log


def ask(daemon: Daemon, provider: str, session: str) -> list[dict]:
    with daemon.client() as client:
        return list(client.request("ask", prompt=PROMPT, provider=provider, session=session))


def strip(reply: dict) -> dict:
    return {k: v for k, v in reply.items() if k != "id"}


@pytest.fixture(scope="module")
def relay(tmp_path_factory, mock):
    daemon, log = relay_daemon(tmp_path_factory.mktemp("relay"), mock.url)
    yield daemon, log
    assert daemon.stop() == 0, daemon.log()


def test_status_lists_the_device_and_its_tool(relay):
    daemon, _ = relay
    with daemon.client() as client:
        status = client.call("status")
    assert status["tools"] == ["set_relay"]
    [device] = status["devices"]
    assert (device["name"], device["kind"], device["state"], device["tools"]) == \
        ("relay", "command", "running", ["set_relay"])
    assert device["restarts"] == 0 and device["last_error"] is None


def wire_checks(provider: str, first: dict, second: dict, call_id: str) -> None:
    """The tools advertised in both requests, and the call and its result
    sent back in the second, in the provider's own format."""
    if provider == "chat":
        for body in (first, second):
            assert [tool["function"] for tool in body["tools"]] == [
                {"name": "set_relay", "description": DESCRIPTION, "parameters": SCHEMA}]
            assert body["tools"][0]["type"] == "function"
        *_, user, assistant, result = second["messages"]
        assert user == {"role": "user", "content": PROMPT}
        assert assistant["content"] == FIRST
        [call] = assistant["tool_calls"]
        assert call["id"] == call_id and call["type"] == "function"
        assert call["function"]["name"] == "set_relay"
        assert call["function"]["arguments"] == '{"channel": 2, "on": true}'
        assert result == {"role": "tool", "tool_call_id": call_id, "content": RESULT}
    elif provider == "anthropic":
        for body in (first, second):
            assert body["tools"] == [{"name": "set_relay", "description": DESCRIPTION,
                                      "input_schema": SCHEMA}]
        user, assistant, result = second["messages"]
        assert user == {"role": "user", "content": [{"type": "text", "text": PROMPT}]}
        assert assistant == {"role": "assistant", "content": [
            {"type": "text", "text": FIRST},
            {"type": "tool_use", "id": call_id, "name": "set_relay", "input": ARGUMENTS}]}
        assert result == {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call_id, "content": RESULT}]}
    else:
        for body in (first, second):
            [tool] = body["tools"]
            assert (tool["type"], tool["name"], tool["description"], tool["parameters"]) == \
                ("function", "set_relay", DESCRIPTION, SCHEMA)
        user, text, call, result = second["input"]
        assert user == {"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": PROMPT}]}
        assert text["role"] == "assistant" and text["content"][0]["text"] == FIRST
        assert call == {"type": "function_call", "call_id": call_id, "name": "set_relay",
                        "arguments": '{"channel": 2, "on": true}'}
        assert result == {"type": "function_call_output", "call_id": call_id, "output": RESULT}


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_a_tool_call_runs_and_its_result_goes_back(relay, mock, provider):
    daemon, log = relay
    runs_before = log.read_text().splitlines() if log.exists() else []
    mock.clear()
    session = f"relay-{provider}"
    replies = ask(daemon, provider, session)

    assert replies[0]["type"] == "started" and replies[0]["provider"] == provider
    [call] = of_type(replies, "tool_call")
    call_id = call["call_id"]
    assert call_id and strip(call) == {"type": "tool_call", "call_id": call_id,
                                       "name": "set_relay", "arguments": ARGUMENTS}
    [result] = of_type(replies, "tool_result")
    assert strip(result) == {"type": "tool_result", "call_id": call_id, "name": "set_relay",
                             "content": RESULT, "is_error": False}
    # The call, then its result, then the model's answer to the result.
    after = replies[replies.index(result) + 1:]
    assert "".join(r["text"] for r in after if r["type"] == "delta") == confirmation(RESULT)
    assert replies.index(call) < replies.index(result)
    done = replies[-1]
    assert done["type"] == "done" and done["steps"] == 2 and done["finish_reason"] == "stop"
    assert done["text"] == FIRST + confirmation(RESULT)
    assert [r["type"] for r in replies if r["type"] not in ("delta", "warning")] == \
        ["started", "tool_call", "tool_result", "done"]

    assert log.read_text().splitlines() == [*runs_before, "2 true"]  # ran once, just so

    requests = mock.requests()
    assert [r["path"] for r in requests] == [PATHS[provider]] * 2
    wire_checks(provider, requests[0]["body"], requests[1]["body"], call_id)

    with daemon.client() as client:
        turns = client.call("history", session=session)["turns"]
    assert turns == [
        {"role": "user", "text": PROMPT},
        {"role": "assistant", "text": FIRST,
         "tool_calls": [{"id": call_id, "name": "set_relay",
                         "arguments": '{"channel": 2, "on": true}'}],
         "finish_reason": "tool_calls"},
        {"role": "tool", "call_id": call_id, "name": "set_relay", "content": RESULT,
         "is_error": False},
        {"role": "assistant", "text": confirmation(RESULT), "finish_reason": "stop"}]


def test_a_tool_past_its_timeout_is_an_error_result(tmp_path, mock):
    daemon, log = relay_daemon(tmp_path, mock.url, sleep=30, tool_timeout=0.5)
    try:
        mock.clear()
        replies = ask(daemon, "anthropic", "slow-relay")
        [result] = of_type(replies, "tool_result")
        expected = f"set_relay did not finish within {timeout(0.5):g} s"
        assert result["is_error"] is True and result["content"] == expected
        done = replies[-1]
        assert done["type"] == "done" and done["steps"] == 2
        assert done["text"] == FIRST + confirmation(expected)
        assert log.read_text() == "2 true\n"  # it started, and was stopped
        # The error goes back flagged as one.
        *_, last = mock.requests()[1]["body"]["messages"]
        assert last["content"] == [{"type": "tool_result", "tool_use_id": result["call_id"],
                                    "content": expected, "is_error": True}]
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_calls_past_max_tool_steps_are_not_run(tmp_path, mock):
    daemon, log = relay_daemon(tmp_path, mock.url, sessions={"max_tool_steps": 1})
    try:
        mock.clear()
        replies = ask(daemon, "chat", "one-step")
        [call] = of_type(replies, "tool_call")
        [result] = of_type(replies, "tool_result")
        assert result["call_id"] == call["call_id"] and result["is_error"] is True
        assert result["content"].startswith("not run")
        done = replies[-1]
        assert (done["type"], done["finish_reason"], done["steps"]) == ("done", "tool_calls", 1)
        assert done["text"] == FIRST
        assert not log.exists()  # the program never ran
        assert len(mock.requests()) == 1  # the result is not sent back either
        with daemon.client() as client:
            turns = client.call("history", session="one-step")["turns"]
        assert [turn["role"] for turn in turns] == ["user", "assistant", "tool"]
        assert turns[2]["is_error"] is True
    finally:
        assert daemon.stop() == 0, daemon.log()


BAD_CALLS = {
    # name: (the call the model makes, what its error result starts with)
    "unknown": ({"name": "set_relay_now", "arguments": '{"channel": 2, "on": true}'},
                "there is no tool named 'set_relay_now' (tools: set_relay)"),
    "schema": ({"name": "set_relay", "arguments": '{"channel": 9, "on": "yes"}'},
               "invalid arguments, nothing was run: arguments.channel: 9 is greater than "
               "the maximum 8; arguments.on: expected a boolean, got a string"),
    "json": ({"name": "set_relay", "arguments": '{"channel": 2, "on": tru'},
             "the arguments were not usable (invalid_json: "),
}


@pytest.fixture(scope="module")
def bad_calls(tmp_path_factory, mock):
    """A daemon with one provider per wire format and kind of bad call."""
    directory = tmp_path_factory.mktemp("bad-calls")
    providers = {f"{name}-{kind}": {**settings, "headers": {"x-mock-tool-call":
                                                           json.dumps(call)}}
                 for name, settings in PROVIDERS.items()
                 for kind, (call, _) in BAD_CALLS.items()}
    daemon, log = relay_daemon(directory, mock.url, providers=providers)
    yield daemon, log
    assert daemon.stop() == 0, daemon.log()


@pytest.mark.parametrize("kind", list(BAD_CALLS))
@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_a_bad_call_is_an_error_result_and_the_ask_ends_cleanly(bad_calls, mock, provider,
                                                                 kind):
    daemon, log = bad_calls
    call, error = BAD_CALLS[kind]
    mock.clear()
    replies = ask(daemon, f"{provider}-{kind}", f"bad-{provider}-{kind}")
    [tool_call] = of_type(replies, "tool_call")
    assert tool_call["name"] == call["name"]
    [result] = of_type(replies, "tool_result")
    assert result["is_error"] is True and result["content"].startswith(error), result
    assert not of_type(replies, "error")
    done = replies[-1]
    assert (done["type"], done["steps"]) == ("done", 2)
    assert done["text"] == f"Calling {call['name']}." + confirmation(result["content"])
    assert not log.exists()  # nothing ran on the device
    # The error result went back to the model in the second request.
    first, second = mock.requests()
    assert result["content"] in json.dumps(second["body"], ensure_ascii=False)
