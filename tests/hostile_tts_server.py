"""A hostile Wyoming TTS server for the tests, run as its own process on a
Unix socket: it answers `describe` like any server, then answers each
`synthesize` with what no sound server sends.

    python hostile_tts_server.py PATH --rate R --width W --channels C --bytes N [--no-stop]
                                 [--sent FILE]

Each synthesize gets audio-start with the claimed format, N bytes of audio
in chunks of CHUNK bytes (as fast as the reader takes them) and audio-stop,
unless --no-stop: then it sends no audio-stop and keeps the connection open,
silent. --sent FILE holds the bytes of audio sent so far (rewritten at
every MiB), so a test knows when the reader has stopped taking them. Plain sockets and threads, so that nothing of the daemon's own
framing is used against itself.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import threading

CHUNK = 64 * 1024


def event(kind: str, data: dict | None = None, payload: bytes = b"") -> bytes:
    header = {"type": kind, "version": "1.5.0"}
    body = json.dumps(data).encode() if data else b""
    if body:
        header["data_length"] = len(body)
    if payload:
        header["payload_length"] = len(payload)
    return json.dumps(header).encode() + b"\n" + body + payload


def headers(conn: socket.socket):
    """The types of the events the peer sends (their data and payload skipped)."""
    with conn.makefile("rb") as peer:
        while line := peer.readline():
            header = json.loads(line)
            peer.read(header.get("data_length", 0) + header.get("payload_length", 0))
            yield header["type"]


def serve(conn: socket.socket, args) -> None:
    fmt = {"rate": args.rate, "width": args.width, "channels": args.channels}
    chunk = event("audio-chunk", fmt, b"\x01" * CHUNK)
    try:
        for kind in headers(conn):
            if kind == "describe":
                conn.sendall(event("info", {"tts": [{"name": "hostile",
                                                     "supports_synthesize_streaming": False}]}))
            elif kind == "synthesize":
                conn.sendall(event("audio-start", fmt))
                if args.sent:
                    with open(args.sent, "w") as sent:
                        sent.write("0")
                for n in range(1, args.bytes // CHUNK + 1):
                    conn.sendall(chunk)
                    if args.sent and n % 16 == 0:
                        with open(args.sent, "w") as sent:
                            sent.write(str(n * CHUNK))
                if args.no_stop:
                    threading.Event().wait()  # silent, the connection kept open
                conn.sendall(event("audio-stop"))
    except OSError:
        pass
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--rate", type=int, default=22050)
    parser.add_argument("--width", type=int, default=2)
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument("--bytes", type=int, default=CHUNK)
    parser.add_argument("--no-stop", action="store_true")
    parser.add_argument("--sent")
    args = parser.parse_args()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(args.path + ".new")
    listener.listen()
    os.rename(args.path + ".new", args.path)  # there once it accepts
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn, args), daemon=True).start()


if __name__ == "__main__":
    main()
