"""[voice]: read into agent/voice/config.py's dataclasses; each mistake
named with its key and line. No audio, no models: the config imports none."""

from __future__ import annotations

import sys

import pytest

from agent.service.config import ConfigError, parse
from agent.voice.config import VoiceConfig

LOCAL = """\
[providers.local]
protocol = "openai-chat"
base_url = "http://127.0.0.1:11434/v1"
model = "llama3.2"
"""


def voice(text: str):
    return parse(LOCAL + "[voice]\n" + text, "/etc/homeagent/config.toml", {}).voice


def test_no_table_is_no_voice():
    assert parse(LOCAL, "/etc/homeagent/config.toml", {}).voice == VoiceConfig()
    assert not VoiceConfig().enabled


def test_a_full_table():
    config = voice(f"""\
source = "program"
program = [{sys.executable!r}, "-c", "pass", "--rate", "{{rate}}", "--ch={{channels}}"]
rate = 48000
channels = 2
asr = "tcp://127.0.0.1:10300"
asr_language = "en"
session = "kitchen"
wake = ["okay_nabu",
        {{ model = "alexa", session = "alexa-talk", provider = "local", language = "fr" }}]
silence_seconds = 1.2
follow_up = "always"
follow_up_seconds = 6
arbitration_window = 0.3
""".replace("'", '"'))
    assert config.enabled and config.source.kind == "program"
    assert config.source.format.rate == 48000 and config.source.format.channels == 2
    assert config.source.argv[1:] == ("-c", "pass", "--rate", "{rate}", "--ch={channels}")
    assert config.asr == ("tcp", "127.0.0.1", 10300) and config.asr_language == "en"
    assert [(w.name, w.session, w.provider, w.language) for w in config.wake] == [
        ("okay_nabu", None, None, None), ("alexa", "alexa-talk", "local", "fr")]
    assert config.session == "kitchen" and config.limits.silence_seconds == 1.2
    assert config.follow_up == "always" and config.follow_up_seconds == 6
    assert config.arbitration_window == 0.3


def test_the_arbitration_window_defaults_and_zero_turns_it_off():
    table = ('source = "wyoming"\naddress = "tcp://mic:10600"\nasr = "tcp://h:1"\n'
             'wake = ["alexa"]\n')
    assert voice(table).arbitration_window == 0.15
    assert voice(table + "arbitration_window = 0\n").arbitration_window == 0


def test_wake_words_of_a_wake_server_beside_those_in_process():
    config = voice("""\
source = "wyoming"
address = "tcp://mic:10600"
asr = "tcp://127.0.0.1:10300"
asr_language = "en"
wake_server = "tcp://127.0.0.1:10400"
wake = [
  "okay_nabu",
  { model = "hey_jarvis", server = true, session = "kitchen", language = "fr" },
  { model = "ok_nabu_v0.1", server = true },
]
""")
    assert config.wake_server == ("tcp", "127.0.0.1", 10400)
    assert [(w.name, w.server, w.session, w.language) for w in config.wake] == [
        ("okay_nabu", False, None, None), ("hey_jarvis", True, "kitchen", "fr"),
        ("ok_nabu_v0.1", True, None, None)]
    # a server's names are its own: a built-in's name or a path's shape means nothing
    assert voice('source = "wyoming"\naddress = "unix:/run/mic"\nasr = "tcp://h:1"\n'
                 'wake_server = "unix:/run/wake.sock"\n'
                 'wake = [{ model = "alexa", server = true },\n'
                 '        { model = "x.json", server = true }]\n'
                 ).wake[1].model == "x.json"


@pytest.mark.parametrize("text,key,problem", [
    ('asr = "tcp://h:1"\n', "voice.wake", "required key"),
    ('asr = "tcp://h:1"\nwake = []\n', "voice.wake", "at least one wake word"),
    ('asr = "tcp://h:1"\nwake = ["hey_siri"]\n', "voice.wake.model", "okay_nabu"),
    ('asr = "tcp://h:1"\nwake = ["mine.json"]\n', "voice.wake.model", "no such file"),
    ('asr = "tcp://h:1"\nwake = [{ model = "alexa", provider = "cloud" }]\n',
     "voice.wake.provider", "no provider named 'cloud'"),
    ('asr = "tcp://h:1"\nwake = ["alexa"]\nsession = "../etc"\n', "voice.session",
     "bad session id"),
    ('wake = ["alexa"]\n', "voice.asr", "required key"),
    ('asr = "http://h"\nwake = ["alexa"]\n', "voice.asr", "tcp://HOST:PORT"),
    ('asr = "tcp://h:1"\nwake = ["alexa"]\nsource = "program"\nprogram = ["no-such-mic-x"]\n',
     "voice.program", "not found"),
    ('asr = "tcp://h:1"\nwake = ["alexa"]\nsource = "program"\nprogram = ["sh", "{device}"]\n',
     "voice.program", "placeholders"),
    ('asr = "tcp://h:1"\nwake = ["alexa"]\nsource = "wyoming"\n', "voice.address",
     "required key"),
    ('asr = "tcp://h:1"\nwake = ["alexa"]\nwidth = 3\n', "voice.width", "one of 1, 2, 4"),
    ('asr = "tcp://h:1"\nwake = ["alexa"]\nfollow_up = "sometimes"\n', "voice.follow_up",
     "question"),
    ('asr = "tcp://h:1"\nwake = ["alexa"]\nmicrophone = "usb"\n', "voice.microphone",
     "unknown key"),
    ('asr = "tcp://h:1"\nwake = ["alexa"]\nbarge_in = "yes"\n', "voice.barge_in",
     "expected a boolean"),
    ('asr = "tcp://h:1"\nwake = ["alexa"]\nbarge_in_threshold = 1.5\n',
     "voice.barge_in_threshold", "between 0.01 and 0.999"),
    ('asr = "tcp://h:1"\nwake = [{ model = "hey_jarvis", server = true }]\n',
     "voice.wake.server", "needs [voice] wake_server"),
    ('asr = "tcp://h:1"\nwake = ["alexa"]\nwake_server = "tcp://h:2"\n', "voice.wake_server",
     "no wake word is the server's"),
    ('asr = "tcp://h:1"\nwake = [{ model = "x", server = true }]\nwake_server = "h:2"\n',
     "voice.wake_server", "tcp://HOST:PORT"),
    ('asr = "tcp://h:1"\nwake = [{ model = "x", server = "yes" }]\nwake_server = "tcp://h:2"\n',
     "voice.wake.server", "expected a boolean"),
    ('asr = "tcp://h:1"\nwake = [{ model = "", server = true }]\nwake_server = "tcp://h:2"\n',
     "voice.wake.model", "1 to 100 printable characters"),
    ('asr = "tcp://h:1"\nwake = [{ model = "a\\nb", server = true }]\n'
     'wake_server = "tcp://h:2"\n', "voice.wake.model", "printable"),
    ('asr = "tcp://h:1"\nwake = [{ model = "x", server = true }, { model = "x", server = true, '
     'session = "s" }]\nwake_server = "tcp://h:2"\n', "voice.wake.model", "named twice"),
    ('asr = "tcp://h:1"\nwake = [{ model = "alexa", language = 2 }]\n', "voice.wake.language",
     "expected a string"),
    ('asr = "tcp://h:1"\nwake = ["hey_siri"]\n', "voice.wake.model", "server = true"),
    ('asr = "tcp://h:1"\nwake = ["alexa"]\narbitration_window = 5\n',
     "voice.arbitration_window", "between 0 and 2"),
    ('asr = "tcp://h:1"\nwake = ["alexa"]\narbitration_window = -0.1\n',
     "voice.arbitration_window", "between 0 and 2"),
    ('asr = "tcp://h:1"\nwake = ["alexa"]\narbitration_window = "fast"\n',
     "voice.arbitration_window", "expected a number"),
])
def test_mistakes_are_named(text, key, problem):
    with pytest.raises(ConfigError) as caught:
        voice('source = "wyoming"\naddress = "tcp://mic:10600"\n' + text
              if "source" not in text else text)
    assert caught.value.key == key and problem in caught.value.problem, str(caught.value)
    assert caught.value.line is not None


def write_wav(path, seconds: float, rate: int = 16000, channels: int = 1) -> bytes:
    import wave

    pcm = bytes(range(256)) * (int(rate * seconds * channels * 2) // 256)
    with wave.open(str(path), "wb") as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        writer.writeframes(pcm)
    return pcm


def sound_table(tmp_path, value: str):
    return parse(LOCAL + '[voice]\nsource = "wyoming"\naddress = "tcp://mic:10600"\n'
                 f'asr = "tcp://h:1"\nwake = ["alexa"]\nwake_sound = "{value}"\n',
                 str(tmp_path / "config.toml"), {}).voice


def test_a_wake_sound_is_read_beside_the_config(tmp_path):
    pcm = write_wav(tmp_path / "ding.wav", 0.25, rate=22050, channels=2)
    sound = sound_table(tmp_path, "ding.wav").wake_sound
    assert (sound.pcm, sound.rate, sound.width, sound.channels) == (pcm, 22050, 2, 2)
    assert VoiceConfig().wake_sound is None


@pytest.mark.parametrize("make,problem", [
    (lambda path: None, "not a PCM WAV file"),
    (lambda path: path.write_text("RIFF? no"), "not a PCM WAV file"),
    (lambda path: write_wav(path, 6.0), "at most 5 s"),
    (lambda path: write_wav(path, 0.5, rate=2000), "a sound is 4000 to 192000 Hz"),
    (lambda path: write_wav(path, 0.0), "empty"),
])
def test_a_wake_sound_that_cannot_be_played_is_named(tmp_path, make, problem):
    make(tmp_path / "ding.wav")
    with pytest.raises(ConfigError) as caught:
        sound_table(tmp_path, "ding.wav")
    assert caught.value.key == "voice.wake_sound" and problem in caught.value.problem, \
        str(caught.value)
    assert str(tmp_path / "ding.wav") in caught.value.problem
