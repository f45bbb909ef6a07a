"""Helpers shared by the tests (h11's tests/helpers.py is the model)."""

from __future__ import annotations

import subprocess
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
