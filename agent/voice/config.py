"""[voice]: the board's ears (agent/voice/service.py); agent/service/config.py
reads the table into this."""

from __future__ import annotations

from dataclasses import dataclass

from agent.core.replies import Sound
from agent.voice.audio import Format
from agent.voice.endpoint import Limits

# the wake words in pymicro-wakeword's wheel (agent/voice/wake.py)
BUILTIN = ("okay_nabu", "hey_jarvis", "hey_mycroft", "alexa")
MAX_ARBITRATION_WINDOW = 2.0   # seconds; agent/mqtt/claims.py's MAX_WINDOW
@dataclass(frozen=True)
class WakeWord:
    """One wake word: its model (in process: a built-in name or a model's
    JSON path; with server: the wake server's name for it), and the
    session, provider and speech-to-text language of its asks (None: the
    [voice] table's)."""
    model: str
    session: str | None = None
    provider: str | None = None
    language: str | None = None
    server: bool = False

    @property
    def name(self) -> str:
        if self.server:
            return self.model
        return self.model.rsplit("/", 1)[-1].removesuffix(".json")


@dataclass(frozen=True)
class SourceConfig:
    """Where the microphone's audio comes from: "arecord" (alsa_device),
    "program" (argv: its stdout is raw PCM of `format`; `{rate}`, `{width}`,
    `{channels}` in its arguments are the format's) or "wyoming" (address
    of a Wyoming mic server: its audio-chunks carry their format)."""
    kind: str = "arecord"
    alsa_device: str = "default"
    argv: tuple[str, ...] = ()
    address: tuple[str, str, int] | None = None
    format: Format = Format()
    restart_max_delay: float = 30.0
    buffer_seconds: float = 2.0   # audio held for the detector before drops


@dataclass(frozen=True)
class VoiceConfig:
    enabled: bool = False
    source: SourceConfig = SourceConfig()
    wake: tuple[WakeWord, ...] = ()
    wake_server: tuple[str, str, int] | None = None   # the Wyoming wake server's address
    asr: tuple[str, str, int] | None = None
    asr_name: str | None = None
    asr_language: str | None = None
    connect_timeout: float = 5.0
    answer_timeout: float = 15.0
    session: str = "voice"
    provider: str | None = None
    limits: Limits = Limits()
    follow_up: str = "question"   # "question", "always" or "never"
    follow_up_seconds: float = 5.0
    error_text: str = "I could not hear that."
    speech_tail: float = 0.5      # seconds after the board spoke that count as its speech
    barge_in: bool = True         # the wake word heard over the board's speech stops it
    barge_in_threshold: float = 0.9   # the wake word's probability needed over its speech
    max_speaking_seconds: float = 300.0
    # seconds the boards on the broker that heard a wake word take to agree on
    # the one that answers (agent/mqtt/claims.py); 0: this board answers alone
    arbitration_window: float = 0.15
    wake_sound: Sound | None = None   # played when the wake word is heard, before listening
