"""What the API server counts and reports: its counters, and the frozen
snapshot statistics() returns (as trio's streams have statistics())."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agent.core.replies import RequestId


class Outcome(enum.Enum):
    """How an ask ended, each counted under its name."""
    ANSWERED = "answered"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(slots=True)
class Counters:
    """Since the start; the status reply's `counters`, in this order."""
    connections: int = 0
    refused: int = 0
    requests: int = 0
    bad_requests: int = 0
    asks: int = 0
    answered: int = 0
    failed: int = 0
    cancelled: int = 0
    overflows: int = 0
    revoked: int = 0  # connections closed by a reload that no longer allows their peer

    def ended(self, outcome: Outcome) -> None:
        setattr(self, outcome.value, getattr(self, outcome.value) + 1)


@dataclass(frozen=True, slots=True)
class ActiveAsk:
    """An ask in flight, as the status reply's `active` lists it."""
    client: int
    id: RequestId
    session: str | None
    provider: str | None
    uid: int
    seconds: float


@dataclass(frozen=True, slots=True)
class Statistics:
    clients: int                   # connections open
    active: tuple[ActiveAsk, ...]  # asks of clients in flight
    counters: Counters             # a copy, taken with the snapshot
    draining: bool
