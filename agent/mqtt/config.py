"""[mqtt]: the board's settings on the house's broker (agent/mqtt/service.py);
agent/service/config.py reads the table into these."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MqttTls:
    ca_file: str
    cert_file: str | None = None  # a client certificate, with key_file
    key_file: str | None = None


@dataclass(frozen=True)
class MqttConfig:
    """[mqtt]: the board on the house's broker (agent/mqtt/, docs/mqtt.md).
    Off unless broker or unix is set. password is read from password_file
    at load and masked like the API keys (Config.secrets)."""
    broker: str | None = None
    port: int = 1883
    unix: str | None = None
    tls: MqttTls | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    board: str = "homeagent"
    client_id: str = "homeagent-homeagent"
    prefix: str = "homeagent"
    keepalive: int = 60
    reconnect_min: float = 1.0
    reconnect_max: float = 60.0
    max_payload: int = 16 * 1024
    max_asks: int = 4
    deltas: bool = False
    discovery: bool = True
    discovery_prefix: str = "homeassistant"
    # the daemon's sessions an MQTT ask may name as they are; any other name
    # given over MQTT is the session mqtt-<name> (messages.SessionNames)
    sessions: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.broker is not None or self.unix is not None
