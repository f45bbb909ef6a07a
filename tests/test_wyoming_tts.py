"""WyomingSpeech (agent/devices/wyoming_tts.py) against a real Wyoming TTS
server: tests/wyoming_tts_server.py, built on the `wyoming` package's
server classes, in its own process, with espeak-ng synthesizing real audio.
The sink is the "file" sink: the PCM that reaches it must be, sentence by
sentence and in order, the PCM espeak-ng makes for those sentences.

Bad servers are raw sockets (garbage mid-audio, a huge payload_length, a
cut mid-event, a close, a stall at connect and at describe), the device
run by the real hub, so the reason checked is the one `status` shows. A server that dies
mid-answer is killed under a real daemon (`homeagent serve`, the mock
model) while a subscriber and the asker read the answer, then started
again on the same socket.
"""

from __future__ import annotations

import json
import select
import shutil
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

import hostile_tts_server
import wyoming_tts_server as server
from agent.core import replies
from agent.core.commands import Announce
from agent.devices.base import Common, DeviceSpec, Inbox, Overflow, SettingError
from agent.devices.hub import DeviceHub
from agent.devices.wyoming_tts import WyomingSpeech
from agent.wyoming.framing import Event as WyEvent, Reader, encode
from conftest import timeout
from daemon_harness import Daemon, ask_text
from helpers import asked, center_for, delivery, spawn_listening, until

pytestmark = [
    pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng"),
    pytest.mark.skipif(__import__("importlib").util.find_spec("wyoming") is None,
                       reason="the wyoming package is a test dependency"),
]

REQUEST = asked(1, "kitchen", 1, "a1")
SENTENCES = ["The living room is twenty one degrees.", "The kitchen is warmer!",
             "Shall I open a window?"]


@pytest.fixture
def tts_server(tmp_path):
    """start(streaming) -> (address, log path) of a server that listens;
    the servers stop at the end."""
    started = []

    def start(streaming: bool) -> tuple[str, Path]:
        sock, log = tmp_path / f"tts{len(started)}.sock", tmp_path / f"tts{len(started)}.log"
        argv = [server.__file__, f"unix://{sock}", "--log", str(log)]
        started.append(spawn_listening(argv + (["--streaming"] if streaming else []), sock))
        return f"unix:{sock}", log

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


async def started(tts_server, tmp_path, server_streams: bool, **settings):
    """A fresh server and a device for it: (device, server log, sink path)."""
    address, log = tts_server(streaming=server_streams)
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
            await inbox.put(delivery("sentence", REQUEST, **{"text": sentence}))
        await inbox.put(delivery("done", REQUEST, **{"text": " ".join(SENTENCES)}))
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
            await inbox.put(delivery("delta", REQUEST, **{"text": answer[start:start + 7]}))
        # the sentences that are complete are spoken before the answer is over
        await until(lambda: spoken(log) == SENTENCES[:2], 30)
        await inbox.put(delivery("done", REQUEST, **{"text": answer}))
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
            await inbox.put(delivery("delta", REQUEST, **{"text": MARKDOWN[start:start + 3]}))
        await inbox.put(delivery("done", REQUEST, **{"text": MARKDOWN}))
        await all_heard(speech, CLEANED)
    assert spoken(log) == CLEANED
    assert heard_exactly(log, sink, CLEANED)


@pytest.mark.trio
async def test_streaming_can_be_turned_off_for_a_streaming_server(tts_server, tmp_path):
    speech, log, sink = await started(tts_server, tmp_path, server_streams=True, streaming=False)
    async with running(speech) as inbox:
        await inbox.put(delivery("sentence", REQUEST, **{"text": SENTENCES[0]}))
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


# ---- bad peers, seen through the hub: what `status` shows ----

def hub_for(address: str, path: Path | None, **settings) -> DeviceHub:
    """A hub of one device; path is its file sink's, or None when the
    settings name another sink."""
    common = Common("voice", WyomingSpeech.DEFAULT_EVENTS, restart_max_delay=0.5)
    file_sink = {"sink": "file", "path": str(path)} if path is not None else {}
    return DeviceHub({"voice": DeviceSpec(common, WyomingSpeech, {
        "address": address, **file_sink, **settings})})


@asynccontextmanager
async def raw_server(tmp_path, serve):
    """A raw peer as the TTS server on a Unix socket: serve(stream) per
    connection, each after the device's describe was read."""
    sock = tmp_path / "raw.sock"
    listener = trio.socket.socket(trio.socket.AF_UNIX)
    await listener.bind(str(sock))
    listener.listen()
    listener = trio.SocketListener(listener)

    async def one(stream):
        async with stream:
            reader = Reader()
            while not any(e.type == "describe" for e in reader.feed(await stream.receive_some())):
                pass
            await serve(stream, reader)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, one, [listener])
        yield f"unix:{sock}"
        nursery.cancel_scope.cancel()


def failed_with(hub: DeviceHub, text: str):
    def check() -> bool:
        [status] = hub.status()
        return status["restarts"] >= 1 and text in (status["last_error"] or "")
    return check


INFO = encode(WyEvent("info", {"tts": [{"name": "raw", "supports_synthesize_streaming": False}]}))
FORMAT = {"rate": 16000, "width": 2, "channels": 1}
CHUNK = encode(WyEvent("audio-chunk", FORMAT, b"\x01\x02" * 512))


async def until_synthesize(stream, reader: Reader) -> None:
    while not any(e.type == "synthesize" for e in reader.feed(await stream.receive_some())):
        pass


@pytest.mark.parametrize(("after_a_chunk", "named"), [
    (b"\x00\xffnot a header\n", "header_not_json"),
    (b'{"type": "audio-chunk", "payload_length": 1000000000000}\n', "payload_too_long"),
    (CHUNK[:len(CHUNK) // 2], "closed_mid_event"),  # the server goes away mid-audio
    (b"", "closed the connection"),
])
@pytest.mark.trio
async def test_a_bad_server_mid_audio_fails_the_device_with_the_reason(tmp_path, after_a_chunk,
                                                                       named):
    async def serve(stream, reader):
        await stream.send_all(INFO)
        await until_synthesize(stream, reader)
        await stream.send_all(encode(WyEvent("audio-start", FORMAT)) + CHUNK + after_a_chunk)

    sink = tmp_path / "audio.pcm"
    async with raw_server(tmp_path, serve) as address, trio.open_nursery() as nursery:
        hub = hub_for(address, sink)
        await nursery.start(hub.run, center_for(hub))
        await until(lambda: hub.status()[0]["connected"], 10)
        await hub.deliver(replies.Delta("The hall light is on. "), REQUEST)
        await until(failed_with(hub, named), 20)
        [status] = hub.status()
        assert status["last_error"].startswith("TTSServerError:")
        # it connects again after its backoff (the same bad server answers describe)
        await until(lambda: hub.status()[0]["connected"], 20)
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_speaking_lasts_from_the_queued_sentence_to_the_end_of_its_audio(tmp_path):
    """What a board's `speaking` state reads: one change on, while the server
    holds the audio back, and one off once the audio is in the sink."""
    asked, release = trio.Event(), trio.Event()

    async def serve(stream, reader):
        await stream.send_all(INFO)
        await until_synthesize(stream, reader)
        asked.set()
        await release.wait()
        await stream.send_all(encode(WyEvent("audio-start", FORMAT)) + CHUNK
                              + encode(WyEvent("audio-stop", {})))
        await trio.sleep_forever()

    sink = tmp_path / "audio.pcm"
    async with raw_server(tmp_path, serve) as address, trio.open_nursery() as nursery:
        hub = hub_for(address, sink)
        seen = []
        hub.watch_speech(lambda: seen.append(hub.speaking))
        await nursery.start(hub.run, center_for(hub))
        await until(lambda: hub.status()[0]["connected"], 10)
        assert not hub.speaking
        await hub.center.announce(Announce("The hall light is on."))
        await asked.wait()
        await until(lambda: seen == [True], 10)
        assert hub.status()[0]["speaking"]
        release.set()
        await until(lambda: seen == [True, False], 10)
        assert sink.read_bytes() == b"\x01\x02" * 512
        assert not hub.status()[0]["speaking"]
        nursery.cancel_scope.cancel()


# A sink program that reads its audio to the end, says so, and goes on
# "playing" (runs) until the test lets it exit, or for argv[3] seconds
HOLDING_SINK = """
import os, sys, time
sys.stdin.buffer.read()
open(sys.argv[1], "w").close()
deadline = time.monotonic() + float(sys.argv[3])
while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
    time.sleep(0.01)
"""


@pytest.mark.parametrize("ended_by", ["its exit", "a stop"])
@pytest.mark.trio
async def test_a_sound_keeps_the_board_speaking_until_its_sink_program_has_exited(tmp_path,
                                                                                  ended_by):
    """The wake sound's audio fits in the sink's pipe: the device has
    written it all and closed the pipe while the program still plays it.
    Until the program exits the board speaks (the voice door drops the
    microphone's frames until then: the sound's echo), and a stop (a
    barge-in) kills it rather than waiting for the end."""
    async def serve(stream, reader):
        await stream.send_all(INFO)
        await trio.sleep_forever()

    heard, release = tmp_path / "heard", tmp_path / "release"
    async with raw_server(tmp_path, serve) as address, trio.open_nursery() as nursery:
        # it runs past the wait below unless something ends it
        hub = hub_for(address, None, sink="program", sink_program=[
            sys.executable, "-c", HOLDING_SINK, str(heard), str(release), str(timeout(60))])
        seen = []
        hub.watch_speech(lambda: seen.append(hub.speaking))
        await nursery.start(hub.run, center_for(hub))
        await until(lambda: hub.status()[0]["connected"], 10)
        await hub.center.play(replies.Sound(b"\x01\x02" * 4800, 16000, 2, 1))
        await until(heard.exists, 20)   # all of it written, its stdin closed
        assert hub.speaking and seen == [True]
        assert hub.status()[0]["speaking"]
        if ended_by == "a stop":
            assert hub.silence([], everything=True) == ["voice"]
        else:
            release.touch()
        await until(lambda: seen == [True, False], 20)
        assert hub.status()[0]["sounds"] == 1
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_server_that_stalls_at_describe_is_named(tmp_path):
    async def serve(stream, reader):
        await trio.sleep_forever()

    async with raw_server(tmp_path, serve) as address, trio.open_nursery() as nursery:
        hub = hub_for(address, tmp_path / "audio.pcm", connect_timeout=0.2)
        await nursery.start(hub.run, center_for(hub))
        await until(failed_with(hub, "did not answer describe within 0.2 s (connect_timeout)"),
                    20)
        assert hub.status()[0]["state"] in ("failed", "starting")
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_no_server_at_the_address_is_named_and_retried(tmp_path):
    async with trio.open_nursery() as nursery:
        hub = hub_for(f"unix:{tmp_path / 'absent.sock'}", tmp_path / "audio.pcm")
        await nursery.start(hub.run, center_for(hub))
        await until(lambda: hub.status()[0]["restarts"] >= 2, 20)
        assert "No such file" in hub.status()[0]["last_error"]
        nursery.cancel_scope.cancel()


# ---- a TTS server that dies mid-answer, in a real daemon ----

ANSWER = ("The hall light is on. The kitchen window is open and the oven is off. "
          "The garage door is closed. Good night!")


def tts_process(sock: Path, log: Path) -> subprocess.Popen:
    return spawn_listening([server.__file__, f"unix://{sock}", "--log", str(log)], sock)


def until_sync(condition, seconds: float = 30) -> None:
    """Wait, polling, until condition() holds; fail after `seconds` (scaled)."""
    deadline = time.monotonic() + timeout(seconds)
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def voice_status(daemon: Daemon) -> dict:
    with daemon.client() as client:
        [status] = client.call("status")["devices"]
    return status


def test_a_server_that_dies_mid_answer_is_reported_and_connected_again(tmp_path, mock):
    sock, sink = tmp_path / "tts.sock", tmp_path / "audio.pcm"
    first_log, second_log = tmp_path / "tts1.log", tmp_path / "tts2.log"
    tts = tts_process(sock, first_log)
    (tmp_path / "d").mkdir()
    daemon = Daemon(tmp_path / "d", mock.url, providers={"mock": {"headers": {
        "x-mock-answer": json.dumps(ANSWER), "x-mock-delay-ms": "150"}}},
        extra=f'[devices.voice]\ntype = "wyoming-tts"\naddress = "unix:{sock}"\n'
              f'sink = "file"\npath = "{sink}"\nrestart_max_delay = 1\n')
    try:
        daemon.start()
        until_sync(lambda: voice_status(daemon)["connected"])
        subscriber = daemon.raw()
        subscriber.send(b'{"id": 1, "op": "subscribe"}\n')
        assert subscriber.line()["type"] == "subscribed"
        with daemon.client() as client:
            request = client.send("ask", prompt="Evening report?")
            # the server dies once it has the first sentence; about 4 s of answer are to come
            until_sync(lambda: spoken(first_log)[:1] == ["The hall light is on."])
            tts.kill()
            tts.wait()
            answer = "".join(r["text"] for r in client.replies(request, "ask")
                             if r["type"] == "delta")
        assert answer == ANSWER  # the asker has it all
        seen = []
        while not seen or seen[-1]["type"] != "done":
            seen.append(subscriber.line())
        assert "".join(e["text"] for e in seen if e["type"] == "delta") == ANSWER
        failed = [e for e in seen if e["type"] == "device" and e["state"] == "failed"]
        assert failed[0]["device"] == "voice"
        assert failed[0]["error"] == "TTSServerError: the TTS server closed the connection"
        status = voice_status(daemon)
        assert status["restarts"] >= 1 and status["dropped"] >= 1 and not status["connected"]
        assert "device voice failed (TTSServerError: the TTS server closed the connection)" \
            in daemon.log()

        # a server that comes back is connected again, and speaks the next answer
        tts = tts_process(sock, second_log)
        until_sync(lambda: voice_status(daemon)["connected"])
        assert voice_status(daemon)["state"] == "running"
        heard = sink.stat().st_size if sink.exists() else 0
        with daemon.client() as client:
            assert ask_text(client, "Evening report?")[0] == ANSWER
        sentences = ["The hall light is on.", "The kitchen window is open and the oven is off.",
                     "The garage door is closed.", "Good night!"]
        want = heard + len(expected_pcm(sentences))
        until_sync(lambda: sink.stat().st_size >= want)
        assert spoken(second_log) == sentences
        assert sink.read_bytes()[heard:] == expected_pcm(sentences)
        subscriber.close()
    finally:
        tts.kill()
        tts.wait()
        assert daemon.stop() == 0, daemon.log()


@pytest.mark.trio
async def test_a_server_that_does_not_accept_is_named_at_connect(tmp_path):
    # A listener that never accepts, its backlog filled until a connection
    # hangs: Linux drops the SYNs of a full accept queue, so ours hangs too.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    try:
        while True:
            filler = socket.socket()
            filler.setblocking(False)
            fillers.append(filler)
            filler.connect_ex(listener.getsockname())
            if not select.select([], [filler], [], 0.2)[1]:
                break  # this one hangs
        assert len(fillers) < 64
        address = "tcp://127.0.0.1:%d" % listener.getsockname()[1]
        async with trio.open_nursery() as nursery:
            hub = hub_for(address, tmp_path / "audio.pcm", connect_timeout=0.3)
            await nursery.start(hub.run, center_for(hub))
            await until(failed_with(hub, "no connection to the TTS server within 0.3 s "
                                         "(connect_timeout)"), 20)
            nursery.cancel_scope.cancel()
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


# ---- a hostile TTS server process: its claimed format sizes no buffer ----

FLOOD = 400 * 1024 * 1024  # bytes of audio the server sends for one sentence


def hostile_tts(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    sock = tmp_path / "hostile.sock"
    process = subprocess.Popen([sys.executable, hostile_tts_server.__file__, str(sock), *args])
    until_sync(sock.exists, 20)
    return process, sock


def until_it_stops_sending(sent: Path) -> int:
    """Wait until the server's count of audio sent has not grown for a
    second (the reader stopped taking it, or the connection ended)."""
    last, since = -1, time.monotonic()
    deadline = time.monotonic() + timeout(120)
    while time.monotonic() - since < 1:
        assert time.monotonic() < deadline, "the server never stopped sending"
        now = int(sent.read_text() or 0) if sent.exists() else 0
        if now != last:
            last, since = now, time.monotonic()
        time.sleep(0.05)
    return last


@pytest.mark.parametrize(("claimed", "refused"), [
    (["--rate", str(10**12)], "rate 1000000000000, width 2, channels 1"),
    (["--channels", "1000"], "rate 22050, width 2, channels 1000"),
    (["--rate", "192000", "--width", "4", "--channels", "8"], None),  # plausible, 6 MB a second
], ids=["rate-1e12", "channels-1000", "flood-at-the-largest-format"])
def test_a_servers_claimed_format_never_sizes_the_buffer_past_memory_high(tmp_path, mock,
                                                                          claimed, refused):
    """A real daemon and a hostile server process sending 400 MB of audio
    for a sentence, to a sink that never reads. A format no sink plays is
    refused at audio-start (the device fails with AudioFormatError and
    connects again); a plausible one is held to MAX_BUFFERED_BYTES. The
    daemon's peak RSS stays under the unit's MemoryHigh."""
    from daemon_harness import MEMORY_HIGH_MIB

    sent = tmp_path / "sent"
    tts, sock = hostile_tts(tmp_path, *claimed, "--bytes", str(FLOOD), "--sent", str(sent))
    (tmp_path / "d").mkdir()
    daemon = Daemon(tmp_path / "d", mock.url, providers={"mock": {"headers": {
        "x-mock-answer": json.dumps("The hall light is on.")}}},
        extra=f'[devices.voice]\ntype = "wyoming-tts"\naddress = "unix:{sock}"\n'
              f'sink = "program"\nsink_program = ["sleep", "3600"]\nrestart_max_delay = 1\n')
    try:
        daemon.start()
        until_sync(lambda: voice_status(daemon)["connected"])
        with daemon.client() as client:
            assert ask_text(client, "The hall?")[0] == "The hall light is on."
        until_sync(lambda: sent.exists())
        held = until_it_stops_sending(sent)
        peak = daemon.peak_rss_mib(f"a TTS server claiming {' '.join(claimed)}, "
                                   f"{held / 2**20:.0f} MiB taken of its audio")
        assert peak < MEMORY_HIGH_MIB
        status = voice_status(daemon)
        if refused:
            assert status["last_error"] == (
                "AudioFormatError: the TTS server claimed an audio format no sink plays: "
                f"{refused} (a sink plays 4000 to 192000 Hz, 1 to 8 channels)")
            assert status["restarts"] >= 1 and status["audio_bytes"] == 0
            until_sync(lambda: voice_status(daemon)["connected"])  # connected again
        else:
            assert status["restarts"] == 0 and status["connected"]
    finally:
        tts.kill()
        tts.wait()
        assert daemon.stop() == 0, daemon.log()


@pytest.mark.trio
async def test_a_server_that_never_sends_audio_stop_fails_and_the_board_stops_speaking(tmp_path):
    """A hostile server process sends audio-start and a chunk for a
    sentence, then nothing, its connection open: after audio_timeout the
    device fails with AudioTimeout, is no longer speaking, and connects
    again."""
    tts, sock = hostile_tts(tmp_path, "--no-stop")
    try:
        hub = hub_for(f"unix:{sock}", tmp_path / "audio.pcm", audio_timeout=0.5)
        seen = []
        hub.watch_speech(lambda: seen.append(hub.speaking))
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.run, center_for(hub))
            await until(lambda: hub.status()[0]["connected"], 10)
            await hub.deliver(replies.Delta("The hall light is on. "), REQUEST)
            await until(lambda: seen[:1] == [True], 10)
            await until(failed_with(hub, "AudioTimeout: the TTS server sent nothing for 0.5 s "
                                         "while a synthesis was awaited (audio_timeout)"), 20)
            assert seen[-1] is False and not hub.speaking
            assert (tmp_path / "audio.pcm").stat().st_size == hostile_tts_server.CHUNK
            await until(lambda: hub.status()[0]["connected"], 20)  # connected again
            assert not hub.speaking
            nursery.cancel_scope.cancel()
    finally:
        tts.kill()
        tts.wait()
