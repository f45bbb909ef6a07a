"""A microphone for the voice tests: plays WAV files (16-bit) to stdout as
raw PCM in real time, 20 ms at a time, with silence between and after.

    python voice_mic.py [--cue DIR] [--fail-first MARKER]
                        [--echo FILE [--echo-gain G] [--echo-delay S]] FILE.wav...

--cue DIR: file i is played only once DIR/i exists (silence until then),
and DIR/played-i is created once it has been written out: the test says
when to speak and knows when it was said. --fail-first: when MARKER does
not exist, create it, write a little silence and exit with status 3 (a
microphone that dies once); the next run plays. --echo: FILE (16 kHz 16-bit
mono, growing as voice_speaker.py plays into it) is mixed in as it grows,
times G (1.0): the board's own voice coming back into its microphone,
S seconds (0) after it was played (a capture buffer, the room).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import wave

CHUNK_SECONDS = 0.02


def mixed(chunk: bytes, echo: bytes, gain: float) -> bytes:
    if not echo:
        return chunk
    import numpy as np

    out = np.frombuffer(chunk, dtype="<i2").astype(np.float64)
    out[:len(echo) // 2] += gain * np.frombuffer(echo, dtype="<i2")
    return np.clip(np.round(out), -32768, 32767).astype("<i2").tobytes()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="*")
    parser.add_argument("--cue")
    parser.add_argument("--fail-first")
    parser.add_argument("--echo")
    parser.add_argument("--echo-gain", type=float, default=1.0)
    parser.add_argument("--echo-delay", type=float, default=0.0)
    args = parser.parse_args()
    out = sys.stdout.buffer
    segments = []
    rate, channels = 16000, 1
    for path in args.files:
        with wave.open(path) as reader:
            rate, channels = reader.getframerate(), reader.getnchannels()
            segments.append(reader.readframes(reader.getnframes()))
    step = int(rate * CHUNK_SECONDS) * 2 * channels
    if args.fail_first and not os.path.exists(args.fail_first):
        open(args.fail_first, "w").close()
        out.write(bytes(step * 5))
        out.flush()
        print("voice_mic: the microphone broke", file=sys.stderr)
        return 3
    began = time.monotonic()
    written = 0
    index, at = 0, 0   # the segment playing and the offset in it
    echoed = 0         # bytes of the echo file read
    # what was read of it and not yet mixed in, behind the delay's silence
    # (the speaker's pauses are not in the file: each start is delayed anew)
    pending = b""
    delay = bytes(int(rate * args.echo_delay) * 2)
    while True:
        chunk = bytes(step)
        if index < len(segments) and (args.cue is None
                                      or os.path.exists(os.path.join(args.cue, str(index)))):
            chunk = segments[index][at:at + step].ljust(step, b"\0")
            at += step
            if at >= len(segments[index]):
                if args.cue is not None:
                    open(os.path.join(args.cue, f"played-{index}"), "w").close()
                index, at = index + 1, 0
        if args.echo and os.path.exists(args.echo):
            with open(args.echo, "rb") as echo:
                echo.seek(echoed)
                played = echo.read()
            if played and not pending:   # the speaker starts again: its sound, late
                pending = delay
            echoed += len(played)
            pending += played
            take = len(chunk) - len(chunk) % 2
            heard, pending = pending[:take], pending[take:]
            chunk = mixed(chunk, heard, args.echo_gain)
        out.write(chunk)
        out.flush()
        written += len(chunk)
        time.sleep(max(0.0, began + written / (2 * channels * rate) - time.monotonic()))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        sys.exit(0)
