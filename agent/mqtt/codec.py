"""MQTT 3.1.1, sans-IO: packets to bytes, bytes to packets (OASIS MQTT
3.1.1, section 2 and 3). What a client that publishes at QoS 0 and 1 and
receives at QoS 0, 1 and 2 needs: CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC,
PUBREL, PUBCOMP, SUBSCRIBE, SUBACK, PINGREQ, PINGRESP, DISCONNECT. The
session's state (packet ids, what is in flight, keepalive) is session.py's.

Why in-tree: docs/mqtt.md. The decoder holds at most max_packet bytes of
one packet; a PUBLISH larger than that is not kept but still reported
(Oversized, with its topic and packet id, so it can be acknowledged and
named), any other packet over it, or a malformed one, is a ProtocolError:
the connection is then closed.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

PROTOCOL_LEVEL = 4  # 3.1.1
MAX_REMAINING = 268_435_455  # what the four-byte length can say

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, PINGREQ, PINGRESP, DISCONNECT = 8, 9, 12, 13, 14

REFUSALS = {1: "unacceptable protocol version", 2: "client identifier rejected",
            3: "server unavailable", 4: "bad user name or password", 5: "not authorized"}


class Problem(enum.StrEnum):
    MALFORMED = "malformed_packet"
    TOO_LARGE = "packet_too_large"
    UNEXPECTED = "unexpected_packet"


class ProtocolError(Exception):
    def __init__(self, problem: Problem, detail: str) -> None:
        super().__init__(f"{problem.value}: {detail}")
        self.problem = problem


@dataclass(frozen=True, slots=True)
class Will:
    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = True


# ---- what the broker sends ----

@dataclass(frozen=True, slots=True)
class ConnAck:
    session_present: bool
    return_code: int  # 0: accepted; REFUSALS names the rest


@dataclass(frozen=True, slots=True)
class Publish:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    packet_id: int | None = None
    dup: bool = False


@dataclass(frozen=True, slots=True)
class Oversized:
    """A PUBLISH over max_packet, its payload skipped. topic is None when
    even the topic did not fit (or was not UTF-8)."""
    topic: str | None
    qos: int
    packet_id: int | None
    size: int
    retain: bool = False
    dup: bool = False


@dataclass(frozen=True, slots=True)
class PubAck:
    packet_id: int


@dataclass(frozen=True, slots=True)
class PubRel:
    """The broker releases a QoS 2 message it sent (we answer PUBCOMP)."""
    packet_id: int


@dataclass(frozen=True, slots=True)
class SubAck:
    packet_id: int
    return_codes: tuple[int, ...]  # granted QoS, 0x80 refused


@dataclass(frozen=True, slots=True)
class PingResp:
    pass


# ---- encoding ----

def _length(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _string(text: str) -> bytes:
    return _bytes(text.encode("utf-8"))


def _bytes(data: bytes) -> bytes:
    if len(data) > 0xFFFF:
        raise ValueError("a string field holds at most 65535 bytes")
    return struct.pack("!H", len(data)) + data


def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + _length(len(body)) + body


def connect(client_id: str, keepalive: int, clean_session: bool, *,
            username: str | None = None, password: str | None = None,
            will: Will | None = None) -> bytes:
    flags = (0x02 if clean_session else 0)
    payload = _string(client_id)
    if will is not None:
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
        payload += _string(will.topic) + _bytes(will.payload)
    if username is not None:
        flags |= 0x80
        payload += _string(username)
        if password is not None:
            flags |= 0x40
            payload += _string(password)
    header = _string("MQTT") + bytes([PROTOCOL_LEVEL, flags]) + struct.pack("!H", keepalive)
    return _packet(CONNECT << 4, header + payload)


def publish(topic: str, payload: bytes, *, qos: int = 0, retain: bool = False,
            packet_id: int | None = None, dup: bool = False) -> bytes:
    first = PUBLISH << 4 | (0x08 if dup else 0) | qos << 1 | (0x01 if retain else 0)
    body = _string(topic) + (struct.pack("!H", packet_id) if qos else b"") + payload
    return _packet(first, body)


def puback(packet_id: int) -> bytes:
    return _packet(PUBACK << 4, struct.pack("!H", packet_id))


def pubrec(packet_id: int) -> bytes:
    """A QoS 2 message received (and handled once); the broker then sends PUBREL."""
    return _packet(PUBREC << 4, struct.pack("!H", packet_id))


def pubcomp(packet_id: int) -> bytes:
    return _packet(PUBCOMP << 4, struct.pack("!H", packet_id))


def subscribe(packet_id: int, topics: list[tuple[str, int]]) -> bytes:
    body = struct.pack("!H", packet_id) + b"".join(_string(t) + bytes([q]) for t, q in topics)
    return _packet(SUBSCRIBE << 4 | 0x02, body)


def pingreq() -> bytes:
    return bytes([PINGREQ << 4, 0])


def disconnect() -> bytes:
    return bytes([DISCONNECT << 4, 0])


# ---- decoding ----

class Decoder:
    """Bytes from the broker in, packets out, holding at most max_packet
    bytes of a packet (and 64 KiB more for an oversized PUBLISH's topic)."""

    def __init__(self, max_packet: int) -> None:
        self.max_packet = max_packet
        self._buffer = bytearray()
        self._skipping = 0  # bytes of an oversized packet still to drop

    def feed(self, data: bytes) -> list:
        """The whole packets data completes; raises ProtocolError."""
        if self._skipping:
            dropped = min(self._skipping, len(data))
            self._skipping -= dropped
            data = data[dropped:]
        self._buffer += data
        packets = []
        while True:
            packet = self._next()
            if packet is None:
                return packets
            packets.append(packet)
            if self._skipping:
                return packets  # the rest of the buffer was the skipped body

    def _next(self):
        buffer = self._buffer
        if len(buffer) < 2:
            return None
        remaining, shift, at = 0, 0, 1
        while True:
            if at >= len(buffer):
                return None
            if at > 4:
                raise ProtocolError(Problem.MALFORMED, "the remaining length has more than "
                                    "four bytes")
            digit = buffer[at]
            remaining |= (digit & 0x7F) << shift
            shift += 7
            at += 1
            if not digit & 0x80:
                break
        first = buffer[0]
        kind = first >> 4
        if remaining > self.max_packet:
            if kind != PUBLISH:
                raise ProtocolError(Problem.TOO_LARGE, f"a packet of type {kind} has "
                                    f"{remaining} bytes, more than {self.max_packet}")
            return self._oversized(first, at, remaining)
        if len(buffer) < at + remaining:
            return None
        body = bytes(buffer[at:at + remaining])
        del buffer[:at + remaining]
        return _decode(first, body)

    def _oversized(self, first: int, at: int, remaining: int):
        """The head of an oversized PUBLISH (its topic and id), its body dropped."""
        qos = (first >> 1) & 0x03
        buffer = self._buffer
        if len(buffer) < at + 2:
            return None
        topic_length = struct.unpack_from("!H", buffer, at)[0]
        head = 2 + topic_length + (2 if qos else 0)
        if head > remaining:
            raise ProtocolError(Problem.MALFORMED, "a PUBLISH's topic is longer than the packet")
        if len(buffer) < at + head:
            return None
        try:
            topic = bytes(buffer[at + 2:at + 2 + topic_length]).decode("utf-8")
        except UnicodeDecodeError:
            topic = None
        packet_id = struct.unpack_from("!H", buffer, at + head - 2)[0] if qos else None
        have = len(buffer) - at
        if have >= remaining:
            del buffer[:at + remaining]
        else:
            self._skipping = remaining - have
            buffer.clear()
        return Oversized(topic, qos, packet_id, remaining, bool(first & 0x01), bool(first & 0x08))


def _decode(first: int, body: bytes):
    kind, flags = first >> 4, first & 0x0F
    try:
        if kind == PUBLISH:
            qos = (flags >> 1) & 0x03
            if qos == 3:
                raise ProtocolError(Problem.MALFORMED, "a PUBLISH of QoS 3")
            topic_length = struct.unpack_from("!H", body)[0]
            topic = body[2:2 + topic_length].decode("utf-8")
            at = 2 + topic_length
            packet_id = None
            if qos:
                packet_id = struct.unpack_from("!H", body, at)[0]
                at += 2
            if at > len(body):
                raise ProtocolError(Problem.MALFORMED, "a PUBLISH shorter than its header")
            return Publish(topic, body[at:], qos, bool(flags & 0x01), packet_id,
                           bool(flags & 0x08))
        if kind == CONNACK and len(body) == 2:
            return ConnAck(bool(body[0] & 0x01), body[1])
        if kind == PUBACK and len(body) == 2:
            return PubAck(struct.unpack("!H", body)[0])
        if kind == PUBREL and len(body) == 2 and flags == 0x02:
            return PubRel(struct.unpack("!H", body)[0])
        if kind == SUBACK and len(body) >= 3:
            return SubAck(struct.unpack_from("!H", body)[0], tuple(body[2:]))
        if kind == PINGRESP and not body:
            return PingResp()
    except (struct.error, UnicodeDecodeError) as error:
        raise ProtocolError(Problem.MALFORMED, f"packet type {kind}: {error}") from None
    if kind in (CONNACK, PUBACK, PUBREL, SUBACK, PINGRESP):
        raise ProtocolError(Problem.MALFORMED, f"packet type {kind} of {len(body)} bytes")
    raise ProtocolError(Problem.UNEXPECTED, f"packet type {kind} from a broker")
