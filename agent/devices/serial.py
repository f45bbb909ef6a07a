"""A microcontroller or terminal on a serial port (docs/serial-protocol.md).

The port is opened with pyserial in a worker thread (opening a USB adapter
can block), then read and written as a non-blocking file descriptor on the
trio loop, so nothing blocks the loop and cancellation is immediate. The
port is reopened by its configured path on every run(): a /dev/serial/by-id
link finds a re-plugged adapter under its new ttyUSBn.

Inside run() three tasks share the connection: the reader (device lines:
prompts, tool replies, ...), the forwarder (inbox events to lines) and the
one writer, which also takes the CALL lines of call_tool(), so lines never
interleave, and a device that stops taking bytes fails run() after
write_timeout whichever line was waiting. What the lines say, both ways, is
agent/devices/serial_protocol.py: this module only moves them.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import termios
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import serial
import trio

from agent import __version__
from agent.devices import serial_protocol as wire
from agent.devices import templates
from agent.core import replies
from agent.core.deliveries import Delivery
from agent.devices.base import (Common, Device, Inbox, Prompt, SettingError, ToolError,
                                refuse_unknown)
from agent.settings.reader import Reader

log = logging.getLogger("homeagent.devices.serial")

READ_SIZE = 4096

_PARITIES = ("N", "E", "O", "M", "S")
_STOPBITS = (1, 1.5, 2)
_SEND = {"sentences": replies.Sentence, "deltas": replies.Delta, "nothing": None}
_READ = ("prompts", "ignore")
_SETTINGS = ("port", "baudrate", "bytesize", "parity", "stopbits", "send", "read",
             "write_timeout", "max_line", "commands")


class DeviceLost(ConnectionError):
    """The port went away under us: unplugged, hung up, closed."""


class WriteTimeout(TimeoutError):
    """The device took no byte for write_timeout: it is not reading."""


def _template(tool: str, text: Any, properties: Mapping[str, Any]) -> templates.Template:
    key = f"commands.{tool}"
    if not isinstance(text, str) or not text.strip():
        raise SettingError(key, "must be a non-empty command template")
    return templates.parse(key, text, properties)




# A device node younger than this may not have its group and mode from udev yet.
UDEV_GRACE = 3.0
UDEV_POLL = 0.05


def _appeared_lately(path: str) -> bool:
    try:
        return time.time() - os.stat(path).st_ctime < UDEV_GRACE
    except OSError:
        return False

@dataclass(eq=False)
class _Call:
    done: trio.Event = field(default_factory=trio.Event)
    ok: bool = False
    text: str = ""


class SerialDevice(Device):
    kind = "serial"
    DEFAULT_EVENTS = frozenset({"sentence", "done", "error", "voice", "timer"})

    def __init__(self, common: Common, port: str, *, baudrate: int = 115200, bytesize: int = 8,
                 parity: str = "N", stopbits: float = 1, send: str = "sentences",
                 read: str = "prompts", write_timeout: float = 1.0, max_line: int = 1024,
                 commands: Mapping[str, templates.Template] | None = None) -> None:
        super().__init__(common)
        self.port = port
        self._open_args = dict(baudrate=baudrate, bytesize=bytesize, parity=parity,
                               stopbits=stopbits)
        self._text = _SEND[send]  # the reply class whose text goes out as TEXT
        self._read_prompts = read == "prompts"
        self._write_timeout = write_timeout
        self._max_line = max_line
        self._commands = dict(commands or {})
        self._lines: trio.MemorySendChannel | None = None  # to the writer, while connected
        self._pending: dict[str, _Call] = {}
        self._call_ids = itertools.count(1)  # never reused, so a late reply finds no call
        self._hello: str | None = None
        self._counts = dict(lines_in=0, lines_out=0, bad_lines=0, events_in=0)

    @classmethod
    def from_settings(cls, common: Common, settings: Mapping[str, Any]) -> "SerialDevice":
        refuse_unknown(settings, _SETTINGS)
        port = settings.get("port")
        if not isinstance(port, str) or not port:
            raise SettingError("port", "required: the device path, e.g. /dev/serial/by-id/...")
        reader = Reader(settings, SettingError)
        send = reader.choice("send", tuple(_SEND), "sentences")
        text = _SEND[send]
        if text is not None and text.type not in common.events:
            raise SettingError("send", f"{send!r} needs {text.type!r} in events")
        no_line = sorted(common.events & {"tool_call", "tool_result"})
        if no_line:
            raise SettingError("events", f"the serial protocol has no line for {no_line[0]}")
        commands = settings.get("commands", {})
        if not isinstance(commands, Mapping):
            raise SettingError("commands", "must be a table: tool name = command template")
        tools = {tool.name: tool for tool in common.tools}
        for name in commands:
            if name not in tools:
                raise SettingError(f"commands.{name}", "no tool of that name in tools (tools: "
                                   f"{', '.join(tools) or 'none'})")
        for name in tools:
            if name not in commands:
                raise SettingError(f"commands.{name}", "missing: each tool of a serial device "
                                   "needs a command template")
        return cls(
            common, port,
            baudrate=reader.integer("baudrate", 115200, 1),
            bytesize=reader.choice("bytesize", (5, 6, 7, 8), 8),
            parity=reader.choice("parity", _PARITIES, "N"),
            stopbits=reader.choice("stopbits", _STOPBITS, 1),
            send=send,
            read=reader.choice("read", _READ, "prompts"),
            write_timeout=reader.positive("write_timeout", 1.0),
            max_line=reader.integer("max_line", 1024, 16),
            commands={name: _template(name, commands[name],
                                      tools[name].parameters.get("properties", {}))
                      for name in tools})

    # ---- the connection ----

    def _open(self) -> serial.Serial:
        """The port, open (in a worker thread). A node that has just appeared
        (a USB adapter plugged in) is root's alone until udev gives it its
        group: refused then, it is tried again for UDEV_GRACE, not reported."""
        deadline = time.monotonic() + UDEV_GRACE
        while True:
            try:
                # exclusive: two handlers (or daemons) on one port would mix their lines
                port = serial.Serial(self.port, **self._open_args, exclusive=True)
                break
            except serial.SerialException as error:
                if error.errno != errno.EACCES or time.monotonic() >= deadline \
                        or not _appeared_lately(self.port):
                    raise
                time.sleep(UDEV_POLL)
        os.set_blocking(port.fileno(), False)
        return port

    async def run(self, inbox: Inbox, prompt: Prompt,
                  task_status=trio.TASK_STATUS_IGNORED) -> None:
        port = await trio.to_thread.run_sync(self._open)
        fd = port.fileno()
        lines, to_write = trio.open_memory_channel[wire.DaemonMessage](0)
        self._lines, self._hello = lines, None
        log.info("device %s: %s open", self.name, self.port)
        try:
            task_status.started()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_lines, fd, to_write)
                nursery.start_soon(self._forward, inbox, lines)
                await lines.send(wire.Hello(__version__))
                await self._read_lines(fd, prompt)
        except BaseExceptionGroup as group:
            # The first failure cancels the other tasks: raise it, not a group.
            failures, _ = group.split(Exception)
            if failures is None:
                raise
            raise failures.exceptions[0] from None
        finally:
            self._lines = None
            to_write.close()
            for call in self._pending.values():
                call.text = f"device {self.name} was disconnected"
                call.done.set()
            self._pending.clear()
            trio.lowlevel.notify_closing(fd)
            try:
                # Unsent output would make close() wait for it (up to 30 s on a tty).
                termios.tcflush(fd, termios.TCOFLUSH)
            except (OSError, termios.error):
                pass  # a vanished device has nothing to flush
            port.close()

    def _lost(self, why: str) -> DeviceLost:
        return DeviceLost(f"{self.port}: device disconnected ({why})")

    async def _read_lines(self, fd: int, prompt: Prompt) -> None:
        receiver = wire.Receiver(wire.parse_device_line, self._max_line)
        while True:
            await trio.lowlevel.wait_readable(fd)
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                continue
            except OSError as exc:
                raise self._lost(exc.strerror) from exc
            if not data:
                raise self._lost("end of file")
            for message in receiver.feed(data):
                await self._handle(message, prompt)

    async def _write_lines(self, fd: int, to_write: trio.MemoryReceiveChannel) -> None:
        async for message in to_write:
            data = memoryview(wire.encode(message))
            while data:
                try:
                    data = data[os.write(fd, data):]
                except BlockingIOError:
                    # A stall, not a slow line, fails: at 9600 baud a long
                    # line may take a second to drain, a byte never does.
                    with trio.move_on_after(self._write_timeout) as waited:
                        await trio.lowlevel.wait_writable(fd)
                    if waited.cancelled_caught:
                        raise WriteTimeout(f"{self.port}: nothing could be written for "
                                           f"{self._write_timeout:g} s: the device is not "
                                           "reading") from None
                except OSError as exc:
                    raise self._lost(exc.strerror) from exc
            self._counts["lines_out"] += 1

    async def _forward(self, inbox: Inbox, lines: trio.MemorySendChannel) -> None:
        async for event in inbox:
            message = self._message(event)
            if message is not None:
                await lines.send(message)

    def _message(self, delivery: Delivery) -> wire.DaemonMessage | None:
        reply = delivery.reply
        match reply:
            case replies.Started(session=session):
                return wire.Start(session)
            case replies.Reasoning(text=text) if text:
                return wire.Reasoning(text)
            case replies.Done(finish_reason=finish_reason):
                return wire.Done(finish_reason or "")  # an announcement's has none
            case replies.Error(code=code, message=message):
                return wire.Error(code, message)
            case replies.VoiceState(state=state):
                return wire.Voice(state)
            case replies.TimerRing(state=state, timer=timer, kind=kind, label=label):
                return wire.Timer(state, timer, kind, label)
        if type(reply) is self._text and reply.text:  # a Delta or Sentence, by `send`
            return wire.Text(reply.text)
        return None  # the other text type, with `send` choosing one

    # ---- lines from the device ----

    async def _handle(self, message: wire.DeviceMessage | wire.Blank | wire.BadLine,
                      prompt: Prompt) -> None:
        self._counts["lines_in"] += 1
        match message:
            case wire.Prompt(text) if self._read_prompts:
                await prompt(text)
            case wire.Prompt(text):
                log.info("device %s: PROMPT ignored (read = ignore): %r", self.name,
                         text[:wire.SHOWN_CHARS])
            case wire.CallReply(call_id, text):
                call = self._pending.pop(call_id, None)
                if call is None:
                    log.warning("device %s: %s for call %r, which is not waiting (timed out?)",
                                self.name, message.KEYWORD, call_id)
                    return
                call.ok, call.text = isinstance(message, wire.Ok), text
                call.done.set()
            case wire.Announce(text) if self._read_prompts:
                await prompt.announce(text)
            case wire.Stop() if self._read_prompts:
                await prompt.stop()
            case wire.Announce() | wire.Stop():
                log.info("device %s: %s ignored (read = ignore)", self.name, message.KEYWORD)
            case wire.DeviceEvent(text):
                self._counts["events_in"] += 1
                log.info("device %s: event: %s", self.name, text)
            case wire.DeviceHello(text):
                self._hello = text
                log.info("device %s: hello: %s", self.name, self._hello)
            case wire.BadLine(problem, shown):
                self._counts["bad_lines"] += 1
                what = problem.value
                if problem is wire.Problem.TOO_LONG:
                    what += f" ({self._max_line} bytes)"
                log.warning("device %s: %s, skipped: %r", self.name, what, shown)

    # ---- tools and status ----

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        template = self._commands.get(name)
        if template is None:
            return await super().call_tool(name, arguments)
        command = templates.render(template, arguments)
        lines = self._lines
        if lines is None:
            raise ToolError(f"device {self.name} is not connected")
        call_id = str(next(self._call_ids))
        call = self._pending[call_id] = _Call()
        try:
            await lines.send(wire.Call(call_id, command))
            await call.done.wait()
        except trio.BrokenResourceError:
            raise ToolError(f"device {self.name} was disconnected") from None
        finally:
            self._pending.pop(call_id, None)  # also when cancelled by the hub's timeout
        if not call.ok:
            raise ToolError(call.text or f"{name} failed on device {self.name}")
        return call.text

    def status(self) -> dict[str, Any]:
        return {"port": self.port, "connected": self._lines is not None, "hello": self._hello,
                **self._counts}
