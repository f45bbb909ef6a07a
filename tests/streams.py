"""Helpers shared by the decoder tests: feeding a body in given splits."""

from __future__ import annotations

from hypothesis import strategies as st


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
