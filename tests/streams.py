"""Helpers shared by the decoder tests: recorded streams from ../shared,
feeding a body in given splits, mutating bytes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import strategies as st

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
