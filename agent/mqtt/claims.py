"""One board answers per house: the boards that heard the same wake word
agree, over the broker, on the one that answers. Sans-IO: the shell
(service.py) hands in the claims it received with the time they arrived
(its own monotonic clock), and asks for a verdict at a time it gives.

A board that hears its wake word publishes a claim on
`<prefix>/house/claim` (QoS 0, never retained): its board name, the wake
word, the wake word's probability and an id. It then counts every other
board's claim of the same wake word that arrived within `window` of its
own detection, before it (that board heard it a little sooner) or after.
The best claim answers: the highest probability, then the smallest board
name. Why this rule:
- no clock is compared: each board measures the window on its own clock,
  and a claim carries no time, so boards need no clock sync;
- it is deterministic and the same on every board: boards that saw the
  same set of claims name the same winner, without a second round;
- the probability is what the detector gives (linux-voice-assistant found
  "the first to detect wins" better than comparing signal-to-noise; the
  first to detect cannot be told without synchronised clocks).
A board that lost early (a better claim is in) knows at once; a board
wins only once its window is over. Claims arriving after that change
nothing: a board answering is not disturbed. Detections further apart
than the window are different utterances.

The broker is untrusted: a payload is bounded (MAX_CLAIM_BYTES), must be
a JSON object whose known fields have their types and ranges (unknown
fields are ignored, so that a later version may add some), and at most
HELD claims are kept, for at most HOLD seconds. Claims bearing this
board's own name are ignored: the broker echoes ours back, and another
board may not speak for this one. Whoever may publish on the claim topic
can silence the house's voice: the broker's ACL is the guard (docs/mqtt.md).
"""

from __future__ import annotations

import json
import math
import re
import secrets
from collections import deque
from dataclasses import dataclass

from agent.mqtt.topics import BOARD_NAME
from agent.stream.jsonscan import FLAG_BAD_UTF8, FLAG_LONE_SURROGATE, JSONError, loads_flagged

MAX_CLAIM_BYTES = 512
MAX_WAKE = 64           # characters of a wake word's name
CLAIM_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
MAX_WINDOW = 2.0        # seconds: [voice]'s longest arbitration_window
HOLD = 2 * MAX_WINDOW   # seconds a claim is kept: a window before and after a detection
HELD = 64               # others' claims kept at most: a flood pushes out the oldest
DIGITS = 6              # a probability's decimals: ours compared as the others read it


class BadClaim(ValueError):
    """A payload on the claim topic that is no claim; the message says why."""


@dataclass(frozen=True, slots=True)
class Claim:
    board: str
    wake: str
    probability: float
    id: str

    def payload(self) -> bytes:
        return json.dumps({"board": self.board, "wake": self.wake,
                           "probability": self.probability, "id": self.id},
                          separators=(",", ":")).encode()

    def beats(self, other: "Claim") -> bool:
        """The rule: the higher probability, then the smaller board name."""
        return (-self.probability, self.board) < (-other.probability, other.board)


@dataclass(frozen=True, slots=True)
class Won:
    """This board answers."""


@dataclass(frozen=True, slots=True)
class Lost:
    """Another board answers: winner is the best claim seen."""
    winner: Claim


@dataclass(frozen=True, slots=True)
class Wait:
    """No verdict yet: ask again at `until`, or when a claim arrives."""
    until: float


def parse(payload: bytes) -> Claim:
    """The claim in a payload; BadClaim if it is none."""
    if len(payload) > MAX_CLAIM_BYTES:
        raise BadClaim(f"{len(payload)} bytes, more than {MAX_CLAIM_BYTES}")
    try:
        value, flags = loads_flagged(payload)
    except JSONError as error:
        raise BadClaim(f"not JSON: {error}") from None
    if flags & (FLAG_BAD_UTF8 | FLAG_LONE_SURROGATE):
        raise BadClaim("not valid UTF-8")
    if not isinstance(value, dict):
        raise BadClaim("not a JSON object")
    board, wake, probability, claim_id = (value.get(name) for name in
                                          ("board", "wake", "probability", "id"))
    if not isinstance(board, str) or not BOARD_NAME.fullmatch(board):
        raise BadClaim("board: a board name ([a-z0-9_-], at most 64)")
    if not isinstance(wake, str) or not 0 < len(wake) <= MAX_WAKE or not wake.isprintable():
        raise BadClaim(f"wake: a wake word's name, 1 to {MAX_WAKE} printable characters")
    if isinstance(probability, bool) or not isinstance(probability, (int, float)) \
            or not math.isfinite(probability) or not 0 <= probability <= 1:
        raise BadClaim("probability: a number from 0 to 1")
    if not isinstance(claim_id, str) or not CLAIM_ID.fullmatch(claim_id):
        raise BadClaim("id: 1 to 32 of A-Z, a-z, 0-9, '_' and '-'")
    return Claim(board, wake, float(probability), claim_id)


class Arbiter:
    """The claims of one board: others' as they arrive, and its own round."""

    def __init__(self, board: str, held: int = HELD) -> None:
        self.board = board
        self._others: deque[tuple[float, Claim]] = deque(maxlen=held)  # (arrived, claim)
        self._own: Claim | None = None
        self._at = 0.0       # when this board heard its own
        self._window = 0.0

    @property
    def kept(self) -> list[Claim]:
        """Others' claims kept now, oldest first."""
        return [claim for _, claim in self._others]

    def receive(self, payload: bytes, now: float) -> Claim | None:
        """A payload that arrived at now: the claim kept, None when it is
        ignored (ours echoed, or one already kept); BadClaim if it is none."""
        claim = parse(payload)
        while self._others and self._others[0][0] < now - HOLD:
            self._others.popleft()
        if claim.board == self.board or any(
                (kept.board, kept.id) == (claim.board, claim.id) for _, kept in self._others):
            return None
        self._others.append((now, claim))
        return claim

    def claim(self, wake: str, probability: float, window: float, now: float,
              claim_id: str | None = None) -> Claim:
        """This board heard wake at now: its claim, to publish; a new round."""
        if not 0 < window <= MAX_WINDOW:
            raise ValueError(f"window: more than 0 and at most {MAX_WINDOW} s")
        self._own = Claim(self.board, wake[:MAX_WAKE], round(min(max(probability, 0.0), 1.0),
                                                            DIGITS),
                          claim_id or secrets.token_hex(8))
        self._at, self._window = now, window
        return self._own

    def decide(self, now: float) -> Won | Lost | Wait:
        """The verdict of the round at now."""
        own = self._own
        if own is None:
            raise RuntimeError("decide() before claim()")
        best = own
        for arrived, other in self._others:
            if other.wake == own.wake and abs(arrived - self._at) <= self._window \
                    and other.beats(best):
                best = other
        if best is not own:
            return Lost(best)
        end = self._at + self._window
        return Won() if now >= end else Wait(end)
