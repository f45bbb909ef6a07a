"""Line framing, sans-IO: bytes of reads in, lines out, memory bounded.

Shared by the socket API (JSON lines) and the serial line protocol; it
decodes nothing and knows neither, so a user of one does not load the other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Line:
    data: bytes  # without its b"\n" (a b"\r" before it is dropped too)


@dataclass(frozen=True, slots=True)
class LineTooLong:
    """A line went past the limit; its bytes up to the next newline are skipped."""
    limit: int


class LineReader:
    """Bytes of reads in, Line and LineTooLong out. Memory stays within the
    limit: an oversized line is discarded as it arrives, not buffered."""

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self._buffer = bytearray()
        self._skipping = False

    def feed(self, data: bytes) -> list[Line | LineTooLong]:
        out: list[Line | LineTooLong] = []
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            piece = data[start:] if end < 0 else data[start:end]
            if not self._skipping:
                if self._too_long(len(self._buffer) + len(piece), piece or self._buffer):
                    self._buffer.clear()
                    self._skipping = True
                    out.append(LineTooLong(self.max_line))
                else:
                    self._buffer += piece
            if end < 0:
                break
            if not self._skipping:
                line = bytes(self._buffer)
                out.append(Line(line[:-1] if line.endswith(b"\r") else line))
            self._buffer.clear()
            self._skipping = False
            start = end + 1
        return out

    def _too_long(self, size: int, tail: bytes | bytearray) -> bool:
        """Whether a line of `size` bytes so far, ending with `tail`, is over
        the limit. The CR of a CRLF is not part of the line, so one byte more
        is let in while it is a CR (its LF may come in the next read)."""
        return size > self.max_line and not (size == self.max_line + 1
                                             and tail.endswith(b"\r"))

    @property
    def pending(self) -> int:
        """Bytes of an unterminated line (0 while skipping an oversized one)."""
        return len(self._buffer)
