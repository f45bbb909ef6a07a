"""[wyoming]: the conversation service's settings (agent/wyoming/service.py);
agent/service/config.py reads the table into this."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WyomingConfig:
    """[wyoming]: the conversation service (agent/wyoming/service.py).
    listen is ("tcp", host, port), ("unix", path, 0) or None: off."""
    listen: tuple[str, str, int] | None = None
    allow: tuple = ()           # ipaddress networks of TCP peers let in
    allow_loopback: bool = False  # TCP peers on this host: anything on it, by opt-in only
    max_connections: int = 8
    max_connections_per_peer: int = 4   # of one address (TCP) or one uid (Unix socket)
    reserved_connections: int = 2       # kept for Unix-socket peers and addresses named in allow
    idle_timeout: float = 60.0  # seconds without an event (no ask of its running): closed
    event_timeout: float = 10.0  # seconds an event may take to arrive once it has begun
    queue_bytes: int = 1 << 20  # of events waiting for one peer
    socket_mode: int = 0o660
    socket_gid: int | None = None  # the Unix socket's group; None: the daemon's
    languages: tuple[str, ...] = ("en",)
