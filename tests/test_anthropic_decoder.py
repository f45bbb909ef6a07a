"""AnthropicDecoder (agent/stream/decoders/anthropic.py).

(a) Differential against the official SDK (anthropic==2.14.0, pinned in the
    venv): its SSE decoder (anthropic._streaming.SSEDecoder.iter_bytes) and
    its accumulator (anthropic.lib.streaming._messages.accumulate_event),
    driven the way MessageStream drives them, on the same bytes in the same
    reads and with no network; the final Message is compared field by field.
    Streams: the recorded fixture, one hand-written stream per Anthropic quirk
    of ../shared/notes/wire-quirks.md, and hypothesis-generated streams fed
    in random splits (every split point for the short ones).
(b) Where the SDK is wrong, raises or drops data, the test asserts the right
    outcome on our side and says why.
(c) Fault cases: truncation at every byte offset, malformed and wrong-typed
    events (one per row of docs/truth-table-anthropic.md), unknown events,
    error events.
No timing is asserted anywhere; hypothesis runs derandomized.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from anthropic._streaming import SSEDecoder
from anthropic.lib.streaming._messages import accumulate_event
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.stream.decoders.anthropic import AnthropicDecoder
from agent.stream.decoders.base import OtherPart
from agent.stream.records import (
    Citation,
    DecodeWarning,
    FramingError,
    FramingErrorCode,
    JSONStatus,
    ProviderError,
    ReasoningDelta,
    TextDelta,
    Truncated,
    UnknownField,
    Usage,
    WarningCode,
)
from agent.stream.decoders.events import (
    MessageFinished,
    MessageIncomplete,
    ToolCallDelta,
    ToolCallDone,
    ToolCallOpened,
)
from agent.stream.message import ArgumentsError, FinishReason, TextPart, ThinkingPart, ToolCall
import bench_module
from conftest import scaled
from streams import cuts_for, feed_split, recorded, split_view



# ---------------------------------------------------------------------------
# building streams
# ---------------------------------------------------------------------------

def sse(obj, name: str | None = None, pad: str = "", ascii_only: bool = False) -> bytes:
    """One SSE event: `event:` from the JSON type unless given, `data:` the
    compact JSON (pad appended after the closing brace)."""
    data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=ascii_only,
                                                       separators=(",", ":"))
    if name is None:
        name = obj["type"] if isinstance(obj, dict) and isinstance(obj.get("type"), str) else "message"
    return f"event: {name}\ndata: {data}{pad}\n\n".encode()


def body_of(*events, **kw) -> bytes:
    return b"".join(e if isinstance(e, bytes) else sse(e, **kw) for e in events)


def msg_start(id="msg_01", model="claude-test", input_tokens=10, output_tokens=1,
              cache_read=0, cache_write=0):
    return {"type": "message_start", "message": {
        "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": cache_write,
                  "cache_read_input_tokens": cache_read, "output_tokens": output_tokens}}}


def start(i, block):
    return {"type": "content_block_start", "index": i, "content_block": block}


def text_block(text=""):
    return {"type": "text", "text": text}


def tool_block(id, name):
    return {"type": "tool_use", "id": id, "name": name, "input": {}}


def thinking_block():
    return {"type": "thinking", "thinking": "", "signature": ""}


def delta(i, d):
    return {"type": "content_block_delta", "index": i, "delta": d}


def text(i, t):
    return delta(i, {"type": "text_delta", "text": t})


def args(i, piece):
    return delta(i, {"type": "input_json_delta", "partial_json": piece})


def think(i, t):
    return delta(i, {"type": "thinking_delta", "thinking": t})


def sig(i, s):
    return delta(i, {"type": "signature_delta", "signature": s})


def cite(i, c):
    return delta(i, {"type": "citations_delta", "citation": c})


def stop(i):
    return {"type": "content_block_stop", "index": i}


def msg_delta(reason="end_turn", seq=None, output_tokens=20, **usage):
    return {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": seq},
            "usage": {"output_tokens": output_tokens, **usage}}


PING = {"type": "ping"}
MSG_STOP = {"type": "message_stop"}


def char_cite(cited: str, a: int, b: int) -> dict:
    return {"type": "char_location", "cited_text": cited, "document_index": 0,
            "document_title": "Doc", "start_char_index": a, "end_char_index": b}


# ---------------------------------------------------------------------------
# running both sides
# ---------------------------------------------------------------------------

def ours(body: bytes, cuts=(), **kw):
    dec = AnthropicDecoder(**kw)
    events = feed_split(dec, body, list(cuts))
    return events, dec.message


def chunks_of(body: bytes, cuts) -> list[bytes]:
    points = [0] + sorted(set(c for c in cuts if 0 < c < len(body))) + [len(body)]
    return [body[a:b] for a, b in zip(points, points[1:])]


SDKStreamError = bench_module.load("decoder_bench.py").SDKStreamError


@dataclass
class SDKResult:
    snapshot: object
    json_bufs: dict
    skipped: list = field(default_factory=list)  # events before message_start


def sdk(chunks: list[bytes]) -> SDKResult:
    """The SDK path, as Stream.__stream__ and MessageStream.__stream__ run it:
    ping and events without an `event:` name are skipped, `event: error`
    raises, events before message_start are passed on unaccumulated, the rest
    goes through accumulate_event."""
    res = SDKResult(None, {})
    for s in SSEDecoder().iter_bytes(iter(chunks)):
        if s.event == "ping" or s.event is None:
            continue
        if s.event == "error":
            raise SDKStreamError(s.data, res)
        if not s.data:
            continue
        event = json.loads(s.data)
        if res.snapshot is None and event.get("type") != "message_start":
            res.skipped.append(event)
            continue
        res.snapshot = accumulate_event(event=event, current_snapshot=res.snapshot,
                                        json_bufs=res.json_bufs)
    return res


def assert_same_as_sdk(msg, res: SDKResult) -> None:
    """Field by field: id, model, stop_reason, stop_sequence, usage, every
    content block in order, citations. Our tool calls that did not complete
    are compared on their argument string only (the SDK keeps a partial
    parse there: see test_max_tokens_cuts_tool_call_mid_string)."""
    snap = res.snapshot
    assert snap is not None
    assert msg.id == snap.id
    assert msg.model == snap.model
    assert msg.raw_finish_reason == snap.stop_reason
    assert msg.stop_sequence == snap.stop_sequence
    u = msg.usage
    assert u is not None
    assert u.input_tokens == snap.usage.input_tokens
    assert u.output_tokens == snap.usage.output_tokens
    assert u.cache_read_tokens == snap.usage.cache_read_input_tokens
    assert u.cache_write_tokens == snap.usage.cache_creation_input_tokens
    assert len(msg.parts) == len(snap.content)
    sdk_citations = []
    for i, (part, block) in enumerate(zip(msg.parts, snap.content)):
        if block.type == "text":
            assert isinstance(part, TextPart)
            assert part.text == block.text
            sdk_citations += [c.to_dict() for c in block.citations or []]
        elif block.type == "thinking":
            assert isinstance(part, ThinkingPart) and part.redacted_data is None
            assert part.text == block.thinking
            # an empty signature is no signature: the core reports none
            assert part.signature == (block.signature or None)
        elif block.type == "redacted_thinking":
            assert isinstance(part, ThinkingPart)
            assert part.text == "" and part.redacted_data == block.data
        elif block.type in ("tool_use", "server_tool_use"):
            assert isinstance(part, ToolCall)
            assert (part.id, part.name) == (block.id, block.name)
            sent = res.json_bufs.get(i, b"").decode("utf-8")
            if not sent and block.input:
                # no piece came: the SDK keeps the input content_block_start
                # gave whole, and ours are those bytes as sent
                assert json.loads(part.arguments) == block.input
            else:
                assert part.arguments == sent
            if part.complete:
                assert part.error is None
                assert part.parsed == block.input
        else:
            assert isinstance(part, OtherPart)
            assert part.type == block.type
    assert msg.citations == sdk_citations


def warnings(events) -> list[DecodeWarning]:
    return [e for e in events if isinstance(e, DecodeWarning)]


def of(events, kind) -> list:
    return [e for e in events if isinstance(e, kind)]


def assert_calls_done_once(events) -> None:
    """Every started call is done exactly once, after its start."""
    started = [e.call for e in of(events, ToolCallOpened)]
    done = [e.call for e in of(events, ToolCallDone)]
    assert sorted(done) == sorted(started) == list(range(len(started)))
    for e in events:
        if isinstance(e, ToolCallDelta):
            assert e.call in started


def assert_split_invariant(body: bytes, cut_sets, **kw):
    """Same message, same non-delta events and same joined deltas
    (split_view) whatever the reads, byte by byte too."""
    whole_events, whole = ours(body, **kw)
    for cuts in list(cut_sets) + [range(1, len(body))]:
        events, msg = ours(body, cuts, **kw)
        assert msg == whole, cuts
        assert split_view(events) == split_view(whole_events), cuts
    return whole_events, whole


def every_split(body: bytes):
    return [[k] for k in range(1, len(body))]


def thorough_splits(body: bytes, limit: int = 1200):
    """Every split of a body up to limit bytes. A longer one: every odd
    offset, and every offset that can matter: near an event's end, inside or
    next to a multi-byte character, next to a backslash escape."""
    if len(body) <= limit:
        return every_split(body)
    near_end = set()
    for end in event_ends(body):
        near_end.update(range(end - 3, end + 4))
    return [[k] for k in range(1, len(body))
            if k % 2 or k in near_end or body[k - 1] >= 0x80 or body[k] >= 0x80
            or body[k - 1] == 0x5C or body[k] == 0x5C]


def differential(body: bytes, cut_sets=None):
    """Ours and the SDK on the same reads; ours is split-invariant."""
    cut_sets = thorough_splits(body) if cut_sets is None else cut_sets
    events, msg = assert_split_invariant(body, cut_sets)
    assert_same_as_sdk(msg, sdk([body]))
    for cuts in cut_sets[:: max(1, len(cut_sets) // 8)]:
        assert_same_as_sdk(msg, sdk(chunks_of(body, cuts)))
    return events, msg


# ---------------------------------------------------------------------------
# (a) the recorded stream
# ---------------------------------------------------------------------------

def fixture_body() -> bytes:
    return recorded("anthropic-tool-use.sse")


def test_fixture_matches_sdk():
    body = fixture_body()
    events, msg = differential(body)
    assert msg.text == "I'll check the current weather in Paris for you."
    (call,) = msg.tool_calls
    assert call == ToolCall("toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather",
                            '{"location": "Paris"}', {"location": "Paris"}, complete=True)
    assert msg.finish_reason is FinishReason.TOOL_CALLS
    assert msg.usage == Usage(377, 65, None, 0, 0, None)
    # The recording ends right after `data: {"type":"message_stop"}` with no
    # blank line: by the SSE rules that last event is never dispatched. The
    # SDK drops it silently; we report it (Truncated) and say the stream did
    # not end (MessageIncomplete). The message is still whole.
    assert of(events, Truncated) == [Truncated(True, True, False, 23)]
    assert events[-1] == MessageIncomplete("the stream ended without message_stop")
    assert_calls_done_once(events)


def test_fixture_terminated_is_clean():
    body = fixture_body() + b"\n\n"
    events, msg = differential(body)
    assert not of(events, MessageIncomplete) and not of(events, Truncated)
    assert not warnings(events)
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["Usage", "TextDelta", "ToolCallOpened", "ToolCallDelta", "ToolCallDone",
                     "MessageFinished", "Usage"]
    # the first input_json piece is "": the core drops empty pieces
    assert of(events, ToolCallDelta) == [ToolCallDelta(0, '{"location": "Paris"}')]


def test_fixture_byte_at_a_time():
    body = fixture_body() + b"\n\n"
    events, msg = ours(body, range(1, len(body)))
    assert msg == ours(body)[1]
    assert len(of(events, TextDelta)) > 1  # one read per byte: many pieces
    assert "".join(e.text for e in of(events, ToolCallDelta)) == '{"location": "Paris"}'
    assert "".join(e.text for e in of(events, TextDelta)) == msg.text


# ---------------------------------------------------------------------------
# (a) one hand-written stream per Anthropic quirk
# ---------------------------------------------------------------------------

def test_interleaved_block_indexes():
    """Deltas of blocks 0, 1 and 2 alternate: each goes to its own block."""
    body = body_of(
        msg_start(), start(0, text_block()), start(1, tool_block("toolu_a", "lookup")),
        start(2, text_block()),
        text(0, "Hel"), args(1, '{"q": '), text(2, "sec"), text(0, "lo"), args(1, '"x"}'),
        text(2, "ond"), stop(2), stop(0), stop(1), msg_delta("tool_use"), MSG_STOP)
    events, msg = differential(body)
    assert [p.text for p in msg.parts if isinstance(p, TextPart)] == ["Hello", "second"]
    assert msg.tool_calls[0].parsed == {"q": "x"}
    assert not warnings(events)
    assert [e.index for e in of(events, TextDelta)] == [0, 2, 0, 2]


def test_blocks_started_out_of_index_order():
    """Block 1 starts before block 0. Ours keys by index; the SDK appends
    blocks in arrival order and addresses deltas by index, so block 0's text
    lands in the tool block and is dropped, and the tool's input is never
    tracked: SDK wrong, not compared."""
    body = body_of(
        msg_start(), start(1, tool_block("toolu_a", "lookup")), start(0, text_block()),
        args(1, '{"q": 1}'), text(0, "first"), stop(0), stop(1), msg_delta("tool_use"), MSG_STOP)
    events, msg = assert_split_invariant(body, every_split(body))
    assert isinstance(msg.parts[0], TextPart) and msg.parts[0].text == "first"
    assert msg.parts[1] == ToolCall("toolu_a", "lookup", '{"q": 1}', {"q": 1}, complete=True)
    assert not warnings(events)
    snap = sdk([body]).snapshot
    assert [b.type for b in snap.content] == ["tool_use", "text"]
    assert snap.content[1].text == ""          # the SDK lost "first"
    assert snap.content[0].input == {}         # and the arguments


def test_first_partial_json_empty_and_tool_without_parameters():
    body = body_of(
        msg_start(), start(0, tool_block("toolu_a", "now")), args(0, ""), stop(0),
        start(1, tool_block("toolu_b", "clock")), stop(1),
        msg_delta("tool_use"), MSG_STOP)
    events, msg = differential(body)
    assert [c.parsed for c in msg.tool_calls] == [{}, {}]
    assert [c.arguments for c in msg.tool_calls] == ["", ""]
    assert not of(events, ToolCallDelta)  # empty pieces are not events


def tool_block_with(id, name, input):
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def test_input_whole_in_content_block_start():
    """A server may give a tool_use's input whole in content_block_start,
    no input_json_delta after: the SDK keeps it as the block's input, and so
    do we (its bytes as sent), never {}. When pieces come too, they are the
    input, as the SDK's (the start's is replaced); an empty piece is none."""
    given = {"text": "a \"b\" é 🙂", "n": [1, 2.5, None], "deep": {"k": True}}
    body = body_of(
        msg_start(), start(0, tool_block_with("toolu_a", "note", given)), stop(0),
        start(1, tool_block_with("toolu_b", "note", {"x": 1})), args(1, '{"y":'), args(1, " 2}"),
        stop(1),
        start(2, tool_block_with("toolu_c", "note", {"z": 3})), args(2, ""), stop(2),
        msg_delta("tool_use"), MSG_STOP)
    events, msg = differential(body)
    assert [(c.id, c.parsed, c.error, c.complete) for c in msg.tool_calls] == [
        ("toolu_a", given, None, True), ("toolu_b", {"y": 2}, None, True),
        ("toolu_c", {"z": 3}, None, True)]
    assert json.loads(msg.tool_calls[0].arguments) == given
    assert msg.tool_calls[2].arguments == '{"z":3}'  # the bytes as sent (compact)
    assert not warnings(events)
    assert [c.parsed for c in (d.tool_call for d in of(events, ToolCallDone))] == [
        given, {"y": 2}, {"z": 3}]


def test_input_in_start_that_is_not_an_object_is_an_error():
    """An input that is no object (a string, a list) is no arguments a tool
    takes: kept as sent, NOT_AN_OBJECT, never run with {}."""
    body = body_of(msg_start(), start(0, tool_block_with("toolu_a", "note", "go")), stop(0),
                   msg_delta("tool_use"), MSG_STOP)
    _, msg = ours(body)
    [call] = msg.tool_calls
    assert (call.arguments, call.parsed, call.error) == ('"go"', None, ArgumentsError.NOT_AN_OBJECT)


def test_thinking_signature_and_redacted_thinking():
    body = body_of(
        msg_start(), start(0, thinking_block()), think(0, "Let me "), think(0, "think. 思考"),
        sig(0, "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"), stop(0),
        start(1, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}), stop(1),
        start(2, text_block()), text(2, "Answer."), stop(2),
        msg_delta("end_turn"), MSG_STOP)
    events, msg = differential(body)
    assert msg.parts[0] == ThinkingPart("Let me think. 思考",
                                        "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds")
    assert msg.parts[1] == ThinkingPart("", None, "EmwKAhgBEgy3va3pzix/LafPsn4a")
    assert [e.text for e in of(events, ReasoningDelta)] == ["Let me think. 思考"]


def test_later_signature_replaces_earlier():
    body = body_of(msg_start(), start(0, thinking_block()), think(0, "a"), sig(0, "first+/="),
                   sig(0, "second+/=="), stop(0), msg_delta(), MSG_STOP)
    _, msg = differential(body)
    assert msg.parts[0].signature == "second+/=="


def test_signature_kept_byte_exact():
    s = "Ab+/=\\u00e9\u00e9\U0001F600" + "x" * 300
    body = body_of(msg_start(), start(0, thinking_block()), sig(0, s), stop(0),
                   msg_delta(), MSG_STOP)
    _, msg = differential(body, [[k] for k in range(1, len(body), 7)])
    assert msg.parts[0].signature == s


def test_citations():
    c1, c2 = char_cite("the grass is green", 0, 18), char_cite("sky 藍", 20, 25)
    page = {"type": "page_location", "cited_text": "p", "document_index": 1,
            "document_title": None, "start_page_number": 1, "end_page_number": 2}
    body = body_of(
        msg_start(), start(0, text_block()), text(0, "According to the document, "),
        stop(0), start(1, text_block()), cite(1, c1), text(1, "the grass is green"),
        cite(1, c2), cite(1, page), stop(1), msg_delta(), MSG_STOP)
    events, msg = differential(body)
    assert msg.citations == [c1, c2, page]
    assert [json.loads(e.raw) for e in of(events, Citation)] == [c1, c2, page]
    assert [e.index for e in of(events, Citation)] == [1, 1, 1]


def test_trailing_spaces_after_json():
    """Real API data lines may be padded after the closing brace."""
    body = body_of(msg_start(), start(0, text_block()), text(0, "padded"), stop(0),
                   start(1, tool_block("toolu_p", "f")), args(1, '{"a": [1, 2]}  '), stop(1),
                   msg_delta("tool_use"), MSG_STOP, pad="   ")
    events, msg = differential(body)
    assert msg.text == "padded" and msg.tool_calls[0].parsed == {"a": [1, 2]}
    assert msg.tool_calls[0].arguments == '{"a": [1, 2]}  '
    assert not warnings(events)


def test_unknown_delta_type_is_warned_and_skipped():
    body = body_of(msg_start(), start(0, text_block()), text(0, "a"),
                   delta(0, {"type": "future_delta", "stuff": [1, 2]}), text(0, "b"), stop(0),
                   msg_delta(), MSG_STOP)
    events, msg = differential(body)
    assert msg.text == "ab"
    (w,) = warnings(events)
    assert (w.code, w.detail) == (WarningCode.UNKNOWN_DELTA, "future_delta")
    assert json.loads(w.raw)["delta"]["type"] == "future_delta"


def test_unknown_event_type_and_unknown_fields():
    """A future event type is warned and skipped; unknown members of known
    events are ignored (the SDK ignores both too)."""
    md = {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None,
                                             "future": 1},
          "usage": {"output_tokens": 3, "future_tokens": 4}}
    body = body_of(msg_start(), {"type": "future_event", "x": 1}, start(0, text_block()),
                   text(0, "a"), stop(0), md, MSG_STOP)
    events, msg = differential(body)
    (w,) = warnings(events)
    assert (w.code, w.detail, w.raw) == (WarningCode.UNKNOWN_EVENT, "future_event",
                                         b'{"type":"future_event","x":1}')
    assert msg.text == "a" and msg.usage.output_tokens == 3


def test_error_event_after_200():
    """`event: error` then the connection closes without message_stop. The
    SDK raises at the error; we pass a ProviderError on, keep what came
    before, and end with MessageIncomplete."""
    err = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    body = body_of(msg_start(), start(0, text_block()), text(0, "partial"), err)
    events, msg = assert_split_invariant(body, every_split(body))
    (pe,) = of(events, ProviderError)
    assert (pe.type, pe.message) == ("overloaded_error", "Overloaded")
    assert json.loads(pe.raw) == err["error"]
    assert events[-1] == MessageIncomplete("the stream ended without message_stop")
    assert msg.text == "partial" and msg.finish_reason is None
    with pytest.raises(SDKStreamError) as info:
        sdk([body])
    assert info.value.result.snapshot.content[0].text == msg.text


def test_max_tokens_cuts_tool_call_mid_string():
    """The call's JSON ends mid-string, then content_block_stop and
    message_delta(max_tokens). Ours: the call is TRUNCATED, not complete,
    its partial arguments kept, and its ToolCallDone waits for the stop
    reason. The SDK (2.14.0) does not raise here: jiter's partial mode
    drops the cut string and reports input == {} as if the call were whole,
    so it cannot tell a cut call from a complete one."""
    cut = '{"city": "Par'
    body = body_of(msg_start(), start(0, text_block()), text(0, "Checking"), stop(0),
                   start(1, tool_block("toolu_w", "weather")), args(1, '{"city"'),
                   args(1, ': "Par'), stop(1), msg_delta("max_tokens", output_tokens=50),
                   MSG_STOP)
    events, msg = differential(body)
    (call,) = msg.tool_calls
    assert call.arguments == cut and call.parsed is None and not call.complete
    assert call.error is ArgumentsError.TRUNCATED
    assert msg.finish_reason is FinishReason.LENGTH
    # the Done comes with message_delta, before MessageFinished
    names = [type(e).__name__ for e in events]
    assert names.index("ToolCallDone") == names.index("MessageFinished") - 1
    snap = sdk([body]).snapshot
    assert snap.content[1].input == {}


def test_max_tokens_cut_after_a_number():
    """`{"n": 12` cut by max_tokens: the SDK reports {'n': 12} as the input
    (the number may have had more digits); ours says TRUNCATED."""
    body = body_of(msg_start(), start(0, tool_block("toolu_n", "f")), args(0, '{"n": 12'),
                   stop(0), msg_delta("max_tokens"), MSG_STOP)
    _, msg = differential(body)
    assert msg.tool_calls[0].error is ArgumentsError.TRUNCATED
    assert sdk([body]).snapshot.content[0].input == {"n": 12}


def test_ping_anywhere():
    body = body_of(PING, msg_start(), PING, start(0, text_block()), PING, text(0, "x"), PING,
                   stop(0), PING, msg_delta(), PING, MSG_STOP)
    events, msg = differential(body)
    assert msg.text == "x" and not warnings(events)
    assert not of(events, MessageIncomplete)


def test_multiple_tool_use_blocks():
    body = body_of(
        msg_start(), start(0, text_block()), text(0, "Three calls."), stop(0),
        start(1, tool_block("toolu_1", "a")), args(1, ""), args(1, '{"x": 1}'), stop(1),
        start(2, tool_block("toolu_2", "b")), args(2, '{"y": '), args(2, '[true, null]}'), stop(2),
        start(3, tool_block("toolu_3", "c")), args(3, '{"z": "🌍"}'), stop(3),
        msg_delta("tool_use"), MSG_STOP)
    events, msg = differential(body)
    assert [(c.id, c.parsed) for c in msg.tool_calls] == [
        ("toolu_1", {"x": 1}), ("toolu_2", {"y": [True, None]}), ("toolu_3", {"z": "🌍"})]
    assert [e.call for e in of(events, ToolCallOpened)] == [0, 1, 2]
    assert [(e.call, e.tool_call.id) for e in of(events, ToolCallDone)] == [
        (0, "toolu_1"), (1, "toolu_2"), (2, "toolu_3")]
    assert_calls_done_once(events)


@pytest.mark.parametrize("ascii_only", [False, True], ids=["utf8", "escaped"])
def test_cjk_and_emoji(ascii_only):
    """Multi-byte characters split across reads at every byte, raw or as
    \\uXXXX escapes (emoji as surrogate pairs)."""
    pieces = ["你好，", "世界", "🌍👨‍👩‍👧", " café ", "\u2028", "𝄞", "한국어"]
    body = body_of(msg_start(), start(0, text_block()), *[text(0, p) for p in pieces], stop(0),
                   start(1, tool_block("toolu_u", "say")), args(1, '{"t": "日本'),
                   args(1, '語 🎌"}'), stop(1), msg_delta(), MSG_STOP, ascii_only=ascii_only)
    events, msg = differential(body)
    assert msg.text == "".join(pieces)
    assert msg.tool_calls[0].parsed == {"t": "日本語 🎌"}
    assert not warnings(events)


def test_stop_sequence_and_cumulative_usage():
    """message_delta may repeat input and cache counts (cumulative): they
    replace; absent ones keep the message_start value."""
    body = body_of(msg_start(input_tokens=5, cache_read=100, cache_write=7),
                   start(0, text_block()), text(0, "Hi"), stop(0),
                   msg_delta("stop_sequence", "\n\nHuman:", output_tokens=3, input_tokens=6,
                             cache_read_input_tokens=101), MSG_STOP)
    _, msg = differential(body)
    assert msg.stop_sequence == "\n\nHuman:" and msg.finish_reason is FinishReason.STOP
    assert msg.usage == Usage(6, 3, None, 101, 7, None)


def test_server_tool_use_is_a_tool_block():
    """server_tool_use is read like tool_use by the core (the SDK tracks its
    input too); the result block type is unknown to us: OtherPart."""
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    body = body_of(msg_start(),
                   start(0, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                             "input": {}}),
                   args(0, '{"query": "x"}'), stop(0), start(1, result), stop(1),
                   msg_delta(), MSG_STOP)
    events, msg = differential(body)
    assert msg.parts[0].parsed == {"query": "x"}
    assert isinstance(msg.parts[1], OtherPart)
    assert json.loads(msg.parts[1].raw) == result
    (w,) = warnings(events)
    assert (w.code, w.detail) == (WarningCode.UNKNOWN_ITEM_TYPE, "web_search_tool_result")


# ---------------------------------------------------------------------------
# (b) where the SDK is wrong or raises
# ---------------------------------------------------------------------------

def test_events_before_message_start_are_kept():
    """MessageStream passes events before message_start on unaccumulated
    (accumulate_event itself raises RuntimeError on them), so it never sees
    block 0 start, and the text_delta for block 0 after message_start then
    raises IndexError in accumulate_event. Ours keys by index and keeps all."""
    body = body_of(start(0, text_block()), text(0, "early "), msg_start(), text(0, "late"),
                   stop(0), msg_delta(), MSG_STOP)
    events, msg = assert_split_invariant(body, every_split(body))
    assert msg.text == "early late" and msg.id == "msg_01"
    assert not warnings(events)
    with pytest.raises(IndexError):
        sdk([body])
    with pytest.raises(RuntimeError, match="before \"message_start\""):
        accumulate_event(event=start(0, text_block()), current_snapshot=None, json_bufs={})


def test_event_names_do_not_matter():
    """The core dispatches on the JSON `type`. The SDK's Stream drops every
    event without an `event:` line (sse.event is None) and trusts the name
    over the JSON: a stream without names gives it nothing."""
    events_ = [msg_start(), start(0, text_block()), text(0, "nameless"), stop(0), msg_delta(),
               MSG_STOP]
    body = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events_)
    events, msg = assert_split_invariant(body, every_split(body))
    assert msg.text == "nameless" and not of(events, MessageIncomplete)
    assert sdk([body]).snapshot is None


def test_invalid_tool_json_sdk_raises():
    """Arguments that are not JSON at all: the SDK raises ValueError in the
    middle of the stream (at the delta); ours decodes on and reports the call
    INVALID_JSON once the stop reason says it was not cut."""
    body = body_of(msg_start(), start(0, tool_block("toolu_x", "f")), args(0, '{"a": nope}'),
                   stop(0), start(1, text_block()), text(1, "after"), stop(1),
                   msg_delta("tool_use"), MSG_STOP)
    events, msg = assert_split_invariant(body, every_split(body))
    (call,) = msg.tool_calls
    assert call.error is ArgumentsError.INVALID_JSON and call.complete
    assert call.arguments == '{"a": nope}' and msg.text == "after"
    with pytest.raises(ValueError, match="Unable to parse tool parameter JSON"):
        sdk([body])


def test_trailing_garbage_in_tool_json():
    """`{"a": 1} x`: jiter's partial mode accepts it as {'a': 1}; the
    arguments are not JSON and ours says INVALID_JSON."""
    body = body_of(msg_start(), start(0, tool_block("toolu_g", "f")), args(0, '{"a": 1} x'),
                   stop(0), msg_delta("tool_use"), MSG_STOP)
    _, msg = assert_split_invariant(body, every_split(body))
    assert msg.tool_calls[0].error is ArgumentsError.INVALID_JSON
    assert sdk([body]).snapshot.content[0].input == {"a": 1}


def test_message_delta_without_usage():
    """The SDK reads event.usage.output_tokens unconditionally and raises
    AttributeError; ours keeps the message_start usage."""
    md = {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}}
    body = body_of(msg_start(output_tokens=1), start(0, text_block()), text(0, "x"), stop(0),
                   md, MSG_STOP)
    events, msg = assert_split_invariant(body, every_split(body))
    assert msg.usage == Usage(10, 1, None, 0, 0, None)
    assert msg.finish_reason is FinishReason.STOP and not warnings(events)
    with pytest.raises(AttributeError):
        sdk([body])


def test_empty_signature_at_start_is_none():
    """A thinking block whose start carries signature "" and no
    signature_delta: the SDK keeps "", ours None (no signature was sent)."""
    body = body_of(msg_start(), start(0, thinking_block()), think(0, "t"), stop(0),
                   msg_delta(), MSG_STOP)
    _, msg = differential(body)
    assert msg.parts[0].signature is None
    assert sdk([body]).snapshot.content[0].signature == ""


# ---------------------------------------------------------------------------
# (a) hypothesis-generated valid streams against the SDK
# ---------------------------------------------------------------------------

CHARS = st.one_of(
    st.sampled_from(list("ab z\n\t\"\\/{}[]:,")),
    st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),          # CJK
    st.sampled_from(list("🌍👨\u200d👩😀é\u2028\u0085\x00𝄞\ufeff")),
    st.characters(codec="utf-8"),
)
TEXTS = st.text(CHARS, max_size=12)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70),
                    st.floats(allow_nan=False, allow_infinity=False), TEXTS)
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(TEXTS, inner, max_size=3), max_leaves=6)


@st.composite
def pieces_of(draw, s: str, allow_empty_first: bool = False) -> list[str]:
    cuts = sorted(set(draw(st.lists(st.integers(0, len(s)), max_size=4))))
    points = [0] + cuts + [len(s)]
    pieces = [s[a:b] for a, b in zip(points, points[1:])]
    if allow_empty_first and draw(st.booleans()):
        pieces.insert(0, "")
    return pieces


@st.composite
def block_events(draw, index: int) -> list[dict]:
    kind = draw(st.sampled_from(["text", "text", "thinking", "redacted", "tool", "tool"]))
    if kind == "text":
        evs = [start(index, text_block())]
        for p in draw(st.lists(TEXTS, min_size=1, max_size=4)):
            evs.append(text(index, p))
            if draw(st.integers(0, 4)) == 0:
                evs.append(cite(index, char_cite(draw(TEXTS), 0, draw(st.integers(0, 99)))))
    elif kind == "thinking":
        evs = [start(index, thinking_block())]
        evs += [think(index, p) for p in draw(st.lists(TEXTS, min_size=1, max_size=4))]
        evs += [sig(index, s) for s in draw(st.lists(
            st.text(st.sampled_from("AZaz09+/="), min_size=1, max_size=40), min_size=1, max_size=2))]
    elif kind == "redacted":
        evs = [start(index, {"type": "redacted_thinking",
                             "data": draw(st.text(st.sampled_from("AZaz09+/="), max_size=40))})]
    else:
        value = draw(st.dictionaries(TEXTS, JSON_VALUES, max_size=4))
        sep = draw(st.sampled_from([(", ", ": "), (",", ":")]))
        s = json.dumps(value, ensure_ascii=draw(st.booleans()), separators=sep)
        evs = [start(index, tool_block(f"toolu_{index:02d}", draw(st.sampled_from(["get", "put", "天气"]))))]
        evs += [args(index, p) for p in draw(pieces_of(s, allow_empty_first=True))]
    return evs + [stop(index)]


@st.composite
def valid_streams(draw, max_blocks: int = 4) -> bytes:
    blocks = [draw(block_events(i)) for i in range(draw(st.integers(0, max_blocks)))]
    # interleave: blocks start in index order; their other events may alternate
    merged, pos, started = [], [0] * len(blocks), 0
    while any(p < len(b) for p, b in zip(pos, blocks)):
        ready = [i for i in range(len(blocks)) if pos[i] < len(blocks[i]) and (pos[i] > 0 or i == started)]
        i = draw(st.sampled_from(ready))
        if pos[i] == 0:
            started += 1
        merged.append(blocks[i][pos[i]])
        pos[i] += 1
        if draw(st.integers(0, 9)) == 0:
            merged.append(PING)
    reason = draw(st.sampled_from(["end_turn", "tool_use", "stop_sequence", "max_tokens",
                                   "pause_turn", "refusal"]))
    seq = draw(TEXTS) if reason == "stop_sequence" else None
    extra = draw(st.fixed_dictionaries({}, optional={
        "input_tokens": st.integers(0, 10 ** 6), "cache_read_input_tokens": st.integers(0, 10 ** 6),
        "cache_creation_input_tokens": st.integers(0, 10 ** 6)}))
    events = [msg_start(draw(st.text("abcXYZ019_", min_size=1, max_size=20)),
                        draw(st.sampled_from(["claude-sonnet-4-5", "claude-opus-4-1"])),
                        draw(st.integers(0, 10 ** 6)), 1, draw(st.integers(0, 999)),
                        draw(st.integers(0, 999)))]
    events += merged + [msg_delta(reason, seq, draw(st.integers(0, 10 ** 6)), **extra), MSG_STOP]
    ascii_only = draw(st.booleans())
    return body_of(*events, ascii_only=ascii_only)


def check_valid_stream(body: bytes, cut_sets) -> None:
    events, msg = assert_split_invariant(body, cut_sets)
    assert not warnings(events) and not of(events, MessageIncomplete)
    assert_calls_done_once(events)
    assert all(c.complete and c.error is None for c in msg.tool_calls)
    assert len(of(events, MessageFinished)) == 1
    by_index: dict = {}
    for e in of(events, TextDelta):
        by_index[e.index] = by_index.get(e.index, "") + e.text
    assert "".join(by_index[i] for i in sorted(by_index)) == msg.text
    # blocks start in index order here, so call numbers follow message order
    for idx, call in enumerate(msg.tool_calls):
        assert "".join(e.text for e in of(events, ToolCallDelta) if e.call == idx) == call.arguments
    assert_same_as_sdk(msg, sdk([body]))
    for cuts in cut_sets[:3]:
        assert_same_as_sdk(msg, sdk(chunks_of(body, cuts)))


@settings(max_examples=scaled(40), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_streams_random_splits(data):
    body = data.draw(valid_streams())
    cut_sets = [data.draw(cuts_for(len(body))) for _ in range(3)]
    check_valid_stream(body, cut_sets)


@settings(max_examples=scaled(10), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(valid_streams(max_blocks=2))
def test_generated_short_streams_every_split(body):
    # every split point of a short stream; a longer one every 3rd
    cut_sets = every_split(body) if len(body) <= 1000 else [[k] for k in range(1, len(body), 3)]
    check_valid_stream(body, cut_sets)


# ---------------------------------------------------------------------------
# (c) truncation at every byte offset
# ---------------------------------------------------------------------------

RICH = body_of(
    msg_start(id="msg_rich", cache_read=3), start(0, thinking_block()), think(0, "Hmm 🤔 "),
    think(0, "ok"), sig(0, "c2lnbmF0dXJl"), stop(0),
    start(1, text_block()), start(2, tool_block("toolu_r1", "search")),
    text(1, "Looking "), args(2, ""), args(2, '{"q": "天'), text(1, "it up"), PING,
    args(2, '気", "n": 3}'), cite(1, char_cite("up", 0, 2)), stop(1), stop(2),
    start(3, tool_block("toolu_r2", "noop")), stop(3),
    msg_delta("tool_use", output_tokens=42), MSG_STOP)

CUT_CALL = body_of(
    msg_start(id="msg_cut"), start(0, text_block()), text(0, "Writing"), stop(0),
    start(1, tool_block("toolu_c", "write")), args(1, '{"body": "a lo'), args(1, "ng text"),
    stop(1), msg_delta("max_tokens", output_tokens=64), MSG_STOP)


def event_ends(body: bytes) -> set[int]:
    ends, at = set(), 0
    while (at := body.find(b"\n\n", at)) >= 0:
        at += 2
        ends.add(at)
    return ends


def quiet_cuts(body: bytes) -> set[int]:
    """Offsets where nothing is left undelivered: the start, an event's end,
    or right after an `event:` line (an event with no data yet dispatches
    nothing, by the SSE rules, so losing it loses nothing)."""
    quiet = {0} | event_ends(body)
    for end in list(quiet):
        if body.startswith(b"event:", end):
            quiet.add(body.index(b"\n", end) + 1)
    return quiet


def assert_prefix_consistent(part_msg, full) -> None:
    assert len(part_msg.parts) <= len(full.parts)
    for p, f in zip(part_msg.parts, full.parts):
        assert type(p) is type(f)
        if isinstance(p, TextPart):
            assert f.text.startswith(p.text)
        elif isinstance(p, ThinkingPart):
            assert f.text.startswith(p.text)
            assert p.signature in (None, f.signature)
            assert p.redacted_data == f.redacted_data
        elif isinstance(p, ToolCall):
            assert (p.id, p.name) == (f.id, f.name)
            if p.complete and f.complete:
                assert p == f
            else:
                assert p.error is ArgumentsError.TRUNCATED and not p.complete and p.parsed is None
                assert f.arguments.startswith(p.arguments)
    assert full.citations[:len(part_msg.citations)] == part_msg.citations
    assert part_msg.id in (None, full.id)
    assert part_msg.raw_finish_reason in (None, full.raw_finish_reason)


@pytest.mark.parametrize("name", ["fixture", "rich", "cut_call"])
def test_truncation_at_every_offset(name):
    if name == "fixture":
        body = fixture_body() + b"\n\n"
    else:
        body = {"rich": RICH, "cut_call": CUT_CALL}[name]
    _, full = ours(body)
    quiet = quiet_cuts(body)
    end_of_stop = body.rindex(b"message_stop") + len(b"message_stop\"}\n\n")
    assert end_of_stop == len(body)
    for k in range(len(body) + 1):
        events, msg = ours(body[:k], [k // 2])
        assert_calls_done_once(events)
        assert_prefix_consistent(msg, full)
        if k == len(body):
            assert msg == full and not of(events, MessageIncomplete) and not of(events, Truncated)
        else:
            assert events[-1] == MessageIncomplete("the stream ended without message_stop")
            assert len(of(events, MessageIncomplete)) == 1
            assert bool(of(events, Truncated)) == (k not in quiet), k
        assert not warnings(events), k
        # every call is done: TRUNCATED unless its block stopped with good JSON
        for c in msg.tool_calls:
            assert c.complete or c.error is ArgumentsError.TRUNCATED


def test_truncation_matches_sdk_prefix():
    """At every event boundary of RICH, our partial message and the SDK's
    snapshot of the same bytes agree (texts, ids, argument strings)."""
    for k in sorted(event_ends(RICH)):
        _, msg = ours(RICH[:k])
        res = sdk([RICH[:k]])
        if res.snapshot is None:
            assert msg.parts == [] and msg.id is None
            continue
        assert_same_as_sdk(msg, res)


def test_cut_after_stop_before_message_delta_is_truncated():
    """CUT_CALL cut after the tool block's stop: its arguments do not parse
    and no stop reason came. It is done at close as TRUNCATED."""
    k = CUT_CALL.index(b"event: message_delta")
    events, msg = ours(CUT_CALL[:k])
    (done,) = of(events, ToolCallDone)
    assert done.tool_call.error is ArgumentsError.TRUNCATED
    assert done.tool_call.arguments == '{"body": "a long text'
    assert events.index(done) < events.index(of(events, MessageIncomplete)[0])


# ---------------------------------------------------------------------------
# (c) odd inputs: one case per row of docs/truth-table-anthropic.md
# ---------------------------------------------------------------------------

HEAD = [msg_start(), start(0, text_block()), text(0, "before ")]
TAIL = [text(0, "after"), stop(0), msg_delta(), MSG_STOP]


def around(*odd) -> bytes:
    """The odd event(s) inside a normal stream whose text goes on after them."""
    return body_of(*HEAD, *odd, *TAIL)


def one_warning(events, code, detail=None):
    ws = warnings(events)
    assert len(ws) == 1, ws
    assert ws[0].code is code
    if detail is not None:
        assert ws[0].detail == detail
    return ws[0]


def field_type(path, code=WarningCode.FIELD_TYPE):
    def check(events, msg):
        one_warning(events, code, path)
        continues(events, msg)
    return check


def missing(path):
    """A member the event type needs, absent or null: MISSING_FIELD, and
    the event (or, for a delta's piece, that piece) is skipped."""
    return field_type(path, WarningCode.MISSING_FIELD)


def continues(events, msg):
    """Decoding went on: block 0 holds all its text, the stream ended well."""
    assert "before after" in [p.text for p in msg.parts if isinstance(p, TextPart)]
    assert msg.raw_finish_reason is not None and not of(events, MessageIncomplete)


def check_bad_json(events, msg):
    w = one_warning(events, WarningCode.BAD_JSON, None)
    assert w.raw == b'{"type":"content_block_delta","index":0,'
    assert w.json_status is not None and w.offset is not None
    continues(events, msg)


def bad_json(status):
    def check(events, msg):
        w = one_warning(events, WarningCode.BAD_JSON)
        assert w.json_status is status
        continues(events, msg)
    return check


def check_duplicate_key(events, msg):
    # json.h: lookup returns the last member (json.loads agrees)
    assert not warnings(events)
    assert msg.text == "before Bafter"


def check_index_spoiled(events, msg):
    # an index of a wrong type or value: the core warns and says -1
    ws = warnings(events)
    assert [w.code for w in ws] == [WarningCode.FIELD_TYPE, WarningCode.UNKNOWN_BLOCK]
    assert ws[0].detail == "index"
    assert ws[1].detail == "text_delta for block -1, never started: made a text block"
    # the delta lives on as block -1, which sorts first
    assert [p.text for p in msg.parts] == ["lost?", "before after"]


def index_unusable(code):
    """An index absent or null: the core warns MISSING_FIELD and drops the
    delta."""
    def check(events, msg):
        one_warning(events, code, "index")
        assert [p.text for p in msg.parts] == ["before after"]
        continues(events, msg)
    return check


def check_unknown_block_type(events, msg):
    w = one_warning(events, WarningCode.UNKNOWN_ITEM_TYPE, "future_block")
    assert json.loads(w.raw) == {"type": "future_block", "x": [1]}
    other = msg.parts[1]
    assert isinstance(other, OtherPart) and other.type == "future_block"
    assert json.loads(other.raw) == {"type": "future_block", "x": [1]}
    continues(events, msg)


def start_dropped(code, path):
    """The core warns and writes no start; the block's delta is then
    unknown to us and makes it."""
    def check(events, msg):
        ws = warnings(events)
        assert [(w.code, w.detail) for w in ws] == [
            (code, path),
            (WarningCode.UNKNOWN_BLOCK, "text_delta for block 1, never started: made a text block")]
        assert [p.text for p in msg.parts] == ["before after", "x"]
        continues(events, msg)
    return check


def tool_field(path, attr):
    def check(events, msg):
        one_warning(events, WarningCode.FIELD_TYPE, path)
        call = msg.tool_calls[0]
        assert getattr(call, attr) is None
        assert call.parsed == {"k": 1} and call.complete
        continues(events, msg)
    return check


def check_start_text_bad(events, msg):
    one_warning(events, WarningCode.FIELD_TYPE, "content_block.text")
    assert [p.text for p in msg.parts] == ["before after", "x"]


def check_redacted_bad(events, msg):
    one_warning(events, WarningCode.FIELD_TYPE, "content_block.data")
    assert msg.parts[1] == ThinkingPart("", None, None)
    continues(events, msg)


def check_thinking_start_bad(path):
    def check(events, msg):
        one_warning(events, WarningCode.FIELD_TYPE, path)
        assert msg.parts[1] == ThinkingPart("t", None)
        continues(events, msg)
    return check


def message_unusable(code):
    def check(events, msg):
        one_warning(events, code, "message")
        assert msg.id is None and msg.model is None
        assert msg.usage == Usage(None, 20, None, None, None, None)
        continues(events, msg)
    return check


def meta_field(path):
    def check(events, msg):
        one_warning(events, WarningCode.FIELD_TYPE, path)
        assert (msg.id is None) == (path == "id") and (msg.model is None) == (path == "model")
        continues(events, msg)
    return check


def usage_check(path, usage):
    def check(events, msg):
        one_warning(events, WarningCode.FIELD_TYPE, path)
        assert msg.usage == usage
        continues(events, msg)
    return check


def check_finish_bad(path, reason, seq):
    def check(events, msg):
        one_warning(events, WarningCode.FIELD_TYPE, path)
        assert msg.raw_finish_reason == reason and msg.stop_sequence == seq
        assert len(of(events, MessageFinished)) == (reason is not None)
        assert msg.text == "before after" and not of(events, MessageIncomplete)
    return check


def usage_end(path, usage, reason=None, code=WarningCode.FIELD_TYPE):
    def check(events, msg):
        one_warning(events, code, path)
        assert msg.usage == usage and msg.raw_finish_reason == reason
        assert msg.text == "before after" and not of(events, MessageIncomplete)
    return check


def check_stop_reason_null(events, msg):
    assert not warnings(events) and not of(events, MessageFinished)
    assert msg.finish_reason is None and msg.usage.output_tokens == 7
    assert msg.text == "before after" and not of(events, MessageIncomplete)


def error_check(type_, message):
    def check(events, msg):
        (pe,) = of(events, ProviderError)
        assert (pe.type, pe.message) == (type_, message)
        assert pe.raw is not None
        continues(events, msg)  # the stream went on: nothing lost
    return check


def check_name_ignored(events, msg):
    assert not warnings(events)
    assert msg.text == "before xafter"


def check_bad_utf8(events, msg):
    one_warning(events, WarningCode.REPLACED_UTF8, None)
    assert msg.text == "before \ufffd\ufffdafter"


def check_lone_surrogate(events, msg):
    one_warning(events, WarningCode.REPLACED_UTF8, None)
    assert msg.text == "before \ufffdafter"


def check_unknown_sse_field(events, msg):
    assert of(events, UnknownField) == [UnknownField("retry-after", b"5", 1)]
    assert not warnings(events)
    continues(events, msg)


def check_after_end(events, msg):
    ws = warnings(events)
    assert [(w.code, w.detail) for w in ws] == [(WarningCode.AFTER_END, "TextDelta")]
    assert msg.text == "before after" and not of(events, MessageIncomplete)


def check_end_bad_utf8(events, msg):
    # the event's REPLACED_UTF8 comes before its end: not data after the end
    assert [(w.code, w.detail) for w in warnings(events)] == [(WarningCode.REPLACED_UTF8, None)]
    assert msg.text == "before after" and not of(events, MessageIncomplete)


def implicit(kind_text, check_part):
    def check(events, msg):
        w = one_warning(events, WarningCode.UNKNOWN_BLOCK)
        assert w.detail.startswith(kind_text)
        check_part(msg.parts[1])
        continues(events, msg)
    return check


def check_implicit_call_late_start(events, msg):
    ws = warnings(events)
    assert [w.code for w in ws] == [WarningCode.UNKNOWN_BLOCK, WarningCode.UNKNOWN_BLOCK]
    assert "started after its deltas" in ws[1].detail
    assert msg.tool_calls == [ToolCall("toolu_late", "late", '{"a": 1}', {"a": 1}, complete=True)]
    (started,) = of(events, ToolCallOpened)
    assert (started.id, started.name) == (None, None)  # it was reported before the start came
    continues(events, msg)


def decoder_warns(fragment, check_msg=None):
    def check(events, msg):
        w = one_warning(events, WarningCode.UNKNOWN_BLOCK)
        assert fragment in w.detail, w.detail
        if check_msg:
            check_msg(msg)
        else:
            continues(events, msg)
    return check


def check_start_no_index(events, msg):
    # the core drops both: no block, no call
    assert [(w.code, w.detail) for w in warnings(events)] == [
        (WarningCode.MISSING_FIELD, "index"), (WarningCode.MISSING_FIELD, "index")]
    assert not of(events, ToolCallOpened) and not msg.tool_calls
    continues(events, msg)


def check_start_index_negative(events, msg):
    # the core says -1 (warning at the start and at the stop); the decoder
    # keeps the block as block -1
    assert [(w.code, w.detail) for w in warnings(events)] == [
        (WarningCode.FIELD_TYPE, "index"),
        (WarningCode.UNKNOWN_BLOCK, "content_block_start without a usable index: kept as block -1"),
        (WarningCode.FIELD_TYPE, "index")]
    assert msg.parts[0] == msg.tool_calls[0] == ToolCall("t", "f", "", {}, complete=True)
    assert msg.parts[1].text == "before after"


def call_error(error, complete, where):
    def check(events, msg):
        assert not warnings(events)
        (done,) = of(events, ToolCallDone)
        assert done.tool_call.error is error and done.tool_call.complete is complete
        names = [type(e).__name__ for e in events]
        if where == "stop":   # right at its content_block_stop
            assert names.index("ToolCallDone") < names.index("TextDelta", names.index("ToolCallDelta"))
        elif where == "finish":
            assert names.index("ToolCallDone") == names.index("MessageFinished") - 1
        assert msg.tool_calls[0] is done.tool_call
        continues(events, msg)
    return check


def check_held_until_message_stop(events, msg):
    (done,) = of(events, ToolCallDone)
    assert done.tool_call.error is ArgumentsError.INVALID_JSON and done.tool_call.complete
    assert events[-1] is done  # at message_stop: no message_delta came
    assert not of(events, MessageIncomplete)


def check_open_call_at_finish(events, msg):
    # no content_block_stop: the call is parsed at message_delta
    (done,) = of(events, ToolCallDone)
    assert done.tool_call.parsed == {"a": 1} and done.tool_call.complete
    names = [type(e).__name__ for e in events]
    assert names.index("ToolCallDone") == names.index("MessageFinished") - 1


def check_open_call_at_close(events, msg):
    (done,) = of(events, ToolCallDone)
    assert done.tool_call.error is ArgumentsError.TRUNCATED
    assert done.tool_call.arguments == '{"a": 1}'  # whole, but its block never stopped
    assert events[-1] == MessageIncomplete("the stream ended without message_stop")


def check_empty_piece(events, msg):
    assert not warnings(events)
    assert "" not in [e.text for e in of(events, TextDelta)]
    assert msg.text == "before after"


def check_signature_replaced(events, msg):
    assert not warnings(events)
    assert msg.parts[1].signature == "B"


def check_framing(events, msg):
    (fe,) = of(events, FramingError)
    assert fe.code is FramingErrorCode.EVENT_TOO_LARGE
    assert msg.text == "before after"


def check_delta_elided(events, msg):
    assert not of(events, FramingError)
    assert [(w.code, w.detail) for w in of(events, DecodeWarning)] == [
        (WarningCode.DELTA_ELIDED, "delta.text")]
    assert msg.text == "before after" and msg.dropped_events == {"delta_elided": 1}


X = "x"
HUGE = text(0, "y" * 5000)
HUGE_STRUCTURE = {**text(0, "y"), "pad": ["y"] * 2000}  # nothing to elide

# (id, odd events, check[, decoder kwargs])
CASES = [
    # --- what the core reports ---
    ("bad-json", ['{"type":"content_block_delta","index":0,'], check_bad_json),
    ("empty-data", [b"event: content_block_delta\ndata:\n\n"], bad_json(JSONStatus.EMPTY)),
    ("trailing-value", ['{"type":"ping"} {}'], bad_json(JSONStatus.TRAILING)),
    ("too-deep", ['{"type":"ping","x":' + "[" * 70 + "]" * 70 + "}"], bad_json(JSONStatus.DEPTH)),
    ("duplicate-key", ['{"type":"content_block_delta","index":0,'
                       '"delta":{"type":"text_delta","text":"A","text":"B"}}'], check_duplicate_key),
    ("not-object", ["[1,2]"], lambda e, m: (one_warning(e, WarningCode.NOT_OBJECT), continues(e, m))),
    ("type-not-string", [{"type": 5}], field_type("type")),
    ("type-absent", [{"index": 0, "delta": {"type": "text_delta", "text": X}}], missing("type")),
    ("unknown-event", [{"type": "future_event", "x": 1}],
     lambda e, m: (one_warning(e, WarningCode.UNKNOWN_EVENT, "future_event"), continues(e, m))),
    ("unknown-delta", [delta(0, {"type": "future_delta"})],
     lambda e, m: (one_warning(e, WarningCode.UNKNOWN_DELTA, "future_delta"), continues(e, m))),
    ("delta-not-object", [{"type": "content_block_delta", "index": 0, "delta": "x"}], field_type("delta")),
    ("delta-type-not-string", [delta(0, {"type": 3, "text": X})], field_type("delta.type")),
    ("delta-type-absent", [delta(0, {"text": X})], missing("delta.type")),
    ("index-string", [{**text(0, "lost?"), "index": "0"}], check_index_spoiled),
    ("index-negative", [{**text(0, "lost?"), "index": -2}], check_index_spoiled),
    ("index-fraction", [{**text(0, "lost?"), "index": 0.5}], check_index_spoiled),
    ("index-too-big", [{**text(0, "lost?"), "index": 2 ** 64}], check_index_spoiled),
    ("index-absent", [{"type": "content_block_delta", "delta": {"type": "text_delta", "text": "lost?"}}],
     index_unusable(WarningCode.MISSING_FIELD)),
    ("index-null", [{**text(0, "lost?"), "index": None}], index_unusable(WarningCode.MISSING_FIELD)),
    ("text-not-string", [delta(0, {"type": "text_delta", "text": 5})], field_type("delta.text")),
    ("text-null", [delta(0, {"type": "text_delta", "text": None})], missing("delta.text")),
    ("text-absent", [delta(0, {"type": "text_delta"})], missing("delta.text")),
    ("delta-absent", [{"type": "content_block_delta", "index": 0}], missing("delta")),
    ("text-empty", [text(0, "")], check_empty_piece),
    ("partial-json-not-string",
     [start(1, tool_block("toolu_k", "f")), delta(1, {"type": "input_json_delta", "partial_json": 7}),
      args(1, '{"k": 1}'), stop(1)],
     field_type("delta.partial_json")),
    ("thinking-not-string",
     [start(1, thinking_block()), delta(1, {"type": "thinking_delta", "thinking": []}), stop(1)],
     field_type("delta.thinking")),
    ("signature-not-string",
     [start(1, thinking_block()), delta(1, {"type": "signature_delta", "signature": 1}), stop(1)],
     field_type("delta.signature")),
    ("citation-not-object", [delta(0, {"type": "citations_delta", "citation": "doc"})],
     field_type("delta.citation")),
    ("content-block-absent", [{"type": "content_block_start", "index": 1}, text(1, X)],
     start_dropped(WarningCode.MISSING_FIELD, "content_block")),
    ("content-block-not-object", [{"type": "content_block_start", "index": 1, "content_block": []},
                                  text(1, X)], start_dropped(WarningCode.FIELD_TYPE, "content_block")),
    ("content-block-type-not-string", [start(1, {"type": 1}), text(1, X)],
     start_dropped(WarningCode.FIELD_TYPE, "content_block.type")),
    ("content-block-type-absent", [start(1, {"text": ""}), text(1, X)],
     start_dropped(WarningCode.MISSING_FIELD, "content_block.type")),
    ("content-block-text-not-string", [start(1, {"type": "text", "text": 1}), text(1, X)],
     check_start_text_bad),
    ("tool-id-not-string", [start(1, {"type": "tool_use", "id": 1, "name": "f"}), args(1, '{"k": 1}'),
                            stop(1)], tool_field("content_block.id", "id")),
    ("tool-name-not-string", [start(1, {"type": "tool_use", "id": "t", "name": {}}),
                              args(1, '{"k": 1}'), stop(1)], tool_field("content_block.name", "name")),
    ("redacted-data-not-string", [start(1, {"type": "redacted_thinking", "data": 0}), stop(1)],
     check_redacted_bad),
    ("thinking-start-thinking-not-string",
     [start(1, {"type": "thinking", "thinking": 0, "signature": ""}), think(1, "t"), stop(1)],
     check_thinking_start_bad("content_block.thinking")),
    ("thinking-start-signature-not-string",
     [start(1, {"type": "thinking", "thinking": "", "signature": False}), think(1, "t"), stop(1)],
     check_thinking_start_bad("content_block.signature")),
    ("unknown-block-type", [start(1, {"type": "future_block", "x": [1]}), stop(1)],
     check_unknown_block_type),
    ("error-nested", [{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}],
     error_check("overloaded_error", "Overloaded")),
    # no `error` member: the event itself is the error
    ("error-flat", [{"type": "error", "message": "flat"}], error_check("error", "flat")),
    ("error-flat-code", [{"type": "error", "code": "overloaded", "message": "flat"}],
     error_check("overloaded", "flat")),
    ("error-bare", [{"type": "error"}], error_check("error", None)),
    ("error-string", [{"type": "error", "error": "boom"}], error_check(None, "boom")),
    ("event-name-ignored", [sse(text(0, X), name="ping")], check_name_ignored),
    ("bad-utf8", [b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                  b'"delta":{"type":"text_delta","text":"\xff\xc3"}}\n\n'], check_bad_utf8),
    ("lone-surrogate", [b'event: content_block_delta\ndata: {"type":"content_block_delta",'
                        b'"index":0,"delta":{"type":"text_delta","text":"\\ud800"}}\n\n'],
     check_lone_surrogate),
    ("unknown-sse-field", [b"retry-after: 5\n\n"], check_unknown_sse_field),
    ("delta-over-the-buffer", [HUGE], check_delta_elided, {"buffer_size": 4096}),
    ("event-too-large", [HUGE_STRUCTURE], check_framing, {"buffer_size": 4096}),
    # --- what the decoder reports ---
    ("delta-unknown-block-text", [text(1, "x"), stop(1)],
     implicit("text_delta for block 1, never started: made a text", lambda p: p == TextPart("x"))),
    ("delta-unknown-block-thinking", [think(1, "x"), stop(1)],
     implicit("thinking_delta for block 1", lambda p: p == ThinkingPart("x"))),
    ("delta-unknown-block-signature", [sig(1, "S"), stop(1)],
     implicit("signature_delta for block 1", lambda p: p == ThinkingPart("", "S"))),
    ("delta-unknown-block-tool", [args(1, '{"a": 1}'), stop(1)],
     implicit("input_json_delta for block 1", lambda p: p.parsed == {"a": 1} and p.id is None)),
    ("late-start-after-implicit-call", [args(1, '{"a": 1}'), start(1, tool_block("toolu_late", "late")),
                                        stop(1)], check_implicit_call_late_start),
    ("start-again", [start(1, text_block()), text(1, "one"), start(1, tool_block("t", "f")), stop(1)],
     decoder_warns("block 1 started again as tool_use: kept the first (text)",
                   lambda m: m.parts[1] == TextPart("one") and not m.tool_calls)),
    # two pieces of each: one record fed whole, two split between them; one warning
    ("delta-kind-mismatch", [start(1, tool_block("t", "f")), text(1, "wr"), text(1, "ong"), stop(1)],
     decoder_warns("text_delta for tool_use block 1: ignored",
                   lambda m: m.tool_calls[0].parsed == {} and m.text == "before after")),
    ("stop-unknown-block", [stop(7)], decoder_warns("content_block_stop for block 7, never started")),
    ("stop-twice", [stop(0)], decoder_warns("content_block_stop for block 0 again")),
    ("args-after-stop", [start(1, tool_block("t", "f")), args(1, "{}"), stop(1), args(1, " "),
                         args(1, "x")],
     decoder_warns("input_json_delta for block 1 after its content_block_stop: ignored",
                   lambda m: m.tool_calls[0].arguments == "{}")),
    ("citation-unknown-block", [cite(5, char_cite("c", 0, 1))],
     decoder_warns("citations_delta for block 5, never started: citation kept",
                   lambda m: m.citations == [char_cite("c", 0, 1)] and m.text == "before after")),
    ("start-without-index", [{"type": "content_block_start", "content_block": tool_block("t", "f")},
                             {"type": "content_block_stop"}], check_start_no_index),
    ("start-index-negative", [start(-1, tool_block("t", "f")), stop(-1)], check_start_index_negative),
    ("tool-args-not-object", [start(1, tool_block("t", "f")), args(1, "[1]"), stop(1)],
     call_error(ArgumentsError.NOT_AN_OBJECT, True, "stop")),
    ("tool-args-invalid-end-turn", [start(1, tool_block("t", "f")), args(1, '{"a": tru'), stop(1)],
     call_error(ArgumentsError.INVALID_JSON, True, "finish")),
    ("signature-replaced", [start(1, thinking_block()), sig(1, "A"), sig(1, "B"), stop(1)],
     check_signature_replaced),
]

# the message_start-level rows need their own stream
HEAD_CASES = [
    ("message-not-object", [{"type": "message_start", "message": 5}],
     message_unusable(WarningCode.FIELD_TYPE)),
    ("message-absent", [{"type": "message_start"}], message_unusable(WarningCode.MISSING_FIELD)),
    ("message-null", [{"type": "message_start", "message": None}],
     message_unusable(WarningCode.MISSING_FIELD)),
    ("message-id-not-string", [{**msg_start(), "message": {**msg_start()["message"], "id": 1}}],
     meta_field("id")),
    ("message-model-wrong", [{**msg_start(), "message": {**msg_start()["message"], "model": ["x"]}}],
     meta_field("model")),
    ("message-usage-not-object", [{**msg_start(), "message": {**msg_start()["message"], "usage": 1}}],
     usage_check("usage", Usage(None, 20, None, None, None, None))),
    ("input-tokens-not-int",
     [{**msg_start(), "message": {**msg_start()["message"],
                                  "usage": {"input_tokens": "10", "output_tokens": 1}}}],
     usage_check("input_tokens", Usage(None, 20, None, None, None, None))),
]

# the end-of-stream rows: (id, body, check)
def ending(md) -> bytes:
    """HEAD, then the given message_delta as the stream's only one."""
    return body_of(*HEAD, text(0, "after"), stop(0), md, MSG_STOP)


END_CASES = [
    ("stop-reason-not-string", ending({"type": "message_delta", "delta": {"stop_reason": 1}}),
     check_finish_bad("delta.stop_reason", None, None)),
    ("stop-sequence-not-string",
     ending({"type": "message_delta", "delta": {"stop_reason": "stop_sequence", "stop_sequence": 1}}),
     check_finish_bad("delta.stop_sequence", "stop_sequence", None)),
    ("stop-reason-null", ending({"type": "message_delta", "delta": {"stop_reason": None},
                                 "usage": {"output_tokens": 7}}), check_stop_reason_null),
    ("message-delta-delta-not-object",
     ending({"type": "message_delta", "delta": 1, "usage": {"output_tokens": 5}}),
     usage_end("delta", Usage(10, 5, None, 0, 0, None))),
    ("message-delta-delta-absent",
     ending({"type": "message_delta", "usage": {"output_tokens": 5}}),
     usage_end("delta", Usage(10, 5, None, 0, 0, None), code=WarningCode.MISSING_FIELD)),
    ("message-delta-usage-not-object",
     ending({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": "lots"}),
     usage_end("usage", Usage(10, 1, None, 0, 0, None), "end_turn")),
    ("message-delta-output-tokens-not-int",
     ending({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
             "usage": {"output_tokens": "5", "input_tokens": 11}}),
     usage_end("output_tokens", Usage(11, 1, None, 0, 0, None), "end_turn")),
    ("output-tokens-negative",
     ending({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
             "usage": {"output_tokens": -5}}),
     usage_end("output_tokens", Usage(10, 1, None, 0, 0, None), "end_turn")),
    # two text pieces after the end: one record fed whole, two split between
    # them; one warning either way, whatever else follows
    ("data-after-message-stop", body_of(*HEAD, *TAIL, text(0, "la"), text(0, "te"),
                                        b"data: {not json\n\n", b"bogus: x\n\n", *TAIL),
     check_after_end),
    ("bad-utf8-in-message-stop",
     body_of(*HEAD, *TAIL[:-1], b'event: message_stop\ndata: {"type":"message_stop","x":"\xff"}\n\n'),
     check_end_bad_utf8),
    ("tool-args-invalid-max-tokens",
     body_of(*HEAD, start(1, tool_block("t", "f")), args(1, '{"a": "tr'), stop(1), *TAIL[:2],
             msg_delta("max_tokens"), MSG_STOP),
     call_error(ArgumentsError.TRUNCATED, False, "finish")),
    ("tool-args-invalid-no-message-delta",
     body_of(*HEAD, start(1, tool_block("t", "f")), args(1, '{"a": tru'), stop(1), *TAIL[:2], MSG_STOP),
     check_held_until_message_stop),
    ("tool-open-at-message-delta",
     body_of(*HEAD, start(1, tool_block("t", "f")), args(1, '{"a": 1}'), *TAIL),
     check_open_call_at_finish),
    ("tool-open-at-close", body_of(*HEAD, start(1, tool_block("t", "f")), args(1, '{"a": 1}')),
     check_open_call_at_close),
]

HEAD_LEN, TAIL_LEN = len(body_of(*HEAD)), len(body_of(*TAIL))


def window_splits(body: bytes, a: int, b: int, step: int = 29) -> list[list[int]]:
    """Every split point in [a, b] (where the odd input lies, give or take
    a byte), every step-th elsewhere."""
    return [[k] for k in range(1, len(body)) if a - 1 <= k <= b + 1 or k % step == 0]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_odd_input(case):
    body = body_of(*HEAD, *case[1], *TAIL)
    kw = case[3] if len(case) > 3 else {}
    a, b = HEAD_LEN, len(body) - TAIL_LEN
    if b - a > 1000:  # the oversized event: its edges
        cut_sets = window_splits(body, a, a + 40) + window_splits(body, b - 40, b)
    else:
        cut_sets = window_splits(body, a, b)
    events, msg = assert_split_invariant(body, cut_sets, **kw)
    case[2](events, msg)
    assert_calls_done_once(events)


@pytest.mark.parametrize("case", HEAD_CASES, ids=[c[0] for c in HEAD_CASES])
def test_odd_message_start(case):
    body = body_of(*case[1], *HEAD[1:], *TAIL)
    events, msg = assert_split_invariant(body, window_splits(body, 0, len(body_of(*case[1]))))
    case[2](events, msg)


@pytest.mark.parametrize("case", END_CASES, ids=[c[0] for c in END_CASES])
def test_odd_end(case):
    body = case[1]
    events, msg = assert_split_invariant(body, thorough_splits(body, limit=600))
    case[2](events, msg)
    assert_calls_done_once(events)


def _required(path: str, event) -> list:
    """(id, event with the member absent, event with it null, path) for a
    member at `path` (dotted) of `event`."""
    def without(obj, keys, null):
        obj = dict(obj)
        if len(keys) == 1:
            if null:
                obj[keys[0]] = None
            else:
                del obj[keys[0]]
        else:
            obj[keys[0]] = without(obj[keys[0]], keys[1:], null)
        return obj
    keys = path.split(".")
    return [(f"{event['type']}:{path}", without(event, keys, False), without(event, keys, True),
             path)]


# every member an Anthropic event type needs (the core's `required`)
REQUIRED = [
    *_required("type", text(0, X)),
    *_required("index", text(0, X)),
    *_required("index", start(1, text_block())),
    *_required("index", stop(0)),
    *_required("delta", text(0, X)),
    *_required("delta", msg_delta()),
    *_required("content_block", start(1, text_block())),
    *_required("content_block.type", start(1, text_block())),
    *_required("message", msg_start()),
    *_required("delta.type", text(0, X)),
    *_required("delta.text", text(0, X)),
    *_required("delta.partial_json", args(0, X)),
    *_required("delta.thinking", think(0, X)),
    *_required("delta.signature", sig(0, X)),
    *_required("delta.citation", cite(0, char_cite("c", 0, 1))),
]


@pytest.mark.parametrize("null", [False, True], ids=["absent", "null"])
@pytest.mark.parametrize("case", REQUIRED, ids=[c[0] for c in REQUIRED])
def test_required_member_absent_warns(case, null):
    """A typed event without a member its type needs, or with it null: one
    DecodeWarning(MISSING_FIELD, <path>, raw) and the event (for a delta's
    piece: that piece) is skipped; nothing else changes. (A wrong type gives
    FIELD_TYPE with the same path: the rows of test_odd_input.)"""
    _, absent, is_null, path = case
    odd = is_null if null else absent
    body = around(odd)
    events, msg = assert_split_invariant(body, window_splits(body, HEAD_LEN, len(body) - TAIL_LEN))
    (w,) = warnings(events)
    assert (w.code, w.detail) == (WarningCode.MISSING_FIELD, path)
    assert json.loads(w.raw) == odd
    assert msg.text == "before after" and msg.parts == [TextPart("before after")]
    assert not of(events, ProviderError) and len(of(events, MessageFinished)) == 1
    assert msg.raw_finish_reason == "end_turn" and not of(events, MessageIncomplete)


@pytest.mark.parametrize("odd", [
    start(1, text_block("x")) | {"message": None},
    start(1, text_block("x")) | {"error": None},
    {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"},
     "message": "x"},
    {"type": "error", "message": "x",
     "error": {"type": "overloaded_error", "message": "Overloaded"}},
    {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"},
     "content_block": {"type": "text"}},
], ids=["start-with-message-member", "start-with-error-member", "error-with-message-member",
        "error-with-message-member-first", "error-with-content-block-member"])
def test_body_member_of_another_event_type_is_ignored(odd):
    """A member that belongs to another event type does not replace the
    event's own body, whatever the order: content_block_start reads
    content_block, error reads error."""
    events, msg = ours(around(odd, stop(1)) if odd["type"] != "error" else around(odd))
    assert not warnings(events)
    if odd["type"] == "error":
        (pe,) = of(events, ProviderError)
        assert (pe.type, pe.message) == ("overloaded_error", "Overloaded")
        assert json.loads(pe.raw) == odd["error"]
        assert msg.parts == [TextPart("before after")]
    else:
        assert msg.parts == [TextPart("before after"), TextPart("x")]


def test_never_raises_on_garbage():
    """Random bytes and random mutations of a valid stream: events, never an
    exception; every call done once."""
    import random
    rng = random.Random(1234)
    base = RICH
    for n in range(300):
        b = bytearray(base)
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(b))
            op = rng.randrange(3)
            if op == 0:
                b[at] = rng.randrange(256)
            elif op == 1:
                del b[at]
            else:
                b.insert(at, rng.choice(b'{}[]":,\\\n \x00\xff0123456789'))
        cuts = [rng.randrange(1, len(b)) for _ in range(rng.randint(0, 5))]
        events, msg = ours(bytes(b), cuts)
        assert_calls_done_once(events)
        assert isinstance(msg.parts, list)


def test_message_mid_stream_does_not_finish_calls():
    """Reading .message while a call streams shows it as it stands (not
    complete, no error yet) and changes nothing: later pieces still arrive."""
    dec = AnthropicDecoder()
    k = RICH.index(b'"text":"it up"')
    dec.feed(RICH[:k])
    snapshot = dec.message
    assert snapshot.tool_calls[0] == ToolCall("toolu_r1", "search", '{"q": "天')
    rest = dec.feed(RICH[k:]) + dec.close()
    assert not warnings(rest)
    assert dec.message.tool_calls[0].parsed == {"q": "天気", "n": 3}
