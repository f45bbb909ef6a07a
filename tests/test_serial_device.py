"""The serial device handler (agent/devices/serial.py) against real ptys.

Board is the far end of the cable: the master side of a pty, read and
written by the test as a microcontroller would. The handler opens the slave
through a symlink in tmp_path, as it would a /dev/serial/by-id link, so
re-pointing the link at a new pty is a re-plugged adapter. Every wait is
bounded by timeout(); nothing sleeps for a fixed time.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager

import pytest
import serial
import trio

from agent.devices.base import Common, Inbox, Overflow, SettingError, ToolError, ToolSpec
from agent.devices.serial import DeviceLost, SerialDevice, WriteTimeout
from agent.devices.serial_protocol import unescape
from agent.devices.templates import render
from conftest import timeout
from helpers import asked, delivery, until

RELAY = ToolSpec("set_relay", "Switch a relay", {
    "type": "object",
    "properties": {"channel": {"type": "integer"}, "on": {"type": "boolean"},
                   "label": {"type": "string"}},
    "required": ["channel", "on"]})
REQUEST = asked(1, "s-1", 1, 7)
FAMILY = "👨\u200d👩\u200d👧\u200d👦"


class Board:
    """The device end of a pty whose slave is reached through `link`."""

    def __init__(self, link) -> None:
        self.link = link
        self.master = self._slave = -1
        self.plug()

    def plug(self) -> None:
        """A new pty behind the link: the adapter came back as another tty."""
        self.master, self._slave = os.openpty()
        os.set_blocking(self.master, False)
        self._buffer = b""
        fresh = self.link.with_name(self.link.name + ".new")
        os.symlink(os.ttyname(self._slave), fresh)
        os.replace(fresh, self.link)

    def unplug(self) -> None:
        trio.lowlevel.notify_closing(self.master)
        self.close()

    def close(self) -> None:
        for fd in (self.master, self._slave):
            if fd >= 0:
                os.close(fd)
        self.master = self._slave = -1

    async def line(self) -> str:
        with trio.fail_after(timeout(5)):
            while b"\n" not in self._buffer:
                await trio.lowlevel.wait_readable(self.master)
                self._buffer += os.read(self.master, 4096)
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    async def send(self, data: str | bytes) -> None:
        view = memoryview(data.encode() if isinstance(data, str) else data)
        with trio.fail_after(timeout(5)):
            while view:
                await trio.lowlevel.wait_writable(self.master)
                view = view[os.write(self.master, view):]


@pytest.fixture
def board(tmp_path):
    board = Board(tmp_path / "usb-Board_1234-if00")
    yield board
    board.close()


def make(board: Board, events=SerialDevice.DEFAULT_EVENTS, tools=(RELAY,),
         **settings) -> SerialDevice:
    settings = {"port": str(board.link), "write_timeout": timeout(2),
                "commands": {"set_relay": "RELAY {channel} {on}"}, **settings}
    return SerialDevice.from_settings(Common("panel", frozenset(events), tools=tools), settings)


@asynccontextmanager
async def running(device: SerialDevice, board: Board, inbox: Inbox | None = None):
    """The device running and greeted; yields the channel its prompts arrive on."""
    prompts, received = trio.open_memory_channel(16)
    async with trio.open_nursery() as nursery:
        await nursery.start(device.run, Inbox(64, Overflow.BLOCK) if inbox is None else inbox,
                            prompts.send)
        assert (await board.line()).startswith("HELLO 1 homeagent ")
        yield received
        nursery.cancel_scope.cancel()


# ---- events to lines ----

@pytest.mark.trio
async def test_events_become_lines_in_order_escaped(board):
    device = make(board, events={"started", "sentence", "reasoning", "done", "error"})
    inbox = Inbox(64, Overflow.BLOCK)
    events = [delivery("started", REQUEST, **{"session": "s-1", "provider": "p", "model": "m"}),
              delivery("reasoning", REQUEST, **{"text": "think\nhard"}),
              delivery("sentence", REQUEST, **{"text": "Line one\nline two \\ back\\n."}),
              delivery("delta", REQUEST, **{"text": "not sent: send = sentences"}),
              delivery("sentence", REQUEST, **{"text": f"你好。{FAMILY}\r!"}),
              delivery("done", REQUEST, **{"finish_reason": "stop", "text": "all"}),
              delivery("error", REQUEST, **{"code": "interrupted", "message": "cut\noff"})]
    async with running(device, board, inbox):
        for event in events:
            await inbox.put(event)
        got = [await board.line() for _ in range(6)]
    assert got == ["START s-1", "REASONING think\\nhard",
                   "TEXT Line one\\nline two \\\\ back\\\\n.", f"TEXT 你好。{FAMILY}\\r!",
                   "DONE stop", "ERROR interrupted cut\\noff"]
    assert unescape(got[2][5:]) == "Line one\nline two \\ back\\n."
    assert device.status()["lines_out"] == 7  # the HELLO too


@pytest.mark.trio
async def test_send_deltas(board):
    device = make(board, events={"delta", "done"}, send="deltas")
    inbox = Inbox(64, Overflow.BLOCK)
    async with running(device, board, inbox):
        for text in ("Hel", "lo"):
            await inbox.put(delivery("delta", REQUEST, **{"text": text}))
        await inbox.put(delivery("done", REQUEST, **{"finish_reason": "stop"}))
        assert [await board.line() for _ in range(3)] == ["TEXT Hel", "TEXT lo", "DONE stop"]


# ---- lines from the device ----

@pytest.mark.trio
async def test_prompts_and_bad_lines(board):
    device = make(board, max_line=64)
    async with running(device, board) as prompts:
        await board.send("PROMPT Is the heating on?\r\n")
        assert await prompts.receive() == "Is the heating on?"
        await board.send(b"PROMPT caf\xe9\n")              # Latin-1, not UTF-8
        await board.send("PROMPT " + "x" * 40)             # overlong, in two writes
        await board.send("y" * 40 + "\n")
        await board.send("BEEP 1\nEVENT door opened\nHELLO panel v2\n\n")
        await board.send(f"PROMPT 天气如何？{FAMILY}\\nsecond line \\q\n")
        assert await prompts.receive() == f"天气如何？{FAMILY}\nsecond line \\q"
        status = device.status()
    assert status == {"port": str(board.link), "connected": True, "hello": "panel v2",
                      "lines_in": 8, "lines_out": 1, "bad_lines": 3, "events_in": 1}


@pytest.mark.trio
async def test_read_ignore(board):
    device = make(board, read="ignore")
    async with running(device, board) as prompts:
        await board.send("PROMPT hello\nHELLO x\n")
        await until(lambda: device.status()["hello"] == "x")
        with pytest.raises(trio.WouldBlock):
            prompts.receive_nowait()
    assert device.status()["bad_lines"] == 0


class Asked:
    """A device's requests to the daemon, recorded in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def __call__(self, text: str) -> None:
        self.calls.append(("prompt", text))

    async def announce(self, text: str) -> None:
        self.calls.append(("announce", text))

    async def stop(self) -> None:
        self.calls.append(("stop",))


@pytest.mark.trio
@pytest.mark.parametrize("read", ["prompts", "ignore"])
async def test_announce_and_stop_lines(board, read):
    device = make(board, read=read)
    asked = Asked()
    async with trio.open_nursery() as nursery:
        await nursery.start(device.run, Inbox(8, Overflow.BLOCK), asked)
        assert (await board.line()).startswith("HELLO 1 homeagent ")
        await board.send("ANNOUNCE Dinner is\\nready.\nSTOP\nSTOP now\nANNOUNCE \n"
                         "PROMPT hi\nHELLO done\n")
        await until(lambda: device.status()["hello"] == "done")
        nursery.cancel_scope.cancel()
    assert asked.calls == ([("announce", "Dinner is\nready."), ("stop",), ("prompt", "hi")]
                           if read == "prompts" else [])
    assert device.status()["bad_lines"] == 2  # the STOP with text, the empty ANNOUNCE


# ---- tools ----

async def answer(board: Board, keyword: str, text: str) -> str:
    """Read the next CALL line, answer it with `keyword`; return its command."""
    _, call_id, command = (await board.line()).split(" ", 2)
    await board.send(f"{keyword} {call_id} {text}\n")
    return command


@pytest.mark.trio
async def test_tool_round_trip_and_failure(board):
    device = make(board, commands={"set_relay": "RELAY {channel} {on} {{{label}}}"})
    async with running(device, board), trio.open_nursery() as nursery:
        commands = []

        async def board_side():
            commands.append(await answer(board, "OK", "relay 2\\non"))
            commands.append(await answer(board, "FAIL", "relay 9 does not exist"))
        nursery.start_soon(board_side)
        result = await device.call_tool("set_relay", {"channel": 2.0, "on": True,
                                                      "label": "hall\nway"})
        with pytest.raises(ToolError, match="^relay 9 does not exist$"):
            await device.call_tool("set_relay", {"channel": 9, "on": False, "label": "x"})
    assert result == "relay 2\non"
    assert commands == ["RELAY 2 true {hall\\nway}", "RELAY 9 false {x}"]


@pytest.mark.trio
async def test_concurrent_calls_matched_by_id(board):
    device = make(board)
    results = {}

    async def call(channel):
        results[channel] = await device.call_tool("set_relay", {"channel": channel, "on": True})
    async with running(device, board), trio.open_nursery() as nursery:
        nursery.start_soon(call, 1)
        nursery.start_soon(call, 2)
        calls = [(await board.line()).split(" ", 2) for _ in range(2)]
        for _, call_id, command in reversed(calls):
            await board.send(f"OK {call_id} done {command}\n")
    assert results == {1: "done RELAY 1 true", 2: "done RELAY 2 true"}


@pytest.mark.trio
async def test_cancelled_call_forgets_its_id(board, caplog):
    device = make(board)
    async with running(device, board):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(device.call_tool, "set_relay", {"channel": 1, "on": True})
                _, call_id, _ = (await board.line()).split(" ", 2)
                scope.cancel()  # as the hub's timeout does
        await board.send(f"OK {call_id} late\nHELLO after\n")
        await until(lambda: device.status()["hello"] == "after")
    assert f"OK for call '{call_id}', which is not waiting" in caplog.text
    assert device.status()["bad_lines"] == 0


@pytest.mark.trio
async def test_call_when_disconnected(board):
    device = make(board)
    with pytest.raises(ToolError, match="^device panel is not connected$"):
        await device.call_tool("set_relay", {"channel": 1, "on": True})
    with pytest.raises(ToolError, match="needs 'on'"):
        await device.call_tool("set_relay", {"channel": 1})


# ---- losing the device ----

async def no_prompt(text: str) -> None:
    raise AssertionError(f"unexpected prompt {text!r}")


@pytest.mark.trio
async def test_unplug_then_replug(board):
    device = make(board)
    outcome = []

    async def call_during_unplug():
        with pytest.raises(ToolError) as error:
            await device.call_tool("set_relay", {"channel": 1, "on": True})
        outcome.append(str(error.value))

    async def board_side():
        await board.line()                      # HELLO
        nursery.start_soon(call_during_unplug)
        await board.line()                      # its CALL, never answered
        board.unplug()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(board_side)
        with trio.fail_after(timeout(2)), pytest.raises(DeviceLost, match="disconnected"):
            await device.run(Inbox(8, Overflow.BLOCK), no_prompt)
    assert outcome == ["device panel was disconnected"]
    assert device.status()["connected"] is False

    board.plug()                                # what the hub's restart finds
    async with running(device, board) as prompts:
        await board.send("PROMPT back again\n")
        assert await prompts.receive() == "back again"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer, board, "OK", "fine")
            assert await device.call_tool("set_relay", {"channel": 3, "on": False}) == "fine"


@pytest.mark.trio
async def test_device_not_reading_fails_run_within_write_timeout(board):
    device = make(board, write_timeout=0.3)
    inbox = Inbox(256, Overflow.BLOCK)
    for n in range(200):                        # 200 KB: far over a pty's buffer
        await inbox.put(delivery("sentence", REQUEST, **{"text": f"{n} " + "z" * 1000}))
    with trio.fail_after(timeout(5)), pytest.raises(WriteTimeout, match="not reading"):
        await device.run(inbox, no_prompt)      # nobody reads the board
    assert device.status()["connected"] is False
    assert 0 < device.status()["lines_out"] < 200


@pytest.mark.trio
async def test_port_is_exclusive(board):
    async with running(make(board), board):
        with pytest.raises(serial.SerialException):
            await make(board).run(Inbox(8, Overflow.BLOCK), no_prompt)


@pytest.mark.trio
async def test_missing_port(tmp_path):
    device = SerialDevice.from_settings(Common("panel", SerialDevice.DEFAULT_EVENTS),
                                        {"port": str(tmp_path / "gone")})
    with pytest.raises(serial.SerialException, match="gone"):
        await device.run(Inbox(8, Overflow.BLOCK), no_prompt)


# ---- settings ----

BAD_SETTINGS = [
    ({"port": None}, "port"),
    ({"port": ""}, "port"),
    ({"baudrate": "fast"}, "baudrate"),
    ({"baudrate": 0}, "baudrate"),
    ({"baudrate": True}, "baudrate"),
    ({"bytesize": 9}, "bytesize"),
    ({"parity": "X"}, "parity"),
    ({"stopbits": 3}, "stopbits"),
    ({"stopbits": True}, "stopbits"),
    ({"send": "words"}, "send"),
    ({"send": "deltas"}, "send"),               # without delta in events
    ({"read": "all"}, "read"),
    ({"write_timeout": 0}, "write_timeout"),
    ({"write_timeout": "1"}, "write_timeout"),
    ({"max_line": 8}, "max_line"),
    ({"max_line": 100.5}, "max_line"),
    ({"bauds": 9600}, "bauds"),
    ({"commands": "RELAY"}, "commands"),
    ({"commands": {"set_relay": "R {channel}", "nope": "X"}}, "commands.nope"),
    ({"commands": {}}, "commands.set_relay"),
    ({"commands": {"set_relay": ""}}, "commands.set_relay"),
    ({"commands": {"set_relay": "RELAY {relay}"}}, "commands.set_relay"),
    ({"commands": {"set_relay": "RELAY {channel:>3}"}}, "commands.set_relay"),
    ({"commands": {"set_relay": "RELAY {channel!r}"}}, "commands.set_relay"),
    ({"commands": {"set_relay": "RELAY {}"}}, "commands.set_relay"),
    ({"commands": {"set_relay": "RELAY {channel"}}, "commands.set_relay"),
]


@pytest.mark.parametrize("change,key", BAD_SETTINGS)
def test_bad_setting_names_its_key(change, key):
    settings = {"port": "/dev/ttyUSB0", "commands": {"set_relay": "R {channel}"}, **change}
    common = Common("panel", SerialDevice.DEFAULT_EVENTS, tools=(RELAY,))
    with pytest.raises(SettingError) as error:
        SerialDevice.from_settings(common, settings)
    assert error.value.key == key


@pytest.mark.parametrize("change,problem", [
    ({"baudrate": 0}, "must be at least 1, got 0"),
    ({"baudrate": True}, "expected an integer, got a boolean"),
    ({"max_line": 8}, "must be at least 16, got 8"),
    ({"write_timeout": 0}, "must be positive"),
    ({"write_timeout": -1}, "must be at least 0, got -1.0"),
    ({"write_timeout": float("inf")}, "expected a finite number, got inf"),
    ({"stopbits": True}, "one of 1, 1.5, 2"),
    ({"parity": "X"}, "one of N, E, O, M, S"),
])
def test_bad_setting_reads_like_the_config(change, problem):
    settings = {"port": "/dev/ttyUSB0", "commands": {"set_relay": "R {channel}"}, **change}
    common = Common("panel", SerialDevice.DEFAULT_EVENTS, tools=(RELAY,))
    with pytest.raises(SettingError) as error:
        SerialDevice.from_settings(common, settings)
    assert (error.value.key, error.value.problem) == (next(iter(change)), problem)


def test_events_without_a_line():
    common = Common("panel", frozenset({"sentence", "tool_call"}))
    with pytest.raises(SettingError, match="no line for tool_call") as error:
        SerialDevice.from_settings(common, {"port": "/dev/ttyUSB0"})
    assert error.value.key == "events"


def test_good_settings():
    common = Common("panel", frozenset({"delta", "done"}), tools=(RELAY,))
    device = SerialDevice.from_settings(common, {
        "port": "/dev/serial/by-id/usb-x", "baudrate": 9600, "bytesize": 7, "parity": "E",
        "stopbits": 1.5, "send": "deltas", "read": "ignore", "write_timeout": 2,
        "max_line": 256, "commands": {"set_relay": "RELAY {channel} {on} {{literal}}"}})
    assert device.status() == {"port": "/dev/serial/by-id/usb-x", "connected": False,
                               "hello": None, "lines_in": 0, "lines_out": 0, "bad_lines": 0,
                               "events_in": 0}


# ---- rendering ----

def test_render():
    template = (("A ", "s"), (" ", "b"), (" ", "i"), (" ", "f"), (" ", "whole"), (" ", "none"),
                (" ", "list"), ("!", None))
    arguments = {"s": "x y", "b": False, "i": 3, "f": 2.5, "whole": 4.0, "none": None,
                 "list": [1, "ü", {"k": True}]}
    assert render(template, arguments) == 'A x y false 3 2.5 4 null [1,"ü",{"k":true}]!'
