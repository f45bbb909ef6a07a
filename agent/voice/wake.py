"""Wake words in process, with pymicro-wakeword (microWakeWord's TFLite
models): imported here only, and this module only when [voice] names a
wake word, so a daemon without one loads none of it; only when a wake word
is in process (Detectors: a board whose wake words are all its wake
server's, wake_server.py, needs no pymicro-wakeword).

The features of the audio are computed once and given to every model, so
several wake words cost one front end and one small model each. A model is
one of the wheel's own (okay_nabu, hey_jarvis, hey_mycroft, alexa) or the
path of a microWakeWord model's JSON file, its .tflite beside it.
"""

from __future__ import annotations

from typing import Callable, Sequence

from agent.voice.config import BUILTIN, VoiceConfig
from agent.voice.wake_server import ServerDetector, WakeError


class MissingExtra(RuntimeError):
    """pymicro-wakeword or pymicro-vad is not installed: homeagent[voice]."""


def _import(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtra(f"{module} is not installed ({error}); install homeagent[voice]") \
            from None


class Detector:
    """16 kHz 16-bit mono bytes in; the index of the wake word heard, or
    None; `probability`: the model's at that detection (the mean of its
    sliding window as it passed the cutoff), which the boards that heard
    the same utterance compare (agent/mqtt/claims.py)."""

    def __init__(self, models: Sequence[str]) -> None:
        mww = _import("pymicro_wakeword")
        self._mww = mww
        self._models = [mww.MicroWakeWord.from_builtin(mww.Model(model)) if model in BUILTIN
                        else mww.MicroWakeWord.from_config(model) for model in models]
        self._cutoffs = [model.probability_cutoff for model in self._models]
        self._raised: float | None = None   # the raised cutoff self._now holds, if any
        self._now = list(self._cutoffs)     # each model's cutoff now
        self._features = mww.MicroWakeWordFeatures()
        self.probability = 0.0

    def feed(self, pcm: bytes, cutoff: float | None = None) -> int | None:
        """pcm: any length (features come per 10 ms); cutoff: a probability
        each model must reach, when above its own (the board speaks:
        barge-in's raised threshold)."""
        if cutoff != self._raised:   # made on a change only: feed is called per frame
            self._raised = cutoff
            self._now = [own if cutoff is None else max(own, cutoff) for own in self._cutoffs]
        heard = None
        for features in self._features.process_streaming(pcm):
            for index, model in enumerate(self._models):
                probability = model.process_streaming_prob(features)
                if heard is None and probability is not None and probability > self._now[index]:
                    heard, self.probability = index, probability
        return heard

    def reset(self) -> None:
        """Forget what was heard: after a detection, or audio that was not fed."""
        self._features = self._mww.MicroWakeWordFeatures()
        for model in self._models:
            model.reset()


class Detectors:
    """Every wake word of [voice], heard by index into config.wake: those in
    process by one Detector, the wake server's by one ServerDetector; run()
    is the server's connection (nothing without one). `probability`: the
    last detection's; a server tells none, so its detections count as 1.0
    (it was sure enough) when boards compare claims."""

    def __init__(self, config: VoiceConfig, capacity: int,
                 on_failure: Callable[[WakeError], None]) -> None:
        self._local = [i for i, wake in enumerate(config.wake) if not wake.server]
        self._remote = [i for i, wake in enumerate(config.wake) if wake.server]
        self.local = Detector([config.wake[i].model for i in self._local]) \
            if self._local else None
        self.server = ServerDetector(
            config.wake_server, [config.wake[i].model for i in self._remote],
            connect_timeout=config.connect_timeout, stall_timeout=config.answer_timeout,
            max_delay=config.source.restart_max_delay, capacity=capacity,
            on_failure=on_failure) if self._remote else None
        self.probability = 0.0

    def feed(self, pcm: bytes, cutoff: float | None = None) -> int | None:
        """cutoff: as Detector's, for the models in process; a server gives
        no probability, so its own threshold holds over the board's speech too."""
        heard = self.local.feed(pcm, cutoff) if self.local is not None else None
        if heard is not None:
            heard, self.probability = self._local[heard], self.local.probability
        if self.server is not None:
            remote = self.server.feed(pcm)
            if heard is None and remote is not None:
                heard, self.probability = self._remote[remote], 1.0
        return heard

    def reset(self) -> None:
        for detector in (self.local, self.server):
            if detector is not None:
                detector.reset()

    async def run(self) -> None:
        if self.server is not None:
            await self.server.run()

    def status(self) -> dict | None:
        return self.server.status() if self.server is not None else None


class Vad:
    """pymicro-vad: the probability of a voice in each 10 ms frame."""

    def __init__(self) -> None:
        self._vad = _import("pymicro_vad").MicroVad()

    def probability(self, frame: bytes) -> float:
        return self._vad.process_10ms(frame)

    def reset(self) -> None:
        self._vad.reset()
