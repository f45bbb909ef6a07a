"""Wake words in process, with pymicro-wakeword (microWakeWord's TFLite
models): imported here only, and this module only when [voice] names a
wake word, so a daemon without one loads none of it.

The features of the audio are computed once and given to every model, so
several wake words cost one front end and one small model each. A model is
one of the wheel's own (okay_nabu, hey_jarvis, hey_mycroft, alexa) or the
path of a microWakeWord model's JSON file, its .tflite beside it.
"""

from __future__ import annotations

from typing import Sequence

from agent.voice.config import BUILTIN


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
        self._features = mww.MicroWakeWordFeatures()
        self.probability = 0.0

    def feed(self, pcm: bytes, cutoff: float | None = None) -> int | None:
        """cutoff: a probability each model must reach, when above its own
        (the board speaks: barge-in's raised threshold)."""
        heard = None
        cutoffs = [own if cutoff is None else max(own, cutoff) for own in self._cutoffs]
        for features in self._features.process_streaming(pcm):
            for index, model in enumerate(self._models):
                probability = model.process_streaming_prob(features)
                if heard is None and probability is not None and probability > cutoffs[index]:
                    heard, self.probability = index, probability
        return heard

    def reset(self) -> None:
        """Forget what was heard: after a detection, or audio that was not fed."""
        self._features = self._mww.MicroWakeWordFeatures()
        for model in self._models:
            model.reset()


class Vad:
    """pymicro-vad: the probability of a voice in each 10 ms frame."""

    def __init__(self) -> None:
        self._vad = _import("pymicro_vad").MicroVad()

    def probability(self, frame: bytes) -> float:
        return self._vad.process_10ms(frame)

    def reset(self) -> None:
        self._vad.reset()
