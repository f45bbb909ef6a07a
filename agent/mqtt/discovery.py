"""Home Assistant's MQTT discovery configs of one board (docs/mqtt.md).

One retained config message per entity, under
<discovery_prefix>/<component>/<board>/<object_id>/config, each with the
same device block: per-entity discovery, which every Home Assistant with
MQTT discovery reads (the single-message `device` discovery came in 2024.11,
after the 2024.3 that runs on the boards' Python 3.11).
"""

from __future__ import annotations

import json

from agent import __version__
from agent.core.replies import VOICE_STATES
from agent.mqtt.topics import Topics
from agent.mqtt.config import MqttConfig

EVENT_TYPES = ("answer", "tool_call")
TEXT_MAX = 255  # Home Assistant's limit for a text entity's value


def discovery_messages(config: MqttConfig, version: str = __version__, *,
                       timers: bool = False, voice: bool = False) -> list[tuple[str, bytes]]:
    """(topic, payload) of every discovery config of config.board, payloads
    compact UTF-8 JSON, to be published retained at QoS 1. config is the
    [mqtt] table (board, prefix, discovery_prefix are used); timers: the
    next timer's sensor too; voice: the board hears ([voice]), its voice
    state is a sensor too."""
    topics = Topics(config.prefix, config.board)
    board = config.board
    device = {"identifiers": [f"homeagent_{board}"], "name": f"homeagent {board}",
              "manufacturer": "homeagent", "model": "homeagent", "sw_version": version}
    common = {"availability_topic": topics.availability, "payload_available": "online",
              "payload_not_available": "offline", "device": device}
    wrap = '{"text": {{ value | tojson }}}'  # the value as a JSON string, whatever it holds
    entities = [
        ("text", "ask", {"name": "Ask", "command_topic": topics.ask, "command_template": wrap,
                         "max": TEXT_MAX, "icon": "mdi:chat-question"}),
        ("text", "announce", {"name": "Announce", "command_topic": topics.announce,
                              "command_template": wrap, "max": TEXT_MAX,
                              "icon": "mdi:bullhorn"}),
        ("sensor", "state", {"name": "State", "state_topic": topics.state,
                             "value_template": "{{ value_json.state }}",
                             "icon": "mdi:robot"}),
        ("event", "events", {"name": "Events", "state_topic": topics.event,
                             "event_types": list(EVENT_TYPES)}),
        ("button", "stop", {"name": "Stop", "command_topic": topics.stop,
                            "payload_press": "{}", "icon": "mdi:stop"}),
    ]
    if timers:
        # A timestamp: Home Assistant shows when. Its state topic only ever
        # holds a time (a null one is logged as invalid); with no timer the
        # fields' topic makes it unavailable, the board's availability too.
        entities.append(("sensor", "next_timer", {
            "name": "Next timer", "state_topic": topics.next_timer_at,
            "device_class": "timestamp", "json_attributes_topic": topics.next_timer,
            "availability": [{"topic": topics.availability},
                             {"topic": topics.next_timer, "value_template":
                              "{{ 'online' if value_json.at else 'offline' }}"}],
            "availability_mode": "all", "icon": "mdi:timer-outline"}))
    if voice:  # an enum sensor: Home Assistant offers its states to automations' triggers
        entities.append(("sensor", "voice", {"name": "Voice", "state_topic": topics.voice,
                                             "value_template": "{{ value_json.state }}",
                                             "device_class": "enum",
                                             "options": list(VOICE_STATES),
                                             "icon": "mdi:microphone"}))
    messages = []
    for component, object_id, fields in entities:
        # an entity with its own availability list has no availability_topic
        shared = {"device": device} if "availability" in fields else common
        payload = {**fields, "unique_id": f"homeagent_{board}_{object_id}",
                   "object_id": f"homeagent_{board}_{object_id}", "qos": 1, **shared}
        topic = f"{config.discovery_prefix}/{component}/{board}/{object_id}/config"
        messages.append((topic, json.dumps(payload, ensure_ascii=False,
                                           separators=(",", ":")).encode("utf-8")))
    return messages
