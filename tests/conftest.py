"""Shared test helpers.

HOMEAGENT_TEST_SCALE (float, default 1.0) scales every hypothesis example
count in the golden tests: 0.2 for a quick run, 10 for a soak.
"""

from __future__ import annotations

import os


def _scale() -> float:
    raw = os.environ.get("HOMEAGENT_TEST_SCALE", "1.0")
    try:
        value = float(raw)
    except ValueError:
        raise RuntimeError(f"HOMEAGENT_TEST_SCALE must be a number, got {raw!r}") from None
    if not value > 0:
        raise RuntimeError(f"HOMEAGENT_TEST_SCALE must be positive, got {raw!r}")
    return value


TEST_SCALE = _scale()


def scaled(n: int) -> int:
    """A hypothesis max_examples of n at scale 1.0, never below 1."""
    return max(1, int(n * TEST_SCALE))
