"""The Home Assistant tool provider (agent/tools/homeassistant.py).

Unit level: a small HTTP server on loopback (http.server in a thread)
stands in for Home Assistant where its failures are needed: a refused
token (401), an unknown entity (404), a server error (500), an answer that
never comes (timeout), and a port nobody listens on. A real Home Assistant
cannot be made to fail on demand; the end-to-end tests below use one
(tests/homeassistant.py).
"""

from __future__ import annotations

import json
import socket
import threading
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import trio

from agent.devices.base import Common, SettingError, ToolError
from agent.tools.homeassistant import TOOL_NAMES, HomeAssistantTools
from agent.service.config import load
from agent.settings.reader import ConfigError
from conftest import timeout
from daemon_harness import Daemon, toml_value
import homeassistant as harness  # tests/homeassistant.py

TOKEN = "test-token-0123456789abcdef"
BED = {"entity_id": "light.bed_light", "state": "off",
       "attributes": {"friendly_name": "Bed Light", "supported_color_modes": ["hs"],
                      "brightness": None, "long": "x" * 500}}


class StandIn(BaseHTTPRequestHandler):
    """Stands in for Home Assistant's REST API: answers by the server's
    `answers` (path -> (status, body)), records each request, and holds an
    answer until `release` is set when the status is None."""

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length).decode() if length else None
        self.server.seen.append((self.command, self.path, self.headers.get("authorization"),
                                 body))
        status, answer = self.server.answers.get(self.path, (404, {"message": "not found"}))
        if status is None:
            self.server.release.wait(timeout(10))
            status = 200
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@contextmanager
def stand_in(answers: dict):
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    server.answers, server.seen, server.release = answers, [], threading.Event()
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


def token_file(tmp_path) -> str:
    path = tmp_path / "ha.token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return str(path)


def make(tmp_path, url: str, **settings) -> HomeAssistantTools:
    settings = {"url": url, "token_file": token_file(tmp_path),
                "allow_entities": ["light.bed_*"], "allow_services": ["light.turn_on"],
                "timeout": timeout(0.5), **settings}
    return HomeAssistantTools.from_settings(Common("ha", frozenset()), settings)


@asynccontextmanager
async def running(device: HomeAssistantTools):
    async with trio.open_nursery() as nursery:
        await nursery.start(device.run)
        yield device
        nursery.cancel_scope.cancel()


def url(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.trio
async def test_a_state_is_summarized_and_the_token_sent(tmp_path):
    with stand_in({"/api/states/light.bed_light": (200, BED)}) as server:
        async with running(make(tmp_path, url(server))) as device:
            result = await device.call_tool("ha_get_state", {"entity_id": "light.bed_light"})
    # short scalar attributes only: no list, no null, no 500-character value
    assert result == 'light.bed_light: off (friendly_name="Bed Light")'
    assert server.seen == [("GET", "/api/states/light.bed_light", f"Bearer {TOKEN}", None)]


@pytest.mark.trio
async def test_a_service_call_sends_the_entity_and_reports_its_new_state(tmp_path):
    on = {**BED, "state": "on", "attributes": {"brightness": 180}}
    other = {"entity_id": "light.kitchen", "state": "on", "attributes": {}}
    with stand_in({"/api/services/light/turn_on": (200, [other, on])}) as server:
        async with running(make(tmp_path, url(server))) as device:
            result = await device.call_tool("ha_call_service", {
                "domain": "light", "service": "turn_on", "entity_id": "light.bed_light",
                "data": {"brightness": 180}})
    assert result == "called light.turn_on; light.bed_light: on (brightness=180)"
    [(method, path, _, body)] = server.seen
    assert (method, path, json.loads(body)) == \
        ("POST", "/api/services/light/turn_on", {"brightness": 180, "entity_id": "light.bed_light"})


@pytest.mark.trio
async def test_the_list_holds_the_allowed_entities_only(tmp_path):
    states = [BED, {"entity_id": "light.kitchen", "state": "on"},
              {"entity_id": "sensor.outside", "state": "3.5", "attributes": {"unit": "°C"}}]
    with stand_in({"/api/states": (200, states)}) as server:
        async with running(make(tmp_path, url(server), allow_domains=["sensor"])) as device:
            result = await device.call_tool("ha_list_entities", {})
    assert result.splitlines() == ['light.bed_light: off (friendly_name="Bed Light")',
                                   'sensor.outside: 3.5 (unit="°C")']


REFUSED = {
    "outside the allow-list": ("ha_get_state", {"entity_id": "light.kitchen"},
                               "light.kitchen is not in this device's allow-list"),
    "a path in the entity id": ("ha_get_state", {"entity_id": "light.bed_light/../../config"},
                                "not an entity id"),
    "a service not allowed": ("ha_call_service", {"domain": "light", "service": "turn_off",
                                                  "entity_id": "light.bed_light"},
                              "the service light.turn_off is not in this device's "
                              "allow_services"),
    "an allowed service on another entity": (
        "ha_call_service", {"domain": "light", "service": "turn_on",
                            "entity_id": "light.kitchen"}, "light.kitchen is not in"),
    "a second target in the data": (
        "ha_call_service", {"domain": "light", "service": "turn_on",
                            "entity_id": "light.bed_light",
                            "data": {"entity_id": "light.kitchen", "area_id": "house"}},
        "data may not name a target (area_id, entity_id)"),
    "a target in another case": (
        "ha_call_service", {"domain": "light", "service": "turn_on",
                            "entity_id": "light.bed_light",
                            "data": {"Entity_ID": "light.kitchen", "AREA_id": "house"}},
        "data may not name a target (AREA_id, Entity_ID)"),
    "a target object": (
        "ha_call_service", {"domain": "light", "service": "turn_on",
                            "entity_id": "light.bed_light",
                            "data": {"Target": {"entity_id": "light.kitchen"}}},
        "data may not name a target (Target)"),
    "data too big": ("ha_call_service", {"domain": "light", "service": "turn_on",
                                         "entity_id": "light.bed_light",
                                         "data": {"pad": "x" * 3000}}, "over 2048 bytes"),
    "a domain that is no word": ("ha_call_service", {"domain": "light/../x",
                                                     "service": "turn_on",
                                                     "entity_id": "light.bed_light"},
                                 "a domain and a service are lower-case words"),
}


@pytest.mark.parametrize("case", list(REFUSED))
@pytest.mark.trio
async def test_a_refusal_sends_nothing(tmp_path, case):
    name, arguments, why = REFUSED[case]
    with stand_in({}) as server:
        async with running(make(tmp_path, url(server))) as device:
            with pytest.raises(ToolError) as refused:
                await device.call_tool(name, arguments)
    assert str(refused.value).startswith("refused, nothing was sent to Home Assistant: ")
    assert why in str(refused.value)
    assert server.seen == [] and device.refused == 1


FAILURES = {
    401: "Home Assistant: 401 unauthorized: the token was refused",
    404: "Home Assistant: 404 not found: Home Assistant knows no /api/states/light.bed_light",
    500: "Home Assistant: HTTP 500 Internal Server Error for GET /api/states/light.bed_light",
    None: f"Home Assistant: no answer within {timeout(0.5):g} s",
}


@pytest.mark.parametrize("status", list(FAILURES))
@pytest.mark.trio
async def test_an_http_failure_is_a_named_tool_error(tmp_path, status):
    answers = {} if status == 404 else {"/api/states/light.bed_light": (status, {"x": TOKEN})}
    with stand_in(answers) as server:
        async with running(make(tmp_path, url(server))) as device:
            with pytest.raises(ToolError) as failed:
                await device.call_tool("ha_get_state", {"entity_id": "light.bed_light"})
            assert str(failed.value) == FAILURES[status]
            assert device.failed == 1
            # the device goes on: the next call is made
            server.release.set()
            server.answers["/api/states/light.bed_light"] = (200, BED)
            assert (await device.call_tool("ha_get_state", {"entity_id": "light.bed_light"})
                    ).startswith("light.bed_light: off")


@pytest.mark.trio
async def test_a_server_nobody_listens_on_is_a_named_tool_error(tmp_path):
    with socket.socket() as probe:  # a port just free: connecting to it is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with running(make(tmp_path, f"http://127.0.0.1:{port}")) as device:
        with pytest.raises(ToolError) as failed:
            await device.call_tool("ha_get_state", {"entity_id": "light.bed_light"})
    assert str(failed.value) == f"Home Assistant: cannot reach http://127.0.0.1:{port}: " \
                                "ConnectError"


def config_text(tmp_path, device: str) -> str:
    return ('[providers.mock]\nprotocol = "openai-chat"\nbase_url = "http://127.0.0.1:1/v1"\n'
            'model = "m"\n[devices.ha]\ntype = "homeassistant"\n' + device)


def test_the_config_gives_the_provider_its_tools_and_the_masker_its_token(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(config_text(tmp_path, f'url = "http://127.0.0.1:8123"\n'
                                          f'token_file = "{token_file(tmp_path)}"\n'
                                          'allow_entities = ["light.*"]\n'))
    config = load(str(path), {})
    assert "ha" not in config.devices  # a tool provider, in a device's table
    assert [tool.name for tool in config.tool_providers["ha"].common.tools] == list(TOOL_NAMES)
    assert TOKEN in config.secrets()
    device = config.tool_providers["ha"].build()  # built again by the daemon: its own tools
    assert device.secrets() == (TOKEN,)


@pytest.mark.parametrize("setting, problem", [
    ('url = "ftp://x"', "url: required: Home Assistant's base URL"),
    ('token_file = "ha.token"', "token_file: an absolute path, or a credential's name"),
    ("allow_entities = []", "allow_entities: allow at least one entity"),
    ('allow_entities = ["Light.Bed"]', "allow_entities: 'Light.Bed' is not entity ids"),
    ('allow_services = ["turn_on"]', "allow_services: 'turn_on' is not services"),
    ('tools = [{ name = "x", description = "y" }]', "tools: a homeassistant device offers "
                                                    "its own tools"),
])
def test_a_bad_setting_is_named(tmp_path, setting, problem):
    settings = {"url": 'url = "http://127.0.0.1:8123"',
                "token_file": f'token_file = "{token_file(tmp_path)}"',
                "allow_entities": 'allow_entities = ["light.*"]'}
    settings[setting.partition(" ")[0]] = setting
    path = tmp_path / "config.toml"
    path.write_text(config_text(tmp_path, "\n".join(settings.values()) + "\n"))
    with pytest.raises(ConfigError) as error:
        load(str(path), {})
    assert problem in str(error.value)
    assert TOKEN not in str(error.value)


def test_an_unreadable_token_file_names_the_file_not_a_token(tmp_path):
    with pytest.raises(SettingError) as error:
        HomeAssistantTools.from_settings(Common("ha", frozenset()), {
            "url": "http://127.0.0.1:8123", "token_file": str(tmp_path / "gone"),
            "allow_entities": ["light.*"]})
    assert error.value.key == "token_file" and "No such file" in error.value.problem


# ---------------------------------------------------------------------------
# End to end: the daemon, the scripted mock model and a real Home Assistant
# (tests/homeassistant.py) with its demo integration.
# ---------------------------------------------------------------------------

HOST_ONLY = pytest.mark.not_emulated(
    reason="Home Assistant is a host peer: its venv is built by the host's Python "
           "(toolchain/dev.sh), and under qemu its start alone would take minutes")
ALLOWED, OUTSIDE = "light.bed_light", "light.kitchen_lights"  # off and on in the demo
CALLS = {
    "turn-on": ("ha_call_service", {"domain": "light", "service": "turn_on",
                                    "entity_id": ALLOWED}),
    "outside": ("ha_call_service", {"domain": "light", "service": "turn_off",
                                    "entity_id": OUTSIDE}),
    "state": ("ha_get_state", {"entity_id": ALLOWED}),
    "list": ("ha_list_entities", {}),
}


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    ha = harness.started(tmp_path_factory.mktemp("home-assistant"))
    yield ha
    assert ha.stop() == 0, ha.log()


@pytest.fixture(scope="module")
def agent(tmp_path_factory, mock, home):
    directory = tmp_path_factory.mktemp("agent")
    token = directory / "ha.token"
    # what a user gives the board: a long-lived token from their profile
    long_lived = home.long_lived_token("homeagent test")
    token.write_text(long_lived + "\n")
    token.chmod(0o600)
    providers = {name: {"headers": {"x-mock-tool-call": json.dumps(
                     {"name": tool, "arguments": json.dumps(arguments)})}}
                 for name, (tool, arguments) in CALLS.items()}
    device = "\n".join(["[devices.home]", 'type = "homeassistant"',
                        f"url = {toml_value(home.url)}", f"token_file = {toml_value(str(token))}",
                        f"allow_entities = {toml_value([ALLOWED, 'sensor.outside_*'])}",
                        'allow_services = ["light.turn_on", "light.turn_off"]'])
    daemon = Daemon(directory, mock.url, providers=providers, default_provider="state",
                    extra=device).start()
    daemon.token = long_lived
    yield daemon
    assert daemon.stop() == 0, daemon.log()
    assert long_lived not in daemon.log()


def ask(daemon, provider: str) -> dict:
    """The tool result of one ask whose model makes the provider's call."""
    with daemon.client() as client:
        replies = list(client.request("ask", prompt="the lights", provider=provider,
                                      session=provider))
    assert replies[-1]["type"] == "done", replies
    [result] = [reply for reply in replies if reply["type"] == "tool_result"]
    return result


@HOST_ONLY
def test_the_model_turns_on_a_demo_light(home, agent):
    assert home.state(ALLOWED)["state"] == "off"
    result = ask(agent, "turn-on")
    assert result["is_error"] is False
    assert result["content"].startswith(f"called light.turn_on; {ALLOWED}: on ("), result
    assert home.state(ALLOWED)["state"] == "on"  # the REST call returns once it is done


@HOST_ONLY
def test_an_entity_outside_the_allow_list_is_refused(home, agent):
    assert home.state(OUTSIDE)["state"] == "on"
    result = ask(agent, "outside")
    assert result["is_error"] is True
    assert result["content"] == ("refused, nothing was sent to Home Assistant: "
                                 f"{OUTSIDE} is not in this device's allow-list")
    assert home.state(OUTSIDE)["state"] == "on"


@HOST_ONLY
def test_a_state_reaches_the_model_summarized(home, agent, mock):
    state = home.state(ALLOWED)
    mock.clear()
    result = ask(agent, "state")
    assert result["is_error"] is False
    assert result["content"].startswith(f"{ALLOWED}: {state['state']} (")
    assert f'friendly_name="{state["attributes"]["friendly_name"]}"' in result["content"]
    first, second = mock.requests()
    [back] = [m for m in second["body"]["messages"] if m["role"] == "tool"]
    assert back["content"] == result["content"]
    with agent.client() as client:
        status = client.call("status")
    [device] = status["tool_providers"]  # a tool provider, no longer a device
    assert status["devices"] == []
    assert device["kind"] == "homeassistant" and device["state"] == "running"
    assert agent.token not in json.dumps(device)


@HOST_ONLY
def test_the_list_is_the_allowed_entities_of_the_real_house(home, agent):
    states = {s["entity_id"]: s for s in home.get("/api/states")}
    wanted = sorted(e for e in states if e == ALLOWED or e.startswith("sensor.outside_"))
    assert len(wanted) >= 2 and OUTSIDE in states  # the demo has a glob's worth, and more
    result = ask(agent, "list")
    assert result["is_error"] is False
    listed = [line.split(":", 1)[0] for line in result["content"].splitlines()]
    assert sorted(listed) == wanted, result["content"]
    for line in result["content"].splitlines():
        entity_id, summary = line.split(": ", 1)
        assert summary.startswith(states[entity_id]["state"]), line


# ---- a hostile Home Assistant: a gzip bomb, deep JSON, the token reflected ----

def test_a_hostile_home_assistant_is_named_in_bounded_memory_and_its_token_masked(tmp_path,
                                                                                   mock):
    """A real daemon whose model reads a state three times from a hostile
    server (tests/hostile.py) that ignores Accept-Encoding: identity:
    - a gzip body of 64 KiB inflating to 64 MiB: inflated in bounded pieces
      and refused past MAX_ANSWER_BYTES (it was inflated whole: +130 MB);
    - 200 000 nested arrays: a ToolError saying so (a bare RecursionError);
    - a state reflecting the Authorization header: the token is masked in
      the tool result, in what goes back to the model, and in the history."""
    from daemon_harness import MEMORY_HIGH_MIB
    from hostile import Hostile

    hostile = Hostile()
    call = json.dumps({"name": "ha_get_state",
                       "arguments": json.dumps({"entity_id": "light.hall"})})
    device = "\n".join(["[devices.home]", 'type = "homeassistant"',
                        f"url = {toml_value(hostile.url + '/home-assistant')}",
                        f"token_file = {toml_value(token_file(tmp_path))}",
                        'allow_entities = ["light.*"]'])
    daemon = Daemon(tmp_path, mock.url, providers={"mock": {"headers": {
        "x-mock-tool-call": call}}}, extra=device).start()

    def result(mode: str, session: str) -> str:
        hostile.mode = mode
        with daemon.client() as client:
            replies = list(client.request("ask", prompt="the hall?", session=session))
        assert replies[-1]["type"] == "done", replies
        [outcome] = [reply for reply in replies if reply["type"] == "tool_result"]
        return outcome["content"]

    try:
        bomb = result("gzip-bomb", "bomb")
        assert daemon.peak_rss_mib("a gzip body of 64 KiB inflating to 64 MiB") \
            < MEMORY_HIGH_MIB
        assert bomb == "Home Assistant: the answer is over 1048576 bytes"
        assert "accept-encoding: identity" in hostile.heads[-1]
        assert result("deep-json", "deep") == \
            "Home Assistant: the answer is JSON nested too deep to read"
        mock.clear()
        reflected = result("token-state", "token")
        assert reflected.startswith("light.hall: on (friendly_name=\"Bearer ***\")"), reflected
        assert TOKEN not in json.dumps(mock.requests())
        history = b"".join(path.read_bytes() for path in (tmp_path / "state").rglob("*")
                           if path.is_file())
        assert TOKEN.encode() not in history and b"Bearer ***" in history
    finally:
        hostile.close()
        assert daemon.stop() == 0, daemon.log()
    assert TOKEN not in daemon.log()
