"""A log line for a failure that can repeat many times a second (a refused
connection, a bad payload, accept() out of descriptors): the first is
logged, the next ones are counted and summed up at most once per interval,
so a flood costs the journal one line per interval, not one per attempt."""

from __future__ import annotations

import logging
import time

LOG_INTERVAL = 10.0  # seconds


class Throttled:
    def __init__(self, logger: logging.Logger, level: int = logging.WARNING,
                 interval: float = LOG_INTERVAL) -> None:
        self._log = logger
        self._level = level
        self._interval = interval
        self._last = -interval
        self._suppressed = 0

    def note(self, message: str, *args) -> None:
        now = time.monotonic()
        if now - self._last < self._interval:
            self._suppressed += 1
            return
        more = f" (and {self._suppressed} more like it)" if self._suppressed else ""
        self._log.log(self._level, message + more, *args)
        self._last, self._suppressed = now, 0
