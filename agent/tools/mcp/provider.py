"""McpServer: one configured MCP server as a tool provider
(agent/tools/base.py), kept up by a supervisor with backoff.

Its life: "idle" until the first ask that offers tools (start = "lazy") or
from the start; "starting" through the handshake and the first listing
(start_timeout bounds it, and an ask waits for it that long at most);
"ready" while it takes calls; "backoff" after it failed, for a wait that
doubles from BACKOFF_MIN to restart_max_delay (back to BACKOFF_MIN after a
connection that lasted STABLE seconds), then "starting" again.

A connection ends on whatever the server does wrong: its process exits or
closes its stdout, it breaks the protocol (protocol.Violation: not JSON,
an answer to an id never asked, ...), its HTTP endpoint fails, the
handshake does not finish in time. Every call waiting on it gets an error
result naming why, the last error (masked) shows in status, and the next
connection is made after the backoff. Nothing of it reaches the daemon's
other tasks: the daemon is unharmed.

A call: its arguments were checked against the inputSchema by the toolbox;
it waits at most `timeout`, and a call given up (timed out, or its ask
cancelled) is cancelled at the server with notifications/cancelled. The
toolbox runs at most max_concurrent calls of the server at once. Results
become text by content.render(), bounded by max_result_bytes.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping

import trio

from agent import __version__, masking
from agent.tools.base import ToolError, ToolSpec
from agent.tools.mcp import content, http, stdio
from agent.tools.mcp.config import McpConfig
from agent.tools.mcp.protocol import (Answered, Failed, Listed, McpSession, Ready, TooLarge,
                                      Violation)

log = logging.getLogger("homeagent.tools.mcp")

BACKOFF_MIN = 1.0
STABLE = 60.0            # seconds up after which a failure starts the backoff over
TIMEOUT_MARGIN = 5.0     # the toolbox's own timeout, a last resort behind the call's
MAX_SKIPPED_SHOWN = 16


class _Waiter:
    __slots__ = ("event", "text", "error")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.text: str | None = None
        self.error: str | None = None

    def done(self, text: str, is_error: bool) -> None:
        if not self.event.is_set():
            self.text, self.error = (None, text) if is_error else (text, None)
            self.event.set()


class McpServer:
    kind = "mcp"

    def __init__(self, config: McpConfig) -> None:
        self.config = config
        self.name = f"mcp {config.name}"
        self.max_concurrent = config.max_concurrent
        self.state = "idle" if config.start == "lazy" else "starting"
        self.tools: tuple[ToolSpec, ...] = ()
        self._names: dict[str, str] = {}   # our tool name -> the server's
        self._skipped: tuple[content.Skipped, ...] = ()
        self._truncated = False
        self._masker = masking.Masker(config.secrets())
        self._wanted = trio.Event()
        self._settled = trio.Event()       # this attempt got its tools, or failed
        self._session: McpSession | None = None
        self._link: Any = None
        self._waiters: dict[int, _Waiter] = {}
        self._wake = trio.Event()
        self._connection: trio.CancelScope | None = None
        self._failure: str | None = None
        self.last_error: str | None = None
        self.server = self.version = None
        self.calls = self.failed = self.timeouts = self.restarts = 0
        self._latencies = (0, 0.0, 0.0, 0.0)  # count, total, max, last (seconds)

    # ---- the provider interface ----

    def secrets(self) -> tuple[str, ...]:
        return self.config.secrets()

    def offered(self) -> tuple[ToolSpec, ...]:
        return self.tools

    def unavailable(self) -> str | None:
        if self.state == "ready":
            return None
        why = f": {self._mask(self.last_error)}" if self.last_error else ""
        return f"the MCP server {self.config.name} is not ready ({self.state}){why}"

    async def prepare(self) -> None:
        """Before an ask's request: start a lazy server, and wait (at most
        start_timeout) for one starting to list its tools."""
        if self.state == "idle":
            self.state = "starting"
            self._wanted.set()
        if self.state == "starting":
            with trio.move_on_after(self.config.start_timeout):
                await self._settled.wait()

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        session, link, tool = self._session, self._link, self._names.get(name)
        if self.state != "ready" or session is None or link is None:
            raise ToolError(self.unavailable() or f"{self.name} is not connected")
        if tool is None:
            raise ToolError(f"the MCP server {self.config.name} no longer offers {name}")
        self.calls += 1
        request_id = session.call(tool, arguments)
        waiter = self._waiters[request_id] = _Waiter()
        self._wake.set()
        began = time.monotonic()
        try:
            with trio.move_on_after(self.config.timeout):
                await waiter.event.wait()
        finally:
            if not waiter.event.is_set():  # timed out, or the ask was cancelled
                self._waiters.pop(request_id, None)
                if self._session is session:
                    session.cancel(request_id, "the call was given up")
                    link.forget(request_id)
                    self._wake.set()
        if not waiter.event.is_set():
            self.timeouts += 1
            raise ToolError(f"the MCP server {self.config.name} did not answer within "
                            f"{self.config.timeout:g} s; the call was cancelled")
        self._note_latency(time.monotonic() - began)
        if waiter.error is not None:
            self.failed += 1
            raise ToolError(waiter.error)
        return waiter.text

    # ---- the supervisor ----

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        if self.config.start == "lazy":
            await self._wanted.wait()
        delay = BACKOFF_MIN
        while True:
            began = time.monotonic()
            why = await self._attempt()
            self._down(why)
            if time.monotonic() - began >= STABLE:
                delay = BACKOFF_MIN
            await trio.sleep(delay)
            delay = min(delay * 2, self.config.restart_max_delay)
            self.restarts += 1

    async def _attempt(self) -> str:
        self.state, self._failure = "starting", None
        self._session, self._listed = McpSession(__version__), trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                self._connection = nursery.cancel_scope
                link = await nursery.start(self._transport)
                if link is None:
                    await trio.sleep_forever()  # until the transport says why
                self._link = link
                nursery.start_soon(self._writer, link)
                self._wake.set()
                with trio.move_on_after(self.config.start_timeout):
                    await self._listed.wait()
                if not self._listed.is_set():
                    self._fail(f"no handshake and tool list within "
                               f"{self.config.start_timeout:g} s")
                await trio.sleep_forever()
        except Exception as error:  # a bug here must not take the daemon down
            log.exception("%s: the connection failed", self.name)
            self._fail(f"internal error: {type(error).__name__}")
        finally:
            self._session = self._link = self._connection = None
        return self._failure or "the connection ended"

    async def _transport(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        if self.config.transport == "stdio":
            why = await stdio.run(self.config, self._receive, task_status=task_status)
        else:
            why = await http.run(self.config, self._receive, self._call_failed,
                                 lambda: self.version, task_status=task_status)
        self._fail(why)

    def _fail(self, why: str) -> None:
        if self._failure is None:
            self._failure = why
        if self._connection is not None:
            self._connection.cancel()

    def _down(self, why: str) -> None:
        self.state, self.last_error = "backoff", why
        log.warning("%s: %s; restarting it after a backoff", self.name, self._mask(why))
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            waiter.done(f"the MCP server {self.config.name} failed during the call: "
                        f"{why}; it is restarted", True)
        self._settled.set()
        self._settled = trio.Event()

    async def _writer(self, link) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            for message in self._session.outgoing():
                try:
                    await link.send(message)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self._fail("the server stopped reading its stdin")
                    return

    async def _call_failed(self, request_id: int, why: str) -> None:
        if self._session is not None:
            self._handle(self._session.abandon(request_id, why))

    async def _receive(self, item: bytes | TooLarge) -> None:
        session = self._session
        if session is None or self._failure is not None:
            return  # what a server says after breaking the protocol is not believed
        self._handle(session.too_large(item.head, item.limit) if isinstance(item, TooLarge)
                     else session.receive_bytes(item))
        self._wake.set()  # a listing's next page, a ping's answer

    def _handle(self, events) -> None:
        for event in events:
            if isinstance(event, Answered):
                waiter = self._waiters.pop(event.request_id, None)
                if waiter is not None:
                    waiter.done(*content.render(event.result, self.config.max_result_bytes))
            elif isinstance(event, Failed):
                waiter = self._waiters.pop(event.request_id, None)
                if waiter is not None:
                    waiter.done(f"the MCP server {self.config.name}: {event.message}", True)
            elif isinstance(event, Listed):
                self._listed_tools(event)
            elif isinstance(event, Ready):
                self.version, self.server = event.version, event.server
                self._link.listen()
            elif isinstance(event, Violation):
                self._fail(f"it broke the protocol: {event.why}")

    def _listed_tools(self, listed: Listed) -> None:
        self.tools, self._names, self._skipped = content.catalog(
            self.config.name, listed.tools, self.config.allow, self.config.deny,
            self.config.timeout + TIMEOUT_MARGIN)
        self._truncated = listed.truncated
        for skipped in self._skipped:
            log.warning("%s: tool %s is not offered: %s", self.name, skipped.tool, skipped.why)
        if self.state != "ready":
            log.info("%s: ready (%s, protocol %s), %d tools", self.name,
                     self.server or "unnamed", self.version, len(self.tools))
        self.state = "ready"
        self._listed.set()
        self._settled.set()

    # ---- status ----

    def _note_latency(self, seconds: float) -> None:
        count, total, most, _ = self._latencies
        self._latencies = (count + 1, total + seconds, max(most, seconds), seconds)

    def _mask(self, text: str) -> str:
        return self._masker.mask(masking.mask(text))

    def status(self) -> dict[str, Any]:
        count, total, most, last = self._latencies
        return {"name": self.config.name, "kind": self.kind,
                "transport": self.config.transport, "state": self.state,
                "where": self.config.url if self.config.url else self.config.argv[0],
                "pid": getattr(self._link, "pid", None), "server": self.server,
                "protocol_version": self.version,
                "tools": [tool.name for tool in self.tools],
                "skipped": [{"tool": s.tool, "why": self._mask(s.why)}
                            for s in self._skipped[:MAX_SKIPPED_SHOWN]],
                "truncated": self._truncated,
                "last_error": self._mask(self.last_error) if self.last_error else None,
                "calls": self.calls, "failed": self.failed, "timeouts": self.timeouts,
                "restarts": self.restarts, "in_flight": len(self._waiters),
                "latency_ms": {"last": round(last * 1000, 1),
                               "mean": round(total / count * 1000, 1) if count else 0.0,
                               "max": round(most * 1000, 1)}}
