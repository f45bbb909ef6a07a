"""A loudspeaker for the voice tests, the wyoming-tts device's "program"
sink: raw PCM on stdin, played in real time into a file as 16 kHz 16-bit
mono (what voice_mic.py's --echo mixes back into the microphone).

    python voice_speaker.py RATE WIDTH CHANNELS FILE
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent.voice.audio import RATE, Converter, Format  # noqa: E402

READ = 2048


def main() -> int:
    rate, width, channels, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), \
        sys.argv[4]
    converter = Converter(Format(rate, width, channels))
    began = time.monotonic()
    played = 0   # 16 kHz samples
    with open(path, "ab", buffering=0) as out:
        while data := sys.stdin.buffer.read1(READ):
            pcm = converter.convert(data)
            out.write(pcm)
            played += len(pcm) // 2
            time.sleep(max(0.0, began + played / RATE - time.monotonic()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
