"""The MQTT session machine alone (agent/mqtt/session.py): bytes in,
actions out, every time passed in. The broker's packets are written here
byte by byte (OASIS MQTT 3.1.1), not with the daemon's codec."""

from __future__ import annotations

import struct

from hypothesis import given, settings, strategies as st

from agent.mqtt import codec
from agent.mqtt.session import (AWAITING_RELEASE, REMEMBERED, Connected, Deliver, Lost, Send,
                                Session, SubscriptionRefused)

CONNECT = b"CONNECT-BYTES"
KEEPALIVE = 10


def connack(code: int = 0, present: bool = False) -> bytes:
    return bytes([0x20, 2, int(present), code])


def puback(packet_id: int) -> bytes:
    return bytes([0x40, 2]) + struct.pack("!H", packet_id)


def pubrel(packet_id: int) -> bytes:
    return bytes([0x62, 2]) + struct.pack("!H", packet_id)


def publish(topic: bytes, payload: bytes, qos: int = 1, packet_id: int = 1,
            dup: bool = False) -> bytes:
    body = struct.pack("!H", len(topic)) + topic
    body += struct.pack("!H", packet_id) if qos else b""
    body += payload
    return bytes([0x30 | (0x08 if dup else 0) | qos << 1, len(body)]) + body


def new(**options) -> Session:
    return Session(CONNECT, [("a/ask", 2)], keepalive=KEEPALIVE, max_packet=1024, **options)


def online(session: Session, now: float = 0.0) -> list:
    assert session.open(now) == CONNECT
    return session.receive(connack(), now)


def sent(actions: list) -> bytes:
    return b"".join(a.data for a in actions if isinstance(a, Send))


def delivered(actions: list) -> list:
    return [a.packet for a in actions if isinstance(a, Deliver)]


def test_connect_then_subscribe_then_connected():
    session = new()
    actions = online(session)
    assert session.connected
    assert actions == [Send(codec.subscribe(1, [("a/ask", 2)])), Connected(False)]


def test_a_refused_connack_and_a_packet_before_it_lose_the_connection():
    session = new()
    session.open(0)
    assert session.receive(connack(code=5), 0) == [Lost("connection refused: not authorized")]
    session.open(1)
    assert session.receive(puback(1), 1) == [Lost("unexpected_packet: no CONNACK first")]
    session.open(2)
    assert session.receive(b"", 2) == [
        Lost("the broker closed the connection before its CONNACK")]
    assert not session.connected and session.room == 0


def test_a_second_connack_and_a_malformed_packet_lose_the_connection():
    session = new()
    online(session)
    assert session.receive(connack(), 1) == [Lost("unexpected_packet: a second CONNACK")]
    online(session)
    [lost] = session.receive(bytes([0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]), 1)
    assert isinstance(lost, Lost) and lost.reason.startswith("malformed_packet")
    online(session)
    assert session.receive(b"", 1) == [Lost("the broker closed the connection")]


def test_packet_ids_skip_those_in_flight_and_wrap():
    session = new(window=70000)
    online(session)  # the SUBSCRIBE took id 1
    first = session.publish("t", b"x")
    assert first == codec.publish("t", b"x", qos=1, packet_id=2)
    session._next_id = 0xFFFF - 1
    assert session.publish("t", b"y") == codec.publish("t", b"y", qos=1, packet_id=0xFFFF)
    # wrapped: 1 is free again, 2 is still in flight
    assert session.publish("t", b"z") == codec.publish("t", b"z", qos=1, packet_id=1)
    assert session.publish("t", b"w") == codec.publish("t", b"w", qos=1, packet_id=3)


def test_the_window_fills_and_a_puback_frees_one():
    session = new(window=2)
    assert session.room == 0  # not connected
    online(session)
    session.publish("t", b"1")
    session.publish("t", b"2")
    assert session.room == 0
    assert session.receive(puback(2), 1) == []
    assert session.room == 1 and list(session.in_flight) == [3]
    session.receive(puback(99), 1)  # not ours: ignored
    assert session.room == 1


def test_unacknowledged_messages_go_again_first_in_order_with_dup_after_reconnect():
    session = new()
    online(session)
    session.publish("t/state", b"idle", retain=True, again=False)  # sent anew at a connect
    session.publish("t/answer", b"one")
    session.publish("t/answer", b"two", retain=True)
    session.receive(puback(3), 1)  # "one" acknowledged
    session.closed()
    assert list(session.in_flight) == [4]
    session.open(5)
    actions = session.receive(connack(present=True), 5)
    assert actions == [Send(codec.subscribe(5, [("a/ask", 2)]) + codec.publish(
        "t/answer", b"two", qos=1, retain=True, packet_id=4, dup=True)), Connected(True)]


def test_keepalive_pings_every_half_and_loses_a_silent_broker():
    session = new()
    online(session, now=100)
    assert session.deadline() == 105
    assert session.tick(104) == []
    assert session.tick(105) == [Send(codec.pingreq())]
    assert session.deadline() == 110
    session.receive(bytes([0xD0, 0]), 109)  # PINGRESP: heard
    assert session.tick(110) == [Send(codec.pingreq())]
    assert session.tick(115) == [Send(codec.pingreq())]
    assert session.tick(124.5) == [Lost("nothing from the broker for 15 s")]
    session.closed()
    assert session.tick(1000) == []


def test_qos0_is_delivered_and_not_acknowledged():
    session = new()
    online(session)
    actions = session.receive(publish(b"a/ask", b"{}", qos=0), 1)
    assert actions == [Deliver(codec.Publish("a/ask", b"{}", 0))]


def test_qos1_is_delivered_then_acknowledged_and_a_dup_redelivery_only_acknowledged():
    session = new()
    online(session)
    first = session.receive(publish(b"a/ask", b'{"text": "hi"}', packet_id=7), 1)
    assert delivered(first) == [codec.Publish("a/ask", b'{"text": "hi"}', 1, False, 7)]
    assert sent(first) == codec.puback(7)
    assert isinstance(first[0], Deliver)  # handled before it is acknowledged
    session.closed()
    online(session, 2)  # the PUBACK was lost with the connection: the broker sends it again
    again = session.receive(publish(b"a/ask", b'{"text": "hi"}', packet_id=7, dup=True), 3)
    assert again == [Send(codec.puback(7))] and session.duplicates == 1


def test_a_reused_packet_id_is_a_new_message():
    session = new()
    online(session)
    session.receive(publish(b"a/ask", b"one", packet_id=7), 1)
    # the broker had our PUBACK and reused 7: no DUP, or another payload
    assert delivered(session.receive(publish(b"a/ask", b"two", packet_id=7), 2))
    assert delivered(session.receive(publish(b"a/ask", b"three", packet_id=7, dup=True), 3))
    # a DUP of a message never seen is delivered
    assert delivered(session.receive(publish(b"a/ask", b"four", packet_id=8, dup=True), 4))
    assert session.duplicates == 0


def test_qos2_is_delivered_once_until_its_pubrel():
    session = new()
    online(session)
    first = session.receive(publish(b"a/ask", b"x", qos=2, packet_id=9), 1)
    assert delivered(first) == [codec.Publish("a/ask", b"x", 2, False, 9)]
    assert sent(first) == codec.pubrec(9)
    session.closed()
    online(session, 2)  # the PUBREC was lost: the broker sends it again, DUP
    again = session.receive(publish(b"a/ask", b"x", qos=2, packet_id=9, dup=True), 3)
    assert again == [Send(codec.pubrec(9))]
    assert session.receive(pubrel(9), 4) == [Send(codec.pubcomp(9))]
    # released: the id may now carry a new message
    assert delivered(session.receive(publish(b"a/ask", b"y", qos=2, packet_id=9), 5))


def test_too_many_qos2_without_pubrel_lose_the_connection():
    session = new()
    online(session)
    for packet_id in range(1, AWAITING_RELEASE + 1):
        session.receive(publish(b"a/ask", b"x", qos=2, packet_id=packet_id), 1)
    [lost] = session.receive(publish(b"a/ask", b"x", qos=2, packet_id=AWAITING_RELEASE + 1), 1)
    assert isinstance(lost, Lost)


def test_an_oversized_publish_with_a_topic_that_is_not_utf8_is_delivered_and_acknowledged():
    session = Session(CONNECT, [], keepalive=KEEPALIVE, max_packet=16)
    online(session)
    actions = session.receive(publish(b"a/\xff\xfe", b"x" * 100, packet_id=4), 1)
    [packet] = delivered(actions)
    assert isinstance(packet, codec.Oversized) and packet.topic is None
    assert sent(actions) == codec.puback(4)


def test_a_refused_subscription_is_said():
    session = new()
    online(session)
    suback = bytes([0x90, 3]) + struct.pack("!H", 1) + b"\x80"
    assert session.receive(suback, 1) == [SubscriptionRefused((0x80,))]


def test_remembered_deliveries_are_bounded():
    session = new()
    online(session)
    for packet_id in range(1, REMEMBERED + 2):
        session.receive(publish(b"a/ask", b"x", packet_id=packet_id), 1)
    assert len(session._delivered) == REMEMBERED
    # the oldest is forgotten: its DUP is delivered (at least once, never lost)
    assert delivered(session.receive(publish(b"a/ask", b"x", packet_id=1, dup=True), 2))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.sampled_from([1, 2]), st.booleans(),
                          st.sampled_from([b"a", b"b"]), st.booleans()), max_size=60),
       st.integers(1, 64))
def test_any_split_and_any_redelivery_deliver_each_message_once(steps, cut):
    """Each (id, qos, dup, payload, release) step: a PUBLISH, then maybe
    its PUBREL; the bytes fed in pieces of any size. A message is
    delivered at most once while its redelivery could be pending, and every
    QoS 1 or 2 PUBLISH is answered."""
    session = new()
    online(session)
    wire = b""
    expected_acks = 0
    for packet_id, qos, dup, payload, release in steps:
        wire += publish(b"a/ask", payload, qos=qos, packet_id=packet_id, dup=dup)
        expected_acks += 1
        if qos == 2 and release:
            wire += pubrel(packet_id)
    actions = []
    for at in range(0, len(wire), cut):
        actions += session.receive(wire[at:at + cut], 1)
    answered = [a.data[0] for a in actions if isinstance(a, Send) and a.data[0] in (0x40, 0x50)]
    assert len(answered) == expected_acks
    assert not any(isinstance(a, Lost) for a in actions)
    # the model: QoS 2 once until its PUBREL; QoS 1 unless a DUP repeating
    # the last message delivered on its id
    waiting: set[int] = set()
    last: dict[int, bytes] = {}
    expected = []
    for packet_id, qos, dup, payload, release in steps:
        if qos == 2:
            if packet_id not in waiting:
                expected.append((packet_id, payload))
                waiting.add(packet_id)
            if release:
                waiting.discard(packet_id)
        else:
            if not (dup and last.get(packet_id) == payload):
                expected.append((packet_id, payload))
            last[packet_id] = payload
    assert [(p.packet_id, p.payload) for p in delivered(actions)] == expected
