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
    """16 kHz 16-bit mono bytes in; the index of the wake word heard, or None."""

    def __init__(self, models: Sequence[str]) -> None:
        mww = _import("pymicro_wakeword")
        self._mww = mww
        self._models = [mww.MicroWakeWord.from_builtin(mww.Model(model)) if model in BUILTIN
                        else mww.MicroWakeWord.from_config(model) for model in models]
        self._cutoffs = [model.probability_cutoff for model in self._models]
        self._raised: float | None = None   # the cutoff the models hold now, beyond their own
        self._features = mww.MicroWakeWordFeatures()

    def feed(self, pcm: bytes, cutoff: float | None = None) -> int | None:
        """pcm: any length (features come per 10 ms); cutoff: a probability
        each model must reach, when above its own (the board speaks:
        barge-in's raised threshold)."""
        if cutoff != self._raised:   # set on a change only: feed is called per frame
            self._raised = cutoff
            for model, own in zip(self._models, self._cutoffs):
                model.probability_cutoff = own if cutoff is None else max(own, cutoff)
        heard = None
        for features in self._features.process_streaming(pcm):
            for index, model in enumerate(self._models):
                if model.process_streaming(features) and heard is None:
                    heard = index
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
