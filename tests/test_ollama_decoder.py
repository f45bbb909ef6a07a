"""OllamaDecoder (agent/stream/decoders/ollama.py) on Ollama's native
/api/chat streams (NDJSON, framed by csrc/ndjson.c).

(a) Differential against the official client (ollama==0.6.3, pinned in
    pyproject.toml): the same bytes, in the same reads, go through the
    package's own streaming path with no network - ollama.Client.chat(
    stream=True) on an httpx.MockTransport, so httpx's iter_lines, the
    package's json.loads, its `error` check and its ChatResponse model -
    and what its responses add up to is compared with our Message and
    events. Streams: hand-written ones (text, thinking, tool calls, each
    done_reason, errors) at every split point, and hypothesis-generated
    streams in random splits.
(b) Where we differ from the client on purpose (docs/truth-table-ollama.md):
    each row has a test asserting both sides, so a change on either shows.

No timing is asserted; hypothesis runs derandomized.
"""

from __future__ import annotations

import json

import httpx
import ollama
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.stream import loads
from agent.stream.decoders import OllamaDecoder
from agent.stream.decoders.events import (
    MessageFinished,
    MessageIncomplete,
    ToolCallDone,
    ToolCallOpened,
)
from agent.stream.message import ArgumentsError, FinishReason
from agent.stream.records import (
    DecodeWarning,
    FramingError,
    FramingErrorCode,
    JSONStatus,
    ProviderError,
    Timings,
    Truncated,
    Usage,
    WarningCode,
)
from conftest import scaled
from streams import assert_split_independent, cuts_for, every_split, feed_split

MODEL = "qwen3:0.6b"


def line(message: dict | None = None, **top) -> bytes:
    obj = {"model": MODEL, "created_at": "2026-12-01T10:00:00.000000Z"}
    if message is not None:
        obj["message"] = {"role": "assistant", "content": "", **message}
    obj.setdefault("done", False)
    obj.update(top)
    return json.dumps(obj).encode() + b"\n"


def done(reason: str | None = "stop", **counts) -> bytes:
    extra = {"done_reason": reason} if reason is not None else {}
    return line({}, done=True, **extra, total_duration=1_500_000, load_duration=20_000,
                prompt_eval_count=11, prompt_eval_duration=300_000,
                eval_count=7, eval_duration=900_000, **counts)


def tool(name: str, arguments: dict, **call) -> dict:
    return {"function": {"name": name, "arguments": arguments}, **call}


# ---------------------------------------------------------------------------
# the reference: the official client's own path, fed the same reads
# ---------------------------------------------------------------------------

def reference(reads: list[bytes]) -> dict:
    """What the official client makes of these reads: the joined content
    and thinking, each tool call, the done line's fields, or the error it
    raised."""
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "application/x-ndjson"},
                              content=iter(reads))

    client = ollama.Client(host="http://ollama.invalid", transport=httpx.MockTransport(handler))
    out = {"content": "", "thinking": "", "calls": [], "final": None, "error": None,
           "model": None}
    try:
        for part in client.chat(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                stream=True):
            assert isinstance(part, ollama.ChatResponse)
            out["model"] = part.model
            out["content"] += part.message.content or ""
            out["thinking"] += part.message.thinking or ""
            for call in part.message.tool_calls or ():
                out["calls"].append((call.function.name, dict(call.function.arguments)))
            if part.done:
                out["final"] = part
    except ollama.ResponseError as exc:
        out["error"] = exc.error
    return out


def decode(body: bytes, cuts=()) -> tuple[OllamaDecoder, list]:
    dec = OllamaDecoder()
    return dec, feed_split(dec, body, list(cuts))


def reads_of(body: bytes, cuts) -> list[bytes]:
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(body))), len(body)]
    return [body[a:b] for a, b in zip(bounds, bounds[1:])]


def of(events: list, kind: type) -> list:
    return [e for e in events if type(e) is kind]


def assert_matches_reference(body: bytes, cuts=()) -> tuple[OllamaDecoder, list]:
    dec, events = decode(body, cuts)
    ref = reference(reads_of(body, cuts))
    m = dec.message
    errors = of(events, ProviderError)
    if ref["error"] is not None:
        assert errors and errors[0].message == ref["error"]
        return dec, events
    assert not errors
    assert m.text == ref["content"]
    assert m.reasoning == ref["thinking"]
    assert [(c.name, c.parsed) for c in m.tool_calls] == ref["calls"]
    assert m.model == ref["model"]
    final = ref["final"]
    if final is None:
        assert of(events, MessageIncomplete) and m.finish_reason is None
        return dec, events
    assert not of(events, MessageIncomplete)
    assert m.raw_finish_reason == final.done_reason
    assert m.usage == Usage(final.prompt_eval_count, final.eval_count)
    assert dec.timings == Timings(final.total_duration, final.load_duration,
                                  final.prompt_eval_duration, final.eval_duration)
    return dec, events


# ---------------------------------------------------------------------------
# (a) hand-written streams, at every split point
# ---------------------------------------------------------------------------

THINK_TEXT = (line({"thinking": "The user greets. "}) + line({"thinking": "Answer — briefly."})
              + line({"content": "Hello"}) + line({"content": ", wörld 👋"}) + done())

TOOLS = (line({"thinking": "Need the weather."})
         + line({"tool_calls": [tool("get_weather", {"city": "Edinburgh", "units": "c"}),
                                tool("get_time", {})]})
         + line({"tool_calls": [tool("lookup", {"q": "a\"b\\c\u00e9", "n": [1, 2.5, None]})]})
         + done())


@pytest.mark.parametrize("body", [THINK_TEXT, TOOLS], ids=["thinking-text", "tools"])
def test_every_split_matches_the_client(body):
    for cuts in every_split(body) + [range(1, len(body))]:
        assert_matches_reference(body, cuts)
    assert_split_independent(OllamaDecoder, body)


def test_thinking_then_text():
    dec, events = assert_matches_reference(THINK_TEXT)
    m = dec.message
    assert [type(p).__name__ for p in m.parts] == ["ThinkingPart", "TextPart"]
    assert (m.reasoning, m.text) == ("The user greets. Answer — briefly.", "Hello, wörld 👋")
    assert m.finish_reason is FinishReason.STOP and m.raw_finish_reason == "stop"
    assert m.usage == Usage(11, 7) and m.model == MODEL
    assert of(events, MessageFinished) == [MessageFinished(FinishReason.STOP, "stop")]
    assert of(events, Timings) == [Timings(1_500_000, 20_000, 300_000, 900_000)]
    assert not of(events, DecodeWarning)


def test_tool_calls_get_stable_ids_and_their_bytes_as_sent():
    dec, events = assert_matches_reference(TOOLS)
    calls = dec.message.tool_calls
    assert [c.id for c in calls] == ["call_ha_0_0", "call_ha_0_1", "call_ha_0_2"]
    assert [(e.call, e.id, e.name) for e in of(events, ToolCallOpened)] == [
        (0, "call_ha_0_0", "get_weather"), (1, "call_ha_0_1", "get_time"),
        (2, "call_ha_0_2", "lookup")]
    # the argument string is the object exactly as json.dumps wrote it
    assert calls[0].arguments == json.dumps({"city": "Edinburgh", "units": "c"})
    assert calls[1].arguments == "{}"
    assert calls[2].arguments == json.dumps({"q": "a\"b\\c\u00e9", "n": [1, 2.5, None]})
    assert all(c.complete and c.error is None for c in calls)
    assert [e.tool_call for e in of(events, ToolCallDone)] == calls
    # done_reason "stop" after calls: the model asked for tools
    assert dec.message.finish_reason is FinishReason.TOOL_CALLS
    assert dec.message.raw_finish_reason == "stop"


def test_a_servers_own_call_id_is_kept():
    body = line({"tool_calls": [tool("f", {"a": 1}, id="call_abc"), tool("g", {}, id="")]}) + done()
    dec, _ = assert_matches_reference(body)
    assert [c.id for c in dec.message.tool_calls] == ["call_abc", "call_ha_0_1"]


def test_compact_and_spaced_objects_keep_their_bytes():
    args = b'{ "path" :"/tmp/x",\t"deep": {"k": [true, false, null]} }'
    body = (b'{"model":"m","message":{"role":"assistant","content":"","tool_calls":'
            b'[{"function":{"name":"read","arguments":' + args + b'}}]},"done":false}\n') + done()
    dec, _ = assert_matches_reference(body)
    assert dec.message.tool_calls[0].arguments == args.decode()


@pytest.mark.parametrize("reason,want", [("stop", FinishReason.STOP),
                                         ("length", FinishReason.LENGTH),
                                         ("load", FinishReason.OTHER),
                                         ("unload", FinishReason.OTHER),
                                         (None, FinishReason.STOP)])
def test_done_reasons(reason, want):
    dec, events = assert_matches_reference(line({"content": "x"}) + done(reason))
    assert dec.message.finish_reason is want
    assert of(events, MessageFinished) == [MessageFinished(want, reason)]


def test_an_error_first_line():
    body = b'{"error":"model \\"nope\\" not found, try pulling it first"}\n'
    dec, events = assert_matches_reference(body)
    assert of(events, ProviderError)[0].message == 'model "nope" not found, try pulling it first'
    assert of(events, MessageIncomplete)


def test_an_error_after_text():
    body = line({"content": "partial"}) + b'{"error":"an error was encountered while running the model"}\n'
    dec, events = assert_matches_reference(body)
    assert dec.message.text == "partial"
    assert of(events, ProviderError)[0].message.startswith("an error was encountered")


def test_a_body_cut_before_done_is_incomplete():
    for cut in range(len(THINK_TEXT) - len(done())):
        dec, events = decode(THINK_TEXT[:cut])
        assert of(events, MessageIncomplete) and dec.message.finish_reason is None


# ---------------------------------------------------------------------------
# (a) hypothesis streams in random splits
# ---------------------------------------------------------------------------

# str.splitlines' breaks that json.dumps leaves raw: httpx's iter_lines cuts
# the client's lines there (a row of the truth table, tested below), so they
# are left out of every generated string, object keys included
_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x85\u2028\u2029")
texts = st.text(_chars, max_size=20)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                         st.floats(allow_nan=False, allow_infinity=False), texts)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(_chars, max_size=6), inner, max_size=3)),
    max_leaves=8)
pieces = st.one_of(
    st.builds(lambda t: {"content": t}, texts),
    st.builds(lambda t: {"thinking": t}, texts),
    st.builds(lambda calls: {"tool_calls": calls}, st.lists(
        st.builds(tool, texts.filter(bool),
                  st.dictionaries(texts, json_values, max_size=4)),
        min_size=1, max_size=2)),
)


@st.composite
def ollama_streams(draw):
    ascii_only = draw(st.booleans())
    crlf = draw(st.booleans())
    out = b""
    for message in draw(st.lists(pieces, max_size=8)):
        obj = {"model": MODEL, "message": {"role": "assistant", **message}, "done": False}
        out += json.dumps(obj, ensure_ascii=ascii_only).encode() + (b"\r\n" if crlf else b"\n")
    if draw(st.booleans()):
        out += done(draw(st.sampled_from(["stop", "length", "load"])))
    elif draw(st.booleans()):
        # the client parses an error message that is JSON itself: not Ollama's
        out += json.dumps({"error": "error: " + draw(texts)}).encode() + b"\n"
    return out


@settings(max_examples=scaled(80), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_streams_in_random_splits_match_the_client(data):
    body = data.draw(ollama_streams())
    cuts = data.draw(cuts_for(len(body)))
    dec, events = assert_matches_reference(body, cuts)
    whole, whole_events = decode(body)
    assert dec.message == whole.message
    assert not of(events, DecodeWarning) and not of(events, FramingError)
    assert [c.id for c in dec.message.tool_calls] == [
        f"call_ha_0_{i}" for i in range(len(dec.message.tool_calls))]


# ---------------------------------------------------------------------------
# (b) the truth table's rows where we differ from the client on purpose
# ---------------------------------------------------------------------------

def client_fails(body: bytes) -> type[Exception] | None:
    try:
        reference([body])
    except Exception as exc:  # the client's own failure is the point here
        return type(exc)
    return None


def test_blank_lines_are_skipped_where_the_client_fails():
    body = line({"content": "a"}) + b"\n \r\n" + line({"content": "b"}) + done()
    dec, events = decode(body)
    assert dec.message.text == "ab" and not of(events, DecodeWarning)
    assert client_fails(body) is json.JSONDecodeError


def test_a_lone_cr_is_not_a_line_end():
    body = line({"content": "a"})[:-1] + b"\r" + line({"content": "b"}) + done()
    dec, events = decode(body)
    bad = of(events, DecodeWarning)
    assert [(w.code, w.json_status) for w in bad] == [(WarningCode.BAD_JSON, JSONStatus.TRAILING)]
    assert dec.message.text == "" and dec.message.dropped_events == {"bad_json": 1}
    # httpx's iter_lines splits at a lone CR: the client reads both
    assert reference([body])["content"] == "ab"


def test_a_last_line_without_lf_is_decoded_and_named():
    body = line({"content": "a"}) + done()[:-1]
    dec, events = assert_matches_reference(body)
    assert dec.message.finish_reason is FinishReason.STOP
    assert of(events, Truncated) == [Truncated(False, True, False, len(done()) - 1)]
    assert not of(events, MessageIncomplete) and not of(events, DecodeWarning)


def test_a_cut_last_line_is_bad_json_and_incomplete():
    body = line({"content": "a"}) + done()[:40]
    dec, events = decode(body)
    assert [w.code for w in of(events, DecodeWarning)] == [WarningCode.BAD_JSON]
    assert of(events, Truncated)[0].partial_line and of(events, MessageIncomplete)
    assert client_fails(body) is json.JSONDecodeError


def test_a_line_over_the_buffer_is_dropped_by_name():
    big = line({"content": "x" * 600})
    dec = OllamaDecoder(buffer_size=512)
    events = feed_split(dec, line({"content": "a"}) + big + line({"content": "b"}) + done(), [])
    assert of(events, FramingError) == [FramingError(FramingErrorCode.LINE_TOO_LARGE, len(big) - 1)]
    assert dec.message.text == "ab" and dec.message.dropped_events == {"line_too_large": 1}


def test_data_after_done_is_not_decoded():
    body = line({"content": "a"}) + done() + line({"content": "late"}) + line({"content": "later"})
    dec, events = decode(body)
    assert dec.message.text == "a"
    assert [w.code for w in of(events, DecodeWarning)] == [WarningCode.AFTER_END]
    # the client reads on
    assert reference([body])["content"] == "alatelater"


def test_a_unicode_line_break_in_a_string_is_not_a_line_end():
    body = line({"content": "a\x85b"}).replace(b"\\u0085", "\x85".encode()) + done()
    assert "\x85".encode() in body
    dec, events = decode(body)
    assert dec.message.text == "a\x85b" and not of(events, DecodeWarning)
    # httpx's iter_lines splits at U+0085 as str.splitlines does
    assert client_fails(body) is json.JSONDecodeError


def test_strict_json_where_the_client_is_lenient():
    body = b'{"model":"m","message":{"role":"assistant","content":"a"},"done":false,"x":NaN}\n' + done()
    dec, events = decode(body)
    assert [w.code for w in of(events, DecodeWarning)] == [WarningCode.BAD_JSON]
    assert reference([body])["content"] == "a"


def test_wrong_shapes_warn_by_path():
    body = (b'{"model":"m","done":false}\n'
            b'{"model":"m","message":{"content":5,"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}}\n'
            + done())
    dec, events = decode(body)
    got = [(w.code, w.detail) for w in of(events, DecodeWarning)]
    assert got == [(WarningCode.MISSING_FIELD, "message"),
                   (WarningCode.FIELD_TYPE, "message.content"),
                   (WarningCode.FIELD_TYPE, "message.tool_calls[].function.arguments")]
    # the call without an arguments object is still a call, an error one: never run with {}
    assert [(c.name, c.arguments, c.parsed, c.error) for c in dec.message.tool_calls] == [
        ("f", "", None, ArgumentsError.NOT_AN_OBJECT)]
    assert client_fails(body) is not None


def typed(value):
    """A value with every leaf's type beside it: 1, 1.0, True and -0.0 apart."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value.hex() if isinstance(value, float) else value)


@pytest.mark.parametrize("arguments, parsed", [
    # the core read the line strictly: the arguments are built without a
    # second check, and give what the strict scanner gives
    (b'{"f":1.5,"z":-0.0,"i":-0,"t":true,"l":[null,{}],"s":"\xc3\xa9"}',
     {"f": 1.5, "z": -0.0, "i": 0, "t": True, "l": [None, {}], "s": "\u00e9"}),
    (b'{"x":"\\u003cb\\u003e \\u0026"}', {"x": "<b> &"}),  # Go's escapes
    (b'{"a":"\\ud800!"}', {"a": "\ufffd!"}),  # a lone surrogate: replaced, as loads() does
    (b'{"n":' + b"7" * 5000 + b"}", {"n": (10 ** 5000 - 1) // 9 * 7}),  # past int()'s digits
])
def test_call_arguments_built_as_the_strict_scanner_reads_them(arguments, parsed):
    body = (b'{"model":"m","message":{"role":"assistant","content":"","tool_calls":'
            b'[{"function":{"name":"f","arguments":' + arguments + b'}}]},"done":false}\n'
            + done())
    dec, _ = decode(body)
    [call] = dec.message.tool_calls
    assert call.complete and call.error is None, call
    assert call.arguments == arguments.decode()
    assert typed(call.parsed) == typed(parsed) == typed(loads(arguments))


def test_call_arguments_with_a_number_past_a_double_are_an_error():
    body = (b'{"model":"m","message":{"role":"assistant","content":"","tool_calls":'
            b'[{"function":{"name":"f","arguments":{"n":1e400}}}]},"done":false}\n' + done())
    dec, _ = decode(body)
    [call] = dec.message.tool_calls
    # whole, but not what a tool can be given: an error result, never a call
    assert call.parsed is None
    assert call.error is ArgumentsError.INVALID_JSON and "range" in call.error_detail, call
