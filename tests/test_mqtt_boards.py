"""Boards working together on one real broker: three daemons, each with a
speech device (a command device with speech = true that writes what it
would say to a file). An ask to one board is spoken on another (speak_on,
over MQTT and over the socket API), an announce goes from one board to
another, and a board that is not online is a named error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon_harness import Daemon
from mosquitto import broker  # noqa: F401 (a fixture)
from test_mqtt_daemon import is_json
from test_wyoming_service import until_true

BOARDS = ("one", "two", "three")


def spoken(directory: Path) -> list[str]:
    path = directory / "spoken.txt"
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(scope="module")
def boards(broker, mock, tmp_path_factory):  # noqa: F811
    daemons = {}
    for name in BOARDS:
        directory = tmp_path_factory.mktemp(name)
        # it says nothing while spoken.txt.hold exists: a speech held for the test
        speech = ["sh", "-c", 'while [ -e "$0.hold" ]; do sleep 0.02; done; '
                  'printf "%s\\n" "$1" >> "$0"', str(directory / "spoken.txt"), "{text}"]
        extra = (f"[mqtt]\nbroker = {json.dumps(broker.host)}\nport = {broker.port}\n"
                 f"board = {json.dumps(name)}\n"
                 f"[devices.voice]\ntype = \"command\"\nspeech = true\n"
                 f"argv = {json.dumps(speech)}\n")
        daemons[name] = Daemon(directory, mock.url, extra=extra).start()
    for daemon in daemons.values():
        until_true(lambda: set(BOARDS) <= set(mqtt_status(daemon)["boards_online"]))
    yield daemons
    for daemon in daemons.values():
        daemon.stop()


def mqtt_status(daemon: Daemon) -> dict:
    with daemon.client() as client:
        return client.call("status")["mqtt"]


def test_an_ask_to_one_board_is_spoken_on_another(boards, broker):  # noqa: F811
    watcher = broker.subscribe("homeagent/one/done")
    try:
        broker.publish("homeagent/one/ask", b'{"text": "Hello", "id": "far", '
                                            b'"speak_on": "two"}')
        done = json.loads(watcher.wait("homeagent/one/done").payload)
    finally:
        watcher.close()
    two = boards["two"].dir
    until_true(lambda: " ".join(spoken(two)).split() == done["text"].split())
    # one's own voice stayed silent: an announce after the answer is all it says
    with boards["one"].client() as client:
        assert client.call("announce", text="Marker.")["type"] == "announced"
    until_true(lambda: spoken(boards["one"].dir) == ["Marker."])


def test_a_socket_ask_with_speak_on_and_an_announce_on_another_board(boards):
    three = boards["three"].dir
    with boards["one"].client() as client:
        replies = list(client.request("ask", prompt="Hello", speak_on="three"))
        assert replies[-1]["type"] == "done"
        until_true(lambda: " ".join(spoken(three)).split() == replies[-1]["text"].split())
        before = len(spoken(three))
        reply = client.call("announce", text="Dinner is ready.", board="three")
        assert reply["devices"] == ["board:three"]
    until_true(lambda: spoken(three)[before:] == ["Dinner is ready."])


def test_a_board_that_is_not_online_is_named(boards):
    with boards["two"].client() as client:
        reply = client.call("announce", text="Hi.", board="attic")
        assert (reply["type"], reply["code"]) == ("error", "unknown_board")
        replies = list(client.request("ask", prompt="Hi", speak_on="attic"))
        assert [(r["type"], r["code"]) for r in replies] == [("error", "unknown_board")]


def test_the_state_is_speaking_while_a_board_has_something_to_say(boards, broker):  # noqa: F811
    """speaking outlasts the answer while the voice is held, and no idle
    comes between; then an announce alone makes the board speak."""
    hold = boards["two"].dir / "spoken.txt.hold"
    state = "homeagent/two/state"
    watcher = broker.subscribe(state, "homeagent/two/done")
    try:
        watcher.wait(state, is_json(state="idle"))  # the retained one
        start = len(watcher.messages)
        hold.touch()
        broker.publish("homeagent/two/ask", b'{"text": "Hello", "id": "held"}')
        watcher.wait("homeagent/two/done", is_json(id="held"), after=start)
        held = watcher.wait(state, is_json(state="speaking", asks=0), after=start)
        before = [json.loads(m.payload)["state"] for m in watcher.messages[start:]
                  if m.topic == state]
        assert "idle" not in before and before[-1] == "speaking", before
        hold.unlink()
        at = watcher.messages.index(held)
        watcher.wait(state, is_json(state="idle", asks=0), after=at)
        until_true(lambda: spoken(boards["two"].dir))

        start = len(watcher.messages)
        hold.touch()
        broker.publish("homeagent/two/announce", b'{"text": "Tea is ready."}')
        held = watcher.wait(state, is_json(state="speaking", asks=0), after=start)
        assert "Tea is ready." not in spoken(boards["two"].dir)
        hold.unlink()
        watcher.wait(state, is_json(state="idle", asks=0), after=watcher.messages.index(held))
        until_true(lambda: "Tea is ready." in spoken(boards["two"].dir))
    finally:
        hold.unlink(missing_ok=True)
        watcher.close()


def test_an_ask_to_the_house_is_answered_by_exactly_one_board(boards, broker, mock):  # noqa: F811
    watcher = broker.subscribe("homeagent/+/done")
    try:
        mock.clear()
        ids = [f"house-{n}" for n in range(4)]
        for ask_id in ids:
            broker.publish("homeagent/house/ask", json.dumps(
                {"text": f"A question for the house, {ask_id}", "id": ask_id}).encode())
        for ask_id in ids:
            watcher.wait("homeagent/+/done", is_json(id=ask_id))
        # the broker gives each to one board at publish: a second board's
        # answer would have started by now, and its request is recorded
        answered = [json.loads(m.payload)["id"] for m in watcher.messages]
        assert sorted(a for a in answered if a in ids) == ids, watcher.messages
        prompts = [r["body"]["messages"][-1]["content"] for r in mock.requests()]
        assert sorted(p for p in prompts if "for the house" in p) == sorted(
            f"A question for the house, {ask_id}" for ask_id in ids)
    finally:
        watcher.close()
