"""The sentence segmenter (agent/text/segmenter.py): one table per rule,
streaming and close() behaviour, and hypothesis properties: the segments
never depend on where the answer was cut into deltas, and the input is
always the segments with only whitespace around them.

No timing is asserted; hypothesis runs derandomized.
"""

from __future__ import annotations

import random
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.text.segmenter import Segmenter, SegmenterConfig
from conftest import scaled
from streams import cuts_for, feed_split

FAMILY = "👨\u200d👩\u200d👧\u200d👦"
ENGLAND = "🏴\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F"


def whole(text: str, config: SegmenterConfig = SegmenterConfig()) -> list[str]:
    seg = Segmenter(config)
    return seg.feed(text) + seg.close()


def check(text: str, expected: list[str], **config) -> None:
    cfg = SegmenterConfig(**config)
    assert whole(text, cfg) == expected
    assert feed_split(Segmenter(cfg), text, list(range(len(text)))) == expected


SENTENCES = [
    ("Hello world. How are you? Fine!", ["Hello world.", "How are you?", "Fine!"]),
    ("Pi is 3.14 today. Next", ["Pi is 3.14 today.", "Next"]),
    ("Use e.g.x or v1.2 here.", ["Use e.g.x or v1.2 here."]),
    ("Yahoo!Inc is odd?Yes", ["Yahoo!Inc is odd?Yes"]),
    ("Really?! Yes.", ["Really?!", "Yes."]),
    ("Wait... what? Hmm… ok", ["Wait...", "what?", "Hmm…", "ok"]),
    ('He said "hi." Then left.', ['He said "hi."', "Then left."]),
    ("(See above.) Next.", ["(See above.)", "Next."]),
    ("'Stop!' Go.", ["'Stop!'", "Go."]),
    ('"Stop!", she said.', ['"Stop!", she said.']),
    ('He said "hi."Then', ['He said "hi."Then']),
    ("Er sagte: „Hallo.“ Dann ging er.", ["Er sagte: „Hallo.“", "Dann ging er."]),
    ("Sie rief: „Wirklich?!“ Ja.", ["Sie rief: „Wirklich?!“", "Ja."]),
    ("»Gut.« Danach", ["»Gut.«", "Danach"]),
    ("„Nein!“, rief er.", ["„Nein!“, rief er."]),
    ("你好。今天天气很好！你呢？", ["你好。", "今天天气很好！", "你呢？"]),
    ("他说：“好。”然后走了。", ["他说：“好。”", "然后走了。"]),
    ("真的？！是的。", ["真的？！", "是的。"]),
    ("こんにちは。「はい。」と言った。", ["こんにちは。", "「はい。」", "と言った。"]),
    ("円周率は３．１４です．次", ["円周率は３．１４です．", "次"]),
    ("Hello。World! 你好", ["Hello。", "World!", "你好"]),
    ("Das kostet 3,50 €. Danke!", ["Das kostet 3,50 €.", "Danke!"]),
    ("...", ["..."]),
    ("End.", ["End."]),
]

ABBREVIATIONS = [
    ("Mr. Smith and Dr. Jones met. Then", ["Mr. Smith and Dr. Jones met.", "Then"]),
    ("Mrs. Lee and Ms. Kim visit St. Paul.", ["Mrs. Lee and Ms. Kim visit St. Paul."]),
    ("Fruit, e.g. apples, i.e. food. Done", ["Fruit, e.g. apples, i.e. food.", "Done"]),
    ("E.g. this one. (e.g. that) ok", ["E.g. this one.", "(e.g. that) ok"]),
    ("Cats vs. dogs. Go", ["Cats vs. dogs.", "Go"]),
    ("See No. 5 today. No. I refuse.", ["See No. 5 today.", "No.", "I refuse."]),
    ("I said no. Then", ["I said no.", "Then"]),
    ("Pears, etc. and more. Apples, etc. Then more.",
     ["Pears, etc. and more.", "Apples, etc.", "Then more."]),
    ("It has cats etc.  And dogs.", ["It has cats etc.", "And dogs."]),
    ("Ask Dr.", ["Ask Dr."]),
    ("Done etc.", ["Done etc."]),
    ("The U.S. Army came.", ["The U.S.", "Army came."]),  # the list is kept small
    ("Call Mr.X now. Ok", ["Call Mr.X now.", "Ok"]),
]

NEWLINES = [
    ("line one\nline two", ["line one", "line two"], True),
    ("a\n\n\n  b  \n", ["a", "b"], True),
    ("a\r\nb\u2028c", ["a", "b", "c"], True),
    ("End.\nNext", ["End.", "Next"], True),
    ("End.\nNext", ["End.", "Next"], False),
    ("line one\nline two. Next", ["line one\nline two.", "Next"], False),
    ("\n\n  \n", [], True),
]


@pytest.mark.parametrize("text,expected", SENTENCES + ABBREVIATIONS)
def test_sentences(text, expected):
    check(text, expected)


@pytest.mark.parametrize("text,expected,on", NEWLINES)
def test_newlines(text, expected, on):
    check(text, expected, break_on_newline=on)


FIRST_CLAUSE = [
    ("Well, I think that, in short, yes. And, more.", 10,
     ["Well, I think that,", "in short, yes.", "And, more."]),
    ("Well, I think, yes.", 0, ["Well, I think, yes."]),
    ("1,000 people, at least, came.", 3, ["1,000 people,", "at least, came."]),
    ("Note: 10:30 is late; ok.", 4, ["Note:", "10:30 is late; ok."]),
    ("今天天气很好，我们去公园吧。", 4, ["今天天气很好，", "我们去公园吧。"]),
    ("東京では、雨が降っています。", 3, ["東京では、", "雨が降っています。"]),
    ("The answer—as always—is yes.", 5, ["The answer—", "as always—is yes."]),
    ("First part – then more.", 5, ["First part –", "then more."]),
    ("Range 1–5 only, ok.", 3, ["Range 1–5 only,", "ok."]),
    ('"Yes," she said, "fine."', 3, ['"Yes,"', 'she said, "fine."']),
    ("Hi. Well, then, fine.", 2, ["Hi.", "Well, then, fine."]),
    ("Short, then longer, text", 7, ["Short, then longer,", "text"]),
    ("Also, text", 5, ["Also,", "text"]),
]


@pytest.mark.parametrize("text,first_min,expected", FIRST_CLAUSE)
def test_first_clause(text, first_min, expected):
    check(text, expected, first_min_chars=first_min)


MAX_CHARS = [
    ("The quick brown fox jumps over the lazy dog", 20,
     ["The quick brown fox", "jumps over the lazy", "dog"]),
    ("x" * 20, 20, ["x" * 20]),
    ("x" * 21, 20, ["x" * 20, "x"]),
    ("y" * 16 + " z", 16, ["y" * 16, "z"]),
    ("a " + "b" * 30, 16, ["a", "b" * 16, "b" * 14]),
    ("word" + " " * 40 + "next", 16, ["word", "next"]),
    ("一二三四五六七八九十" * 3, 16, ["一二三四五六七八九十一二三四五六", "七八九十一二三四五六七八九十"]),
    ("Ok" + "!" * 21 + " Next.", 16, ["Ok" + "!" * 14, "!" * 7, "Next."]),
    ("A short one. " + "w" * 18, 16, ["A short one.", "w" * 16, "ww"]),
]


@pytest.mark.parametrize("text,limit,expected", MAX_CHARS)
def test_max_chars(text, limit, expected):
    check(text, expected, max_chars=limit)


# A cut inside text without whitespace falls back to the last grapheme
# boundary; the first item is where the cluster begins.
GRAPHEMES = [
    ("a" * 12 + FAMILY + "b" * 5, ["a" * 12, FAMILY + "b" * 5]),
    ("a" * 15 + "🇩🇪🇫🇷", ["a" * 15, "🇩🇪🇫🇷"]),
    ("a" * 14 + "🇩🇪🇫🇷", ["a" * 14 + "🇩🇪", "🇫🇷"]),
    ("🇩🇪" * 9, ["🇩🇪" * 8, "🇩🇪"]),
    ("a" * 15 + "e\u0301bc", ["a" * 15, "e\u0301bc"]),
    ("a" * 15 + "👍🏽x", ["a" * 15, "👍🏽x"]),
    ("a" * 15 + "❤\ufe0fx", ["a" * 15, "❤\ufe0fx"]),
    ("a" * 14 + "1\ufe0f\u20e3", ["a" * 14, "1\ufe0f\u20e3"]),
    ("a" * 12 + ENGLAND, ["a" * 12, ENGLAND]),
    # A stack of marks longer than the limit is cut at the limit.
    ("e" + "\u0301" * 20, ["e" + "\u0301" * 15, "\u0301" * 5]),
]


@pytest.mark.parametrize("text,expected", GRAPHEMES)
def test_cut_keeps_grapheme_clusters(text, expected):
    check(text, expected, max_chars=16)


def test_segments_come_as_soon_as_certain():
    seg = Segmenter()
    assert seg.feed("Hello world. Ho") == ["Hello world."]
    assert seg.feed("w are") == []
    # A period waits for the next character: it may be a decimal point.
    assert seg.feed(" you? 3.") == ["How are you?"]
    assert seg.feed("14 is pi.") == []
    assert seg.feed(" ") == ["3.14 is pi."]
    # A CJK stop waits for a possible closing quote, no whitespace needed.
    assert seg.feed("你好。") == []
    assert seg.feed("」再") == ["你好。」"]
    # "etc." waits for the character after the space.
    assert seg.feed("见 etc. ") == []
    assert seg.feed("and so. ") == ["再见 etc. and so."]
    assert seg.close() == []


def test_first_clause_while_streaming():
    seg = Segmenter(SegmenterConfig(first_min_chars=10))
    assert seg.feed("Well, I think that,") == []
    assert seg.feed(" in short, yes") == ["Well, I think that,"]
    assert seg.feed(", really. ") == ["in short, yes, really."]


@pytest.mark.parametrize("deltas,emitted,rest", [
    (["Hello wor"], [], ["Hello wor"]),
    (["Done."], [], ["Done."]),
    (["Done.  \n "], ["Done."], []),
    (["   \n\t"], [], []),
    (["Apples, etc. "], [], ["Apples, etc."]),
    (["See No."], [], ["See No."]),
    (["你好。"], [], ["你好。"]),
    (["  trailing words  "], [], ["trailing words"]),
    ([], [], []),
])
def test_close(deltas, emitted, rest):
    seg = Segmenter()
    assert [s for d in deltas for s in seg.feed(d)] == emitted
    assert seg.close() == rest


def test_reusable_after_close():
    seg = Segmenter(SegmenterConfig(first_min_chars=3))
    assert seg.feed("One, two. Thr") == ["One,", "two."]
    assert seg.close() == ["Thr"]
    assert seg.pending == 0
    # A fresh answer: the first clause is early again.
    assert seg.feed("Four, five. ") == ["Four,", "five."]


@pytest.mark.parametrize("kwargs", [{"max_chars": 15}, {"first_min_chars": -1}])
def test_config_validation(kwargs):
    with pytest.raises(ValueError):
        SegmenterConfig(**kwargs)


# ---- properties ----

WORDS = ["Hello", "world", "the", "quick", "3.14", "v1.2", "e.g.", "i.e.", "Mr.", "Dr.",
         "No.", "5", "etc.", "vs.", "and"]
PUNCTUATION = [".", "!", "?", "?!", "...", "…", ",", ":", ";", "—", "–", '"', "“", "„", "”",
               "»", "«", "(", ")", "'"]
CJK = ["你好", "天气", "。", "，", "、", "！", "？", "．", "こんにちは", "「", "」", "１２３"]
EMOJI = [FAMILY, "🇩🇪", "🇫🇷", "👍🏽", "❤\ufe0f", "e\u0301", "1\ufe0f\u20e3", ENGLAND]
SPACES = [" ", " ", " ", " ", "  ", "\t", "\u3000", "\n", "\n\n", "\r\n"]
LONG = ["x" * 40, "長" * 30, "🇯🇵" * 12]
TOKENS = WORDS + PUNCTUATION + CJK + EMOJI + SPACES + LONG

token_texts = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)
texts = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=4)), max_size=60).map("".join)
configs = st.builds(
    SegmenterConfig,
    max_chars=st.integers(16, 48),
    first_min_chars=st.sampled_from([0, 1, 5, 12, 30]),
    break_on_newline=st.booleans(),
)


def spans(text: str, segments: list[str]) -> list[tuple[int, int]]:
    """Where each segment stands in text, asserting that only whitespace
    stands before, between and after them."""
    out, pos = [], 0
    for segment in segments:
        start = pos
        while text[start].isspace():
            start += 1
        assert text.startswith(segment, start), (segment, text[start:])
        pos = start + len(segment)
        out.append((start, pos))
    assert text[pos:].isspace() or pos == len(text)
    return out


REGIONAL = "".join(map(chr, range(0x1F1E6, 0x1F200)))


def inside_cluster(text: str, k: int) -> bool:
    """Whether text[k - 1] and text[k] are one cluster, for the sequences
    the tokens contain."""
    a, b = text[k - 1], text[k]
    if "\u200d" in (a, b) or unicodedata.combining(b) or b in "\ufe0f\u20e3🏽":
        return True
    if "\U000E0020" <= b <= "\U000E007F":
        return True
    before = text[:k]
    return b in REGIONAL and (len(before) - len(before.rstrip(REGIONAL))) % 2 == 1


@settings(max_examples=scaled(300), deadline=None, derandomize=True)
@given(text=texts, config=configs, data=st.data())
def test_delta_boundaries_do_not_matter(text, config, data):
    expected = whole(text, config)
    cuts = data.draw(cuts_for(len(text)))
    assert feed_split(Segmenter(config), text, cuts) == expected
    assert feed_split(Segmenter(config), text, list(range(len(text)))) == expected


@settings(max_examples=scaled(100), deadline=None, derandomize=True)
@given(text=token_texts.filter(lambda t: len(t) <= 60), config=configs)
def test_every_split_point(text, config):
    expected = whole(text, config)
    for cut in range(1, len(text)):
        assert feed_split(Segmenter(config), text, [cut]) == expected


@settings(max_examples=scaled(300), deadline=None, derandomize=True)
@given(text=texts, config=configs)
def test_segments_are_the_input(text, config):
    segments = whole(text, config)
    spans(text, segments)
    assert "".join(text.split()) == "".join("".join(segments).split())
    for segment in segments:
        assert segment and segment == segment.strip()
        assert len(segment) <= config.max_chars


@settings(max_examples=scaled(300), deadline=None, derandomize=True)
@given(text=token_texts, config=configs)
def test_cuts_between_clusters(text, config):
    located = spans(text, whole(text, config))
    for (_, end), (start, _) in zip(located, located[1:]):
        if end == start:
            assert not inside_cluster(text, end), (text[end - 3:end + 3])


def test_long_input():
    rng = random.Random(7)
    text = "".join(rng.choice(TOKENS) for _ in range(40_000))
    config = SegmenterConfig(max_chars=40, first_min_chars=12)
    expected = whole(text, config)
    assert len(expected) > 1000
    spans(text, expected)
    seg, got = Segmenter(config), []
    for ch in text:
        got += seg.feed(ch)
        # The buffer is bounded, so each feed does bounded work.
        assert seg.pending <= config.max_chars + 1
    assert got + seg.close() == expected
    i, chunks = 0, []
    while i < len(text):
        n = rng.randint(1, 500)
        chunks.append(text[i:i + n])
        i += n
    seg = Segmenter(config)
    assert [s for c in chunks for s in seg.feed(c)] + seg.close() == expected
