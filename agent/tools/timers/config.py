"""[timers]: the built-in timer and reminder tools (agent/service/config.py reads it)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.core.replies import Sound

MAX_RING_SECONDS = 3600.0


@dataclass(frozen=True)
class TimersConfig:
    enabled: bool = True
    max_timers: int = 32            # timers and reminders set at once
    ring_limit_seconds: float = 60.0  # a ring nobody stops ends after this
    ring_interval_seconds: float = 5.0  # from one repetition's start to the next
    timezone: str = ""              # a zoneinfo key; "": the system's
    chime: Sound | None = None      # played before each repetition's label, on this board
