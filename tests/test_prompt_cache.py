"""Prompt caching (docs/caching.md): the request prefix stays byte-identical
across a session's asks, and the cache figures reach done, the history and
status.

End to end: a real `homeagent serve` with the relay device's tool against
`homeagent mock-llm`, which records every body as it came and simulates each
provider's prompt cache (x-mock-prompt-cache: on, agent/mock_llm/cache.py).
Per protocol, one session goes through two asks with a tool step each, a
SIGHUP reload of an unchanged config, and a daemon restart that reads the
history back from disk; every request's prefix must be a byte prefix of
the next one's.

The prefix, per protocol: every body puts the model, the settings, the tools
and Anthropic's system first and the growing history (messages, input)
last, so a request's prefix is its whole body less the closing `]}`.
Anthropic's breakpoints on messages move to the newest message by design
(the cache is keyed on the content, not on where the markers are), so its
bodies are compared with the message breakpoints taken out; the tools' and
the system's stay in and must not move.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from agent.mock_llm.cache import PromptCache
from agent.providers.requests import (Conversation, Provider, Tool, UserTurn, build_request,
                                      encode_body, prompt_cache_key)
from agent.service.config import parse
from agent.settings.reader import ConfigError
from conftest import timeout
from daemon_harness import MockServer
from helpers import of_type
from test_tool_loop import relay_daemon

MARKER = ',"cache_control":{"type":"ephemeral"}'
PROTOCOLS = {
    "chat": ("openai-chat", "/v1", "/v1/chat/completions", {"cache": "prompt_cache_key"}),
    "deepseek": ("openai-chat", "/v1", "/v1/chat/completions",
                 {"headers": {"x-mock-quirks": "deepseek-usage"}}),
    "ollama": ("ollama", "", "/api/chat", {}),
    "anthropic": ("anthropic", "/v1", "/v1/messages", {}),
    "responses": ("openai-responses", "/v1", "/v1/responses", {"cache": "prompt_cache_key"}),
}
# What each protocol reports of its cache: the names done's usage shows them by.
REPORTS_CACHE = {"chat": ("cache_read_tokens",), "deepseek": ("cache_read_tokens",),
                 "ollama": (), "anthropic": ("cache_read_tokens", "cache_write_tokens"),
                 "responses": ("cache_read_tokens",)}
PROMPTS = ["switch on relay 2", "switch off relay 2", "switch on relay 5", "switch off relay 5"]


@pytest.fixture(scope="module")
def llm():
    server = MockServer.start()
    yield server
    server.stop()


def comparable(protocol: str, raw: str) -> str:
    """The body as the byte-prefix rule sees it (the module docstring)."""
    if protocol != "anthropic":
        return raw
    head, messages, tail = raw.partition('"messages":[')
    assert messages, raw
    return head + messages + tail.replace(MARKER, "")


def ask(daemon, prompt: str, session: str) -> dict:
    with daemon.client() as client:
        replies = list(client.request("ask", prompt=prompt, provider="p", session=session))
    assert not of_type(replies, "error"), replies
    [result] = of_type(replies, "tool_result")
    assert not result["is_error"], result
    done = replies[-1]
    assert (done["type"], done["steps"], done["kept"]) == ("done", 2, True), done
    return done


def status_of(daemon) -> dict:
    with daemon.client() as client:
        status = client.call("status")
    return next(p for p in status["providers"] if p["name"] == "p") | {
        "reloads": status["reloads"]}


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_the_prefix_stays_byte_identical_and_the_cache_figures_arrive(tmp_path, llm, name):
    protocol, prefix, path, settings = PROTOCOLS[name]
    headers = {"x-mock-prompt-cache": "on", **settings.get("headers", {})}
    provider = {"protocol": protocol, "base_url": llm.url + prefix, **settings,
                "headers": headers}
    session = f"cache-{name}"
    llm.clear()
    daemon, _ = relay_daemon(tmp_path, llm.url, providers={"p": provider})
    try:
        dones = [ask(daemon, PROMPTS[0], session), ask(daemon, PROMPTS[1], session)]
        before_reload = status_of(daemon)
        daemon.signal(signal.SIGHUP)  # the config file is unchanged
        deadline = time.monotonic() + timeout(20)  # a hang guard only
        while status_of(daemon)["reloads"] == 0:
            assert time.monotonic() < deadline, daemon.log()
            time.sleep(0.02)
        dones.append(ask(daemon, PROMPTS[2], session))
        assert daemon.stop() == 0, daemon.log()
        daemon.start()  # the history is read back from the state directory
        dones.append(ask(daemon, PROMPTS[3], session))
        after_restart = status_of(daemon)
    finally:
        assert daemon.stop() == 0, daemon.log()

    bodies = [r["raw"] for r in llm.requests() if r["path"] == path]
    assert len(bodies) == 2 * len(PROMPTS)  # two asks, a reload, a restart: a tool step each
    for n, (earlier, later) in enumerate(zip(bodies, bodies[1:])):
        earlier, later = comparable(protocol, earlier), comparable(protocol, later)
        assert earlier.endswith("]}"), earlier
        assert later.startswith(earlier[:-2]) and len(later) > len(earlier), (
            f"request {n + 2} does not start with request {n + 1}'s prefix; they part at "
            f"byte {next(i for i, (a, b) in enumerate(zip(earlier, later)) if a != b)}")
    parsed = [json.loads(body) for body in bodies]
    if settings.get("cache") == "prompt_cache_key":
        assert {body["prompt_cache_key"] for body in parsed} == {prompt_cache_key(session)}
    else:
        assert not any("prompt_cache_key" in body for body in parsed)
    if protocol == "anthropic":
        for body in parsed:
            assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
            assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
            messages = body["messages"]
            assert "cache_control" in messages[-1]["content"][-1]
            marked = [i for i, m in enumerate(messages) if "cache_control" in m["content"][-1]]
            assert marked == [len(messages) - 3, len(messages) - 1][-len(marked):]
            assert len(marked) == min(2, (len(messages) + 1) // 2)

    # The figures the mock's cache reported reach done, the history and status.
    figures = REPORTS_CACHE[name]
    for done in dones[1:]:  # the first ask's second step may already read the first's prefix
        for figure in figures:
            assert done["usage"][figure] > 0, (figure, done["usage"])
        if not figures:
            assert "cache_read_tokens" not in done["usage"], done["usage"]
    with open(tmp_path / "state" / "sessions" / f"{session}.json", encoding="utf-8") as file:
        turns = json.load(file)["turns"]
    stored = [turn["usage"] for turn in turns if turn["role"] == "assistant"]
    assert len(stored) == 2 * len(PROMPTS)
    for figure in figures:
        assert sum(u.get(figure, 0) for u in stored) == sum(d["usage"][figure] for d in dones)
    for figure in ("cache_read_tokens", "cache_write_tokens"):
        # status counts since the daemon started: the asks before the restart, then the last one
        assert before_reload["tokens"][figure] == sum(d["usage"].get(figure, 0)
                                                      for d in dones[:2])
        assert after_restart["tokens"][figure] == dones[-1]["usage"].get(figure, 0)
    assert before_reload["cache"] == {"chat": "prompt_cache_key", "responses": "prompt_cache_key",
                                      "anthropic": "cache_control"}.get(name)


# ---- the builders, without a daemon ----

TOOLS = [Tool("zeta", "z", {"type": "object", "properties": {}}),
         Tool("alpha", "a", {"type": "object", "properties": {"x": {"type": "number"}}})]


def body_of(provider: Provider, conversation: Conversation, tools=TOOLS) -> bytes:
    return encode_body(build_request(provider, conversation, tools)[2])


@pytest.mark.parametrize("protocol", ["openai-chat", "anthropic", "openai-responses", "ollama"])
def test_tools_go_sorted_by_name_so_their_order_never_moves_the_prefix(protocol):
    provider = Provider("p", protocol, "http://127.0.0.1:1/v1", "m")
    conversation = Conversation("system", [UserTurn("hi")])
    assert body_of(provider, conversation) == body_of(provider, conversation, TOOLS[::-1])
    body = json.loads(body_of(provider, conversation))
    names = [t.get("name") or t["function"]["name"] for t in body["tools"]]
    assert names == ["alpha", "zeta"]
    assert list(body)[-1] == ("input" if protocol == "openai-responses" else "messages")


def test_cache_auto_sends_prompt_cache_key_to_openai_only():
    conversation = Conversation("s", [UserTurn("hi")], session="kitchen")
    for protocol in ("openai-chat", "openai-responses"):
        openai = Provider("o", protocol, "https://api.openai.com/v1", "m")
        local = Provider("l", protocol, "http://127.0.0.1:8080/v1", "m")
        forced = Provider("f", protocol, "http://127.0.0.1:8080/v1", "m", cache="prompt_cache_key")
        off = Provider("x", protocol, "https://api.openai.com/v1", "m", cache="off")
        key = prompt_cache_key("kitchen")
        assert json.loads(body_of(openai, conversation))["prompt_cache_key"] == key
        assert json.loads(body_of(forced, conversation))["prompt_cache_key"] == key
        assert "prompt_cache_key" not in json.loads(body_of(local, conversation))
        assert "prompt_cache_key" not in json.loads(body_of(off, conversation))
    assert "kitchen" not in key and key == prompt_cache_key("kitchen") != prompt_cache_key("hall")
    llama = Provider("c", "openai-chat", "http://127.0.0.1:8080/v1", "m", cache="cache_prompt")
    assert json.loads(body_of(llama, conversation))["cache_prompt"] is True


def test_anthropic_breakpoints_go_where_the_config_says():
    turns = [UserTurn("one"), UserTurn("two")]  # merged: one user message
    provider = Provider("a", "anthropic", "http://127.0.0.1:1/v1", "m", cache_breakpoints=["last"])
    body = json.loads(body_of(provider, Conversation("system", turns)))
    assert body["system"] == "system" and "cache_control" not in body["tools"][-1]
    assert body["messages"][-1]["content"] == [
        {"type": "text", "text": "one"},
        {"type": "text", "text": "two", "cache_control": {"type": "ephemeral"}}]
    everywhere = Provider("a", "anthropic", "http://127.0.0.1:1/v1", "m")
    assert json.loads(body_of(everywhere, Conversation("", turns)))["system"] == ""  # no empty block
    off = Provider("a", "anthropic", "http://127.0.0.1:1/v1", "m", cache="off")
    assert "cache_control" not in body_of(off, Conversation("system", turns)).decode()


BASE = """default_provider = "a"
[providers.a]
protocol = "{protocol}"
base_url = "http://127.0.0.1:8080/v1"
model = "m"
{line}
"""


@pytest.mark.parametrize("protocol, line, key, problem", [
    ("openai-chat", 'cache = "on"', "cache",
     "cache must be one of auto, off, prompt_cache_key, cache_prompt for protocol "
     "'openai-chat', not 'on'"),
    ("anthropic", 'cache = "prompt_cache_key"', "cache",
     "cache must be one of auto, off for protocol 'anthropic', not 'prompt_cache_key'"),
    ("openai-responses", 'cache = "cache_prompt"', "cache",
     "cache must be one of auto, off, prompt_cache_key for protocol 'openai-responses', "
     "not 'cache_prompt'"),
    ("openai-chat", "cache = true", "cache", "expected a string, got a boolean"),
    ("openai-chat", 'cache_breakpoints = ["last"]', "cache_breakpoints",
     "cache_breakpoints is an option of protocol \"anthropic\" only, not 'openai-chat'"),
    ("anthropic", 'cache_breakpoints = ["tools", "messages"]', "cache_breakpoints",
     "cache_breakpoints must be a list of tools, system, previous, last, "
     "not ['tools', 'messages']"),
    ("anthropic", 'cache_breakpoints = ["last", "last"]', "cache_breakpoints",
     "cache_breakpoints names a place more than once"),
    ("anthropic", 'cache_breakpoints = "last"', "cache_breakpoints",
     "expected an array, got a string"),
])
def test_cache_keys_are_refused_by_name(protocol, line, key, problem):
    with pytest.raises(ConfigError) as caught:
        parse(BASE.format(protocol=protocol, line=line), "/etc/homeagent/config.toml", {})
    assert (caught.value.key, caught.value.problem) == (f"providers.a.{key}", problem)


def test_cache_keys_that_are_right_load():
    config = parse(BASE.format(protocol="anthropic",
                               line='cache_breakpoints = ["system", "last"]'), "/c.toml", {})
    assert config.providers["a"].provider.cache_breakpoints == ("system", "last")
    config = parse(BASE.format(protocol="openai-chat", line='cache = "cache_prompt"'),
                   "/c.toml", {})
    assert config.providers["a"].provider.prompt_cache() == "cache_prompt"


# ---- the mock's cache, which the end-to-end test relies on ----

def test_the_mock_reads_anthropic_breakpoints_within_the_lookback():
    cache = PromptCache()
    ephemeral = {"type": "ephemeral"}

    def request(blocks: int, marked: tuple[int, ...]) -> dict:
        return {"messages": [{"role": "user", "content": [
            {"type": "text", "text": f"block {i} " * 10,
             **({"cache_control": ephemeral} if i in marked else {})}
            for i in range(blocks)]}]}

    first = cache.anthropic(request(3, (2,)))
    assert first.read == 0 and first.written > 0
    again = cache.anthropic(request(5, (4,)))  # the first's breakpoint is 2 blocks back
    assert again.read == first.written and again.written > 0
    far = cache.anthropic(request(40, (39,)))  # 35 blocks past the last entry: no hit
    assert far.read == 0
    assert cache.anthropic(request(3, ())).read == 0  # no breakpoint, no cache


def test_the_mock_reads_the_longest_shared_prefix():
    cache = PromptCache()
    assert cache.automatic("/p", b'{"a":[1,2]}').read == 0
    assert cache.automatic("/p", b'{"a":[1,2,3,4,5,6,7,8]}').read == len('{"a":[1,2') // 4
    assert cache.automatic("/q", b'{"a":[1,2]}').read == 0  # per path
