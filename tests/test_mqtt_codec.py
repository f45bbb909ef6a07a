"""The sans-IO parts of the MQTT board: the 3.1.1 codec (agent/mqtt/codec.py)
and the payloads and outgoing messages (agent/mqtt/messages.py). The real
broker's side is tests/test_mqtt_daemon.py."""

from __future__ import annotations

import json

import pytest

from agent.core import replies
from agent.mqtt import codec, messages
from agent.mqtt.messages import PayloadError
from agent.mqtt.topics import Topics


def test_connect_bytes_are_the_specification_s():
    packet = codec.connect("b1", 60, clean_session=False, username="user",
                           password="password", will=codec.Will("a/avail", b"offline"))
    # fixed header, "MQTT" level 4, flags: user, password, will retain, will QoS 1, will
    assert packet[0] == 0x10
    body = packet[2:]
    assert body[:7] == b"\x00\x04MQTT\x04" and body[7] == 0x80 | 0x40 | 0x20 | 0x08 | 0x04
    assert body[8:10] == b"\x00\x3c"
    assert body[10:] == (b"\x00\x02b1" b"\x00\x07a/avail" b"\x00\x07offline"
                         b"\x00\x04user" b"\x00\x08password")
    assert codec.connect("b1", 5, clean_session=True)[9] == 0x02


def test_publish_subscribe_and_the_small_packets():
    assert codec.publish("t", b"x", qos=1, retain=True, packet_id=7) \
        == b"\x33\x06\x00\x01t\x00\x07x"
    assert codec.publish("t", b"", qos=0) == b"\x30\x03\x00\x01t"
    assert codec.subscribe(2, [("a/#", 1)]) == b"\x82\x08\x00\x02\x00\x03a/#\x01"
    assert codec.puback(258) == b"\x40\x02\x01\x02"
    assert codec.pingreq() == b"\xc0\x00" and codec.disconnect() == b"\xe0\x00"


def test_remaining_length_of_several_bytes_round_trips():
    payload = b"p" * 200_000
    packet = codec.publish("big/topic", payload, qos=1, packet_id=9)
    decoder = codec.Decoder(300_000)
    assert decoder.feed(packet) == [codec.Publish("big/topic", payload, 1, False, 9)]


def test_packets_split_anywhere_and_joined_decode_the_same():
    stream = (b"\x20\x02\x01\x00" + codec.publish("a", b"one", qos=1, packet_id=1)
              + b"\x40\x02\x00\x05" + b"\x90\x03\x00\x01\x01" + b"\xd0\x00"
              + codec.publish("b", b"two", retain=True))
    expected = [codec.ConnAck(True, 0), codec.Publish("a", b"one", 1, False, 1),
                codec.PubAck(5), codec.SubAck(1, (1,)), codec.PingResp(),
                codec.Publish("b", b"two", 0, True, None)]
    assert codec.Decoder(1024).feed(stream) == expected
    for cut in range(1, len(stream)):
        decoder = codec.Decoder(1024)
        assert decoder.feed(stream[:cut]) + decoder.feed(stream[cut:]) == expected
    decoder = codec.Decoder(1024)
    assert [p for byte in stream for p in decoder.feed(bytes([byte]))] == expected


def test_an_oversized_publish_is_skipped_but_named_with_its_id():
    big = codec.publish("in/ask", b"x" * 5000, qos=1, packet_id=42)
    after = codec.publish("in/ask", b"ok", qos=1, packet_id=43)
    expected = [codec.Oversized("in/ask", 1, 42, len(big) - 3),
                codec.Publish("in/ask", b"ok", 1, False, 43)]
    assert codec.Decoder(1000).feed(big + after) == expected
    for cut in (1, 3, 8, 100, len(big) - 1, len(big) + 2):
        decoder = codec.Decoder(1000)
        data = big + after
        assert decoder.feed(data[:cut]) + decoder.feed(data[cut:]) == expected


@pytest.mark.parametrize("data, problem", [
    (b"\x30\xff\xff\xff\xff\x01", codec.Problem.MALFORMED),        # five length bytes
    (b"\x90\xe8\x07" + b"\x00" * 1000, codec.Problem.TOO_LARGE),    # a SUBACK over the bound
    (b"\x20\x03\x00\x00\x00", codec.Problem.MALFORMED),             # a CONNACK of 3 bytes
    (b"\x36\x05\x00\x01t\x00\x01", codec.Problem.MALFORMED),        # QoS 3
    (b"\x32\x03\x00\x01t", codec.Problem.MALFORMED),                # QoS 1 without its id
    (b"\x30\x04\x00\x05ab", codec.Problem.MALFORMED),               # topic past the packet
    (b"\x30\x04\x00\x02\xff\xfe", codec.Problem.MALFORMED),         # topic not UTF-8
    (b"\x10\x00", codec.Problem.UNEXPECTED),                        # a CONNECT from a broker
])
def test_malformed_packets_are_named(data, problem):
    with pytest.raises(codec.ProtocolError) as caught:
        codec.Decoder(100).feed(data)
    assert caught.value.problem is problem


# ---- payloads ----

def test_valid_payloads_become_commands():
    assert messages.parse("ask", b'{"text": "hi", "session": "s", "id": "1", '
                          b'"speak_on": "hall"}', 100) == messages.Ask("hi", "s", "1", "hall")
    assert messages.parse("announce", b'{"text": "dinner"}', 100) == messages.Announce("dinner")
    assert messages.parse("stop", b"{}", 100) == messages.Stop()
    assert messages.parse("stop", b'{"session": "k"}', 100) == messages.Stop("k")


@pytest.mark.parametrize("kind, payload, code", [
    ("ask", b"", PayloadError.EMPTY),
    ("ask", b'{"text": "' + b"x" * 100 + b'"}', PayloadError.TOO_LARGE),
    ("ask", b'{"text": "\xc3"}', PayloadError.INVALID_UTF8),
    ("ask", b'{"text": "\\ud800"}', PayloadError.INVALID_UTF8),
    ("ask", b'{"text": "a",}', PayloadError.INVALID_JSON),
    ("ask", b"NaN", PayloadError.INVALID_JSON),
    ("ask", b'"text"', PayloadError.NOT_AN_OBJECT),
    ("ask", b'{"text": ["a"]}', PayloadError.BAD_FIELD),
    ("ask", b'{"text": "a", "id": ""}', PayloadError.BAD_FIELD),
    ("ask", b'{"text": "a", "speak_on": "Hall/2"}', PayloadError.BAD_FIELD),
    ("ask", b'{"text": "\\n "}', PayloadError.BAD_FIELD),
    ("ask", b'{"session": "s"}', PayloadError.MISSING_FIELD),
    ("ask", b'{"text": "a", "tool": "rm"}', PayloadError.UNKNOWN_FIELD),
    ("announce", b'{"text": "a", "board": "x"}', PayloadError.UNKNOWN_FIELD),
    ("stop", b'{"session": null}', PayloadError.BAD_FIELD),
    ("stop", b'{"all": true}', PayloadError.UNKNOWN_FIELD),
])
def test_bad_payloads_are_named(kind, payload, code):
    refusal = messages.parse(kind, payload, 64)
    assert isinstance(refusal, messages.Refusal) and refusal.code is code
    assert refusal.message.startswith(kind + ":")


def test_an_error_message_names_the_topic():
    refusal = messages.Refusal(PayloadError.INVALID_JSON, "ask: invalid JSON")
    assert messages.error_message("p/b/ask", refusal) == {
        "topic": "p/b/ask", "error": "invalid_json", "message": "ask: invalid JSON"}


# ---- an ask's messages ----

def _done(text: str) -> replies.Done:
    return replies.Done("s1", "stop", "stop", {"total_tokens": 3}, text, 1, 1)


def test_an_answer_goes_out_sentence_by_sentence_then_done_and_the_event():
    out = messages.AskMessages(Topics("p", "b"), "q", "s0", deltas=False)
    assert out.on(replies.Started("s1", "mock", "m")) == []
    assert out.on(replies.Delta("Hello there. How")) == [
        ("p/b/answer", {"id": "q", "session": "s1", "text": "Hello there."})]
    assert out.on(replies.Delta(" are you")) == []
    done = {"id": "q", "session": "s1", "text": "Hello there. How are you",
            "finish_reason": "stop", "usage": {"total_tokens": 3}}
    assert out.on(_done("Hello there. How are you")) == [
        ("p/b/answer", {"id": "q", "session": "s1", "text": "How are you"}),
        ("p/b/done", done), ("p/b/event", {"event_type": "answer", **done})]


def test_deltas_tool_calls_and_errors():
    out = messages.AskMessages(Topics("p", "b"), "q", "s", deltas=True)
    assert out.on(replies.Delta("On it. ")) == [
        ("p/b/delta", {"id": "q", "session": "s", "text": "On it. "}),
        ("p/b/answer", {"id": "q", "session": "s", "text": "On it."})]
    call = {"id": "q", "session": "s", "call_id": "c1", "name": "set_relay",
            "arguments": {"on": True}}
    assert out.on(replies.ToolCall("c1", "set_relay", {"on": True})) == [
        ("p/b/tool_call", call), ("p/b/event", {"event_type": "tool_call", **call})]
    assert out.on(replies.ToolResult("c1", "set_relay", "ok", False)) == [
        ("p/b/tool_result", {"id": "q", "session": "s", "call_id": "c1", "name": "set_relay",
                             "content": "ok", "is_error": False})]
    assert out.on(replies.Error(replies.ErrorCode.UPSTREAM_HTTP, "500")) == [
        ("p/b/error", {"topic": "p/b/ask", "error": "upstream_http", "message": "500",
                       "id": "q", "session": "s"})]


def test_speak_on_cuts_the_answer_into_announces_on_that_board():
    elsewhere = messages.SpokenElsewhere(Topics("p", "b"), "hall")
    assert elsewhere.on(replies.Started("s", "mock", "m")) == []
    assert elsewhere.on(replies.Delta("Dinner is ready. Come")) == [
        ("p/hall/announce", {"text": "Dinner is ready."})]
    assert elsewhere.on(_done("Dinner is ready. Come")) == [("p/hall/announce",
                                                              {"text": "Come"})]


def test_outgoing_text_is_masked():
    from agent import masking

    masking.install(masking.Masker(["sk-secret-key-123"]))
    try:
        out = messages.AskMessages(Topics("p", "b"), "q", "s", deltas=False)
        sent = out.on(_done("the key is sk-secret-key-123"))
        assert "sk-secret-key-123" not in json.dumps(sent) and "***" in json.dumps(sent)
    finally:
        masking.install(masking.Masker())


def test_status_shows_the_mqtt_connection():
    from agent.cli_render import format_status

    text = format_status({"mqtt": {"broker": "mqtt://b:1883", "board": "hall",
                                   "connected": False, "last_error": "connection refused",
                                   "reconnects": 3, "messages_in": 5, "messages_out": 7,
                                   "bad_payloads": 1}})
    assert ("mqtt mqtt://b:1883 as board hall: not connected (connection refused), "
            "3 reconnects, 5 in, 7 out, 1 bad payloads") in text.splitlines()


@pytest.mark.parametrize("topic, board", [
    ("p/kitchen/availability", "kitchen"), ("p/hall-2/availability", "hall-2"),
    ("p/Kitchen/availability", None), ("p/a b/availability", None),
    ("q/kitchen/availability", None), ("p/x/y/availability", None),
    ("p/kitchen/state", None), ("p//availability", None)])
def test_only_a_board_name_s_availability_counts_as_a_board(topic, board):
    assert Topics("p", "b").board_of_availability(topic) == board
