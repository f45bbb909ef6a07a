"""Microphone audio as the wake word, the VAD and speech-to-text take it:
16 kHz, 16-bit, mono, in 10 ms frames. Sans-IO: bytes in, bytes out.

Converter takes little-endian PCM of any rate, width (1: unsigned 8-bit,
2: signed 16-bit, 4: signed 32-bit) and channel count, and gives 16 kHz
16-bit mono: the channels are averaged, then the rate is converted by
linear interpolation, after a box filter as wide as the rate's ratio when it
goes down (so a 48 kHz microphone's content above 8 kHz does not fold back
into speech). It keeps its state across chunks: a stream cut anywhere gives
the same samples as in one piece. The positions are exact integers, so a
microphone running for days does not drift. Audio already 16 kHz 16-bit
mono passes through untouched, and numpy is imported only to convert.

Frames cuts any stream of bytes into whole frames of 10 ms (320 bytes),
given as one block per read: the wake word's features take any length, and
a read passed on as one piece costs one hop through the door's channel
where a frame each cost one hop each.
"""

from __future__ import annotations

from dataclasses import dataclass

RATE = 16000
WIDTH = 2
CHANNELS = 1
FRAME_SAMPLES = RATE // 100        # 10 ms
FRAME_BYTES = FRAME_SAMPLES * WIDTH
WIDTHS = (1, 2, 4)
MAX_RATE = 192000
MAX_CHANNELS = 32


@dataclass(frozen=True, slots=True)
class Format:
    rate: int = RATE
    width: int = WIDTH
    channels: int = CHANNELS

    def check(self) -> str | None:
        """What is wrong with it, or None."""
        if not 1000 <= self.rate <= MAX_RATE:
            return f"rate {self.rate}: between 1000 and {MAX_RATE}"
        if self.width not in WIDTHS:
            return f"width {self.width}: 1, 2 or 4 bytes"
        if not 1 <= self.channels <= MAX_CHANNELS:
            return f"channels {self.channels}: between 1 and {MAX_CHANNELS}"
        return None

    @property
    def frame_bytes(self) -> int:
        return self.width * self.channels

    @property
    def bytes_per_second(self) -> int:
        return self.rate * self.frame_bytes


TARGET = Format()


class Converter:
    """Any PCM format in, 16 kHz 16-bit mono out (see the module)."""

    def __init__(self, source: Format) -> None:
        problem = source.check()
        if problem:
            raise ValueError(problem)
        self.source = source
        self.passthrough = source == TARGET
        self._partial = b""   # bytes of an incomplete sample frame
        if self.passthrough:
            return
        import numpy as np

        self._np = np
        self._box = max(1, round(source.rate / RATE)) if source.rate > RATE else 1
        self._history = np.zeros(0, dtype=np.int64)  # input kept for the filter
        self._pending = np.zeros(0, dtype=np.int64)  # filtered input not yet passed
        self._consumed = 0   # filtered samples dropped from _pending's front
        self._next = 0       # index of the next output sample

    def convert(self, data: bytes) -> bytes:
        if self.passthrough:
            return data
        data = self._partial + data
        whole = len(data) - len(data) % self.source.frame_bytes
        self._partial = data[whole:]
        if not whole:
            return b""
        mono = self._mono(data[:whole])
        return self._resample(self._filter(mono))

    def _mono(self, data: bytes):
        """The channels' sum, exact integers (divided once, at the end)."""
        np = self._np
        width = self.source.width
        if width == 1:
            samples = (np.frombuffer(data, dtype=np.uint8).astype(np.int64) - 128) << 8
        elif width == 2:
            samples = np.frombuffer(data, dtype="<i2").astype(np.int64)
        else:
            samples = np.frombuffer(data, dtype="<i4").astype(np.int64) >> 16
        channels = self.source.channels
        if channels > 1:
            samples = samples.reshape(-1, channels).sum(axis=1)
        return samples

    def _filter(self, samples):
        """Sums of _box samples in a row, exact: the same whatever the cuts."""
        if self._box == 1:
            return samples
        np = self._np
        joined = np.concatenate((self._history, samples))
        self._history = joined[len(joined) - (self._box - 1):]
        if len(joined) < self._box:
            return joined[:0]
        sums = np.concatenate((np.zeros(1, dtype=np.int64), np.cumsum(joined)))
        return sums[self._box:] - sums[:-self._box]

    def _resample(self, samples):
        np = self._np
        rate_in = self.source.rate
        scale = self.source.channels * self._box
        if rate_in == RATE:
            out = samples / scale
        else:
            self._pending = np.concatenate((self._pending, samples))
            available = self._consumed + len(self._pending)
            # output k sits at input position k * rate_in / RATE; it needs the
            # sample after it too: (k * rate_in) // RATE + 1 < available
            last = ((available - 1) * RATE - 1) // rate_in  # the highest k that fits
            if last < self._next:
                return b""
            k = np.arange(self._next, last + 1, dtype=np.int64)
            position = k * rate_in
            index = position // RATE - self._consumed
            weight = position % RATE
            # integers up to 2**31 * 32 channels * 12 * 16000: within int64, exact
            mixed = self._pending[index] * (RATE - weight) + self._pending[index + 1] * weight
            out = mixed / (RATE * scale)
            self._next = last + 1
            # the next output's first sample, which may not have come yet
            keep_from = min((self._next * rate_in) // RATE - self._consumed, len(self._pending))
            self._pending = self._pending[keep_from:]
            self._consumed += keep_from
        return np.clip(np.round(out), -32768, 32767).astype("<i2").tobytes()


class Frames:
    """Bytes of any length in, the whole 10 ms frames they complete out, as
    one block (a multiple of FRAME_BYTES, maybe empty); the rest is kept."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> bytes:
        if self._buffer:
            data = self._buffer + data
        whole = len(data) - len(data) % FRAME_BYTES
        self._buffer = data[whole:]
        # a read of whole frames, the usual case, passes on uncopied
        return data if whole == len(data) else data[:whole]
