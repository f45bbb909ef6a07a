"""A Wyoming ASR server for the voice tests, built on the `wyoming`
package's own server classes (the reference implementation, asyncio). Run
as a program, in its own process:

    python wyoming_asr_server.py unix://PATH --record DIR [--say TEXT]... [--mode MODE]

Each utterance (audio-start to audio-stop) is written to DIR as
utterance-N.pcm (the raw 16 kHz 16-bit mono it received), with
utterance-N.json holding its transcribe event's data and audio format.
It answers the scripted texts in turn (the last one again when they run
out). --mode: "plain" answers `transcript`; "streaming" sends
transcript-start, a transcript-chunk per word, transcript-stop, then
transcript; "stall" reads everything and never answers; "garbage" answers
bytes that are not the protocol; "error" answers an `error` event.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from wyoming_faults import FAULTS, misbehave


def main() -> None:
    from wyoming.asr import Transcribe, Transcript, TranscriptChunk, TranscriptStart, \
        TranscriptStop
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.event import Event
    from wyoming.server import AsyncEventHandler, AsyncServer

    parser = argparse.ArgumentParser()
    parser.add_argument("uri")
    parser.add_argument("--record", required=True)
    parser.add_argument("--say", action="append", default=[])
    parser.add_argument("--mode", default="plain",
                        choices=("plain", "streaming", *FAULTS))
    args = parser.parse_args()
    record = Path(args.record)
    record.mkdir(parents=True, exist_ok=True)
    texts = args.say or ["what time is it"]
    count = [0]

    class Handler(AsyncEventHandler):
        def __init__(self, *a) -> None:
            super().__init__(*a)
            self.transcribe: dict = {}
            self.format: dict = {}
            self.audio = bytearray()

        async def handle_event(self, event: Event) -> bool:
            if Transcribe.is_type(event.type):
                self.transcribe = dict(event.data or {})
            elif AudioStart.is_type(event.type):
                start = AudioStart.from_event(event)
                self.format = {"rate": start.rate, "width": start.width,
                               "channels": start.channels}
                self.audio.clear()
            elif AudioChunk.is_type(event.type):
                self.audio += AudioChunk.from_event(event).audio
            elif AudioStop.is_type(event.type):
                index = count[0]
                count[0] += 1
                (record / f"utterance-{index}.pcm").write_bytes(bytes(self.audio))
                (record / f"utterance-{index}.json").write_text(json.dumps(
                    {"transcribe": self.transcribe, "format": self.format}))
                text = texts[min(index, len(texts) - 1)]
                if not await misbehave(self, args.mode, "the model is not loaded"):
                    if args.mode == "streaming":
                        await self.write_event(TranscriptStart().event())
                        for word in text.split(" "):
                            await self.write_event(TranscriptChunk(word + " ").event())
                        await self.write_event(TranscriptStop().event())
                    await self.write_event(Transcript(text=text).event())
            return True

    asyncio.run(AsyncServer.from_uri(args.uri).run(Handler))


if __name__ == "__main__":
    main()
