"""A real Home Assistant for the tests: the `homeassistant` package in a
venv of its own, started on a random loopback port with a throwaway config.

    python tests/homeassistant.py build       # the venv, once (toolchain/dev.sh does it)
    ha = started(tmp_path)                    # onboarded (ha.token); a test skips without a venv
    ha.state("light.bed_light")               # REST API, authorized
    ha.add_mqtt(broker_port)                  # the MQTT integration, through its config flow
    ha.stop()

The venv lives under build/ (not in git), keyed by VERSION, and is complete
once its marker holds the build's figures. Besides homeassistant it holds
the requirements of every integration the config and the bootstrap load
(read from their manifests), so Home Assistant starts with --skip-pip and
never installs anything itself.

The config loads what onboarding, the REST API and the config-flow API need
(api, config, onboarding; the bootstrap adds its default integrations,
frontend among them) and the demo integration, whose entities the tests
use; not default_config, which pulls in dozens more.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import timeout

REPO = Path(__file__).resolve().parent.parent
# The newest release for Python 3.11: 2024.4 needs Python 3.12.
VERSION = "2024.3.3"
VENV = REPO / "build" / f"homeassistant-{VERSION}"
MARKER = VENV / "homeagent-build.json"
# acme 2.x (through hass-nabucasa, loaded by onboarding) uses josepy's 1.x
# API, which josepy 2 removed; the resolver picks 2.x without this pin.
EXTRA = ("josepy==1.15.0",)
CONFIGURED = ("api", "config", "onboarding", "demo", "mqtt")
# What the bootstrap sets up whatever the config (homeassistant/bootstrap.py)
# and the platforms the demo integration loads (components/demo/__init__.py).
BOOTSTRAP = ("homeassistant", "persistent_notification", "logger", "system_log", "frontend",
             "application_credentials", "backup", "hardware", "network", "system_health",
             "automation", "person", "scene", "script", "tag", "zone", "counter",
             "input_boolean", "input_button", "input_datetime", "input_number", "input_select",
             "input_text", "schedule", "timer", "sun")
DEMO_PLATFORMS = ("air_quality", "alarm_control_panel", "binary_sensor", "button", "camera",
                  "calendar", "climate", "cover", "date", "datetime", "event", "fan",
                  "humidifier", "light", "lock", "media_player", "number", "select", "sensor",
                  "siren", "stt", "switch", "text", "time", "update", "vacuum", "water_heater",
                  "weather", "tts", "mailbox", "notify", "image_processing", "device_tracker")
# Run in the venv: the requirements of these integrations and of every one they depend on.
_REQUIREMENTS = """
import json, pathlib, sys
import homeassistant.components as components
base, todo, seen, found = pathlib.Path(components.__file__).parent, sys.argv[1:], set(), set()
while todo:
    domain = todo.pop()
    if domain not in seen:
        seen.add(domain)
        manifest = json.loads((base / domain / "manifest.json").read_text())
        found.update(manifest.get("requirements", []))
        todo += manifest.get("dependencies", []) + manifest.get("after_dependencies", [])
print("\\n".join(sorted(found)))
"""
START_TIMEOUT = timeout(120)
PASSWORD = "homeagent-test-password"


class VenvError(RuntimeError):
    """The venv could not be built (no registry, a failed install): why."""


def ready_venv() -> Path | None:
    """The venv's directory when it was built completely, else None."""
    return VENV if MARKER.exists() else None


def build_venv() -> dict:
    """Build the venv (a previous complete one is kept); its figures."""
    if MARKER.exists():
        return json.loads(MARKER.read_text())
    partial = VENV.with_name(VENV.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    started = time.monotonic()
    _run([sys.executable, "-m", "venv", str(partial)])
    pip = [str(partial / "bin" / "python"), "-m", "pip", "install", "-q",
           "--disable-pip-version-check"]
    _run([*pip, f"homeassistant=={VERSION}", *EXTRA])
    python = str(partial / "bin" / "python")
    requirements = _run([python, "-c", _REQUIREMENTS, *CONFIGURED, *BOOTSTRAP,
                         *DEMO_PLATFORMS]).split()
    constraints = next(partial.glob("lib/python*/site-packages/homeassistant/"
                                    "package_constraints.txt"))
    _run([*pip, "-c", str(constraints), *requirements, *EXTRA])
    figures = {"version": VERSION, "install_seconds": round(time.monotonic() - started, 1),
               "requirements": requirements}
    # A venv is complete once Home Assistant started from it and was
    # onboarded: a missing requirement fails the build, not a test.
    home = HomeAssistant.start(partial, partial / "first-start", executable=python)
    figures["first_start_seconds"] = round(home.start_seconds, 1)
    home.stop()
    shutil.rmtree(partial / "first-start")
    (partial / MARKER.name).write_text(json.dumps(figures, indent=1) + "\n")
    partial.rename(VENV)  # a venv's scripts name its path, but python -m is used here
    return figures


def started(directory: Path) -> "HomeAssistant":
    """A Home Assistant running from the venv, built first if need be; the
    calling test skips, saying why, when no venv can be built."""
    if ready_venv() is None:
        try:
            figures = build_venv()
        except VenvError as error:
            pytest.skip(f"no Home Assistant {VERSION} venv could be built: {error}")
        print(f"Home Assistant venv built: {figures}")
    home = HomeAssistant.start(VENV, directory)
    print(f"Home Assistant {VERSION} running {home.start_seconds:.1f} s after its start")
    return home


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout(1800))
    except subprocess.TimeoutExpired:
        raise VenvError(f"{' '.join(argv[:6])}... took longer than {timeout(1800):g} s") from None
    if done.returncode != 0:
        raise VenvError(f"{' '.join(argv[:6])}... exited with {done.returncode}: "
                        f"{done.stderr.strip()[-2000:]}")
    return done.stdout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


CONFIG = """\
homeassistant:
  name: homeagent test
  latitude: 52.52
  longitude: 13.40
  elevation: 0
  unit_system: metric
  time_zone: UTC
  currency: EUR
  country: DE
http:
  server_host: 127.0.0.1
  server_port: {port}
api:
config:
onboarding:
demo:
"""


# Run by the venv's python: argv url and client name, the access token on
# stdin; prints the long-lived token (auth/long_lived_access_token).
_LONG_LIVED = """
import asyncio, sys
import aiohttp

async def main(url, name, token):
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url + "/api/websocket", timeout=30) as ws:
            assert (await ws.receive_json())["type"] == "auth_required"
            await ws.send_json({"type": "auth", "access_token": token})
            reply = await ws.receive_json()
            assert reply["type"] == "auth_ok", reply
            await ws.send_json({"id": 1, "type": "auth/long_lived_access_token",
                                "client_name": name, "lifespan": 1})
            reply = await ws.receive_json()
            assert reply.get("success"), reply
            print(reply["result"])

asyncio.run(main(sys.argv[1], sys.argv[2], sys.stdin.read().strip()))
"""


class HomeAssistant:
    """One `python -m homeassistant` in its own config directory, onboarded."""

    def __init__(self, process: subprocess.Popen, directory: Path, port: int,
                 venv: Path) -> None:
        self.process, self.dir, self.port, self.venv = process, directory, port, venv
        self.url = f"http://127.0.0.1:{port}"
        self.token = ""
        self.start_seconds = 0.0  # from the process start to RUNNING

    @classmethod
    def start(cls, venv: Path, directory: Path, executable: str | None = None) -> "HomeAssistant":
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        (directory / "configuration.yaml").write_text(CONFIG.format(port=port))
        started = time.monotonic()
        with open(directory / "hass.out", "ab") as out:
            process = subprocess.Popen(
                [executable or str(venv / "bin" / "python"), "-m", "homeassistant",
                 "-c", str(directory), "--skip-pip"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=directory,
                env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        home = cls(process, directory, port, venv)
        try:
            home._onboard(time.monotonic() + START_TIMEOUT)
        except BaseException:
            home.stop()
            raise
        home.start_seconds = time.monotonic() - started
        return home

    def _until(self, deadline: float, what: str, ready) -> object:
        """ready()'s first true value, polled until deadline; a process that
        ends or a deadline that passes is an AssertionError with the log."""
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"Home Assistant exited ({self.process.returncode}) "
                                     f"before {what}:\n{self.log()}")
            try:
                value = ready()
            except httpx.TransportError:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"Home Assistant: no {what} within {START_TIMEOUT:g} s:\n"
                                     f"{self.log()}")
            time.sleep(0.1)  # polling a server that says nothing when it is ready

    def _onboard(self, deadline: float) -> None:
        """The owner created through the onboarding API, logged in with an
        authorization code; then wait for every integration to be set up."""
        self._until(deadline, "onboarding API", lambda: httpx.get(
            self.url + "/api/onboarding", timeout=5).status_code == 200)
        client_id = self.url + "/"
        code = httpx.post(self.url + "/api/onboarding/users", timeout=timeout(30), json={
            "client_id": client_id, "name": "Test", "username": "test",
            "password": PASSWORD, "language": "en"}).raise_for_status().json()["auth_code"]
        self.token = httpx.post(self.url + "/auth/token", timeout=timeout(30), data={
            "grant_type": "authorization_code", "code": code, "client_id": client_id,
        }).raise_for_status().json()["access_token"]  # valid 30 minutes: a test module's life
        self._until(deadline, "RUNNING state",
                    lambda: self.get("/api/config")["state"] == "RUNNING")

    def long_lived_token(self, client_name: str) -> str:
        """A long-lived access token, as a user makes one on their profile
        page: asked for over Home Assistant's WebSocket API (which httpx does
        not speak) by the venv's own aiohttp, in a subprocess."""
        done = subprocess.run(
            [str(self.venv / "bin" / "python"), "-c", _LONG_LIVED, self.url, client_name],
            input=self.token, capture_output=True, text=True, timeout=timeout(60),
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        if done.returncode != 0:
            raise AssertionError(f"no long-lived token: {done.stderr[-2000:]}")
        return done.stdout.strip()

    def get(self, path: str):
        return httpx.get(self.url + path, headers=self._auth(), timeout=timeout(30)) \
            .raise_for_status().json()

    def post(self, path: str, body: dict):
        return httpx.post(self.url + path, headers=self._auth(), json=body,
                          timeout=timeout(30)).raise_for_status().json()

    def _auth(self) -> dict:
        return {"authorization": f"Bearer {self.token}"}

    def state(self, entity_id: str) -> dict:
        return self.get(f"/api/states/{entity_id}")

    def wait_state(self, entity_id: str, ready, what: str, wait: float = timeout(30)) -> dict:
        """The entity's state once ready(state) holds (a 404 is no state yet)."""
        def check():
            answer = httpx.get(f"{self.url}/api/states/{entity_id}", headers=self._auth(),
                               timeout=timeout(30))
            return answer.status_code == 200 and ready(answer.json()) and answer.json()
        return self._until(time.monotonic() + wait, what, check)

    def add_mqtt(self, broker_port: int, broker: str = "127.0.0.1") -> dict:
        """Home Assistant's MQTT integration, connected to the broker, added
        through the config-flow API as the UI does; the created entry."""
        flow = self.post("/api/config/config_entries/flow",
                         {"handler": "mqtt", "show_advanced_options": False})
        if flow.get("step_id") != "broker":
            raise AssertionError(f"the MQTT config flow did not ask for a broker: {flow}")
        entry = self.post(f"/api/config/config_entries/flow/{flow['flow_id']}",
                          {"broker": broker, "port": broker_port})
        if entry.get("type") != "create_entry":
            raise AssertionError(f"the MQTT config flow did not create an entry: {entry}")
        return entry

    def log(self, tail: int | None = 8000) -> str:
        """What Home Assistant wrote, its last `tail` characters (None: all)."""
        path = self.dir / "hass.out"
        text = path.read_text(errors="replace") if path.exists() else ""
        return text[-tail:] if tail else text

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                return self.process.wait(timeout(60))
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(timeout(60))


if __name__ == "__main__":
    if sys.argv[1:] != ["build"]:
        sys.exit("usage: python tests/homeassistant.py build")
    try:
        print(json.dumps(build_venv()))
    except VenvError as error:
        sys.exit(f"homeassistant venv: {error}")
