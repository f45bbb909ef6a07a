"""WyomingSpeech (agent/devices/wyoming_tts.py) against a real Wyoming TTS
server: tests/wyoming_tts_server.py, built on the `wyoming` package's
server classes, in its own process, with espeak-ng synthesizing real audio.
The sink is the "file" sink: the PCM that reaches it must be, sentence by
sentence and in order, the PCM espeak-ng makes for those sentences.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

import wyoming_tts_server as server
from agent.devices.base import Common, Event, Inbox, Overflow, SettingError
from agent.devices.wyoming_tts import WyomingSpeech
from helpers import until

pytestmark = [
    pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng"),
    pytest.mark.skipif(__import__("importlib").util.find_spec("wyoming") is None,
                       reason="the wyoming package is a test dependency"),
]

REQUEST = {"client": 1, "id": "a1", "session": "kitchen"}
SENTENCES = ["The living room is twenty one degrees.", "The kitchen is warmer!",
             "Shall I open a window?"]


@pytest.fixture
def tts_server(tmp_path):
    """start(streaming) -> (address, log path); the servers stop at the end."""
    started = []

    def start(streaming: bool) -> tuple[str, Path]:
        sock, log = tmp_path / f"tts{len(started)}.sock", tmp_path / f"tts{len(started)}.log"
        argv = [sys.executable, server.__file__, f"unix://{sock}", "--log", str(log)]
        process = subprocess.Popen(argv + (["--streaming"] if streaming else []),
                                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        started.append(process)
        return f"unix:{sock}", log, sock

    yield start
    for process in started:
        process.kill()
        process.wait()


def device(address: str, sink: Path, **settings) -> WyomingSpeech:
    return WyomingSpeech.from_settings(Common("voice", WyomingSpeech.DEFAULT_EVENTS),
                                       {"address": address, "sink": "file", "path": str(sink),
                                        **settings})


@asynccontextmanager
async def running(speech: WyomingSpeech):
    inbox = Inbox(256, Overflow.BLOCK)

    async def no_prompt(text: str) -> None:
        raise AssertionError("a speech device never prompts")

    async with trio.open_nursery() as nursery:
        await nursery.start(speech.run, inbox, no_prompt)
        yield inbox
        nursery.cancel_scope.cancel()


def expected_pcm(texts: list[str]) -> bytes:
    return b"".join(server.espeak_pcm(text)[3] for text in texts)


def spoken(log: Path) -> list[str]:
    """The texts the server has logged; a line it is still writing is not one yet."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().split("\n")[:-1]]


def listening(sock: Path) -> bool:
    """The server accepts connections (its socket file appears at bind,
    before it listens)."""
    with socket.socket(socket.AF_UNIX) as probe:
        return probe.connect_ex(str(sock)) == 0


async def started(tts_server, tmp_path, server_streams: bool, **settings):
    """A fresh server and a device for it: (device, server log, sink path)."""
    address, log, sock = tts_server(streaming=server_streams)
    await until(lambda: listening(sock), 20)
    sink = tmp_path / "audio.pcm"
    return device(address, sink, **settings), log, sink


async def all_heard(speech: WyomingSpeech, texts: list[str]) -> None:
    want = len(expected_pcm(texts))
    await until(lambda: speech.audio_bytes >= want, 30)


def heard_exactly(log: Path, sink: Path, texts: list[str]) -> bool:
    """The server spoke these texts, and the sink has their audio in order."""
    return spoken(log) == texts and sink.read_bytes() == expected_pcm(texts)


@pytest.mark.trio
async def test_a_server_without_streaming_gets_a_synthesize_per_sentence(tts_server, tmp_path):
    speech, log, sink = await started(tts_server, tmp_path, server_streams=False)
    async with running(speech) as inbox:
        assert speech.server_streams is False
        for sentence in SENTENCES:
            await inbox.put(Event("sentence", {"text": sentence}, REQUEST))
        await inbox.put(Event("done", {"text": " ".join(SENTENCES)}, REQUEST))
        await all_heard(speech, SENTENCES)
    assert heard_exactly(log, sink, SENTENCES)
    assert speech.sentences == 3


@pytest.mark.trio
async def test_a_streaming_server_gets_the_deltas_as_they_come(tts_server, tmp_path):
    speech, log, sink = await started(tts_server, tmp_path, server_streams=True)
    answer = " ".join(SENTENCES)
    async with running(speech) as inbox:
        assert speech.server_streams is True
        for start in range(0, len(answer), 7):  # deltas cut anywhere
            await inbox.put(Event("delta", {"text": answer[start:start + 7]}, REQUEST))
        # the sentences that are complete are spoken before the answer is over
        await until(lambda: spoken(log) == SENTENCES[:2], 30)
        await inbox.put(Event("done", {"text": answer}, REQUEST))
        await all_heard(speech, SENTENCES)
    assert heard_exactly(log, sink, SENTENCES)
    assert speech.answers == 1


MARKDOWN = ("## Rooms\n- The living room is **twenty one** degrees\n- The kitchen is "
            "[warmer](https://x.org/k)!\n```\ncode. More code.\n```\nShall I open a window? 🪟")
CLEANED = ["Rooms.", "The living room is twenty one degrees.", "The kitchen is warmer!",
           "Shall I open a window?"]


@pytest.mark.trio
async def test_a_streaming_server_gets_the_deltas_cleaned_for_speech(tts_server, tmp_path):
    speech, log, sink = await started(tts_server, tmp_path, server_streams=True)
    async with running(speech) as inbox:
        for start in range(0, len(MARKDOWN), 3):  # markers cut anywhere
            await inbox.put(Event("delta", {"text": MARKDOWN[start:start + 3]}, REQUEST))
        await inbox.put(Event("done", {"text": MARKDOWN}, REQUEST))
        await all_heard(speech, CLEANED)
    assert spoken(log) == CLEANED
    assert heard_exactly(log, sink, CLEANED)


@pytest.mark.trio
async def test_streaming_can_be_turned_off_for_a_streaming_server(tts_server, tmp_path):
    speech, log, sink = await started(tts_server, tmp_path, server_streams=True, streaming=False)
    async with running(speech) as inbox:
        await inbox.put(Event("sentence", {"text": SENTENCES[0]}, REQUEST))
        await all_heard(speech, SENTENCES[:1])
    assert heard_exactly(log, sink, SENTENCES[:1])


@pytest.mark.trio
async def test_a_server_that_closes_fails_the_device_with_a_named_error(tmp_path):
    sock = tmp_path / "bad.sock"
    listener = trio.socket.socket(trio.socket.AF_UNIX)
    await listener.bind(str(sock))
    listener.listen()

    async def serve_garbage():
        conn, _ = await listener.accept()
        with conn:
            await conn.recv(1024)
            await conn.send(b"this is not wyoming\n")

    speech = device(f"unix:{sock}", tmp_path / "audio.pcm", connect_timeout=5)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_garbage)
        with pytest.raises(ConnectionError, match="header_not_json"):
            await speech.run(Inbox(8, Overflow.BLOCK), None)
    listener.close()


@pytest.mark.parametrize("address", ["tcp://host", "tcp://:1", "tcp://h:0", "tcp://h:70000",
                                     "unix:relative.sock", "http://h:1", 5])
def test_a_bad_address_is_named(address):
    with pytest.raises(SettingError) as caught:
        WyomingSpeech.from_settings(Common("voice", WyomingSpeech.DEFAULT_EVENTS),
                                    {"address": address})
    assert caught.value.key == "address"


@pytest.mark.parametrize(("settings", "key"), [
    ({"sink": "file"}, "path"), ({"sink": "speaker"}, "sink"), ({"streaming": "yes"}, "streaming"),
    ({"alsa_device": "-D"}, "alsa_device"), ({"voice": ""}, "voice"),
    ({"max_buffered_seconds": 0}, "max_buffered_seconds"), ({"colour": 1}, "colour"),
    ({"speech": "on"}, "speech"), ({"speak_tool_calls": True}, "speak_tool_calls"),
    ({"speech": False, "code_placeholder": "code"}, "code_placeholder"),
])
def test_bad_settings_are_named(settings, key):
    with pytest.raises(SettingError) as caught:
        WyomingSpeech.from_settings(Common("voice", WyomingSpeech.DEFAULT_EVENTS),
                                    {"address": "tcp://127.0.0.1:10200", **settings})
    assert caught.value.key == key
