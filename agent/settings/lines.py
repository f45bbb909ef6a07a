"""Where a key is written in a TOML text, for messages that give its line.

tomllib returns values without positions; these few regular expressions
find the line of a key (or of its nearest enclosing table) again, and the
line of a syntax error from tomllib's own message.
"""

from __future__ import annotations

import json
import re

_HEADER = re.compile(r"\s*\[\[?([^\[\]]+)\]")  # [table] and [[array.of.tables]]
_KEY_LINE = re.compile(r"""\s*(?:"([^"]*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*=""")
_HEADER_PART = re.compile(r""""([^"]*)"|'([^']*)'|([^\s."']+)""")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def locate(text: str, key: tuple[str, ...]) -> int | None:
    """The line where key is set, or else where its nearest enclosing table
    starts: dotted keys and inline tables are not followed. Lines inside a
    multi-line string (a long system prompt) are skipped."""
    seen: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    closing = None
    for number, line in enumerate(text.splitlines(), 1):
        if closing:
            if line.count(closing) % 2:
                closing = None
            continue
        if header := _HEADER.match(line):
            table = tuple("".join(part) for part in _HEADER_PART.findall(header[1]))
            seen.setdefault(table, number)
        elif assignment := _KEY_LINE.match(line):
            seen.setdefault((*table, "".join(assignment.groups(""))), number)
        closing = next((quote for quote in ('"""', "'''") if line.count(quote) % 2), None)
    return next((seen[key[:end]] for end in range(len(key), 0, -1) if key[:end] in seen), None)


def dotted(key: tuple[str, ...]) -> str:
    """key as TOML writes it: a part that is no bare key is quoted."""
    return ".".join(part if _BARE_KEY.fullmatch(part) else json.dumps(part) for part in key)


def syntax_error(message: str, text: str) -> tuple[str, int | None]:
    """tomllib's message split into its problem and line (None: not found in it)."""
    problem, _, position = message.rpartition(" (at ")
    if position == "end of document)":
        return problem, max(1, len(text.splitlines()))
    if found := re.fullmatch(r"line (\d+), column \d+\)", position):
        return problem, int(found[1])
    return message, None
