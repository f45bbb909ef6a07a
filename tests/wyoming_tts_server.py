"""A Wyoming TTS server for the tests, built on the `wyoming` package's own
server classes (the reference implementation, asyncio), with espeak-ng
making real audio. Run as a program, in its own process:

    python wyoming_tts_server.py unix://PATH [--streaming] [--log FILE] [--times FILE]

With --streaming it advertises supports_synthesize_streaming and speaks
each sentence of a synthesize-start/chunk/stop stream as soon as the
sentence is complete; without, it speaks each `synthesize` as it comes.
--log appends each text it synthesized, one JSON string per line, so a
test knows what audio to expect. --times appends, for each, a JSON object
with the text and the CLOCK_MONOTONIC nanoseconds at which espeak-ng
started and finished it (bench/tts_bench.py's synthesis time; the clock is
the same in every process of the host). Helpers here compute that audio.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import re
import subprocess
import time
import wave

VOICE = "en"
CHUNK_SAMPLES = 1024
# a sentence ends at .!? and whitespace: the server's own rule for flushing
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def espeak_pcm(text: str) -> tuple[int, int, int, bytes]:
    """(rate, width, channels, pcm) of espeak-ng speaking text."""
    wav = subprocess.run(["espeak-ng", "-v", VOICE, "--stdout", text], check=True,
                         capture_output=True).stdout
    with wave.open(io.BytesIO(wav)) as reader:
        return (reader.getframerate(), reader.getsampwidth(), reader.getnchannels(),
                reader.readframes(reader.getnframes()))


def complete_sentences(text: str) -> tuple[list[str], str]:
    """The sentences of text that are certainly over, and the rest."""
    parts = SENTENCE_END.split(text)
    return [p.strip() for p in parts[:-1] if p.strip()], parts[-1]


def main() -> None:
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.event import Event
    from wyoming.info import Attribution, Describe, Info, TtsProgram, TtsVoice
    from wyoming.server import AsyncEventHandler, AsyncServer
    from wyoming.tts import (Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop,
                             SynthesizeStopped)

    parser = argparse.ArgumentParser()
    parser.add_argument("uri")
    parser.add_argument("--streaming", action="store_true")
    parser.add_argument("--log")
    parser.add_argument("--times")
    args = parser.parse_args()
    attribution = Attribution(name="eSpeak NG", url="https://github.com/espeak-ng/espeak-ng")
    info = Info(tts=[TtsProgram(
        name="espeak-test", attribution=attribution, installed=True, description=None,
        version=None, supports_synthesize_streaming=args.streaming,
        voices=[TtsVoice(name=VOICE, attribution=attribution, installed=True,
                         description=None, version=None, languages=["en"])])])

    class Handler(AsyncEventHandler):
        def __init__(self, *a) -> None:
            super().__init__(*a)
            self.streaming_text: str | None = None

        async def speak(self, text: str) -> None:
            if args.log:
                with open(args.log, "a") as log:
                    log.write(json.dumps(text) + "\n")
            started = time.monotonic_ns()
            rate, width, channels, pcm = await asyncio.to_thread(espeak_pcm, text)
            if args.times:
                with open(args.times, "a") as times:
                    times.write(json.dumps({"text": text, "started_ns": started,
                                            "finished_ns": time.monotonic_ns()}) + "\n")
            await self.write_event(AudioStart(rate, width, channels).event())
            step = CHUNK_SAMPLES * width * channels
            for start in range(0, len(pcm), step):
                await self.write_event(AudioChunk(rate, width, channels,
                                                  pcm[start:start + step]).event())
            await self.write_event(AudioStop().event())

        async def handle_event(self, event: Event) -> bool:
            if Describe.is_type(event.type):
                await self.write_event(info.event())
            elif args.streaming and SynthesizeStart.is_type(event.type):
                self.streaming_text = ""
            elif args.streaming and SynthesizeChunk.is_type(event.type) \
                    and self.streaming_text is not None:
                done, self.streaming_text = complete_sentences(
                    self.streaming_text + SynthesizeChunk.from_event(event).text)
                for sentence in done:
                    await self.speak(sentence)
            elif args.streaming and SynthesizeStop.is_type(event.type) \
                    and self.streaming_text is not None:
                if self.streaming_text.strip():
                    await self.speak(self.streaming_text.strip())
                self.streaming_text = None
                await self.write_event(SynthesizeStopped().event())
            elif Synthesize.is_type(event.type) and self.streaming_text is None:
                await self.speak(Synthesize.from_event(event).text)
            return True

    asyncio.run(AsyncServer.from_uri(args.uri).run(Handler))


if __name__ == "__main__":
    main()
