"""A serial device end to end: `homeagent serve` and the scripted mock model
as real processes (tests/daemon_harness.py), a `[devices.board]` of type
"serial" whose port is a symlink in tmp_path to the slave of a real pty, as
a /dev/serial/by-id link would be, and the board at the master side, driven
here by a thread as a microcontroller would: it records every line the
daemon sends and answers each CALL with OK.

Unplugging the board closes the master and removes the link (udev removes a
by-id link with its adapter); plugging it in again makes a new pty and
points the link at it. Every wait is bounded by timeout(); the waits for a
state poll it, nothing sleeps for a fixed time.
"""

from __future__ import annotations

import json
import os
import re
import select
import socket
import threading
import time
from pathlib import Path

import pytest

from agent import __version__
from agent.devices.serial_protocol import unescape
from agent.mock_llm.scripts import (CHINESE, EMOJI, ENGLISH, GERMAN, NO_SWITCH_TOOL, REASONED,
                                    REASONING, confirmation)
from agent.tools.timers.provider import TOOL_NAMES as TIMER_TOOLS  # on by default
from conftest import timeout
from daemon_harness import Daemon, MockServer, ask_text, toml_value
from helpers import of_type
from test_serial_device import Board

HELLO = f"HELLO 1 homeagent {__version__}"
# An answer with what a board's terminal or parser could act on: NUL, ESC
# (a clear-screen sequence), BEL, TAB, DEL, U+0085 and U+2028 (line breaks to
# some parsers), U+2029.
CONTROLS = ("Line one\x00 ends\x1b[2J here\x07. Tab\there, del\x7f, next\x85line "
            "and\u2028separator\u2029too.")
DEVICE_ASK = {"device": "board", "session": "device-board"}
SWITCH = "switch on relay 3"
RESULT = "relay 3 is on"          # what the board answers to RELAY 3 true
FIRST = "Switching channel 3 on."  # the mock's text before its tool call
SCHEMA = {"type": "object",
          "properties": {"channel": {"type": "integer", "minimum": 1, "maximum": 8},
                         "on": {"type": "boolean"}},
          "required": ["channel", "on"], "additionalProperties": False}
PROVIDERS = {"chat": {"protocol": "openai-chat"}, "anthropic": {"protocol": "anthropic"},
             "responses": {"protocol": "openai-responses"},
             # 50 ms before each part of the stream: an answer takes about a second
             "slow": {"headers": {"x-mock-delay-ms": "50"}},
             "controls": {"headers": {"x-mock-answer": json.dumps(CONTROLS)}}}
# prompt -> the mock's answer; each has two sentences or more
ANSWERS = {"Hello": ENGLISH, "Auf Deutsch, bitte": GERMAN, "天气如何": CHINESE,
           "Any emoji?": EMOJI}
SENTENCE_END = re.compile(r"[.!?。？！]$")


# ---------------------------------------------------------------- the board

def wait_until(condition, what: str, wait: float = 10):
    """Poll condition() (bounded) until it returns something true; return that."""
    deadline = time.monotonic() + timeout(wait)
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout(wait):g} s: {what}")
        time.sleep(0.02)


class Recorder:
    """Items appended by a thread, waited for by the test."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.items: list = []

    def add(self, item) -> None:
        with self._changed:
            self.items.append(item)
            self._changed.notify_all()

    def snapshot(self) -> list:
        with self._changed:
            return list(self.items)

    def wait_for(self, predicate, what: str, wait: float = 10) -> list:
        """Wait until predicate(items) holds; the items then."""
        with self._changed:
            if not self._changed.wait_for(lambda: predicate(self.items), timeout(wait)):
                raise AssertionError(f"not within {timeout(wait):g} s: {what}; got {self.items}")
            return list(self.items)


class SerialBoard(Recorder):
    """The relay board at the master side of the pty behind `link`. Its
    items are the lines the daemon sent on the current pty (since the last
    plug()); with reading=False nobody ever reads the master."""

    def __init__(self, link: Path, *, reading: bool = True) -> None:
        super().__init__()
        self.link = link
        self.reading = reading
        self.replies = 0
        self.pty: Board | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def plug(self) -> "SerialBoard":
        """A new pty, the link pointed at its slave: the adapter is (back) in."""
        with self._changed:
            self.items = []
        self.pty = Board(self.link)
        if self.reading:
            self._stop.clear()
            self._thread = threading.Thread(target=self._serve, args=(self.pty.master,),
                                            daemon=True)
            self._thread.start()
        return self

    def unplug(self) -> None:
        """The cable pulled: the master closed, the link gone."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout(5))
            assert not self._thread.is_alive()
            self._thread = None
        if self.pty is not None:
            self.pty.close()
            self.pty = None
        self.link.unlink(missing_ok=True)

    def _serve(self, master: int) -> None:
        poller = select.poll()
        poller.register(master, select.POLLIN)
        pending = b""
        while not self._stop.is_set():
            if not poller.poll(50):
                continue
            try:
                data = os.read(master, 4096)
            except BlockingIOError:
                continue
            except OSError:
                return
            pending += data
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "surrogateescape")
                self.add(line)
                if line.startswith("CALL "):
                    self._answer(master, line)

    def _answer(self, master: int, line: str) -> None:
        _, call_id, command = line.split(" ", 2)
        word, channel, on = command.split(" ")
        assert word == "RELAY"
        self.write(f"OK {call_id} relay {channel} is {'on' if on == 'true' else 'off'}\n", master)
        self.replies += 1

    def write(self, text: str, master: int | None = None) -> None:
        """Bytes typed on the board, to the daemon."""
        master = self.pty.master if master is None else master
        view = memoryview(text.encode())
        deadline = time.monotonic() + timeout(5)
        while view:
            assert time.monotonic() < deadline, "the daemon does not read the board"
            try:
                view = view[os.write(master, view):]
            except BlockingIOError:
                select.select([], [master], [], 0.05)

    def answer_lines(self, start: int, what: str, wait: float = 10) -> list[str]:
        """The lines from index start up to the first DONE or ERROR, once it came."""
        def ended(lines):
            return any(line.startswith(("DONE ", "ERROR ")) for line in lines[start:])
        lines = self.wait_for(ended, f"DONE on the board after line {start} ({what})", wait)
        end = next(i for i in range(start, len(lines))
                   if lines[i].startswith(("DONE ", "ERROR ")))
        return lines[start:end + 1]


class Subscriber(Recorder):
    """A `subscribe` connection whose replies a thread collects."""

    def __init__(self, daemon: Daemon) -> None:
        super().__init__()
        self.raw = daemon.raw()
        self.raw.sock.settimeout(None)  # closed by close(); every wait is in wait_for()
        self.raw.send(b'{"id":"sub","op":"subscribe"}\n')
        assert self.raw.line() == {"id": "sub", "type": "subscribed"}
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def _collect(self) -> None:
        try:
            while True:
                self.add(self.raw.line())
        except (EOFError, OSError):
            return

    def device_events(self, state: str | None = None) -> list[dict]:
        return [r for r in self.snapshot() if r["type"] == "device"
                and (state is None or r["state"] == state)]

    def close(self) -> None:
        try:
            self.raw.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._thread.join(timeout(5))
        self.raw.close()


# ---------------------------------------------------------------- the daemon

def board_toml(link: Path, **settings) -> str:
    """[devices.board]: a serial device on link with the tool set_relay."""
    tool = {"name": "set_relay", "description": "Switch relay CHANNEL (1-8) on or off",
            "parameters": SCHEMA, "timeout": timeout(5)}
    device = {"type": "serial", "port": str(link), "restart_max_delay": 0.5,
              "commands": {"set_relay": "RELAY {channel} {on}"}, **settings}
    return "\n".join(["[devices.board]", *(f"{k} = {toml_value(v)}" for k, v in device.items()),
                      "[[devices.board.tools]]",
                      *(f"{k} = {toml_value(v)}" for k, v in tool.items())])


def board_daemon(directory: Path, mock: MockServer, link: Path, **settings) -> Daemon:
    return Daemon(directory, mock.url, providers=PROVIDERS,
                  extra=board_toml(link, **settings)).start()


def status(daemon: Daemon) -> tuple[dict, dict]:
    """The status reply and the board's entry in it."""
    with daemon.client() as client:
        reply = client.call("status")
    [device] = reply["devices"]
    assert device["name"] == "board" and device["kind"] == "serial"
    return reply, device


def wait_state(daemon: Daemon, state: str, what: str) -> tuple[dict, dict]:
    def reached():
        reply, device = status(daemon)
        return (reply, device) if device["state"] == state else None
    return wait_until(reached, f"the board {state} ({what})")


def texts(lines: list[str]) -> list[str]:
    assert all(line.startswith("TEXT ") for line in lines), lines
    return [unescape(line[len("TEXT "):]) for line in lines]


def assert_sentences(lines: list[str], answer: str) -> None:
    """TEXT lines of whole sentences, in order, that make the answer, then DONE stop."""
    *text_lines, last = lines
    assert last == "DONE stop", lines
    sentences = texts(text_lines)
    assert len(sentences) >= 2, sentences
    for sentence in sentences:
        assert sentence == sentence.strip() and SENTENCE_END.search(sentence), sentences
    assert joined(sentences, answer), (sentences, answer)


def joined(sentences: list[str], text: str) -> bool:
    """Whether the sentences, in order, are the text up to the whitespace between them."""
    return bool(sentences) and re.fullmatch(r"\s*".join(map(re.escape, sentences)), text) \
        is not None


def assert_intact(replies: list[dict], answer: str) -> dict:
    """An answer streamed whole: its deltas joined are done.text are answer."""
    done = replies[-1]
    assert done["type"] == "done" and done["finish_reason"] == "stop", replies[-3:]
    assert "".join(r["text"] for r in of_type(replies, "delta")) == done["text"] == answer
    return done


@pytest.fixture
def board(tmp_path):
    board = SerialBoard(tmp_path / "usb-Relay_Board_A1B2-if00-port0")
    yield board
    board.unplug()


@pytest.fixture(scope="module")
def served(tmp_path_factory, mock):
    """One daemon with a healthy board, for the tests that leave it healthy."""
    directory = tmp_path_factory.mktemp("served")
    board = SerialBoard(directory / "usb-Relay_Board_A1B2-if00-port0").plug()
    daemon = board_daemon(directory, mock, board.link)
    try:
        wait_state(daemon, "running", "at start")
        yield daemon, board
    finally:
        try:
            assert daemon.stop() == 0, daemon.log()
        finally:
            board.unplug()


# ---------------------------------------------------------------- a healthy board

def test_status_of_a_connected_board(served):
    daemon, board = served
    board.wait_for(lambda lines: lines, "the daemon's HELLO")
    reply, device = status(daemon)
    assert reply["tools"] == ["set_relay", *TIMER_TOOLS]
    assert device["state"] == "running" and device["restarts"] == 0
    assert device["last_error"] is None and device["tools"] == ["set_relay"]
    assert device["port"] == str(board.link) and device["connected"] is True
    assert device["hello"] is None  # the board has not said its own HELLO


@pytest.mark.parametrize("prompt", list(ANSWERS))
def test_sentences_reach_the_board_whole_and_in_order(served, prompt):
    daemon, board = served
    start = len(board.wait_for(lambda lines: lines, "the daemon's HELLO"))
    with daemon.client() as client:
        _, replies = ask_text(client, prompt)
    assert_intact(replies, ANSWERS[prompt])
    assert_sentences(board.answer_lines(start, prompt), ANSWERS[prompt])
    assert board.snapshot()[0] == HELLO  # the HELLO came first, and only once
    assert board.snapshot().count(HELLO) == 1


def controls_on_the_wire(daemon: Daemon, board: "SerialBoard") -> list[str]:
    """Ask for the CONTROLS answer: the board's lines of it, each free of
    raw controls and separators."""
    start = len(board.wait_for(lambda lines: lines, "the daemon's HELLO"))
    with daemon.client() as client:
        _, replies = ask_text(client, "Hello", provider="controls")
    assert_intact(replies, CONTROLS)
    lines = board.answer_lines(start, "the answer with controls")
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]", "\n".join(lines)), lines
    return lines


def test_control_characters_reach_the_board_escaped(served):
    daemon, board = served
    lines = controls_on_the_wire(daemon, board)
    # U+0085, U+2028 and U+2029 end a sentence, so they do not reach the
    # board in sentences at all; with send = "deltas" they go escaped.
    for escaped in ("\\x00", "\\x1b[2J", "\\x07", "\\x09", "\\x7f"):
        assert escaped in "\n".join(lines), (escaped, lines)
    assert joined(texts(lines[:-1]), CONTROLS)  # and each unescapes to its text


def test_control_characters_in_deltas_reach_the_board_escaped(tmp_path, mock, board):
    board.plug()
    daemon = board_daemon(tmp_path, mock, board.link, send="deltas", events=["delta", "done"])
    try:
        wait_state(daemon, "running", "at start")
        lines = controls_on_the_wire(daemon, board)
        assert "".join(texts(lines[:-1])) == CONTROLS
        for escaped in ("\\x85", "\\u2028", "\\u2029"):
            assert escaped in "\n".join(lines), (escaped, lines)
    finally:
        assert daemon.stop() == 0, daemon.log()


def tool_result_sent(provider: str, body: dict) -> tuple[str, str]:
    """(call id, content) of the tool result in a request body, per wire format."""
    if provider == "chat":
        last = body["messages"][-1]
        assert last["role"] == "tool"
        return last["tool_call_id"], last["content"]
    if provider == "anthropic":
        [block] = body["messages"][-1]["content"]
        assert block["type"] == "tool_result"
        return block["tool_use_id"], block["content"]
    last = body["input"][-1]
    assert last["type"] == "function_call_output"
    return last["call_id"], last["output"]


@pytest.mark.parametrize("provider", ["chat", "anthropic", "responses"])
def test_a_tool_call_runs_on_the_board(served, mock, provider):
    daemon, board = served
    start = len(board.snapshot())
    replies_before = board.replies
    mock.clear()
    with daemon.client() as client:
        _, replies = ask_text(client, SWITCH, provider=provider, session=f"relay-{provider}")

    assert [r["type"] for r in replies if r["type"] != "delta"] == \
        ["started", "tool_call", "tool_result", "done"], replies
    [call] = of_type(replies, "tool_call")
    assert (call["name"], call["arguments"]) == ("set_relay", {"channel": 3, "on": True})
    [result] = of_type(replies, "tool_result")
    assert (result["call_id"], result["content"], result["is_error"]) == \
        (call["call_id"], RESULT, False)
    done = replies[-1]
    assert (done["finish_reason"], done["steps"]) == ("stop", 2)
    assert done["text"] == FIRST + confirmation(RESULT)
    assert "".join(r["text"] for r in of_type(replies, "delta")) == done["text"]

    # The board: the text before the call, the call, the confirmation, DONE.
    lines = board.answer_lines(start, SWITCH)
    assert texts(lines[:1]) == [FIRST]
    assert re.fullmatch(r"CALL [^ ]+ RELAY 3 true", lines[1]), lines
    assert joined(texts(lines[2:-1]), confirmation(RESULT)), lines
    assert lines[-1] == "DONE stop"
    assert board.replies == replies_before + 1

    # The board's OK text went back to the model as the tool result.
    first, second = mock.requests()
    assert first["body"]["tools"] and second["body"]["tools"]
    assert tool_result_sent(provider, second["body"]) == (call["call_id"], RESULT)


def test_a_prompt_typed_on_the_board(served):
    daemon, board = served
    start = len(board.snapshot())
    subscriber = Subscriber(daemon)
    try:
        board.write("PROMPT why is the heating on?\r\n")
        replies = subscriber.wait_for(lambda rs: rs and rs[-1]["type"] in ("done", "error"),
                                      "the board's ask done")
    finally:
        subscriber.close()
    assert all(r["request"] == DEVICE_ASK and r["id"] == "sub" for r in replies), replies
    assert replies[0]["type"] == "started" and replies[0]["session"] == "device-board"
    assert "".join(r["text"] for r in of_type(replies, "reasoning")) == REASONING
    assert_intact(replies, REASONED)
    # The answer goes back to the board (its one sentence), reasoning not asked for.
    assert board.answer_lines(start, "the board's own ask") == [f"TEXT {REASONED}", "DONE stop"]
    with daemon.client() as client:
        turns = client.call("history", session="device-board")["turns"]
    assert turns[-2:] == [{"role": "user", "text": "why is the heating on?"},
                          {"role": "assistant", "text": REASONED, "reasoning": REASONING,
                           "finish_reason": "stop"}]


# ---------------------------------------------------------------- losing the board

def test_a_board_unplugged_mid_stream_and_plugged_back(tmp_path, mock, board):
    board.plug()
    daemon = board_daemon(tmp_path, mock, board.link)
    subscriber = None
    try:
        wait_state(daemon, "running", "at start")
        board.wait_for(lambda lines: lines == [HELLO], "the daemon's HELLO")
        subscriber = Subscriber(daemon)
        with daemon.client() as client:
            replies, old_lines = [], None
            for reply in client.replies(client.send("ask", prompt="Auf Deutsch, bitte",
                                                    provider="slow"), "ask"):
                replies.append(reply)
                if reply["type"] == "delta" and old_lines is None and len(board.snapshot()) > 1:
                    # The board has the first sentence; 15 parts 50 ms apart are
                    # still to come: the cable is pulled mid-stream.
                    old_lines = board.snapshot()
                    board.unplug()
        assert old_lines == [HELLO, "TEXT Im Wohnzimmer sind es 21,5 °C."], old_lines
        # The client's answer is whole all the same.
        assert_intact(replies, GERMAN)

        subscriber.wait_for(lambda rs: any(r["type"] == "device" for r in rs), "a device event")
        failed = subscriber.device_events()[0]
        assert (failed["id"], failed["device"], failed["state"]) == ("sub", "board", "failed")
        # the end of file or EIO a hung-up tty reads, as the kernel has it
        assert failed["error"].startswith(f"DeviceLost: {board.link}: device disconnected (")
        assert failed["retry_in"] == 0.5 and "request" not in failed

        # Down, and tried again every 0.5 s (restart_max_delay): the link is gone.
        reply, device = wait_state(daemon, "failed", "unplugged")
        assert device["last_error"] and device["connected"] is False
        assert device["dropped"] >= 1  # at least the answer's DONE
        assert reply["tools"] == list(TIMER_TOOLS)
        wait_until(lambda: status(daemon)[1]["restarts"] >= 2, "a restart that failed to open")

        board.plug()
        board.wait_for(lambda lines: lines == [HELLO], "HELLO on the new pty")
        reply, device = wait_state(daemon, "running", "plugged back")
        assert device["connected"] is True and reply["tools"] == ["set_relay", *TIMER_TOOLS]
        subscriber.wait_for(lambda rs: [r for r in rs if r["type"] == "device"][-1]["state"]
                            == "running", "a device running event")
        assert subscriber.device_events("running")[-1] == \
            {"id": "sub", "type": "device", "device": "board", "state": "running"}

        # The next answer's sentences reach the new pty.
        with daemon.client() as client:
            _, replies = ask_text(client, "Any emoji?")
        assert_intact(replies, EMOJI)
        assert_sentences(board.answer_lines(1, "after the re-plug"), EMOJI)
    finally:
        if subscriber is not None:
            subscriber.close()
        assert daemon.stop() == 0, daemon.log()


def test_an_answer_cut_by_an_unplug_leaves_nothing_for_the_next(tmp_path, mock, board):
    """The board's own ask is answered slowly (default provider slow); the
    board is unplugged after its first sentence and plugged back: its next
    ask's sentences are that answer's only, not the rest of the cut one."""
    board.plug()
    daemon = Daemon(tmp_path, mock.url, providers=PROVIDERS, default_provider="slow",
                    extra=board_toml(board.link)).start()
    subscriber = None
    try:
        subscriber = Subscriber(daemon)
        wait_state(daemon, "running", "at start")
        board.wait_for(lambda lines: lines == [HELLO], "the daemon's HELLO")
        board.write("PROMPT Auf Deutsch, bitte\n")
        board.wait_for(lambda lines: len(lines) > 1, "the first sentence")
        board.unplug()
        subscriber.wait_for(lambda rs: of_type(rs, "done"), "the cut answer's done")

        board.plug()
        wait_state(daemon, "running", "plugged back")
        board.wait_for(lambda lines: lines == [HELLO], "HELLO on the new pty")
        board.write("PROMPT Hello\n")
        lines = board.answer_lines(1, "the board's next ask")
        replies = subscriber.wait_for(lambda rs: len(of_type(rs, "done")) == 2,
                                      "the next answer's done")
        assert all(r["request"] == DEVICE_ASK for r in replies if r["type"] != "device")
        assert_sentences(lines, ENGLISH)
    finally:
        if subscriber is not None:
            subscriber.close()
        assert daemon.stop() == 0, daemon.log()


def test_a_board_that_never_reads_holds_up_nothing(tmp_path, mock, board):
    """Nobody reads the master: the pty's buffer (some 16 KB on Linux) fills,
    the daemon's writes to the board stall. The answers must not."""
    board.reading = False
    board.plug()
    # An answer that waited for the board would wait this long, whole: until
    # the board failed. So answers delivered while the board's writes stall
    # and before it fails are answers that did not wait for it.
    write_timeout = timeout(4)
    # Deltas and reasoning: many lines per answer, the buffer fills in few asks.
    daemon = board_daemon(tmp_path, mock, board.link, write_timeout=write_timeout,
                          send="deltas", events=["delta", "reasoning", "done", "error"])
    subscriber = None
    prompts = [("Any emoji?", EMOJI), ("why is the heating on?", REASONED),
               ("Auf Deutsch, bitte", GERMAN)]
    durations = []
    stalled = 0  # asks answered while the board's writes stalled, before it failed
    try:
        subscriber = Subscriber(daemon)
        wait_state(daemon, "running", "at start")
        began = time.monotonic()

        def ask(n: int) -> None:
            prompt, answer = prompts[n % len(prompts)]
            asked = time.monotonic()
            with daemon.client() as client:
                _, replies = ask_text(client, prompt)
            durations.append(time.monotonic() - asked)
            assert_intact(replies, answer)

        # Ask while the buffer fills and the writes stall, until the board has
        # failed for not reading (the deadline bounds a hang only), then some more.
        while not subscriber.device_events("failed"):
            ask(len(durations))
            # lines dropped: the board's queue is full, its writes stall; this
            # ask was answered all the same, and the board has not failed yet
            if status(daemon)[1]["dropped"] and not subscriber.device_events("failed"):
                stalled += 1
            assert time.monotonic() - began < timeout(20), \
                f"{len(durations)} asks, and the board that never reads did not fail"
        for n in range(5):
            ask(n)
        print(f"\n{len(durations)} asks, {stalled} of them answered while the board stalled; "
              f"longest {max(durations) * 1000:.0f} ms, all in "
              f"{time.monotonic() - began:.1f} s (write timeout {write_timeout:g} s)")

        # No answer waited for the board: while its writes stalled, answers
        # kept coming, until it failed.
        assert stalled >= 2, (stalled, len(durations))
        [failed, *_] = subscriber.device_events("failed")
        assert failed["error"] == (f"WriteTimeout: {board.link}: nothing could be written for "
                                   f"{write_timeout:g} s: the device is not reading")
        _, device = status(daemon)
        assert device["restarts"] >= 1 and device["dropped"] > 0
        assert device["lines_out"] > 0
    finally:
        if subscriber is not None:
            subscriber.close()
        assert daemon.stop() == 0, daemon.log()


def test_a_board_unplugged_at_start(tmp_path, mock, board):
    board.link.symlink_to(tmp_path / "not-plugged-in")  # a dangling link
    daemon = board_daemon(tmp_path, mock, board.link)
    try:
        # READY=1 came (start() waited for it): the daemon serves without its board.
        def failed_once():
            reply, device = status(daemon)
            return (reply, device) if device["last_error"] else None
        reply, device = wait_until(failed_once, "the board's open failed")
        assert device["state"] in ("failed", "starting") and device["connected"] is False
        assert device["last_error"].startswith("SerialException: ")
        assert str(board.link) in device["last_error"]
        assert reply["tools"] == list(TIMER_TOOLS)

        mock.clear()
        with daemon.client() as client:
            _, replies = ask_text(client, SWITCH)
        assert not of_type(replies, "tool_call")
        assert_intact(replies, NO_SWITCH_TOOL)
        [request] = mock.requests()
        offered = [tool["function"]["name"] for tool in request["body"].get("tools", [])]
        assert offered == sorted(TIMER_TOOLS)  # the board's tool was not offered

        board.plug()
        board.wait_for(lambda lines: lines == [HELLO], "HELLO once plugged in")
        reply, device = wait_state(daemon, "running", "plugged in")
        assert reply["tools"] == ["set_relay", *TIMER_TOOLS] and device["restarts"] >= 1

        with daemon.client() as client:
            _, replies = ask_text(client, SWITCH)
        [result] = of_type(replies, "tool_result")
        assert (result["content"], result["is_error"]) == (RESULT, False)
        assert replies[-1]["text"] == FIRST + confirmation(RESULT)
        assert board.replies == 1
    finally:
        assert daemon.stop() == 0, daemon.log()
