"""Wake words through a Wyoming wake server: the sans-IO WakeExchange on
scripted bytes; its shell (ServerDetector, and wake.Detectors beside the
models in process) against a real server (tests/wyoming_wake_server.py, on
the `wyoming` package's server classes, hearing with pymicro-wakeword) in
its own process; and a real daemon whose only wake word is the server's.
No duration is asserted; every wait is bounded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import test_voice_daemon
import wyoming_wake_server
from agent.voice.endpoint import FRAME_SECONDS
from agent.voice.wake_server import (MAX_DATA, Failure, Heard, Offered, ServerDetector,
                                     WakeError, WakeExchange)
from agent.wyoming.framing import Event, Reader, encode
from conftest import timeout
from daemon_harness import Daemon
from helpers import spawn_listening
from test_startup import PROBE, _modules
from test_voice_daemon import QUESTION, REAL_TIME, voice_table, wait_for
from voice_audio import espeak, needs_espeak, needs_voice, silence

# the daemon tests' microphone, ASR server and speech, as test_voice_daemon's
peers, speech = test_voice_daemon.peers, test_voice_daemon.speech

FRAME_BYTES = int(16000 * FRAME_SECONDS) * 2


def events(data: bytes) -> list[Event]:
    return Reader().feed(data)


def info(*names: str) -> Event:
    return Event("info", {"wake": [{"name": "engine", "models": [
        {"name": name, "installed": True} for name in names]}]})


def test_the_request_is_describe_then_detect_then_audio():
    exchange = WakeExchange(["hey_jarvis", "ok_nabu"])
    sent = events(exchange.describe() + exchange.start() + exchange.audio(b"\x01\x00" * 160)
                  + exchange.audio(b"\x02\x00" * 160))
    assert [e.type for e in sent] == ["describe", "detect", "audio-start", "audio-chunk",
                                      "audio-chunk"]
    assert sent[1].data == {"names": ["hey_jarvis", "ok_nabu"]}
    assert sent[2].data == {"rate": 16000, "width": 2, "channels": 1, "timestamp": 0}
    assert sent[4].data["timestamp"] == 10 and sent[4].payload == b"\x02\x00" * 160
    assert exchange.audio_bytes == 640


def test_a_detection_is_the_boards_wake_word_of_the_servers_name():
    exchange = WakeExchange(["hey_jarvis", "ok_nabu"])
    wire = b"".join(encode(Event("detection", data)) for data in (
        {"name": "ok_nabu", "timestamp": 1200}, {"name": "alexa"}, {"timestamp": 5}))
    assert exchange.feed(wire) == [Heard("ok_nabu", 1), Heard("alexa", None),
                                   Heard(None, None)]
    # a server that names nothing heard the one wake word it was asked for
    assert WakeExchange(["computer"]).feed(encode(Event("detection"))) == [Heard(None, 0)]


def test_the_info_says_which_wake_words_the_server_has():
    assert WakeExchange(["a"]).feed(encode(info("ok_nabu", "alexa"))) == [
        Offered(("ok_nabu", "alexa"))]
    for odd in ({}, {"wake": "all"}, {"wake": [3, {"models": {"name": "x"}}]},
                {"wake": [{"models": [{"name": 7}, "alexa"]}]}):
        assert WakeExchange(["a"]).feed(encode(Event("info", odd))) == [Offered(())]


def test_what_the_server_says_cut_anywhere_is_the_same():
    wire = encode(info("ok_nabu")) + encode(Event("not-detected")) \
        + encode(Event("something-new", {"x": 1})) \
        + encode(Event("detection", {"name": "ok_nabu"}))
    for cut in range(len(wire) + 1):
        exchange = WakeExchange(["ok_nabu"])
        assert exchange.feed(wire[:cut]) + exchange.feed(wire[cut:]) == [
            Offered(("ok_nabu",)), Heard("ok_nabu", 0)]


@pytest.mark.parametrize("wire,failure,detail", [
    (encode(Event("error", {"text": "no model"})), Failure.SERVER_ERROR, "no model"),
    (b"not json at all\n", Failure.GARBAGE, "header_not_json"),
    (encode(Event("detection", {"name": 3})), Failure.GARBAGE, "not a string"),
    (b'{"type":"info","data_length":%d}\n' % (MAX_DATA + 1), Failure.GARBAGE,
     "data_too_long"),
    (b'{"type":"detection","payload_length":1000000}\n', Failure.GARBAGE, "payload_too_long"),
])
def test_what_is_not_the_protocol_is_named(wire, failure, detail):
    with pytest.raises(WakeError) as caught:
        WakeExchange(["ok_nabu"]).feed(wire)
    assert caught.value.failure is failure and detail in str(caught.value)
    assert str(caught.value).startswith(failure.value + ": ")


def test_a_close_is_named():
    exchange = WakeExchange(["ok_nabu"])
    exchange.feed(b'{"type":"detection","data_length":40}\n{"na')
    with pytest.raises(WakeError) as caught:
        exchange.closed()
    assert caught.value.failure is Failure.GARBAGE and "closed_mid_event" in str(caught.value)
    with pytest.raises(WakeError) as caught:
        WakeExchange(["ok_nabu"]).closed()
    assert caught.value.failure is Failure.CLOSED


# ---- the shell, against the real server ----

needs_wyoming = pytest.mark.skipif(
    __import__("importlib").util.find_spec("wyoming") is None,
    reason="the wyoming package is a test dependency")


class WakeServer:
    """The test server in its own process, on one socket path across restarts."""

    def __init__(self, directory: Path) -> None:
        self.sock = directory / "wake.sock"
        self.log = directory / "wake.log"
        self.process: subprocess.Popen | None = None

    @property
    def address(self) -> tuple[str, str, int]:
        return "unix", str(self.sock), 0

    def start(self, *options: str) -> None:
        self.sock.unlink(missing_ok=True)
        self.process = spawn_listening(
            [wyoming_wake_server.__file__, f"unix://{self.sock}", "--log", str(self.log),
             "--name", "okay_nabu=ok_nabu", *options], self.sock)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()

    def entries(self, key: str) -> list:
        if not self.log.exists():
            return []
        return [entry[key] for entry in map(json.loads, self.log.read_text().splitlines())
                if key in entry]


@pytest.fixture
def server(tmp_path):
    made = WakeServer(tmp_path)
    yield made
    made.kill()


def detector_for(server: WakeServer, names, failures: list) -> ServerDetector:
    return ServerDetector(server.address, names, connect_timeout=timeout(5),
                          stall_timeout=1.0, max_delay=0.5, capacity=2000,
                          on_failure=failures.append)


async def until(condition, what: str, seconds: float = 30) -> None:
    with trio.fail_after(timeout(seconds)):   # a hang guard, never an assertion
        while not condition():
            await trio.sleep(0.02)


async def feed(detector, pcm: bytes) -> list[int]:
    """Feeds pcm frame by frame, a little faster than it is spoken: what was heard."""
    heard = []
    for at in range(0, len(pcm), FRAME_BYTES):
        index = detector.feed(pcm[at:at + FRAME_BYTES])
        if index is not None:
            heard.append(index)
        if at % (10 * FRAME_BYTES) == 0:
            await trio.sleep(0.02)
    return heard


async def hear(detector, pcm: bytes) -> int:
    """Feeds pcm, then silence until a wake word is heard."""
    heard = await feed(detector, pcm)
    with trio.fail_after(timeout(30)):
        while not heard:
            heard = await feed(detector, silence(0.1))
    return heard[0]


@pytest.fixture(scope="module")
def wake():
    """"okay nabu", said by espeak-ng between silences."""
    return silence(0.5) + espeak("okay nabu") + silence(1.0)


@needs_wyoming
@needs_voice
@needs_espeak
@pytest.mark.trio
async def test_the_server_hears_the_wake_word_by_its_own_name(server, wake):
    server.start()
    failures: list = []
    detector = detector_for(server, ["hey_jarvis", "ok_nabu", "hey_siri"], failures)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(detector.run)
        await until(lambda: detector.state == "streaming", "connected")
        assert await hear(detector, wake) == 1
        nursery.cancel_scope.cancel()
    assert server.entries("detect") == [["hey_jarvis", "ok_nabu", "hey_siri"]]
    assert set(server.entries("detection")) == {"ok_nabu"}
    status = detector.status()
    assert status["missing"] == ["hey_siri"] and status["detections"] == 1
    assert status["failures"] == 0 and failures == []


@needs_wyoming
@needs_voice
@needs_espeak
@pytest.mark.trio
async def test_a_reset_ends_the_round_and_what_it_heard_is_not_heard(server, wake):
    server.start("--late", "1.0")
    detector = detector_for(server, ["ok_nabu"], [])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(detector.run)
        await until(lambda: detector.state == "streaming", "connected")
        # the server hears it and answers late; the board resets meanwhile (feed() never
        # yields: no detection can come back while these frames go)
        assert {detector.feed(wake[at:at + FRAME_BYTES])
                for at in range(0, len(wake), FRAME_BYTES)} == {None}
        await until(lambda: server.entries("detection"), "the server heard it")
        detector.reset()
        await until(lambda: len(server.entries("detect")) == 2, "the next round's connection")
        # the late answer of the old round, had its connection lived, comes in this time
        assert await feed(detector, silence(2.0)) == []
        # and the new round hears as the first did
        assert await hear(detector, wake) == 0
        nursery.cancel_scope.cancel()
    assert detector.status()["connections"] == 2 and detector.status()["failures"] == 0


@needs_wyoming
@needs_voice
@needs_espeak
@pytest.mark.trio
async def test_a_server_away_or_dead_is_named_and_found_again(server, wake):
    failures: list = []
    detector = detector_for(server, ["ok_nabu"], failures)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(detector.run)
        await until(lambda: failures, "the missing server named")
        assert failures[0].failure is Failure.UNREACHABLE
        assert detector.status()["last_error"].startswith("wake_unreachable: ")
        server.start()
        await until(lambda: detector.state == "streaming", "connected once it is there")
        server.kill()
        count = len(failures)
        await until(lambda: len(failures) > count, "the dead server named")
        assert failures[count].failure is Failure.CLOSED
        server.start()
        await until(lambda: detector.state == "streaming", "connected again")
        assert await hear(detector, wake) == 0
        nursery.cancel_scope.cancel()


@needs_wyoming
@needs_voice
@pytest.mark.trio
@pytest.mark.parametrize("mode,failure", [("stall", Failure.STALLED),
                                          ("garbage", Failure.GARBAGE),
                                          ("error", Failure.SERVER_ERROR)])
async def test_a_server_that_stalls_or_breaks_the_protocol_is_named(server, mode, failure):
    server.start("--mode", mode)
    failures: list = []
    detector = ServerDetector(server.address, ["ok_nabu"], connect_timeout=timeout(5),
                              stall_timeout=1.0, max_delay=0.5, capacity=16,
                              on_failure=failures.append)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(detector.run)
        with trio.fail_after(timeout(60)):   # hang guard: feed() never waits
            while not failures:
                detector.feed(bytes(3200))
                await trio.sleep(0.005)
        nursery.cancel_scope.cancel()
    assert failures[0].failure is failure, failures
    if mode == "stall":
        # what the stalled server did not take waited in a bounded channel: dropped, counted
        assert detector.status()["dropped_frames"] > 0
    if mode == "error":
        assert "the models are not loaded" in str(failures[0])


@needs_wyoming
@needs_voice
@needs_espeak
@pytest.mark.trio
async def test_wake_words_in_process_and_on_the_server_are_heard_side_by_side(server, wake):
    from agent.voice.config import SourceConfig, VoiceConfig, WakeWord
    from agent.voice.wake import Detectors

    server.start()
    config = VoiceConfig(enabled=True, wake=(WakeWord("alexa"), WakeWord("ok_nabu", server=True)),
                         wake_server=server.address, connect_timeout=timeout(5),
                         source=SourceConfig(restart_max_delay=0.5))
    detectors = Detectors(config, 2000, on_failure=lambda error: None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(detectors.run)
        await until(lambda: detectors.status()["state"] == "streaming", "connected")
        assert await hear(detectors, wake) == 1
        assert detectors.probability == 1.0   # the server tells none: it counts as sure
        detectors.reset()
        assert await hear(detectors, silence(0.5) + espeak("alexa") + silence(1.0)) == 0
        assert 0.5 < detectors.probability < 1.0   # the model's own
        nursery.cancel_scope.cancel()
    assert server.entries("detect")[0] == ["ok_nabu"]


# ---- a real daemon whose wake word is the server's ----

def end_to_end(test):
    """A real daemon hearing a microphone in real time, its wake word the
    server's: the wyoming package, the voice extra and espeak-ng, not emulated."""
    for mark in (needs_espeak, needs_voice, needs_wyoming, REAL_TIME):
        test = mark(test)
    return test


def server_voice_table(peers, wake_server: WakeServer, files, **settings) -> str:
    """[voice] as test_voice_daemon's, its one wake word the server's ok_nabu."""
    table = voice_table(peers.asr("--say", QUESTION), files, peers.cues, follow_up="never",
                        wake_server=f"unix:{wake_server.sock}", **settings)
    return table.replace('wake = ["okay_nabu"]', 'wake = [{ model = "ok_nabu", server = true, '
                                                 'session = "kitchen", language = "fr" }]')


@end_to_end
def test_a_board_hears_through_its_wake_server_without_the_models_in_process(
        tmp_path, mock, peers, speech, server):

    server.start()
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    listing = tmp_path / "modules.json"
    daemon = Daemon(tmp_path, mock.url, env={"HOMEAGENT_TEST_MODULES": str(listing)},
                    extra=server_voice_table(peers, server, [speech["wake-question"][0]]))
    daemon.start(argv_prefix=[sys.executable, str(probe)])
    try:
        status = wait_for(daemon, lambda s: s["state"] == "idle"
                          and s["wake_server"]["state"] == "streaming", "connected, idle")
        assert status["wake_words"] == ["ok_nabu"]
        peers.cue(0)
        status = wait_for(daemon, lambda s: s["asks"] == 1 and s["state"] == "idle",
                          "heard through the server and asked")
        assert status["wakes"] == 1 and status["last_transcript"] == QUESTION
        assert status["wake_server"]["detections"] >= 1 and status["last_error"] is None
        assert server.entries("detect")[0] == ["ok_nabu"]
        # the wake word's language went to the ASR; the question after the wake word
        utterance = json.loads((peers.record / "utterance-0.json").read_text())
        assert utterance["transcribe"]["language"] == "fr"
        assert speech["question"][1] in peers.utterance(0)
        modules = _modules(daemon, listing)
        assert "pymicro_wakeword" not in modules and "pymicro_vad" in modules
    finally:
        assert daemon.stop() == 0, daemon.log()


@end_to_end
def test_a_wake_server_that_dies_is_reported_and_connected_again(tmp_path, mock, peers,
                                                                 speech, server):

    server.start()
    daemon = Daemon(tmp_path, mock.url,
                    extra=server_voice_table(peers, server, [speech["wake-question"][0]]))
    daemon.start()
    try:
        wait_for(daemon, lambda s: s["wake_server"]["state"] == "streaming", "connected")
        server.kill()
        status = wait_for(daemon, lambda s: s["wake_server"]["failures"] >= 1,
                          "the dead server reported")
        assert status["last_error"].startswith("wake_")
        assert status["wake_server"]["last_error"].startswith("wake_")
        assert "the wake server failed (wake_closed" in daemon.log()
        server.start()
        wait_for(daemon, lambda s: s["wake_server"]["state"] == "streaming"
                 and s["state"] == "idle", "connected again")
        peers.cue(0)
        status = wait_for(daemon, lambda s: s["asks"] == 1 and s["state"] == "idle",
                          "heard through the server that came back")
        assert status["wakes"] == 1
    finally:
        assert daemon.stop() == 0, daemon.log()


@end_to_end
@pytest.mark.parametrize("mode,failure", [("stall", "wake_stalled"),
                                          ("garbage", "wake_garbage")])
def test_a_wake_server_that_stalls_or_says_garbage_is_named(tmp_path, mock, peers, speech,
                                                           server, mode, failure):

    server.start("--mode", mode)
    # a stall is named after answer_timeout: four times the frames' buffer (2 s)
    daemon = Daemon(tmp_path, mock.url, extra=server_voice_table(
        peers, server, [speech["wake-question"][0]], answer_timeout=8.0))
    daemon.start()
    try:
        # the microphone's silence streams to the server from the start
        status = wait_for(daemon, lambda s: s["wake_server"]["failures"] >= 1,
                          "the failure named", seconds=90)
        assert status["last_error"].startswith(failure + ": ")
        assert f"the wake server failed ({failure}" in daemon.log()
        if mode == "stall":
            # frames the stalled server did not take were dropped and counted, not held
            assert status["wake_server"]["dropped_frames"] > 0
        assert status["state"] == "idle" and status["source"]["state"] == "running"
    finally:
        assert daemon.stop() == 0, daemon.log()
