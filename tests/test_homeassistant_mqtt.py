"""The board in a real Home Assistant (tests/homeassistant.py) through a
real Mosquitto (tests/mosquitto.py): the daemon's MQTT service publishes
its discovery configs (agent/mqtt/discovery.py), Home Assistant's MQTT
integration, added through its config flow, makes the board's entities
from them, and Home Assistant's services reach the daemon: setting the text
entity asks the model (the mock's recorded requests show it), pressing the
button stops the ask, the announce entity speaks on the board's voice, the
state sensor follows the board (speaking while the voice is held), and a
board that stops is unavailable.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from daemon_harness import Daemon
import homeassistant as harness  # tests/homeassistant.py
from mosquitto import Broker, require_mosquitto
from test_timers_daemon import provider as timer_provider

pytestmark = pytest.mark.not_emulated(
    reason="Home Assistant is a host peer: its venv is built by the host's Python "
           "(toolchain/dev.sh), and under qemu its start alone would take minutes")

BOARD, PREFIX = "kitchen", "homeagent"
ENTITIES = {leaf: f"{component}.homeagent_{BOARD}_{leaf}"
            for component, leaf in (("text", "ask"), ("text", "announce"),
                                    ("sensor", "state"), ("event", "events"),
                                    ("button", "stop"))}
DELAY_MS = 150  # between the mock's deltas: an answer takes seconds, long enough to stop


def topic(leaf: str) -> str:
    return f"{PREFIX}/{BOARD}/{leaf}"


@pytest.fixture(scope="module")
def house(tmp_path_factory, mock):
    """(Home Assistant with its MQTT integration on the broker, the board's
    daemon on the same broker, a watcher of the board's topics)."""
    require_mosquitto()
    broker = Broker(tmp_path_factory.mktemp("mosquitto")).start()
    watcher = broker.subscribe(f"{PREFIX}/{BOARD}/#")
    home = daemon = None
    try:
        home = harness.started(tmp_path_factory.mktemp("home-assistant"))
        home.add_mqtt(broker.port)
        mqtt = {"broker": broker.host, "port": broker.port, "board": BOARD, "keepalive": 5}
        directory = tmp_path_factory.mktemp("board")
        # a voice that says nothing while spoken.txt.hold exists
        speech = ["sh", "-c", 'while [ -e "$0.hold" ]; do sleep 0.02; done; '
                  'printf "%s\\n" "$1" >> "$0"', str(directory / "spoken.txt"), "{text}"]
        daemon = Daemon(directory, mock.url,
                        providers={"mock": {"headers": {"x-mock-delay-ms": str(DELAY_MS)}},
                                   "timer": timer_provider(3600)},
                        extra="[mqtt]\n" + "".join(f"{k} = {json.dumps(v)}\n"
                                                   for k, v in mqtt.items())
                        + '[devices.voice]\ntype = "command"\nspeech = true\n'
                        + f"argv = {json.dumps(speech)}\n").start()
        yield home, daemon, watcher
    finally:
        if daemon is not None:
            daemon.stop()
        if home is not None:
            assert home.stop() == 0, home.log()
        watcher.close()
        broker.stop()


def test_the_board_s_entities_exist_and_are_available(house):
    home, _, _ = house
    for entity_id in ENTITIES.values():
        state = home.wait_state(entity_id, lambda s: s["state"] != "unavailable",
                                f"{entity_id} available")
        assert state["attributes"]["friendly_name"].startswith(f"homeagent {BOARD} ")
    assert home.wait_state(ENTITIES["state"], lambda s: s["state"] == "idle",
                           "the board idle")
    # the configs passed the installed integration's schemas without a complaint
    complaints = [line for line in home.log(tail=None).splitlines()
                  if "components.mqtt" in line and ("ERROR" in line or "WARNING" in line)]
    assert complaints == []


def test_the_next_timer_sensor_shows_when_it_rings_and_is_unavailable_without(house):
    home, daemon, _ = house
    sensor = "sensor.homeagent_kitchen_next_timer"
    home.wait_state(sensor, lambda s: s["state"] == "unavailable", "no timer: unavailable")
    with daemon.client() as client:
        replies = list(client.request("ask", prompt="a tea timer please", provider="timer"))
        [result] = [r for r in replies if r["type"] == "tool_result"]
        assert not result["is_error"], replies
        [timer] = client.call("timers")["timers"]
    state = home.wait_state(sensor, lambda s: s["state"] not in ("unavailable", "unknown"),
                            "the timer's time")
    # Home Assistant's timestamp: the same instant, in UTC
    assert dt.datetime.fromisoformat(state["state"]) == dt.datetime.fromisoformat(timer["at"])
    assert state["attributes"]["label"] == "tea"
    with daemon.client() as client:
        client.call("timers", cancel=timer["id"])
    home.wait_state(sensor, lambda s: s["state"] == "unavailable", "cancelled: unavailable")

def test_setting_the_text_entity_makes_the_board_ask(house, mock):
    home, _, watcher = house
    mock.clear()
    prompt = 'What is "the" temperature? ✓'
    home.post("/api/services/text/set_value", {"entity_id": ENTITIES["ask"], "value": prompt})
    done = json.loads(watcher.wait(topic("done"), wait=30).payload)
    assert done["finish_reason"] == "stop" and done["text"]
    [request] = mock.requests()
    assert request["body"]["messages"][-1] == {"role": "user", "content": prompt}
    # Home Assistant's event entity got the answer
    home.wait_state(ENTITIES["events"], lambda s: s["attributes"].get("event_type") == "answer",
                    "the answer event")


def test_pressing_the_button_stops_the_ask(house):
    home, _, watcher = house
    home.post("/api/services/text/set_value", {"entity_id": ENTITIES["ask"],
                                                "value": "tell me a long story"})
    home.wait_state(ENTITIES["state"], lambda s: s["state"] == "thinking", "the board thinking")
    home.post("/api/services/button/press", {"entity_id": ENTITIES["stop"]})
    done = json.loads(watcher.wait(topic("done"), lambda m: json.loads(m.payload)
                                   ["finish_reason"] == "stopped", wait=30).payload)
    assert done["id"] == "mqtt-2"  # the second ask, not the answered first one
    home.wait_state(ENTITIES["state"], lambda s: s["state"] == "idle", "the board idle again")


def test_the_announce_entity_speaks_and_the_sensor_says_speaking(house):
    home, daemon, _ = house
    hold, spoken = daemon.dir / "spoken.txt.hold", daemon.dir / "spoken.txt"
    hold.touch()
    try:
        home.post("/api/services/text/set_value", {"entity_id": ENTITIES["announce"],
                                                    "value": "Dinner is ready."})
        home.wait_state(ENTITIES["state"], lambda s: s["state"] == "speaking",
                        "the board speaking")
        assert not spoken.exists() or "Dinner is ready." not in spoken.read_text()
    finally:
        hold.unlink()
    home.wait_state(ENTITIES["state"], lambda s: s["state"] == "idle", "the board idle")
    assert "Dinner is ready." in spoken.read_text().splitlines()


def test_a_board_that_stops_is_unavailable(house):
    home, daemon, _ = house
    assert daemon.stop() == 0, daemon.log()  # its clean stop publishes offline
    for entity_id in ENTITIES.values():
        home.wait_state(entity_id, lambda s: s["state"] == "unavailable",
                        f"{entity_id} unavailable")
