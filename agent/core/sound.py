"""Sounds the daemon plays from its config (a voice door's wake sound, the
timers' chime): a WAV file read once, at start, into a replies.Sound held
in memory, bounded, in a format a speech device's sink plays."""

from __future__ import annotations

from agent.core.replies import Sound

MAX_SECONDS = 5.0
RATES = (4000, 192000)
MAX_CHANNELS = 8


def read_sound(path: str) -> Sound:
    """The PCM of a WAV file; ValueError saying what is wrong with it."""
    import wave  # only for a daemon with a sound

    try:
        with wave.open(path, "rb") as reader:
            rate, width = reader.getframerate(), reader.getsampwidth()
            channels, frames = reader.getnchannels(), reader.getnframes()
            low, high = RATES
            if not (low <= rate <= high and channels <= MAX_CHANNELS):
                raise ValueError(f"{rate} Hz, {channels} channels: a sound is {low} to {high} "
                                 f"Hz, 1 to {MAX_CHANNELS} channels")
            if frames > rate * MAX_SECONDS:
                raise ValueError(f"{frames / rate:.1f} s: a sound is at most {MAX_SECONDS:g} s")
            pcm = reader.readframes(frames)
    except (OSError, EOFError, wave.Error) as error:
        raise ValueError(f"not a PCM WAV file that can be read ({error})") from None
    if not pcm:
        raise ValueError("the sound is empty")
    return Sound(pcm, rate, width, channels)
