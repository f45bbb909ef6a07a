"""A broker that misbehaves on purpose, on a loopback socket: what Mosquitto
cannot be made to send (a QoS 2 PUBLISH on a QoS 1 subscription, a DUP
redelivery on demand, a topic that is not UTF-8). It speaks just enough
MQTT 3.1.1, written here from the standard, not with the daemon's codec:
CONNACK to a CONNECT, SUBACK to a SUBSCRIBE, PUBACK to the client's
PUBLISH, and it records every packet the client sends."""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass

from conftest import timeout


@dataclass(frozen=True)
class Packet:
    connection: int
    kind: int
    flags: int
    body: bytes

    @property
    def packet_id(self) -> int:
        return struct.unpack_from("!H", self.body)[0]

    @property
    def topic(self) -> str:
        length = struct.unpack_from("!H", self.body)[0]
        return self.body[2:2 + length].decode()

    @property
    def payload(self) -> bytes:
        length = struct.unpack_from("!H", self.body)[0]
        qos = (self.flags >> 1) & 3
        return self.body[2 + length + (2 if qos else 0):]


def publish(topic: bytes, payload: bytes, *, qos: int, packet_id: int = 0,
            dup: bool = False) -> bytes:
    body = struct.pack("!H", len(topic)) + topic
    body += struct.pack("!H", packet_id) if qos else b""
    return frame(0x30 | (0x08 if dup else 0) | qos << 1, body + payload)


def pubrel(packet_id: int) -> bytes:
    return frame(0x62, struct.pack("!H", packet_id))


def frame(first: int, body: bytes) -> bytes:
    length, n = b"", len(body)
    while True:
        n, digit = divmod(n, 128)
        length += bytes([digit | (0x80 if n else 0)])
        if not n:
            return bytes([first]) + length + body


class FakeBroker:
    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.packets: list[Packet] = []
        self.connections: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with self._lock:
                self.connections.append(conn)
                number = len(self.connections)
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        buffer = b""
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                buffer += data
                while (packet := _split(buffer)) is not None:
                    (first, body), buffer = packet
                    self._answer(conn, Packet(number, first >> 4, first & 0x0F, body))
        except OSError:
            return

    def _answer(self, conn: socket.socket, packet: Packet) -> None:
        with self._lock:
            self.packets.append(packet)
        if packet.kind == 1:  # CONNECT
            conn.sendall(bytes([0x20, 2, 0, 0]))
        elif packet.kind == 8:  # SUBSCRIBE: grant QoS 1 to each
            codes = bytes([1]) * _filters(packet.body[2:])
            conn.sendall(frame(0x90, packet.body[:2] + codes))
        elif packet.kind == 3 and (packet.flags >> 1) & 3:  # their PUBLISH, QoS 1
            conn.sendall(frame(0x40, struct.pack("!H", packet.packet_id)))
        elif packet.kind == 12:  # PINGREQ
            conn.sendall(bytes([0xD0, 0]))

    def send(self, data: bytes, connection: int = -1) -> None:
        self.connections[connection].sendall(data)

    def drop(self) -> None:
        """Close the client's connection (it reconnects)."""
        conn = self.connections[-1]
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()

    def wait(self, match, seconds: float = 30) -> Packet:
        deadline = time.monotonic() + timeout(seconds)
        while True:
            with self._lock:
                found = [p for p in self.packets if match(p)]
            if found:
                return found[0]
            assert time.monotonic() < deadline, f"no such packet; {len(self.packets)} seen"
            time.sleep(0.02)

    def published(self, topic: str) -> list[Packet]:
        with self._lock:
            return [p for p in self.packets if p.kind == 3 and p.topic == topic]

    def close(self) -> None:
        self.server.close()
        for conn in self.connections:
            conn.close()


def _split(buffer: bytes):
    """((first byte, body), the rest) of the first whole packet, or None."""
    for at in range(1, min(len(buffer), 5)):
        if not buffer[at] & 0x80:
            remaining = sum((b & 0x7F) << 7 * i for i, b in enumerate(buffer[1:at + 1]))
            end = at + 1 + remaining
            return ((buffer[0], buffer[at + 1:end]), buffer[end:]) if len(buffer) >= end \
                else None
    return None


def _filters(payload: bytes) -> int:
    count, at = 0, 0
    while at < len(payload):
        at += 2 + struct.unpack_from("!H", payload, at)[0] + 1
        count += 1
    return count
