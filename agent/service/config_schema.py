"""What a loaded config is: frozen dataclasses, one per table of the TOML file
(agent/service/config.py reads and checks the file into these)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from agent.devices.hub import DeviceSpec
from agent.providers.health import Policy
from agent.providers.requests import Provider


@dataclass(frozen=True)
class ProviderEntry:
    provider: Provider
    retries: int
    fallback: tuple[str, ...] = ()  # as written; failover_order() follows them further
    policy: Policy = Policy()       # its cooldowns after failures
    retry_without_tools: bool = False  # a request refused for its tools is sent again without


@dataclass(frozen=True)
class DaemonConfig:
    socket: str
    socket_mode: int
    socket_group: str | None  # as written, for messages; None: the process's group
    socket_gid: int | None    # socket_group resolved, for chown
    allow_users: tuple[int, ...]
    allow_groups: tuple[int, ...]
    state_directory: str
    max_line_bytes: int
    client_queue: int
    shutdown_grace: float
    log_level: str
    max_clients: int = 64
    max_clients_per_user: int = 16
    max_announce_chars: int = 2000
    delta_interval_ms: int = 16


@dataclass(frozen=True)
class SessionConfig:
    system_prompt: str | None
    max_turns: int
    max_bytes: int
    max_tool_steps: int = 8
    max_tool_calls: int = 8
    max_tool_arguments: int = 65536
    max_answer_bytes: int = 1 << 20


@dataclass(frozen=True)
class WyomingConfig:
    """[wyoming]: the conversation service (agent/api/wyoming_service.py).
    listen is ("tcp", host, port), ("unix", path, 0) or None: off."""
    listen: tuple[str, str, int] | None = None
    allow: tuple = ()           # ipaddress networks allowed besides loopback
    max_connections: int = 8
    languages: tuple[str, ...] = ("en",)


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

    @property
    def enabled(self) -> bool:
        return self.broker is not None or self.unix is not None


@dataclass(frozen=True)
class Config:
    path: str
    daemon: DaemonConfig
    sessions: SessionConfig
    providers: Mapping[str, ProviderEntry]
    default_provider: str
    devices: Mapping[str, DeviceSpec] = field(default_factory=lambda: MappingProxyType({}))
    wyoming: WyomingConfig = WyomingConfig()
    mqtt: MqttConfig = MqttConfig()
    # What the daemon can run with but should not: logged at start and on
    # reload, printed by `serve --check`. "FILE:LINE: KEY: what" like an error.
    warnings: tuple[str, ...] = ()

    def secrets(self) -> tuple[str, ...]:
        """Every provider's key and credential headers, the devices'
        credentials and the broker's password: what the masker hides."""
        keys = tuple(secret for entry in self.providers.values()
                     for secret in entry.provider.secrets())
        devices = tuple(secret for spec in self.devices.values() for secret in spec.secrets)
        return keys + devices + ((self.mqtt.password,) if self.mqtt.password else ())
