"""One board answers per house, end to end with real processes (as
tests/test_voice_daemon.py): boards on one real Mosquitto, each a
`homeagent serve` with [voice] and [mqtt], its own microphone program
(tests/voice_mic.py) playing the SAME espeak-ng "okay nabu, ..." at the
same cue, its own Wyoming ASR server, and a speech device writing what it
says to a file. Exactly one board listens, asks and speaks; the others
count a loss and stay silent. Which board wins is not asserted: the
probability at detection depends on where the wake word falls in the
detector's stride, so it differs by chance between boards hearing the same
audio (the rule itself is tested on plain values in tests/test_mqtt_claims.py).
No duration is asserted; every wait is bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import timeout
from daemon_harness import Daemon
from mosquitto import broker, free_port  # noqa: F401 (a fixture)
from test_mqtt_daemon import is_json
from test_voice_daemon import QUESTION, REAL_TIME, Peers, speech, until, voice_table  # noqa: F401
from test_voice_daemon import pytestmark as VOICE
from voice_audio import espeak, needs_espeak, needs_voice, silence


def voice(test):
    """The voice extra, espeak-ng and the wyoming package, or skipped; and
    a microphone heard in real time, so not emulated."""
    for mark in (*VOICE, REAL_TIME):
        test = mark(test)
    return test

# generous: boards on a loaded or emulated machine detect further apart
WINDOW = min(2.0, timeout(1.0))


class Board:
    """One board: its daemon, its ASR server, what it says."""

    def __init__(self, directory: Path, name: str, mqtt: str, cues: Path, wav: Path,
                 mock_url: str) -> None:
        directory.mkdir()
        self.name = name
        self.peers = Peers(directory)
        self.spoken = directory / "spoken.txt"
        say = ["sh", "-c", 'printf "%s\\n" "$1" >> "$0"', str(self.spoken), "{text}"]
        self.daemon = Daemon(directory, mock_url, extra=(
            voice_table(self.peers.asr("--say", QUESTION), [wav], cues, follow_up="never",
                        arbitration_window=WINDOW)
            + mqtt + f"board = {json.dumps(name)}\n"
            + f'[devices.voice]\ntype = "command"\nspeech = true\nargv = {json.dumps(say)}\n'))

    def status(self) -> dict:
        with self.daemon.client() as client:
            return client.call("status")

    def stop(self) -> None:
        try:
            if self.daemon.process is not None:
                assert self.daemon.stop() == 0, self.daemon.log()
        finally:
            self.peers.stop()


def start(boards: list[Board]) -> None:
    """Every daemon ready, its door waiting for the wake word and, on a
    broker, every board online to it."""
    for board in boards:
        board.daemon.start(wait=False)
    for board in boards:
        board.daemon.wait_notify(b"READY=1")
    names = {board.name for board in boards}
    for board in boards:
        until(lambda: board.status()["voice"]["state"] == "idle"
              and (board.status()["mqtt"]["last_error"] is not None
                   or names <= set(board.status()["mqtt"]["boards_hearing"])),
              f"{board.name} waits for its wake word", seconds=60)


def on_broker(broker, prefix: str) -> str:  # noqa: F811
    return (f"[mqtt]\nbroker = {json.dumps(broker.host)}\nport = {broker.port}\n"
            f"prefix = {json.dumps(prefix)}\nreconnect_min = 0.5\n")


@pytest.fixture
def boards(tmp_path, mock, speech):  # noqa: F811
    made: list[Board] = []

    def make(names, mqtt: str) -> list[Board]:
        for name in names:
            made.append(Board(tmp_path / name, name, mqtt, tmp_path / "cues",
                              speech["wake-question"][0], mock.url))
        return made

    (tmp_path / "cues").mkdir()
    yield make
    for board in made:
        board.stop()


@voice
@pytest.mark.parametrize("names", [("alpha", "beta"), ("alpha", "beta", "gamma")],
                         ids=["two", "three"])
def test_boards_hearing_the_same_utterance_agree_on_exactly_one(boards, broker, mock,
                                                                tmp_path, speech, names):
    house = boards(names, on_broker(broker, f"arbitration{len(names)}"))
    start(house)
    mock.clear()
    (tmp_path / "cues" / "0").touch()   # every microphone plays it now

    def settled() -> bool:
        voices = [board.status()["voice"] for board in house]
        return all(v["wakes"] == 1 and v["state"] == "idle"
                   and v["asks"] + v["lost_to_another_board"] == 1 for v in voices)

    until(settled, "every board heard it and either answered or lost", seconds=60)
    statuses = {board.name: board.status() for board in house}
    winners = [board for board in house if statuses[board.name]["voice"]["asks"] == 1]
    assert len(winners) == 1, statuses
    winner = winners[0]
    assert statuses[winner.name]["mqtt"]["claims"]["won"] == 1
    assert statuses[winner.name]["voice"]["last_transcript"] == QUESTION
    assert speech["question"][1] in winner.peers.utterance(0)
    until(lambda: winner.spoken.exists(), "the winner says its answer")
    for loser in (board for board in house if board is not winner):
        status = statuses[loser.name]
        assert status["voice"]["lost_to_another_board"] == 1
        assert status["mqtt"]["claims"]["lost"] == 1 and status["mqtt"]["claims"]["sent"] == 1
        assert loser.peers.utterance(0) is None   # it never listened
        assert not loser.spoken.exists()          # nor said a word
        assert "is answered by another board" in loser.daemon.log()
    prompts = [r["body"]["messages"][-1]["content"] for r in mock.requests()]
    assert prompts.count(QUESTION) == 1, prompts


@voice
@pytest.mark.parametrize("where", ["alone on the broker", "broker down"])
def test_a_board_alone_or_without_its_broker_answers_at_once(boards, broker, tmp_path, mock,
                                                            speech, where):
    mqtt = on_broker(broker, "arbitration-alone") if where == "alone on the broker" else (
        f"[mqtt]\nbroker = \"127.0.0.1\"\nport = {free_port()}\nreconnect_min = 0.5\n")
    board, = boards(["solo"], mqtt)
    deaf = None
    if where == "alone on the broker":  # a board that does not hear: nobody to claim from
        (tmp_path / "deaf").mkdir()
        deaf = Daemon(tmp_path / "deaf", mock.url, extra=mqtt + 'board = "deaf"\n')
        deaf.start()
    try:
        start([board])
        if deaf is not None:
            until(lambda: "deaf" in board.status()["mqtt"]["boards_online"],
                  "the deaf board online")
        (tmp_path / "cues" / "0").touch()
        until(lambda: board.status()["voice"]["asks"] == 1
              and board.status()["voice"]["state"] == "idle", "the board answered", seconds=60)
        status = board.status()
        assert status["voice"]["lost_to_another_board"] == 0
        assert status["mqtt"]["claims"]["sent"] == 0   # nobody to claim it from
        assert speech["question"][1] in board.peers.utterance(0)
        if where == "broker down":
            assert "answered here without a claim: not connected" in board.daemon.log()
        else:
            assert status["mqtt"]["boards_hearing"] == ["solo"]
    finally:
        if deaf is not None:
            assert deaf.stop() == 0, deaf.log()


@needs_voice
@needs_espeak
def test_the_detector_reports_the_probability_it_heard_the_wake_word_with():
    from agent.voice.wake import Detector

    detector = Detector(["alexa", "okay_nabu"])
    pcm = silence(0.5) + espeak("okay nabu") + silence(1.0)
    heard = [(index, detector.probability) for index in
             (detector.feed(pcm[at:at + 320]) for at in range(0, len(pcm), 320))
             if index is not None]
    assert heard and {index for index, _ in heard} == {1}
    cutoff = detector._models[1].probability_cutoff
    assert all(cutoff < probability <= 1 for _, probability in heard), (cutoff, heard)


def test_a_board_counts_the_claims_it_gets_and_refuses_what_is_none(broker, mock,  # noqa: F811
                                                                    tmp_path):
    """The shell's side of the claim topic, with no voice: a bad claim is
    counted and logged, never answered on the error topic (a flood would
    reach every board's); a retained one is refused; one delivered twice
    is one claim."""
    claim_topic, error = "hostile/house/claim", "hostile/solo/error"
    good = json.dumps({"board": "other", "wake": "okay_nabu", "probability": 0.9,
                       "id": "c1"}).encode()
    broker.publish(claim_topic, good.replace(b"c1", b"kept"), retain=True)
    daemon = Daemon(tmp_path, mock.url, extra=on_broker(broker, "hostile")
                    + 'board = "solo"\nmax_payload = 1024\n')
    watcher = broker.subscribe(error)
    try:
        daemon.start()

        def claims() -> dict:
            with daemon.client() as client:
                return client.call("status")["mqtt"]["claims"]

        # the retained claim comes with the subscription: it is in place
        until(lambda: claims()["refused"] == 1, f"the retained claim refused: {claims()}")
        for payload in (b"not json", good.replace(b"c1", b"c" * 600), b"x" * 2000, good, good):
            broker.publish(claim_topic, payload)
        until(lambda: claims()["refused"] == 4 and claims()["received"] == 1,
              f"the claims counted: {claims()}")
        assert claims()["kept"] == 1
        assert "not a claim: retained" in daemon.log()
        # a bad ask, after them, is the only message on the error topic
        broker.publish("hostile/solo/ask", b"[]")
        watcher.wait(error, is_json(error="not_an_object"))
        assert [m.topic for m in watcher.messages] == [error], watcher.messages
    finally:
        watcher.close()
        assert daemon.stop() == 0, daemon.log()
