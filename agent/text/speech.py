"""Text for speech (sans-IO): a model's markdown answer turned into what a
voice should say, incrementally, for every speech device.

SpeechCleaner.feed() takes the answer's text in pieces (deltas, or the
whole answer) and returns the cleaned text that is certain so far; close()
returns the rest at the end of the answer. Where the answer was cut into
pieces never changes the result: a decision that needs a character not yet
received waits for it, and what is held back is bounded (MAX_HOLD
characters from the construct's first character, after which it is
decided as if the text had ended there). The text's spaces after a letter
or digit, on a table's row or a list item's line wait for the text after
them (they may have to go, see below), so what feed() returns may lack the
last spaces received; after a mark, where a sentence or a clause may end,
they are written at once. clean() does a whole text at once.

Rules, by line:
- Line breaks (\\n, \\r\\n, \\r and the others str.splitlines knows) become \\n.
- Indentation and blockquote markers (`>`) at a line's start are dropped.
- `#` to `######` followed by a space (a heading), `-`, `*` or `+` followed
  by a space (a bullet, with a task box `[ ]`/`[x]` after it) and 1 to 3
  digits with `.` or `)` followed by a space (a numbered item) are dropped;
  such a line that ends without a pause mark (`.!?…:;,` and their CJK forms)
  gets a period, so a voice pauses between items. CommonMark allows 9
  digits, but a line starting "2020. It was" is a year far more often than
  a list's two-thousand-and-twentieth item: four digits or more are text.
- A line of only one of `-*_=` (and spaces), a rule or a heading's
  underline, says nothing.
- A table's row (a line starting with `|`) says its cells separated by
  commas (none after a cell that ends with a pause mark or says nothing) and
  ends with a period; its delimiter row (`|---|:-:|`) says nothing.
- A fenced code block (a line starting with 3 or more backticks or tildes,
  up to a line with at least as many of the same) is not read out: the
  options' code_placeholder is said instead, on a line of its own (nothing
  by default).
Rules, inline:
- Emphasis, strong and strike markers are dropped: runs of `*` and `_`
  next to a word, and runs of two or more `~`. Kept as text: a `*` or `_`
  with whitespace on both sides ("2 * 3"), a single `*` between digits, an
  `_` inside a word (snake_case), a single `~` ("~5 minutes").
- Inline code is kept as text, without its backticks, and its content is
  not markdown (a URL in it is still said as its host); a code span ends at
  its closing backticks or at the line's end.
- A backslash before ASCII punctuation is dropped (`\\*` says `*`).
- A link `[text](url)` or image `![text](url)` says its text, cleaned; an
  autolink `<https://...>` is a bare URL.
- A bare URL (`http://` or `https://` at a word's start, or `www.` followed
  by a letter or digit) says its host without `www.`: "example.com". The
  punctuation that ends a sentence after it is kept.
- A `)` that closes a `(` of a URL's path belongs to the URL, bare or a
  link's: in "(see https://x.org/Foo_(bar))." the URL ends before ")."
- HTML tags of HTML's elements (`<b>`, `</sup>`, `<span class="x">`,
  `<br/>`) and comments (`<!-- -->`, which may span lines) are dropped, their
  text kept: "mc<sup>2</sup>" says "mc2". A tag that breaks a line (`br`,
  `p`, `li`, `td`, `hr`, headings and a few more) is a pause: a comma, if
  none is there, and a space. Any other `<` is text ("a < b", "x<3",
  "<city>").
- Emoji (pictographs, dingbats, flags) are dropped, or said as their
  Unicode name ("party popper") when emoji_names is set; the characters that
  only modify them (variation selectors, skin tones, keycaps, tags, a ZWJ
  after an emoji) are dropped in both cases.
- Control, format, surrogate and private-use characters are dropped (a ZWJ
  or ZWNJ inside a word stays: scripts need them); a tab is a space.
- No space goes before `, . ; : ! ?` where the cleaner made the space (an
  emoji's name is set off by one space each side, the text's own spaces
  there included), made the mark (a table's comma, an item's period) or
  dropped something between them (an emoji, a tag, a control character):
  "Room, Degrees.", "Done party popper!", "Party!" for "Party 🎉!". The
  text's own "a , b" stays. Nor is a space said before a line's first word
  ("🎉 Hi" says "Hi").

Bounds: with the default options the output is never longer than the
input. A placeholder adds at most its length and a line break per code
block, an emoji name at most MAX_NAME characters and two spaces per emoji.

Reasoning and tool calls are not text for this cleaner: speech devices do
not take `reasoning` events, and a tool call is spoken, when a device is
configured so, as tool_call_phrase() of its name.
"""

from __future__ import annotations

import re
import string
import unicodedata
from dataclasses import dataclass

MAX_HOLD = 1024   # characters a construct may keep waiting: a link, a URL's host, a rule line
MAX_NAME = 88     # longest emoji name said with emoji_names (Unicode's longest is 83)
_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_SPACES = " \t"
_PAUSES = ".!?…:;,。！？、，；：．｡"
_RULE_CHARS = "-*_="
_URL_END_PUNCTUATION = ".,;:!?'\")]}"
_URL_STOPS = _BREAKS + _SPACES + "<>\"`"
_SCHEMES = ("https://", "http://", "www.")
_ORDERED = re.compile(r"\d{1,3}[.)]")
_MARKS = ",.;:!?"   # no space before these where the cleaner made the space or the mark
# HTML elements whose tags are dropped (their text kept); any other `<word>`
# ("<city>", "<your key>") is text. Those of _PAUSE_TAGS break a line: a pause.
_HTML_TAGS = frozenset("""a abbr b bdi bdo big blockquote br center cite code dd del details dfn
    div dl dt em figcaption figure font h1 h2 h3 h4 h5 h6 hr i img ins kbd li mark ol p pre q
    s samp small span strike strong sub summary sup table tbody td tfoot th thead tr tt u ul
    var wbr""".split())
_PAUSE_TAGS = frozenset("br hr p div li tr td th dd dt h1 h2 h3 h4 h5 h6 blockquote".split())
_TAG_NAME_CHARS = string.ascii_letters + string.digits
_TASK_BOX = re.compile(r"\[[ xX]\]")
# Text no inline rule applies to, written as it is in one go: letters and
# digits, but h and w only inside a word (at a word's start one may begin a
# URL), and punctuation that starts nothing.
_INERT = re.compile(r"(?:[A-GI-VX-Za-gi-vx-z0-9 ,.;:?'\"()%/+=-]|(?<=[A-Za-z0-9])[hHwW])+")
_PIECE = 4 * MAX_HOLD  # a long text is fed in pieces: see feed()


@dataclass(frozen=True, slots=True)
class SpeechOptions:
    """How a device's text is cleaned (its `speech` settings)."""
    code_placeholder: str = ""      # said for a fenced code block; "" says nothing
    emoji_names: bool = False       # emoji said as their name instead of dropped
    speak_tool_calls: bool = False  # a tool_call event is spoken (tool_call_phrase)


def clean(text: str, options: SpeechOptions = SpeechOptions()) -> str:
    cleaner = SpeechCleaner(options)
    return cleaner.feed(text) + cleaner.close()


def tool_call_phrase(name: str | None) -> str:
    """What a voice says for a tool call: its name as words ("set light.")."""
    words = re.sub(r"[\W_]+", " ", name or "").strip()
    return f"{words}." if words else ""


def _is_emoji(code: int) -> bool:
    return (0x1F000 <= code <= 0x1FAFF or 0x2600 <= code <= 0x27BF or 0x2300 <= code <= 0x23FF
            or 0x2B00 <= code <= 0x2BFF or code in (0x3030, 0x303D, 0x3297, 0x3299))


def _is_emoji_modifier(code: int) -> bool:
    """Characters that only change how the emoji before them looks."""
    return (code in (0xFE0E, 0xFE0F, 0x20E3) or 0x1F3FB <= code <= 0x1F3FF
            or 0xE0020 <= code <= 0xE007F)


def _is_word(char: str) -> bool:
    return char.isalnum()


class _Wait(Exception):
    """The next decision needs text not yet received."""


class SpeechCleaner:
    """One answer's text, fed in pieces, cleaned for speech (the rules above).
    The state is the line's (start, item, table), a code block or span, a URL
    being skipped, the gap after the last text written (spaces to write or
    not), and the undecided text, at most a few MAX_HOLD long."""

    def __init__(self, options: SpeechOptions = SpeechOptions()) -> None:
        self.options = options
        self._reset()

    def _reset(self) -> None:
        self._buffer = ""            # text received and not yet decided
        self._final = False          # close() was called: the buffer's end is the text's end
        self._line_start = True
        self._fence: str | None = None  # the opening fence while in a code block
        self._item = False           # the line is a heading or list item
        self._last = ""              # last non-space character written on this line
        self._prev = "\n"            # last character of the input decided
        self._code = 0               # backticks that opened the code span we are in
        self._url = False            # in a bare URL after its host: skipped
        self._emoji = False          # the last character decided was an emoji
        self._table = False          # the line is a table's row
        self._url_parens = 0         # brackets open in the URL being skipped
        self._out: list[str] = []
        self._clear_gap()

    def _clear_gap(self) -> None:
        # Between the last text written and the next: not yet written, since
        # the next may be a mark that takes no space before it.
        self._spaces = 0             # the input's spaces
        self._gap = ""               # the cleaner's instead: " " (a word break) or "," (a pause)
        self._dropped = False        # the cleaner dropped something since the last text

    def feed(self, text: str) -> str:
        # In pieces, which changes nothing (the result does not depend on
        # them) but keeps the buffer, and so the cost of a link's rewrite in
        # it, bounded: linear time however many links a long answer holds.
        out = []
        for start in range(0, len(text), _PIECE):
            self._buffer += text[start:start + _PIECE]
            out.append(self._run())
        return "".join(out)

    def close(self) -> str:
        """The rest of the text; the cleaner is then ready for another."""
        self._final = True
        out = self._run()
        self._end_line("")
        out += "".join(self._out)
        self._reset()
        return out

    # ---- the loop ----

    def _run(self) -> str:
        text, i = self._buffer, 0
        while i < len(text):
            try:
                i, text = self._step(text, i)
            except _Wait:
                break
        self._buffer = text[i:]
        out, self._out = "".join(self._out), []
        return out

    def _need(self, text: str, end: int) -> None:
        """text[:end] must be there, unless the text has ended before it."""
        if end > len(text) and not self._final:
            raise _Wait

    def _char_at(self, text: str, index: int) -> str:
        """The character at index; "" at the text's end. Waits for it."""
        self._need(text, index + 1)
        return text[index] if index < len(text) else ""

    def _run_end(self, text: str, start: int, chars: str) -> int:
        """Where the run of `chars` from start ends, knowing the next character
        (or the text's end), at most MAX_HOLD characters on."""
        end = start
        while end - start < MAX_HOLD:
            if self._char_at(text, end) == "" or text[end] not in chars:
                return end
            end += 1
        return end

    def _find(self, text: str, start: int, targets: str) -> int | None:
        """The first index from start holding one of targets, within MAX_HOLD
        characters and before a line break; None if there is none."""
        for index in range(start, start + MAX_HOLD):
            char = self._char_at(text, index)
            if char and char in targets:
                return index
            if char == "" or char in _BREAKS:
                return None
        return None

    def _emit(self, text: str, own: bool = False) -> None:
        """Write text, the input's or (own) the cleaner's; its spaces at
        either end wait for what follows them."""
        body = text.strip(" ")
        self._space(len(text) - len(text.lstrip(" ")), own)
        if not body:
            return
        self._write_gap(body[0], own)
        self._out.append(body)
        stripped = body.rstrip()
        if stripped:
            self._last = stripped[-1]
        self._space(len(text) - len(text.rstrip(" ")), own)

    def _space(self, count: int, own: bool) -> None:
        if not count or not self._last:
            return  # nothing said on this line yet ("🎉 Hi"): no space to say
        if own:
            self._gap = self._gap or " "
        elif self._gap or self._table or self._item or _is_word(self._last):
            self._spaces += count  # a mark may follow that takes none: see _write_gap
        else:
            # after a sentence's or clause's mark: the segmenter cuts at this space
            self._out.append(" " * count)

    def _write_gap(self, first: str, own: bool) -> None:
        """What goes between the last text written and the next, which starts
        with first (written by the cleaner if own)."""
        if first in _MARKS and (own or self._gap or self._dropped):
            pass  # the cleaner made the space or the mark: none before it
        elif self._gap and self._last:
            comma = self._gap == "," and self._last not in _PAUSES
            self._out.append(", " if comma else " ")
        else:
            self._out.append(" " * self._spaces)
        self._clear_gap()

    def _end_line(self, newline: str) -> None:
        if self._item and self._last and self._last not in _PAUSES:
            self._out.append(".")  # the cleaner's mark: the spaces before it go
        elif not self._gap:
            self._out.append(" " * self._spaces)
        self._clear_gap()
        self._out.append(newline)
        self._line_start, self._item, self._last = True, False, ""
        self._code, self._url, self._prev, self._table = 0, False, "\n", False
        self._url_parens = 0

    def _step(self, text: str, i: int) -> tuple[int, str]:
        char = text[i]
        if char in _BREAKS:
            end = i + 1
            if char == "\r" and self._char_at(text, end) == "\n":
                end += 1
            if self._fence is not None:
                self._line_start = True
            else:
                self._end_line("\n")
            return end, text
        if self._fence is not None:
            return self._in_fence(text, i), text
        if self._line_start:
            return self._at_line_start(text, i), text
        if self._url:
            return self._in_url(text, i), text
        if self._code:
            return self._in_code(text, i), text
        return self._inline(text, i)

    # ---- blocks ----

    def _in_fence(self, text: str, i: int) -> int:
        if self._line_start:
            start = self._run_end(text, i, _SPACES)
            end = self._run_end(text, start, self._fence[0])
            after = self._run_end(text, end, _SPACES)
            closing = self._char_at(text, after)
            self._line_start = False
            if end - start >= len(self._fence) and (closing == "" or closing in _BREAKS):
                self._fence = None
                return after
        end = i
        while end < len(text) and text[end] not in _BREAKS:
            end += 1
        return end

    def _at_line_start(self, text: str, i: int) -> int:
        char = text[i]
        if char in _SPACES or char == ">":
            return i + 1
        if char in "`~":
            end = self._run_end(text, i, char)
            if end - i >= 3:
                self._fence, self._line_start = text[i:end], False
                if self.options.code_placeholder:
                    self._out.append(self.options.code_placeholder + "\n")
                return self._skip_line(text, end)
        if char in _RULE_CHARS and self._is_rule(text, i):
            self._line_start = False
            return self._skip_line(text, i)
        if char == "|":
            if self._is_delimiter_row(text, i):
                self._line_start = False
                return self._skip_line(text, i)
            self._table = self._item = True
            return i + 1
        end = self._marker_end(text, i)
        if end is not None:
            end = self._run_end(text, end, _SPACES)
        self._line_start = False
        self._item = self._item or end is not None
        return i if end is None else end

    def _marker_end(self, text: str, i: int) -> int | None:
        """Where a heading's, bullet's or number's marker at i ends (its
        space included), or None."""
        char = text[i]
        if char == "#":
            end = self._run_end(text, i, "#")
            after = self._char_at(text, end)
            return end if end - i <= 6 and (after == "" or after in _SPACES + _BREAKS) else None
        if char in "-*+":
            if not self._is_space_at(text, i + 1):
                return None
            start = self._run_end(text, i + 1, _SPACES)
            self._need(text, start + 4)
            box = _TASK_BOX.match(text, start) and (text[start + 3:start + 4] or " ") \
                in _SPACES + _BREAKS
            return start + 3 if box else start
        if char.isdigit():
            end = self._run_end(text, i, "0123456789")
            if _ORDERED.fullmatch(text, i, end + 1) and self._is_space_at(text, end + 1):
                return end + 1
        return None

    def _is_space_at(self, text: str, index: int) -> bool:
        char = self._char_at(text, index)
        return char != "" and char in _SPACES

    def _is_rule(self, text: str, i: int) -> bool:
        """A line of one of _RULE_CHARS and spaces (at least three of it for
        `-*_`, so "- item" and "**bold**" are not rules)."""
        char, count = text[i], 0
        for index in range(i, i + MAX_HOLD):
            here = self._char_at(text, index)
            if here == "" or here in _BREAKS:
                return count >= 3 or char == "="
            if here == char:
                count += 1
            elif here not in _SPACES:
                return False
        return False

    def _is_delimiter_row(self, text: str, i: int) -> bool:
        """A table's line of `|`, `-`, `:` and spaces, with a `-`."""
        dash = False
        for index in range(i, i + MAX_HOLD):
            here = self._char_at(text, index)
            if here == "" or here in _BREAKS:
                return dash
            dash = dash or here == "-"
            if here not in "|-:" + _SPACES:
                return False
        return False

    def _skip_line(self, text: str, i: int) -> int:
        while i < len(text) and text[i] not in _BREAKS:
            i += 1
        return i

    # ---- inline ----

    def _in_code(self, text: str, i: int) -> int:
        if text[i] == "`":
            end = self._run_end(text, i, "`")
            if end - i == self._code:
                self._code = 0
            self._prev = "`"
            return end
        if self._url_starts(text, i):
            return self._url_host(text, i)
        return self._character(text, i)

    def _in_url(self, text: str, i: int) -> int:
        char = text[i]
        if char in _URL_STOPS:
            self._url = False
            return i
        if char == "(" or (char == ")" and self._url_parens):
            self._url_parens += 1 if char == "(" else -1
            return i + 1  # "wiki/Foo_(bar)": a bracket closed in the URL is the URL's
        if char in _URL_END_PUNCTUATION:
            end = self._run_end(text, i, _URL_END_PUNCTUATION)
            after = self._char_at(text, end)
            if after == "" or after in _URL_STOPS:
                self._url = False  # the sentence's punctuation, said as text
                return i
            return end
        end = i
        while end < len(text) and text[end] not in _URL_STOPS + _URL_END_PUNCTUATION + "(":
            end += 1
        return end

    def _inline(self, text: str, i: int) -> tuple[int, str]:
        inert = _INERT.match(text, i)
        if inert:
            self._emit(inert.group())
            self._prev, self._emoji = text[inert.end() - 1], False
            return inert.end(), text
        char = text[i]
        if char == "\\":
            after = self._char_at(text, i + 1)
            if after and after in string.punctuation:
                self._emit(after)
                self._prev = after
                return i + 2, text
        elif char == "`":
            end = self._run_end(text, i, "`")
            self._code, self._prev = end - i, "`"
            return end, text
        elif char in "*_~":
            return self._emphasis(text, i), text
        elif char in "![":
            link = self._link(text, i)
            if link is not None:
                end, label = link
                return i, text[:i] + label + text[end:]
        elif char == "|" and self._table:
            end = self._run_end(text, i + 1, _SPACES)
            after = self._char_at(text, end)
            if after == "" or after in _BREAKS:
                return end, text  # the row's closing bar
            if self._last and self._last not in _PAUSES:
                self._emit(",", own=True)
            else:
                self._gap = self._gap or " "
            self._prev = " "
            return i + 1, text
        elif char == "<":
            # the scheme first: it needs a few characters, the `>` the line
            close = self._find(text, i + 1, ">") if self._url_scheme(text, i + 1) == "full" else None
            if close is not None:
                return i, text[:i] + text[i + 1:close] + text[close + 1:]
            tag = self._tag(text, i)
            if tag is not None:
                end, pause = tag
                if pause:
                    self._gap, self._prev = ",", " "
                self._dropped = True
                return end, text
        elif self._url_starts(text, i):
            return self._url_host(text, i), text
        return self._character(text, i), text

    def _emphasis(self, text: str, i: int) -> int:
        char = text[i]
        end = self._run_end(text, i, char)
        before, after = self._prev, self._char_at(text, end) or " "
        spaced = (before.isspace() or not before) and after.isspace()
        if char == "~":
            literal = end - i == 1
        elif char == "*":
            literal = spaced or (end - i == 1 and before.isdigit() and after.isdigit())
        else:
            literal = spaced or (_is_word(before) and _is_word(after))
        if literal:
            self._emit(text[i:end])
        self._prev = char
        return end

    def _link(self, text: str, i: int) -> tuple[int, str] | None:
        """(end, label) of a link or image at i, or None."""
        start = i
        if text[i] == "!":
            if self._char_at(text, i + 1) != "[":
                return None
            start += 1
        close = self._find(text, start + 1, "]")
        if close is None or self._char_at(text, close + 1) != "(":
            return None
        end = self._destination_end(text, close + 2)
        if end is None:
            return None
        return end + 1, text[start + 1:close]

    def _destination_end(self, text: str, start: int) -> int | None:
        """The `)` that ends a link's destination, brackets in it balanced as
        CommonMark allows ("wiki/Foo_(bar)"), within MAX_HOLD characters and
        before a line break; None if there is none."""
        depth = 0
        for index in range(start, start + MAX_HOLD):
            char = self._char_at(text, index)
            if char == "" or char in _BREAKS:
                return None
            if char == ")" and not depth:
                return index
            depth += {"(": 1, ")": -1}.get(char, 0)
        return None

    def _tag(self, text: str, i: int) -> tuple[int, bool] | None:
        """(end, whether it is a pause) of an HTML tag or comment at i, or None."""
        if self._char_at(text, i + 1) == "!":
            self._need(text, i + 4)
            if not text.startswith("<!--", i):
                return None
            for index in range(i + 4, i + MAX_HOLD):  # a comment may span lines
                char = self._char_at(text, index)
                if char == "":
                    return None
                if char == ">" and text[index - 2:index] == "--":
                    return index + 1, False
            return None
        start = i + 2 if text[i + 1:i + 2] == "/" else i + 1
        first = self._char_at(text, start)
        if not first or first not in string.ascii_letters:
            return None  # "x<3", "a < b": no tag's name
        end = self._run_end(text, start, _TAG_NAME_CHARS)
        name = text[start:end].lower()
        if name not in _HTML_TAGS:
            return None
        after = self._char_at(text, end)
        if start == i + 2:  # a closing tag: "</b >", no attributes
            close = self._run_end(text, end, _SPACES)
        elif after and after in _SPACES:  # attributes, or a space before the `>`
            close = self._find(text, end, "<>")
        else:
            close = end + (after == "/")  # "<br/>"
        if close is None or self._char_at(text, close) != ">":
            return None
        return close + 1, name in _PAUSE_TAGS

    def _url_starts(self, text: str, i: int) -> bool:
        return not _is_word(self._prev) and self._prev not in "/.@-_" \
            and self._url_scheme(text, i) is not None

    def _url_scheme(self, text: str, i: int) -> str | None:
        """"full" for http(s)://, "www" for www. and a word character, else None."""
        for scheme in _SCHEMES:
            if not scheme.startswith(text[i:i + len(scheme)].lower()):
                continue
            self._need(text, i + len(scheme))  # what came so far begins the scheme
            if text[i:i + len(scheme)].lower() == scheme:
                if scheme != "www.":
                    return "full"
                return "www" if _is_word(self._char_at(text, i + 4)) else None
        return None

    def _url_host(self, text: str, i: int) -> int:
        start = i if text[i] in "wW" else text.index("//", i) + 2
        end = start
        while end - start < MAX_HOLD:
            char = self._char_at(text, end)
            if not char or not (_is_word(char) or char in ".-_"):
                break
            end += 1
        while end > start and text[end - 1] in ".-_":
            end -= 1  # the sentence's period after the host
        after = self._char_at(text, end)
        host = text[start:end]
        if host.lower().startswith("www."):
            host = host[4:]
        self._emit(host)
        self._url = bool(after) and after not in _URL_STOPS + ".-_"
        self._url_parens = 0
        self._prev = "/"
        return end

    def _character(self, text: str, i: int) -> int:
        char = text[i]
        code = ord(char)
        self._prev = char
        if _is_emoji_modifier(code) or (char == "\u200d" and self._emoji):
            self._dropped = True
            return i + 1
        if _is_emoji(code):
            self._emoji = self._dropped = True
            if self.options.emoji_names and not 0x1F1E6 <= code <= 0x1F1FF:
                name = unicodedata.name(char, "").lower()[:MAX_NAME]
                if name:
                    self._emit(f" {name} ", own=True)
            return i + 1
        self._emoji = False
        if char == "\t":
            self._emit(" ")
        elif unicodedata.category(char) in ("Cc", "Cs", "Co") or (
                unicodedata.category(char) == "Cf" and char not in "\u200c\u200d"):
            self._dropped = True
        else:
            self._emit(char)
        return i + 1
