"""The center (agent/core/): one ask lifecycle and one "who asked" for every
door.

In process, on a real Center with a scripted runner: every ask gets a key
no other ask has, whatever its door's own id; a reply is masked once and
reaches the asker, then each listener in the order they were added; a
failure inside the daemon is an internal_error reply, a door's cancel a
cancelled outcome, an ask while the daemon stops shutting_down.

Through real daemons: two asks that their doors name alike (two Wyoming
conversations on one peer at once, two MQTT asks with one client-chosen
id) are two asks to the devices and the board: each speech device hears
each answer's sentences whole, never pieces of both joined, and the board
stays `thinking` until the last of them ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from agent import masking
from agent.core import replies
from agent.core.center import Cancel, Center
from agent.core.commands import Ask, Door
from agent.core.statistics import Outcome
from agent.text.segmenter import Segmenter, SegmenterConfig
from conftest import timeout
from daemon_harness import Daemon, toml_value
from mosquitto import broker  # noqa: F401 (a fixture)
from test_mqtt_daemon import is_json, mqtt_table, payload, topic
from test_wyoming_service import until_true

SECRET = "sk-center0123456789abcdef"


class Scripted:
    """A runner whose prompt says what the ask does: "answer" streams three
    deltas, one with the secret; "bug" raises; "hang" waits to be cancelled."""

    async def ask(self, prompt, session, provider, emit, stop) -> None:
        await emit(replies.Started(session or "s-new", "p", "m"))
        if prompt == "bug":
            raise RuntimeError("a bug in the runner")
        if prompt == "hang":
            await trio.sleep_forever()
        for text in ("One ", f"key {SECRET} ", "two."):
            await emit(replies.Delta(text))
        stop.closed.set()
        await emit(replies.Done(session or "s-new", "stop", None, None, "", 1, 1))


class Recorder:
    """A listener that notes what it was given, and in which order with others."""

    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    async def deliver(self, reply, origin) -> None:
        self.log.append((self.name, type(reply).__name__, origin.key, origin.session))

    def notice(self, reply) -> None:
        self.log.append((self.name, "notice", type(reply).__name__))


def test_every_origin_has_its_own_key_whatever_the_door_calls_it():
    center = Center(Scripted())
    a = center.origin(Door.MQTT, "same-id", "s")
    b = center.origin(Door.MQTT, "same-id", "s")
    c = center.origin(Door.WYOMING, "wyoming peer on the unix socket", "wyoming-1")
    assert len({a.key, b.key, c.key}) == 3
    assert a.request == b.request == {"mqtt": "same-id", "session": "s"}  # shown alike
    assert a != b
    socket = center.origin(Door.SOCKET, 7, None, speak_on="hall", client=2)
    assert socket.request == {"client": 2, "id": 7, "session": None, "speak_on": "hall"}
    named = socket.on_session("kitchen")
    assert (named.key, named.session, named.request["session"]) == (socket.key, "kitchen",
                                                                     "kitchen")


@pytest.mark.trio
async def test_a_reply_is_masked_once_and_reaches_the_asker_then_each_listener_in_order():
    masking.install(masking.Masker([SECRET]))
    try:
        log: list = []
        center = Center(Scripted())
        center.add_listener(Recorder("first", log))
        center.add_listener(Recorder("second", log))
        seen = []

        async def asker(reply) -> None:
            seen.append(reply)
            log.append(("asker", type(reply).__name__))

        origin = center.origin(Door.SOCKET, 1, None, client=1)
        outcome = await center.ask(Ask(origin, "answer"), asker)
    finally:
        masking.install(masking.Masker())
    assert outcome is Outcome.ANSWERED
    assert [r.text for r in seen if type(r) is replies.Delta] == ["One ", "key *** ", "two."]
    assert log[:3] == [("asker", "Started"), ("first", "Started", origin.key, "s-new"),
                       ("second", "Started", origin.key, "s-new")]
    assert [entry[0] for entry in log] == ["asker", "first", "second"] * 5
    center.notice(replies.Device("relay", "running"))
    assert log[-2:] == [("first", "notice", "Device"), ("second", "notice", "Device")]
    counters = center.counters
    assert (counters.asks, counters.answered, counters.failed) == (1, 1, 0)


@pytest.mark.trio
async def test_a_bug_a_cancel_and_a_stopping_daemon_each_end_an_ask_as_named():
    center = Center(Scripted())
    got: dict[str, list] = {"bug": [], "hang": [], "late": []}

    def collect(name):
        async def on_reply(reply) -> None:
            got[name].append(reply)
        return on_reply

    bug = await center.ask(Ask(center.origin(Door.SOCKET, 1, None), "bug"), collect("bug"))
    assert bug is Outcome.FAILED
    assert got["bug"][-1].code is replies.ErrorCode.INTERNAL_ERROR
    cancel = Cancel()
    async with trio.open_nursery() as nursery:
        async def hang() -> None:
            got["outcome"] = await center.ask(Ask(center.origin(Door.SOCKET, 2, None), "hang"),
                                              collect("hang"), cancel)
        nursery.start_soon(hang)
        await trio.testing.wait_all_tasks_blocked()
        assert len(center.running()) == 1
        cancel(replies.Error(replies.ErrorCode.CANCELLED, "cancelled by request 3"))
    assert got["outcome"] is Outcome.CANCELLED and center.running() == []
    assert got["hang"][-1].message == "cancelled by request 3"
    center.close()
    late = await center.ask(Ask(center.origin(Door.DEVICE, "panel", "device-panel"), "answer"),
                            collect("late"))
    assert late is Outcome.FAILED
    assert [r.code for r in got["late"]] == [replies.ErrorCode.SHUTTING_DOWN]
    counters = center.counters
    assert (counters.asks, counters.failed, counters.cancelled) == (2, 1, 1)  # late: not asked


# ---------------------------------------------------------------- through real daemons

def sentences_of(answer: str) -> list[str]:
    """What one answer alone gives a device that takes sentences."""
    segmenter = Segmenter(SegmenterConfig(max_chars=200))
    return segmenter.feed(answer) + segmenter.close()


def writer_device(path: Path) -> str:
    """[devices.ears]: a command device that appends each sentence it gets
    to path, one line each (its text as the model wrote it)."""
    program = ("import sys\n"
               "with open(sys.argv[1], 'a', encoding='utf-8') as out:\n"
               "    out.write(sys.argv[2] + '\\n')\n")
    settings = {"type": "command", "events": ["sentence"],
                "argv": [sys.executable, "-c", program, str(path), "{text}"]}
    return "\n".join(["[devices.ears]", *(f"{k} = {toml_value(v)}" for k, v in settings.items())])


def heard(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def all_heard(path: Path, sentences: list[str]) -> bool:
    """As many characters heard as in the sentences, however they were cut."""
    def size(lines: list[str]) -> int:
        return sum(len(line.replace(" ", "")) for line in lines)
    return size(heard(path)) >= size(sentences)


# Two conversations of Home Assistant at once, on two connections from one
# peer, with the `wyoming` package's own client: both transcripts are sent
# before either answer is read, so the two answers stream together.
TWO_AT_ONCE = """
import asyncio, json, sys
from wyoming.asr import Transcript
from wyoming.client import AsyncClient

async def main(uri):
    first, second = AsyncClient.from_uri(uri), AsyncClient.from_uri(uri)
    async with first, second:
        for n, client in enumerate((first, second), 1):
            await client.write_event(Transcript(text=f"Question {n}").event())
        for client in (first, second):
            while (event := await client.read_event()).type not in ("handled", "not-handled"):
                pass
            print(json.dumps({"type": event.type, "data": event.data}), flush=True)

asyncio.run(main(sys.argv[1]))
"""
# An answer of a few sentences, each part 20 ms after the last: long enough
# that two asks sent together are answered at the same time, on a slow
# emulated machine too.
LONG = ("The hall light is on. The kitchen is at twenty degrees. The garden gate is shut. "
        "Nothing else needs you now.")
PACED_LONG = {"mock": {"headers": {"x-mock-delay-ms": "20",
                                   "x-mock-answer": json.dumps(LONG)}}}


def test_two_wyoming_conversations_at_once_are_two_answers_to_the_devices(tmp_path, mock):
    """Home Assistant opens a connection per conversation, all from one peer:
    two at once once shared one key, and the device heard their deltas cut
    into sentences together (A0 B0 B1 A1 ...), pieces of both in one."""
    spoken = tmp_path / "spoken.txt"
    sock = tmp_path / "wyoming.sock"
    (tmp_path / "d").mkdir()
    daemon = Daemon(tmp_path / "d", mock.url, providers=PACED_LONG,
                    extra=f'[wyoming]\nlisten = "unix:{sock}"\n' + writer_device(spoken)).start()
    try:
        out = subprocess.run([sys.executable, "-c", TWO_AT_ONCE, f"unix://{sock}"],
                             capture_output=True, text=True, timeout=timeout(60),
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert out.returncode == 0, out.stderr
        answers = [json.loads(line) for line in out.stdout.splitlines()]
        assert [(a["type"], a["data"]["text"]) for a in answers] == [("handled", LONG)] * 2
        expected = sentences_of(LONG)
        until_true(lambda: all_heard(spoken, expected * 2))
        assert sorted(heard(spoken)) == sorted(expected * 2)
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_two_mqtt_asks_with_one_id_keep_the_board_thinking_until_both_end(tmp_path, mock,
                                                                          broker):  # noqa: F811
    """A client chooses an MQTT ask's id; two with the same one once shared a
    key: the board went idle at the first one's done while the second still
    ran, and the device heard their sentences mixed."""
    spoken = tmp_path / "spoken.txt"
    watcher = broker.subscribe(f"{topic('beta', '')}#")
    (tmp_path / "d").mkdir()
    daemon = Daemon(tmp_path / "d", mock.url, providers=PACED_LONG,
                    extra=mqtt_table(broker, "beta") + writer_device(spoken)).start()
    try:
        watcher.wait(topic("beta", "state"), is_json(state="idle"))
        start = len(watcher.messages)
        # both in one mosquitto_pub (-l: a message a line), so they run together
        asks = "".join(json.dumps({"text": "Hello", "id": "same", "session": session}) + "\n"
                       for session in ("one", "two"))
        subprocess.run(["mosquitto_pub", *broker.client_options(None), "-t",
                        topic("beta", "ask"), "-q", "1", "-l"], input=asks.encode(),
                       check=True, capture_output=True, timeout=timeout(30))
        dones = [watcher.wait(topic("beta", "done"), is_json(id="same", session=session))
                 for session in ("one", "two")]
        watcher.wait(topic("beta", "state"), is_json(state="idle", asks=0), after=start)
        messages = watcher.messages[start:]
        last_done = max(messages.index(done) for done in dones)
        states = [payload(m) for m in messages[:last_done] if m.topic == topic("beta", "state")]
        assert states and all(s["state"] != "idle" for s in states), states
        assert {"state": "thinking", "asks": 2} in states
        expected = sentences_of(LONG)
        until_true(lambda: all_heard(spoken, expected * 2))
        assert sorted(heard(spoken)) == sorted(expected * 2)
    finally:
        watcher.close()
        assert daemon.stop() == 0, daemon.log()
