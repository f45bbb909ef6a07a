"""Home Assistant discovery configs (agent/mqtt/discovery.py), and the
broker harness (tests/mosquitto.py) against the real Mosquitto."""

from __future__ import annotations

import json

import pytest

from agent.mqtt.discovery import EVENT_TYPES, discovery_messages
from agent.mqtt.topics import Topics, board_name
from agent.mqtt.config import MqttConfig
from mosquitto import Broker, broker  # noqa: F401 (a fixture)


def test_one_retained_config_per_entity_with_one_device_block():
    config = MqttConfig(broker="127.0.0.1", board="kitchen", prefix="ha1",
                        discovery_prefix="hass")
    messages = discovery_messages(config, version="9.9")
    topics = [topic for topic, _ in messages]
    assert topics == ["hass/text/kitchen/ask/config", "hass/text/kitchen/announce/config",
                      "hass/sensor/kitchen/state/config", "hass/event/kitchen/events/config",
                      "hass/button/kitchen/stop/config"]
    payloads = [json.loads(payload) for _, payload in messages]
    devices = {json.dumps(p["device"], sort_keys=True) for p in payloads}
    assert len(devices) == 1
    assert payloads[0]["device"] == {"identifiers": ["homeagent_kitchen"],
                                     "name": "homeagent kitchen", "manufacturer": "homeagent",
                                     "model": "homeagent", "sw_version": "9.9"}
    assert len({p["unique_id"] for p in payloads}) == len(payloads)
    for p in payloads:
        assert (p["availability_topic"], p["payload_available"],
                p["payload_not_available"]) == ("ha1/kitchen/availability", "online", "offline")
    ask, announce, state, events, stop = payloads
    assert ask["command_topic"] == "ha1/kitchen/ask"
    assert announce["command_topic"] == "ha1/kitchen/announce"
    assert ask["command_template"] == announce["command_template"] \
        == '{"text": {{ value | tojson }}}'
    assert (state["state_topic"], state["value_template"]) == ("ha1/kitchen/state",
                                                               "{{ value_json.state }}")
    assert (events["state_topic"], events["event_types"]) == ("ha1/kitchen/event",
                                                              list(EVENT_TYPES))
    assert (stop["command_topic"], stop["payload_press"]) == ("ha1/kitchen/stop", "{}")


def test_topics_and_board_names():
    topics = Topics("homeagent", "hall")
    assert topics.ask == "homeagent/hall/ask"
    assert topics.of("attic", "announce") == "homeagent/attic/announce"
    assert topics.house_share == "$share/homeagent/homeagent/house/ask"
    assert topics.subscriptions() == [
        ("homeagent/hall/ask", 2), ("homeagent/hall/announce", 2), ("homeagent/hall/stop", 2),
        ("$share/homeagent/homeagent/house/ask", 2), ("homeagent/+/availability", 1),
        ("homeagent/+/voice", 1), ("homeagent/house/claim", 0)]
    assert board_name("Pi-Kitchen.local") == "pi-kitchen-local"
    assert board_name("Büro 2") == "b-ro-2"
    assert board_name("...") == "homeagent"


def test_broker_keeps_a_persistent_session_across_kill_9(broker):
    """The harness itself: a QoS 1 message for a disconnected persistent
    session survives the broker's kill -9 and restart on the same port."""
    import subprocess

    from conftest import timeout

    options = broker.client_options()
    # a persistent session subscribed to t/queued, then gone
    subprocess.run(["mosquitto_sub", *options, "-i", "keeper", "-c", "-q", "1",
                    "-t", "t/queued", "-E"], check=True, timeout=timeout(10))
    saves = broker.saves()
    broker.publish("t/queued", b"kept")
    broker.wait_saved(saves)  # it saves just after each change: a kill -9 before loses it
    broker.kill()
    broker.start()
    got = subprocess.run(["mosquitto_sub", *options, "-i", "keeper", "-c", "-q", "1",
                          "-t", "t/queued", "-C", "1", "-W", str(int(timeout(10)))],
                         capture_output=True, check=True, timeout=timeout(15))
    assert got.stdout == b"kept\n"
