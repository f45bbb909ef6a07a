"""A small HTTP/1.1 server on loopback, for what the mock model server does
not do: bytes written by hand that no well-behaved server sends (an event
without an end, a drip, odd chunked bodies, a redirect, an answer of 200
MB), and a hostile Home Assistant. Used by test_hostile_held.py,
test_model_output_size.py and test_homeassistant_tool.py."""

from __future__ import annotations

import functools
import gzip
import json
import socket
import threading

from conftest import timeout

def chat_event(content: str) -> bytes:
    """One Chat Completions stream event carrying `content`."""
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


ANSWER = "held"
STREAM = chat_event(ANSWER) + b"data: [DONE]\n\n"
SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"connection: close\r\n")


@functools.cache
def gzip_bomb() -> bytes:
    """64 MiB of JSON whitespace, gzipped: about 64 KiB on the wire."""
    return gzip.compress(b" " * (64 * 1024 * 1024), compresslevel=9)


def odd_chunks(body: bytes) -> bytes:
    """`body` as chunked transfer coding at its oddest but still legal: one
    byte a chunk, sizes in upper-case hex with leading zeros, a chunk
    extension on every size, a trailer after the last chunk."""
    parts = [b"%04X;ext=\"x\"\r\n%s\r\n" % (1, body[i:i + 1]) for i in range(len(body))]
    return b"".join(parts) + b"0\r\nx-trailer: 1\r\n\r\n"


class Hostile:
    """An HTTP/1.1 server on loopback that answers each request by the first
    segment of its path (a provider's base_url is http://HOST/<behaviour>/v1)
    with bytes written by hand: what no well-behaved server sends."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests: list[str] = []
        self.bodies: list[tuple[str, bytes]] = []  # (behaviour, request body)
        self.sent: dict[str, int] = {}
        self.heads: list[str] = []  # each request's head, field names in lower case
        self.mode = ""  # what /home-assistant/... answers (_home_assistant)
        self.closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def base_url(self, behaviour: str) -> str:
        return f"{self.url}/{behaviour}/v1"

    def _serve(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            head = bytearray()
            while b"\r\n\r\n" not in head:
                data = conn.recv(65536)
                if not data:
                    return
                head += data
            header, _, body = bytes(head).partition(b"\r\n\r\n")
            lines = header.decode("latin-1").split("\r\n")
            self.heads.append("\r\n".join([lines[0]] + [
                name.lower() + ":" + value for name, _, value in
                (line.partition(":") for line in lines[1:])]))
            length = next((int(line.split(":", 1)[1]) for line in lines[1:]
                           if line.lower().startswith("content-length:")), 0)
            while len(body) < length:
                body += conn.recv(65536)
            behaviour = lines[0].split()[1].split("/")[1]
            self.requests.append(behaviour)
            self.bodies.append((behaviour, body))
            try:
                getattr(self, "_" + behaviour.replace("-", "_"))(conn)
            except OSError:  # the daemon closed the connection: what it should do
                pass

    def _count(self, behaviour: str, sent: int) -> None:
        self.sent[behaviour] = self.sent.get(behaviour, 0) + sent

    def _endless_event(self, conn: socket.socket) -> None:
        """One event of 50 MB that never ends (no blank line), then the
        connection stays open: only the daemon can end it."""
        conn.sendall(SSE_HEAD + b"\r\n" + b"data: {\"choices\":[{\"delta\":{\"content\":\"")
        block = b"x" * 65536
        for _ in range(50 * 16):
            conn.sendall(block)
            self._count("endless-event", len(block))
        self.closed.wait(timeout(30))

    def _drip(self, conn: socket.socket) -> None:
        """A valid stream, one byte a second."""
        conn.sendall(SSE_HEAD + b"\r\n")
        for byte in STREAM:
            conn.sendall(bytes([byte]))
            self._count("drip", 1)
            if self.closed.wait(1.0):
                return

    def _odd_chunked(self, conn: socket.socket) -> None:
        conn.sendall(SSE_HEAD + b"transfer-encoding: chunked\r\n\r\n" + odd_chunks(STREAM))

    def _bad_chunked(self, conn: socket.socket) -> None:
        """A chunk size that is not hex, and a chunk longer than its size."""
        conn.sendall(SSE_HEAD + b"transfer-encoding: chunked\r\n\r\nzz\r\n" + STREAM + b"\r\n")

    def _redirect(self, conn: socket.socket) -> None:
        target = self.base_url("odd-chunked") + "/chat/completions"
        conn.sendall(b"HTTP/1.1 307 Temporary Redirect\r\nlocation: " + target.encode()
                     + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")

    def _endless_text(self, conn: socket.socket) -> None:
        """A plain-text answer of 200 MB in events of 4 KiB (well within the
        stream buffer), 16 a write, sent as fast as the daemon reads: no tool
        call, nothing wrong but its size."""
        conn.sendall(SSE_HEAD + b"\r\n")
        write = chat_event("x" * 4096) * 16
        for _ in range(200 * 16):
            conn.sendall(write)
            self._count("endless-text", 16 * 4096)
        conn.sendall(b"data: [DONE]\n\n")

    def _home_assistant(self, conn: socket.socket) -> None:
        """A Home Assistant state answer by `mode`, whatever the request
        asked: "gzip-bomb" 64 KiB of gzip inflating to 64 MiB, "deep-json"
        200 000 nested arrays, "token-state" a light whose friendly name is
        the request's Authorization header."""
        encoding = b""
        if self.mode == "gzip-bomb":
            body, encoding = gzip_bomb(), b"content-encoding: gzip\r\n"
        elif self.mode == "deep-json":
            body = b"[" * 200_000 + b"]" * 200_000
        else:
            authorization = next(line.partition(":")[2].strip() for line in
                                 self.heads[-1].split("\r\n") if line.startswith("authorization:"))
            body = json.dumps({"entity_id": "light.hall", "state": "on",
                               "attributes": {"friendly_name": authorization}}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + encoding
                     + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body)

    def close(self) -> None:
        self.closed.set()
        self.listener.close()
