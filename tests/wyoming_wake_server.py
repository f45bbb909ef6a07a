"""A Wyoming wake word server for the voice tests, built on the `wyoming`
package's own server classes (the reference implementation, asyncio),
hearing with a real engine: pymicro-wakeword on the audio it receives.
Run as a program, in its own process:

    python wyoming_wake_server.py unix://PATH --log FILE [--name MODEL=NAME]...
                                  [--mode MODE] [--late SECONDS]

It offers the wheel's wake words (okay_nabu, hey_jarvis, hey_mycroft,
alexa) in its `info`, each under its NAME when --name renames it (a
server's names are its own), and answers `detection` with that name when
it hears one of those `detect` asked for. Each line of FILE is a JSON
object: {"detect": names} per detect, {"detection": name} per detection.
--mode: "hear" (the default) as above; "stall" reads no more after the
first audio-chunk (its buffers fill, the client's writes block);
"garbage" answers the first audio-chunk with bytes that are not the
protocol; "error" with an `error` event. --late: each detection is
written that long after it is logged (a slow server).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from wyoming_faults import FAULTS, misbehave


def main() -> None:
    from pymicro_wakeword import MicroWakeWord, MicroWakeWordFeatures, Model
    from wyoming.audio import AudioChunk, AudioStart
    from wyoming.event import Event
    from wyoming.info import Attribution, Describe, Info, WakeModel, WakeProgram
    from wyoming.server import AsyncEventHandler, AsyncServer
    from wyoming.wake import Detect, Detection

    parser = argparse.ArgumentParser()
    parser.add_argument("uri")
    parser.add_argument("--log", required=True)
    parser.add_argument("--name", action="append", default=[])
    parser.add_argument("--mode", default="hear",
                        choices=("hear", *FAULTS))
    parser.add_argument("--late", type=float, default=0.0)
    args = parser.parse_args()
    names = {model.value: model.value for model in Model}
    names.update(item.split("=", 1) for item in args.name)
    models = {name: Model(model) for model, name in names.items()}

    def note(entry: dict) -> None:
        with open(args.log, "a") as log:
            log.write(json.dumps(entry) + "\n")

    attribution = Attribution(name="tests", url="")
    info = Info(wake=[WakeProgram(
        name="pymicro-wakeword", description="the tests' wake server", attribution=attribution,
        installed=True, version="1",
        models=[WakeModel(name=name, description=name, phrase=name, attribution=attribution,
                          installed=True, languages=["en"], version="1")
                for name in models])])

    class Handler(AsyncEventHandler):
        def __init__(self, *a) -> None:
            super().__init__(*a)
            self.detectors: dict = {}
            self.features = MicroWakeWordFeatures()

        async def handle_event(self, event: Event) -> bool:
            if Describe.is_type(event.type):
                await self.write_event(info.event())
            elif Detect.is_type(event.type):
                asked = Detect.from_event(event).names or list(models)
                note({"detect": asked})
                self.detectors = {name: MicroWakeWord.from_builtin(models[name])
                                  for name in asked if name in models}
            elif AudioStart.is_type(event.type):
                self.features = MicroWakeWordFeatures()
                for detector in self.detectors.values():
                    detector.reset()
            elif AudioChunk.is_type(event.type):
                await misbehave(self, args.mode, "the models are not loaded")
                for features in self.features.process_streaming(
                        AudioChunk.from_event(event).audio):
                    for name, detector in self.detectors.items():
                        if detector.process_streaming(features):
                            detector.reset()   # one detection per saying, as servers do
                            note({"detection": name})
                            await asyncio.sleep(args.late)
                            await self.write_event(Detection(name=name, timestamp=0).event())
            return True

    asyncio.run(AsyncServer.from_uri(args.uri).run(Handler))


if __name__ == "__main__":
    main()
