"""The voice door's sans-IO pieces: the converter on generated signals, the
framer, the endpointer on scripted probabilities, and the wake word and VAD
models on espeak-ng's speech (skipped without the voice extra)."""

from __future__ import annotations

import math

import pytest

np = pytest.importorskip("numpy", reason="numpy comes with the voice extra (pip install "
                         ".[voice]), which this run has not")

from agent.voice.audio import FRAME_BYTES, Converter, Format, Frames
from agent.voice.endpoint import Endpointer, Limits, Verdict
from voice_audio import espeak, needs_espeak, needs_voice, silence


def tone(rate: int, seconds: float, frequency: float, channels: int = 1,
         width: int = 2) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    wave = 0.5 * np.sin(2 * math.pi * frequency * t)
    samples = np.repeat(wave[:, None], channels, axis=1)
    if channels > 1:  # the other channels silent or inverted: the mix-down is checked
        samples[:, 1] = 0.0
    if width == 1:
        return (samples * 127 + 128).astype(np.uint8).tobytes()
    if width == 2:
        return (samples * 32767).astype("<i2").tobytes()
    return (samples * 2147483647).astype("<i4").tobytes()


def pcm16(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2").astype(np.float64)


def peak_frequency(samples: np.ndarray, rate: int = 16000) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[int(np.argmax(spectrum))])


def test_16k_mono_passes_through_untouched():
    data = tone(16000, 0.1, 440)
    converter = Converter(Format())
    assert converter.passthrough and converter.convert(data) is data


@pytest.mark.parametrize("rate,channels,width", [(48000, 2, 2), (44100, 1, 2),
                                                 (22050, 1, 2), (8000, 1, 2),
                                                 (48000, 1, 4), (16000, 2, 1),
                                                 (32000, 6, 2)])
def test_a_tone_keeps_its_pitch_and_length(rate, channels, width):
    data = tone(rate, 1.0, 1000, channels, width)
    out = pcm16(Converter(Format(rate, width, channels)).convert(data))
    assert abs(len(out) - 16000) <= 2
    assert abs(peak_frequency(out) - 1000) <= 2
    expected = 0.5 * 32767 * (channels - 1 or 1) / channels  # one channel is silent
    rms = np.sqrt(np.mean(out[100:-100] ** 2)) * math.sqrt(2)
    assert abs(rms - expected) / expected < 0.1


def test_a_stream_cut_anywhere_gives_the_same_samples():
    fmt = Format(44100, 2, 2)
    data = tone(44100, 0.5, 700, 2)
    whole = Converter(fmt).convert(data)
    rng = np.random.default_rng(7)
    converter = Converter(fmt)
    out, at = [], 0
    while at < len(data):
        step = int(rng.integers(1, 5000))
        out.append(converter.convert(data[at:at + step]))
        at += step
    assert b"".join(out) == whole


def test_content_above_8_khz_is_damped_going_down():
    # 15 kHz at 48 kHz would fold to 1 kHz unfiltered
    out = pcm16(Converter(Format(48000, 2, 1)).convert(tone(48000, 1.0, 15000)))
    assert np.sqrt(np.mean(out ** 2)) < 0.35 * 0.5 * 32767 / math.sqrt(2)


def test_a_long_stream_does_not_drift():
    fmt = Format(44100, 2, 1)
    converter = Converter(fmt)
    second = tone(44100, 1.0, 300)
    total = sum(len(converter.convert(second)) for _ in range(60))
    assert abs(total // 2 - 60 * 16000) <= 2


@pytest.mark.parametrize("fmt", [Format(500, 2, 1), Format(16000, 3, 1), Format(16000, 2, 0)])
def test_a_format_out_of_range_is_refused(fmt):
    with pytest.raises(ValueError):
        Converter(fmt)


def test_frames_are_10_ms_whatever_the_reads():
    frames = Frames()
    got = [frames.feed(b"\x01" * 100), frames.feed(b"\x02" * 1000), frames.feed(b"\x03" * 500)]
    # each read's whole frames as one block: none yet, three, then two
    assert [len(block) for block in got] == [0, 3 * FRAME_BYTES, 2 * FRAME_BYTES]
    assert b"".join(got) == (b"\x01" * 100 + b"\x02" * 1000 + b"\x03" * 500)[:5 * FRAME_BYTES]


def test_a_read_of_whole_frames_passes_as_it_came():
    frames = Frames()
    read = bytes(range(256)) * 5   # 4 frames
    assert frames.feed(read) is read
    assert frames.feed(b"\x00" * (FRAME_BYTES + 1)) == b"\x00" * FRAME_BYTES
    assert frames.feed(b"\x07" * (FRAME_BYTES - 1)) == b"\x00" + b"\x07" * (FRAME_BYTES - 1)


# ---- the endpointer, on scripted probabilities (a frame is 10 ms) ----

LIMITS = Limits(start_seconds=1.0, silence_seconds=0.5, max_seconds=3.0, min_seconds=0.2,
                threshold=0.5)


def run(endpointer: Endpointer, probabilities) -> tuple[Verdict, int]:
    for count, p in enumerate(probabilities, 1):
        verdict = endpointer.feed(p)
        if verdict is not Verdict.LISTENING:
            return verdict, count
    return Verdict.LISTENING, len(probabilities)


def test_speech_then_silence_ends_the_utterance():
    verdict, at = run(Endpointer(LIMITS), [0.0] * 20 + [0.9] * 100 + [0.1] * 100)
    assert verdict is Verdict.ENDED and at == 20 + 100 + 50


def test_a_pause_shorter_than_the_silence_does_not_end_it():
    verdict, at = run(Endpointer(LIMITS), [0.9] * 50 + [0.0] * 40 + [0.9] * 50 + [0.0] * 60)
    assert verdict is Verdict.ENDED and at == 50 + 40 + 50 + 50


def test_no_speech_within_the_start_time_is_nothing():
    assert run(Endpointer(LIMITS), [0.2] * 300) == (Verdict.NOTHING, 100)
    # a follow-up's own start time
    assert run(Endpointer(LIMITS, start_seconds=2.0), [0.2] * 300) == (Verdict.NOTHING, 200)


def test_a_click_is_no_utterance():
    verdict, _ = run(Endpointer(LIMITS), [0.9] * 5 + [0.0] * 100)
    assert verdict is Verdict.NOTHING
    # nor are voiced frames that never make a run
    verdict, _ = run(Endpointer(LIMITS), [0.9, 0.9, 0.0] * 100)
    assert verdict is Verdict.NOTHING


def test_endless_speech_is_cut_at_the_longest():
    verdict, at = run(Endpointer(LIMITS), [0.9] * 1000)
    assert verdict is Verdict.TOO_LONG and at == 300


# ---- the models, on real speech ----

def feed_detector(detector, pcm: bytes, cutoff: float | None = None) -> list[int]:
    heard = []
    for i in range(0, len(pcm), FRAME_BYTES):
        index = detector.feed(pcm[i:i + FRAME_BYTES], cutoff)
        if index is not None:
            heard.append(index)
    return heard


@needs_voice
@needs_espeak
def test_each_wake_word_is_heard_by_its_own_model_only():
    from agent.voice.wake import Detector

    detector = Detector(["okay_nabu", "alexa", "hey_mycroft"])
    for index, phrase in enumerate(["okay nabu", "alexa", "hey mycroft"]):
        detector.reset()
        heard = feed_detector(detector, silence(0.5) + espeak(phrase) + silence(1.0))
        assert heard and set(heard) == {index}, (phrase, heard)


@needs_voice
@needs_espeak
def test_other_phrases_and_noise_wake_nothing():
    from agent.voice.wake import Detector

    detector = Detector(["okay_nabu", "alexa", "hey_mycroft"])
    rng = np.random.default_rng(3)
    noise = (rng.normal(0, 3000, 16000 * 3)).astype("<i2").tobytes()
    for pcm in (espeak("turn on the kitchen light"), espeak("what time is it"), noise,
                silence(2.0)):
        detector.reset()
        assert feed_detector(detector, silence(0.5) + pcm + silence(1.0)) == []


@needs_voice
@needs_espeak
def test_a_raised_cutoff_holds_until_lowered_and_back():
    from agent.voice.wake import Detector

    detector = Detector(["okay_nabu"])
    pcm = silence(0.5) + espeak("okay nabu") + silence(1.0)
    for cutoff, heard in ((1.0, False), (None, True), (1.0, False), (None, True)):
        detector.reset()   # no probability passes 1.0: the raised cutoff refuses all
        assert bool(feed_detector(detector, pcm, cutoff)) is heard, cutoff


@needs_voice
@needs_espeak
def test_the_vad_ends_an_utterance_of_real_speech():
    from agent.voice.wake import Vad

    vad = Vad()
    speech = espeak("what is the weather like tomorrow")
    pcm = silence(0.3) + speech + silence(2.0)
    endpointer = Endpointer(Limits(start_seconds=2.0, silence_seconds=0.8, max_seconds=10,
                                   min_seconds=0.3))
    verdict, at = run(endpointer, [vad.probability(pcm[i:i + FRAME_BYTES])
                                   for i in range(0, len(pcm) - FRAME_BYTES + 1, FRAME_BYTES)])
    assert verdict is Verdict.ENDED
    speech_end = (0.3 * 16000 * 2 + len(speech)) / FRAME_BYTES
    # ends after the speech, before the trailing silence is over
    assert speech_end < at < speech_end + 200
    # and on noise-free silence, nothing
    vad.reset()
    pcm = silence(3.0)
    verdict, _ = run(Endpointer(Limits(start_seconds=2.0)),
                     [vad.probability(pcm[i:i + FRAME_BYTES])
                      for i in range(0, len(pcm), FRAME_BYTES)])
    assert verdict is Verdict.NOTHING
