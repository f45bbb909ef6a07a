"""One `[mcp.NAME]` table of the config, read by agent/service/config.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from agent.providers.requests import SECRET_HEADERS


@dataclass(frozen=True)
class McpConfig:
    name: str                               # the tools' prefix: NAME_tool
    # stdio: the program and its arguments (no shell), its environment
    # (added to the daemon's), its working directory
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cwd: str | None = None
    # streamable HTTP: the endpoint, headers, and the bearer token
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    token: str | None = None
    start: str = "lazy"                     # "lazy": at the first ask with tools; "start"
    allow: tuple[str, ...] = ()             # globs of the server's tool names; none: all
    deny: tuple[str, ...] = ()
    timeout: float = 30.0                   # seconds a call may take
    start_timeout: float = 10.0             # seconds for the handshake and the first listing
    max_result_bytes: int = 16 * 1024       # of a result's text told to the model
    max_message_bytes: int = 2 * 1024 * 1024  # of one message read from the server
    max_concurrent: int = 4                 # calls at once
    restart_max_delay: float = 60.0         # the longest wait before a restart

    @property
    def transport(self) -> str:
        return "stdio" if self.argv else "http"

    def secrets(self) -> tuple[str, ...]:
        """What the masker hides: the token, and credential headers' values."""
        return ((self.token,) if self.token else ()) + tuple(
            value.rpartition(" ")[2] for name, value in self.headers.items()
            if name.lower() in SECRET_HEADERS)
