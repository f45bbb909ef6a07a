"""The serial line protocol, sans-IO (agent/devices/serial_protocol.py):
every line kind both ways, escapes, round trips, and every bad line with
its named outcome. No pty, no trio: bytes and messages only."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.devices.serial_protocol import (
    PROTOCOL_VERSION,
    SHOWN_CHARS,
    Announce,
    BadLine,
    Blank,
    Call,
    DeviceEvent,
    DeviceMessage,
    DeviceHello,
    Done,
    Error,
    Fail,
    Hello,
    Ok,
    Problem,
    Prompt,
    Reasoning,
    Receiver,
    Start,
    Stop,
    Text,
    Timer,
    encode,
    escape,
    format_line,
    parse_daemon_line,
    parse_device_line,
    unescape,
)
from agent.lines import Line, LineTooLong
from conftest import scaled

FAMILY = "👨\u200d👩\u200d👧\u200d👦"


def device_says(text: str | bytes):
    return parse_device_line(Line(text.encode() if isinstance(text, str) else text))


def daemon_says(text: str | bytes):
    return parse_daemon_line(Line(text.encode() if isinstance(text, str) else text))


# ---- escapes ----

@pytest.mark.parametrize("text,wire", [
    ("", ""),
    ("plain text", "plain text"),
    ("a\nb", "a\\nb"),
    ("a\rb", "a\\rb"),
    ("back\\slash", "back\\\\slash"),
    ("\\n", "\\\\n"),              # a backslash and an n stay two characters
    ("\r\n", "\\r\\n"),
    ("tab\tgoes", "tab\\x09goes"),
    ("\x00nul \x1b[2J esc \x07 \x7f", "\\x00nul \\x1b[2J esc \\x07 \\x7f"),
    ("c1 \x85 \x9f, not \xa0", "c1 \\x85 \\x9f, not \xa0"),
    ("\u2028 and \u2029", "\\u2028 and \\u2029"),
    ("\\x41", "\\\\x41"),       # a backslash before an escape's letters is escaped itself
    ("abc\u202edcba", "abc\\u202edcba"),  # a right-to-left override, shown reversed
    ("\u2066x\u2069 \u200b \ufeff \xad", "\\u2066x\\u2069 \\u200b \\ufeff \\xad"),
    ("tag \U000e0041", "tag \\U000e0041"),
    (f"你好 {FAMILY}", f"你好 {FAMILY}"),
])
def test_escape(text, wire):
    assert escape(text) == wire
    assert unescape(wire) == text


@pytest.mark.parametrize("wire,text", [
    ("\\q", "\\q"),                # unknown escapes are literal
    ("end\\", "end\\"),            # so is a trailing backslash
    ("\\\\\\n", "\\\n"),
    ("\\t", "\\t"),
    ("\\x1b\\x1B\\x4", "\x1b\\x1B\\x4"),  # lower-case hex, two digits
    ("\\u2028\\u2027", "\u2028\\u2027"),    # only what escape() writes
    ("\\u202e\\u0041\\u00ad\\U000e0001\\U00000041", "\u202e\\u0041\\u00ad\U000e0001\\U00000041"),
    ("a\\nb\\rc\\\\d", "a\nb\rc\\d"),
])
def test_unescape_of_what_a_device_may_send(wire, text):
    assert unescape(wire) == text


@settings(max_examples=scaled(300), derandomize=True)
@given(st.text(alphabet=st.sampled_from(["a", " ", "\\", "n", "r", "x", "u", "1", "b",
                                         "2", "0", "8", "\n", "\r", "\x00", "\x1b", "\x85",
                                         "\u2028", "你", "👍"])))
def test_escape_round_trip(text):
    text = text.replace("b", "\u202e").replace("2", "\U000e0001")
    line = escape(text)
    assert not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029]", line)
    assert not any(unicodedata.category(char) == "Cf" for char in line)
    assert unescape(line) == text


def test_no_format_character_reaches_the_wire_raw():
    """Every character of Unicode category Cf (bidi overrides and isolates,
    zero-width characters, tags), as Python knows them, leaves escaped; the
    zero-width joiner of emoji sequences (FAMILY) aside."""
    formats = "".join(chr(code) for code in range(0x110000)
                      if unicodedata.category(chr(code)) == "Cf")
    line = format_line(Text(formats))
    assert [char for char in line if unicodedata.category(char) == "Cf"] == ["\u200d"]
    assert parse_daemon_line(Line(line.encode())) == Text(formats)


# ---- every line kind, both ways ----

LINES = [  # the daemon's, then the device's
    (Hello("0.1.0"), f"HELLO {PROTOCOL_VERSION} homeagent 0.1.0"),
    (Hello("2.0.0rc1", 7), "HELLO 7 homeagent 2.0.0rc1"),
    (Start("s-1"), "START s-1"), (Start(""), "START "),
    (Text("Yes, since 06:00."), "TEXT Yes, since 06:00."),
    (Text("Line one\nline two \\ back\\n."), "TEXT Line one\\nline two \\\\ back\\\\n."),
    (Text(f"你好。{FAMILY}\r!"), f"TEXT 你好。{FAMILY}\\r!"),
    (Reasoning("think\nhard"), "REASONING think\\nhard"),
    (Done("stop"), "DONE stop"), (Done("tool_calls"), "DONE tool_calls"),
    (Error("upstream_unavailable", "cannot connect"), "ERROR upstream_unavailable cannot connect"),
    (Error("interrupted", "cut\noff"), "ERROR interrupted cut\\noff"),
    (Error("interrupted", ""), "ERROR interrupted "),
    (Call("1", "RELAY 2 true"), "CALL 1 RELAY 2 true"), (Call("3", ""), "CALL 3 "),
    (Call("12", "SAY a\nb"), "CALL 12 SAY a\\nb"),
    (Timer("ringing", "t3", "timer", "tea"), "TIMER ringing t3 timer tea"),
    (Timer("quiet", "t12", "reminder", "bins out\n\x1b[2J"),
     "TIMER quiet t12 reminder bins out\\n\\x1b[2J"),
    (Prompt("Is the heating on?"), "PROMPT Is the heating on?"),
    (Prompt("two\nlines"), "PROMPT two\\nlines"),
    (Ok("1", "relay 2 is on"), "OK 1 relay 2 is on"), (Ok("7", ""), "OK 7 "),
    (Fail("2", "relay 9 does not exist"), "FAIL 2 relay 9 does not exist"),
    (Fail("2", "a\\b"), "FAIL 2 a\\\\b"),
    (DeviceEvent("button 1 pressed"), "EVENT button 1 pressed"),
    (DeviceHello("kitchen-panel fw 2.3"), "HELLO kitchen-panel fw 2.3"),
    (DeviceHello(f"{FAMILY}"), f"HELLO {FAMILY}"),
    (Announce("Dinner is ready."), "ANNOUNCE Dinner is ready."),
    (Announce("Door\nopen \x1b[2J"), "ANNOUNCE Door\\nopen \\x1b[2J"),
    (Stop(), "STOP"),
]


@pytest.mark.parametrize("message,line", LINES)
def test_every_line_kind_both_ways(message, line):
    assert format_line(message) == line
    assert encode(message) == line.encode() + b"\n"
    parse = parse_device_line if isinstance(message, DeviceMessage) else parse_daemon_line
    assert parse(Line(line.encode())) == message


# ---- daemon → device ----

def test_daemon_lines_read_by_a_device():
    assert daemon_says("TEXT") == Text("")
    assert daemon_says("ERROR code") == Error("code", "")
    assert daemon_says("ERROR") == Error("", "")
    assert daemon_says("CALL 4") == Call("4", "")
    assert daemon_says("CALL 4 with  two spaces ") == Call("4", "with  two spaces ")
    assert daemon_says("HELLO 1 homeagent 0.1 beta") == Hello("0.1 beta", 1)
    assert daemon_says(b"TEXT caf\xc3\xa9") == Text("café")


@pytest.mark.parametrize("line", [
    "HELLO", "HELLO 1", "HELLO 1 homeagent", "HELLO 1 homeagent ", "HELLO one homeagent 0.1",
    "HELLO 1 otheragent 0.1", "HELLO -1 homeagent 0.1", "HELLO ١ homeagent 0.1",
])
def test_a_bad_daemon_hello(line):
    assert daemon_says(line) == BadLine(Problem.BAD_HELLO, line)


@pytest.mark.parametrize("line", [
    "PROMPT hi", "OK 1 done", "FAIL 1 no", "EVENT button", "text lower case", "TEXTS x",
    "NOPE",
])
def test_device_lines_are_unknown_to_a_device(line):
    assert daemon_says(line) == BadLine(Problem.UNKNOWN, line)


# ---- device → daemon ----

def test_device_lines_as_devices_write_them():
    assert device_says("OK 7") == Ok("7", "")
    assert device_says("OK") == Ok("", "")
    assert device_says("FAIL 3 two  spaces") == Fail("3", "two  spaces")
    assert device_says("EVENT") == DeviceEvent("")
    assert device_says("HELLO") == DeviceHello("")
    assert device_says("PROMPT  leading space") == Prompt(" leading space")
    assert device_says("PROMPT stray \\q backslash") == Prompt("stray \\q backslash")
    assert device_says("OK \\1 x") == Ok("\\1", "x")  # the call id is a token: not unescaped


@pytest.mark.parametrize("line", ["", " ", "   ", "\t", " \t \x0b"])
def test_blank_lines_are_ignored(line):
    assert device_says(line) == Blank()
    assert daemon_says(line) == Blank()


@pytest.mark.parametrize("line,shown", [
    ("PROMPT", ""),
    ("PROMPT ", ""),
    ("PROMPT    ", "   "),
    ("PROMPT \\n\\r", "\n\r"),   # empty once unescaped
])
def test_an_empty_prompt(line, shown):
    assert device_says(line) == BadLine(Problem.EMPTY_PROMPT, shown)


@pytest.mark.parametrize("line,shown", [
    ("ANNOUNCE", ""), ("ANNOUNCE ", ""), ("ANNOUNCE  \t", " \t"), ("ANNOUNCE \n", "\n"),
])
def test_an_empty_announce(line, shown):
    assert device_says(line) == BadLine(Problem.EMPTY_ANNOUNCE, shown)


def test_stop_takes_no_text():
    assert device_says("STOP ") == Stop()  # trailing spaces are no text
    assert device_says("STOP now") == BadLine(Problem.STOP_WITH_TEXT, "STOP now")
    assert device_says("STOPS") == BadLine(Problem.UNKNOWN, "STOPS")
    assert daemon_says("STOP") == BadLine(Problem.UNKNOWN, "STOP")  # no daemon line


@pytest.mark.parametrize("line", [
    "prompt lower case", "PROMPTX hi", "TEXT a daemon line", "DONE stop", "CALL 1 X",
    "ERROR code message", "START s", "REASONING r", " PROMPT leading space", "\tOK 1",
])
def test_unknown_device_lines(line):
    assert device_says(line) == BadLine(Problem.UNKNOWN, line)


def test_a_bad_line_shows_only_its_start():
    line = "X" * (SHOWN_CHARS + 40)
    assert device_says(line) == BadLine(Problem.UNKNOWN, "X" * SHOWN_CHARS)
    assert daemon_says(line) == BadLine(Problem.UNKNOWN, "X" * SHOWN_CHARS)


@pytest.mark.parametrize("data", [
    b"PROMPT \xff", b"\xc3", b"PROMPT \xed\xa0\x80",  # a surrogate's bytes are no UTF-8
    b"OK 1 " + b"\x80" * 100,
])
def test_a_line_that_is_not_utf8_is_never_decoded(data):
    assert device_says(data) == BadLine(Problem.NOT_UTF8, data[:SHOWN_CHARS])
    assert daemon_says(data) == BadLine(Problem.NOT_UTF8, data[:SHOWN_CHARS])


def test_a_line_too_long():
    assert parse_device_line(LineTooLong(16)) == BadLine(Problem.TOO_LONG, "")
    assert parse_daemon_line(LineTooLong(16)) == BadLine(Problem.TOO_LONG, "")


def test_a_lone_surrogate_cannot_be_sent():
    with pytest.raises(UnicodeEncodeError):
        encode(Text("\ud800"))


def test_only_messages_are_formatted():
    with pytest.raises(TypeError):
        format_line(Blank())


# ---- round trips ----

# A token (a call id, an error code, a version) has no space and no line break.
TOKEN = st.text(st.characters(blacklist_characters=" \n\r", blacklist_categories=("Cs",)))
TEXT = st.text()
PROMPT_TEXT = TEXT.filter(lambda text: text.strip())

DAEMON_MESSAGES = st.one_of(
    st.builds(Hello, TOKEN.filter(bool), st.integers(0, 10 ** 6)),
    st.builds(Start, TEXT), st.builds(Text, TEXT), st.builds(Reasoning, TEXT),
    st.builds(Done, TEXT), st.builds(Error, TOKEN, TEXT), st.builds(Call, TOKEN, TEXT),
    st.builds(Timer, TOKEN, TOKEN, TOKEN, TEXT))
DEVICE_MESSAGES = st.one_of(
    st.builds(Prompt, PROMPT_TEXT), st.builds(Ok, TOKEN, TEXT), st.builds(Fail, TOKEN, TEXT),
    st.builds(DeviceEvent, TEXT), st.builds(DeviceHello, TEXT),
    st.builds(Announce, PROMPT_TEXT), st.just(Stop()))


@settings(max_examples=scaled(1000), derandomize=True)
@given(st.one_of(st.tuples(DAEMON_MESSAGES, st.just(parse_daemon_line)),
                 st.tuples(DEVICE_MESSAGES, st.just(parse_device_line))))
def test_every_line_reads_back(case):
    message, parse = case
    data = encode(message)
    assert data.count(b"\n") == 1 and b"\r" not in data
    [item] = Receiver(parse, len(data)).feed(data)
    assert item == message


# ---- the receiver ----

def test_receiver_frames_then_parses_each_line():
    receiver = Receiver(parse_device_line, 32)
    assert receiver.feed(b"PROMPT hi\r\nOK 1 y") == [Prompt("hi")]
    assert receiver.feed(b"es\n\n" + b"x" * 40 + b"\nEVENT e\n") == [
        Ok("1", "yes"), Blank(), BadLine(Problem.TOO_LONG, ""), DeviceEvent("e")]


@settings(max_examples=scaled(200), derandomize=True)
@given(st.lists(DEVICE_MESSAGES, max_size=8), st.data())
def test_receiver_is_indifferent_to_where_reads_end(messages, data):
    body = b"".join(encode(message) for message in messages)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=6)))
    receiver = Receiver(parse_device_line, max(len(body), 1))
    got = [item for start, end in zip([0, *cuts], [*cuts, len(body)])
           for item in receiver.feed(body[start:end])]
    assert got == messages
