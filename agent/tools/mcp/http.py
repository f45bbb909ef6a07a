"""An MCP server over streamable HTTP: each message a POST, each answer a
JSON body or an event stream. The trio shell around protocol.SseParser.

Every POST carries `Accept: application/json, text/event-stream`, the
config's headers, the bearer token, the `Mcp-Session-Id` the server gave at
initialize, and `MCP-Protocol-Version` once it is negotiated. An answer is
read in pieces and bounded: a JSON body or an event's data past the message
bound is dropped unread (its head kept to find the call it answers). Bodies
are asked for in identity encoding; an encoded one is refused. A 404 once
a session exists means the server forgot it: the connection ends (and is
made again). A call whose POST fails fails alone; any other message whose
POST fails ends the connection. Redirects are not followed. When the
connection ends (the daemon stops, or the server broke it), a session the
server gave is ended with a DELETE.
"""

from __future__ import annotations

from typing import Awaitable, Callable

import httpx
import trio

from agent.tools.mcp.config import McpConfig
from agent.tools.mcp.protocol import HEAD_BYTES, SseParser, TooLarge, frame

CONNECT_TIMEOUT = 10.0
END_SESSION_TIMEOUT = 2.0   # the DELETE that ends a session, at stop


class HttpLink:
    def __init__(self, config: McpConfig, client: httpx.AsyncClient, nursery: trio.Nursery,
                 on_item: Callable[[bytes | TooLarge], Awaitable[None]],
                 on_call_failed: Callable[[int, str], Awaitable[None]],
                 version: Callable[[], str | None]) -> None:
        self.config, self.client, self.nursery = config, client, nursery
        self.on_item, self.on_call_failed, self.version = on_item, on_call_failed, version
        self.session_id: str | None = None
        self.ended: str | None = None
        self._posts: dict[int, trio.CancelScope] = {}  # a call's id -> its POST

    pid = None

    async def send(self, message: dict) -> None:
        scope = trio.CancelScope()
        if message.get("method") == "tools/call":
            self._posts[message["id"]] = scope
        self.nursery.start_soon(self._post, message, scope)

    def forget(self, request_id: int) -> None:
        """A call given up: its POST (an event stream, maybe) ends."""
        scope = self._posts.pop(request_id, None)
        if scope is not None:
            scope.cancel()

    def listen(self) -> None:
        """Once initialized: the stream of what the server says unasked
        (notifications/tools/list_changed), if it offers one."""
        self.nursery.start_soon(self._listen)

    async def _listen(self) -> None:
        headers = {"accept": "text/event-stream", "accept-encoding": "identity",
                   "mcp-protocol-version": self.version() or ""}
        if self.session_id is not None:
            headers["mcp-session-id"] = self.session_id
        try:
            async with self.client.stream("GET", self.config.url, headers=headers) as response:
                kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if response.status_code != 200 or kind != "text/event-stream":
                    return  # 405: the server has no such stream; list changes go unheard
                parser = SseParser(self.config.max_message_bytes)
                async for data in response.aiter_raw():
                    for item in parser.feed(data):
                        await self.on_item(item)
        except httpx.HTTPError:
            pass  # the calls' own requests say whether the server is gone

    def _end(self, why: str) -> None:
        if self.ended is None:
            self.ended = why
        self.nursery.cancel_scope.cancel()

    async def _post(self, message: dict, scope: trio.CancelScope) -> None:
        call_id = message["id"] if message.get("method") == "tools/call" else None
        headers = {"accept": "application/json, text/event-stream",
                   "content-type": "application/json", "accept-encoding": "identity"}
        if self.session_id is not None:
            headers["mcp-session-id"] = self.session_id
        if self.version() is not None:
            headers["mcp-protocol-version"] = self.version()
        with scope:
            try:
                async with self.client.stream("POST", self.config.url, content=frame(message),
                                              headers=headers) as response:
                    why = await self._answer(message, response)
            except httpx.TimeoutException:
                why = f"no answer from {self.config.url} within {CONNECT_TIMEOUT:g} s"
            except httpx.HTTPError as error:
                why = f"cannot reach {self.config.url}: {type(error).__name__}"
            finally:
                if call_id is not None:
                    self._posts.pop(call_id, None)
            if why is None:
                return
            if call_id is not None and self.ended is None:
                await self.on_call_failed(call_id, why)
            else:
                self._end(why)

    async def _answer(self, message: dict, response: httpx.Response) -> str | None:
        """None when the answer was read; why not otherwise."""
        status = response.status_code
        if message.get("method") == "initialize":
            self.session_id = response.headers.get("mcp-session-id")
        if status == 404 and self.session_id is not None:
            self._end("the server no longer knows the session (404)")
            return None
        if status == 202:
            return None
        if status != 200:
            return f"HTTP {status} {response.reason_phrase} from {self.config.url}"
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":
            return f"an answer in {encoding!r} encoding, which was not asked for"
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind == "text/event-stream":
            parser = SseParser(self.config.max_message_bytes)
            async for data in response.aiter_raw():
                for item in parser.feed(data):
                    await self.on_item(item)
            return None
        if kind == "application/json":
            await self.on_item(await _body(response, self.config.max_message_bytes))
            return None
        if "id" in message:
            return f"an answer of type {kind or 'none'!r}, neither JSON nor an event stream"
        return None


async def _body(response: httpx.Response, limit: int) -> bytes | TooLarge:
    """The body, or TooLarge once it passes the limit (the rest unread)."""
    body = bytearray()
    async for data in response.aiter_raw():
        body += data
        if len(body) > limit:
            return TooLarge(bytes(body[:HEAD_BYTES]), limit)
    return bytes(body)


async def run(config: McpConfig, on_item, on_call_failed, version,
              task_status=trio.TASK_STATUS_IGNORED) -> str:
    """Open the client, hand back the HttpLink, keep it until a message's
    answer ends the connection; return why."""
    headers = dict(config.headers)
    if config.token:
        headers["authorization"] = f"Bearer {config.token}"
    timeout = httpx.Timeout(CONNECT_TIMEOUT, read=None)  # a call's own timeout governs
    async with httpx.AsyncClient(headers=headers, timeout=timeout,
                                 follow_redirects=False) as client:
        link = None
        try:
            async with trio.open_nursery() as nursery:
                link = HttpLink(config, client, nursery, on_item, on_call_failed, version)
                task_status.started(link)
                await trio.sleep_forever()
        finally:
            if link is not None and link.session_id is not None:
                await _end_session(client, config.url, link.session_id, version())
    return link.ended or "the connection ended"


async def _end_session(client: httpx.AsyncClient, url: str, session_id: str,
                       protocol_version: str | None) -> None:
    """Tell the server the session is over (a DELETE, as the specification
    asks of a client that leaves), bounded and shielded: the daemon may be
    stopping. A server that refuses or is gone changes nothing."""
    headers = {"mcp-session-id": session_id, "mcp-protocol-version": protocol_version or ""}
    with trio.CancelScope(shield=True), trio.move_on_after(END_SESSION_TIMEOUT):
        try:
            await client.delete(url, headers=headers)
        except httpx.HTTPError:
            pass
