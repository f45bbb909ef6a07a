"""announce and stop (barge-in) end to end: `homeagent serve` and the mock
model as real processes (tests/daemon_harness.py), a `[devices.voice]` of
type "wyoming-tts" on a real Wyoming TTS server (tests/wyoming_tts_server.py:
the `wyoming` package's server classes, espeak-ng making the audio) with
the "file" sink, a command device whose program sleeps for the number it is
given, and a serial board on a real pty (tests/test_serial_daemon.py).

What is real: the daemon, the mock model streaming over HTTP, the TTS
server and espeak-ng, the audio written to the sink file, the pty, and in
the aplay test aplay itself. What is not: a sound card. The file sink takes
audio as fast as the server makes it, so there "no audio after the stop" is
checked by the device's own count of PCM written after the stop and by the
sink's bytes; for aplay, ALSA's file plugin writes into a FIFO that the
test reads at the audio's own rate (PacedCard), so aplay is held back as by
a card, and what reaches the card after the stop is counted. No test waits
a fixed time for what might still come after a stop: it has the same
device say something new (MARKER, or the next answer) and waits for that
audio, with timeout() as the bound of a hang only. The device plays one
connection to the server at a time, in order, so nothing of the stopped
answer can come after the new audio: what came before it is all the stop
let through.

Stop latency: the `stopped` reply carries `seconds`, measured inside the
daemon from the stop op to the stopped streams closed and the devices
silenced (no disk on that path); the client measures the ask's final reply
too, which comes after the history's fsync. Both are printed over
STOP_TRIES stops (pytest -s shows them), and neither is asserted: a clock
on a shared machine (or under qemu) is no pass/fail criterion. What the
tests hold is what a stop does, not how fast: nothing of the stopped answer
is streamed, synthesized or played after it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import trio

import wyoming_tts_server as tts
from agent.core import replies
from agent.core.commands import Announce, Refused
from agent.core.deliveries import Delivery
from agent.devices.base import Common, Device, DeviceSpec
from agent.devices.hub import DeviceHub
from agent.devices.wyoming_tts import WyomingSpeech
from conftest import timeout
from daemon_harness import Daemon, MockServer, child_env
from helpers import asked, center_for, delivery, of_type, spawn_listening, until
from test_serial_daemon import SerialBoard, board_toml, wait_until
from test_tool_loop import FIRST, PROMPT, relay_daemon
from test_wyoming_tts import expected_pcm, running, started, tts_server  # noqa: F401

pytestmark = [
    pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng"),
    pytest.mark.skipif(__import__("importlib").util.find_spec("wyoming") is None,
                       reason="the wyoming package is a test dependency"),
]

ANNOUNCEMENT = ["Dinner is ready.", "Please come to the kitchen."]
# Ten sentences at 100 ms a delta of a few characters: about 20 s if nobody stops it.
LONG_SENTENCES = [f"This is sentence number {n} of a long answer." for n in range(1, 11)]
LONG = " ".join(LONG_SENTENCES)
MAX_ANNOUNCE = 300
STOP_TRIES = 3
CHUNK_BYTES = tts.CHUNK_SAMPLES * 2  # one audio-chunk of the server: 16-bit mono
MARKER = "This comes after the stop."
SLEEPER = ("import pathlib, sys, time; pathlib.Path(sys.argv[1]).touch(); "
           "time.sleep(float(sys.argv[2]) if sys.argv[2].isdigit() else 0)")


def device_toml(name: str, settings: dict) -> str:
    from daemon_harness import toml_value
    return "\n".join([f"[devices.{name}]",
                      *(f"{k} = {toml_value(v)}" for k, v in settings.items())])


class Setup:
    def __init__(self, directory: Path, mock: MockServer) -> None:
        self.dir = directory
        self.sock, self.log = directory / "tts.sock", directory / "tts.log"
        self.sink, self.marker = directory / "audio.pcm", directory / "sleeper.started"
        self.server = spawn_listening([tts.__file__, f"unix://{self.sock}", "--log",
                                       str(self.log)], self.sock)
        self.board = SerialBoard(directory / "usb-Board-if00-port0").plug()
        extra = "\n".join([
            board_toml(self.board.link),
            device_toml("voice", {"type": "wyoming-tts", "address": f"unix:{self.sock}",
                                  "sink": "file", "path": str(self.sink)}),
            device_toml("mute", {"type": "wyoming-tts", "address": f"unix:{directory}/none",
                                 "sink": "file", "path": str(directory / "none.pcm"),
                                 "restart_max_delay": 60}),
            device_toml("sleeper", {"type": "command", "events": ["sentence"], "speech": True,
                                    "argv": [sys.executable, "-c", SLEEPER, str(self.marker),
                                             "{text}"]}),
        ])
        self.daemon = Daemon(directory, mock.url, daemon={"max_announce_chars": MAX_ANNOUNCE},
                             providers={"slow": {"headers": {"x-mock-delay-ms": "100",
                                                             "x-mock-answer": json.dumps(LONG)}}},
                             extra=extra).start()
        self.wait_voice()

    def devices(self) -> dict[str, dict]:
        with self.daemon.client() as client:
            return {d["name"]: d for d in client.call("status")["devices"]}

    def wait_voice(self) -> dict:
        """The voice device running and connected (again, after a stop)."""
        def ready():
            devices = self.devices()
            return devices if devices["voice"]["state"] == "running" \
                and devices["voice"]["connected"] and devices["board"]["state"] == "running" \
                else None
        return wait_until(ready, "the voice device connected", 20)

    def spoken(self) -> list[str]:
        return [json.loads(line) for line in self.log.read_text().split("\n")[:-1]] \
            if self.log.exists() else []

    def sink_bytes(self) -> int:
        return self.sink.stat().st_size if self.sink.exists() else 0

    def close(self) -> None:
        try:
            self.daemon.stop()
        finally:
            self.board.unplug()
            self.server.kill()
            self.server.wait()


@pytest.fixture(scope="module")
def setup(tmp_path_factory, mock):
    setup = Setup(tmp_path_factory.mktemp("announce"), mock)
    yield setup
    setup.close()


def sink_tail(setup: Setup, size: int) -> bytes:
    """The last `size` bytes of the sink, read alone: the sink grows over the module."""
    with open(setup.sink, "rb") as sink:
        sink.seek(max(0, sink.seek(0, os.SEEK_END) - size))
        return sink.read()


def marker_heard(setup: Setup) -> bytes:
    """Announce MARKER on the voice device after a stop and wait until the sink
    ends with its audio (as espeak-ng makes it); return that audio. Nothing of
    the stopped ask can reach the sink after it: the ask's final reply came
    before the announcement was made, so its events are ahead of MARKER's in
    the device's inbox, and the device plays one TTS connection at a time, in
    order: the old connection's audio is played before the new one's starts,
    or on the same connection (a stop that did not reconnect), before
    MARKER's, which the server answers after it."""
    marker = tts.espeak_pcm(MARKER)[3]
    with setup.daemon.client() as client:
        assert client.call("announce", text=MARKER, device="voice")["type"] == "announced"
    wait_until(lambda: sink_tail(setup, len(marker)) == marker, "the marker's audio", 30)
    return marker


def heard(setup: Setup, texts: list[str], before: int) -> bytes:
    """Wait until the sink has, after `before` bytes, the audio of texts; return it."""
    want = b"".join(tts.espeak_pcm(text)[3] for text in texts)
    wait_until(lambda: setup.sink_bytes() >= before + len(want), f"the audio of {texts}", 30)
    assert setup.sink.read_bytes()[before:] == want
    return want


# ---------------------------------------------------------------- announce

def test_announce_reaches_the_sink_as_audio(setup):
    before, logged = setup.sink_bytes(), len(setup.spoken())
    with setup.daemon.client() as client:
        reply = client.call("announce", text=" ".join(ANNOUNCEMENT), device="voice")
    assert reply["type"] == "announced" and reply["devices"] == ["voice"]
    heard(setup, ANNOUNCEMENT, before)  # sentence by sentence, as espeak-ng speaks them
    assert setup.spoken()[logged:] == ANNOUNCEMENT


def test_announce_on_every_speech_device(setup):
    setup.marker.unlink(missing_ok=True)
    before = setup.sink_bytes()
    with setup.daemon.client() as client:
        reply = client.call("announce", text="Good night.")
    # the board does not speak, mute is down: neither is given it
    assert reply["type"] == "announced" and sorted(reply["devices"]) == ["sleeper", "voice"]
    heard(setup, ["Good night."], before)
    wait_until(setup.marker.exists, "the command device ran for the announcement")


def test_announce_from_the_board(setup):
    before, logged = setup.sink_bytes(), len(setup.spoken())
    setup.board.write("ANNOUNCE The front door is open.\n")
    heard(setup, ["The front door is open."], before)
    assert setup.spoken()[logged:] == ["The front door is open."]


@pytest.mark.parametrize(("fields", "code"), [
    ({"text": "Hello.", "device": "kitchen"}, "unknown_device"),
    ({"text": "Hello.", "device": "board"}, "not_a_speech_device"),
    ({"text": "Hello.", "device": "mute"}, "device_unavailable"),
    ({"text": "x" * (MAX_ANNOUNCE + 1)}, "text_too_long"),
    ({"text": " \n"}, "bad_field"),
    ({"text": "Hello.", "device": 3}, "bad_field"),
])
def test_bad_announcements_are_named(setup, fields, code):
    with setup.daemon.client() as client:
        reply = client.call("announce", **fields)
    assert reply["type"] == "error" and reply["code"] == code, reply


def test_nothing_to_speak_on(tmp_path, mock):
    daemon = Daemon(tmp_path, mock.url).start()
    try:
        with daemon.client() as client:
            reply = client.call("announce", text="Hello.")
            assert (reply["type"], reply["code"]) == ("error", "no_speech_device")
            reply = client.call("stop")
            assert (reply["type"], reply["code"]) == ("error", "nothing_to_stop")
    finally:
        assert daemon.stop() == 0


# ---------------------------------------------------------------- stop

def test_stop_with_nothing_running(setup):
    setup.wait_voice()
    with setup.daemon.client() as client:
        for fields in ({}, {"session": "nobody"}, {"mine": True}):
            reply = client.call("stop", **fields)
            assert (reply["type"], reply["code"]) == ("error", "nothing_to_stop"), reply


def stop_a_slow_answer(setup: Setup, session: str, stop) -> tuple[dict, list[dict], float]:
    """Ask for the long answer, stop it once its first sentence is heard:
    (the stopped reply, the ask's replies, seconds from the stop to its final reply)."""
    setup.wait_voice()
    logged, before = len(setup.spoken()), setup.sink_bytes()
    with setup.daemon.client() as asker:
        request = asker.send("ask", prompt="Tell me a long story", session=session,
                             provider="slow")
        replies = asker.replies(request, "ask")
        got = [next(replies)]
        assert got[0]["type"] == "started"
        while len(setup.spoken()) == logged:  # speech began: the first sentence went out
            got.append(next(replies))
        wait_until(lambda: setup.sink_bytes() > before, "audio at the sink")
        began = time.monotonic()
        stopped = stop()
        got += list(replies)
        final = time.monotonic() - began
    return stopped, got, final


def check_stopped(setup: Setup, session: str, got: list[dict]) -> str:
    """The ask ended with done, stopped, its text what was streamed and kept."""
    done = got[-1]
    assert done["type"] == "done" and done["finish_reason"] == "stopped", got[-2:]
    said = "".join(r["text"] for r in of_type(got, "delta"))
    assert done["text"] == said and said and LONG.startswith(said) and said != LONG
    assert done["kept"] is True
    with setup.daemon.client() as client:
        history = client.call("history", session=session)
    *_, user, answer = history["turns"]
    assert user == {"role": "user", "text": "Tell me a long story"}
    assert answer["role"] == "assistant" and answer["text"] == said
    assert answer["finish_reason"] == "stopped"
    return said


def test_stop_during_a_slow_answer_ends_stream_synthesis_and_playback(setup):
    seconds, finals = [], []
    for attempt in range(STOP_TRIES):
        session = f"barge-{attempt}"

        def stop():
            with setup.daemon.client() as client:
                return client.call("stop", session=session)

        asked = setup.wait_voice()["voice"]["sentences"]
        before, logged = setup.sink_bytes(), len(setup.spoken())
        stopped, got, final = stop_a_slow_answer(setup, session, stop)
        assert stopped["type"] == "stopped", stopped
        assert [ask["session"] for ask in stopped["asks"]] == [session]
        assert "voice" in stopped["devices"]  # it was saying that answer
        said = check_stopped(setup, session, got)
        marker = marker_heard(setup)  # whatever of the old answer was still to come has come
        voice = setup.devices()["voice"]
        # No audio reached the sink after the stop but the chunk being written then.
        assert voice["audio_after_stop"] <= CHUNK_BYTES
        # Only sentences complete before the stop were synthesized, never the
        # rest of the text (a sentence the server got before the stop may be
        # logged after MARKER, by the old connection's handler).
        whole = [sentence for sentence in LONG_SENTENCES if sentence in said]
        synthesized = [text for text in setup.spoken()[logged:] if text != MARKER]
        assert set(synthesized) <= set(whole)
        assert voice["sentences"] - asked - 1 <= len(whole)  # less MARKER's
        # and before MARKER the sink has a start of what espeak-ng made of them
        old = setup.sink.read_bytes()[before:-len(marker)]
        assert old and expected_pcm(synthesized).startswith(old)
        seconds.append(stopped["seconds"])
        finals.append(final)
    print(f"\nstop latency, inside the daemon (stop op to streams closed and devices "
          f"silent): {', '.join(f'{s * 1000:.1f}' for s in seconds)} ms; "
          f"to the ask's final reply (its history written), at the client: "
          f"{', '.join(f'{f * 1000:.1f}' for f in finals)} ms")


def test_stop_from_the_board(setup):
    def stop():
        setup.board.write("STOP\n")
        return None

    _, got, _ = stop_a_slow_answer(setup, "board-barge", stop)
    check_stopped(setup, "board-barge", got)


def test_stop_of_this_connection_only(setup):
    setup.wait_voice()
    with setup.daemon.client() as asker, setup.daemon.client() as other:
        request = asker.send("ask", prompt="Tell me a long story", session="mine",
                             provider="slow")
        replies = asker.replies(request, "ask")
        assert next(replies)["type"] == "started"
        reply = other.call("stop", mine=True)  # the other connection has no ask
        assert (reply["type"], reply["code"]) == ("error", "nothing_to_stop")
        asker.send("stop", mine=True)
        got = list(replies)
    assert got[-1]["type"] == "done" and got[-1]["finish_reason"] == "stopped"


def test_stop_kills_a_running_speech_program(setup):
    # The sleeper done with the earlier tests' speech (one status read: a
    # run is counted before it stops speaking), so that the only run from
    # here is this announcement's, and the marker is its own
    def idle():
        sleeper = setup.devices()["sleeper"]
        return sleeper if sleeper["queued"] == 0 and not sleeper["speaking"] else None

    runs = wait_until(idle, "the sleeper idle")["runs"]
    setup.marker.unlink(missing_ok=True)
    with setup.daemon.client() as client:
        assert client.call("announce", text="30", device="sleeper")["type"] == "announced"
    wait_until(setup.marker.exists, "the speech program started")
    stopped = cli(setup, "stop")  # every ask and every speech device, from a shell
    assert stopped.returncode == 0 and stopped.stdout.startswith("stopped 0 asks, silenced "), \
        stopped
    assert "sleeper" in stopped.stdout
    # killed, not left to sleep its 30 s
    wait_until(lambda: setup.devices()["sleeper"]["runs"] == runs + 1, "the program killed", 5)
    assert setup.devices()["sleeper"]["stops"] >= 1


def test_a_stop_during_a_tool_call_keeps_no_call_without_its_result(tmp_path, mock):
    """The model said FIRST and called set_relay, which takes 30 s: a stop
    ends the tool's program and the ask; the history keeps the prompt and
    FIRST, marked stopped, and not the call, whose result never came."""
    daemon, log = relay_daemon(tmp_path, mock.url, sleep=30,
                               providers={"chat": {"protocol": "openai-chat"}})
    try:
        with daemon.client() as asker, daemon.client() as other:
            request = asker.send("ask", prompt=PROMPT, provider="chat", session="relay")
            replies = asker.replies(request, "ask")
            wait_until(log.exists, "the tool's program started")
            stopped = other.call("stop", session="relay")
            got = list(replies)
        assert stopped["type"] == "stopped", stopped
        assert [ask["session"] for ask in stopped["asks"]] == ["relay"], stopped
        # the tool's 30 s program (and its tool timeout) did not end the ask:
        # the stop did, before any tool result (asserted below)
        print(f"\nstop during a tool call, inside the daemon: "
              f"{stopped['seconds'] * 1000:.1f} ms")
        done = got[-1]
        assert (done["type"], done["finish_reason"], done["text"]) == ("done", "stopped", FIRST)
        assert not of_type(got, "tool_result")  # the call was cut off, not answered
        with daemon.client() as client:
            turns = client.call("history", session="relay")["turns"]
        assert turns == [{"role": "user", "text": PROMPT},
                         {"role": "assistant", "text": FIRST, "finish_reason": "stopped"}]
    finally:
        assert daemon.stop() == 0


# ---------------------------------------------------------------- the CLI

def cli(setup: Setup, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args, "--socket",
                           setup.daemon.socket_path], capture_output=True, text=True,
                          env=child_env(), timeout=timeout(20))


def test_homeagent_say_and_stop(setup):
    setup.wait_voice()
    before = setup.sink_bytes()
    said = cli(setup, "say", "The washing is done.", "--device", "voice")
    assert (said.returncode, said.stdout) == (0, "announced on voice\n"), said.stderr
    heard(setup, ["The washing is done."], before)
    unknown = cli(setup, "say", "Hello.", "--device", "attic")
    assert unknown.returncode == 1 and "(unknown_device)" in unknown.stderr
    nothing = cli(setup, "stop", "--session", "nobody")
    assert nothing.returncode == 1 and "(nothing_to_stop)" in nothing.stderr


# ---------------------------------------------------------------- the hub

class Listener(Device):
    """A speech device that keeps its events, reading only once let."""
    kind = "listener"
    DEFAULT_EVENTS = frozenset({"sentence", "delta", "done", "error"})
    speaks = True

    def __init__(self, common: Common) -> None:
        super().__init__(common)
        self.events: list[Delivery] = []
        self.silenced: list = []
        self.reading = trio.Event()

    @classmethod
    def from_settings(cls, common, settings):
        return cls(common)

    async def run(self, inbox, prompt, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        await self.reading.wait()
        async for event in inbox:
            self.events.append(event)

    def silence(self, keys):
        self.silenced.append(keys)
        return True


async def hub_with(nursery, **events) -> tuple[DeviceHub, dict[str, Listener]]:
    hub = DeviceHub({name: DeviceSpec(Common(name, frozenset(wants)), Listener, {})
                     for name, wants in events.items()}, max_announce_chars=40)
    await nursery.start(hub.run, center_for(hub))
    await until(lambda: all(device["state"] == "running" for device in hub.status()))
    return hub, {name: hub._devices[name].device for name in events}


@pytest.mark.trio
async def test_an_announcement_is_an_answer_for_each_device():
    async with trio.open_nursery() as nursery:
        hub, devices = await hub_with(nursery, streams={"delta", "done"},
                                      sentences={"sentence"})
        assert sorted(await hub.center.announce(Announce("One. Two!"))) == ["sentences",
                                                                          "streams"]
        for device in devices.values():
            device.reading.set()
        await until(lambda: len(devices["streams"].events) == 2
                    and len(devices["sentences"].events) == 2)
        assert [(e.kind, e.reply.text, e.origin.request)
                for e in devices["streams"].events] == [
            ("delta", "One. Two!", {"announce": 1}), ("done", "One. Two!", {"announce": 1})]
        assert [e.reply.text for e in devices["sentences"].events] == ["One.", "Two!"]
        with pytest.raises(Refused, match="more than daemon.max_announce_chars"):
            await hub.center.announce(Announce("x" * 41))
        nursery.cancel_scope.cancel()


R_STOPPED = asked(1, "s", client=1, request_id="a")
R_OTHER = asked(2, "t", client=2, request_id="a")


@pytest.mark.trio
async def test_silence_drops_the_stopped_asks_text_until_its_end():
    async with trio.open_nursery() as nursery:
        hub, devices = await hub_with(nursery, voice={"delta", "done"})
        voice = devices["voice"]
        for request in (R_STOPPED, R_OTHER):
            await hub.deliver(replies.Delta("queued "), request)
        assert hub.silence([R_STOPPED], everything=False) == ["voice"]
        assert voice.silenced == [frozenset({R_STOPPED.key})]
        await hub.deliver(replies.Delta("late "), R_STOPPED)  # after the stop: dropped
        await hub.deliver(replies.Done("s", "stopped", None, None, "queued ", 1, 1), R_STOPPED)
        await hub.deliver(replies.Delta("next "), R_STOPPED)  # a new ask with the same key
        voice.reading.set()
        await until(lambda: len(voice.events) == 2)
        assert [(e.origin.client, e.reply.text) for e in voice.events] == [
            (2, "queued "), (1, "next ")]
        nursery.cancel_scope.cancel()


# ---------------------------------------------------------------- the device alone

OLD = asked(10, "s", client=1, request_id="old")
NEW = asked(11, "s", client=1, request_id="new")
MANY = [f"Old sentence number {n} is still coming." for n in range(1, 41)]
FRESH = ["A new answer.", "Nothing of the old one."]


@pytest.mark.parametrize("server_streams", [False, True])
@pytest.mark.trio
async def test_a_silenced_device_never_plays_the_rest_of_what_it_said(tts_server, tmp_path,
                                                                      server_streams):
    """What the server still sends for a silenced answer is never played: after
    the old answer's first audio, silence(); the sink then has a prefix of the
    old answer's audio and, after it, exactly the next answer's. Once the next
    answer is heard, nothing of the old one can still come: the device plays
    one connection at a time, in order, so the old connection's audio either
    came before the new one started or, on a connection the stop did not end,
    comes before the next answer's, which the server makes after it."""
    speech, log, sink = await started(tts_server, tmp_path, server_streams)
    async with running(speech) as inbox:
        old = " ".join(MANY)
        if server_streams:  # an answer still streaming: its synthesize-stop never sent
            for start in range(0, len(old), 9):
                await inbox.put(delivery("delta", OLD, **{"text": old[start:start + 9]}))
        else:
            for sentence in MANY:
                await inbox.put(delivery("sentence", OLD, **{"text": sentence}))
        await until(lambda: speech.audio_bytes > 0, 30)
        assert not speech.silence(frozenset({NEW.key}))  # not saying that one
        inbox.discard(lambda event: event.origin == OLD)  # what the hub does at a stop
        assert speech.silence(frozenset({OLD.key}))
        assert speech.stops == 1
        for sentence in FRESH:
            await inbox.put(delivery("sentence", NEW, **{"text": sentence}))
        await inbox.put(delivery("delta", NEW, **{"text": " ".join(FRESH)}))
        await inbox.put(delivery("done", NEW, **{"text": " ".join(FRESH)}))
        fresh = expected_pcm(FRESH)
        await until(lambda: sink.exists() and sink.read_bytes().endswith(fresh), 30)
    heard = sink.read_bytes()
    assert heard.endswith(fresh)
    before = heard[:-len(fresh)]
    assert expected_pcm(MANY).startswith(before) and len(before) < len(expected_pcm(MANY))
    assert speech.audio_after_stop <= CHUNK_BYTES


F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ, which Python 3.11 names only from 3.10 on Linux
CARD_BUFFER = 4096   # bytes asked of the FIFO: about 93 ms of espeak-ng's 22050 Hz 16-bit mono
CARD_RATE = 44100    # bytes a second the card takes: that audio's own rate


class PacedCard(threading.Thread):
    """The sound card behind aplay: ALSA's file plugin writes what aplay
    plays into a FIFO, which this reads at the audio's own rate, so aplay is
    held back as by a real card. buffer: the bytes the FIFO holds (the
    kernel's page, CARD_BUFFER or more); received(): the bytes played so far."""

    def __init__(self, fifo: Path) -> None:
        super().__init__(daemon=True)
        os.mkfifo(fifo)
        self.fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        self.buffer = fcntl.fcntl(self.fd, F_SETPIPE_SZ, CARD_BUFFER)
        self._played = bytearray()
        self._lock = threading.Lock()  # a read is counted by received() once it is kept
        self.done = threading.Event()

    def run(self) -> None:
        tick = 0.01
        while not self.done.wait(tick):
            with self._lock:
                try:
                    self._played += os.read(self.fd, int(CARD_RATE * tick))
                except BlockingIOError:
                    continue

    def received(self) -> int:
        with self._lock:
            return len(self._played)

    def find(self, pcm: bytes, start: int) -> int:
        """Where pcm begins in what was played from `start` on, or -1."""
        with self._lock:
            return self._played.find(pcm, start)

    def close(self) -> None:
        self.done.set()
        self.join(timeout(5))
        os.close(self.fd)


@pytest.mark.skipif(shutil.which("aplay") is None, reason="needs aplay (alsa-utils)")
@pytest.mark.trio
async def test_a_stop_kills_aplay_at_once(tts_server, tmp_path):
    """aplay, paced by a card that plays in real time, is killed by silence():
    the card gets no more after the stop than its own buffer held and the one
    write aplay was making (a pipe writer woken by SIGKILL fills the room the
    reader made before it sees the signal), where letting aplay finish would
    give it what aplay and its pipe still hold (up to 64 KiB more). A marker
    sentence after the stop says when that is all in: the device plays one
    connection at a time, so the old aplay is gone (or, not killed, has
    played what it had) before the marker's aplay starts."""
    address, _ = tts_server(streaming=False)
    marker = expected_pcm([MARKER])
    card = PacedCard(tmp_path / "card.fifo")
    card.start()
    try:
        speech = WyomingSpeech.from_settings(
            Common("speaker", WyomingSpeech.DEFAULT_EVENTS),
            {"address": address, "alsa_device": f"file:'{tmp_path / 'card.fifo'}',raw"})
        async with running(speech) as inbox:
            for sentence in MANY[:3]:
                await inbox.put(delivery("sentence", OLD, **{"text": sentence}))
            await until(lambda: card.received() > card.buffer, 30)  # playing, held back
            inbox.discard(lambda event: event.origin == OLD)  # what the hub does at a stop
            assert speech.silence(frozenset({OLD.key}))
            at_stop = card.received()  # aplay has been sent SIGKILL
            await inbox.put(delivery("sentence", NEW, **{"text": MARKER}))
            await until(lambda: card.find(marker, at_stop) >= 0, 30)
        late = card.find(marker, at_stop) - at_stop
        print(f"\naplay stopped: {late} bytes reached the card after the stop "
              f"({late / CARD_RATE * 1000:.0f} ms of audio, what its buffer held)")
        assert late <= 2 * card.buffer
    finally:
        card.close()
