"""The voice door's state reaches every place: a socket subscriber's
`voice` events, the board's retained `voice` topic on a real Mosquitto
(with its Home Assistant sensor), and a serial board's VOICE lines on a
pty; and its wake sound is played on the speech device, never heard by
the ASR. End to end with the real processes of tests/test_voice_daemon.py
(espeak-ng's speech as the microphone, a Wyoming ASR peer, mock-llm, a
wyoming-tts device). No duration is asserted; every wait is bounded."""

from __future__ import annotations

import json

import pytest

from agent.core import replies
from agent.devices.base import Common, SettingError
from agent.devices.command import CommandDevice
from agent.devices.wyoming_tts import WyomingSpeech
from agent.mqtt.config import MqttConfig
from agent.mqtt.discovery import discovery_messages
import test_voice_barge_in
from daemon_harness import Daemon
from mosquitto import broker  # noqa: F401 (a fixture)
from test_mqtt_daemon import is_json, mqtt_table, payload
from test_serial_daemon import SerialBoard, Subscriber
from test_voice_daemon import (QUESTION, REAL_TIME, needs_espeak, needs_voice, peers,  # noqa: F401
                               speaker_table, start_listening, voice_table, wait_for)
from voice_audio import espeak, silence, write_wav

# one question, from the wake word to the answer spoken
ONE_QUESTION = ["listening", "thinking", "speaking", "idle"]


def is_one_question(seen: list[str]) -> bool:
    """seen is one question's states, after at most the idle the door
    started in (its notice may still have been on its way when we looked)."""
    began = seen.index("listening") if "listening" in seen else len(seen)
    return set(seen[:began]) <= {"idle"} and seen[began:] == ONE_QUESTION


def finished(seen: list[str]) -> bool:
    return "listening" in seen and seen[-1] == "idle"


def test_the_voice_sensor_is_discovered_only_on_a_board_that_hears():
    config = MqttConfig(broker="127.0.0.1", board="hall")
    plain = discovery_messages(config, version="1")
    hearing = discovery_messages(config, version="1", voice=True)
    assert hearing[:-1] == plain
    topic, config_payload = hearing[-1]
    sensor = json.loads(config_payload)
    assert topic == "homeassistant/sensor/hall/voice/config"
    assert (sensor["state_topic"], sensor["value_template"]) == ("homeagent/hall/voice",
                                                                 "{{ value_json.state }}")
    assert (sensor["device_class"], sensor["options"]) == ("enum", list(replies.VOICE_STATES))
    assert sensor["unique_id"] == "homeagent_hall_voice"


@pytest.mark.parametrize("event,line", [("voice", "VOICE"), ("timer", "TIMER")])
@pytest.mark.parametrize("cls,settings", [(CommandDevice, {"argv": ["true"]}),
                                          (WyomingSpeech, {"address": "unix:/nowhere"})])
def test_a_device_with_nothing_to_show_refuses_the_notices_a_board_shows(cls, settings, event,
                                                                         line):
    with pytest.raises(SettingError) as refused:
        cls.from_settings(Common("d", frozenset({"sentence", event})), settings)
    assert refused.value.key == "events"
    assert f'"{event}" events' in str(refused.value) and f"its {line} line" in str(refused.value)


@REAL_TIME
@needs_voice
@needs_espeak
def test_one_question_is_seen_as_states_by_a_subscriber_the_broker_and_a_serial_board(
        tmp_path, mock, peers, broker):  # noqa: F811
    pytest.importorskip("wyoming")
    spoken = tmp_path / "wake-question.wav"
    write_wav(spoken, silence(0.3) + espeak("okay nabu") + silence(0.5) + espeak(QUESTION))
    link = tmp_path / "usb-Leds_1-if00"
    board = SerialBoard(link).plug()
    watcher = broker.subscribe("homeagent/hall/voice", "homeassistant/sensor/hall/voice/config")
    voice_topic = "homeagent/hall/voice"
    extra = (voice_table(peers.asr("--say", QUESTION), [spoken], peers.cues, follow_up="never")
             + speaker_table(peers.tts(), peers.sink)
             + f'[devices.leds]\ntype = "serial"\nport = "{link}"\nrestart_max_delay = 0.5\n'
             + mqtt_table(broker, "hall"))
    daemon = Daemon(tmp_path, mock.url, extra=extra)
    subscriber = None
    try:
        start_listening(daemon)
        # the retained state and the sensor's config, once the board is online
        watcher.wait(voice_topic, is_json(state="idle"))
        sensor = payload(watcher.wait("homeassistant/sensor/hall/voice/config"))
        assert sensor["options"] == list(replies.VOICE_STATES)
        board.wait_for(lambda lines: any(line.startswith("HELLO ") for line in lines),
                       "the serial board greeted")
        subscriber = Subscriber(daemon)
        on_board, on_broker = len(board.snapshot()), len(watcher.messages)

        peers.cue(0)
        wait_for(daemon, lambda s: s["asks"] == 1 and s["state"] == "idle",
                 "the question asked, answered and spoken")

        def board_states(lines):
            return [line.removeprefix("VOICE ") for line in lines[on_board:]
                    if line.startswith("VOICE ")]

        lines = board.wait_for(lambda lines: finished(board_states(lines)),
                               "the board back to idle")
        assert is_one_question(board_states(lines))
        # the answer's text is on the board while it thinks; speaking comes after its DONE
        shown = lines[on_board:]
        assert shown.index("VOICE thinking") < shown.index(
            next(line for line in shown if line.startswith("DONE "))) \
            < shown.index("VOICE speaking")

        def subscriber_states(items):
            return [item["state"] for item in items if item["type"] == "voice"]

        events = subscriber.wait_for(lambda items: finished(subscriber_states(items)),
                                     "the subscriber's voice events")
        assert subscriber_states(events) == ONE_QUESTION  # subscribed after the first idle
        voice = [item for item in events if item["type"] == "voice"]
        assert all("request" not in item and item["id"] == "sub" for item in voice)

        def states():
            return [m for m in watcher.messages[on_broker:] if m.topic == voice_topic]

        def broker_states():
            return [payload(m)["state"] for m in states()]

        watcher.wait(voice_topic, lambda m: finished(broker_states()),
                     after=len(watcher.messages))
        assert is_one_question(broker_states())
        assert all(m.retained is False for m in states())  # live, not the broker's copy
        # the broker keeps the last one for whoever comes later
        late = broker.subscribe(voice_topic)
        try:
            kept = late.wait(voice_topic)
            assert kept.retained and payload(kept) == {"state": "idle"}
        finally:
            late.close()
    finally:
        if subscriber is not None:
            subscriber.close()
        watcher.close()
        board.unplug()
        assert daemon.stop() == 0, daemon.log()


def tone(seconds: float = 0.3, hertz: float = 880.0) -> bytes:
    """A chime, 16 kHz 16-bit mono: the speaker's echo carries it back unchanged."""
    import numpy as np

    samples = np.arange(int(16000 * seconds)) / 16000
    return (np.sin(2 * np.pi * hertz * samples) * 8000).astype("<i2").tobytes()


@REAL_TIME
@needs_voice
@needs_espeak
def test_the_wake_sound_is_played_on_the_speaker_and_never_reaches_the_asr(
        tmp_path, mock, peers):  # noqa: F811
    pytest.importorskip("wyoming")
    chime = tone()
    write_wav(tmp_path / "ding.wav", chime)
    question = espeak(QUESTION)
    # time after the wake word for the chime and its echo, before the question
    spoken = tmp_path / "wake-pause-question.wav"
    write_wav(spoken, silence(0.3) + espeak("okay nabu") + silence(3.0) + question)
    echo = tmp_path / "echo.pcm"   # the speaker plays into it; the microphone hears it
    daemon = Daemon(tmp_path, mock.url, extra=voice_table(
        peers.asr("--say", QUESTION), [spoken], peers.cues, "--echo", str(echo),
        follow_up="never", start_seconds=8.0, wake_sound=str(tmp_path / "ding.wav"))
        + test_voice_barge_in.speaker_table(peers.tts(), echo))
    try:
        start_listening(daemon)
        peers.cue(0)
        wait_for(daemon, lambda s: s["asks"] == 1 and s["state"] == "idle",
                 "the question asked, answered and spoken")
        assert echo.read_bytes().startswith(chime)  # played first, as it is
        with daemon.client() as client:
            [speaker] = client.call("status")["devices"]
        assert speaker["sounds"] == 1
        heard = peers.utterance(0)
        assert question[len(question) // 2:] in heard
        # the chime came back into the microphone; no 10 ms of it reached the ASR
        assert not any(chime[at:at + 320] in heard for at in range(0, len(chime) - 320, 320))
    finally:
        assert daemon.stop() == 0, daemon.log()
