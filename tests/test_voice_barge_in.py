"""Barge-in, end to end with real processes (as tests/test_voice_daemon.py):
the answer is spoken by a wyoming-tts device into a program sink that
plays it in real time (tests/voice_speaker.py), and the microphone mixes
what it plays back in (voice_mic.py --echo), as a board's microphone hears
its own loudspeaker. No duration is asserted; every wait is bounded."""

from __future__ import annotations

import array
import re
import sys
import time

import pytest

import voice_speaker
from test_voice_daemon import (FOLLOW, QUESTION, REAL_TIME, Peers, board_speaks, peers,  # noqa: F401
                               pytestmark, speech, start_listening, until, voice_status,
                               voice_table, wait_for)
from conftest import timeout
from daemon_harness import Daemon
from voice_audio import silence, write_wav

pytestmark = [*pytestmark, REAL_TIME]


def speaker_table(tts: str, echo) -> str:
    program = ", ".join(f'"{arg}"' for arg in (sys.executable, voice_speaker.__file__,
                                                "{rate}", "{width}", "{channels}", echo))
    return (f'[devices.speaker]\ntype = "wyoming-tts"\naddress = "{tts}"\nsink = "program"\n'
            f'sink_program = [{program}]\nrestart_max_delay = 1\n')


def daemon_with_echo(tmp_path, mock, peers: Peers, files, gain: float, asr: str) -> Daemon:
    echo = tmp_path / "echo.pcm"
    return Daemon(tmp_path, mock.url, extra=voice_table(
        asr, files, peers.cues, "--echo", str(echo), "--echo-gain", str(gain),
        follow_up="never") + speaker_table(peers.tts(), echo))


def test_the_boards_own_voice_fed_back_never_wakes_it_nor_reaches_the_asr(tmp_path, mock,
                                                                          peers, speech):
    asr = peers.asr("--say", QUESTION)
    daemon = daemon_with_echo(tmp_path, mock, peers, [speech["wake-question"][0]], 1.0, asr)
    echo = tmp_path / "echo.pcm"
    try:
        start_listening(daemon)
        peers.cue(0)
        wait_for(daemon, lambda s: s["asks"] == 1, "the question asked")
        until(lambda: echo.exists() and echo.stat().st_size > 0, "the answer played")
        until(lambda: not board_speaks(daemon), "the answer played to its end")
        wait_for(daemon, lambda s: s["state"] == "idle", "idle after the answer's echo")
        time.sleep(1.0)  # the last frames through the detector; nothing may follow
        status = voice_status(daemon)
        # the detector heard the whole answer, at full loudness, and nothing woke it
        assert status["frames_over_speech"] > 0
        assert status["wakes"] == 1 and status["barge_ins"] == 0 and status["asks"] == 1
        assert status["state"] == "idle"
        assert peers.utterance(1) is None
        assert speech["question"][1] in peers.utterance(0)
    finally:
        assert daemon.stop() == 0, daemon.log()


def loud_pieces(pcm: bytes) -> list[bytes]:
    """Its 10 ms pieces that are not near silence (silence matches silence)."""
    pieces = [pcm[at:at + 320] for at in range(0, len(pcm) - 319, 320)]
    return [p for p in pieces if max(map(abs, array.array("h", p))) > 2000]


def test_the_answers_echo_never_reaches_the_asr_in_the_follow_up(tmp_path, mock, peers,
                                                                  speech):
    """The microphone hears the loudspeaker 0.8 s late (a board's capture
    buffer and its room, made long: espeak-ng ends each answer with about
    0.3 s of silence): the answer's last words come in once the speaker
    program has exited. The follow-up listens only after speech_tail, so
    none of them reaches the ASR as the question's start."""
    asr = peers.asr("--say", QUESTION, "--say", FOLLOW)
    echo = tmp_path / "echo.pcm"
    daemon = Daemon(tmp_path, mock.url, extra=voice_table(
        asr, [speech["wake-question"][0], speech["follow"][0]], peers.cues,
        "--echo", str(echo), "--echo-delay", "0.8", speech_tail=1.5)
        + speaker_table(peers.tts(), echo))
    try:
        start_listening(daemon)
        peers.cue(0)
        wait_for(daemon, lambda s: s["follow_ups"] == 1 and s["state"] == "listening",
                 "a follow-up after an answer that asks")
        answer = echo.read_bytes()  # all of the answer played
        peers.cue(1)
        wait_for(daemon, lambda s: s["asks"] == 2, "the follow-up asked")
        heard = peers.utterance(1)
        loud = loud_pieces(answer)
        assert len(loud) > 100   # the answer was heard, loud, at the microphone
        assert not any(piece in heard for piece in loud)
        assert speech["follow"][1] in heard   # and nothing of it over the follow-up
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_the_wake_word_over_the_answer_stops_it_and_the_next_question_is_answered(
        tmp_path, mock, peers, speech):
    wake_follow = tmp_path / "wake-follow.wav"
    write_wav(wake_follow, speech["wake"][1] + silence(0.6) + speech["follow"][1])
    asr = peers.asr("--say", QUESTION, "--say", FOLLOW)
    daemon = daemon_with_echo(tmp_path, mock, peers, [speech["wake-question"][0], wake_follow],
                              0.15, asr)
    echo = tmp_path / "echo.pcm"
    try:
        start_listening(daemon)
        peers.cue(0)
        until(lambda: echo.exists() and echo.stat().st_size > 0 and board_speaks(daemon),
              "the board says its answer")
        peers.cue(1)
        status = wait_for(daemon, lambda s: s["asks"] == 2 and s["state"] == "idle",
                          "the new question asked and answered")
        assert status["barge_ins"] == 1 and status["wakes"] == 2
        assert status["last_transcript"] == FOLLOW
        # the first answer's speech was silenced (its ask stopped, were it still streaming)
        assert re.search(r"voice okay_nabu: stopped \d+ asks and silenced .*speaker",
                         daemon.log()), daemon.log()
        # the new question reached the ASR without the board's voice in it
        assert speech["follow"][1] in peers.utterance(1)
        assert peers.utterance(2) is None
    finally:
        assert daemon.stop() == 0, daemon.log()
