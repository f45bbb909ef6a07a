"""Helpers shared by the decoder tests: recorded streams from ../shared,
feeding a body in given splits, what must not depend on the splits,
mutating bytes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import strategies as st

from agent.stream.decoders.events import ToolCallDelta
from agent.stream.records import ReasoningDelta, RefusalDelta, TextDelta

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def recorded(name: str) -> bytes:
    """A recorded stream from ../shared/fixtures; the test skips without it
    (a user's fresh clone has no ../shared)."""
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"recorded stream {path} is absent (../shared/fixtures not checked out)")
    return path.read_bytes()


def random_reads(events: list[bytes], seed: int, hi: int = 97) -> list[bytes]:
    """The joined events cut into reads of 1..hi bytes, from a fixed seed."""
    body = b"".join(events)
    rng = random.Random(seed)
    reads, i = [], 0
    while i < len(body):
        k = rng.randint(1, hi)
        reads.append(body[i:i + k])
        i += k
    return reads


def feed_split(decoder, body: bytes, cuts: list[int]) -> list:
    """Feed body cut at the given offsets (any order, duplicates allowed),
    then close; return every event."""
    events: list = []
    start = 0
    for cut in sorted(set(c for c in cuts if 0 < c < len(body))):
        events += decoder.feed(body[start:cut])
        start = cut
    events += decoder.feed(body[start:])
    events += decoder.close()
    return events


# The delta events: the core merges the pieces of one read, so their
# boundaries follow the reads, and only their joined text is the stream's.
DELTAS = (TextDelta, ReasoningDelta, RefusalDelta, ToolCallDelta)


def split_view(events: list) -> tuple[list, dict]:
    """What must not depend on how the body was split into reads: every
    non-delta event in order (warnings, framing errors, calls opened and
    done, finish, usage, after-end warnings, MessageIncomplete...), and the
    joined text of each delta stream."""
    others = [e for e in events if not isinstance(e, DELTAS)]
    joined: dict = {}
    for e in events:
        if isinstance(e, DELTAS):
            key = (type(e).__name__, getattr(e, "index", None), getattr(e, "call", None),
                   getattr(e, "choice", None), getattr(e, "item_id", None))
            joined[key] = joined.get(key, "") + e.text
    return others, joined


def every_split(body: bytes, limit: int = 1500) -> list[list[int]]:
    """Every single split point of a body up to limit bytes; of a longer
    one, every odd offset and both sides of every line end and non-ASCII
    byte (where a line end, a CRLF pair or a UTF-8 sequence can be cut)."""
    if len(body) <= limit:
        return [[k] for k in range(1, len(body))]
    return [[k] for k in range(1, len(body))
            if k % 2 or body[k - 1] in b"\r\n" or body[k] in b"\r\n"
            or body[k - 1] >= 0x80 or body[k] >= 0x80]


def messages(decoder) -> list:
    """Every message a decoder holds: one per choice for OpenAI Chat."""
    return decoder.messages if hasattr(decoder, "messages") else [decoder.message]


def assert_split_independent(make_decoder, body: bytes, cut_sets=None) -> tuple:
    """Feed body whole, byte by byte and at every split point (or at the
    given cut sets): split_view() of the events and the message must be the
    same each time. Returns (decoder, events) of the whole body."""
    whole = make_decoder()
    events = feed_split(whole, body, [])
    want = (split_view(events), messages(whole))
    reads = every_split(body) if cut_sets is None else list(cut_sets)
    for cuts in reads + [range(1, len(body))]:
        dec = make_decoder()
        got = split_view(feed_split(dec, body, list(cuts)))
        assert (got, messages(dec)) == want, f"reads cut at {list(cuts)[:8]}"
    return whole, events


def cuts_for(body_len: int, max_cuts: int = 40):
    """A hypothesis strategy of cut offsets for a body of body_len bytes."""
    return st.lists(st.integers(min_value=1, max_value=max(1, body_len - 1)), max_size=max_cuts)


def mutate(draw, data: bytes, edits: int, bytes_from: st.SearchStrategy) -> bytes:
    """data after `edits` random single-byte inserts, deletes or replacements;
    draw is a hypothesis draw (st.composite's, or st.data().draw)."""
    b = bytearray(data)
    for _ in range(edits):
        i = draw(st.integers(0, len(b)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        byte = draw(bytes_from)
        if op == "insert":
            b[i:i] = bytes([byte])
        elif i < len(b):
            if op == "delete":
                del b[i]
            else:
                b[i] = byte
    return bytes(b)
