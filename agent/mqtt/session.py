"""The MQTT 3.1.1 session of one client, sans-IO: no socket, no clock (every
time is passed in). The trio shell (service.py) opens connections, hands
the broker's bytes to receive() and the clock to tick(), and does what
comes back: Send (bytes for the broker), Deliver (a message for the door),
Lost (why the connection is over), Connected, SubscriptionRefused.

It outlives its connections (clean session off: the broker keeps its half,
this object the other) and owns:

- the packet ids: one counter, skipping the ids still in use;
- our QoS 1 messages in flight, in the order sent, at most `window`:
  a PUBACK frees one; at a reconnect those not acknowledged are sent again
  first, DUP set, with their packet ids (those marked again=False, sent anew
  at every connect, are forgotten instead);
- the keepalive: a PINGREQ every keepalive/2, and the connection lost when
  the broker has been silent for 1.5 keepalives;
- the inbound QoS: QoS 0 delivered; QoS 1 delivered then PUBACK, and a DUP
  redelivery of a message already delivered (same packet id, topic and
  payload, recent) acknowledged but not delivered again; QoS 2 delivered
  once at its first PUBLISH, PUBREC for it and every redelivery until the
  PUBREL, which gets PUBCOMP (OASIS MQTT 3.1.1, 4.3.3, method B).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

from agent.mqtt import codec

WINDOW = 32          # of ours sent and not yet acknowledged
REMEMBERED = 256     # QoS 1 messages delivered whose DUP redelivery is recognised
AWAITING_RELEASE = 1024  # QoS 2 messages received, waiting for their PUBREL
SILENCE = 1.5        # keepalives without a byte from the broker: the connection is lost
PING = 0.5           # keepalives between PINGREQs


# ---- what the shell is told to do ----

@dataclass(frozen=True, slots=True)
class Send:
    """Bytes for the broker, to write in this order."""
    data: bytes


@dataclass(frozen=True, slots=True)
class Deliver:
    """A message from the broker for the door, once."""
    packet: codec.Publish | codec.Oversized


@dataclass(frozen=True, slots=True)
class Connected:
    """The broker took the CONNECT; session_present: it kept our session."""
    session_present: bool


@dataclass(frozen=True, slots=True)
class SubscriptionRefused:
    """The SUBACK refused a subscription (a return code 0x80): for the log."""
    return_codes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Lost:
    """The connection is over: reason says why, for the log and status."""
    reason: str


class Outgoing(NamedTuple):
    """One of our QoS 1 messages in flight."""
    topic: str
    payload: bytes
    retain: bool
    again: bool  # sent again (DUP) after a reconnect, or forgotten then


class Session:
    def __init__(self, connect: bytes, subscriptions: list[tuple[str, int]], *,
                 keepalive: float, max_packet: int, window: int = WINDOW) -> None:
        self._connect = connect
        self._subscriptions = subscriptions
        self.keepalive = keepalive
        self.max_packet = max_packet
        self.window = window
        self._next_id = 0
        self.in_flight: OrderedDict[int, Outgoing] = OrderedDict()
        self._delivered: OrderedDict[int, bytes] = OrderedDict()  # QoS 1 id -> fingerprint
        self._awaiting_release: OrderedDict[int, None] = OrderedDict()  # QoS 2 ids
        self.duplicates = 0  # redeliveries acknowledged and not delivered again
        self.connected = False
        self.last_heard = 0.0
        self._decoder: codec.Decoder | None = None
        self._next_ping = 0.0

    # ---- the connection ----

    def open(self, now: float) -> bytes:
        """A new connection: the CONNECT to send first."""
        self._decoder = codec.Decoder(self.max_packet)
        self.connected = False
        self.last_heard = now
        return self._connect

    def closed(self) -> None:
        """The connection is gone; what was in flight waits for the next one."""
        self.connected = False
        self._decoder = None
        for packet_id in [i for i, message in self.in_flight.items() if not message.again]:
            del self.in_flight[packet_id]

    @property
    def room(self) -> int:
        """How many more of ours may be sent now."""
        return max(0, self.window - len(self.in_flight)) if self.connected else 0

    def publish(self, topic: str, payload: bytes, *, retain: bool = False,
                again: bool = True) -> bytes:
        """One QoS 1 message of ours, in flight from now: a drop while it is
        being sent loses nothing."""
        packet_id = self._packet_id()
        self.in_flight[packet_id] = Outgoing(topic, payload, retain, again)
        return codec.publish(topic, payload, qos=1, retain=retain, packet_id=packet_id)

    def _packet_id(self) -> int:
        if len(self.in_flight) >= 0xFFFF:
            raise RuntimeError("every packet id is in flight")
        while True:
            self._next_id = self._next_id % 0xFFFF + 1
            if self._next_id not in self.in_flight:
                return self._next_id

    # ---- time ----

    def deadline(self) -> float:
        """When tick() wants to be called next."""
        return self._next_ping

    def tick(self, now: float) -> list:
        if not self.connected or now < self._next_ping:
            return []
        silent = now - self.last_heard
        if silent > self.keepalive * SILENCE:
            return [Lost(f"nothing from the broker for {self.keepalive * SILENCE:g} s")]
        self._next_ping = now + self.keepalive * PING
        return [Send(codec.pingreq())]

    # ---- the broker's bytes ----

    def receive(self, data: bytes, now: float) -> list:
        """The actions for data from the broker, in order; a Lost ends them."""
        if self._decoder is None:
            raise RuntimeError("receive() without an open connection")
        if not data:
            return [Lost("the broker closed the connection" if self.connected
                         else "the broker closed the connection before its CONNACK")]
        self.last_heard = now
        try:
            packets = self._decoder.feed(data)
        except codec.ProtocolError as error:
            return [Lost(str(error))]
        actions: list = []
        for packet in packets:
            actions += self._packet(packet, now)
            if actions and isinstance(actions[-1], Lost):
                break
        return actions

    def _packet(self, packet, now: float) -> list:
        if not self.connected:
            return self._connack(packet, now)
        if isinstance(packet, (codec.Publish, codec.Oversized)):
            return self._publish(packet)
        if isinstance(packet, codec.PubAck):
            self.in_flight.pop(packet.packet_id, None)
        elif isinstance(packet, codec.PubRel):
            self._awaiting_release.pop(packet.packet_id, None)
            return [Send(codec.pubcomp(packet.packet_id))]
        elif isinstance(packet, codec.ConnAck):
            return [Lost(f"{codec.Problem.UNEXPECTED.value}: a second CONNACK")]
        elif isinstance(packet, codec.SubAck) and 0x80 in packet.return_codes:
            return [SubscriptionRefused(packet.return_codes)]
        return []

    def _connack(self, packet, now: float) -> list:
        if not isinstance(packet, codec.ConnAck):
            return [Lost(f"{codec.Problem.UNEXPECTED.value}: no CONNACK first")]
        if packet.return_code:
            return [Lost("connection refused: " + codec.REFUSALS.get(
                packet.return_code, f"code {packet.return_code}"))]
        self.connected = True
        self._next_ping = now + self.keepalive * PING
        # Ours unacknowledged when the last connection dropped go first, with
        # their ids: what the shell publishes after them is newer.
        head = [codec.subscribe(self._packet_id(), self._subscriptions),
                *(codec.publish(m.topic, m.payload, qos=1, retain=m.retain, packet_id=i,
                                dup=True) for i, m in self.in_flight.items())]
        return [Send(b"".join(head)), Connected(packet.session_present)]

    def _publish(self, packet: codec.Publish | codec.Oversized) -> list:
        packet_id = packet.packet_id
        if packet.qos == 0 or packet_id is None:
            return [Deliver(packet)]
        if packet.qos == 1:
            fingerprint = _fingerprint(packet)
            seen = self._delivered.pop(packet_id, None)
            self._delivered[packet_id] = fingerprint
            if len(self._delivered) > REMEMBERED:
                self._delivered.popitem(last=False)
            if packet.dup and seen == fingerprint:
                self.duplicates += 1
                return [Send(codec.puback(packet_id))]
            return [Deliver(packet), Send(codec.puback(packet_id))]
        if packet_id in self._awaiting_release:
            self.duplicates += 1
            return [Send(codec.pubrec(packet_id))]
        if len(self._awaiting_release) >= AWAITING_RELEASE:
            return [Lost(f"{codec.Problem.UNEXPECTED.value}: more than {AWAITING_RELEASE} "
                         "QoS 2 messages without their PUBREL")]
        self._awaiting_release[packet_id] = None
        return [Deliver(packet), Send(codec.pubrec(packet_id))]


def _fingerprint(packet: codec.Publish | codec.Oversized) -> bytes:
    """What a redelivery repeats exactly: the topic and the payload (its size
    for an oversized one, whose payload was never kept)."""
    body = packet.payload if isinstance(packet, codec.Publish) else str(packet.size).encode()
    return hashlib.blake2b(repr(packet.topic).encode() + b"\0" + body, digest_size=16).digest()
