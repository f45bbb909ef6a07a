"""Warning details and dropped-event accounting (agent/stream/decoders/damage.py)
on the decoders' real output: every warning code has its words, the excerpt
is bounded and printable, and only events lost whole are counted."""

from __future__ import annotations

import pytest

from agent.stream.decoders import AnthropicDecoder, OpenAIChatDecoder, OpenAIResponsesDecoder
from agent.stream.decoders.damage import EXCERPT_BYTES, dropped_code, excerpt, warning_detail
from agent.stream.records import (DecodeWarning, FramingError, FramingErrorCode, JSONStatus,
                                  WarningCode)

TEXT = b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n'
DONE = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'


def test_a_cut_event_is_a_warning_with_a_detail_and_a_dropped_event():
    decoder = OpenAIChatDecoder()
    cut = TEXT % b"living"
    events = decoder.feed(TEXT % b"The " + cut[:30] + b"\n\n" + TEXT % b" room" + DONE)
    [warning] = [e for e in events if isinstance(e, DecodeWarning)]
    assert warning_detail(warning) == ("event data is not valid JSON (syntax at byte 24): "
                                       '{"choices":[{"index":0,"')
    assert decoder.message.text == "The  room"
    assert decoder.message.dropped_events == {"bad_json": 1}


@pytest.mark.parametrize("decoder", [OpenAIChatDecoder, AnthropicDecoder, OpenAIResponsesDecoder])
def test_only_events_lost_whole_are_counted(decoder):
    d = decoder(buffer_size=4096)
    d.feed(b"data: [1]\n\n" + b"data: " + b"x" * 5000 + b"\n\n" + b'data: {"type": 5}\n\n')
    d.close()
    assert d.message.dropped_events == {"not_object": 1, "event_too_large": 1}


def test_every_warning_and_framing_code_has_its_own_words():
    for code in WarningCode:
        assert not warning_detail(DecodeWarning(code, None, None)).startswith(code.name.lower())
    for code in FramingErrorCode:
        assert warning_detail(FramingError(code, 10)).endswith("(10 bytes)")
    assert dropped_code(FramingError(FramingErrorCode.ID_TOO_LONG, 300)) is None
    # a decoder's own BAD_JSON (a citation) costs one part, not the event
    assert dropped_code(DecodeWarning(WarningCode.BAD_JSON, "citation: x", b"{")) is None
    assert dropped_code(DecodeWarning(WarningCode.BAD_JSON, None, b"{", JSONStatus.SYNTAX, 1)) \
        == "bad_json"


def test_the_excerpt_is_bounded_around_the_failure_and_printable():
    raw = b"a" * 300 + b"\x1b[2J\xff" + b"b" * 300
    shown = excerpt(raw, 300)
    assert shown.startswith("…") and shown.endswith("…")
    assert "\\x1b[2J\\xff" in shown and "\x1b" not in shown
    assert len(shown.encode()) <= EXCERPT_BYTES + 16
    assert excerpt(b'{"a": "\xc3\xa9"}') == '{"a": "é"}'
