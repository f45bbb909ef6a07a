"""A hostile or broken broker and its clients against the MQTT door
(docs/robustness.md): a real Mosquitto where it can be made to do it,
tests/fake_broker.py where it cannot. The model is `homeagent mock-llm`."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import timeout
from daemon_harness import Daemon
from fake_broker import FakeBroker, publish, pubrel
from agent.mqtt import messages
from agent.service.config import ConfigError
from mosquitto import broker  # noqa: F401 (a fixture)
from test_center import LONG, PACED_LONG, sentences_of
from test_mqtt_config import load_mqtt
from test_mqtt_daemon import is_json, mqtt_table, payload, topic
from test_wyoming_service import until_true


def status(daemon) -> dict:
    with daemon.client() as client:
        return client.call("status")


# ---- a broker that sends what Mosquitto never does ----

@pytest.fixture
def fake(tmp_path, mock):
    fake = FakeBroker()
    daemon = Daemon(tmp_path, mock.url, extra=(
        "[mqtt]\n" f'broker = "127.0.0.1"\nport = {fake.port}\nboard = "gamma"\n'
        "keepalive = 5\ndiscovery = false\n")).start()
    fake.wait(lambda p: p.kind == 8)  # subscribed
    yield fake, daemon
    try:
        assert daemon.stop() == 0, daemon.log()
    finally:
        fake.close()


def ask(ask_id: str) -> bytes:
    return json.dumps({"text": "Hello there", "id": ask_id}).encode()


def dones(fake: FakeBroker, ask_id: str) -> int:
    return sum(json.loads(p.payload).get("id") == ask_id
               for p in fake.published(topic("gamma", "done")))


def settled(fake: FakeBroker, daemon, marker: str) -> None:
    """Whatever ran has published its done, and the broker has it: a marker
    ask is answered, then no ask of the broker's is left running, then a
    second marker is answered. An ask that ended has queued its done, but
    the writer may not have sent it yet; the second marker's done, queued
    after it on the one queue of answers, arrives after it."""
    fake.send(publish(b"homeagent/gamma/ask", ask(marker), qos=1, packet_id=999))
    until_true(lambda: dones(fake, marker) == 1)
    until_true(lambda: status(daemon)["mqtt"]["asks"] == 0)
    fake.send(publish(b"homeagent/gamma/ask", ask(f"{marker}-last"), qos=1, packet_id=998))
    until_true(lambda: dones(fake, f"{marker}-last") == 1)


def test_a_qos2_ask_gets_pubrec_pubcomp_and_runs_once(fake):
    """It got PUBACK: the broker's QoS 2 flow never completed, and its
    redelivery ran the ask again."""
    fake, daemon = fake
    message = publish(b"homeagent/gamma/ask", ask("twice?"), qos=2, packet_id=21)
    fake.send(message)
    fake.wait(lambda p: p.kind == 5 and p.packet_id == 21)  # PUBREC
    fake.send(publish(b"homeagent/gamma/ask", ask("twice?"), qos=2, packet_id=21, dup=True))
    until_true(lambda: sum(p.kind == 5 and p.packet_id == 21 for p in fake.packets) == 2)
    fake.send(pubrel(21))
    fake.wait(lambda p: p.kind == 7 and p.packet_id == 21)  # PUBCOMP
    assert not [p for p in fake.packets if p.kind == 4 and p.packet_id == 21]  # no PUBACK
    settled(fake, daemon, "after-qos2")
    assert dones(fake, "twice?") == 1
    assert status(daemon)["counters"]["asks"] == 3  # the QoS 2 ask and the two markers


def test_a_dup_redelivery_after_a_reconnect_is_acknowledged_and_not_run_again(fake):
    fake, daemon = fake
    fake.send(publish(b"homeagent/gamma/ask", ask("dup-1"), qos=1, packet_id=7))
    fake.wait(lambda p: p.kind == 4 and p.packet_id == 7)
    fake.drop()  # as if the PUBACK were lost with the connection
    fake.wait(lambda p: p.kind == 8 and p.connection == 2)
    fake.send(publish(b"homeagent/gamma/ask", ask("dup-1"), qos=1, packet_id=7, dup=True))
    fake.wait(lambda p: p.kind == 4 and p.packet_id == 7 and p.connection == 2)
    settled(fake, daemon, "after-dup")
    assert dones(fake, "dup-1") == 1
    mqtt = status(daemon)
    assert mqtt["counters"]["asks"] == 3 and mqtt["mqtt"]["duplicates"] == 1  # two markers


def test_an_oversized_publish_on_a_topic_not_utf8_is_refused_and_the_connection_goes_on(fake):
    fake, daemon = fake
    fake.send(publish(b"homeagent/gamma/\xff\xfe", b"x" * 40000, qos=1, packet_id=5))
    fake.wait(lambda p: p.kind == 4 and p.packet_id == 5)
    error = fake.wait(lambda p: p.kind == 3 and p.topic == topic("gamma", "error"))
    assert json.loads(error.payload)["error"] == "payload_too_large"
    settled(fake, daemon, "still-there")
    assert len(fake.connections) == 1  # never reconnected
    assert "Traceback" not in daemon.log() and "internal error" not in daemon.log()


def test_error_messages_are_limited_per_topic_and_say_how_many_were_left_out():
    limit = messages.ErrorLimit(burst=2, interval=1.0)
    assert [limit.allow("a", 0.0) for _ in range(5)] == [0, 0, None, None, None]
    assert limit.allow("b", 0.0) == 0  # another topic has its own
    assert limit.allow("a", 0.5) is None
    assert limit.allow("a", 1.0) == 4 and limit.allow("a", 1.0) is None
    assert limit.suppressed_total == 5
    refusal = messages.Refusal(messages.PayloadError.INVALID_JSON, "ask: invalid JSON")
    assert messages.error_message("t", refusal, 4)["suppressed"] == 4
    assert "suppressed" not in messages.error_message("t", refusal)


def test_mqtt_session_names_are_their_own_namespace():
    names = messages.SessionNames(("kitchen",))
    assert names.stored("private") == "mqtt-private"
    assert names.stored("kitchen") == "kitchen"  # mqtt.sessions: shared on purpose
    assert names.stored("x" * 60) is None and names.stored("../etc") is None
    assert names.shown("mqtt-private") == "private" and names.shown("kitchen") == "kitchen"


def test_mqtt_sessions_in_the_config(tmp_path):
    mqtt = load_mqtt(tmp_path, 'broker = "mqtt.lan"\nsessions = ["kitchen", "hall"]\n').mqtt
    assert mqtt.sessions == ("kitchen", "hall")
    assert load_mqtt(tmp_path, 'broker = "mqtt.lan"\n').mqtt.sessions == ()
    with pytest.raises(ConfigError, match="sessions"):
        load_mqtt(tmp_path, 'broker = "mqtt.lan"\nsessions = ["../x"]\n')


# ---- a real broker, any of its clients ----

def test_an_mqtt_ask_cannot_name_a_socket_clients_session(tmp_path, mock, broker):  # noqa: F811
    watcher = broker.subscribe(f"{topic('delta', '')}#")
    daemon = Daemon(tmp_path, mock.url, extra=mqtt_table(broker, "delta")).start()
    try:
        watcher.wait(topic("delta", "state"), is_json(state="idle"))
        with daemon.client() as client:
            replies = list(client.request("ask", prompt="My secret is 4242",
                                          session="private"))
        assert replies[-1]["type"] == "done"
        stored = tmp_path / "state" / "sessions"
        before = (stored / "private.json").read_bytes()
        broker.publish(topic("delta", "ask"), json.dumps(
            {"text": "What did I say?", "id": "spy", "session": "private"}).encode())
        done = payload(watcher.wait(topic("delta", "done"), is_json(id="spy")))
        assert done["session"] == "private"  # the asker's own name, in its own namespace
        assert (stored / "private.json").read_bytes() == before
        assert "4242" not in done["text"]
        assert (stored / "mqtt-private.json").exists()
    finally:
        watcher.close()
        assert daemon.stop() == 0, daemon.log()


FLOOD = 30000


def test_a_flood_of_bad_payloads_displaces_no_answer(tmp_path, mock, broker):  # noqa: F811
    """Once 12 of 30 sentences were lost behind the flood's error messages
    (done still sent), and each bad payload wrote a log line."""
    watcher = broker.subscribe(f"{topic('echo', '')}#")
    daemon = Daemon(tmp_path, mock.url, providers=PACED_LONG,
                    extra=mqtt_table(broker, "echo")).start()
    try:
        watcher.wait(topic("echo", "state"), is_json(state="idle"))
        broker.publish(topic("echo", "ask"), json.dumps({"text": "Tell me",
                                                         "id": "long"}).encode())
        watcher.wait(topic("echo", "answer"), is_json(id="long"))
        subprocess.run(["mosquitto_pub", *broker.client_options(None), "-t",
                        topic("echo", "announce"), "-q", "0", "-l"],
                       input=b"{\n" * FLOOD, check=True, capture_output=True,
                       timeout=timeout(60))
        done = payload(watcher.wait(topic("echo", "done"), is_json(id="long")))
        assert done["text"] == LONG
        sentences = [payload(m)["text"] for m in watcher.on(topic("echo", "answer"))
                     if payload(m)["id"] == "long"]
        assert sentences == sentences_of(LONG)
        until_true(lambda: status(daemon)["mqtt"]["bad_payloads"] == FLOOD)
        refusals = [line for line in daemon.log().splitlines() if "invalid_json" in line]
        assert len(refusals) < FLOOD // 10
        mqtt = status(daemon)["mqtt"]
        assert mqtt["dropped"] == 0
        assert mqtt["errors_suppressed"] + mqtt["errors_dropped"] >= FLOOD - FLOOD // 10
    finally:
        watcher.close()
        assert daemon.stop() == 0, daemon.log()


def test_status_lists_the_brokers_asks_in_flight(tmp_path, mock, broker):  # noqa: F811
    watcher = broker.subscribe(f"{topic('foxtrot', '')}#")
    daemon = Daemon(tmp_path, mock.url, providers=PACED_LONG,
                    extra=mqtt_table(broker, "foxtrot")).start()
    try:
        watcher.wait(topic("foxtrot", "state"), is_json(state="idle"))
        broker.publish(topic("foxtrot", "ask"), json.dumps(
            {"text": "Tell me", "id": "slow", "session": "kitchen"}).encode())
        watcher.wait(topic("foxtrot", "answer"), is_json(id="slow"))
        [active] = status(daemon)["mqtt"]["active"]
        assert active["id"] == "slow" and active["session"] == "mqtt-kitchen"
        assert active["seconds"] >= 0
        watcher.wait(topic("foxtrot", "done"), is_json(id="slow"))
        until_true(lambda: status(daemon)["mqtt"]["active"] == [])
    finally:
        watcher.close()
        assert daemon.stop() == 0, daemon.log()
