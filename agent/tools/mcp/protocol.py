"""The client side of the Model Context Protocol, sans-IO: JSON-RPC 2.0
messages in, events out, the messages to send queued in order.

    session = McpSession()           # queues initialize
    session.outgoing()               # [{"jsonrpc": "2.0", "id": 1, "method": "initialize", ...}]
    session.receive_bytes(line)      # [Ready(...)]; notifications/initialized and
                                     # tools/list are queued; then [Listed(tools)]
    request_id = session.call("add", {"a": 1})
    session.receive_bytes(line)      # [Answered(request_id, result)] or [Failed(...)]

What it keeps: the ids it asked and what each was for (the pending table),
the negotiated protocol version, the listing in progress (its pages, its
cursor), and the ids of calls cancelled lately, whose late answers are
dropped as the spec says. What it does on its own: offers the newest
handshake version and accepts any of SUPPORTED_VERSIONS the server picks,
follows tools/list's nextCursor for at most MAX_PAGES pages and MAX_TOOLS
tools, lists again on notifications/tools/list_changed (once more after a
listing in progress), answers the server's ping, and answers any other
request of the server (sampling, roots, elicitation: capabilities it never
declared) with "method not found".

A message that breaks the protocol is a Violation naming what it was: not
JSON, not JSON-RPC 2.0, an answer to an id never asked, a batch, an
initialize answer without a version it speaks. The shell ends the
connection on it; the session is not used again.

Transports: frame() and Framer for stdio's newline-delimited JSON,
SseParser for a streamable-HTTP answer that is an event stream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from agent import jsonline
from agent.jsontypes import is_type
from agent.lines import LineReader, LineTooLong
from agent.stream.jsonscan import JSONError, loads

CLIENT_NAME = "homeagent"
LATEST_VERSION = "2025-11-25"
SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MAX_PAGES = 16          # tools/list pages followed per listing
MAX_TOOLS = 128         # tools kept of one server
MAX_CANCELLED = 64      # ids of cancelled calls whose late answers are dropped
HEAD_BYTES = 256        # of a message too large, kept to find the id it answers
METHOD_NOT_FOUND = -32601
_SHOWN = 80             # characters of a peer's value in a message


# ---- events ----

@dataclass(frozen=True, slots=True)
class Ready:
    """The initialize handshake is done."""
    version: str
    server: str                 # serverInfo name and version, as the server says
    tools_change: bool          # it declared tools.listChanged


@dataclass(frozen=True, slots=True)
class Listed:
    """A whole listing: every page followed (or MAX_PAGES / MAX_TOOLS reached)."""
    tools: tuple[Mapping[str, Any], ...]   # the server's tool objects, each a dict
    truncated: bool


@dataclass(frozen=True, slots=True)
class Answered:
    request_id: int
    result: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Failed:
    """A call the server answered with a JSON-RPC error, or whose answer
    was too large to read."""
    request_id: int
    message: str


@dataclass(frozen=True, slots=True)
class Violation:
    """The server broke the protocol: the connection cannot be trusted."""
    why: str


Event = Ready | Listed | Answered | Failed | Violation


# ---- the session ----

class McpSession:
    def __init__(self, client_version: str = "0") -> None:
        self.version: str | None = None  # negotiated
        self._next_id = 1
        self._pending: dict[int, str] = {}  # id -> "initialize" | "tools/list" | "tools/call"
        self._cancelled: list[int] = []
        self._outbox: list[dict] = []
        self._pages: list[Mapping[str, Any]] = []
        self._page_count = 0
        self._listing = False
        self._list_again = False
        self._request("initialize", {
            "protocolVersion": LATEST_VERSION, "capabilities": {},
            "clientInfo": {"name": CLIENT_NAME, "version": client_version}})

    # -- what the shell asks --

    def outgoing(self) -> list[dict]:
        """The messages to send, in order; each is handed out once."""
        out, self._outbox = self._outbox, []
        return out

    def call(self, name: str, arguments: Mapping[str, Any]) -> int:
        if self.version is None:
            raise RuntimeError("tools/call before the handshake")
        return self._request("tools/call", {"name": name, "arguments": dict(arguments)})

    def cancel(self, request_id: int, reason: str) -> None:
        """Forget a call (its late answer is dropped) and tell the server."""
        if self._pending.pop(request_id, None) is None:
            return
        self._cancelled = (self._cancelled + [request_id])[-MAX_CANCELLED:]
        self._outbox.append(_notification("notifications/cancelled",
                                          {"requestId": request_id, "reason": reason}))

    def abandon(self, request_id: int, why: str) -> list[Event]:
        """A call whose request could not be delivered (its POST failed)."""
        if self._pending.get(request_id) != "tools/call":
            return []
        del self._pending[request_id]
        return [Failed(request_id, why)]

    # -- what the server sent --

    def receive_bytes(self, data: bytes) -> list[Event]:
        """One whole JSON-RPC message (a line of stdio, a JSON body, an SSE event's data)."""
        try:
            message = loads(data)
        except JSONError as error:
            return [Violation(f"a message that is not JSON ({error}): {_show_bytes(data)}")]
        return self.receive(message)

    def too_large(self, head: bytes, limit: int) -> list[Event]:
        """A message over the limit, dropped unread but for its head: the call
        it answers, found by the id at its head where every SDK writes it,
        fails; without one the connection cannot go on."""
        found = _HEAD_ID.match(head)
        request_id = int(found[1]) if found else None
        if request_id is not None and self._pending.get(request_id) == "tools/call":
            del self._pending[request_id]
            return [Failed(request_id, f"the answer was over {limit} bytes and was dropped")]
        return [Violation(f"a message over {limit} bytes that answers no call")]

    def receive(self, message: Any) -> list[Event]:
        if isinstance(message, list):
            return [Violation("a JSON-RPC batch (no protocol version since 2025-06-18 "
                              "has them)")]
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return [Violation(f"a message that is not JSON-RPC 2.0: {_show(message)}")]
        method = message.get("method")
        if method is not None:
            if not isinstance(method, str):
                return [Violation(f"a method that is not a string: {_show(method)}")]
            if "id" in message:
                return self._server_request(message["id"], method)
            return self._notification(method)
        if "id" not in message or not ("result" in message) ^ ("error" in message):
            return [Violation(f"neither a request, a notification nor an answer: "
                              f"{_show(message)}")]
        return self._answer(message["id"], message)

    # -- inside --

    def _request(self, method: str, params: Mapping[str, Any]) -> int:
        request_id = self._next_id
        self._next_id += 1
        self._pending[request_id] = method
        self._outbox.append({"jsonrpc": "2.0", "id": request_id, "method": method,
                             "params": params})
        return request_id

    def _server_request(self, request_id: Any, method: str) -> list[Event]:
        if not (is_type(request_id, int) or isinstance(request_id, str)):
            return [Violation(f"a request id that is neither a number nor a string: "
                              f"{_show(request_id)}")]
        if method == "ping":
            self._outbox.append({"jsonrpc": "2.0", "id": request_id, "result": {}})
        else:
            self._outbox.append({"jsonrpc": "2.0", "id": request_id, "error": {
                "code": METHOD_NOT_FOUND, "message": f"{CLIENT_NAME} does not offer "
                                                     f"{method[:_SHOWN]}"}})
        return []

    def _notification(self, method: str) -> list[Event]:
        if method == "notifications/tools/list_changed" and self.version is not None:
            if self._listing:
                self._list_again = True
            else:
                self._list_tools(None)
        # Others (progress, log messages, resources) are nothing the tools need.
        return []

    def _answer(self, request_id: Any, message: Mapping[str, Any]) -> list[Event]:
        method = self._pending.pop(request_id, None) if is_type(request_id, int) else None
        if method is None:
            if request_id in self._cancelled:
                return []
            return [Violation(f"an answer to id {_show(request_id)}, which was never asked "
                              "or was answered already")]
        if "error" in message:
            error = message["error"]
            if not (isinstance(error, dict) and is_type(error.get("code"), int)
                    and isinstance(error.get("message"), str)):
                return [Violation(f"an error that is not a JSON-RPC error: {_show(error)}")]
            why = f"error {error['code']}: {error['message']}"
            if method == "tools/call":
                return [Failed(request_id, why)]
            return [Violation(f"{method} failed ({why})")]
        result = message["result"]
        if not isinstance(result, dict):
            return [Violation(f"a {method} result that is not an object: {_show(result)}")]
        if method == "initialize":
            return self._initialized(result)
        if method == "tools/list":
            return self._page(result)
        return [Answered(request_id, result)]

    def _initialized(self, result: Mapping[str, Any]) -> list[Event]:
        version = result.get("protocolVersion")
        if version not in SUPPORTED_VERSIONS:
            return [Violation(f"the server speaks protocol version {_show(version)}; this "
                              f"client speaks {', '.join(SUPPORTED_VERSIONS)}")]
        capabilities = result.get("capabilities")
        if not isinstance(capabilities, dict):
            return [Violation("an initialize result without capabilities")]
        tools = capabilities.get("tools")
        info = result.get("serverInfo") if isinstance(result.get("serverInfo"), dict) else {}
        server = " ".join(str(info[key])[:_SHOWN] for key in ("name", "version")
                          if isinstance(info.get(key), str) and info[key])
        self.version = version
        self._outbox.append(_notification("notifications/initialized", None))
        self._list_tools(None)
        return [Ready(version, server, isinstance(tools, dict)
                      and tools.get("listChanged") is True)]

    def _list_tools(self, cursor: str | None) -> None:
        if cursor is None:
            self._pages, self._page_count, self._listing = [], 0, True
        self._page_count += 1
        self._request("tools/list", {} if cursor is None else {"cursor": cursor})

    def _page(self, result: Mapping[str, Any]) -> list[Event]:
        tools, cursor = result.get("tools"), result.get("nextCursor")
        if not isinstance(tools, list) or not (cursor is None or isinstance(cursor, str)):
            return [Violation("a tools/list result without a list of tools")]
        self._pages += [tool for tool in tools if isinstance(tool, dict)]
        more = cursor is not None and cursor != ""
        truncated = more and (self._page_count >= MAX_PAGES or len(self._pages) >= MAX_TOOLS)
        if more and not truncated:
            self._list_tools(cursor)
            return []
        listed = Listed(tuple(self._pages[:MAX_TOOLS]), truncated or len(self._pages) > MAX_TOOLS)
        self._pages, self._listing = [], False
        if self._list_again:
            self._list_again = False
            self._list_tools(None)
        return [listed]


def _notification(method: str, params: Mapping[str, Any] | None) -> dict:
    message: dict = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


# The id of an answer as SDKs write it: after "jsonrpc", before the result.
_HEAD_ID = re.compile(rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(\d{1,15})\s*,')


def _show(value: Any) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= _SHOWN else text[:_SHOWN - 1] + "…"


def _show_bytes(data: bytes) -> str:
    return _show(bytes(data[:_SHOWN]).decode("utf-8", "replace"))


# ---- stdio: newline-delimited JSON ----

def frame(message: Mapping[str, Any]) -> bytes:
    """One message as stdio sends it: compact JSON, one line."""
    return jsonline.dump_line(message)


@dataclass(frozen=True, slots=True)
class TooLarge:
    head: bytes
    limit: int


class Framer:
    """A stdio server's bytes in, each message's bytes (or TooLarge with the
    head of a line past the limit, whose rest is skipped as it arrives) out:
    memory stays within the limit. Blank lines are passed over. The lines
    are agent/lines.py's, fed one line's piece at a time so that the head
    kept is the head of the line a LineTooLong is about."""

    def __init__(self, limit: int) -> None:
        self._lines = LineReader(limit)
        self._head = bytearray()

    def feed(self, data: bytes) -> list[bytes | TooLarge]:
        out: list[bytes | TooLarge] = []
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            end = len(data) if end < 0 else end + 1
            piece = data[start:end]
            self._head += piece[:HEAD_BYTES - len(self._head)]
            for item in self._lines.feed(piece):
                if isinstance(item, LineTooLong):
                    out.append(TooLarge(bytes(self._head), item.limit))
                elif item.data.strip():
                    out.append(item.data)
            if piece.endswith(b"\n"):
                self._head.clear()
            start = end
        return out


# ---- streamable HTTP: an answer that is an event stream ----

class SseParser:
    """text/event-stream bytes in, the data of each message event out. A
    line or an event's data past the limit drops the event whole (TooLarge
    with its head, when the event ends). Comments, ids and retry are passed
    over: the client does not resume streams."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._line = bytearray()
        self._skipping_line = False
        self._after_cr = False        # a "\r" ended the last line: a "\n" next belongs to it
        self._data = bytearray()
        self._event = b"message"
        self._dropped: TooLarge | None = None

    def feed(self, data: bytes) -> list[bytes | TooLarge]:
        out: list[bytes | TooLarge] = []
        for start, end, ending in _lines(data):
            if self._after_cr and start == end == 0 and ending == b"\n":
                self._after_cr = False
                continue
            self._after_cr = ending == b"\r"
            piece = data[start:end]
            if not self._skipping_line:
                if len(self._line) + len(piece) > self.limit:
                    head = bytes(self._line[:HEAD_BYTES]) + piece[:HEAD_BYTES]
                    field, colon, value = head.partition(b":")
                    self._drop(value.removeprefix(b" ") if field == b"data" and colon else head)
                    self._line.clear()
                    self._skipping_line = True
                else:
                    self._line += piece
            if ending:
                if not self._skipping_line:
                    self._field(bytes(self._line), out)
                self._line.clear()
                self._skipping_line = False
        return out

    def _drop(self, head: bytes) -> None:
        if self._dropped is None:
            self._dropped = TooLarge(head[:HEAD_BYTES], self.limit)
        self._data.clear()

    def _field(self, line: bytes, out: list) -> None:
        if not line:  # the event ends
            if self._dropped is not None:
                out.append(self._dropped)
            elif self._data and self._event == b"message":
                out.append(bytes(self._data[:-1]))  # without the last data line's "\n"
            self._data.clear()
            self._event, self._dropped = b"message", None
            return
        name, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if name == b"data" and self._dropped is None:
            if len(self._data) + len(value) + 1 > self.limit:
                self._drop(bytes(self._data[:HEAD_BYTES]) + value[:HEAD_BYTES])
            else:
                self._data += value + b"\n"
        elif name == b"event":
            self._event = value


def _lines(data: bytes):
    """(start, end, ending) of each piece of data up to a line ending
    ("\r\n", "\r" or "\n"), the last one's ending b"" when it is cut."""
    start = 0
    while start < len(data):
        match = _ENDING.search(data, start)
        if match is None:
            yield start, len(data), b""
            return
        ending = match[0]
        yield start, match.start(), b"\n" if ending == b"\r\n" else ending
        start = match.end()


_ENDING = re.compile(rb"\r\n|\r|\n")
