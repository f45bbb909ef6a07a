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

_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: ([^\r\n]*))?")
_FIELD = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([^\r\n\x00]*?)[ \t]*")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r\n]*)?")

# body() states
_HEAD, _LENGTH, _UNTIL_CLOSE, _CHUNK_SIZE_LINE, _CHUNK_DATA, _CHUNK_END, _TRAILERS, _DONE = \
    range(8)


def _blank_line(buf: bytes) -> tuple[int, int]:
    """Where the first empty line is (-1: none yet) and where what follows it
    starts. Lines end in CRLF, or in LF alone from a lax server."""
    end = buf.find(b"\r\n\r\n")
    lf = buf.find(b"\n\n")
    if lf >= 0 and (end < 0 or lf < end):
        return lf, lf + 2
    return end, end + 4


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
        lines = [line[:-1] if line[-1:] == b"\r" else line for line in head.split(b"\n")]
        m = _STATUS_LINE.fullmatch(lines[0])
        if m is None:
            raise ProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
        self.http_version = b"HTTP/1." + m.group(1)
        self.status = int(m.group(2))
        self.reason = m.group(3) or b""
        if len(lines) - 1 > MAX_HEADERS:
            raise ProtocolError(f"more than {MAX_HEADERS} header fields")
        headers = []
        for line in lines[1:]:
            f = _FIELD.fullmatch(line)
            if f is None:
                if line[:1] in (b" ", b"\t"):
                    raise ProtocolError("a folded header line (obsolete line folding)")
                raise ProtocolError(f"not a header field: {line[:80]!r}")
            headers.append((f.group(1), f.group(2)))
        self.headers = headers

    def _values(self, name: bytes) -> list[bytes]:
        """The comma-separated values of every field of this name, lowercased."""
        out = []
        for k, v in self.headers:
            if k.lower() == name:
                out.extend(p.strip().lower() for p in v.split(b","))
        return [p for p in out if p]

    def _frame(self) -> None:
        """How the body ends (RFC 9112 6.3) and whether the connection may
        serve another request."""
        connection = self._values(b"connection")
        self.keep_alive = (b"close" not in connection and
                           (self.http_version == b"HTTP/1.1" or b"keep-alive" in connection))
        if self._method == b"HEAD" or self.status in (204, 304):
            self._state = _DONE
            return
        coding = self._values(b"transfer-encoding")
        lengths = {v.strip() for k, v in self.headers if k.lower() == b"content-length"}
        if coding:
            if lengths:  # a message smuggled past one of the two framings
                self.keep_alive = False
            if coding[-1] == b"chunked":
                self._state = _CHUNK_SIZE_LINE
                return
            self._state, self.keep_alive = _UNTIL_CLOSE, False
            return
        if lengths:
            if len(lengths) > 1:
                raise ProtocolError("Content-Length fields that disagree")
            value = lengths.pop()
            if not value.isdigit() or len(value) > 18:
                raise ProtocolError(f"Content-Length is not a length: {value[:40]!r}")
            self._left = int(value)
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
                line = data[pos:lf - 1 if lf > pos and data[lf - 1] == 13 else lf]
                m = _CHUNK_SIZE.fullmatch(line)
                if m is None:
                    raise ProtocolError(f"not a chunk-size line: {line[:40]!r}")
                pos = lf + 1
                self._left = int(m.group(1), 16)
                state = _CHUNK_DATA if self._left else _TRAILERS
            elif state == _TRAILERS:
                # trailer fields are read past, not kept; an empty line ends them
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
