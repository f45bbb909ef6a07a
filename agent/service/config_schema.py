"""What a loaded config is: frozen dataclasses, one per table of the TOML file
(agent/service/config.py reads and checks the file into these). The doors'
own tables are beside their doors: agent/mqtt/config.py, agent/wyoming/config.py,
agent/voice/config.py; the timers' beside them, agent/tools/timers/config.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from agent.devices.base import DeviceSpec
from agent.mqtt.config import MqttConfig
from agent.providers.health import Policy
from agent.providers.requests import Provider
from agent.tools.mcp.config import McpConfig
from agent.tools.timers.config import TimersConfig
from agent.voice.config import VoiceConfig
from agent.wyoming.config import WyomingConfig


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
    max_resumes: int = 2           # an answer broken mid-stream goes on at most this often
    memory_sessions: int = 16      # histories held in memory, the most recently used
    memory_bytes: int = 1 << 20    # of their files together
    unnamed_keep: int = 64         # unnamed sessions kept on disk
    unnamed_max_age: float = 7 * 86400.0  # seconds; 0: no age limit


@dataclass(frozen=True)
class Config:
    path: str
    daemon: DaemonConfig
    sessions: SessionConfig
    providers: Mapping[str, ProviderEntry]
    default_provider: str
    devices: Mapping[str, DeviceSpec] = field(default_factory=lambda: MappingProxyType({}))
    # tool providers configured in a device's table (type = "homeassistant")
    tool_providers: Mapping[str, DeviceSpec] = field(
        default_factory=lambda: MappingProxyType({}))
    # MCP servers, as [mcp.NAME]
    mcp: Mapping[str, McpConfig] = field(default_factory=lambda: MappingProxyType({}))
    wyoming: WyomingConfig = WyomingConfig()
    mqtt: MqttConfig = MqttConfig()
    voice: VoiceConfig = VoiceConfig()
    timers: TimersConfig = TimersConfig()
    # What the daemon can run with but should not: logged at start and on
    # reload, printed by `serve --check`. "FILE:LINE: KEY: what" like an error.
    warnings: tuple[str, ...] = ()

    def secrets(self) -> tuple[str, ...]:
        """Every provider's key and credential headers, the devices'
        credentials, the MCP servers' tokens and credential headers, and the
        broker's password: what the masker hides."""
        keys = tuple(secret for entry in self.providers.values()
                     for secret in entry.provider.secrets())
        devices = tuple(secret for spec in (*self.devices.values(),
                                            *self.tool_providers.values())
                        for secret in spec.secrets)
        servers = tuple(secret for server in self.mcp.values() for secret in server.secrets())
        return keys + devices + servers + ((self.mqtt.password,) if self.mqtt.password else ())
