"""agent.wyoming.framing: the Wyoming framing, against the `wyoming` package (the
reference implementation) as the oracle in both directions, at every split,
and every bad input with its named outcome."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings, strategies as st

from conftest import scaled
from agent.wyoming.framing import (
    Event,
    FramingError,
    Problem,
    Reader,
    ReaderBroken,
    encode,
    parse_address,
)

wyoming_event = pytest.importorskip("wyoming.event", reason="the wyoming package is a test dependency")


def feed_split(reader: Reader, data: bytes, cuts: list[int]) -> list:
    out, start = [], 0
    for cut in sorted(set(cuts)) + [len(data)]:
        out += reader.feed(data[start:cut])
        start = cut
    return out


def reference_bytes(event: Event) -> bytes:
    sink = io.BytesIO()
    wyoming_event.write_event(wyoming_event.Event(event.type, event.data, event.payload or None),
                              sink)
    return sink.getvalue()


def reference_read(data: bytes) -> list[Event]:
    source, out = io.BytesIO(data), []
    while (event := wyoming_event.read_event(source)) is not None:
        out.append(Event(event.type, event.data, event.payload or b""))
    return out


json_scalars = st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=20)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                           max_leaves=8)
events = st.builds(Event, st.text(min_size=1, max_size=20),
                   st.dictionaries(st.text(max_size=10), json_values, max_size=4),
                   st.binary(max_size=64))


@given(st.lists(events, min_size=1, max_size=4), st.data())
@settings(max_examples=scaled(200), deadline=None)
def test_the_reference_writes_what_the_reader_reads_at_any_split(sent, data):
    wire = b"".join(reference_bytes(event) for event in sent)
    cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=6))
    assert feed_split(Reader(), wire, cuts) == sent


@given(st.lists(events, min_size=1, max_size=4))
@settings(max_examples=scaled(200), deadline=None)
def test_the_reference_reads_what_encode_writes(sent):
    assert reference_read(b"".join(encode(event) for event in sent)) == sent


def test_every_single_split_of_two_events_with_data_and_payload():
    sent = [Event("audio-chunk", {"rate": 22050, "width": 2, "channels": 1}, bytes(range(256))),
            Event("synthesize", {"text": "Zwei Sätze.\nUnd ein Umbruch \u2028 mitten drin."})]
    wire = b"".join(encode(event) for event in sent)
    for cut in range(len(wire) + 1):
        assert feed_split(Reader(), wire, [cut]) == sent, cut
    one_by_one = Reader()
    assert [e for i in range(len(wire)) for e in one_by_one.feed(wire[i:i + 1])] == sent


def test_data_after_the_header_is_merged_over_the_inline_data():
    body = b'{"b": 2, "a": 3}'
    header = json.dumps({"type": "t", "data": {"a": 1, "c": 4}, "data_length": len(body)})
    assert Reader().feed(header.encode() + b"\n" + body) == [Event("t", {"a": 3, "c": 4, "b": 2})]


def test_a_header_with_no_lengths_is_a_whole_event_and_version_is_ignored():
    assert Reader().feed(b'{"type": "describe", "version": "9.9"}\n') == [Event("describe")]
    assert Reader().feed(b'{"type": "x", "data": null, "payload_length": 0}\r\n') == [Event("x")]


def test_encode_puts_no_raw_newline_in_the_header_line_whatever_the_text():
    text = "a\nb\r\n\u2028\x00\u2029"
    wire = encode(Event("synthesize", {"text": text}))
    line, _, rest = wire.partition(b"\n")
    assert json.loads(line)["data_length"] == len(rest)
    assert json.loads(rest) == {"text": text}


@pytest.mark.parametrize(("wire", "problem"), [
    (b"not json\n", Problem.HEADER_NOT_JSON),
    (b"[1, 2]\n", Problem.HEADER_NOT_OBJECT),
    (b'{"data": {}}\n', Problem.NO_TYPE),
    (b'{"type": ""}\n', Problem.NO_TYPE),
    (b'{"type": 7}\n', Problem.NO_TYPE),
    (b'{"type": "t", "data": [1]}\n', Problem.HEADER_NOT_OBJECT),
    (b'{"type": "t", "data_length": -1}\n', Problem.BAD_LENGTH),
    (b'{"type": "t", "payload_length": true}\n', Problem.BAD_LENGTH),
    (b'{"type": "t", "payload_length": 1.5}\n', Problem.BAD_LENGTH),
    (b'{"type": "t", "payload_length": "4"}\n', Problem.BAD_LENGTH),
    (b'{"type": "t", "data_length": 2}\n[]', Problem.DATA_NOT_OBJECT),
    (b'{"type": "t", "data_length": 2}\n{x', Problem.DATA_NOT_JSON),
    (b'{"type": "t\xff"}\n', Problem.NOT_UTF8),
    (b'{"type": "t", "data_length": 15}\n{"a": "\\ud800"}', Problem.NOT_UTF8),
    (b'{"type": "t", "a": 1, "a": NaN}\n', Problem.HEADER_NOT_JSON),
])
def test_a_bad_event_is_named_and_ends_the_reader(wire, problem):
    reader = Reader()
    out = reader.feed(wire)
    assert len(out) == 1 and type(out[0]) is FramingError and out[0].problem is problem
    assert reader.pending == 0
    with pytest.raises(ReaderBroken):
        reader.feed(b'{"type": "describe"}\n')
    assert reader.close() == []


def test_events_before_a_bad_one_in_the_same_read_are_kept():
    out = Reader().feed(encode(Event("ping")) + b"garbage\n" + encode(Event("pong")))
    assert out[0] == Event("ping")
    assert [type(x) for x in out] == [Event, FramingError]


def test_a_header_line_over_the_limit_is_refused_before_it_is_buffered_whole():
    reader = Reader(max_header=100)
    assert reader.feed(b"{" + b" " * 99) == []
    out = reader.feed(b" " * 10_000)
    assert [x.problem for x in out] == [Problem.HEADER_TOO_LONG]
    assert reader.pending == 0
    # exactly at the limit is a header
    line = json.dumps({"type": "t"}).encode()
    assert Reader(max_header=len(line)).feed(line + b"\n") == [Event("t")]


@pytest.mark.parametrize(("field", "problem"), [("data_length", Problem.DATA_TOO_LONG),
                                                ("payload_length", Problem.PAYLOAD_TOO_LONG)])
def test_a_length_at_its_limit_is_read_and_one_over_it_refused_from_the_header(field, problem):
    body = b"{}".ljust(1000) if field == "data_length" else bytes(1000)
    at_limit = json.dumps({"type": "t", field: 1000}).encode() + b"\n" + body
    assert [x.type for x in Reader(max_data=1000, max_payload=1000).feed(at_limit)] == ["t"]
    reader = Reader(max_data=1000, max_payload=1000)
    out = reader.feed(json.dumps({"type": "audio-chunk", field: 1001}).encode() + b"\n")
    assert [x.problem for x in out] == [problem] and reader.pending == 0


def test_close_names_an_event_cut_short_and_nothing_when_between_events():
    whole = encode(Event("audio-chunk", {"rate": 16000}, bytes(100)))
    reader = Reader()
    assert reader.feed(whole) != [] and reader.close() == []
    for cut in (5, whole.index(b"\n") + 1, len(whole) - 1):
        reader = Reader()
        assert reader.feed(whole[:cut]) == []
        assert [x.problem for x in reader.close()] == [Problem.CLOSED_MID_EVENT]


@pytest.mark.parametrize(("address", "expected"), [
    ("tcp://127.0.0.1:10200", ("tcp", "127.0.0.1", 10200)),
    ("tcp://[::1]:10200", ("tcp", "::1", 10200)),
    ("unix:/run/piper.sock", ("unix", "/run/piper.sock", 0)),
    ("unix:///run/piper.sock", ("unix", "/run/piper.sock", 0)),
])
def test_addresses(address, expected):
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["tcp://host", "tcp://:1", "tcp://h:0", "tcp://h:70000",
                                     "unix:relative.sock", "http://h:1", 5, None])
def test_bad_addresses_say_what_is_wrong(address):
    with pytest.raises(ValueError, match="unix|tcp"):
        parse_address(address)
