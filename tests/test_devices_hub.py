"""The device hub (agent/devices/hub.py) and the device inbox
(agent/devices/base.py), in process, with real handlers: CommandDevice
running real programs (printf, sleep, sh scripts written into tmp_path) and
SerialDevice on a real pty (Board, the far end of the cable, from
test_serial_device), whose lines show exactly which events a device got and
in which order.

The tool loop's bad calls that the mock model cannot produce (an unknown
tool, arguments that are not JSON or do not match the schema) are covered
here, at call_tool(). Waits are bounded by timeout(); the inbox tests run on
trio's autojump clock, so their timeouts cost no wall-clock time.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.api.wire import encode
from agent.core import replies
from agent.core.commands import Door, Origin
from agent.core.deliveries import Delivery
from agent.core.replies import ErrorCode
from agent.devices.base import Common, DeviceSpec, Inbox, Overflow, ToolSpec
from agent.devices.command import CommandDevice
from agent.devices.hub import MAX_PENDING_PROMPTS, DeviceHub
from agent.text.segmenter import Segmenter, SegmenterConfig
from agent.tools.base import RESULT_LIMIT, ToolOutcome, Toolbox
from agent.devices.serial import SerialDevice
from agent.devices.serial_protocol import unescape
from agent.stream.message import ArgumentsError, ToolCall
from conftest import scaled, timeout
from helpers import asked, center_for, delivery, until
from test_serial_device import Board

R1 = asked(1, "s-1", client=1, request_id=1)
R2 = asked(2, "s-2", client=2, request_id=1)  # another client, same request id
FROM_DEVICE = Origin(Door.DEVICE, 3, "panel", "device-panel")
DONE = replies.Done("s-1", "stop", None, None, "", 1, 1)

RELAY = ToolSpec("set_relay", "Switch a relay", {
    "type": "object",
    "properties": {"channel": {"type": "integer", "minimum": 1, "maximum": 8},
                   "on": {"type": "boolean"}},
    "required": ["channel", "on"], "additionalProperties": False})
NAP = ToolSpec("nap", "Sleeps", {"type": "object", "properties": {"seconds": {"type": "number"}}},
               timeout=timeout(0.3))
BROKEN = ToolSpec("broken", "Always fails", {"type": "object", "properties": {}})
CHATTY = ToolSpec("chatty", "Prints a lot", {"type": "object", "properties": {}})


def spec(cls, name: str, settings: dict, *, events=None, tools=(), **common) -> DeviceSpec:
    events = cls.DEFAULT_EVENTS if events is None else events
    return DeviceSpec(Common(name, frozenset(events), tools=tuple(tools), **common), cls,
                      settings)


def serial(name: str, board: Board, events, **settings) -> DeviceSpec:
    return spec(SerialDevice, name, {"port": str(board.link), "write_timeout": timeout(2),
                                     **settings}, events=events)


def script(path: Path, body: str) -> str:
    """An executable sh script at path; its path."""
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def toolbox(hub: DeviceHub) -> Toolbox:
    """The hub's devices with tools as the runner's toolbox has them."""
    tools = Toolbox()
    for provider in hub.providers():
        tools.add(provider)
    return tools


@asynccontextmanager
async def supervised(hub: DeviceHub, ask=None):
    """hub.run() in a task, with a real center, cancelled at the end; yields
    the device states as (time, reply as a subscriber reads it)."""
    states: list[tuple[float, dict]] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(hub.run, center_for(hub, ask, lambda reply: states.append(
            (trio.current_time(), json.loads(encode(reply))))))
        yield states
        nursery.cancel_scope.cancel()


def status_of(hub: DeviceHub, name: str) -> dict:
    return next(s for s in hub.status() if s["name"] == name)


def state(hub: DeviceHub, name: str) -> str:
    return status_of(hub, name)["state"]


async def all_running(hub: DeviceHub) -> None:
    await until(lambda: all(s["state"] == "running" for s in hub.status()))


@pytest.fixture
def boards(tmp_path):
    """boards(name) -> a Board whose link is tmp_path/name; all closed at the end."""
    made: list[Board] = []

    def make(name: str) -> Board:
        made.append(Board(tmp_path / name))
        return made[-1]

    yield make
    for board in made:
        board.close()


async def lines(board: Board, count: int) -> list[str]:
    return [await board.line() for _ in range(count)]


async def lines_until(board: Board, last: str) -> list[str]:
    """The board's lines up to and including `last`."""
    lines = [await board.line()]
    while lines[-1] != last:
        lines.append(await board.line())
    return lines


# ---------------------------------------------------------------- inbox

def ev(kind: str, text: str | None = None, request=R1, **data) -> Delivery:
    return delivery(kind, request, text, **data)


async def drain(inbox: Inbox) -> list[Delivery]:
    return [await inbox.get() for _ in range(len(inbox))]


@pytest.mark.trio
async def test_block_waits_for_room(autojump_clock):
    inbox = Inbox(2, Overflow.BLOCK, block_timeout=5)
    first, second, third = ev("sentence", "One."), ev("sentence", "Two."), ev("done")
    await inbox.put(first)
    await inbox.put(second)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(inbox.put, third)
        await trio.sleep(4)  # most of block_timeout: the put is still waiting
        assert len(inbox) == 2 and inbox.dropped == 0
        assert await inbox.get() == first  # room: the waiting put goes in
    assert await drain(inbox) == [second, third]
    assert (inbox.dropped, inbox.coalesced) == (0, 0)  # BLOCK never joins text


async def full_blocking_inbox() -> tuple[Inbox, list[Delivery]]:
    """A BLOCK inbox of 2 (block_timeout 5 s), full: it and what it holds."""
    inbox = Inbox(2, Overflow.BLOCK, block_timeout=5)
    queued = [ev("sentence", "One."), ev("sentence", "Two.")]
    for event in queued:
        await inbox.put(event)
    return inbox, queued


@pytest.mark.trio
async def test_block_drops_after_block_timeout(autojump_clock):
    inbox, queued = await full_blocking_inbox()
    start = trio.current_time()
    await inbox.put(ev("sentence", "Three."))
    assert trio.current_time() - start == pytest.approx(5)
    assert inbox.dropped == 1
    assert await drain(inbox) == queued


@pytest.mark.trio
async def test_block_drops_at_once_until_the_device_makes_room(autojump_clock):
    # A stuck device costs the stream one block_timeout, not one per event.
    inbox, queued = await full_blocking_inbox()
    start = trio.current_time()
    for text in ("Three.", "Four.", "Five."):
        await inbox.put(ev("sentence", text))
    assert trio.current_time() - start == pytest.approx(5)
    assert (inbox.dropped, inbox.stalled) == (3, True)
    assert await inbox.get() == queued[0]  # the device reads: waiting is back
    assert not inbox.stalled
    await inbox.put(ev("sentence", "Six."))  # room: in at once
    start = trio.current_time()
    await inbox.put(ev("sentence", "Seven."))  # full again: waited for, then dropped
    assert trio.current_time() - start == pytest.approx(5)
    assert [e.reply.text for e in await drain(inbox)] == ["Two.", "Six."]
    assert inbox.dropped == 4


@pytest.mark.trio
async def test_clear_counts_as_dropped_and_lets_a_waiting_put_in(autojump_clock):
    inbox = Inbox(2, Overflow.BLOCK, block_timeout=5)
    await inbox.put(ev("started"))
    await inbox.put(ev("sentence", "One."))
    late = ev("done")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(inbox.put, late)
        await trio.testing.wait_all_tasks_blocked()
        inbox.clear()
    assert inbox.dropped == 2
    assert await drain(inbox) == [late]


@pytest.mark.trio
async def test_drop_oldest_keeps_the_newest_in_order():
    inbox = Inbox(3, Overflow.DROP_OLDEST)
    events = [ev("sentence", f"S{i}.") for i in range(5)]
    for event in events:
        await inbox.put(event)  # never waits
    assert (inbox.dropped, inbox.coalesced) == (2, 0)  # text is not joined either
    assert await drain(inbox) == events[2:]


@pytest.mark.trio
async def test_a_cancelled_reader_takes_nothing():
    """A device whose connection a stop cancelled must not go on taking
    queued events (the next connection's) until some later checkpoint."""
    inbox = Inbox(8, Overflow.BLOCK)
    events = [ev("sentence", f"S{i}.") for i in range(3)]
    for event in events:
        await inbox.put(event)
    with trio.CancelScope() as scope:
        scope.cancel()
        await inbox.get()
    assert scope.cancelled_caught and len(inbox) == 3
    assert await drain(inbox) == events  # nothing lost either


@pytest.mark.trio
async def test_coalesce_joins_text_into_the_newest_else_drops_the_oldest():
    inbox = Inbox(2, Overflow.COALESCE)
    started = ev("started", session="s-1")
    await inbox.put(started)
    await inbox.put(ev("sentence", "One."))
    await inbox.put(ev("sentence", "Two."))  # full: joins the newest, with a space
    assert (inbox.coalesced, inbox.dropped, len(inbox)) == (1, 0, 2)
    await inbox.put(ev("delta", "Hel"))  # another type: the oldest (started) goes
    await inbox.put(ev("delta", "lo"))  # deltas join directly
    assert (inbox.coalesced, inbox.dropped) == (2, 1)
    assert await drain(inbox) == [ev("sentence", "One. Two."), ev("delta", "Hello")]

    await inbox.put(ev("delta", "a"))
    await inbox.put(ev("delta", "b", request=R2))
    await inbox.put(ev("delta", "c"))  # R1's newest is not the newest queued: no join
    assert (inbox.coalesced, inbox.dropped) == (2, 2)
    await inbox.put(ev("reasoning", "x", request=R2))
    await inbox.put(ev("reasoning", "y", request=R2))  # reasoning joins directly too
    await inbox.put(ev("done"))  # not text: the oldest goes
    assert (inbox.coalesced, inbox.dropped) == (3, 4)
    assert await drain(inbox) == [ev("reasoning", "xy", request=R2), ev("done")]


@pytest.mark.trio
async def test_coalesce_only_when_full():
    inbox = Inbox(4, Overflow.COALESCE)
    events = [ev("sentence", "One."), ev("sentence", "Two."), ev("delta", "a"), ev("delta", "b")]
    for event in events:
        await inbox.put(event)
    assert (inbox.coalesced, inbox.dropped) == (0, 0)
    assert await drain(inbox) == events


# ---------------------------------------------------------------- publish

async def answer(hub: DeviceHub, request, *deltas: str, reasoning: str = "") -> None:
    """One ask's replies as the API server publishes them."""
    await hub.deliver(replies.Started(request.session, "mock", "m"), request)
    if reasoning:
        await hub.deliver(replies.Reasoning(reasoning), request)
    for delta in deltas:
        await hub.deliver(replies.Delta(delta), request)
    await hub.deliver(replies.ToolCall("c", "t", {}), request)
    await hub.deliver(replies.Done(request.session, "stop", None, None, "".join(deltas), 1,
                                   1), request)


@pytest.mark.trio
async def test_each_device_gets_the_event_types_it_wants(boards):
    talker, watcher = boards("talker"), boards("watcher")
    hub = DeviceHub({
        "talker": serial("talker", talker, {"sentence", "done"}),
        "watcher": serial("watcher", watcher, {"started", "reasoning", "error"}, send="nothing"),
    })
    async with supervised(hub):
        await all_running(hub)
        for board in (talker, watcher):
            assert (await board.line()).startswith("HELLO ")
        await answer(hub, R1, "Hello the", "re. How are", " you?", reasoning="Hmm.")
        await hub.deliver(replies.Delta("Cut off mid"), R2)
        await hub.deliver(replies.Error(ErrorCode.INTERRUPTED, "gone"), R2)
        await answer(hub, R1, "End.")  # the last lines of both
        # The answer's last sentence ("How are you?") comes before its done,
        # an error ends its ask's last sentence too.
        assert await lines(talker, 6) == ["TEXT Hello there.", "TEXT How are you?",
                                          "DONE stop", "TEXT Cut off mid", "TEXT End.",
                                          "DONE stop"]
        assert await lines(watcher, 4) == ["START s-1", "REASONING Hmm.",
                                           "ERROR interrupted gone", "START s-1"]
    assert all((s["dropped"], s["coalesced"]) == (0, 0) for s in hub.status())


@pytest.mark.trio
async def test_each_ask_has_its_own_segmenter(boards):
    board = boards("panel")
    hub = DeviceHub({"panel": serial("panel", board, {"sentence", "done"})})
    async with supervised(hub):
        assert (await board.line()).startswith("HELLO ")
        for request, text in ((R1, "Good mor"), (R2, "Bonjour, ça"), (FROM_DEVICE, "Moin"),
                              (R1, "ning. Bye"), (R2, " va? Oui"), (FROM_DEVICE, " moin.")):
            await hub.deliver(replies.Delta(text), request)
        for request in (R1, R2, FROM_DEVICE):
            await hub.deliver(DONE, request)
        assert await lines_until(board, "DONE stop") == [
            "TEXT Good morning.", "TEXT Bonjour, ça va?", "TEXT Bye", "DONE stop"]
        assert await lines_until(board, "DONE stop") == ["TEXT Oui", "DONE stop"]
        assert await lines_until(board, "DONE stop") == ["TEXT Moin moin.", "DONE stop"]


async def runs_of_a_speaker(tmp_path: Path, deltas: list[str], runs: int, settings=None,
                           events=None, reasoning: str = "") -> list[str]:
    """The texts a command device ran its program with, one at a time, for
    one answer of these deltas published to the hub."""
    out = tmp_path / "spoken"
    speak = script(tmp_path / "speak.sh", f'printf "%s\\n" "$1" >> {shlex.quote(str(out))}\n')
    hub = DeviceHub({"speaker": spec(CommandDevice, "speaker",
                                     {"argv": [speak, "{text}"], **(settings or {})},
                                     events=events)})
    async with supervised(hub):
        await all_running(hub)
        await answer(hub, R1, *deltas, reasoning=reasoning)
        await until(lambda: status_of(hub, "speaker")["runs"] == runs)
    return out.read_text().splitlines()


@pytest.mark.trio
async def test_sentences_run_the_program_one_at_a_time_in_order(tmp_path):
    assert await runs_of_a_speaker(tmp_path, ["It is 21.5 °C. Th", "e door is ",
                                              "locked! Good night"], 3) == [
        "It is 21.5 °C.", "The door is locked!", "Good night"]


ANSWER = ('Well, hello there, friend! It is 21.5 °C, e.g. warm. Mr. Smith said "hi." Then… '
          "你好。再见！ A long sentence that goes on and on without any stop at all\n"
          "Last line")


MAX_CHARS = 32


def reference(first_min_chars: int) -> list[str]:
    segmenter = Segmenter(SegmenterConfig(max_chars=MAX_CHARS, first_min_chars=first_min_chars))
    return segmenter.feed(ANSWER) + segmenter.close()


async def sentences_received(deltas: list[str], first_min_chars: int) -> list[str]:
    with tempfile.TemporaryDirectory() as directory:
        board = Board(Path(directory) / "panel")
        try:
            hub = DeviceHub({"panel": spec(
                SerialDevice, "panel", {"port": str(board.link)}, events={"sentence", "done"},
                sentence_max_chars=MAX_CHARS, first_sentence_chars=first_min_chars)})
            async with supervised(hub):
                assert (await board.line()).startswith("HELLO ")
                for delta in deltas:
                    await hub.deliver(replies.Delta(delta), R1)
                await hub.deliver(DONE, R1)
                lines = await lines_until(board, "DONE stop")
        finally:
            board.close()
    assert all(line.startswith("TEXT ") for line in lines[:-1])
    return [unescape(line[5:]) for line in lines[:-1]]


def test_sentences_do_not_depend_on_where_the_deltas_were_cut():
    whole = trio.run(sentences_received, [ANSWER], 0)
    assert whole == reference(0)
    assert whole == ["Well, hello there, friend!", "It is 21.5 °C, e.g. warm.",
                     'Mr. Smith said "hi."', "Then…", "你好。", "再见！",
                     "A long sentence that goes on and", "on without any stop at all",
                     "Last line"]
    first = trio.run(sentences_received, [ANSWER], 12)
    assert first == reference(12) == ["Well, hello there,", "friend!", *whole[1:]]


@settings(max_examples=scaled(25), deadline=None, derandomize=True)
@given(cuts=st.lists(st.integers(0, len(ANSWER)), max_size=20), first=st.sampled_from([0, 12]))
def test_sentences_for_any_deltas(cuts, first):
    edges = [0, *sorted(cuts), len(ANSWER)]
    deltas = [ANSWER[a:b] for a, b in zip(edges, edges[1:])]  # empty deltas included
    assert trio.run(sentences_received, deltas, first) == reference(first)


@pytest.mark.trio
async def test_a_device_that_is_down_gets_nothing_and_counts_drops(boards):
    board = boards("panel")
    board.close()
    os.unlink(board.link)  # unplugged: the device cannot open its port
    hub = DeviceHub({"panel": serial("panel", board, {"sentence", "done"})})
    async with supervised(hub) as states:
        await until(lambda: state(hub, "panel") == "failed")
        await hub.deliver(replies.Delta("Lost. Gone"), R1)
        await hub.deliver(DONE, R1)
        assert status_of(hub, "panel")["dropped"] == 2
        assert status_of(hub, "panel")["queued"] == 0
        board.plug()  # back: the next start opens it
        assert (await board.line()).startswith("HELLO ")
        await until(lambda: state(hub, "panel") == "running")
        await hub.deliver(replies.Delta("Found."), R2)
        await hub.deliver(DONE, R2)
        assert await lines_until(board, "DONE stop") == ["TEXT Found.", "DONE stop"]
    assert [reply["state"] for _, reply in states] == ["failed", "running"]
    assert status_of(hub, "panel")["dropped"] == 2


@pytest.mark.trio
async def test_a_down_device_counts_only_the_events_it_wants():
    port = "/nonexistent/homeagent-test-port"
    hub = DeviceHub({
        "texts": spec(SerialDevice, "texts", {"port": port}, events={"sentence"}),
        "ends": spec(SerialDevice, "ends", {"port": port, "send": "nothing"},
                     events={"done"}),
    })  # never run: both are starting, not running
    await answer(hub, R1, "One. ", "Two.", reasoning="Hmm.")
    # texts wants sentences (from the 2 deltas and the done), ends the done;
    # started, reasoning and tool_call are nobody's events.
    assert {s["name"]: s["dropped"] for s in hub.status()} == {"texts": 3, "ends": 1}


# ---------------------------------------------------------------- supervision

@pytest.mark.trio
async def test_a_failing_device_restarts_with_doubling_backoff(tmp_path):
    program = tmp_path / "speak.sh"
    out = tmp_path / "spoken"
    body = f'printf "%s\\n" "$1" >> {shlex.quote(str(out))}\n'
    speak = script(program, body)
    hub = DeviceHub({
        "speaker": spec(CommandDevice, "speaker", {"argv": [speak, "{text}"]},
                        restart_max_delay=1.0),
        "steady": spec(CommandDevice, "steady", {"argv": ["true"]}),
    })

    def runs(name: str) -> int:
        return status_of(hub, name)["runs"]

    def states_of(name: str) -> list[tuple[float, dict]]:
        return [(at, reply) for at, reply in states if reply["device"] == name]

    async with supervised(hub) as states:
        await all_running(hub)
        program.unlink()
        await hub.deliver(replies.Delta("Hello there. "), R1)  # the run fails
        await until(lambda: len(states_of("speaker")) == 4)  # running + 3 failures
        script(program, body)  # the program is back
        # The other device works on while this one is down.
        await hub.deliver(replies.Delta("Still here. "), R1)
        await until(lambda: runs("steady") == 2)
        assert status_of(hub, "speaker")["dropped"] == 1
        await until(lambda: state(hub, "speaker") == "running")
        await hub.deliver(replies.Delta("Back again. "), R1)
        await until(lambda: out.exists() and runs("steady") == 3)
    assert out.read_text() == "Back again.\n"

    speaker = states_of("speaker")
    assert [reply["state"] for _, reply in speaker] == ["running", "failed", "failed", "failed",
                                                        "running"]
    failed = [reply for _, reply in speaker[1:4]]
    for reply in failed:
        assert reply["type"] == "device" and reply["device"] == "speaker"
        assert "FileNotFoundError" in reply["error"] and "speak.sh" in reply["error"]
    assert [reply["retry_in"] for reply in failed] == [0.5, 1.0, 1.0]  # doubled, capped
    times = [at for at, _ in speaker]
    # Each start waits at least the backoff announced by the failure before it.
    assert times[2] - times[1] >= 0.5 and times[3] - times[2] >= 1.0
    assert times[4] - times[3] >= 1.0
    status = status_of(hub, "speaker")
    assert status["restarts"] == 3 and "speak.sh" in status["last_error"]
    assert [reply for _, reply in states_of("steady")] == [
        {"type": "device", "device": "steady", "state": "running"}]
    assert status_of(hub, "steady")["restarts"] == 0


@pytest.mark.trio
async def test_backoff_never_exceeds_restart_max_delay(tmp_path):
    program = tmp_path / "gone.sh"
    hub = DeviceHub({"gone": spec(CommandDevice, "gone", {"argv": [script(program, "")]},
                                  restart_max_delay=0.2)})
    program.unlink()
    async with supervised(hub) as states:
        await until(lambda: len(states) >= 2)
    assert [reply["state"] for _, reply in states[:2]] == ["failed", "failed"]
    # restart_max_delay is the longest wait between two starts (config.py
    # accepts values from 0.1 s), the first one included.
    assert [reply["retry_in"] for _, reply in states[:2]] == [0.2, 0.2]


# ---------------------------------------------------------------- tools

def call(name: str, parsed: dict | None = None, *, arguments: str | None = None,
         error: ArgumentsError | None = None, detail: str | None = None) -> ToolCall:
    return ToolCall("call-1", name, json.dumps(parsed) if arguments is None else arguments,
                    parsed, error, detail, complete=True)


@pytest.fixture
def relay_hub(tmp_path):
    """A hub with a relay device (a marker-writing script, a sleeper, a
    failing and a chatty tool), a lamp (another device's tool) and a device
    whose program is gone; returns (hub, marker)."""
    marker = tmp_path / "ran"
    relay = script(tmp_path / "relay.sh", f'echo "$1 $2" >> {shlex.quote(str(marker))}\n'
                                          'printf "relay %s is %s\\n" "$1" "$2"\n')
    gone = tmp_path / "gone.sh"
    hub = DeviceHub({
        "relay": spec(CommandDevice, "relay", {
            "argv": ["true"], "max_output": 2 * RESULT_LIMIT,
            "tool_argv": {"set_relay": [relay, "{channel}", "{on}"],
                          "nap": ["sleep", "{seconds}"],
                          "broken": ["sh", "-c", "echo relay jammed >&2; exit 3"],
                          "chatty": ["sh", "-c", f"yes | head -c {2 * RESULT_LIMIT}"]}},
            tools=(RELAY, NAP, BROKEN, CHATTY)),
        "lamp": spec(CommandDevice, "lamp", {"argv": ["true"], "tool_argv": {"dim": ["true"]}},
                     tools=(ToolSpec("dim", "Dims", {"type": "object", "properties": {}}),)),
        "down": spec(CommandDevice, "down", {"argv": [script(gone, "")],
                                             "tool_argv": {"open_door": ["true"]}},
                     tools=(ToolSpec("open_door", "Opens", {"type": "object",
                                                            "properties": {}}),)),
    })
    gone.unlink()
    return hub, marker


@asynccontextmanager
async def tools_ready(hub: DeviceHub):
    """relay_hub's hub running: relay and lamp up, down failed."""
    async with supervised(hub):
        await until(lambda: [s["state"] for s in hub.status()] == ["running", "running",
                                                                   "failed"])
        yield


@pytest.mark.trio
async def test_call_tool_runs_the_program(relay_hub):
    hub, marker = relay_hub
    tools = toolbox(hub)
    async with tools_ready(hub):
        assert [tool.name for tool in tools.tools()] == ["set_relay", "nap", "broken", "chatty",
                                                       "dim"]  # not open_door: down
        assert tools.tools()[0].parameters == RELAY.parameters
        outcome = await tools.call(call("set_relay", {"channel": 2, "on": True}))
        assert outcome == ToolOutcome("relay 2 is true", False)
        assert marker.read_text() == "2 true\n"
        chatty = await tools.call(call("chatty", {}))
        assert not chatty.is_error and len(chatty.content) == RESULT_LIMIT


@pytest.mark.trio
async def test_bad_calls_are_error_results_and_run_nothing(relay_hub):
    hub, marker = relay_hub
    tools = toolbox(hub)
    async with tools_ready(hub):
        unknown = await tools.call(call("unlock", {}))
        assert unknown.is_error and "'unlock'" in unknown.content
        assert "broken, chatty, dim, nap, open_door, set_relay" in unknown.content

        not_json = await tools.call(call("set_relay", arguments='{"channel": 2, "on": tr',
                                            error=ArgumentsError.INVALID_JSON,
                                            detail="unexpected end at byte 21"))
        assert not_json.is_error and "invalid_json" in not_json.content
        assert "unexpected end at byte 21" in not_json.content
        assert "nothing was run" in not_json.content

        mismatch = await tools.call(call("set_relay", {"channel": 9, "on": "yes",
                                                          "colour": "red"}))
        assert mismatch.is_error and mismatch.content.startswith("invalid arguments, nothing "
                                                                 "was run: ")
        problems = mismatch.content.split(": ", 1)[1].split("; ")
        assert len(problems) == 3
        for where in ("arguments.channel: ", "arguments.on: ", "'colour'"):
            assert any(where in problem for problem in problems), (where, problems)
        missing = await tools.call(call("set_relay", {"channel": 1}))
        assert missing.is_error and "required property 'on'" in missing.content

        down = await tools.call(call("open_door", {}))
        assert down.is_error and "device down is not available" in down.content
        assert "failed" in down.content and "gone.sh" in down.content
        assert not marker.exists()  # none of these ran the relay program


@pytest.mark.trio
async def test_tools_that_fail_or_time_out_give_error_results(relay_hub):
    hub, _ = relay_hub
    tools = toolbox(hub)
    async with tools_ready(hub):
        broken = await tools.call(call("broken", {}))  # a ToolError from the device
        start = trio.current_time()
        slow = await tools.call(call("nap", {"seconds": 30}))
        assert trio.current_time() - start < timeout(10)  # the sleep was killed
    assert broken == ToolOutcome("broken: sh exited with status 3: relay jammed", True)
    assert slow == ToolOutcome(f"nap did not finish within {NAP.timeout:g} s", True)


@pytest.mark.trio
async def test_a_hub_not_running_offers_no_tools(relay_hub):
    hub, marker = relay_hub
    tools = toolbox(hub)
    assert tools.tools() == []
    outcome = await tools.call(call("set_relay", {"channel": 1, "on": False}))
    assert outcome == ToolOutcome("device relay is not available (starting: starting)", True)
    assert not marker.exists()


# ---------------------------------------------------------------- prompts

@pytest.mark.trio
async def test_prompts_become_asks_and_too_many_pending_are_refused(boards):
    board = boards("panel")
    hub = DeviceHub({"panel": serial("panel", board, {"sentence", "done"})})
    asked: list[tuple[str, str]] = []
    release = trio.Event()

    async def ask(device: str, text: str) -> None:
        asked.append((device, text))
        await release.wait()

    extra = 2
    async with supervised(hub, ask):
        assert (await board.line()).startswith("HELLO ")
        for n in range(MAX_PENDING_PROMPTS + extra):
            await board.send(f"PROMPT question {n}\n")
        await until(lambda: status_of(hub, "panel")["lines_in"] == MAX_PENDING_PROMPTS + extra)
        await trio.testing.wait_all_tasks_blocked()
        # The first ones are taken, in whatever order their tasks start.
        assert sorted(asked) == [("panel", f"question {n}") for n in range(MAX_PENDING_PROMPTS)]
        release.set()  # the asks end: prompts are taken again
        await trio.testing.wait_all_tasks_blocked()
        await board.send("PROMPT one more\n")
        await until(lambda: len(asked) == MAX_PENDING_PROMPTS + 1)
    assert asked[-1] == ("panel", "one more")
    assert state(hub, "panel") == "running"


# ---------------------------------------------------------------- status

@pytest.mark.trio
async def test_status_fields(relay_hub, boards):
    hub, _ = relay_hub
    tools = toolbox(hub)
    async with tools_ready(hub):
        await tools.call(call("set_relay", {"channel": 3, "on": False}))
        statuses = {s["name"]: s for s in hub.status()}
    relay, down = statuses["relay"], statuses["down"]
    assert set(relay) == {"name", "kind", "state", "seconds_in_state", "restarts", "last_error",
                          "queued", "dropped", "coalesced", "tools", "program", "per", "runs",
                          "failures", "timeouts", "refused", "stops", "last_run"}
    assert (relay["name"], relay["kind"], relay["state"], relay["restarts"],
            relay["last_error"]) == ("relay", "command", "running", 0, None)
    assert (relay["queued"], relay["dropped"], relay["coalesced"]) == (0, 0, 0)
    assert relay["tools"] == ["set_relay", "nap", "broken", "chatty"]
    assert relay["program"] == "true" and relay["per"] == "sentence"
    assert 0 <= relay["seconds_in_state"] < timeout(30)
    assert statuses["lamp"]["tools"] == ["dim"]
    assert down["state"] == "failed" and down["restarts"] >= 1
    assert "FileNotFoundError" in down["last_error"] and down["tools"] == ["open_door"]

    board = boards("panel")
    panel = DeviceHub({"panel": serial("panel", board, {"sentence"})}).status()[0]
    assert panel["kind"] == "serial" and panel["port"] == str(board.link)
    assert panel["connected"] is False and panel["tools"] == []


MARKDOWN = ("## Weather\nIt is **21 °C** in the [kitchen](https://x.org/k).\n- Open the window\n"
            "- Close the door\n```sh\necho code. More code.\n```\nSee https://example.com/a. Bye 👋")


@pytest.mark.trio
@pytest.mark.parametrize("cut", [1, 7, len(MARKDOWN)])
async def test_a_device_that_speaks_gets_its_sentences_cleaned(tmp_path, cut):
    deltas = [MARKDOWN[start:start + cut] for start in range(0, len(MARKDOWN), cut)]
    said = await runs_of_a_speaker(tmp_path, deltas, 7,
                                   {"speech": True, "speak_tool_calls": True},
                                   {"sentence", "reasoning", "tool_call", "done"},
                                   reasoning="I think **hard**.")
    # the tool call's name after the text before it; reasoning never
    assert said == ["Weather.", "It is 21 °C in the kitchen.", "Open the window.",
                    "Close the door.", "See example.com.", "Bye", "t."]


@pytest.mark.trio
async def test_a_command_device_passes_the_text_as_it_is_by_default(tmp_path):
    assert await runs_of_a_speaker(tmp_path, ["It is **warm**. See https://example.com/a."],
                                   2) == ["It is **warm**.", "See https://example.com/a."]


@pytest.mark.trio
async def test_a_secret_a_tool_program_prints_is_masked_in_its_result():
    """Every tool result passes the masker at the toolbox: a configured
    secret a program prints (as a server reflecting a token would) never
    reaches the model, in a result or in an error, even across the cut."""
    from agent import masking

    secret = "sk-secret-0123456789"
    say = ToolSpec("say", "Prints", {"type": "object", "properties": {
        "words": {"type": "string"}, "status": {"type": "integer"}}})
    hub = DeviceHub({"echo": spec(CommandDevice, "echo", {
        "argv": ["true"], "max_output": 2 * RESULT_LIMIT,
        "tool_argv": {"say": ["sh", "-c", 'printf %s "$0"; printf %s "$0" >&2; exit "$1"',
                              "{words}", "{status}"]}}, tools=(say,))})
    tools = toolbox(hub)
    masking.install(masking.Masker([secret]))
    try:
        async with supervised(hub):
            await until(lambda: hub.status()[0]["state"] == "running")
            said = await tools.call(call("say", {"words": f"key {secret}", "status": 0}))
            assert said == ToolOutcome("key ***", False)
            failed = await tools.call(call("say", {"words": f"key {secret}", "status": 3}))
            assert failed.is_error and failed.content.endswith("exited with status 3: key ***")
            cut = await tools.call(call("say", {"words": "x" * (RESULT_LIMIT - 5) + secret,
                                                "status": 0}))
            assert cut == ToolOutcome("x" * (RESULT_LIMIT - 5) + "***", False)
    finally:
        masking.install(masking.Masker())
