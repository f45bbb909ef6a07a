"""Damage to an answer: which upstream events were dropped, and a readable
detail for every warning.

A warning says what failed, where, and shows a bounded excerpt of the raw
bytes, so a person can tell a cut event from a server speaking another
dialect. An event the core could not use at all (not JSON, not an object,
too large) is a dropped event: the answer is missing whatever it carried,
and the decoder counts it by reason (the warning's code, lower case) in
Message.dropped_events. A warning about one field of an event that was
otherwise used is not counted: the rest of the event arrived.

Sans-IO and pure: the caller masks secrets (agent/providers/client.py
replaces the API key in raw bytes before the detail is made).
"""

from __future__ import annotations

from agent.stream.records import (
    DecodeWarning,
    FramingError,
    FramingErrorCode,
    UnknownField,
    WarningCode,
)

EXCERPT_BYTES = 96  # of the raw event, around the failing byte when it is known

_WHAT = {
    WarningCode.BAD_JSON: "event data is not valid JSON",
    WarningCode.NOT_OBJECT: "event data is JSON but not an object",
    WarningCode.UNKNOWN_EVENT: "unknown event type",
    WarningCode.UNKNOWN_DELTA: "unknown delta type",
    WarningCode.FIELD_TYPE: "a field of the wrong type was dropped",
    WarningCode.REPLACED_UTF8: "invalid UTF-8 or a lone surrogate was replaced by U+FFFD",
    WarningCode.MISSING_FIELD: "a field the event needs is missing or null",
    WarningCode.ELIDED: "a long string of an event over the stream buffer was not kept",
    WarningCode.DELTA_ELIDED: "a delta in an event over the stream buffer was not kept",
    WarningCode.UNKNOWN_BLOCK: "a delta or stop for a block or item never started",
    WarningCode.UNKNOWN_ITEM_TYPE: "a block or item of an unknown type, carried through",
    WarningCode.TOOL_ID_CONFLICT: "a tool call's id changed; the first was kept",
    WarningCode.TOOL_NAME_CONFLICT: "a tool call's name changed; the first was kept",
    WarningCode.ARGUMENTS_MISMATCH: "a call's final arguments differ from its deltas",
    WarningCode.AFTER_END: "data after the end of the stream was ignored",
}
_FRAMING_WHAT = {
    FramingErrorCode.EVENT_TOO_LARGE: "an event over the stream buffer was dropped",
    FramingErrorCode.NAME_TOO_LONG: "an event with an over-long event name was dropped",
    FramingErrorCode.ID_TOO_LONG: "an over-long id field was ignored",
    FramingErrorCode.LINE_TOO_LARGE: "an NDJSON line over the stream buffer was dropped",
    FramingErrorCode.OUTPUT_TOO_LARGE: "an event decoding to more records than fit was dropped",
}
# The core's warnings that cost a whole event (a decoder's own BAD_JSON, such
# as a citation that did not parse, has no json_status and costs one part).
_DROPPING_WARNINGS = frozenset({WarningCode.BAD_JSON, WarningCode.NOT_OBJECT,
                                WarningCode.DELTA_ELIDED})


def dropped_code(event: object) -> str | None:
    """The reason an event was dropped whole, or None when this event is no drop."""
    if type(event) is DecodeWarning:
        if event.code in _DROPPING_WARNINGS and (event.code is not WarningCode.BAD_JSON
                                                 or event.json_status is not None):
            return event.code.name.lower()
    elif type(event) is FramingError and event.code is not FramingErrorCode.ID_TOO_LONG:
        return event.code.name.lower()
    return None


def warning_detail(event: DecodeWarning | FramingError | UnknownField) -> str:
    """What failed, where, and a bounded excerpt of the raw bytes."""
    if isinstance(event, FramingError):
        return f"{_FRAMING_WHAT.get(event.code, event.code.name.lower())} ({event.size} bytes)"
    if isinstance(event, UnknownField):
        return (f"an SSE field the specification does not know, {event.name!r}, was ignored "
                f"({event.size} bytes): {excerpt(event.preview)}")
    parts = [_WHAT.get(event.code, event.code.name.lower())]
    if event.json_status is not None:
        parts.append(f"({event.json_status.name.lower()}"
                     + (f" at byte {event.offset})" if event.offset is not None else ")"))
    if event.detail:
        parts.append(f"[{event.detail}]")
    text = " ".join(parts)
    return f"{text}: {excerpt(event.raw, event.offset)}" if event.raw else text


def excerpt(raw: bytes, offset: int | None = None) -> str:
    """At most EXCERPT_BYTES of raw, around offset when it is known, as text:
    bytes that are not UTF-8 and characters that are not printable (an ESC
    would reach the terminal of `homeagent ask`) are shown as escapes."""
    start = 0
    if offset is not None and len(raw) > EXCERPT_BYTES:
        start = max(0, min(offset - EXCERPT_BYTES // 2, len(raw) - EXCERPT_BYTES))
    window = raw[start:start + EXCERPT_BYTES]
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in window.decode("utf-8", "backslashreplace"))
    return ("…" if start else "") + text + ("…" if start + len(window) < len(raw) else "")
