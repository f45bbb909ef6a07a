"""End of speech, sans-IO: one voice probability per 10 ms frame in (what
pymicro-vad's process_10ms gives), a verdict out. No clock: time is the
count of frames, so a test scripts it exactly.

After the wake word (or when a follow-up listens without it) the board
waits up to `start_seconds` for speech to begin; speech is `threshold` or
more in SPEECH_FRAMES frames in a row (30 ms: a click is not a start). It ends after `silence_seconds` of
frames below the threshold, or at `max_seconds` from the first frame
heard. Speech shorter than `min_seconds` (from its start to its last voiced
frame) is no utterance: a cough, a click.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

FRAME_SECONDS = 0.01
SPEECH_FRAMES = 3


class Verdict(enum.Enum):
    LISTENING = "listening"   # more frames, please
    ENDED = "ended"           # speech, then silence: an utterance
    TOO_LONG = "too_long"     # cut at max_seconds: an utterance all the same
    NOTHING = "nothing"       # no speech began in time, or too short to be one


@dataclass(frozen=True, slots=True)
class Limits:
    """[voice]'s keys of the same names."""
    start_seconds: float = 5.0
    silence_seconds: float = 0.8
    max_seconds: float = 15.0
    min_seconds: float = 0.3
    threshold: float = 0.5


def _frames(seconds: float) -> int:
    return max(1, round(seconds / FRAME_SECONDS))


class Endpointer:
    def __init__(self, limits: Limits, start_seconds: float | None = None) -> None:
        self.limits = limits
        self._start = _frames(limits.start_seconds if start_seconds is None else start_seconds)
        self._silence = _frames(limits.silence_seconds)
        self._max = _frames(limits.max_seconds)
        self._min = _frames(limits.min_seconds)
        self.frames = 0          # fed so far
        self.began: int | None = None   # frame where speech began
        self._last_voiced = 0
        self._run = 0            # voiced frames in a row, before speech began
        self.verdict = Verdict.LISTENING

    @property
    def speaking(self) -> bool:
        return self.began is not None

    def feed(self, probability: float) -> Verdict:
        if self.verdict is not Verdict.LISTENING:
            return self.verdict
        self.frames += 1
        voiced = probability >= self.limits.threshold
        if self.began is None:
            self._run = self._run + 1 if voiced else 0
            if self._run >= SPEECH_FRAMES:
                self.began = self.frames - self._run
                self._last_voiced = self.frames
            elif self.frames >= self._start:
                self.verdict = Verdict.NOTHING
            return self.verdict
        if voiced:
            self._last_voiced = self.frames
        if self.frames - self.began >= self._max:
            self.verdict = Verdict.TOO_LONG
        elif self.frames - self._last_voiced >= self._silence:
            self.verdict = Verdict.ENDED if self._last_voiced - self.began >= self._min \
                else Verdict.NOTHING
        return self.verdict
