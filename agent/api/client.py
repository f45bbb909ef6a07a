"""A blocking client of the socket API, for the CLI and the demo: a plain
socket and json, so a one-shot command starts fast (no trio, no httpx, no C
core: wire.py and the core's replies.py are as light).

    with Client(path) as client:
        for reply in client.request("ask", prompt="Hello"):
            ...   # started, delta..., then done or error

request() yields the replies to its id up to the one that ends it;
send() and replies() split it, for a caller that needs the id (to cancel).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
from typing import Any, Iterator

from agent.api.wire import FINAL, FINAL_DEFAULT
from agent.core.replies import Error, Shutdown
from agent.jsonline import dump_line

DEFAULT_SOCKET = "/run/homeagent/agent.sock"


def default_socket() -> str:
    return os.environ.get("HOMEAGENT_SOCKET") or DEFAULT_SOCKET


class DaemonUnavailable(Exception):
    """No daemon at the socket: str() says so and how to start one."""


class ConnectionLost(Exception):
    """The daemon closed the connection before the request ended."""


class Client:
    def __init__(self, path: str, timeout: float | None = None) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            self._sock.close()
            raise DaemonUnavailable(
                f"the daemon is not running: nothing answers at {path} ({exc.strerror}). "
                "Start it with `systemctl start homeagent` or `homeagent serve`, or pass "
                "--socket") from None
        except PermissionError:
            self._sock.close()
            raise DaemonUnavailable(f"no permission to connect to {path}: the socket is for "
                                    "the daemon's group (see `homeagent status` as root)") from None
        self._file = self._sock.makefile("rb")
        self._ids = itertools.count(1)
        hello = self._read()
        if hello.get("type") == Error.type:
            raise DaemonUnavailable(f"the daemon refused the connection: {hello.get('message')}")
        self.hello = hello

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()
        self._sock.close()

    def send(self, op: str, **args: Any) -> int:
        request_id = next(self._ids)
        # A lone surrogate (undecodable bytes in argv) goes escaped; the
        # daemon then names the problem.
        self._sock.sendall(dump_line({"id": request_id, "op": op, **args}))
        return request_id

    def request(self, op: str, **args: Any) -> Iterator[dict[str, Any]]:
        return self.replies(self.send(op, **args), op)

    def replies(self, request_id: int, op: str) -> Iterator[dict[str, Any]]:
        final = FINAL.get(op, FINAL_DEFAULT)
        while True:
            reply = self._read()
            if reply.get("id") not in (request_id, None):
                continue  # the reply to an earlier request (a cancel's "ok")
            yield reply
            if reply.get("type") in final or reply.get("type") == Shutdown.type:
                return

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        """A request answered by one reply."""
        *_, last = self.request(op, **args)
        return last

    def _read(self) -> dict[str, Any]:
        line = self._file.readline()
        if not line.endswith(b"\n"):
            raise ConnectionLost(f"the daemon closed the connection at {self.path}")
        return json.loads(line)
