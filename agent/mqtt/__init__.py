"""The MQTT door, the board on the house's broker (docs/mqtt.md): codec.py
is the MQTT 3.1.1 wire (sans-IO), topics.py the topic tree and what may
arrive on it, messages.py the daemon's replies as outgoing messages,
discovery.py Home Assistant's discovery configs, config.py its settings,
and service.py the trio shell that connects them to the broker and the center."""
