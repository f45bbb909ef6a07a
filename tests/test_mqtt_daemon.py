"""The daemon as a board on a real Mosquitto (tests/mosquitto.py), peers
mosquitto_sub and mosquitto_pub; the model is `homeagent mock-llm`."""

from __future__ import annotations

import json
import signal

import pytest

from conftest import timeout
from daemon_harness import Daemon
from mosquitto import Broker, broker  # noqa: F401 (a fixture)
from test_wyoming_service import until_true

PREFIX = "homeagent"


def topic(board: str, leaf: str) -> str:
    return f"{PREFIX}/{board}/{leaf}"


def mqtt_table(broker: Broker, board: str, **settings) -> str:
    values = {"broker": broker.host, "port": broker.port, "board": board,
              "keepalive": 5, **settings}
    lines = ["[mqtt]"] + [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def is_json(**fields):
    def match(message) -> bool:
        try:
            value = json.loads(message.payload)
        except ValueError:
            return False
        return isinstance(value, dict) and all(value.get(k) == v for k, v in fields.items())
    return match


def payload(message) -> dict:
    return json.loads(message.payload)


@pytest.fixture(scope="module")
def watcher(broker):
    watcher = broker.subscribe(f"{PREFIX}/#", "homeassistant/#")
    yield watcher
    watcher.close()


@pytest.fixture(scope="module")
def alpha(broker, watcher, mock, tmp_path_factory):
    """Board alpha; its answers come in parts 30 ms apart, so that one is
    still streaming when the broker goes."""
    daemon = Daemon(tmp_path_factory.mktemp("alpha"), mock.url,
                    providers={"mock": {"headers": {"x-mock-delay-ms": "30"}}},
                    extra=mqtt_table(broker, "alpha", max_asks=2))
    daemon.start()
    watcher.wait(topic("alpha", "availability"), lambda m: m.payload == b"online")
    watcher.wait("homeassistant/button/alpha/stop/config")  # the last one it publishes
    yield daemon
    if daemon.process.poll() is None:
        daemon.stop()


def status(daemon) -> dict:
    with daemon.client() as client:
        return client.call("status")["mqtt"]


def test_online_retained_with_state_and_discovery(alpha, broker):
    late = broker.subscribe(f"{PREFIX}/alpha/+", "homeassistant/+/alpha/+/config")
    try:
        online = late.wait(topic("alpha", "availability"))
        assert (online.payload, online.retained) == (b"online", True)
        state = late.wait(topic("alpha", "state"))
        assert state.retained and payload(state)["state"] == "idle"
        for component, object_id in (("text", "ask"), ("text", "announce"),
                                     ("sensor", "state"), ("event", "events"),
                                     ("button", "stop")):
            config = late.wait(f"homeassistant/{component}/alpha/{object_id}/config")
            assert config.retained
            assert payload(config)["unique_id"] == f"homeagent_alpha_{object_id}"
    finally:
        late.close()
    mqtt = status(alpha)
    assert mqtt["connected"] and mqtt["board"] == "alpha"
    assert mqtt["broker"] == f"mqtt://{broker.host}:{broker.port}"


def test_an_ask_is_answered_by_sentences_done_state_and_event(alpha, broker, watcher):
    broker.publish(topic("alpha", "ask"), json.dumps({"text": "Hello there",
                                                      "id": "q1"}).encode())
    done = payload(watcher.wait(topic("alpha", "done"), is_json(id="q1")))
    assert done["finish_reason"] == "stop" and done["text"]
    sentences = [payload(m) for m in watcher.on(topic("alpha", "answer"))
                 if payload(m)["id"] == "q1"]
    assert sentences and " ".join(s["text"] for s in sentences).split() == done["text"].split()
    assert {s["session"] for s in sentences} == {done["session"]}
    event = payload(watcher.wait(topic("alpha", "event"), is_json(id="q1")))
    assert event["event_type"] == "answer" and event["text"] == done["text"]
    states = [payload(m)["state"] for m in watcher.on(topic("alpha", "state"))]
    assert "thinking" in states
    watcher.wait(topic("alpha", "state"), is_json(state="idle", asks=0))


BIG = b'{"text": "' + b"x" * 20000 + b'"}'
COMMON = [(b"{", "invalid_json"), (BIG, "payload_too_large"), (b"[1]", "not_an_object"),
          (b"", "empty_payload")]
# a text field on ask and announce; stop has only session
WITH_TEXT = [(b'{"text": "\xff"}', "invalid_utf8"), (b'{"text": 5}', "bad_field"),
             (b'{"text": "hi", "zzz": "1"}', "unknown_field"), (b'{"id": "x"}', "missing_field"),
             (b'{"text": "  "}', "bad_field")]
STOP = [(b'{"session": "\xff"}', "invalid_utf8"), (b'{"session": 5}', "bad_field"),
        (b'{"text": "x"}', "unknown_field")]


def test_the_state_follows_a_socket_ask_too(alpha, watcher):
    start = len(watcher.messages)
    with alpha.client() as client:
        replies = list(client.request("ask", prompt="Hello from the socket"))
    assert replies[-1]["type"] == "done"
    thinking = watcher.wait(topic("alpha", "state"), is_json(state="thinking", asks=1),
                            after=start)
    at = next(i for i, m in enumerate(watcher.messages) if m is thinking)
    watcher.wait(topic("alpha", "state"), is_json(state="idle", asks=0), after=at)


def test_bad_payloads_get_named_errors_on_every_topic(alpha, broker, watcher):
    cases = [(target, body, code)
             for target, own in ((topic("alpha", "ask"), WITH_TEXT),
                                 (f"{PREFIX}/house/ask", WITH_TEXT),
                                 (topic("alpha", "announce"), WITH_TEXT),
                                 (topic("alpha", "stop"), STOP))
             for body, code in COMMON + own]
    expected = []
    for target, body, code in cases:
        if body == b'{"id": "x"}' and target.endswith("announce"):
            body = b'{"device": "x"}'
        broker.publish(target, body)
        expected.append((target, code))
    seen = []
    for target, code in expected:
        error = payload(watcher.wait(topic("alpha", "error"), is_json(topic=target, error=code)))
        assert error["message"]
        seen.append((target, code))
    assert seen == expected
    assert status(alpha)["bad_payloads"] >= len(expected)
    broker.publish(topic("alpha", "ask"), b'{"text": "Still there?", "id": "after-bad"}')
    watcher.wait(topic("alpha", "done"), is_json(id="after-bad"))


def test_more_asks_than_max_asks_get_too_many_asks(alpha, broker, watcher):
    for n in range(3):
        broker.publish(topic("alpha", "ask"), json.dumps({"text": "Tell me a story",
                                                          "id": f"many{n}"}).encode())
    watcher.wait(topic("alpha", "error"), is_json(error="too_many_asks"))
    for n in range(2):
        watcher.wait(topic("alpha", "done"), is_json(id=f"many{n}"))


def test_home_assistant_birth_republishes_discovery(alpha, broker, watcher):
    config_topic = "homeassistant/button/alpha/stop/config"
    before = len(watcher.on(config_topic))
    broker.publish("homeassistant/status", b"online")
    watcher.wait(config_topic, lambda m: len(watcher.on(config_topic)) > before)
    assert payload(watcher.on(config_topic)[-1])["command_topic"] == topic("alpha", "stop")


def test_a_retained_ask_runs_live_once(alpha, broker, watcher):
    """Delivered live, a retained message looks like any other (MQTT 3.1.1
    clears its flag); the restart test below sees it refused at reconnect."""
    retained_ask(broker, watcher, "kept")
    broker.publish(topic("alpha", "ask"), b"", retain=True)  # cleared


def retained_ask(broker, watcher, ask_id: str) -> None:
    broker.publish(topic("alpha", "ask"), json.dumps({"text": "Again and again?",
                                                      "id": ask_id}).encode(), retain=True)
    watcher.wait(topic("alpha", "done"), is_json(id=ask_id))


def test_broker_restart_mid_answer_and_an_ask_queued_while_away(alpha, broker, watcher):
    retained_ask(broker, watcher, "kept-over-restart")  # refused when it comes again
    # an observer with a persistent session sees what comes while the broker is away
    observer = broker.subscribe(f"{PREFIX}/alpha/#", client_id="observer")
    try:
        saves = broker.saves()
        broker.publish(topic("alpha", "ask"), b'{"text": "Tell me a long story", "id": "mid"}')
        observer.wait(topic("alpha", "answer"), is_json(id="mid"))
        broker.wait_saved(saves)
        # The board is held stopped while the broker comes back, so that its
        # reconnect (backoff from 1 s) cannot come before the publish below.
        alpha.process.send_signal(signal.SIGSTOP)
        try:
            broker.kill()
        except BaseException:
            alpha.process.send_signal(signal.SIGCONT)
            raise
    finally:
        observer.close()
    try:
        broker.start()
        # published before the board is back: its persistent session queues it
        broker.publish(topic("alpha", "ask"), b'{"text": "Are you back?", "id": "away"}')
    finally:
        alpha.process.send_signal(signal.SIGCONT)
    log = broker.log()
    assert "as homeagent-alpha" not in log[log.rindex("mosquitto version"):], \
        "the board reconnected before the ask was published"
    observer = broker.subscribe(f"{PREFIX}/alpha/#", client_id="observer")
    try:
        observer.wait(topic("alpha", "done"), is_json(id="mid"))
        observer.wait(topic("alpha", "done"), is_json(id="away"))
        observer.wait(topic("alpha", "availability"), lambda m: m.payload == b"online")
        observer.wait(topic("alpha", "state"), is_json(state="idle"))
        # the retained ask came again with the subscription, and was not run
        observer.wait(topic("alpha", "error"), is_json(topic=topic("alpha", "ask"),
                                                       error="retained_command"))
        broker.publish(topic("alpha", "ask"), b"", retain=True)  # cleared
    finally:
        observer.close()
    mqtt = status(alpha)
    assert mqtt["connected"] and mqtt["reconnects"] >= 1 and mqtt["connects"] >= 2


def test_a_message_of_ours_unacknowledged_at_a_drop_is_sent_again(alpha, broker):
    """The broker frozen (no PUBACK), then killed: what the board had sent
    into its socket is gone with it, and comes again after the reconnect."""
    text = "Sent while the broker froze."
    observer = broker.subscribe(topic("alpha", "announce"), client_id="resend")
    observer.close()  # its persistent session keeps what comes while it is away
    saves = broker.saves()
    broker.publish(f"{PREFIX}/test/marker", b"x", retain=True)  # a change after the session
    broker.wait_saved(saves)
    broker.process.send_signal(signal.SIGSTOP)
    try:
        with alpha.client() as client:
            reply = client.call("announce", text=text, board="alpha")
        assert reply["type"] == "announced", reply
        until_true(lambda: status(alpha)["in_flight"] >= 1)
    finally:
        broker.kill()  # a stopped process is killed all the same
    broker.start()
    observer = broker.subscribe(topic("alpha", "announce"), client_id="resend")
    try:
        observer.wait(topic("alpha", "announce"), is_json(text=text))
    finally:
        observer.close()
    until_true(lambda: status(alpha)["connected"] and status(alpha)["in_flight"] == 0)


def test_kill_9_of_the_board_publishes_its_last_will(alpha, broker):
    alpha.kill()
    late = broker.subscribe(topic("alpha", "availability"))
    try:
        late.wait(topic("alpha", "availability"), lambda m: m.payload == b"offline")
    finally:
        late.close()
