"""MCP servers as tool providers, end to end: a real daemon, the scripted
mock model (each provider's x-mock-tool-call header is one call the model
makes) and MCP servers in their own processes (tests/mcp_peers.py): the
`mcp` SDK's MCPServer on stdio and on streamable HTTP, and hostile
servers written here. No assert on a duration: timeouts are hang guards."""

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agent.cli_render import format_status
from conftest import timeout
from daemon_harness import MEMORY_HIGH_MIB, Daemon, child_env, command_device, toml_value

PEERS = str(Path(__file__).with_name("mcp_peers.py"))
TOKEN = "mcp-token-0123456789"
WAIT = timeout(30)
# Call limits, scaled like every hang guard: under emulation (7-10x slower,
# on a shared machine) an ordinary call must not reach them; only the slow
# and the stalled calls do.
BETA_TIMEOUT = timeout(2)
HOSTILE_TIMEOUT = timeout(1)


def call(tool: str, **arguments) -> dict:
    return {"headers": {"x-mock-tool-call": json.dumps(
        {"name": tool, "arguments": json.dumps(arguments)})}}


def server(name: str, **settings) -> str:
    return "\n".join([f"[mcp.{name}]", *(f"{key} = {toml_value(value)}"
                                         for key, value in settings.items())])


def ask(daemon: Daemon, provider: str) -> dict:
    """The tool result of one ask whose model makes the provider's call."""
    with daemon.client() as client:
        replies = list(client.request("ask", prompt="go", provider=provider, session=provider))
    assert replies[-1]["type"] == "done", replies
    [result] = [reply for reply in replies if reply["type"] == "tool_result"]
    return result


def status(daemon: Daemon) -> dict:
    with daemon.client() as client:
        return client.call("status")


def servers(daemon: Daemon) -> dict:
    return {entry["name"]: entry for entry in status(daemon)["mcp"]}


def until(predicate, what: str):
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {WAIT} s: {what}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_http_peer(stderr=subprocess.DEVNULL) -> tuple[subprocess.Popen, str]:
    """The SDK's server "beta" on streamable HTTP, listening; (process, url)."""
    port = free_port()
    process = subprocess.Popen([sys.executable, PEERS, "peer", "http", "beta", str(port)],
                               env=child_env(), stdout=subprocess.DEVNULL, stderr=stderr)
    url = f"http://127.0.0.1:{port}/mcp"

    def listening():
        try:
            return httpx.get(url, timeout=timeout(5)).status_code > 0
        except httpx.TransportError:
            return process.poll() is not None  # ended: the assert below says so
    until(listening, "the HTTP peer listens")
    assert process.poll() is None
    return process, url


@pytest.fixture(scope="module")
def http_peer():
    process, url = start_http_peer()
    yield url
    process.terminate()
    process.wait(WAIT)


CALLS = {
    "a-add": call("alpha_add", a=2, b=3), "b-add": call("beta_add", a=2, b=40),
    "a-echo": call("alpha_echo", text="hi"), "a-picture": call("alpha_picture"),
    "a-long": call("alpha_long_text", size=100000), "a-bad": call("alpha_add", a="two", b=1),
    "a-grow": call("alpha_grow"), "a-late": call("alpha_late"),
    "b-grow": call("beta_grow"), "b-late": call("beta_late"),
    "b-slow": call("beta_slow", seconds=60), "a-denied": call("alpha_slow", seconds=1),
}


@pytest.fixture(scope="module")
def agent(tmp_path_factory, mock, http_peer):
    directory = tmp_path_factory.mktemp("agent")
    token = directory / "beta.token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    extra = "\n".join([
        # a device offering alpha_echo: the MCP server's alpha_echo never shadows it
        command_device("box", {"alpha_echo": ["echo", "the device's echo"]},
                       [{"name": "alpha_echo", "description": "echo",
                         "parameters": {"type": "object", "properties": {
                             "text": {"type": "string"}}}}], argv=["true"], events=[]),
        # the SDK's server needs more than the default 10 s to start emulated
        server("alpha", argv=[sys.executable, PEERS, "peer", "stdio", "alpha"],
               deny=["slow"], max_result_bytes=1024, start_timeout=timeout(10)),
        server("beta", url=http_peer, token_file=str(token), timeout=BETA_TIMEOUT,
               start="start")])
    daemon = Daemon(directory, mock.url, providers=CALLS, default_provider="a-add",
                    extra=extra).start()
    yield daemon
    assert daemon.stop() == 0, daemon.log()
    assert TOKEN not in daemon.log()


def test_a_lazy_server_starts_at_the_first_ask_and_its_tool_is_called(agent):
    assert servers(agent)["alpha"]["state"] == "idle"
    result = ask(agent, "a-add")
    assert result == {**result, "is_error": False, "content": "alpha: 5"}
    alpha = servers(agent)["alpha"]
    assert alpha["state"] == "ready" and alpha["calls"] == 1 and alpha["pid"]
    assert alpha["protocol_version"] == "2025-11-25"


def test_two_servers_with_the_same_tool_are_both_reachable_prefixed(agent):
    assert ask(agent, "a-add")["content"] == "alpha: 5"
    assert ask(agent, "b-add")["content"] == "beta: 42"
    tools = status(agent)["tools"]
    assert {"alpha_add", "beta_add"} <= set(tools)
    assert tools.count("alpha_echo") == 1


def test_a_device_tool_is_never_shadowed_by_a_server_tool(agent):
    assert ask(agent, "a-echo")["content"] == "the device's echo"
    # status names the server's tool that is hidden, and whose is offered
    assert {"tool": "alpha_echo", "provider": "mcp alpha",
            "by": "device box"} in status(agent)["tools_shadowed"]


def test_media_are_summarized_and_long_text_trimmed(agent):
    assert ask(agent, "a-picture")["content"] == "[image image/png, 1000 bytes]"
    long = ask(agent, "a-long")["content"]
    assert long == "x" * 1024 + "\n[trimmed: 100000 bytes of text, the first 1024 kept]"


def test_arguments_off_the_schema_are_refused_before_the_server(agent):
    before = servers(agent)["alpha"]["calls"]
    result = ask(agent, "a-bad")
    assert result["is_error"] and result["content"].startswith("invalid arguments")
    assert servers(agent)["alpha"]["calls"] == before


def test_a_denied_tool_is_not_offered(agent):
    result = ask(agent, "a-denied")
    assert result["is_error"] and "there is no tool named 'alpha_slow'" in result["content"]


@pytest.mark.parametrize("name", ["a", "b"])
def test_a_tool_added_while_the_daemon_runs_is_offered(agent, name):
    server_name = {"a": "alpha", "b": "beta"}[name]
    assert ask(agent, f"{name}-grow")["content"] == f"{server_name}: grown"
    until(lambda: f"{server_name}_late" in servers(agent)[server_name]["tools"],
          "the new tool is listed")
    assert ask(agent, f"{name}-late")["content"] == f"{server_name}: late"


def test_a_call_past_its_timeout_is_an_error_and_the_server_goes_on(agent):
    result = ask(agent, "b-slow")
    assert result["is_error"]
    assert result["content"] == f"the MCP server beta did not answer within " \
                                f"{BETA_TIMEOUT:g} s; the call was cancelled"
    assert ask(agent, "b-add")["content"] == "beta: 42"
    beta = servers(agent)["beta"]
    assert beta["timeouts"] == 1 and beta["state"] == "ready"


def test_status_shows_each_server_and_masks_its_token(agent):
    reply = status(agent)
    assert TOKEN not in json.dumps(reply)
    beta = {entry["name"]: entry for entry in reply["mcp"]}["beta"]
    assert beta["transport"] == "http" and beta["calls"] >= 1 and beta["latency_ms"]["max"] > 0
    text = format_status(reply)
    assert "mcp alpha (stdio " in text and "mcp beta (http " in text, text


# ---- hostile servers ----

HOSTILE = ("garbage", "huge", "stranger", "stall", "crash", "chatter")


@pytest.fixture
def hostile(tmp_path, mock):
    extra = "\n".join(server(mode, argv=[sys.executable, PEERS, "hostile", mode],
                             env={"MARK": str(tmp_path / "crashed")},
                             timeout=HOSTILE_TIMEOUT, start="start") for mode in HOSTILE)
    daemon = Daemon(tmp_path, mock.url, providers={mode: call(f"{mode}_poke")
                                                   for mode in HOSTILE},
                    default_provider="garbage", extra=extra).start()
    until(lambda: all(s["state"] == "ready" for s in servers(daemon).values()),
          "every hostile server is ready")
    yield daemon
    assert daemon.stop() == 0, daemon.log()


def test_a_server_breaking_the_protocol_is_named_and_restarted(hostile):
    for mode, why in (("garbage", "a message that is not JSON"),
                      ("chatter", "a message that is not JSON"),
                      ("stranger", "an answer to id 4242, which was never asked")):
        result = ask(hostile, mode)
        assert result["is_error"], result
        assert result["content"].startswith(f"the MCP server {mode} failed during the call: "
                                            f"it broke the protocol: {why}"), result
        until(lambda: servers(hostile)[mode]["restarts"] >= 1, f"{mode} is restarted")
    assert status(hostile)["mcp"]  # the daemon is unharmed


def test_a_result_of_100_mb_is_dropped_in_bounded_memory(hostile):
    before = hostile.rss_kib() / 1024
    result = ask(hostile, "huge")
    assert result["is_error"]
    assert result["content"] == ("the MCP server huge: the answer was over 2097152 bytes "
                                 "and was dropped")
    grown = hostile.peak_rss_mib("a tool result of 100 MB") - before
    assert grown < 50, f"the daemon's peak RSS grew by {grown:.0f} MiB"
    assert hostile.peak_rss_mib("a tool result of 100 MB") < MEMORY_HIGH_MIB
    assert servers(hostile)["huge"]["state"] == "ready"  # the connection goes on


def test_a_stalled_call_times_out_and_is_cancelled_at_the_server(hostile):
    result = ask(hostile, "stall")
    assert result["content"] == f"the MCP server stall did not answer within " \
                                f"{HOSTILE_TIMEOUT:g} s; the call was cancelled"
    until(lambda: '"method":"notifications/cancelled"' in hostile.log(),
          "the server logs the cancel notification it got")


def test_a_crash_mid_call_is_an_error_then_a_restart_serves_the_next_call(hostile):
    result = ask(hostile, "crash")
    assert result["is_error"]
    assert result["content"].startswith("the MCP server crash failed during the call: "
                                        "the server closed its stdout (exit status 3)")
    until(lambda: servers(hostile)["crash"]["state"] == "ready", "crash is restarted")
    again = ask(hostile, "crash")
    assert (again["is_error"], again["content"]) == (False, "poked")
    crash = servers(hostile)["crash"]
    assert crash["restarts"] == 1 and "exit status 3" in crash["last_error"]


def test_a_daemon_that_stops_ends_its_http_session(tmp_path, mock):
    """The DELETE the specification asks of a client that leaves: the SDK's
    server logs the session it ends."""
    log = tmp_path / "peer.log"
    with open(log, "wb") as stderr:
        process, url = start_http_peer(stderr)
    try:
        daemon = Daemon(tmp_path, mock.url, extra=server("beta", url=url, start="start"))
        daemon.start()
        try:
            until(lambda: servers(daemon)["beta"]["state"] == "ready", "beta ready")
            session = re.findall(r"Created new transport with session ID: (\w+)",
                                 log.read_text())[-1]   # the daemon's, the newest
            assert f"Terminating session: {session}" not in log.read_text()
        finally:
            assert daemon.stop() == 0, daemon.log()
        until(lambda: f"Terminating session: {session}" in log.read_text(),
              "the daemon's session ended")
    finally:
        process.terminate()
        process.wait(WAIT)
