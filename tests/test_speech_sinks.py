"""The audio sinks of WyomingSpeech (agent/devices/wyoming_tts.py) beyond
aplay and a file, with real processes all through: the TTS server is
tests/wyoming_tts_server.py (the `wyoming` package's server classes,
espeak-ng making the audio) in its own process, and the audio goes

- to a program's stdin: a Python process appending what it reads to a file;
- to a network speaker: tests/wyoming_snd_server.py, a Wyoming snd server
  on the `wyoming` package's server classes in its own process.

What arrives must be, byte for byte and in order, the PCM espeak-ng made
for the sentences. A sink that dies (the program exits, the speaker goes
away) fails the device with SinkError.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

import wyoming_snd_server
from agent.devices.base import Common, Inbox, Overflow, SettingError
from agent.devices.wyoming_tts import SinkError, WyomingSpeech
from helpers import delivery, spawn_listening, until
from test_wyoming_tts import (REQUEST, SENTENCES, all_heard, expected_pcm, pytestmark, running,
                              server, tts_server)

__all__ = ["pytestmark", "tts_server"]  # the skip marks and the fixture, shared

# Appends its stdin to argv[1] and its format arguments to argv[1].formats.
RECORDER = ("import sys; open(sys.argv[1] + '.formats', 'a').write(' '.join(sys.argv[2:]) + "
            "chr(10)); out = open(sys.argv[1], 'ab'); out.write(sys.stdin.buffer.read())")
LONG = " ".join(SENTENCES * 3)


def speech(address: str, **settings) -> WyomingSpeech:
    return WyomingSpeech.from_settings(Common("voice", WyomingSpeech.DEFAULT_EVENTS),
                                       {"address": address, **settings})


def espeak_format(text: str) -> str:
    rate, width, channels, _ = server.espeak_pcm(text)
    return f"{rate} {width} {channels}"


@pytest.fixture
def tts(tts_server):
    """start() -> the address of a fresh non-streaming TTS server, listening."""
    def start() -> str:
        address, _ = tts_server(streaming=False)
        return address
    return start


@pytest.fixture
def speaker(tmp_path):
    """start(*options) -> (address, out path) of a Wyoming snd server, listening."""
    started = []

    def start(*options: str) -> tuple[str, Path]:
        sock, out = tmp_path / f"snd{len(started)}.sock", tmp_path / f"snd{len(started)}.pcm"
        started.append(spawn_listening(
            [wyoming_snd_server.__file__, f"unix://{sock}", str(out), *options], sock))
        return f"unix:{sock}", out

    yield start
    for process in started:
        process.kill()
        process.wait()


async def speak(device: WyomingSpeech, texts: list[str]) -> None:
    async with running(device) as inbox:
        for text in texts:
            await inbox.put(delivery("sentence", REQUEST, **{"text": text}))
        await all_heard(device, texts)


async def failure_of(device: WyomingSpeech, text: str) -> BaseException:
    """What run() raises while it speaks text, out of its task group."""
    inbox = Inbox(8, Overflow.BLOCK)
    await inbox.put(delivery("sentence", REQUEST, **{"text": text}))
    with trio.fail_after(30):
        with pytest.raises(BaseException) as caught:
            await device.run(inbox, None)
    error = caught.value
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


@pytest.mark.trio
async def test_a_program_gets_the_pcm_on_stdin_with_its_format_in_argv(tts, tmp_path):
    out = tmp_path / "program.pcm"
    device = speech(tts(), sink="program", sink_program=[
        sys.executable, "-c", RECORDER, str(out), "{rate}", "{width}", "{channels}"])
    await speak(device, SENTENCES)
    await until(lambda: out.exists() and out.read_bytes() == expected_pcm(SENTENCES), 20)
    # one run of the program per utterance, told the audio's format
    assert Path(f"{out}.formats").read_text().splitlines() == \
        [espeak_format(text) for text in SENTENCES]


@pytest.mark.trio
async def test_a_wyoming_speaker_gets_the_pcm_as_audio_events(tts, speaker):
    address, out = speaker()
    device = speech(tts(), sink="wyoming", sink_address=address)
    await speak(device, SENTENCES)
    # The device waits for played only so long past each utterance's length
    # (PLAYED_GRACE): a speaker slower than that (the emulated run) may still
    # be writing the last chunks when speak() is done.
    await until(lambda: out.read_bytes() == expected_pcm(SENTENCES), 30)
    assert Path(f"{out}.formats").read_text().splitlines() == \
        [espeak_format(text) for text in SENTENCES]


@pytest.mark.trio
async def test_a_wyoming_speaker_that_sends_no_played_still_gets_every_utterance(tts, speaker):
    address, out = speaker("--no-played")
    device = speech(tts(), sink="wyoming", sink_address=address)
    # the wait for played is bounded: the second utterance follows the first
    await speak(device, SENTENCES[1:])
    await until(lambda: out.read_bytes() == expected_pcm(SENTENCES[1:]), 30)


@pytest.mark.trio
async def test_a_program_that_exits_fails_the_device_with_a_named_error(tts):
    # exits without reading: the PCM (over 200 kB) is more than a pipe holds (64 kB)
    device = speech(tts(), sink="program",
                    sink_program=[sys.executable, "-c", "raise SystemExit(3)"])
    error = await failure_of(device, " ".join(SENTENCES))
    assert type(error) is SinkError
    assert "stopped reading" in str(error)


@pytest.mark.trio
async def test_a_program_that_cannot_start_fails_the_device_with_a_named_error(tts, tmp_path):
    program = tmp_path / "player"
    program.write_text("#!/bin/sh\ncat > /dev/null\n")
    program.chmod(0o755)
    device = speech(tts(), sink="program", sink_program=[str(program)])
    program.unlink()  # gone after the config was checked
    error = await failure_of(device, SENTENCES[0])
    assert type(error) is SinkError and "could not be started" in str(error)


@pytest.mark.trio
async def test_a_speaker_that_dies_mid_audio_fails_the_device_with_a_named_error(tts, speaker):
    address, out = speaker("--exit-after", "4096")
    device = speech(tts(), sink="wyoming", sink_address=address)
    # the PCM (over 600 kB) is more than a socket's buffers hold (about 200 kB)
    error = await failure_of(device, LONG)
    assert type(error) is SinkError and "closed the connection" in str(error)
    assert expected_pcm([LONG]).startswith(out.read_bytes())


@pytest.mark.trio
async def test_a_speaker_that_is_not_there_fails_the_device_with_a_named_error(tts, tmp_path):
    device = speech(tts(), sink="wyoming", sink_address=f"unix:{tmp_path}/none.sock")
    error = await failure_of(device, SENTENCES[0])
    assert type(error) is SinkError and "could not be reached" in str(error)


@pytest.mark.parametrize(("settings", "key"), [
    ({"sink": "program"}, "sink_program"),
    ({"sink": "program", "sink_program": "aplay -"}, "sink_program"),
    ({"sink": "program", "sink_program": ["relative/player"]}, "sink_program"),
    ({"sink": "program", "sink_program": ["no-such-player-here"]}, "sink_program"),
    ({"sink": "program", "sink_program": ["cat", "{text}"]}, "sink_program"),
    ({"sink": "program", "sink_program": ["{rate}"]}, "sink_program"),
    ({"sink": "wyoming"}, "sink_address"),
    ({"sink": "wyoming", "sink_address": "tcp://host"}, "sink_address"),
    ({"sink_address": "tcp://127.0.0.1:10601"}, "sink_address"),   # only with sink = "wyoming"
    ({"sink": "file", "path": "/tmp/a", "sink_program": ["cat"]}, "sink_program"),
    ({"path": "/tmp/a"}, "path"),
])
def test_bad_sink_settings_are_named(settings, key):
    with pytest.raises(SettingError) as caught:
        speech("tcp://127.0.0.1:10200", **settings)
    assert caught.value.key == key
