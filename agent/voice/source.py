"""The microphone: where the board's audio comes from, kept running.

Three kinds, configured like the speech device's sinks:
- "arecord": ALSA's arecord on `alsa_device`, asked for 16 kHz 16-bit mono
  raw PCM on its stdout;
- "program": any program's stdout, raw PCM of the configured format; its
  argv is checked when the config loads (a name on PATH or an absolute
  path, never a shell) and `{rate}`, `{width}`, `{channels}` in its
  arguments are the format's numbers;
- "wyoming": a Wyoming mic server (wyoming-satellite's mic service, a
  network microphone): its `audio-chunk` events, each with its format.
Audio that is not 16 kHz 16-bit mono goes through the Converter.

Source.run() delivers converted audio until the source fails: the program
exits, the server closes or breaks the protocol, or no audio comes for
`STALL_SECONDS`. A read that did not fill its buffer is followed by a
pause (`gather_seconds`: GATHER_SECONDS, or less where READ bytes of the
format come sooner) in which the next audio gathers: each wakeup of the
loop costs about as much as the wake word's work on 20 ms of audio, and a
microphone that gives 20 ms at a time would wake it 50 times a second
(linux-voice-assistant reads 64 ms blocks). A source that gives larger
pieces (arecord's periods) is not slowed; the wake word and the end of
speech are heard at most that much later. Supervisor runs it again after a backoff that doubles up
to restart_max_delay (back to the start after a run of RESET_AFTER
seconds), logs each failure and keeps its state for `status`.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from typing import Callable

import trio

from agent.voice.audio import Converter, Format
from agent.voice.config import SourceConfig
from agent.wyoming import framing

log = logging.getLogger("homeagent.voice")

READ = 16384
GATHER_SECONDS = 0.06
STALL_SECONDS = 5.0     # a microphone gives audio all the time; silence this long is a fault
CONNECT_TIMEOUT = 5.0
MIN_DELAY = 0.5
RESET_AFTER = 30.0      # a run this long starts the backoff afresh
STDERR_TAIL = 400       # bytes of a program's last words kept for the report
PLACEHOLDERS = ("rate", "width", "channels")
_ALSA_FORMATS = {1: "U8", 2: "S16_LE", 4: "S32_LE"}

Deliver = Callable[[bytes], None]


class SourceError(Exception):
    """The source stopped giving audio: the message says how."""


def gather_seconds(fmt: Format) -> float:
    """The pause after a read that left its buffer room: READ bytes at most
    gather meanwhile, so the pipe never fills (a 192 kHz, 32-channel
    microphone gives 16 KiB in 0.7 ms)."""
    return min(GATHER_SECONDS, READ / fmt.bytes_per_second)


def argv_of(config: SourceConfig) -> list[str]:
    fmt = config.format
    if config.kind == "arecord":
        return ["arecord", "-q", "-D", config.alsa_device, "-t", "raw",
                "-f", _ALSA_FORMATS[fmt.width], "-r", str(fmt.rate), "-c", str(fmt.channels)]
    values = {"rate": fmt.rate, "width": fmt.width, "channels": fmt.channels}
    return [config.argv[0], *(arg.format_map(values) for arg in config.argv[1:])]


async def _read(fd: int, what: str) -> bytes:
    """What the pipe holds (b"": its end), waiting only when it holds
    nothing: after the gather pause audio is there, and this read costs no
    turn of the scheduler (trio's receive_some takes one before each read,
    a third of an idle door's turns)."""
    while True:
        try:
            return os.read(fd, READ)
        except BlockingIOError:
            pass
        with trio.move_on_after(STALL_SECONDS) as waited:
            await trio.lowlevel.wait_readable(fd)
        if waited.cancelled_caught:
            raise SourceError(f"{what}: no audio for {STALL_SECONDS:g} s")


async def _program(config: SourceConfig, deliver: Deliver) -> None:
    argv = argv_of(config)
    converter = Converter(config.format)
    gather = gather_seconds(config.format)
    tail = bytearray()
    try:
        process = await trio.lowlevel.open_process(argv, stdin=subprocess.DEVNULL,
                                                   stdout=subprocess.PIPE,
                                                   stderr=subprocess.PIPE)
    except OSError as error:
        raise SourceError(f"{argv[0]}: cannot start: {error.strerror or error}") from None

    async def keep_stderr() -> None:
        async for data in process.stderr:
            tail.extend(data)
            del tail[:-STDERR_TAIL]

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(keep_stderr)
            while True:
                data = await _read(process.stdout.fileno(), argv[0])
                if not data:
                    break
                deliver(converter.convert(data))
                if len(data) < READ:
                    await trio.sleep(gather)
                else:   # more is waiting: read on, but let the other tasks run
                    await trio.lowlevel.checkpoint()
            with trio.move_on_after(1.0):
                await process.wait()
            nursery.cancel_scope.cancel()
        said = tail.decode(errors="replace").strip().splitlines()
        raise SourceError(f"{argv[0]} exited with status {process.returncode}"
                          + (f": {said[-1]}" if said else ""))
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True), trio.move_on_after(2.0):
                await process.wait()


async def _wyoming(config: SourceConfig, deliver: Deliver) -> None:
    kind, host, port = config.address
    where = f"unix:{host}" if kind == "unix" else f"tcp://{host}:{port}"
    try:
        with trio.fail_after(CONNECT_TIMEOUT):
            stream = await (trio.open_unix_socket(host) if kind == "unix"
                            else trio.open_tcp_stream(host, port))
    except (OSError, trio.TooSlowError) as error:
        raise SourceError(f"mic server {where}: cannot connect: "
                          f"{getattr(error, 'strerror', None) or error or 'timed out'}") from None
    reader = framing.Reader()
    converter: Converter | None = None
    async with stream:
        while True:
            with trio.move_on_after(STALL_SECONDS) as waited:
                try:
                    data = await stream.receive_some(READ)
                except (OSError, trio.BrokenResourceError) as error:
                    raise SourceError(f"mic server {where}: {error}") from None
            if waited.cancelled_caught:
                raise SourceError(f"mic server {where}: no audio for {STALL_SECONDS:g} s")
            items = reader.feed(data) if data else reader.close()
            for item in items:
                if isinstance(item, framing.FramingError):
                    raise SourceError(f"mic server {where}: {item.problem.value}: "
                                      f"{item.detail}")
                if item.type != "audio-chunk":
                    continue
                fmt = Format(*(item.data.get(key) for key in PLACEHOLDERS))
                if converter is None or converter.source != fmt:
                    if not all(isinstance(v, int) for v in (fmt.rate, fmt.width, fmt.channels)) \
                            or fmt.check():
                        raise SourceError(f"mic server {where}: audio format not understood: "
                                          f"{fmt}")
                    converter = Converter(fmt)
                deliver(converter.convert(item.payload))
            if not data:
                raise SourceError(f"mic server {where} closed the connection")
            if converter is not None and len(data) < READ:
                await trio.sleep(gather_seconds(converter.source))


class Supervisor:
    """Runs the configured source for ever, restarting it with backoff."""

    def __init__(self, config: SourceConfig, deliver: Deliver) -> None:
        self.config = config
        self.deliver = deliver
        self.state = "starting"
        self.restarts = 0
        self.last_error: str | None = None
        self.since = time.monotonic()

    def _set(self, state: str) -> None:
        self.state, self.since = state, time.monotonic()

    async def run(self) -> None:
        run = _wyoming if self.config.kind == "wyoming" else _program
        delay = MIN_DELAY
        while True:
            began = trio.current_time()
            self._set("running")
            try:
                await run(self.config, self.deliver)
                error = "the source ended"
            except SourceError as failure:
                error = str(failure)
            if trio.current_time() - began >= RESET_AFTER:
                delay = MIN_DELAY
            self.last_error = error
            self.restarts += 1
            self._set("failed")
            log.warning("voice: the microphone failed (%s); restarting in %g s", error, delay)
            await trio.sleep(delay)
            delay = min(delay * 2, self.config.restart_max_delay)

    def status(self) -> dict:
        return {"kind": self.config.kind, "state": self.state,
                "seconds_in_state": round(time.monotonic() - self.since, 3),
                "restarts": self.restarts, "last_error": self.last_error}
