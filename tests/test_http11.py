"""agent/providers/http11.py: the sans-IO HTTP/1.1 response reader.

Every well-formed response is fed whole, in 1-byte reads and split at every
position; the head, the body bytes, `done` and `keep_alive` must come out
the same every time. Every malformed one must raise a ProtocolError that
says what is wrong, however its bytes are split.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from agent.providers.http11 import (
    MAX_CHUNK_LINE,
    MAX_HEAD,
    MAX_HEADERS,
    MAX_INTERIM,
    ProtocolError,
    ResponseReader,
)
from conftest import scaled


# ---------------------------------------------------------------------------
# Driving a reader the way agent/providers/transport.py does
# ---------------------------------------------------------------------------

class Fed:
    """What a reader made of a sequence of reads."""

    def __init__(self, reader: ResponseReader, pieces: list[bytes], done_after: list[bool]):
        self.reader = reader
        self.pieces = pieces          # body() results, b"" included
        self.done_after = done_after  # reader.done after each read
        self.body = b"".join(pieces)


def feed(parts: list[bytes], method: bytes = b"GET", eof: bool = False) -> Fed:
    """receive_head() each read until the head is whole, then body(b"") for
    the bytes that came with it (as the transport does), then body() for
    every later read; eof() at the end when asked."""
    reader = ResponseReader(method)
    pieces: list[bytes] = []
    done_after: list[bool] = []
    head = False
    for part in parts:
        if not head:
            head = reader.receive_head(part)
            if head:
                pieces.append(reader.body(b""))
        else:
            pieces.append(reader.body(part))
        done_after.append(reader.done)
    if eof:
        reader.eof()
    return Fed(reader, pieces, done_after)


def splits(raw: bytes):
    """The ways to deliver raw: whole, in 1-byte reads, cut in two at every position."""
    yield "whole", [raw]
    yield "bytewise", [raw[i:i + 1] for i in range(len(raw))]
    for i in range(1, len(raw)):
        yield f"split at {i}", [raw[:i], raw[i:]]


def raise_split(raw: bytes, method: bytes = b"GET", eof: bool = False):
    """For each delivery of raw: the ProtocolError it raised (None: none)."""
    for how, parts in splits(raw):
        try:
            feed(parts, method, eof)
        except ProtocolError as exc:
            yield how, exc
        else:
            yield how, None


# ---------------------------------------------------------------------------
# Well-formed responses
# ---------------------------------------------------------------------------

CHUNKED_EXT_TRAILERS = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\n"
    b"\r\n"
    b"5;name=value\r\nhello\r\n"
    b"7 ; a=\"b c\"\r\n, world\r\n"
    b"A\r\n0123456789\r\n"
    b"1a\r\n" + b"z" * 26 + b"\r\n"
    b"0\r\nX-Trailer: yes\r\nX-Other: 2\r\n\r\n")

# (id, raw, request method, status, reason, headers, body, keep_alive, closes, version)
# closes: the body ends at the connection's close (eof() is fed at the end).
CASES = [
    ("chunked-ext-trailers", CHUNKED_EXT_TRAILERS, b"POST", 200, b"OK",
     [(b"Content-Type", b"text/event-stream"), (b"Transfer-Encoding", b"chunked")],
     b"hello, world0123456789" + b"z" * 26, True, False, b"HTTP/1.1"),
    ("chunked-capitalised",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\n\x1f\x8b\x08\r\n0\r\n\r\n",
     b"GET", 200, b"OK", [(b"Transfer-Encoding", b"Chunked")], b"\x1f\x8b\x08",
     True, False, b"HTTP/1.1"),
    ("content-length",
     b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nX-Pad:   spaced  value \t\r\nX-Empty:\r\n\r\n"
     b"hello world",
     b"GET", 200, b"OK",
     [(b"Content-Length", b"11"), (b"X-Pad", b"spaced  value"), (b"X-Empty", b"")],
     b"hello world", True, False, b"HTTP/1.1"),
    ("content-length-zero", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", b"GET", 200,
     b"OK", [(b"Content-Length", b"0")], b"", True, False, b"HTTP/1.1"),
    ("content-length-list-same",
     b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok",
     b"GET", 200, b"OK", [(b"Content-Length", b"2, 2")], b"ok", True, False, b"HTTP/1.1"),
    ("content-length-list-and-field-same",
     b"HTTP/1.1 200 OK\r\nContent-Length: 2 ,2\r\nContent-Length: 2\r\n\r\nok",
     b"GET", 200, b"OK", [(b"Content-Length", b"2 ,2"), (b"Content-Length", b"2")], b"ok",
     True, False, b"HTTP/1.1"),
    ("content-length-repeated-same",
     b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
     b"POST", 201, b"Created", [(b"Content-Length", b"2"), (b"Content-Length", b"2")], b"ok",
     True, False, b"HTTP/1.1"),
    ("close-delimited",
     b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end\r\n\r\nof it",
     b"GET", 200, b"OK", [(b"Content-Type", b"text/plain")], b"until the end\r\n\r\nof it",
     False, True, b"HTTP/1.1"),
    ("204", b"HTTP/1.1 204 No Content\r\nServer: x\r\n\r\n", b"DELETE", 204, b"No Content",
     [(b"Server", b"x")], b"", True, False, b"HTTP/1.1"),
    ("304-with-length", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 42\r\n\r\n", b"GET",
     304, b"Not Modified", [(b"Content-Length", b"42")], b"", True, False, b"HTTP/1.1"),
    ("head-with-length", b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", b"HEAD", 200,
     b"OK", [(b"Content-Length", b"1000")], b"", True, False, b"HTTP/1.1"),
    ("head-chunked", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"HEAD", 200,
     b"OK", [(b"Transfer-Encoding", b"chunked")], b"", True, False, b"HTTP/1.1"),
    ("interim-1xx",
     b"HTTP/1.1 100 Continue\r\n\r\n"
     b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
     b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
     b"POST", 200, b"OK", [(b"Content-Length", b"2")], b"ok", True, False, b"HTTP/1.1"),
    ("lf-only",
     b"HTTP/1.1 200 OK\nContent-Length: 5\nX-A: b\n\nhello",
     b"GET", 200, b"OK", [(b"Content-Length", b"5"), (b"X-A", b"b")], b"hello", True, False,
     b"HTTP/1.1"),
    ("lf-only-head-and-trailers",
     b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n5\r\nhello\r\n3;x\r\nabc\r\n0\r\nT: 1\n\n",
     b"GET", 200, b"OK", [(b"Transfer-Encoding", b"chunked")], b"helloabc", True, False,
     b"HTTP/1.1"),
    ("crlf-and-lf-mixed",
     b"HTTP/1.1 200 OK\r\nContent-Length: 2\nX-A: b\r\n\nok", b"GET", 200, b"OK",
     [(b"Content-Length", b"2"), (b"X-A", b"b")], b"ok", True, False, b"HTTP/1.1"),
    ("head-ends-lf-crlf",
     b"HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\nok", b"GET", 200, b"OK",
     [(b"Content-Length", b"2")], b"ok", True, False, b"HTTP/1.1"),
    ("head-ends-lf-crlf-no-fields", b"HTTP/1.1 204 No Content\n\r\n", b"GET", 204,
     b"No Content", [], b"", True, False, b"HTTP/1.1"),
    ("trailers-end-lf-crlf",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nT: 1\n\r\n",
     b"GET", 200, b"OK", [(b"Transfer-Encoding", b"chunked")], b"hi", True, False,
     b"HTTP/1.1"),
    ("obs-fold",
     b"HTTP/1.1 200 OK\r\nX: a \r\n  continued\r\nContent-Length: 2\r\n\r\nok",
     b"GET", 200, b"OK", [(b"X", b"a continued"), (b"Content-Length", b"2")], b"ok", True,
     False, b"HTTP/1.1"),
    ("obs-fold-tab-twice",
     b"HTTP/1.1 200 OK\r\nX: a\r\n\tb\r\n \t c \r\nContent-Length: 0\r\n\r\n",
     b"GET", 200, b"OK", [(b"X", b"a b c"), (b"Content-Length", b"0")], b"", True, False,
     b"HTTP/1.1"),
    ("obs-fold-in-trailers",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nT: 1\r\n 2\r\n\r\n",
     b"GET", 200, b"OK", [(b"Transfer-Encoding", b"chunked")], b"hi", True, False,
     b"HTTP/1.1"),
    ("reason-tab-and-obs-text", b"HTTP/1.1 200 O\tK \xe9\r\nContent-Length: 0\r\n\r\n",
     b"GET", 200, b"O\tK \xe9", [(b"Content-Length", b"0")], b"", True, False, b"HTTP/1.1"),
    ("same-name-fields",
     b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nVary: x\r\nSet-Cookie: b=2\r\n"
     b"Content-Length: 1\r\n\r\n!",
     b"GET", 200, b"OK",
     [(b"Set-Cookie", b"a=1"), (b"Vary", b"x"), (b"Set-Cookie", b"b=2"),
      (b"Content-Length", b"1")], b"!", True, False, b"HTTP/1.1"),
    ("connection-close",
     b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye",
     b"GET", 200, b"OK", [(b"Connection", b"close"), (b"Content-Length", b"3")], b"bye",
     False, False, b"HTTP/1.1"),
    ("connection-close-among-several",
     b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive\r\nConnection: x-foo, CLOSE\r\n"
     b"Content-Length: 3\r\n\r\nbye",
     b"GET", 200, b"OK",
     [(b"Connection", b"Keep-Alive"), (b"Connection", b"x-foo, CLOSE"),
      (b"Content-Length", b"3")], b"bye", False, False, b"HTTP/1.1"),
    ("http10", b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nold", b"GET", 200, b"OK",
     [(b"Content-Length", b"3")], b"old", False, False, b"HTTP/1.0"),
    ("http10-keep-alive",
     b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nold",
     b"GET", 200, b"OK", [(b"Connection", b"keep-alive"), (b"Content-Length", b"3")], b"old",
     True, False, b"HTTP/1.0"),
    ("http10-close-delimited", b"HTTP/1.0 200 OK\r\n\r\nto the end", b"GET", 200, b"OK",
     [], b"to the end", False, True, b"HTTP/1.0"),
    ("te-and-cl",
     b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"4\r\nabcd\r\n0\r\n\r\n",
     b"GET", 200, b"OK",
     [(b"Content-Length", b"100"), (b"Transfer-Encoding", b"chunked")], b"abcd", False, False,
     b"HTTP/1.1"),
    ("no-reason", b"HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n", b"GET", 404, b"",
     [(b"Content-Length", b"0")], b"", True, False, b"HTTP/1.1"),
    ("bytes-after-length", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200",
     b"GET", 200, b"OK", [(b"Content-Length", b"5")], b"hello", False, False, b"HTTP/1.1"),
    ("bytes-after-chunked",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\nextra",
     b"GET", 200, b"OK", [(b"Transfer-Encoding", b"chunked")], b"hi", False, False,
     b"HTTP/1.1"),
    ("bytes-after-chunked-trailers",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nT: 1\r\n\r\nX",
     b"GET", 200, b"OK", [(b"Transfer-Encoding", b"chunked")], b"hi", False, False,
     b"HTTP/1.1"),
    ("bytes-after-204", b"HTTP/1.1 204 No Content\r\n\r\njunk", b"GET", 204, b"No Content",
     [], b"", False, False, b"HTTP/1.1"),
]
TRAILING_BYTES = {"bytes-after-length", "bytes-after-chunked", "bytes-after-chunked-trailers",
                  "bytes-after-204"}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_response_any_split(case):
    name, raw, method, status, reason, headers, body, keep_alive, closes, version = case
    for how, parts in splits(raw):
        fed = feed(parts, method, eof=closes)
        r = fed.reader
        where = f"{name}, {how}"
        assert (r.status, r.reason, r.http_version) == (status, reason, version), where
        assert r.headers == headers, where
        assert fed.body == body, where
        assert r.done, where
        assert r.keep_alive is keep_alive, where
        assert not r.until_close, where
        if closes:
            # a body that ends at the close is never done before it
            assert not any(fed.done_after), where
        elif name not in TRAILING_BYTES:
            # done with the message's last byte, not before
            assert fed.done_after[-1] and not any(fed.done_after[:-1]), where


@pytest.mark.parametrize("case", [c for c in CASES if c[8]], ids=[c[0] for c in CASES if c[8]])
def test_close_delimited_until_close(case):
    """Before the close, a close-delimited body is until_close and not done."""
    _, raw, method, *_ = case
    fed = feed([raw], method)
    assert fed.reader.until_close and not fed.reader.done
    assert fed.reader.keep_alive is False
    fed.reader.eof()
    assert fed.reader.done and not fed.reader.until_close


def test_body_pieces_come_as_they_arrive():
    """A long chunk's bytes come out read by read, before the chunk is whole;
    several whole chunks in one read come out as one piece."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    r = ResponseReader()
    assert r.receive_head(head)
    assert r.body(b"") == b""
    assert r.body(b"10\r\nabcd") == b"abcd"
    assert r.body(b"efgh") == b"efgh"
    assert r.body(b"ijklmnop\r\n3\r\nxyz\r\n2\r\n12\r\n") == b"ijklmnopxyz12"
    assert not r.done
    assert r.body(b"0\r\n\r\n") == b""
    assert r.done and r.keep_alive


def test_content_length_past_body_cut():
    r = ResponseReader()
    assert r.receive_head(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n")
    assert r.body(b"ab") == b"ab"
    assert r.keep_alive and not r.done
    assert r.body(b"cdEXTRA") == b"cd"
    assert r.done and not r.keep_alive
    assert r.body(b"more") == b""


def test_keep_alive_lost_to_bytes_after_done():
    r = ResponseReader()
    assert r.receive_head(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert r.body(b"") == b"ok"
    assert r.done and r.keep_alive
    assert r.body(b"") == b"" and r.keep_alive  # nothing more: still fine
    assert r.body(b"x") == b""
    assert not r.keep_alive


def test_eof_after_done_ends_keep_alive():
    r = ResponseReader()
    assert r.receive_head(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert r.body(b"") == b"ok" and r.keep_alive
    r.eof()
    assert r.done and not r.keep_alive


def test_receive_head_false_until_whole():
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    r = ResponseReader()
    for i in range(len(raw) - 1):
        assert r.receive_head(raw[i:i + 1]) is False
    assert r.receive_head(raw[-1:]) is True


def test_misuse_is_a_runtime_error():
    r = ResponseReader()
    with pytest.raises(RuntimeError, match="before the head"):
        r.body(b"x")
    assert r.receive_head(b"HTTP/1.1 204 No Content\r\n\r\n")
    with pytest.raises(RuntimeError, match="head is complete"):
        r.receive_head(b"HTTP/1.1 200 OK\r\n\r\n")


def test_max_headers_is_allowed():
    fields = b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS))
    r = ResponseReader()
    assert r.receive_head(b"HTTP/1.1 200 OK\r\n" + fields + b"\r\n")
    assert len(r.headers) == MAX_HEADERS


def test_chunk_line_at_max_is_allowed():
    # 1022 bytes and CRLF: the line and its CR fit in MAX_CHUNK_LINE
    line = b"1;" + b"x" * (MAX_CHUNK_LINE - 3)
    raw = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + line +
           b"\r\nZ\r\n0\r\n\r\n")
    for how, parts in splits(raw):
        fed = feed(parts)
        assert fed.body == b"Z" and fed.reader.done, how


def _head_of(size: int) -> bytes:
    """A response head (without its blank line) of exactly size bytes."""
    start = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Fill: "
    return start + b"a" * (size - len(start))


def test_head_at_max_whole_is_allowed():
    r = ResponseReader()
    assert r.receive_head(_head_of(MAX_HEAD) + b"\r\n\r\n")
    assert r.done


def test_head_at_max_any_split():
    raw = _head_of(MAX_HEAD) + b"\r\n\r\n"
    for cut in range(MAX_HEAD, len(raw)):
        r = ResponseReader()
        assert not r.receive_head(raw[:cut])
        assert r.receive_head(raw[cut:]), cut


# ---------------------------------------------------------------------------
# Random chunked bodies in random reads
# ---------------------------------------------------------------------------

@st.composite
def chunked_responses(draw):
    body = draw(st.binary(max_size=3000))
    sizes = draw(st.lists(st.integers(1, 700), min_size=1, max_size=20))
    ext = draw(st.booleans())
    trailers = draw(st.booleans())
    lf_lines = draw(st.booleans())
    eol = b"\n" if lf_lines else b"\r\n"
    enc = bytearray(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    is_body = [False] * len(enc)  # which encoded bytes are body bytes

    def put(data: bytes, body_bytes: bool) -> None:
        enc.extend(data)
        is_body.extend([body_bytes] * len(data))

    pos, i = 0, 0
    while pos < len(body):
        n = sizes[i % len(sizes)]
        i += 1
        piece = body[pos:pos + n]
        pos += len(piece)
        size = (b"%x" if i % 2 else b"%X") % len(piece)
        put(size + (b";n=%d" % i if ext else b"") + b"\r\n", False)
        put(piece, True)
        put(b"\r\n", False)
    put(b"0\r\n", False)  # chunk-size lines end in CRLF; the trailer block may use LF
    if trailers:
        put(b"X-Check: 1" + eol + b"X-More: two" + eol, False)
    put(eol, False)
    reads = draw(st.lists(st.integers(1, 400), min_size=1, max_size=30))
    return body, bytes(enc), is_body, reads


@hsettings(max_examples=scaled(300))
@given(chunked_responses())
def test_chunked_random_splits(case):
    body, enc, is_body, reads = case
    reader = ResponseReader()
    out = b""
    head = False
    at, i = 0, 0
    while at < len(enc):
        n = reads[i % len(reads)]
        i += 1
        part = enc[at:at + n]
        at += len(part)
        if not head:
            head = reader.receive_head(part)
            if head:
                out += reader.body(b"")
        else:
            out += reader.body(part)
        # every body byte that arrived is out already, none that did not
        assert out == body[:sum(is_body[:at])]
        assert reader.done is (at == len(enc))
    assert out == body
    assert reader.done and reader.keep_alive


# ---------------------------------------------------------------------------
# Errors: each a ProtocolError that says what, however the bytes are split
# ---------------------------------------------------------------------------

def _check_error(raw: bytes, match: str, method: bytes = b"GET", eof: bool = False) -> None:
    for how, exc in raise_split(raw, method, eof):
        assert exc is not None, f"no ProtocolError for {raw[:60]!r} fed {how}"
        assert re.search(match, str(exc)), f"{how}: {exc}"


OK_HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"

ERRORS = [
    ("status-http2", b"HTTP/2 200 OK\r\n\r\n", "not an HTTP/1.1 status line"),
    ("status-icy", b"ICY 200 OK\r\n\r\n", "not an HTTP/1.1 status line: b'ICY 200 OK'"),
    ("status-2-digits", b"HTTP/1.1 20 OK\r\n\r\n", "not an HTTP/1.1 status line"),
    ("status-not-number", b"HTTP/1.1 abc OK\r\n\r\n", "not an HTTP/1.1 status line"),
    ("status-html", b"<html><body>hi</body></html>\n\n", "not an HTTP/1.1 status line"),
    ("header-no-colon", b"HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n",
     "not a header field: b'No colon here'"),
    ("header-space-before-colon", b"HTTP/1.1 200 OK\r\nName : x\r\n\r\n", "not a header field"),
    ("header-bad-name", b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", "not a header field"),
    ("header-nul", b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n", "not a header field"),
    ("header-bare-cr", b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", "not a header field"),
    ("fold-before-first-field", b"HTTP/1.1 200 OK\r\n  X: a\r\n\r\n",
     "a folded line before the first header field: b'  X: a'"),
    ("folded-into-nul", b"HTTP/1.1 200 OK\r\nX: a\r\n b\x00\r\n\r\n",
     r"not a header field: b'X: a b\\x00'"),
    ("reason-nul", b"HTTP/1.1 200 O\x00K\r\nContent-Length: 0\r\n\r\n",
     r"a NUL or control character in the reason phrase: b'O\\x00K'"),
    ("reason-vt", b"HTTP/1.1 200 O\x0bK\r\n\r\n", "control character in the reason phrase"),
    ("reason-bare-cr", b"HTTP/1.1 200 O\rK\r\n\r\n", "control character in the reason phrase"),
    ("te-gzip", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
     "a Transfer-Encoding other than chunked: b'gzip'"),
    ("te-gzip-chunked", OK_HEAD_CHUNKED.replace(b"chunked", b"gzip, chunked") + b"0\r\n\r\n",
     "a Transfer-Encoding other than chunked: b'gzip, chunked'"),
    ("te-chunked-gzip", OK_HEAD_CHUNKED.replace(b"chunked", b"chunked, gzip"),
     "a Transfer-Encoding other than chunked"),
    ("te-chunked-comma", OK_HEAD_CHUNKED.replace(b"chunked", b"chunked,") + b"0\r\n\r\n",
     "a Transfer-Encoding other than chunked"),
    ("te-empty", b"HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\nContent-Length: 0\r\n\r\n",
     "a Transfer-Encoding other than chunked: b''"),
    ("te-chunked-twice", OK_HEAD_CHUNKED.replace(b"chunked", b"chunked, chunked") +
     b"0\r\n\r\n", "Transfer-Encoding names chunked more than once"),
    ("te-two-chunked-fields",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"0\r\n\r\n", "Transfer-Encoding names chunked more than once"),
    ("te-two-fields",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"0\r\n\r\n", "more than one Transfer-Encoding field"),
    ("cl-letters", b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n",
     "Content-Length is not a length: b'abc'"),
    ("cl-negative", b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
     "Content-Length is not a length"),
    ("cl-plus", b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
     "Content-Length is not a length"),
    ("cl-list-differ", b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello",
     "Content-Length fields that disagree"),
    ("cl-list-and-field-differ",
     b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\nContent-Length: 6\r\n\r\nhello",
     "Content-Length fields that disagree"),
    ("cl-list-empty-item", b"HTTP/1.1 200 OK\r\nContent-Length: 5,\r\n\r\nhello",
     "Content-Length is not a length: b''"),
    ("cl-huge", b"HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456789\r\n\r\n",
     "Content-Length is not a length"),
    ("cl-disagree", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
     "Content-Length fields that disagree"),
    ("chunk-size-letters", OK_HEAD_CHUNKED + b"zz\r\nhello\r\n", "not a chunk-size line: b'zz'"),
    ("chunk-size-empty", OK_HEAD_CHUNKED + b"\r\nhello\r\n", "not a chunk-size line"),
    ("chunk-size-negative", OK_HEAD_CHUNKED + b"-5\r\nhello\r\n", "not a chunk-size line"),
    ("chunk-size-16-digits", OK_HEAD_CHUNKED + b"1" * 16 + b"\r\n", "not a chunk-size line"),
    ("chunk-size-space-first", OK_HEAD_CHUNKED + b" 5\r\nhello\r\n", "not a chunk-size line"),
    ("chunk-size-second", OK_HEAD_CHUNKED + b"2\r\nhi\r\nq\r\n", "not a chunk-size line"),
    ("chunk-size-bare-lf", OK_HEAD_CHUNKED + b"5\nhello\r\n0\r\n\r\n",
     "a chunk-size line ended by a bare LF, not CRLF: b'5'"),
    ("chunk-size-ext-bare-lf", OK_HEAD_CHUNKED + b"2\r\nhi\r\n3;x\nabc\r\n0\r\n\r\n",
     "a chunk-size line ended by a bare LF, not CRLF: b'3;x'"),
    ("last-chunk-bare-lf", OK_HEAD_CHUNKED + b"2\r\nhi\r\n0\n\r\n",
     "a chunk-size line ended by a bare LF"),
    ("chunk-size-empty-bare-lf", OK_HEAD_CHUNKED + b"\n", "ended by a bare LF"),
    ("trailer-garbage", OK_HEAD_CHUNKED + b"0\r\nnot a field\r\n\r\n",
     "not a trailer field: b'not a field'"),
    ("trailer-after-good-one", OK_HEAD_CHUNKED + b"0\r\nT: 1\r\n\x00\x01\x02\r\n\r\n",
     "not a trailer field"),
    ("trailer-nul", OK_HEAD_CHUNKED + b"2\r\nhi\r\n0\r\nT: a\x00b\r\n\r\n",
     "not a trailer field"),
    ("trailer-fold-first", OK_HEAD_CHUNKED + b"0\r\n T: 1\r\n\r\n",
     "a folded line before the first trailer field"),
    ("chunk-no-crlf", OK_HEAD_CHUNKED + b"5\r\nhelloX\r\n0\r\n\r\n",
     "chunk's data is not followed by CRLF"),
    ("chunk-cr-not-lf", OK_HEAD_CHUNKED + b"5\r\nhello\rX0\r\n\r\n",
     "chunk's data is not followed by CRLF"),
    ("chunk-lf-only-after-data", OK_HEAD_CHUNKED + b"5\r\nhello\n0\r\n\r\n",
     "chunk's data is not followed by CRLF"),
    ("chunk-too-long", OK_HEAD_CHUNKED + b"5\r\nhellohello\r\n0\r\n\r\n",
     "chunk's data is not followed by CRLF"),
    ("switching-protocols", b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
     r"switched protocols \(101\)"),
    ("switching-after-100", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching\r\n\r\n",
     r"switched protocols \(101\)"),
]


@pytest.mark.parametrize("raw,match", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_error_any_split(raw, match):
    _check_error(raw, match)


def test_interim_responses_are_bounded():
    interim = b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    fine = interim * MAX_INTERIM + b"HTTP/1.1 204 No Content\r\n\r\n"
    assert feed([fine]).reader.status == 204
    _check_error(interim * (MAX_INTERIM + 1) + b"HTTP/1.1 204 No Content\r\n\r\n",
                 rf"more than {MAX_INTERIM} interim \(1xx\) responses")


def test_chunk_size_line_over_max():
    raw = OK_HEAD_CHUNKED + b"5;" + b"x" * (MAX_CHUNK_LINE + 10) + b"\r\nhello\r\n0\r\n\r\n"
    _check_error(raw, f"chunk-size line of more than {MAX_CHUNK_LINE} bytes")


def test_chunk_size_line_over_max_without_end():
    """No LF ever comes: the line is refused once it is too long, not buffered forever."""
    r = ResponseReader()
    assert r.receive_head(OK_HEAD_CHUNKED)
    r.body(b"")
    with pytest.raises(ProtocolError, match="chunk-size line of more than"):
        for _ in range(MAX_CHUNK_LINE):
            r.body(b"5;xxxxxxxx")


def test_chunk_end_split_before_cr():
    """The byte after a chunk's data arrives alone: wrong at once, or (a CR)
    checked with the next read."""
    r = ResponseReader()
    assert r.receive_head(OK_HEAD_CHUNKED + b"5\r\nhello")
    assert r.body(b"") == b"hello"
    with pytest.raises(ProtocolError, match="not followed by CRLF"):
        r.body(b"X")
    r = ResponseReader()
    assert r.receive_head(OK_HEAD_CHUNKED + b"5\r\nhello")
    assert r.body(b"") == b"hello"
    assert r.body(b"\r") == b""
    with pytest.raises(ProtocolError, match="not followed by CRLF"):
        r.body(b"X")
    r = ResponseReader()
    assert r.receive_head(OK_HEAD_CHUNKED + b"5\r\nhello")
    assert r.body(b"") == b"hello"
    assert r.body(b"\r") == b""
    assert r.body(b"\n3\r\nabc\r\n0\r\n\r\n") == b"abc"
    assert r.done


def test_head_over_max_whole():
    raw = _head_of(MAX_HEAD + 1) + b"\r\n\r\n"
    with pytest.raises(ProtocolError, match=f"response head of more than {MAX_HEAD} bytes"):
        ResponseReader().receive_head(raw)


@pytest.mark.parametrize("read", [1000, 4096, MAX_HEAD + 1])
def test_head_over_max_in_reads_without_end(read):
    """No blank line ever comes: refused once the head is over MAX_HEAD, in
    reads of any size, before much more than MAX_HEAD is buffered."""
    r = ResponseReader()
    head = b"HTTP/1.1 200 OK\r\nX-Fill: " + b"a" * (4 * MAX_HEAD)
    taken = 0
    with pytest.raises(ProtocolError, match=f"response head of more than {MAX_HEAD} bytes"):
        while taken < len(head):
            r.receive_head(head[taken:taken + read])
            taken += read
    assert taken <= MAX_HEAD + read


def test_head_over_max_in_small_reads_with_end():
    raw = _head_of(MAX_HEAD + 100) + b"\r\n\r\n"
    r = ResponseReader()
    with pytest.raises(ProtocolError, match="response head of more than"):
        for i in range(0, len(raw), 512):
            r.receive_head(raw[i:i + 512])


def test_too_many_headers():
    fields = b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS + 1))
    _check_error(b"HTTP/1.1 200 OK\r\n" + fields + b"\r\n",
                 f"more than {MAX_HEADERS} header fields")


def test_trailers_over_max():
    r = ResponseReader()
    assert r.receive_head(OK_HEAD_CHUNKED + b"0\r\n")
    r.body(b"")
    with pytest.raises(ProtocolError, match=f"trailers of more than {MAX_HEAD} bytes"):
        for _ in range(MAX_HEAD):
            r.body(b"X-Trailer-Fill: aaaaaaaaaaaaaaaaaaaaaa\r\n"[:30])


EOF_ERRORS = [
    ("nothing", b"", "closed the connection without a response"),
    ("only-interim", b"HTTP/1.1 100 Continue\r\n\r\n", "without a response"),
    ("mid-status", b"HTTP/1.1 20", "in the middle of the response head"),
    ("mid-head", b"HTTP/1.1 200 OK\r\nContent-Len", "in the middle of the response head"),
    ("mid-length-body", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello",
     r"closed 5 bytes before the end of the body \(Content-Length\)"),
    ("length-body-none", b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
     "closed 3 bytes before the end"),
    ("mid-chunk-size", OK_HEAD_CHUNKED + b"5\r\nhello\r\n1", "incomplete chunked body"),
    ("mid-chunk-data", OK_HEAD_CHUNKED + b"a\r\nhello", "incomplete chunked body"),
    ("mid-chunk-end", OK_HEAD_CHUNKED + b"5\r\nhello\r", "incomplete chunked body"),
    ("no-last-chunk", OK_HEAD_CHUNKED + b"5\r\nhello\r\n", "incomplete chunked body"),
    ("mid-trailers", OK_HEAD_CHUNKED + b"5\r\nhello\r\n0\r\nX-T: 1\r\n",
     "incomplete chunked body"),
    ("before-last-crlf", OK_HEAD_CHUNKED + b"0\r\n", "incomplete chunked body"),
]


@pytest.mark.parametrize("raw,match", [e[1:] for e in EOF_ERRORS], ids=[e[0] for e in EOF_ERRORS])
def test_eof_cuts(raw, match):
    # the prefix fed whole and in every split, then the close
    deliveries = [[raw]] if not raw else [parts for _, parts in splits(raw)]
    for parts in deliveries:
        reader = ResponseReader()
        head = False
        for part in parts:
            if not head:
                head = reader.receive_head(part)
                if head:
                    reader.body(b"")
            else:
                reader.body(part)
        assert not reader.done
        with pytest.raises(ProtocolError, match=match):
            reader.eof()
