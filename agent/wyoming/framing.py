"""The Wyoming protocol's framing, sans-IO: bytes of reads in, events out.

An event on the wire is one JSON header line (`type`, optional `data`,
`data_length`, `payload_length`), then `data_length` bytes of a JSON object
merged over `data`, then `payload_length` bytes of binary payload (PCM audio).
Reader frames any split of that into Event objects within configured limits;
encode() writes one. Both the speech device (a TTS client) and the
conversation service (a server) use them; neither touches a socket here.

Wyoming has no way to find the next event after a broken one (a payload is
raw bytes of any value), so every framing error is final: the Reader returns
one FramingError naming the problem and then refuses more input, and the
connection is closed by its owner.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

from agent.jsontypes import is_type
from agent.stream.jsonscan import FLAG_BAD_UTF8, FLAG_LONE_SURROGATE, JSONError, loads_flagged

# The protocol version this side writes; peers ignore it, as the reference does.
VERSION = "1.7.0"
DEFAULT_MAX_HEADER = 64 * 1024
DEFAULT_MAX_DATA = 1024 * 1024      # a TTS server's info lists every voice
DEFAULT_MAX_PAYLOAD = 1024 * 1024   # an audio chunk is a few KiB


@dataclass(frozen=True, slots=True)
class Event:
    type: str
    data: dict = field(default_factory=dict)
    payload: bytes = b""


class Problem(enum.Enum):
    HEADER_TOO_LONG = "header_too_long"
    HEADER_NOT_JSON = "header_not_json"
    HEADER_NOT_OBJECT = "header_not_object"
    NO_TYPE = "no_type"
    BAD_LENGTH = "bad_length"
    DATA_TOO_LONG = "data_too_long"
    PAYLOAD_TOO_LONG = "payload_too_long"
    DATA_NOT_JSON = "data_not_json"
    DATA_NOT_OBJECT = "data_not_object"
    NOT_UTF8 = "not_utf8"
    CLOSED_MID_EVENT = "closed_mid_event"


@dataclass(frozen=True, slots=True)
class FramingError:
    problem: Problem
    detail: str


class ReaderBroken(RuntimeError):
    """feed() after a FramingError: the connection cannot be resynchronised."""


class Reader:
    """Bytes of reads in, Event and FramingError out. Memory stays within the
    limits: a header line is refused as soon as it passes max_header bytes,
    and the lengths a header announces are checked before any is buffered."""

    def __init__(self, max_header: int = DEFAULT_MAX_HEADER, max_data: int = DEFAULT_MAX_DATA,
                 max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        self.max_header = max_header
        self.max_data = max_data
        self.max_payload = max_payload
        self._buffer = bytearray()
        self._header: tuple[str, dict, int, int] | None = None  # announced, body pending
        self._broken = False

    def feed(self, data: bytes) -> list[Event | FramingError]:
        if self._broken:
            raise ReaderBroken("feed() after a framing error")
        self._buffer += data
        out: list[Event | FramingError] = []
        while True:
            item = self._next()
            if item is None:
                return out
            out.append(item)
            if type(item) is FramingError:
                self._broken = True
                self._buffer.clear()
                return out

    def close(self) -> list[FramingError]:
        """End of input: an event cut short is named; nothing else is pending."""
        if self._broken or (not self._buffer and self._header is None):
            return []
        self._broken = True
        pending = len(self._buffer)
        self._buffer.clear()
        what = "a header line" if self._header is None else f"the body of {self._header[0]!r}"
        return [FramingError(Problem.CLOSED_MID_EVENT, f"closed after {pending} bytes of {what}")]

    @property
    def pending(self) -> int:
        return len(self._buffer)

    @property
    def mid_event(self) -> bool:
        """Whether an event has begun and is not complete yet."""
        return bool(self._buffer) or self._header is not None

    def _next(self) -> Event | FramingError | None:
        if self._header is None:
            end = self._buffer.find(b"\n", 0, self.max_header + 1)
            if end < 0:
                if len(self._buffer) > self.max_header:
                    return FramingError(Problem.HEADER_TOO_LONG,
                                        f"no newline in the first {self.max_header} bytes")
                return None
            line = bytes(self._buffer[:end])
            del self._buffer[:end + 1]
            header = self._parse_header(line)
            if type(header) is FramingError:
                return header
            self._header = header
        kind, data, data_length, payload_length = self._header
        if len(self._buffer) < data_length + payload_length:
            return None
        self._header = None
        if data_length:
            extra = self._json_object(bytes(self._buffer[:data_length]), Problem.DATA_NOT_JSON,
                                      Problem.DATA_NOT_OBJECT, f"the data of {kind!r}")
            if type(extra) is FramingError:
                return extra
            data = {**data, **extra}
        payload = bytes(self._buffer[data_length:data_length + payload_length])
        del self._buffer[:data_length + payload_length]
        return Event(kind, data, payload)

    def _parse_header(self, line: bytes) -> tuple[str, dict, int, int] | FramingError:
        header = self._json_object(line, Problem.HEADER_NOT_JSON, Problem.HEADER_NOT_OBJECT,
                                   "the header line")
        if type(header) is FramingError:
            return header
        kind = header.get("type")
        if not isinstance(kind, str) or not kind:
            return FramingError(Problem.NO_TYPE, f"the header has no type string: {line[:80]!r}")
        data = header.get("data")
        if data is None:
            data = {}
        elif not isinstance(data, dict):
            return FramingError(Problem.HEADER_NOT_OBJECT, f"the data of {kind!r} is not an object")
        lengths = []
        for name, limit, too_long in (("data_length", self.max_data, Problem.DATA_TOO_LONG),
                                      ("payload_length", self.max_payload,
                                       Problem.PAYLOAD_TOO_LONG)):
            value = header.get(name)
            if value is None:
                value = 0
            if not is_type(value, int) or value < 0:
                return FramingError(Problem.BAD_LENGTH, f"{name} of {kind!r} is {value!r}")
            if value > limit:
                return FramingError(too_long, f"{name} of {kind!r} is {value}, over {limit}")
            lengths.append(value)
        return kind, data, lengths[0], lengths[1]

    @staticmethod
    def _json_object(raw: bytes, not_json: Problem, not_object: Problem,
                     what: str) -> dict | FramingError:
        # the daemon's one strict JSON reader, as for the socket API
        try:
            value, flags = loads_flagged(raw)
        except JSONError as exc:
            return FramingError(not_json, f"{what} is not JSON: {exc}")
        if flags & (FLAG_BAD_UTF8 | FLAG_LONE_SURROGATE):
            return FramingError(Problem.NOT_UTF8, f"{what} has a string that is not UTF-8")
        if not isinstance(value, dict):
            return FramingError(not_object, f"{what} is not a JSON object")
        return value


def parse_address(address: object) -> tuple[str, str, int]:
    """A Wyoming address as its programs write it: ("tcp", host, port) for
    "tcp://HOST:PORT", ("unix", path, 0) for "unix:PATH" or "unix://PATH".
    Raises ValueError saying what is wrong."""
    usage = 'must be "tcp://HOST:PORT" or "unix:PATH"'
    if not isinstance(address, str):
        raise ValueError(usage)
    if address.startswith("unix:"):
        path = address[len("unix:"):].removeprefix("//")
        if not path.startswith("/"):
            raise ValueError("a unix socket's path must be absolute")
        return "unix", path, 0
    if address.startswith("tcp://"):
        host, _, port = address[len("tcp://"):].rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if host and port.isdigit() and 0 < int(port) < 65536:
            return "tcp", host, int(port)
    raise ValueError(f"{usage}, not {address!r}")


def encode(event: Event) -> bytes:
    """One event's bytes. The data goes after the header (data_length), as
    the reference writes it; JSON escapes every newline of its strings, so
    no text in it can end the header line early."""
    header: dict = {"type": event.type, "version": VERSION}
    body = b""
    if event.data:
        body = json.dumps(event.data, ensure_ascii=False, separators=(",", ":")).encode()
        header["data_length"] = len(body)
    if event.payload:
        header["payload_length"] = len(event.payload)
    line = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    return b"".join((line, b"\n", body, event.payload))
