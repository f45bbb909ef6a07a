"""An MCP server as a child process: JSON-RPC lines on its stdin and
stdout, its stderr to the log. The trio shell around protocol.Framer.

The program is started from its argv (never a shell), in its own process
group, with the config's environment added to the daemon's and its working
directory. Its stdout is read in bounded pieces (a line past the message
bound is skipped as it comes); its stderr is cut into lines of at most
STDERR_LINE bytes, of which STDERR_LINES per STDERR_INTERVAL reach the log
(the rest counted), and the last one is kept for the error when the server
ends. When the connection ends the process is asked to leave (stdin
closed), then its group is killed.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from typing import Awaitable, Callable

import trio

from agent.lines import Line, LineReader
from agent.tools.mcp.config import McpConfig
from agent.tools.mcp.protocol import Framer, TooLarge, frame

log = logging.getLogger("homeagent.tools.mcp")

READ_BYTES = 65536
STDERR_LINE = 512
STDERR_LINES = 20         # lines logged per interval
STDERR_INTERVAL = 60.0
EXIT_GRACE = 2.0          # seconds to leave after stdin closes


class StdioLink:
    """What the provider sends through: one message a line, in order."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.last_stderr = ""
        self._writing = trio.Lock()

    @property
    def pid(self) -> int:
        return self.process.pid

    async def send(self, message: dict) -> None:
        async with self._writing:
            await self.process.stdin.send_all(frame(message))

    def forget(self, request_id: int) -> None:
        """Nothing to end: an answer still coming is dropped by the session."""

    def listen(self) -> None:
        """Nothing to open: notifications come on stdout with the answers."""


async def run(config: McpConfig, on_item: Callable[[bytes | TooLarge], Awaitable[None]],
              task_status=trio.TASK_STATUS_IGNORED) -> str:
    """Start the server, hand back its StdioLink, feed on_item every
    message until its stdout ends; return why it ended."""
    env = {**os.environ, **config.env}
    try:
        process = await trio.lowlevel.open_process(
            list(config.argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=env, cwd=config.cwd, start_new_session=True)
    except OSError as error:
        task_status.started(None)
        return f"cannot start {config.argv[0]}: {error.strerror or error}"
    link = StdioLink(process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stderr, config.name, process, link)
            task_status.started(link)
            framer = Framer(config.max_message_bytes)
            while True:
                data = await process.stdout.receive_some(READ_BYTES)
                if not data:
                    break
                for item in framer.feed(data):
                    await on_item(item)
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            status = await _end(process)
    last = f": {link.last_stderr}" if link.last_stderr else ""
    return f"the server closed its stdout ({_exit(status)}){last}"


async def _stderr(name: str, process: trio.Process, link: StdioLink) -> None:
    lines = LineReader(STDERR_LINE)
    logged, dropped, since = 0, 0, time.monotonic()
    while True:
        data = await process.stderr.receive_some(READ_BYTES)
        if not data:
            return
        for item in lines.feed(data):
            text = item.data.decode("utf-8", "replace") if isinstance(item, Line) \
                else f"(a line over {STDERR_LINE} bytes, not shown)"
            link.last_stderr = text[:200]
            now = time.monotonic()
            if now - since >= STDERR_INTERVAL:
                if dropped:
                    log.info("mcp %s: %d more lines of stderr were not logged", name, dropped)
                logged, dropped, since = 0, 0, now
            if logged < STDERR_LINES:
                logged += 1
                log.info("mcp %s stderr: %s", name, text)
            else:
                dropped += 1


async def _end(process: trio.Process) -> int:
    """Its exit status; what it started in its group is killed too (the
    group's id is not reused while one of them lives)."""
    if process.stdin is not None:
        await process.stdin.aclose()
    status = None
    with trio.move_on_after(EXIT_GRACE):
        status = await process.wait()
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return status if status is not None else await process.wait()


def _exit(status: int) -> str:
    if status < 0:
        return f"killed by {signal.Signals(-status).name}"
    return f"exit status {status}"
