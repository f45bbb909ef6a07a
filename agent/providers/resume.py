"""Resuming an answer whose stream broke after part of it was delivered,
sans-IO: what the continuation request says, and the splice that joins
its text to what the client already has (docs/failover.md).

Two ways to ask for the rest (agent/providers/requests.py builds them):
- prefill: the delivered text is the request's final assistant message,
  which the model continues (Anthropic without extended thinking, which
  refuses a prefill; an OpenAI-compatible server with `prefill = true`:
  llama.cpp, vLLM's continue_final_message). Anthropic also refuses a
  prefill ending in whitespace, so it goes without it.
- restart: the delivered text as an assistant turn, then CONTINUE_INSTRUCTION
  as a user turn. The model is told to start again at the beginning of the
  sentence the break cut: a sentence boundary is a place a model restarts
  from reliably, and the repeated beginning is then removed by matching.

The splice sees every text delta of the continuation and gives back what
goes to the client, so that the client, the speech devices' segmenter and
the history get every character once, in order. Restart mode holds the
continuation's text back only while it still repeats the delivered text
from one of its sentence starts (the sentence the break cut, or the whole
answer again):
- a repeat that reaches the break is dropped, and the text after it flows;
- a repeat of at least RESTART_MATCH characters that then says it another
  way is a restarted sentence too, told differently: it is dropped up to
  its sentence's end, so the unfinished sentence is never said twice;
- anything else is the rest of the answer, as asked: it flows, the held
  text first.
"""

from __future__ import annotations

from agent.text.segmenter import Segmenter

RESUME_MODES = ("off", "same", "fallback")
CONTINUE_INSTRUCTION = (
    "Your answer above was cut off by a broken connection. Continue it: begin again at the "
    "start of its last, unfinished sentence and go on to the end. Do not repeat the sentences "
    "before it and do not mention the interruption.")
RESTART_MATCH = 12  # characters a diverging restart must have repeated to count as one
_STOPS = ".!?…"      # these end a sentence when whitespace follows
_WIDE_STOPS = "。！？"


def sentence_starts(text: str) -> list[int]:
    """Where each sentence of text begins (0 first), as the speech devices cut it."""
    segmenter = Segmenter()
    starts, at = [], 0
    for segment in [*segmenter.feed(text), *segmenter.close()]:
        at = text.find(segment, at)
        starts.append(at)
        at += len(segment)
    return starts or [0]


def prefill_text(delivered: str) -> str:
    """The final assistant message of a prefill: no trailing whitespace
    (Anthropic refuses it; the splice drops the model's own)."""
    return delivered.rstrip()


class Splice:
    """The continuation's text deltas in (feed), the text to deliver out."""

    def __init__(self, delivered: str, restart: bool) -> None:
        self._delivered = delivered
        # Candidates: (where a restart would begin in delivered, characters matched)
        self._candidates = [(s, 0) for s in sentence_starts(delivered)] if restart else []
        self._held = ""
        self._matching = restart and bool(delivered.strip())
        self._skipping = False  # dropping a restarted sentence told differently
        self._after_stop = False  # ... and its last character ended a sentence, maybe
        self._joined = False    # the first delivered character went out

    def feed(self, text: str) -> str:
        if self._skipping:
            return self._skip(text)
        if not self._matching:
            return self._join(text)
        self._held += text
        held = self._held.lstrip()
        delivered = self._delivered
        alive, best = [], 0
        for start, _ in self._candidates:
            tail = delivered[start:]
            common = _common(held, tail)
            best = max(best, common)
            if common == len(tail):  # the repeat reaches the break
                self._matching = False
                return self._join(held[common:])
            if common == len(held):
                alive.append((start, common))
        if alive:
            self._candidates = alive
            return ""
        self._matching = False
        self._held = ""
        if best >= RESTART_MATCH:
            self._skipping = True
            return self._skip(held[best:])
        return self._join(held)

    def _skip(self, text: str) -> str:
        for i, ch in enumerate(text):
            if self._after_stop and ch.isspace():
                self._skipping = False
                return self._join(text[i:])
            if ch in _WIDE_STOPS:  # these end a sentence with no space after them
                self._skipping = False
                return self._join(text[i + 1:])
            self._after_stop = ch in _STOPS
        return ""

    def _join(self, text: str) -> str:
        """Whitespace at the join: the client has the delivered text's own."""
        if self._joined or not text:
            return text
        delivered = self._delivered
        if delivered[-1:].isspace():
            text = text.lstrip()
            if not text:
                return ""
        elif delivered[-1:] in _STOPS and text[0].isalnum() and text[0].isascii():
            text = " " + text
        self._joined = True
        return text


def _common(a: str, b: str) -> int:
    """The length of the common beginning of a and b."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
