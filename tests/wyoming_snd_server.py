"""A Wyoming snd server (a network speaker) for the tests, built on the
`wyoming` package's own server classes, in its own process:

    python wyoming_snd_server.py unix://PATH OUT [--exit-after BYTES] [--no-played]

It appends the PCM of every audio-chunk to OUT and the format of each
audio-start ("rate width channels") to OUT.formats, and answers each
audio-stop with `played`, as wyoming-satellite's snd services do (with
--no-played it does not, as older ones). With --exit-after it exits,
without a word, once that many bytes have come: a speaker that dies
mid-utterance.
"""

from __future__ import annotations

import argparse
import asyncio
import os


def main() -> None:
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.event import Event
    from wyoming.server import AsyncEventHandler, AsyncServer
    from wyoming.snd import Played

    parser = argparse.ArgumentParser()
    parser.add_argument("uri")
    parser.add_argument("out")
    parser.add_argument("--exit-after", type=int)
    parser.add_argument("--no-played", action="store_true")
    args = parser.parse_args()
    received = 0

    class Handler(AsyncEventHandler):
        async def handle_event(self, event: Event) -> bool:
            nonlocal received
            if AudioStart.is_type(event.type):
                start = AudioStart.from_event(event)
                with open(args.out + ".formats", "a") as formats:
                    formats.write(f"{start.rate} {start.width} {start.channels}\n")
            elif AudioChunk.is_type(event.type):
                audio = AudioChunk.from_event(event).audio
                with open(args.out, "ab") as out:
                    out.write(audio)
                received += len(audio)
                if args.exit_after is not None and received >= args.exit_after:
                    os._exit(0)
            elif AudioStop.is_type(event.type) and not args.no_played:
                await self.write_event(Played().event())
            return True

    asyncio.run(AsyncServer.from_uri(args.uri).run(Handler))


if __name__ == "__main__":
    main()
