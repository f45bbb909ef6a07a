"""One HTTP/1.1 response as a sans-IO object: bytes in, its head and body out.

agent/providers/transport.py writes a request and hands every read of the
connection to a ResponseReader: receive_head() until the status line and
headers are complete (interim 1xx responses are skipped), then body() for
each read. The body is framed as RFC 9112 section 6.3 says: chunked transfer
coding, Content-Length, or the connection's close. body() hands out the body
bytes of a read as they arrive, never waiting for a chunk to complete, so an
event is with the decoder as soon as its bytes are; the bytes of several
chunks in one read come out as one piece. Whether the connection can carry
another request afterwards is keep_alive.

Everything that is not HTTP/1.1 raises ProtocolError, which says what.
What is refused and what is accepted follows h11: a head's lines end in
CRLF or LF, a folded header line (obs-fold) is unfolded with one SP, a
Content-Length repeated with the same value is one length; chunk-size lines
end in CRLF, trailers are header fields, the only transfer coding is chunked,
once, and a reason phrase holds no NUL or control whitespace.
Sizes are bounded: the head by MAX_HEAD bytes and MAX_HEADERS fields, the
interim responses before it by MAX_INTERIM, a chunk-size line by
MAX_CHUNK_LINE, the trailers by MAX_HEAD.
"""

from __future__ import annotations

import re

MAX_HEAD = 64 * 1024
MAX_HEADERS = 128
MAX_CHUNK_LINE = 1024
MAX_INTERIM = 8  # 1xx responses before the response

_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: (.*))?", re.S)
_REASON = re.compile(rb"(?:[ \t]|[^\x00\s])*")  # h11's reason-phrase
_FIELD = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([^\r\n\x00]*?)[ \t]*")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r\n]*)?")

# body() states
_HEAD, _LENGTH, _UNTIL_CLOSE, _CHUNK_SIZE_LINE, _CHUNK_DATA, _CHUNK_END, _TRAILERS, _DONE = \
    range(8)


_BLANK_LINE = re.compile(rb"\n\r?\n")


def _blank_line(buf: bytes) -> tuple[int, int]:
    """Where the lines before the first empty line end, without their last
    line end (-1: no empty line yet), and where what follows it starts.
    Lines end in CRLF, or in LF alone from a lax server: the empty line is
    LF or CRLF after either."""
    m = _BLANK_LINE.search(buf)
    if m is None:
        return -1, -1
    end = m.start()
    if end and buf[end - 1] == 13:
        end -= 1
    return end, m.end()


def _lines(block: bytes) -> list[bytes]:
    """The lines of a head or trailer block, without their CRLF or LF."""
    return [line[:-1] if line[-1:] == b"\r" else line for line in block.split(b"\n")]


def _fields(lines: list[bytes], what: str) -> list[tuple[bytes, bytes]]:
    """The header (or trailer) fields of these lines. A line that starts with
    SP or HTAB continues the one before (obs-fold, RFC 9112 5.2): the fold
    and the whitespace around it become one SP."""
    unfolded: list[list[bytes]] = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            if not unfolded:
                raise ProtocolError(f"a folded line before the first {what} field: "
                                    f"{line[:80]!r}")
            unfolded[-1][-1] = unfolded[-1][-1].rstrip(b" \t")
            unfolded[-1].append(line.lstrip(b" \t"))
        else:
            unfolded.append([line])
    fields = []
    for parts in unfolded:
        line = b" ".join(parts)
        f = _FIELD.fullmatch(line)
        if f is None:
            raise ProtocolError(f"not a {what} field: {line[:80]!r}")
        fields.append((f.group(1), f.group(2)))
    return fields


class ProtocolError(Exception):
    """The peer's bytes are not an HTTP/1.1 response."""


class ResponseReader:
    """The response to one request. method is the request's (a HEAD
    response has no body)."""

    __slots__ = ("status", "reason", "headers", "http_version", "keep_alive", "_state",
                 "_pending", "_left", "_method", "_interim")

    def __init__(self, method: bytes = b"POST") -> None:
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.http_version = b"HTTP/1.1"
        self.keep_alive = False  # known once the message is complete
        self._method = method
        self._state = _HEAD
        self._pending = b""  # bytes of a head or chunk line not yet whole, or body bytes
        self._left = 0       # bytes of the Content-Length or of the chunk in progress
        self._interim = 0    # 1xx responses read past

    @property
    def done(self) -> bool:
        """The whole message has arrived."""
        return self._state == _DONE

    @property
    def until_close(self) -> bool:
        """The body ends where the connection does."""
        return self._state == _UNTIL_CLOSE

    def receive_head(self, data: bytes) -> bool:
        """Take a read before the head is complete; True once it is. The
        body bytes that came with the head wait for the first body() call."""
        if self._state != _HEAD:
            raise RuntimeError("the head is complete already")
        buf = self._pending + data if self._pending else data
        while True:
            end, cut = _blank_line(buf)
            if end < 0:
                if len(buf) > MAX_HEAD + 3:  # a head of MAX_HEAD, and all but one byte of CRLFCRLF
                    raise ProtocolError(f"a response head of more than {MAX_HEAD} bytes")
                self._pending = buf
                return False
            if end > MAX_HEAD:
                raise ProtocolError(f"a response head of more than {MAX_HEAD} bytes")
            head, buf = buf[:end], buf[cut:]
            self._parse_head(head)
            if self.status >= 200:
                break
            if self.status == 101:
                raise ProtocolError("the server switched protocols (101), unasked")
            # 1xx: interim (100 Continue, 103 Early Hints); the response follows
            self._interim += 1
            if self._interim > MAX_INTERIM:
                raise ProtocolError(f"more than {MAX_INTERIM} interim (1xx) responses")
        self._pending = buf
        self._frame()
        return True

    def _parse_head(self, head: bytes) -> None:
        lines = _lines(head)
        m = _STATUS_LINE.fullmatch(lines[0])
        if m is None:
            raise ProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
        reason = m.group(3) or b""
        if _REASON.fullmatch(reason) is None:
            raise ProtocolError(f"a NUL or control character in the reason phrase: "
                                f"{reason[:80]!r}")
        self.http_version = b"HTTP/1." + m.group(1)
        self.status = int(m.group(2))
        self.reason = reason
        if len(lines) - 1 > MAX_HEADERS:
            raise ProtocolError(f"more than {MAX_HEADERS} header fields")
        self.headers = _fields(lines[1:], "header")

    def _values(self, name: bytes) -> list[bytes]:
        """The comma-separated values of every field of this name, lowercased."""
        out = []
        for k, v in self.headers:
            if k.lower() == name:
                out.extend(p.strip().lower() for p in v.split(b","))
        return [p for p in out if p]

    def _framing(self) -> tuple[bool, int | None]:
        """Whether the body is chunked, and its Content-Length (None: none),
        refusing what h11 refuses: a transfer coding other than chunked,
        chunked twice, Content-Length values that are no length or differ.
        Content-Length: 5, 5 (or two fields of 5) is a length of 5."""
        codings = [v for k, v in self.headers if k.lower() == b"transfer-encoding"]
        if codings:
            if self._values(b"transfer-encoding").count(b"chunked") > 1:
                raise ProtocolError("Transfer-Encoding names chunked more than once")
            if len(codings) > 1:
                raise ProtocolError("more than one Transfer-Encoding field")
            if codings[0].lower() != b"chunked":
                raise ProtocolError(f"a Transfer-Encoding other than chunked: "
                                    f"{codings[0][:40]!r}")
        lengths = {p.strip() for k, v in self.headers if k.lower() == b"content-length"
                   for p in v.split(b",")}
        for value in lengths:
            if not value.isdigit() or len(value) > 18:
                raise ProtocolError(f"Content-Length is not a length: {value[:40]!r}")
        if len(lengths) > 1:
            raise ProtocolError("Content-Length fields that disagree")
        return bool(codings), int(lengths.pop()) if lengths else None

    def _frame(self) -> None:
        """How the body ends (RFC 9112 6.3) and whether the connection may
        serve another request."""
        connection = self._values(b"connection")
        self.keep_alive = (b"close" not in connection and
                           (self.http_version == b"HTTP/1.1" or b"keep-alive" in connection))
        chunked, length = self._framing()
        if self._method == b"HEAD" or self.status in (204, 304):
            self._state = _DONE
            return
        if chunked:
            if length is not None:  # a message smuggled past one of the two framings
                self.keep_alive = False
            self._state = _CHUNK_SIZE_LINE
            return
        if length is not None:
            self._left = length
            self._state = _LENGTH if self._left else _DONE
            return
        self._state, self.keep_alive = _UNTIL_CLOSE, False

    def body(self, data: bytes) -> bytes:
        """The body bytes of this read (b"" when it held none)."""
        if self._pending:
            data, self._pending = self._pending + data, b""
        state = self._state
        if state == _CHUNK_DATA and len(data) < self._left:
            self._left -= len(data)  # a piece of a long chunk: all body
            return data
        if state == _UNTIL_CLOSE:
            return data
        if state == _LENGTH:
            if len(data) <= self._left:
                self._left -= len(data)
                if not self._left:
                    self._state = _DONE
                return data
            self._state, self.keep_alive = _DONE, False  # bytes past the body
            data = data[:self._left]
            return data
        if state == _DONE:
            if data:
                self.keep_alive = False
            return b""
        if state == _HEAD:
            raise RuntimeError("body() before the head is complete")
        return self._chunked(data)

    def _chunked(self, data: bytes) -> bytes:
        out = []
        pos, n = 0, len(data)
        state = self._state
        while pos < n:
            if state == _CHUNK_DATA:
                take = min(self._left, n - pos)
                out.append(data[pos:pos + take] if take < n else data)
                pos += take
                self._left -= take
                if not self._left:
                    state = _CHUNK_END
            elif state == _CHUNK_END:
                if n - pos < 2:
                    if data[pos:] != b"\r"[:n - pos]:
                        raise ProtocolError("a chunk's data is not followed by CRLF")
                    self._pending = data[pos:]
                    break
                if data[pos:pos + 2] != b"\r\n":
                    raise ProtocolError("a chunk's data is not followed by CRLF")
                pos += 2
                state = _CHUNK_SIZE_LINE
            elif state == _CHUNK_SIZE_LINE:
                lf = data.find(b"\n", pos, pos + MAX_CHUNK_LINE + 1)
                if lf < 0:
                    if n - pos > MAX_CHUNK_LINE:
                        raise ProtocolError(f"a chunk-size line of more than "
                                            f"{MAX_CHUNK_LINE} bytes")
                    self._pending = data[pos:]
                    break
                if lf == pos or data[lf - 1] != 13:
                    raise ProtocolError(f"a chunk-size line ended by a bare LF, not CRLF: "
                                        f"{data[pos:lf][:40]!r}")
                line = data[pos:lf - 1]
                m = _CHUNK_SIZE.fullmatch(line)
                if m is None:
                    raise ProtocolError(f"not a chunk-size line: {line[:40]!r}")
                pos = lf + 1
                self._left = int(m.group(1), 16)
                state = _CHUNK_DATA if self._left else _TRAILERS
            elif state == _TRAILERS:
                # trailer fields are checked and read past, not kept; an empty
                # line ends them
                rest = data[pos:]
                if rest.startswith(b"\r\n") or rest.startswith(b"\n"):
                    pos += 2 if rest[0] == 13 else 1
                    state = _DONE
                    continue
                end, cut = _blank_line(rest)
                if end < 0:
                    if len(rest) > MAX_HEAD:
                        raise ProtocolError(f"trailers of more than {MAX_HEAD} bytes")
                    self._pending = rest
                    break
                _fields(_lines(rest[:end]), "trailer")
                pos += cut
                state = _DONE
            else:  # _DONE with bytes left: no second response was asked for
                self.keep_alive = False
                break
        self._state = state
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    def eof(self) -> None:
        """The peer closed its side. Fine where the body ends at the close
        (or had ended); otherwise ProtocolError names what was cut."""
        state = self._state
        if state == _UNTIL_CLOSE:
            self._state = _DONE
        elif state == _HEAD:
            if self._pending:
                raise ProtocolError("the connection closed in the middle of the response head")
            raise ProtocolError("the server closed the connection without a response")
        elif state == _LENGTH:
            raise ProtocolError(f"the connection closed {self._left} bytes before the end "
                                "of the body (Content-Length)")
        elif state != _DONE:
            raise ProtocolError("the connection closed before the last chunk of the body "
                                "(incomplete chunked body)")
        self.keep_alive = False
