"""The serial line protocol (docs/serial-protocol.md), sans-IO.

Every line either side sends is a small frozen Message class here:
format_line() writes one as its wire text; parse_device_line() and
parse_daemon_line() read one side's line into its message, or into Blank or
a BadLine whose Problem says why it was skipped. Receiver frames the bytes of
reads (agent.lines) and parses each line. The daemon's device (agent/devices/serial.py) only does the
I/O around these; the demo's virtual board speaks the other side with them.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Callable, ClassVar, Generic, TypeVar, dataclass_transform

from agent.lines import Line, LineReader, LineTooLong

PROTOCOL_VERSION = 1
SHOWN_CHARS = 60  # of a bad line, in the log

_UNESCAPES = {"\\": "\\", "n": "\n", "r": "\r"}
_SHORT = {char: "\\" + name for name, char in _UNESCAPES.items()}
# What a board's terminal, display or parser may act on instead of showing:
# the C0 controls (NUL ends a C string, ESC starts a terminal sequence), DEL,
# the C1 controls (U+0085 is a line break to some parsers), the Unicode
# line and paragraph separators, and the format characters (category Cf:
# the bidi overrides and isolates such as U+202E that reorder what a
# display shows, zero-width characters, the tags that can hide text), but
# the zero-width joiner U+200D, which only joins emoji (👨\u200d👩) and
# which a display shows as the one emoji. \n and \r have short forms.
_FORMAT = ("\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b\u200c\u200e\u200f"
           "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
           "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
           "\U000e0020-\U000e007f")  # Unicode 15.1's Cf, ZWJ aside
_CONTROLS = re.compile(f"[\\\\\n\r\x00-\x1f\x7f-\x9f\u2028\u2029{_FORMAT}]")
_ESCAPED = re.compile(r"\\(?:([\\nr])|x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8}))")


def _escape_one(match: re.Match) -> str:
    char = match[0]
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
            else f"\\U{code:08x}")


def escape(text: str) -> str:
    """One text field of a line: no line break or control character may
    reach the wire raw (docs/serial-protocol.md, Lines)."""
    return _CONTROLS.sub(_escape_one, text)


def _unescape_one(match: re.Match) -> str:
    short, byte, code = match[1], match[2], match[3] or match[4]
    if short is not None:
        return _UNESCAPES[short]
    if byte is not None:
        return chr(int(byte, 16))
    # \u and \U stand only for what escape() writes them for: any other is text
    control = _CONTROLS.fullmatch(chr(int(code, 16)))
    return control[0] if control and _escape_one(control) == match[0] else match[0]


def unescape(text: str) -> str:
    # Unknown escapes stay as they are: a device's stray backslash is text.
    return _ESCAPED.sub(_unescape_one, text)


@dataclass_transform(frozen_default=True)
class Message:
    """A line of the protocol. Each subclass is a frozen dataclass of the
    line's fields, in their order after its keyword (none: a base of lines
    alike)."""
    KEYWORD: ClassVar[str]

    def __init_subclass__(cls, keyword: str | None = None, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if keyword is not None:
            cls.KEYWORD = keyword
        dataclass(frozen=True)(cls)


# ---- daemon → device ----

class Hello(Message, keyword="HELLO"):
    """The daemon's greeting, right after the port is opened."""
    version: str  # the daemon's
    protocol: int = PROTOCOL_VERSION


class Start(Message, keyword="START"):
    """An ask began."""
    session: str


class Text(Message, keyword="TEXT"):
    """Answer text: a sentence or a delta, as the device's `send` says."""
    text: str


class Reasoning(Message, keyword="REASONING"):
    """The model's reasoning."""
    text: str


class Done(Message, keyword="DONE"):
    """The answer is complete."""
    finish_reason: str


class Error(Message, keyword="ERROR"):
    """The ask failed; code is one of the socket API's."""
    code: str
    message: str


class Call(Message, keyword="CALL"):
    """Run a tool's command; the device answers Ok or Fail with the same call_id."""
    call_id: str  # a token without spaces, sent as it is
    command: str


class Voice(Message, keyword="VOICE"):
    """The voice door's state changed: idle, listening, thinking, speaking."""
    state: str


class Timer(Message, keyword="TIMER"):
    """A timer or reminder of the daemon began ringing or went quiet."""
    state: str  # ringing or quiet
    timer: str  # its id, such as t3
    kind: str   # timer or reminder
    label: str


DaemonMessage = Hello | Start | Text | Reasoning | Done | Error | Call | Voice | Timer


# ---- device → daemon ----

class Prompt(Message, keyword="PROMPT"):
    """An ask, its text the prompt."""
    text: str


class CallReply(Message):
    """The device's answer to a Call, Ok or Fail: text is what the model is told."""
    call_id: str
    text: str


class Ok(CallReply, keyword="OK"):
    """The tool call succeeded."""


class Fail(CallReply, keyword="FAIL"):
    """The tool call failed."""


class DeviceEvent(Message, keyword="EVENT"):
    """Something happened on the device (a button, a sensor)."""
    text: str


class DeviceHello(Message, keyword="HELLO"):
    """The device's identification."""
    text: str


class Announce(Message, keyword="ANNOUNCE"):
    """Speak the text on every speech device, without the model."""
    text: str


class Stop(Message, keyword="STOP"):
    """Barge-in: stop every ask and silence every speech device."""


DeviceMessage = Prompt | Ok | Fail | DeviceEvent | DeviceHello | Announce | Stop


# ---- lines that carry no message ----

@dataclass(frozen=True, slots=True)
class Blank:
    """An empty (or all-whitespace) line: ignored."""


class Problem(enum.Enum):
    """Why a line was skipped; a bad line never stops either side."""
    TOO_LONG = "a line over max_line"
    NOT_UTF8 = "a line that is not UTF-8"
    EMPTY_PROMPT = "an empty PROMPT"
    EMPTY_ANNOUNCE = "an empty ANNOUNCE"
    STOP_WITH_TEXT = "a STOP with text after it"
    UNKNOWN = "an unknown line"
    BAD_HELLO = "a HELLO that is not '<version> homeagent <daemon version>'"


@dataclass(frozen=True, slots=True)
class BadLine:
    problem: Problem
    shown: str | bytes  # what of the line the log shows: its start, or nothing


# ---- writing ----

def format_line(message: Message) -> str:
    """The line of a message, without its newline: the call id and the
    versions go as they are, every other field escaped."""
    match message:
        case Hello(version, protocol):
            return f"HELLO {protocol} homeagent {version}"
        case Error(code, text):
            return f"ERROR {escape(code)} {escape(text)}"
        case Timer(state, timer, kind, label):
            return f"TIMER {escape(state)} {escape(timer)} {escape(kind)} {escape(label)}"
        case Call(call_id, text) | CallReply(call_id, text):
            return f"{message.KEYWORD} {call_id} {escape(text)}"
        case Start(text) | Text(text) | Reasoning(text) | Done(text) | Voice(text) | \
                Prompt(text) | DeviceEvent(text) | DeviceHello(text) | Announce(text):
            return f"{message.KEYWORD} {escape(text)}"
        case Stop():
            return message.KEYWORD
    raise TypeError(f"not a serial protocol message: {message!r}")


def encode(message: Message) -> bytes:
    """The bytes of a message's line, newline included."""
    return (format_line(message) + "\n").encode("utf-8")


# ---- reading ----

def _split(item: Line | LineTooLong) -> tuple[str, str, str] | BadLine | Blank:
    """The keyword and the rest of a line, or why there are none."""
    if isinstance(item, LineTooLong):
        return BadLine(Problem.TOO_LONG, "")
    try:
        text = item.data.decode("utf-8")
    except UnicodeDecodeError:
        # never a replacement character in a prompt: the line is dropped
        return BadLine(Problem.NOT_UTF8, item.data[:SHOWN_CHARS])
    if not text.strip():
        return Blank()
    keyword, _, rest = text.partition(" ")
    return keyword, rest, text


def parse_device_line(item: Line | LineTooLong) -> DeviceMessage | Blank | BadLine:
    """A line a device sent, as the daemon reads it."""
    split = _split(item)
    if not isinstance(split, tuple):
        return split
    keyword, rest, text = split
    if keyword == "PROMPT":
        prompt = unescape(rest)
        return Prompt(prompt) if prompt.strip() else BadLine(Problem.EMPTY_PROMPT, prompt)
    if keyword in ("OK", "FAIL"):
        call_id, _, reply = rest.partition(" ")
        return (Ok if keyword == "OK" else Fail)(call_id, unescape(reply))
    if keyword == "EVENT":
        return DeviceEvent(unescape(rest))
    if keyword == "HELLO":
        return DeviceHello(unescape(rest))
    if keyword == "ANNOUNCE":
        announcement = unescape(rest)
        return Announce(announcement) if announcement.strip() \
            else BadLine(Problem.EMPTY_ANNOUNCE, announcement)
    if keyword == "STOP":
        return Stop() if not rest.strip() else BadLine(Problem.STOP_WITH_TEXT,
                                                       text[:SHOWN_CHARS])
    return BadLine(Problem.UNKNOWN, text[:SHOWN_CHARS])


_TEXT_LINES: dict[str, type[Start | Text | Reasoning | Done | Voice]] = {
    cls.KEYWORD: cls for cls in (Start, Text, Reasoning, Done, Voice)}


def parse_daemon_line(item: Line | LineTooLong) -> DaemonMessage | Blank | BadLine:
    """A line the daemon sent, as a device reads it."""
    split = _split(item)
    if not isinstance(split, tuple):
        return split
    keyword, rest, text = split
    if keyword in _TEXT_LINES:
        return _TEXT_LINES[keyword](unescape(rest))
    if keyword == "ERROR":
        code, _, message = rest.partition(" ")
        return Error(unescape(code), unescape(message))
    if keyword == "CALL":
        call_id, _, command = rest.partition(" ")
        return Call(call_id, unescape(command))
    if keyword == "TIMER":
        return Timer(*map(unescape, (rest.split(" ", 3) + ["", "", ""])[:4]))
    if keyword == "HELLO":
        protocol, name, version = (rest.split(" ", 2) + ["", ""])[:3]
        if not (protocol.isascii() and protocol.isdigit()) or name != "homeagent" or not version:
            return BadLine(Problem.BAD_HELLO, text[:SHOWN_CHARS])
        return Hello(version, int(protocol))
    return BadLine(Problem.UNKNOWN, text[:SHOWN_CHARS])


Outcome = TypeVar("Outcome")


class Receiver(Generic[Outcome]):
    """Bytes of reads in, one outcome per line out: parse is the side read."""

    def __init__(self, parse: Callable[[Line | LineTooLong], Outcome], max_line: int) -> None:
        self._lines = LineReader(max_line)
        self._parse = parse

    def feed(self, data: bytes) -> list[Outcome]:
        return [self._parse(item) for item in self._lines.feed(data)]
