"""Sentence segmenter for speech and small displays (sans-IO).

Text deltas of a streamed answer go into Segmenter.feed(); sentences (and,
optionally, an early first clause) come out as soon as they are certain, and
close() returns the rest at the end of the answer. Where the answer was cut
into deltas never changes the segments: a decision that depends on a
character not yet received waits for it. Lengths count code points.

Rules:
- A sentence ends after a run of `.!?…` followed by whitespace or the end of
  the answer, so "3.14", "e.g.x" and "v1.2" go on. A run stays together
  ("Really?!", "Wait..."), and an ellipsis ends a sentence like a period
  does: for speech it is a pause either way, so "I think... maybe" is two
  segments.
- Closing quotes and brackets right after the run belong to the sentence:
  `He said "hi." Then` gives `He said "hi."`; German „Hallo.“ and »Gut.«
  close with “ and «, which are therefore closers too (directly after the
  run only: an English opening quote comes after a space).
- `。！？．｡` end a sentence without whitespace after them, except `．`
  followed by a digit ("３．１４"). The segment is still emitted only with
  the next character, which may be a closing quote ("「はい。」").
- Abbreviations: after Mr. Mrs. Ms. Dr. St. (a name follows) and e.g. i.e.
  vs. (any case) the sentence goes on. "No." ends one unless a digit
  follows ("No. 5" against "No. I won't"); "etc." ends one unless a
  lowercase letter follows ("etc. and" against "etc. Then"); "follows"
  means the character after the one whitespace character.
- With break_on_newline, a line break (where str.splitlines splits) ends a
  segment; blank lines give none.
- With first_min_chars > 0, the first segment also ends at a clause mark
  once it has at least first_min_chars characters (the mark included):
  `,;:–` followed by whitespace (so "1,000" and "10:30" go on), `、，；：—`
  anywhere. Closing quotes after the mark join it, as for sentences.
- A segment that would exceed max_chars is cut at the last whitespace in its
  first max_chars + 1 characters; without one (CJK, long words) at the last
  grapheme cluster boundary within max_chars: never before a combining mark,
  variation selector, skin-tone modifier, tag character or ZWJ, never after
  a ZWJ, never inside a regional-indicator pair (a cheap subset of UAX #29).
  A cluster longer than max_chars (only stacks of marks: max_chars >= 16
  holds every emoji sequence) is cut at the limit.

Output: every segment is non-empty, stripped and at most max_chars long, and
the input is exactly the segments in order with whitespace only (possibly
none) before, between and after them.

Cost: between calls at most max_chars + 1 characters stay buffered and a
punctuation run being waited on is not read again, so feed() costs
O(len(text) + max_chars).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

_STOPS = ".!?…。！？．｡"
_WIDE_STOPS = "。！？．｡"
_CLAUSES = ",;:–—、，；："
_WIDE_CLAUSES = "—、，；："
_CLOSERS = "\"')]}”’“‘»«›‹」』）】〕〉》］｝"
_OPENERS = "\"'([{“‘„‚«»‹›「『（【〔〈《［｛"
_NEWLINES = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_TITLES = frozenset({"Mr", "Mrs", "Ms", "Dr", "St"})
_GOES_ON = frozenset({"e.g", "i.e", "vs"})  # compared lowercased
_LONGEST_WORD = 6  # an abbreviation with two opening quotes before it
_ZWJ = "\u200d"


@dataclass(frozen=True, slots=True)
class SegmenterConfig:
    max_chars: int = 200
    first_min_chars: int = 0  # 0: off
    break_on_newline: bool = True

    def __post_init__(self) -> None:
        # 16 holds the longest emoji sequence (10 code points), so the cut at
        # the limit never splits one.
        if self.max_chars < 16:
            raise ValueError(f"max_chars must be at least 16, got {self.max_chars}")
        if self.first_min_chars < 0:
            raise ValueError(f"first_min_chars must not be negative, got {self.first_min_chars}")


class Segmenter:
    """Text deltas in, segments out; one answer at a time, reusable after close()."""

    def __init__(self, config: SegmenterConfig = SegmenterConfig()) -> None:
        self.config = config
        self._reset()

    def _reset(self) -> None:
        self._buf = ""
        self._pos = 0  # next character to examine
        self._start: int | None = None  # first character of the open segment
        self._run_len = 0  # how much of the run at _pos was read while waiting
        self._first = True  # no segment emitted yet

    @property
    def pending(self) -> int:
        """Characters held back: at most max_chars + 1 between calls."""
        return len(self._buf)

    def feed(self, text: str) -> list[str]:
        self._buf += text
        out = self._scan(final=False)
        # Nothing before the open segment is looked at again.
        keep = self._pos if self._start is None else self._start
        self._buf = self._buf[keep:]
        self._pos -= keep
        if self._start is not None:
            self._start -= keep
        return out

    def close(self) -> list[str]:
        out = self._scan(final=True)
        self._reset()
        return out

    def _scan(self, final: bool) -> list[str]:
        buf, n = self._buf, len(self._buf)
        limit, first_min = self.config.max_chars, self.config.first_min_chars
        out: list[str] = []
        i, s = self._pos, self._start
        while True:
            if s is None:
                while i < n and buf[i].isspace():
                    i += 1
                if i == n:
                    break
                s = i
            if i - s > limit:
                k = _cut(buf, s, s + limit)
                out.append(buf[s:k].rstrip())
                # What follows the cut is examined again as a segment of its own.
                s, i = None, k
                continue
            if i == n:
                if final:
                    out.append(buf[s:].rstrip())
                    s = None
                break
            c = buf[i]
            if c in _NEWLINES and self.config.break_on_newline:
                out.append(buf[s:i].rstrip())
                s, i = None, i + 1
                continue
            if c in _STOPS or (c in _CLAUSES and self._first and not out
                               and 0 < first_min <= i + 1 - s):
                run = self._run(buf, s, i, final)
                if run is None:
                    break
                i, ends = run
                if ends:
                    out.append(buf[s:i])
                    s = None
                continue
            i += 1
        self._pos, self._start = i, s
        self._first = self._first and not out
        return out

    def _run(self, buf: str, s: int, i: int, final: bool) -> tuple[int, bool] | None:
        """Read the punctuation run at buf[i] with its closers; return where it
        ends and whether the segment ends there, or None while that depends
        on characters not received yet."""
        n, top = len(buf), s + self.config.max_chars + 1
        marks = _STOPS if buf[i] in _STOPS else _CLAUSES
        j = i + max(1, self._run_len)
        self._run_len = 0
        while j < min(n, top) and (buf[j] in _CLOSERS or (buf[j] in marks and buf[j - 1] in marks)):
            j += 1
        if j == top:  # too long whatever follows: the max_chars cut decides
            return j, False
        if j == n and not final:
            self._run_len = j - i
            return None
        after = buf[j] if j < n else ""
        if marks is _CLAUSES:
            return j, buf[i] in _WIDE_CLAUSES or not after or after.isspace()
        if any(ch in _WIDE_STOPS for ch in buf[i:j]):
            return j, not (buf[i:j] == "．" and after.isdigit())
        if after and not after.isspace():
            return j, False
        if buf[i:j] != ".":
            return j, True
        word = _word_before(buf, s, i)
        if word in _TITLES or word.lower() in _GOES_ON:
            return j, False
        if word != "No" and word.lower() != "etc":
            return j, True
        if j + 1 >= n:
            if final:
                return j, True
            self._run_len = j - i
            return None
        nxt = buf[j + 1]
        return j, not (nxt.isdigit() if word == "No" else nxt.islower())


def _word_before(buf: str, start: int, end: int) -> str:
    """The word ending at buf[end] without its opening quotes; "" when it is
    longer than any abbreviation."""
    k = end
    while k > start and not buf[k - 1].isspace():
        k -= 1
        if end - k > _LONGEST_WORD:
            return ""
    return buf[k:end].lstrip(_OPENERS)


def _cut(buf: str, start: int, limit: int) -> int:
    """Where to cut the segment at buf[start] that runs past buf[limit]."""
    for k in range(limit, start, -1):
        if buf[k].isspace():
            return k
    for k in range(limit, start, -1):
        if not _joined(buf, start, k):
            return k
    return limit


def _is_ri(ch: str) -> bool:
    return "\U0001F1E6" <= ch <= "\U0001F1FF"


def _joined(buf: str, start: int, k: int) -> bool:
    """Whether buf[k - 1] and buf[k] belong to one grapheme cluster."""
    a, b = buf[k - 1], buf[k]
    if (a == _ZWJ or b in "\u200c\u200d" or unicodedata.category(b)[0] == "M"
            or "\U0001F3FB" <= b <= "\U0001F3FF" or "\U000E0020" <= b <= "\U000E007F"):
        return True
    if not (_is_ri(a) and _is_ri(b)):
        return False
    # Flags pair regional indicators from the start of their run.
    count = 0
    while k - 1 - count >= start and _is_ri(buf[k - 1 - count]):
        count += 1
    return count % 2 == 1
