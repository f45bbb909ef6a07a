"""The socket API's sans-IO line protocol (agent/api/protocol.py).

(a) LineReader: hand-written framing cases with their expected items, then
    hypothesis-generated lines (some past the limit, CR and LF among the
    bytes) fed at once and in random splits, both checked against a
    reference computed straight from the line list;
(b) parse_request: every operation with its required and all its fields,
    every field's wrong type, every missing required field, every field of
    another operation, the id rules, the error codes with the id echoed once
    it could be read; hypothesis-built requests round-trip;
(c) the replies (agent/core/replies.py) on the wire (agent/api/wire.py): dump_line, encode of each reply
    type, and ErrorCode held equal to docs/protocol.md's table.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.api.protocol import (
    DEFAULT_MAX_LINE,
    MAX_ID_LENGTH,
    OPERATIONS,
    Request,
    RequestError,
    parse_request,
)
from agent import masking
from agent.core import replies
from agent.api.wire import PROTOCOL_VERSION, UNADDRESSED, address_prefix, encode, readdress
from agent.core.edge import masked, outgoing
from agent.core.replies import ErrorCode
from agent.jsonline import dump_line
from agent.lines import Line, LineReader, LineTooLong
from conftest import scaled
from streams import cuts_for, feed_split, random_reads

INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1


# ---------------------------------------------------------------------------
# (a) framing
# ---------------------------------------------------------------------------

class Fed:
    """A LineReader in the shape feed_split wants: close() is the end of the
    input (the reader has none) and pending is noted after every read."""

    def __init__(self, limit: int) -> None:
        self.reader = LineReader(limit)
        self.pendings: list[int] = []

    def feed(self, data: bytes) -> list:
        items = self.reader.feed(data)
        self.pendings.append(self.reader.pending)
        return items

    def close(self) -> list:
        return []


def reference(lines: list[bytes], tail: bytes, limit: int) -> tuple[list, int]:
    """The items and final pending count for `lines` (each without its
    b"\\n", a CR of a CRLF still on it) followed by an unterminated tail:
    a line longer than the limit (the CR of its CRLF not counted) is one
    LineTooLong; a line within it is its bytes without one trailing CR."""
    items: list = []
    for raw in lines:
        line = raw[:-1] if raw.endswith(b"\r") else raw
        items.append(LineTooLong(limit) if len(line) > limit else Line(line))
    if len(tail) > limit and not (len(tail) == limit + 1 and tail.endswith(b"\r")):
        return items + [LineTooLong(limit)], 0
    return items, len(tail)


def body_of(lines: list[bytes], tail: bytes) -> bytes:
    return b"".join(raw + b"\n" for raw in lines) + tail


@pytest.mark.parametrize(("body", "limit", "items", "pending"), [
    (b"", 8, [], 0),
    (b"a\nbc\n", 8, [Line(b"a"), Line(b"bc")], 0),
    (b"\n\n", 8, [Line(b""), Line(b"")], 0),
    (b"a\r\n", 8, [Line(b"a")], 0),
    (b"\r\n", 8, [Line(b"")], 0),
    (b"a\r\r\n", 8, [Line(b"a\r")], 0),            # one CR is dropped, not all
    (b"a\rb\n", 8, [Line(b"a\rb")], 0),            # a CR inside a line stays
    (b"\r", 8, [], 1),
    (b"abc", 8, [], 3),
    (b"ok\nabc", 8, [Line(b"ok")], 3),
    (b"\xff\x00{\n", 8, [Line(b"\xff\x00{")], 0),  # bytes, nothing decoded
    (b"xxxx\n", 4, [Line(b"xxxx")], 0),            # exactly the limit
    (b"xxxxx\n", 4, [LineTooLong(4)], 0),
    (b"xxx\r\n", 4, [Line(b"xxx")], 0),
    (b"xxxx\r\n", 4, [Line(b"xxxx")], 0),          # the CR of a CRLF is not counted
    (b"xxxx\r", 4, [], 5),                         # its LF may come in the next read
    (b"xxxx\rx", 4, [LineTooLong(4)], 0),          # a CR inside the line is counted
    (b"xxxxx\r\n", 4, [LineTooLong(4)], 0),
    (b"xxxxxxxxxx\nok\n", 4, [LineTooLong(4), Line(b"ok")], 0),
    (b"ok\nxxxxxxxxxx\n\n", 4, [Line(b"ok"), LineTooLong(4), Line(b"")], 0),
    (b"xxxxxxxxxx", 4, [LineTooLong(4)], 0),       # reported before its newline
    (b"xxxx", 4, [], 4),
    (b"xxxxx\nxxxxx\n", 4, [LineTooLong(4), LineTooLong(4)], 0),
])
def test_framing_cases(body, limit, items, pending):
    reader = LineReader(limit)
    assert reader.feed(body) == items
    assert reader.pending == pending
    # byte at a time: the same items, nothing more
    reader = LineReader(limit)
    assert [item for i in range(len(body)) for item in reader.feed(body[i:i + 1])] == items
    assert reader.pending == pending


def test_default_limit_is_64_kib():
    reader = LineReader(DEFAULT_MAX_LINE)
    assert reader.max_line == DEFAULT_MAX_LINE == 64 * 1024
    assert reader.feed(b"x" * DEFAULT_MAX_LINE + b"\n") == [Line(b"x" * DEFAULT_MAX_LINE)]
    assert reader.feed(b"x" * (DEFAULT_MAX_LINE + 1) + b"\n") == [LineTooLong(DEFAULT_MAX_LINE)]


def test_an_oversized_line_is_reported_once_and_skipped_to_its_newline():
    reader = LineReader(4)
    assert reader.feed(b"abc") == []
    assert reader.pending == 3
    assert reader.feed(b"de") == [LineTooLong(4)]
    assert reader.pending == 0  # what was buffered is dropped
    assert reader.feed(b"more of it") == []  # still the same line: skipped, not buffered
    assert reader.pending == 0
    assert reader.feed(b"") == []
    assert reader.feed(b"...\nok") == []
    assert reader.pending == 2
    assert reader.feed(b"\n") == [Line(b"ok")]
    assert reader.pending == 0


def test_lines_of_one_read_come_out_in_order_with_the_rest_buffered():
    reader = LineReader(16)
    assert reader.feed(b'{"id":1}\n{"id":2}\r\n{"id"') == [Line(b'{"id":1}'), Line(b'{"id":2}')]
    assert reader.pending == 5
    assert reader.feed(b":3}\n") == [Line(b'{"id":3}')]


def test_a_crlf_split_between_reads():
    reader = LineReader(8)
    assert reader.feed(b"ab\r") == []
    assert reader.pending == 3
    assert reader.feed(b"\n") == [Line(b"ab")]


# Line bytes: mostly short, CRs and non-ASCII among them, lengths around
# the small limits drawn below; never a b"\n" (that ends a line).
_LINE_BYTES = st.lists(st.sampled_from([b"a", b"{", b"\r", b"\xff", b"\x00", b" "]),
                       max_size=24).map(b"".join)
_LINES = st.lists(st.one_of(_LINE_BYTES, _LINE_BYTES.map(lambda b: b + b"\r")), max_size=30)


@settings(max_examples=scaled(300), deadline=None)
@given(lines=_LINES, tail=_LINE_BYTES, limit=st.integers(min_value=1, max_value=20))
def test_whole_input_matches_the_reference(lines, tail, limit):
    reader = LineReader(limit)
    assert (reader.feed(body_of(lines, tail)), reader.pending) == reference(lines, tail, limit)


@settings(max_examples=scaled(300), deadline=None)
@given(lines=_LINES, tail=_LINE_BYTES, limit=st.integers(min_value=1, max_value=20),
       data=st.data())
def test_random_splits_match_the_whole_input(lines, tail, limit, data):
    body = body_of(lines, tail)
    cuts = data.draw(cuts_for(len(body)))
    whole = LineReader(limit)
    expected = whole.feed(body)
    fed = Fed(limit)
    assert feed_split(fed, body, cuts) == expected == reference(lines, tail, limit)[0]
    assert fed.reader.pending == whole.pending
    # An oversized line is never buffered (one byte more only for the CR of a CRLF).
    assert max(fed.pendings) <= limit + 1


@pytest.mark.parametrize("seed", range(8))
def test_seeded_reads_of_many_lines(seed):
    limit = 64
    lines = [(b"x" * n) + (b"\r" if n % 3 == 0 else b"") for n in range(0, 140, 3)]
    events = [raw + b"\n" for raw in lines]
    reader = LineReader(limit)
    items = [item for read in random_reads(events, seed, hi=17) for item in reader.feed(read)]
    assert items == reference(lines, b"", limit)[0]
    assert LineTooLong(limit) in items and Line(b"") in items  # both kinds exercised
    assert reader.pending == 0


# ---------------------------------------------------------------------------
# (b) requests
# ---------------------------------------------------------------------------

class Field(NamedTuple):
    required: bool
    valid: Any          # a value the field takes
    wrong: Any          # a value of a type it does not take
    wrong_says: str     # what the bad_field message says it must be
    values: st.SearchStrategy


_IDS = st.one_of(st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
                 st.text(min_size=1, max_size=MAX_ID_LENGTH))
_TEXT = st.text(max_size=40)
_STRING = "a string"
_BOOL = "true or false"

# Every operation and its fields, as docs and clients know them.
OPERATION_FIELDS: dict[str, dict[str, Field]] = {
    "ask": {
        "prompt": Field(True, "What is the weather?", 5, _STRING,
                        _TEXT.filter(lambda s: s.strip())),
        "session": Field(False, "s-kitchen", 7, _STRING, _TEXT),
        "provider": Field(False, "local", ["local"], _STRING, _TEXT),
        "stream": Field(False, False, 0, _BOOL, st.booleans()),
        "reasoning": Field(False, True, "yes", _BOOL, st.booleans()),
        "speak_on": Field(False, "hall", 3, _STRING, _TEXT),
    },
    "cancel": {"target": Field(True, "ask-7", True, "a string or an integer", _IDS)},
    "status": {},
    "subscribe": {"reasoning": Field(False, False, None, _BOOL, st.booleans())},
    "sessions": {},
    "history": {"session": Field(True, "s-1", None, _STRING, _TEXT)},
    "forget": {"session": Field(True, "s-1", 2.5, _STRING, _TEXT)},
    "announce": {"text": Field(True, "Dinner is ready.", 3, _STRING,
                               _TEXT.filter(lambda s: s.strip())),
                 "device": Field(False, "voice", ["voice"], _STRING, _TEXT),
                 "board": Field(False, "hall", 4, _STRING, _TEXT)},
    "stop": {"session": Field(False, "kitchen", 1, _STRING, _TEXT),
             "mine": Field(False, True, "yes", _BOOL, st.booleans())},
    "timers": {"cancel": Field(False, "t3", 3, _STRING, _TEXT)},
}
ALL_FIELDS = sorted({name for fields in OPERATION_FIELDS.values() for name in fields})


def line(obj: Any, ensure_ascii: bool = False) -> bytes:
    return json.dumps(obj, ensure_ascii=ensure_ascii).encode("utf-8")


def parsed(obj: Any) -> Request | RequestError:
    return parse_request(line(obj))


def test_the_operations_are_the_documented_ones_in_order():
    assert OPERATIONS == tuple(OPERATION_FIELDS)


@pytest.mark.parametrize("op", OPERATION_FIELDS)
def test_each_operation_with_its_required_fields(op):
    args = {name: f.valid for name, f in OPERATION_FIELDS[op].items() if f.required}
    assert parsed({"id": 3, "op": op, **args}) == Request(3, op, args)


@pytest.mark.parametrize("op", OPERATION_FIELDS)
def test_each_operation_with_all_its_fields(op):
    args = {name: f.valid for name, f in OPERATION_FIELDS[op].items()}
    # id and op anywhere among the fields
    assert parsed({**args, "op": op, "id": "req-1"}) == Request("req-1", op, args)


@pytest.mark.parametrize(("op", "name"), [(op, name) for op, fields in OPERATION_FIELDS.items()
                                          for name, f in fields.items() if f.required])
def test_each_required_field_missing(op, name):
    args = {n: f.valid for n, f in OPERATION_FIELDS[op].items() if n != name}
    assert parsed({"id": 4, "op": op, **args}) == RequestError(
        "missing_field", f"{op}: missing field: {name}", 4)


@pytest.mark.parametrize(("op", "name"), [(op, name) for op, fields in OPERATION_FIELDS.items()
                                          for name in fields])
def test_each_field_of_a_wrong_type(op, name):
    args = {n: f.valid for n, f in OPERATION_FIELDS[op].items()}
    field = OPERATION_FIELDS[op][name]
    args[name] = field.wrong
    assert parsed({"id": "w", "op": op, **args}) == RequestError(
        "bad_field", f"{op}: {name} must be {field.wrong_says}", "w")


@pytest.mark.parametrize(("op", "name"), [(op, name) for op in OPERATION_FIELDS
                                          for name in ALL_FIELDS + ["bogus", "ID", "Op"]
                                          if name not in OPERATION_FIELDS[op]])
def test_each_field_another_operation_has_is_unknown(op, name):
    args = {n: f.valid for n, f in OPERATION_FIELDS[op].items() if f.required}
    known = ", ".join(OPERATION_FIELDS[op]) or "none"
    assert parsed({"id": 5, "op": op, **args, name: "x"}) == RequestError(
        "unknown_field", f"{op}: unknown field {name!r}; known: {known}", 5)


@pytest.mark.parametrize(("op", "name"), [("ask", "stream"), ("ask", "reasoning"),
                                          ("subscribe", "reasoning"), ("stop", "mine")])
@pytest.mark.parametrize("number", [0, 1])
def test_a_boolean_field_takes_no_number(op, name, number):
    args = {n: f.valid for n, f in OPERATION_FIELDS[op].items() if f.required}
    result = parsed({"id": 6, "op": op, **args, name: number})
    assert result == RequestError("bad_field", f"{op}: {name} must be true or false", 6)


@pytest.mark.parametrize("prompt", ["", " ", "\n\t ", "\u3000"])
def test_an_empty_prompt(prompt):
    assert parsed({"id": 7, "op": "ask", "prompt": prompt}) == RequestError(
        "bad_field", "ask: prompt is empty", 7)


@pytest.mark.parametrize("text", ["", " ", "\n\t ", "\u3000"])
def test_an_empty_announcement(text):
    assert parsed({"id": 7, "op": "announce", "text": text}) == RequestError(
        "bad_field", "announce: text is empty", 7)


@pytest.mark.parametrize("target", [0, INT64_MIN, INT64_MAX, "a", "t" * MAX_ID_LENGTH])
def test_a_cancel_target_that_is_an_id(target):
    assert parsed({"id": 8, "op": "cancel", "target": target}) == Request(
        8, "cancel", {"target": target})


@pytest.mark.parametrize("target", ["", "t" * (MAX_ID_LENGTH + 1), INT64_MAX + 1, INT64_MIN - 1])
def test_a_cancel_target_that_cannot_be_an_id(target):
    assert parsed({"id": 8, "op": "cancel", "target": target}) == RequestError(
        "bad_field", "cancel: target is not a request id", 8)


@pytest.mark.parametrize("request_id", [0, -1, 1, INT64_MIN, INT64_MAX, "a", "0",
                                        "x" * MAX_ID_LENGTH, "é" * MAX_ID_LENGTH, "😀",
                                        " ", "with\nnewline"])
def test_a_good_id_is_kept_as_it_is(request_id):
    result = parsed({"id": request_id, "op": "status"})
    assert result == Request(request_id, "status", {})
    assert type(result.id) is type(request_id)


@pytest.mark.parametrize(("raw", "request_id"), [
    (b"-0", 0),
    (b'"\\ud83d\\ude00"', "😀"),   # a surrogate pair escaped is one character
    (b'"\\u0061"', "a"),
])
def test_a_good_id_as_written_in_json(raw, request_id):
    assert parse_request(b'{"id":' + raw + b',"op":"status"}') == Request(request_id, "status")


BAD_ID = RequestError("bad_field", f"id must be a string of at most {MAX_ID_LENGTH} "
                      "characters or an integer")


@pytest.mark.parametrize("raw", [
    b"true", b"false", b"1.0", b"-0.0", b"1e3", b"1E2", b"0.5",
    b'""', b'"' + b"x" * (MAX_ID_LENGTH + 1) + b'"',
    str(INT64_MAX + 1).encode(), str(INT64_MIN - 1).encode(), b"9" * 400,
    b"[]", b"[1]", b"{}", b'{"id":1}',
])
def test_a_bad_id(raw):
    assert parse_request(b'{"id":' + raw + b',"op":"status"}') == BAD_ID


@pytest.mark.parametrize("obj", [{"op": "status"}, {"id": None, "op": "status"}, {}])
def test_a_missing_id(obj):
    assert parsed(obj) == RequestError("missing_field", "missing field: id")


@pytest.mark.parametrize("obj", [{"id": 9}, {"id": 9, "op": None}, {"id": 9, "prompt": "hi"}])
def test_a_missing_op_echoes_the_id(obj):
    assert parsed(obj) == RequestError("missing_field", "missing field: op", 9)


def test_the_id_is_checked_before_the_op():
    assert parsed({"id": True, "op": "nope"}) == BAD_ID
    assert parsed({"id": 1.5}) == BAD_ID


KNOWN = "ask, cancel, status, subscribe, sessions, history, forget, announce, stop, timers"


@pytest.mark.parametrize(("op", "shown"), [
    ("nope", '"nope"'), ("", '""'), ("Status", '"Status"'), (" ask", '" ask"'),
    ("ünknown", '"\\u00fcnknown"'), (5, "5"), (1.5, "1.5"), (True, "true"),
    ("x" * 50, '"' + "x" * 36 + "..."),
    ([], "[]"), (["ask"], '["ask"]'), ({}, "{}"), ({"op": "ask"}, '{"op": "ask"}'),
])
def test_an_unknown_op_echoes_the_id(op, shown):
    assert parsed({"id": "u", "op": op}) == RequestError(
        "unknown_op", f"unknown op {shown}; known: {KNOWN}", "u")


@pytest.mark.parametrize("raw", [
    b"", b" ", b"{", b"}", b"nope", b'{"id":1,}', b"{'id':1}", b'{"id":1 "op":"status"}',
    b'{"id":1,"op":"status"}{}', b'{"id":1,"op":"status"} x', b'{"id":NaN,"op":"status"}',
    b'{"id":1e400,"op":"status"}', b'{"id":01,"op":"status"}', b'{"id":"a\x01","op":"status"}',
])
def test_invalid_json(raw):
    result = parse_request(raw)
    assert isinstance(result, RequestError)
    assert (result.code, result.id) == ("invalid_json", None)
    assert result.message.startswith("invalid JSON: ")


@pytest.mark.parametrize("raw", [b"[]", b'[{"id":1,"op":"status"}]', b'"status"', b"1",
                                 b"null", b"true"])
def test_not_an_object(raw):
    assert parse_request(raw) == RequestError("not_an_object", "a request is a JSON object")


BAD_UTF8 = RequestError("invalid_utf8", "the line is not valid UTF-8")
LONE_SURROGATE = RequestError("invalid_utf8", "a string escapes a lone UTF-16 surrogate")


@pytest.mark.parametrize("raw", [
    b'{"id":1,"op":"ask","prompt":"\xff"}',
    b'{"id":1,"op":"ask","prompt":"caf\xe9"}',          # Latin-1
    b'{"id":1,"op":"ask","prompt":"\xc0\xaf"}',          # overlong
    b'{"id":1,"op":"ask","prompt":"\xe2\x82"}',          # truncated sequence
    b'{"id":1,"op":"ask","prompt":"\xed\xa0\x80"}',      # a surrogate encoded in UTF-8
    b'{"id":1,"op":"ask","prompt":"\xf4\x90\x80\x80"}',  # past U+10FFFF
    b'{"id":"\xff","op":"status"}',
    b'{"id":1,"op":"status","\xff":1}',
])
def test_bad_utf8_bytes(raw):
    assert parse_request(raw) == BAD_UTF8


@pytest.mark.parametrize("raw", [
    b'{"id":1,"op":"ask","prompt":"\\ud800"}',
    b'{"id":1,"op":"ask","prompt":"\\udc00x"}',
    b'{"id":1,"op":"ask","prompt":"x\\ud83d"}',
    b'{"id":1,"op":"ask","prompt":"\\ude00\\ud83d"}',   # a pair the wrong way round
    b'{"id":"\\udfff","op":"status"}',
    b'{"id":1,"op":"status","\\ud800":1}',
])
def test_a_lone_surrogate_escape(raw):
    assert parse_request(raw) == LONE_SURROGATE


def test_a_line_reader_line_parses():
    reader = LineReader(256)
    lines = reader.feed(b'{"id":1,"op":"status"}\r\n{"id":2,"op":"forget","session":"s"}\n')
    assert [parse_request(item.data) for item in lines] == [
        Request(1, "status"), Request(2, "forget", {"session": "s"})]


@st.composite
def requests(draw) -> tuple[dict, Request]:
    """A valid request object (fields in any order) and the Request it is."""
    op = draw(st.sampled_from(OPERATIONS))
    args = {name: draw(f.values) for name, f in OPERATION_FIELDS[op].items()
            if f.required or draw(st.booleans())}
    request_id = draw(_IDS)
    items = draw(st.permutations([("id", request_id), ("op", op), *args.items()]))
    return dict(items), Request(request_id, op, args)


@settings(max_examples=scaled(300), deadline=None)
@given(case=requests(), ensure_ascii=st.booleans())
def test_random_requests_round_trip(case, ensure_ascii):
    obj, request = case
    assert parse_request(line(obj, ensure_ascii)) == request


def is_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return 1 <= len(value) <= MAX_ID_LENGTH
    return isinstance(value, int) and INT64_MIN <= value <= INT64_MAX


@settings(max_examples=scaled(300), deadline=None)
@given(request_id=st.one_of(st.none(), st.booleans(), st.integers(),
                            st.floats(allow_nan=False, allow_infinity=False),
                            st.text(max_size=MAX_ID_LENGTH + 8),
                            st.lists(st.integers(), max_size=2)))
def test_random_ids(request_id):
    result = parsed({"id": request_id, "op": "sessions"})
    if request_id is None:
        assert result == RequestError("missing_field", "missing field: id")
    elif is_id(request_id):
        assert result == Request(request_id, "sessions")
    else:
        assert result == BAD_ID


# ---------------------------------------------------------------------------
# (c) replies
# ---------------------------------------------------------------------------

def test_dump_line_is_one_compact_utf8_line():
    reply = {"id": 1, "type": "delta", "text": "Grüße 😀 \u2028 \n\r\t\"\\"}
    out = dump_line(reply)
    assert out == ('{"id":1,"type":"delta","text":"Grüße 😀 \u2028 \\n\\r\\t\\"\\\\"}'
                   .encode("utf-8") + b"\n")
    assert out.count(b"\n") == 1
    assert json.loads(out) == reply
    assert encode(replies.Delta(reply["text"]), 1) == out


def test_dump_line_with_a_lone_surrogate_is_an_ascii_line():
    reply = {"id": "é", "type": "delta", "text": "a\ud800b", "more": ["😀", "\udfff"]}
    out = dump_line(reply)
    assert out == (b'{"id":"\\u00e9","type":"delta","text":"a\\ud800b",'
                   b'"more":["\\ud83d\\ude00","\\udfff"]}\n')
    assert json.loads(out) == reply
    # and the server's own parser refuses it as a request, as it should
    assert parse_request(out.rstrip(b"\n")) == LONE_SURROGATE
    assert encode(replies.Delta("a\ud800b"), "é") == b'{"id":"\\u00e9","type":"delta","text":"a\\ud800b"}\n'


@given(st.text(st.characters(blacklist_categories=())), st.integers())
def test_the_delta_line_is_the_generic_encoders_line(text, request_id):
    # encode's per-token path (delta_line) against the walk every other reply takes
    generic = dump_line(outgoing({"id": request_id, "type": "delta", "text": text}))
    assert encode(replies.Delta(text), request_id) == generic


@given(st.lists(st.tuples(st.text(st.characters(blacklist_categories=())),
                          st.fixed_dictionaries({"client": st.integers(1, 3),
                                                 "id": st.integers() | st.text(),
                                                 "session": st.text(max_size=6)})),
                min_size=1, max_size=6))
def test_a_subscribers_delta_line_is_the_generic_encoders_line(deltas):
    # the subscribers' per-token path (the request's JSON kept while it is
    # the same request) against the walk, for requests that change and repeat
    for text, request in deltas:
        generic = dump_line(outgoing({"type": "delta", "text": text,
                                              "request": request}))
        assert encode(replies.Delta(text), request=request) == generic


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=())),  # surrogates too
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(st.characters(blacklist_categories=()), max_size=8), inner,
                      max_size=4),
    max_leaves=12)


@settings(max_examples=scaled(300), deadline=None)
@given(reply=st.dictionaries(st.text(max_size=8), _JSON, max_size=5))
def test_dump_line_round_trips(reply):
    out = dump_line(reply)
    assert out.endswith(b"\n") and out.count(b"\n") == 1
    assert json.loads(out) == reply
    try:
        utf8 = json.dumps(reply, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate somewhere: all ASCII
        assert out.isascii()
    else:
        assert out == utf8 + b"\n"


def test_error():
    assert encode(replies.Error(ErrorCode.BAD_FIELD, "ask: prompt is empty"), 7) == (
        b'{"id":7,"type":"error","code":"bad_field","message":"ask: prompt is empty"}\n')
    assert encode(replies.Error(ErrorCode.OVERFLOW, "too many"), None) == (
        b'{"id":null,"type":"error","code":"overflow","message":"too many"}\n')
    assert encode(replies.Error(ErrorCode.UPSTREAM_HTTP, "HTTP 502", status=502), "a") == (
        b'{"id":"a","type":"error","code":"upstream_http","message":"HTTP 502","status":502}\n')
    # provider_type is null when the provider's error had no type, not left out
    assert json.loads(encode(replies.Error(ErrorCode.PROVIDER_ERROR, "p: x",
                                           provider_type=None), 1)) == {
        "id": 1, "type": "error", "code": "provider_error", "message": "p: x",
        "provider_type": None}
    assert json.loads(encode(replies.Error(ErrorCode.INTERRUPTED, "cut", text="Hal"), 2)) == {
        "id": 2, "type": "error", "code": "interrupted", "message": "cut", "text": "Hal"}


def test_hello():
    reply = replies.Hello(PROTOCOL_VERSION, "homeagent 0.1", OPERATIONS, ("stream", "cancel"),
                          4096)
    assert json.loads(encode(reply)) == {
        "type": "hello", "protocol": PROTOCOL_VERSION, "server": "homeagent 0.1",
        "operations": list(OPERATION_FIELDS), "capabilities": ["stream", "cancel"],
        "max_line_bytes": 4096}
    assert PROTOCOL_VERSION == 1


def test_every_reply_on_the_wire():
    """Field names, their order, and null versus absent, of each reply type."""
    usage = {"input_tokens": 3}
    cases = [
        (replies.Started("s", "p", "m"), 1,
         '{"id":1,"type":"started","session":"s","provider":"p","model":"m"}'),
        (replies.Failover("a", ErrorCode.UPSTREAM_HTTP, "a: HTTP 503", "b", "m", 503), 1,
         '{"id":1,"type":"failover","failed":"a","code":"upstream_http","message":"a: HTTP 503",'
         '"provider":"b","model":"m","status":503}'),
        (replies.Failover("a", ErrorCode.UPSTREAM_UNAVAILABLE, "a: cannot connect", "b", "m"),
         1, '{"id":1,"type":"failover","failed":"a","code":"upstream_unavailable",'
         '"message":"a: cannot connect","provider":"b","model":"m"}'),
        (replies.Reasoning("r"), 1, '{"id":1,"type":"reasoning","text":"r"}'),
        (replies.Refusal("no"), 1, '{"id":1,"type":"refusal","text":"no"}'),
        (replies.ToolCall("c", "t", {"a": 1}), 1,
         '{"id":1,"type":"tool_call","call_id":"c","name":"t","arguments":{"a":1}}'),
        (replies.ToolCall("c", None, "{x", "invalid_json"), 1,
         '{"id":1,"type":"tool_call","call_id":"c","name":null,"arguments":"{x",'
         '"error":"invalid_json"}'),
        (replies.ToolResult("c", "t", "ok", False), 1,
         '{"id":1,"type":"tool_result","call_id":"c","name":"t","content":"ok",'
         '"is_error":false}'),
        (replies.UpstreamWarning("unknown_sse_field", "x"), 1,
         '{"id":1,"type":"warning","code":"unknown_sse_field","detail":"x"}'),
        (replies.Done("s", "stop", None, None, "Hi", 1, 1), 1,
         '{"id":1,"type":"done","session":"s","finish_reason":"stop",'
         '"raw_finish_reason":null,"usage":null,"text":"Hi","steps":1,"attempts":1,"kept":true}'),
        (replies.Done("s", None, "end", usage, "", 2, 3), 1,
         '{"id":1,"type":"done","session":"s","finish_reason":null,"raw_finish_reason":"end",'
         '"usage":{"input_tokens":3},"text":"","steps":2,"attempts":3,"kept":true}'),
        (replies.Done("s", "stop", None, None, "Hi", 1, 1, {"bad_json": 1}, False,
                      {"code": replies.ErrorCode.STORAGE_ERROR, "message": "full"}), 1,
         '{"id":1,"type":"done","session":"s","finish_reason":"stop",'
         '"raw_finish_reason":null,"usage":null,"text":"Hi","steps":1,"attempts":1,'
         '"dropped_events":{"bad_json":1},"kept":false,'
         '"error":{"code":"storage_error","message":"full"}}'),
        (replies.Status({"server": "h", "protocol": 1}, 0, (), {"asks": 0}, False), "s",
         '{"id":"s","type":"status","server":"h","protocol":1,"clients":0,"active":[],'
         '"counters":{"asks":0},"draining":false}'),
        (replies.Sessions([{"session": "a"}]), 1,
         '{"id":1,"type":"sessions","sessions":[{"session":"a"}]}'),
        (replies.History("a", []), 1, '{"id":1,"type":"history","session":"a","turns":[]}'),
        (replies.Ok(), 1, '{"id":1,"type":"ok"}'),
        (replies.Ok(forgotten=False), 1, '{"id":1,"type":"ok","forgotten":false}'),
        (replies.Subscribed(), 1, '{"id":1,"type":"subscribed"}'),
        (replies.Shutdown("bye"), UNADDRESSED, '{"type":"shutdown","reason":"bye"}'),
        (replies.Device("d", "running"), UNADDRESSED,
         '{"type":"device","device":"d","state":"running"}'),
        (replies.Device("d", "failed", "OSError: x", 0.5), 9,
         '{"id":9,"type":"device","device":"d","state":"failed","error":"OSError: x",'
         '"retry_in":0.5}'),
    ]
    for reply, request_id, line in cases:
        assert encode(reply, request_id) == line.encode() + b"\n", reply
    origin = {"client": 1, "id": 2, "session": "s"}
    assert encode(replies.Delta("x"), "sub", origin) == (
        b'{"id":"sub","type":"delta","text":"x","request":{"client":1,"id":2,"session":"s"}}\n')


def test_replies_are_frozen():
    reply = replies.Delta("x")
    with pytest.raises(AttributeError):
        reply.text = "y"
    assert not hasattr(reply, "__dict__")


def test_error_codes_are_the_documented_ones():
    docs = (Path(__file__).parent.parent / "docs" / "protocol.md").read_text()
    table = docs[docs.index("| code | when |"):]
    table = table[:table.index("\n\n")]
    documented = set()
    for row in table.splitlines()[2:]:
        documented.update(re.findall(r"`([a-z0-9_]+)`", row.split("|")[1]))
    assert documented == {code.value for code in ErrorCode}


@pytest.mark.parametrize("reply", [
    replies.Delta("tok "), replies.Reasoning("hmm"), replies.Started("s", "p", "m"),
    replies.Error(replies.ErrorCode.INTERRUPTED, "cut", text="ha\ud800lf"),
    replies.Done("s", "stop", "stop", {"input_tokens": 1}, "all", 1, 1)])
@pytest.mark.parametrize("request_id", [7, "sub-é", "key sk-secret0123456789abcdef"])
def test_a_reply_encoded_once_and_readdressed_is_the_line_encoded_for_that_id(
        reply, request_id):
    """What the subscribers get (one encoding for all of them, the id of
    each masked once by the edge) is byte for byte what encoding the reply,
    through the edge, for that subscriber's id gives, masked alike."""
    masking.install(masking.Masker(["sk-secret0123456789abcdef"]))
    try:
        origin = outgoing({"client": 3, "id": 1, "session": "kitchen"})
        reply = masked(reply)
        once = encode(reply, request=origin)
        line = readdress(once, address_prefix(outgoing(request_id)))
        expected = encode(reply, outgoing(request_id), origin)
        assert json.loads(line) == json.loads(expected)
        if b"\\ud800" not in once:
            assert line == expected
        # else a lone surrogate made the reply's part ASCII with \u escapes,
        # while the id keeps its UTF-8: the same JSON, other bytes.
        assert b"sk-secret" not in line
    finally:
        masking.install(masking.Masker())
