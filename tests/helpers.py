"""Helpers shared by the tests (h11's tests/helpers.py is the model)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import trio

from conftest import timeout


def of_type(replies: list[dict], kind: str) -> list[dict]:
    """The replies (socket API objects) of one type, in order."""
    return [r for r in replies if r["type"] == kind]


async def until(condition, seconds: float = 5) -> None:
    """Wait, polling, until condition() holds; fail after `seconds` (scaled)."""
    with trio.fail_after(timeout(seconds)):
        while not condition():
            await trio.sleep(0.005)


def listening(sock: Path) -> bool:
    """A server accepts connections on the Unix socket sock. Its file
    appears at bind, before listen: a connect in between is refused."""
    with socket.socket(socket.AF_UNIX) as probe:
        return probe.connect_ex(str(sock)) == 0


def spawn_listening(argv: list[str], sock: Path) -> subprocess.Popen:
    """A peer program run by this interpreter with the tests' import path,
    returned once it accepts connections on sock; killed if it exits first
    or is not listening within timeout(20)."""
    process = subprocess.Popen([sys.executable, *argv],
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    deadline = time.monotonic() + timeout(20)
    try:
        while not listening(sock):
            assert process.poll() is None, f"{argv[0]} exited with {process.returncode}"
            assert time.monotonic() < deadline, f"{argv[0]} is not listening on {sock}"
            time.sleep(0.02)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return process


def make_certificates(directory: Path, ca_name: str = "homeagent test CA") -> None:
    """A throwaway CA (ca.pem, ca.key) and a server certificate for 127.0.0.1
    and localhost signed by it (server.pem, server.key), made with openssl."""
    def run(*argv: str) -> None:
        subprocess.run(argv, check=True, capture_output=True, cwd=directory)

    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", f"/CN={ca_name}", "-keyout", "ca.key", "-out", "ca.pem")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "server.key", "-out", "server.csr")
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem")


def asked(key: int, session: str = "s-1", client: int = 1, request_id=1):
    """The Origin of a socket client's ask, with the center's key `key`."""
    from agent.core.commands import Door, Origin

    return Origin(Door.SOCKET, key, request_id, session, client=client)


def delivery(kind: str, origin, text: str | None = None, **fields):
    """A Delivery of the reply class a device's `events` setting calls
    kind, with text and the reply's other fields (defaults where it has any)."""
    from agent.core import replies
    from agent.core.deliveries import KINDS, Delivery

    defaults = {replies.Started: {"session": "s-1", "provider": "p", "model": "m"},
                replies.Done: {"session": "s-1", "finish_reason": "stop",
                               "raw_finish_reason": None, "usage": None, "text": "",
                               "steps": 1, "attempts": 1},
                replies.Error: {"code": replies.ErrorCode.INTERRUPTED, "message": ""},
                replies.ToolCall: {"call_id": "c", "name": "t", "arguments": {}},
                replies.ToolResult: {"call_id": "c", "name": "t", "content": "",
                                     "is_error": False}}
    cls = KINDS[kind]
    values = {**defaults.get(cls, {}), **fields}
    if text is not None:
        values["text"] = text
    return Delivery(cls(**values), origin)


class _DevicePrompts:
    """A runner for a real Center in the device tests: an ask from a device
    (session device-NAME) calls ask(NAME, prompt); it answers nothing."""

    def __init__(self, ask) -> None:
        self._ask = ask

    async def ask(self, prompt, session, provider, emit, stop) -> None:
        await self._ask(session.removeprefix("device-"), prompt)


class _States:
    """A listener of the center that hands each device state to on_state."""

    def __init__(self, on_state) -> None:
        self._on_state = on_state

    async def deliver(self, reply, origin) -> None:
        pass

    def notice(self, reply) -> None:
        self._on_state(reply)


def center_for(hub=None, ask=None, on_state=None):
    """A real Center for the device hub's tests: the hub's speech, the
    devices' prompts to ask(device, text), their states to on_state(reply)."""
    from agent.core.center import Center

    async def refuse(device: str, text: str) -> None:
        raise AssertionError(f"unexpected prompt from {device}: {text!r}")

    center = Center(_DevicePrompts(ask or refuse))
    center.speech = hub
    if on_state is not None:
        center.add_listener(_States(on_state))
    if hub is not None:
        center.add_listener(hub)
    return center
