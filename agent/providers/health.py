"""The health of each provider, sans-IO: a circuit breaker per (provider,
model) with an injected clock, and the failover order of the config's
`fallback` lists.

    board = HealthBoard(clock=trio.current_time)
    health = board.get("openai", "gpt-4o-mini", Policy())
    if health.admit():            # healthy, or the one try after a cooldown
        ...                       # the request
        health.succeeded(first_delta_seconds, usage)   # or failed(...), disable(...), release()

A failure cools the provider: cooldown seconds, doubling with each failure
in a row up to max_cooldown, or as long as a 429's Retry-After said (up to
max_cooldown too). While it cools, asks go to its fallback. Once the
cooldown is over, one ask is let through (half-open): its success makes the
provider healthy again, its failure cools it for twice as long. Nothing is
ever sent to test a provider in the background: only asks try it, so a
provider that costs money per request is never charged for a health check.
A refused key (401, 403) disables the provider until the config is
reloaded: trying again cannot help, a new key can.
"""

from __future__ import annotations

import datetime
import enum
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Mapping

LATENCY_WINDOW = 256  # first-delta latencies kept per provider: status' p50 and p99
# The token counts summed per provider for status (the fields of
# agent.stream.records.Usage): what the prompt cache saved shows there.
TOKEN_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


class State(enum.StrEnum):
    HEALTHY = "healthy"    # asks go to it
    COOLING = "cooling"    # failed: asks go to its fallback until the cooldown is over
    RETRYING = "retrying"  # the cooldown is over: the next ask tries it (half-open)
    DISABLED = "disabled"  # its key was refused: no ask until the config is reloaded


@dataclass(frozen=True, slots=True)
class Policy:
    cooldown: float = 30.0        # after the first failure in a row
    max_cooldown: float = 1800.0  # the doubling stops here; a Retry-After is capped here too


class Health:
    """One (provider, model): its state, last error, counts and latencies."""

    def __init__(self, policy: Policy, clock: Callable[[], float]) -> None:
        self.policy = policy
        self._clock = clock
        self._until: float | None = None  # while cooling: when the next try may go
        self._disabled = False
        self._probing = False             # the one ask of the half-open state is running
        self.failures = 0                 # in a row
        self.last_error: str | None = None
        self.answered = 0
        self.failed_count = 0
        self.failovers = 0                # failures that handed an ask to the next provider
        self.skipped = 0                  # asks sent past it while it cooled or was disabled
        self._latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.tokens = dict.fromkeys(TOKEN_COUNTS, 0)  # of the answers, as each reported them

    @property
    def state(self) -> State:
        if self._disabled:
            return State.DISABLED
        if self._until is None:
            return State.HEALTHY
        return State.COOLING if self._clock() < self._until else State.RETRYING

    def admit(self) -> bool:
        """Whether an ask may go to it now. After a cooldown one ask is let
        through, and the others wait for its outcome."""
        state = self.state
        if state is State.HEALTHY:
            return True
        if state is State.RETRYING and not self._probing:
            self._probing = True
            return True
        return False

    def succeeded(self, first_delta: float | None, usage=None) -> None:
        """An answer came; first_delta is the seconds to its first delta, if
        it had one; usage its token counts (a Usage), if it reported any."""
        self._until, self._probing, self.failures = None, False, 0
        self.answered += 1
        if first_delta is not None:
            self._latencies.append(first_delta)
        if usage is not None:
            for name in TOKEN_COUNTS:
                self.tokens[name] += getattr(usage, name) or 0

    def failed(self, error: str, retry_after: float | None = None) -> None:
        """It failed (no answer, a 5xx, an error event...): it cools."""
        self.failures += 1
        self.failed_count += 1
        self.last_error = error
        policy = self.policy
        wait = min(policy.max_cooldown, policy.cooldown * 2 ** min(self.failures - 1, 64)
                   if retry_after is None else retry_after)
        self._until = self._clock() + wait
        self._probing = False

    def disable(self, error: str) -> None:
        """Its key was refused: disabled until the config is reloaded."""
        self.failures += 1
        self.failed_count += 1
        self.last_error = error
        self._disabled, self._probing = True, False

    def release(self) -> None:
        """An admitted ask ended saying nothing about the provider (cancelled,
        refused as a bad request): the half-open try goes to the next ask."""
        self._probing = False

    def snapshot(self, wall: float) -> dict:
        """The status fields; wall is the wall-clock time now, to show when a cooldown ends."""
        state = self.state
        shown: dict = {"state": state.value}
        if state is State.COOLING:
            left = self._until - self._clock()
            shown["retry_in"] = round(left, 3)
            shown["until"] = datetime.datetime.fromtimestamp(
                wall + left, datetime.timezone.utc).isoformat(timespec="seconds")
        if state is State.DISABLED:
            shown["disabled"] = "its key was refused; reload the config to try it again"
        shown["last_error"] = self.last_error
        shown["failures_in_a_row"] = self.failures
        shown["counts"] = {"answered": self.answered, "failed": self.failed_count,
                           "failovers": self.failovers, "skipped": self.skipped}
        shown["first_delta"] = latency_summary(self._latencies)
        shown["tokens"] = dict(self.tokens)
        return shown


def latency_summary(samples) -> dict:
    """p50 and p99 (nearest rank) in seconds of the latencies kept, and how many."""
    ordered = sorted(samples)
    if not ordered:
        return {"samples": 0, "p50": None, "p99": None}

    def rank(p: float) -> float:
        return round(ordered[max(0, -(-len(ordered) * p // 100) - 1)], 6)

    return {"samples": len(ordered), "p50": rank(50), "p99": rank(99)}


class HealthBoard:
    """The Health of every (provider, model) the config names."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._clock, self._wall = clock, wall
        self._entries: dict[tuple[str, str], tuple[object, Health]] = {}
        self._configs: Mapping[tuple[str, str], object] = {}  # of the config loaded last

    def now(self) -> float:
        return self._clock()

    def get(self, name: str, model: str, policy: Policy, config: object = None) -> Health:
        """The Health of this provider and model; config is what it was made
        for (a reload that changes it starts the provider afresh)."""
        key = (name, model)
        if key in self._configs and self._configs[key] != config:
            # An ask still running on the config before a reload: what it
            # finds out is about a provider no longer configured so.
            return Health(policy, self._clock)
        entry = self._entries.get(key)
        if entry is None or entry[0] != config or entry[1].policy != policy:
            entry = self._entries[key] = (config, Health(policy, self._clock))
        return entry[1]

    def reconfigure(self, configs: Mapping[tuple[str, str], object]) -> None:
        """A config reload: entries of providers gone or changed are dropped,
        and a disabled one starts afresh (its key may be new)."""
        self._configs = dict(configs)
        for key, (config, health) in list(self._entries.items()):
            if configs.get(key, None) != config or health.state is State.DISABLED:
                del self._entries[key]

    def snapshot(self, name: str, model: str) -> dict:
        entry = self._entries.get((name, model))
        health = entry[1] if entry is not None else Health(Policy(), self._clock)
        return health.snapshot(self._wall())


def failover_order(name: str, fallbacks: Mapping[str, tuple[str, ...]]) -> list[str]:
    """name, then each of its fallbacks followed by that one's own
    fallbacks, depth first, each provider once. The config refuses cycles."""
    # A loop, not a recursive closure: that would be a reference cycle per
    # ask, garbage only the cycle collector frees.
    order: list[str] = []
    stack = [name]
    while stack:
        current = stack.pop()
        if current not in order:
            order.append(current)
            stack.extend(reversed(fallbacks.get(current, ())))
    return order


def fallback_cycle(name: str, fallbacks: Mapping[str, tuple[str, ...]]) -> list[str] | None:
    """A cycle of fallbacks reached from name (["a", "b", "a"]), or None."""
    def walk(path: list[str]) -> list[str] | None:
        for following in fallbacks.get(path[-1], ()):
            if following in path:
                return path[path.index(following):] + [following]
            found = walk([*path, following])
            if found is not None:
                return found
        return None

    return walk([name])
