"""[wyoming]: the conversation service's settings (agent/wyoming/service.py);
agent/service/config.py reads the table into this."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WyomingConfig:
    """[wyoming]: the conversation service (agent/wyoming/service.py).
    listen is ("tcp", host, port), ("unix", path, 0) or None: off."""
    listen: tuple[str, str, int] | None = None
    allow: tuple = ()           # ipaddress networks allowed besides loopback
    max_connections: int = 8
    languages: tuple[str, ...] = ("en",)
