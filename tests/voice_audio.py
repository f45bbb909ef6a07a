"""Speech and signals for the voice tests: espeak-ng's voice at 16 kHz mono
(through the daemon's own converter), silence, and WAV files of them."""

from __future__ import annotations

import io
import shutil
import subprocess
import wave

import pytest

from agent.voice.audio import Converter, Format

RATE = 16000


def has_voice_extra() -> bool:
    try:
        import pymicro_vad  # noqa: F401
        import pymicro_wakeword  # noqa: F401
    except ImportError:
        return False
    return True


needs_voice = pytest.mark.skipif(not has_voice_extra(),
                                 reason="the voice extra (pymicro-wakeword, pymicro-vad) "
                                        "is not installed: pip install .[voice]")
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None,
                                  reason="espeak-ng is not installed")


def espeak(text: str, voice: str = "en-us") -> bytes:
    """16 kHz 16-bit mono PCM of espeak-ng saying text."""
    wav = subprocess.run(["espeak-ng", "-v", voice, "--stdout", text], check=True,
                         capture_output=True, timeout=60).stdout
    with wave.open(io.BytesIO(wav)) as reader:
        fmt = Format(reader.getframerate(), reader.getsampwidth(), reader.getnchannels())
        return Converter(fmt).convert(reader.readframes(reader.getnframes()))


def silence(seconds: float) -> bytes:
    return bytes(int(RATE * seconds) * 2)


def write_wav(path, pcm: bytes, rate: int = RATE) -> None:
    with wave.open(str(path), "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        writer.writeframes(pcm)
