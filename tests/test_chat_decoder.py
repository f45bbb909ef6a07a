"""OpenAIChatDecoder (agent/stream/decoders/openai_chat.py) on OpenAI Chat
Completions streams and those of compatible servers.

(a) Differential against the official SDK (openai==3.57.0, pinned in
    pyproject.toml): the same bytes go through the SDK's own path with no
    network - SSEDecoder, json.loads, the `error` check of Stream.__stream__,
    ChatCompletionChunk built as _process_response_data builds it
    (construct_type, non-strict), the weak chunk filter of
    ChatCompletionStream.__stream__, ChatCompletionStreamState.handle_chunk -
    and the accumulated snapshot is compared field by field with
    OpenAIChatDecoder().messages. The snapshot, not get_final_completion():
    the latter raises LengthFinishReasonError / ContentFilterFinishReasonError
    for any choice that finished with "length" / "content_filter".
    Streams: the recorded fixture, one hand-written stream per OpenAI Chat
    item of ../shared/notes/wire-quirks.md, and hypothesis-generated streams
    in random splits (short ones at every split point). Where the SDK is
    wrong (listed below the imports) ours is checked against the expected
    value and the SDK's wrong answer is asserted too, so a change on either
    side shows.
(b) Faults: truncation at every byte offset, malformed chunks in the middle,
    data after [DONE], and one test per row of
    docs/truth-table-openai-chat.md (wrong-type fields, odd chunks).

No timing is asserted; hypothesis runs derandomized.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.stream import Protocol, StreamDecoder
from agent.stream.decoders import OpenAIChatDecoder
from agent.stream.records import (
    DecodeWarning,
    FramingError,
    FramingErrorCode,
    JSONStatus,
    ProviderError,
    ToolCallStart,
    Truncated,
    UnknownField,
    Usage,
    WarningCode,
)
from agent.stream.decoders.events import MessageFinished, MessageIncomplete, ToolCallDone
from agent.stream.message import ArgumentsError, FinishReason, normalise_finish
import bench_module
from conftest import scaled
from streams import assert_split_independent, cuts_for, feed_split, recorded, split_view

SDK_VERSION = "3.57.0"

ID = "chatcmpl-9xQ"
MODEL = "gpt-4o-2024-08-06"

# What the SDK gets wrong on these streams (each is asserted where it occurs;
# docs/truth-table-openai-chat.md lists them all):
# - repeated tool-call ids/names (DeepSeek, Qwen): accumulate_delta
#   concatenates strings, so the id becomes "call_1call_1call_1";
# - tool calls without `index` (Ollama, Gemini), a choice seen before choice
#   0, `type: null` in a later chunk: the accumulator raises;
# - usage not on the last chunk (Grok): handle_chunk sets snapshot.usage =
#   chunk.usage on every chunk, so the last chunk erases it;
# - finish_reason "" on every chunk and no real one: the snapshot keeps "";
# - `data: {"error": ...}`: the SDK raises APIError and stops; we report a
#   ProviderError and keep decoding.


# ---------------------------------------------------------------------------
# stream builders
# ---------------------------------------------------------------------------

_ABSENT = object()


def chunk(delta=_ABSENT, *, index=0, finish=None, usage=_ABSENT, choices=_ABSENT,
          id=ID, model=MODEL, **extra) -> dict:
    """A chat.completion.chunk; no delta and no finish means `choices: []`."""
    c: dict = {"id": id, "object": "chat.completion.chunk", "created": 1727346178,
               "model": model}
    if choices is _ABSENT:
        choices = [] if delta is _ABSENT and finish is None else [
            {"index": index, "delta": {} if delta is _ABSENT else delta,
             "logprobs": None, "finish_reason": finish}]
    c["choices"] = choices
    if usage is not _ABSENT:
        c["usage"] = usage
    c.update(extra)
    return c


def tool(index=_ABSENT, id=_ABSENT, name=_ABSENT, args=_ABSENT, type=_ABSENT) -> dict:
    """One tool_calls[] entry with only the members given."""
    t: dict = {}
    if index is not _ABSENT:
        t["index"] = index
    if id is not _ABSENT:
        t["id"] = id
    if type is not _ABSENT:
        t["type"] = type
    fn = {}
    if name is not _ABSENT:
        fn["name"] = name
    if args is not _ABSENT:
        fn["arguments"] = args
    if fn:
        t["function"] = fn
    return t


def calls(*entries) -> dict:
    return {"tool_calls": list(entries)}


def sse(*items, eol: str = "\n", data: str = "data: ", done: bool = True,
        compact: bool = False) -> bytes:
    """An SSE body: a dict is one chunk, a str is raw event data, bytes are
    put in verbatim (comments, odd fields); [DONE] at the end unless done=False."""
    separators = (",", ":") if compact else None
    out = []
    for item in items:
        if isinstance(item, bytes):
            out.append(item)
            continue
        payload = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False,
                                                                separators=separators)
        out.append(f"{data}{payload}{eol}{eol}".encode())
    if done:
        out.append(f"{data}[DONE]{eol}{eol}".encode())
    return b"".join(out)


USAGE = {"prompt_tokens": 149, "completion_tokens": 60, "total_tokens": 209,
         "prompt_tokens_details": {"cached_tokens": 128, "audio_tokens": 0},
         "completion_tokens_details": {"reasoning_tokens": 12, "audio_tokens": 0}}
USAGE_EVENT = Usage(149, 60, 209, 128, None, 12)


# ---------------------------------------------------------------------------
# our side
# ---------------------------------------------------------------------------

def decode(body: bytes, cuts=(), **kwargs):
    """(decoder, every event) for body fed in the given cuts, then closed."""
    dec = OpenAIChatDecoder(**kwargs)
    return dec, feed_split(dec, body, list(cuts))


def decode_every_way(body: bytes, **kwargs):
    """Decode whole, byte by byte and at every split point: the messages and
    split_view() must be the same each time. Returns the whole run."""
    return assert_split_independent(lambda: OpenAIChatDecoder(**kwargs), body)


def of(events: list, kind) -> list:
    return [e for e in events if isinstance(e, kind)]


def warnings(events: list, code: WarningCode | None = None) -> list:
    return [e for e in events if isinstance(e, DecodeWarning) and (code is None or e.code == code)]


def summary(call) -> tuple:
    return call.id, call.name, call.arguments


# ---------------------------------------------------------------------------
# the SDK's side
# ---------------------------------------------------------------------------

SDKStreamError = bench_module.load("decoder_bench.py").SDKStreamError


def _sdk():
    openai = pytest.importorskip("openai")
    if openai.__version__ != SDK_VERSION:
        pytest.skip(f"the differential is pinned to openai=={SDK_VERSION} "
                    f"(private paths), found {openai.__version__}")
    from openai._models import construct_type
    from openai._streaming import SSEDecoder
    from openai._utils import is_mapping
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.lib.streaming.chat._completions import _is_valid_chat_completion_chunk_weak
    from openai.types.chat import ChatCompletionChunk
    return (construct_type, SSEDecoder, is_mapping, ChatCompletionStreamState,
            _is_valid_chat_completion_chunk_weak, ChatCompletionChunk)


def sdk_decode(reads):
    """The SDK's accumulated snapshot of the body given as reads, or None
    when no chunk reached the accumulator."""
    (construct_type, SSEDecoder, is_mapping, StreamState, is_chunk,
     ChatCompletionChunk) = _sdk()
    state = StreamState()
    handled = False
    for event in SSEDecoder().iter_bytes(iter(reads)):
        # Stream.__stream__
        if event.data.startswith("[DONE]"):
            break
        data = event.json()
        if is_mapping(data) and data.get("error"):
            raise SDKStreamError(data["error"])
        # SyncAPIClient._process_response_data, _strict_response_validation=False
        piece = construct_type(type_=ChatCompletionChunk, value=data)
        # ChatCompletionStream.__stream__
        if not is_chunk(piece):
            continue
        state.handle_chunk(piece)
        handled = True
    return state.current_completion_snapshot if handled else None


def core_tool_types(reads) -> dict:
    """(choice, tool index) -> the first `type` the core saw for that call.
    ToolCall keeps no type, so the SDK's type is checked at this layer."""
    core = StreamDecoder(Protocol.OPENAI_CHAT)
    events = [e for r in reads for e in core.feed(r)] + core.close()
    types: dict = {}
    for e in events:
        if isinstance(e, ToolCallStart) and e.type is not None:
            types.setdefault((e.index, e.tool_index), e.type)
    return types


def parsed_like_json_loads(arguments: str):
    """What ToolCall.parsed must be, by Python's json module."""
    if not arguments.strip():
        return {}  # parse_arguments: no arguments mean {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def assert_matches_sdk(dec: OpenAIChatDecoder, snap, reads, *, usage: bool = True,
                       reasoning: bool = True) -> None:
    """Field by field: per choice text, refusal, reasoning (the SDK keeps
    reasoning_content / reasoning as pydantic extras), tool calls in order,
    raw finish_reason; the completion's id, model and usage."""
    messages = dec.messages
    assert snap is not None
    assert [c.index for c in snap.choices] == list(range(len(snap.choices)))
    assert len(messages) == len(snap.choices)
    types = core_tool_types(reads)
    for k, (ours, theirs) in enumerate(zip(messages, snap.choices)):
        m = theirs.message
        assert ours.text == (m.content or ""), f"choice {k} content"
        assert ours.refusal == (m.refusal or None), f"choice {k} refusal"
        if reasoning:
            extra = m.model_extra or {}
            assert ours.reasoning == ((extra.get("reasoning_content") or "")
                                      + (extra.get("reasoning") or "")), f"choice {k} reasoning"
        sdk_calls = m.tool_calls or []
        assert len(ours.tool_calls) == len(sdk_calls), f"choice {k} tool calls"
        for j, (call, ref) in enumerate(zip(ours.tool_calls, sdk_calls)):
            assert ref.index == j
            assert call.id == ref.id
            assert ref.type == "function" and types.get((k, j)) == ref.type
            assert call.name == ref.function.name
            assert call.arguments == ref.function.arguments
            assert call.complete and call.error in (None, ArgumentsError.INVALID_JSON,
                                                    ArgumentsError.NOT_AN_OBJECT)
            assert call.parsed == parsed_like_json_loads(ref.function.arguments)
            assert (call.error is None) == (call.parsed is not None)
        assert ours.raw_finish_reason == (theirs.finish_reason or None), f"choice {k} finish"
        assert ours.finish_reason == (None if ours.raw_finish_reason is None else
                                      normalise_finish(ours.raw_finish_reason))
        assert ours.id == snap.id and ours.model == snap.model
    if usage:
        assert_usage(messages[0].usage, snap.usage)


def assert_usage(ours: Usage | None, theirs) -> None:
    if theirs is None:
        assert ours is None
        return
    details_in = theirs.prompt_tokens_details
    details_out = theirs.completion_tokens_details
    assert ours == Usage(theirs.prompt_tokens, theirs.completion_tokens, theirs.total_tokens,
                         details_in.cached_tokens if details_in else None, None,
                         details_out.reasoning_tokens if details_out else None)


def differential(body: bytes, **kw):
    """Decode every way, compare with the SDK on the whole body and on
    byte-by-byte reads; return (decoder, events, snapshot)."""
    dec, events = decode_every_way(body)
    snap = sdk_decode([body])
    assert_matches_sdk(dec, snap, [body], **kw)
    reads = [body[i:i + 1] for i in range(len(body))]
    assert_matches_sdk(decode(body, range(1, len(body)))[0], sdk_decode(reads), reads, **kw)
    assert not of(events, MessageIncomplete) and not warnings(events)
    return dec, events, snap


# ---------------------------------------------------------------------------
# (a) the recorded stream
# ---------------------------------------------------------------------------

def fixture_body() -> bytes:
    return recorded("openai-chat-parallel-tools.sse")


def test_fixture_matches_sdk():
    body = fixture_body()
    dec, events = decode(body)
    snap = sdk_decode([body])
    assert_matches_sdk(dec, snap, [body])
    m = dec.message
    assert [summary(c) for c in m.tool_calls] == [
        ("call_JMW1whyEaYG438VE1OIflxA2", "GetWeatherArgs",
         '{"city": "Edinburgh", "country": "GB", "units": "c"}'),
        ("call_DNYTawLBoN8fj3KN6qU9N1Ou", "get_stock_price",
         '{"ticker": "AAPL", "exchange": "NASDAQ"}')]
    assert [c.parsed for c in m.tool_calls] == [
        {"city": "Edinburgh", "country": "GB", "units": "c"},
        {"ticker": "AAPL", "exchange": "NASDAQ"}]
    assert m.finish_reason is FinishReason.TOOL_CALLS
    assert m.usage == Usage(149, 60, 209, None, None, 0)
    assert (m.id, m.model) == ("chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63", "gpt-4o-2024-08-06")
    assert not of(events, MessageIncomplete) and not warnings(events)


def test_fixture_byte_by_byte_matches_sdk():
    body = fixture_body()
    reads = [body[i:i + 1] for i in range(len(body))]
    dec, _ = decode(body, range(1, len(body)))
    assert_matches_sdk(dec, sdk_decode(reads), reads)
    assert dec.messages == decode(body)[0].messages


@settings(max_examples=scaled(30), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fixture_random_splits_match_sdk(data):
    body = fixture_body()
    cuts = data.draw(cuts_for(len(body)))
    bounds = [0, *sorted(set(cuts)), len(body)]
    reads = [body[a:b] for a, b in zip(bounds, bounds[1:])]
    dec, _ = decode(body, cuts)
    assert_matches_sdk(dec, sdk_decode(reads), reads)


# ---------------------------------------------------------------------------
# (a) one hand-written stream per OpenAI Chat item of wire-quirks.md
# ---------------------------------------------------------------------------

def test_done_ends_the_stream():
    body = sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "Hi"}),
               chunk(finish="stop"))
    dec, events, _ = differential(body)
    assert dec.message.text == "Hi"
    assert not of(events, MessageIncomplete)
    # without it the same bytes are an incomplete stream
    dec, events = decode(body[:-len(b"data: [DONE]\n\n")])
    assert of(events, MessageIncomplete) and dec.message.text == "Hi"


def test_reasoning_content_deepseek():
    body = sse(chunk({"role": "assistant", "content": None, "reasoning_content": ""}),
               chunk({"content": None, "reasoning_content": "先想一想"}),
               chunk({"content": None, "reasoning_content": ", then 🤔"}),
               chunk({"content": "答案", "reasoning_content": None}),
               chunk({"content": "", "reasoning_content": None}, finish="stop"))
    dec, _, _ = differential(body)
    m = dec.message
    assert m.reasoning == "先想一想, then 🤔" and m.text == "答案"
    assert [type(p).__name__ for p in m.parts] == ["ThinkingPart", "TextPart"]


def test_reasoning_vllm():
    body = sse(chunk({"role": "assistant", "content": ""}), chunk({"reasoning": "Let me "}),
               chunk({"reasoning": "check."}), chunk({"content": "42"}), chunk(finish="stop"))
    dec, _, _ = differential(body)
    assert dec.message.reasoning == "Let me check." and dec.message.text == "42"


def test_finish_reason_empty_on_every_chunk_is_not_a_stop():
    # SenseNova, sglang, older Ollama
    body = sse(chunk({"role": "assistant", "content": "a"}, finish=""),
               chunk({"content": "b"}, finish=""), chunk({"content": "c"}, finish="stop"))
    dec, events, _ = differential(body)
    assert [(e.raw_reason, e.choice) for e in of(events, MessageFinished)] == [("stop", 0)]
    assert dec.message.text == "abc"
    # with no real finish_reason at all: none raw, where the SDK keeps "";
    # [DONE] ended it, so it stopped (test_done_without_any_finish_reason_infers_it)
    body = sse(chunk({"content": "a"}, finish=""), chunk({"content": "b"}, finish=""))
    dec, events = decode(body)
    assert dec.message.raw_finish_reason is None and dec.message.finish_reason is FinishReason.STOP
    assert [e.raw_reason for e in of(events, MessageFinished)] == [None]
    assert sdk_decode([body]).choices[0].finish_reason == ""


def test_tool_call_head_in_first_chunk_only():
    body = sse(chunk({"role": "assistant", "content": None}),
               chunk(calls(tool(0, "call_a", "get_weather", "", "function"))),
               chunk(calls(tool(0, args='{"city": '))),
               chunk(calls(tool(0, args='"Paris"}'))),
               chunk(calls(tool(1, "call_b", "get_time", '{"tz"', "function"))),
               chunk(calls(tool(1, args=': "CET"}'))),
               chunk(finish="tool_calls"))
    dec, events, _ = differential(body)
    assert [summary(c) for c in dec.message.tool_calls] == [
        ("call_a", "get_weather", '{"city": "Paris"}'), ("call_b", "get_time", '{"tz": "CET"}')]
    assert [c.parsed for c in dec.message.tool_calls] == [{"city": "Paris"}, {"tz": "CET"}]
    assert dec.message.finish_reason is FinishReason.TOOL_CALLS


@pytest.mark.parametrize("repeat", ["id", "id-type-name"])
def test_repeated_tool_call_ids_kept_once(repeat):
    """DeepSeek and Qwen repeat the id in every chunk of a call. The id is
    one token, not a stream: keep it once. Known SDK deviation: its
    accumulate_delta concatenates every string member, so its id (and name,
    when repeated) come out repeated."""
    def head(i, cid, name, args):
        if repeat == "id":
            return tool(i, cid, args=args)
        return tool(i, cid, name, args, "function")

    body = sse(chunk({"role": "assistant", "content": ""}),
               chunk(calls(tool(0, "call_1", "f", "", "function"))),
               chunk(calls(head(0, "call_1", "f", '{"a":'))),
               chunk(calls(head(0, "call_1", "f", ' 1}'))),
               chunk(calls(tool(1, "call_2", "g", '{}', "function"))),
               chunk(calls(head(1, "call_2", "g", ""))),
               chunk(finish="tool_calls"))
    dec, events = decode_every_way(body)
    assert [summary(c) for c in dec.message.tool_calls] == [
        ("call_1", "f", '{"a": 1}'), ("call_2", "g", "{}")]
    assert not warnings(events)
    ref = sdk_decode([body]).choices[0].message.tool_calls
    assert [c.id for c in ref] == ["call_1" * 3, "call_2" * 2]
    assert [c.function.name for c in ref] == (["f", "g"] if repeat == "id" else ["fff", "gg"])
    assert [c.function.arguments for c in ref] == ['{"a": 1}', "{}"]


def test_tool_call_index_omitted_uses_call_order():
    """Ollama and Gemini's compatibility layer send no `index`: a head
    starts the next call, arguments extend the latest. The SDK cannot
    accumulate these at all (its accumulate_delta needs an int index)."""
    body = sse(chunk({"role": "assistant", "content": None}),
               chunk(calls(tool(id="call_a", name="f", args='{"x": 1}', type="function"),
                           tool(id="call_b", name="g", args='{"y"', type="function"))),
               chunk(calls(tool(args=': 2}'))),
               chunk(calls(tool(id="call_c", name="h", args="{}", type="function"))),
               chunk(finish="tool_calls"))
    dec, events = decode_every_way(body)
    assert [summary(c) for c in dec.message.tool_calls] == [
        ("call_a", "f", '{"x": 1}'), ("call_b", "g", '{"y": 2}'), ("call_c", "h", "{}")]
    assert all(c.complete and c.error is None for c in dec.message.tool_calls)
    assert not warnings(events)
    with pytest.raises((TypeError, RuntimeError)):
        sdk_decode([body])


@pytest.mark.parametrize("later, sdk_ok", [
    pytest.param({"id": None}, True, id="id-null"),
    pytest.param({}, True, id="id-absent"),
    pytest.param({"id": None, "function": {"name": None, "arguments": "}"}}, True,
                 id="id-and-name-null"),
    pytest.param({"id": None, "type": None, "function": {"name": None, "arguments": "}"}},
                 False, id="id-type-and-name-null"),
])
def test_later_chunk_never_erases_an_id(later, sdk_ok):
    entry = {"index": 0, **later}
    entry.setdefault("function", {"arguments": "}"})
    body = sse(chunk(calls(tool(0, "call_k", "lookup", "{", "function"))),
               chunk(calls(entry)), chunk(finish="tool_calls"))
    if sdk_ok:
        dec, events, _ = differential(body)
    else:
        # the SDK's accumulate_delta sets type to null and then trips on its
        # own `assert new_tool.type == "function"`
        dec, events = decode_every_way(body)
        assert not warnings(events)
        with pytest.raises(AssertionError):
            sdk_decode([body])
    assert [summary(c) for c in dec.message.tool_calls] == [("call_k", "lookup", "{}")]


def test_later_empty_id_is_no_id_and_the_first_is_kept():
    body = sse(chunk(calls(tool(0, "call_k", "lookup", "{", "function"))),
               chunk(calls(tool(0, "", args="}"))), chunk(finish="tool_calls"))
    dec, events = decode_every_way(body)
    assert [summary(c) for c in dec.message.tool_calls] == [("call_k", "lookup", "{}")]
    assert not warnings(events, WarningCode.TOOL_ID_CONFLICT)
    # the SDK concatenates "" and so agrees on the id here
    assert sdk_decode([body]).choices[0].message.tool_calls[0].id == "call_k"


def test_empty_id_first_leaves_room_for_the_real_one():
    body = sse(chunk(calls(tool(0, "", "lookup", "{", "function"))),
               chunk(calls(tool(0, "call_r", args="}"))), chunk(finish="tool_calls"))
    dec, events = decode_every_way(body)
    assert [summary(c) for c in dec.message.tool_calls] == [("call_r", "lookup", "{}")]
    assert not warnings(events)


AZURE_PROMPT_FILTER = {
    "choices": [], "created": 0, "id": "", "model": "", "object": "",
    "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {
        "hate": {"filtered": False, "severity": "safe"},
        "jailbreak": {"filtered": False, "detected": False}}}]}
FILTER = {"hate": {"filtered": False, "severity": "safe"},
          "violence": {"filtered": False, "severity": "safe"}}


def test_azure_prompt_filter_chunk_and_filter_fields():
    def azure(delta, finish=None, **kw):
        c = chunk(delta, finish=finish, **kw)
        c["choices"][0]["content_filter_results"] = FILTER if delta.get("content") else {}
        return c

    body = sse(AZURE_PROMPT_FILTER,
               azure({"role": "assistant", "content": ""}, obfuscation="Xq3"),
               azure({"content": "Bonjour"}, obfuscation="a"),
               azure({"content": " à tous"}, obfuscation="bcd", system_fingerprint="fp_x"),
               azure({}, finish="stop"),
               # Azure's asynchronous filter: another id "" / object "" chunk
               {"choices": [{"content_filter_offsets": {"check_offset": 0, "start_offset": 0,
                                                        "end_offset": 14},
                             "content_filter_results": FILTER, "finish_reason": None,
                             "index": 0}],
                "created": 0, "id": "", "model": "", "object": ""})
    dec, events, _ = differential(body)
    m = dec.message
    assert (m.text, m.id, m.model, m.raw_finish_reason) == ("Bonjour à tous", ID, MODEL, "stop")


def test_usage_only_final_chunk():
    body = sse(chunk({"role": "assistant", "content": "ok"}, usage=None),
               chunk(finish="stop", usage=None), chunk(usage=USAGE))
    dec, events, _ = differential(body)
    assert dec.message.usage == USAGE_EVENT
    assert of(events, Usage) == [USAGE_EVENT]


def test_usage_on_finish_chunk_deepseek():
    body = sse(chunk({"role": "assistant", "content": "ok"}),
               chunk({"content": ""}, finish="stop", usage=USAGE))
    dec, _, _ = differential(body)
    assert dec.message.usage == USAGE_EVENT


def test_deepseek_cache_hits_are_the_cache_read():
    """DeepSeek reports its cache as prompt_cache_hit_tokens and _miss_tokens
    (prompt_tokens is their sum): the hits are the cache read."""
    usage = {"prompt_tokens": 1200, "completion_tokens": 5, "total_tokens": 1205,
             "prompt_cache_hit_tokens": 1024, "prompt_cache_miss_tokens": 176}
    body = sse(chunk({"role": "assistant", "content": "ok"}),
               chunk({"content": ""}, finish="stop", usage=usage))
    dec, _, _ = differential(body, usage=False)  # the SDK knows no DeepSeek field
    assert dec.message.usage == Usage(1200, 5, 1205, 1024, None, None)


def test_usage_on_second_to_last_chunk_grok():
    """Known SDK deviation: handle_chunk sets snapshot.usage = chunk.usage on
    every chunk, so the last chunk (no usage) erases it. Ours keeps it."""
    body = sse(chunk({"role": "assistant", "content": "ok"}),
               chunk(finish="stop", usage=USAGE),
               chunk({"content": ""}))
    dec, events, snap = differential(body, usage=False)
    assert dec.message.usage == USAGE_EVENT
    assert snap.usage is None


def test_n_choices_interleaved():
    body = sse(chunk({"role": "assistant", "content": ""}, index=0),
               chunk({"role": "assistant", "content": ""}, index=1),
               chunk({"content": "Un"}, index=0), chunk({"content": "Ein"}, index=1),
               chunk({"content": "o"}, index=0),
               chunk(calls(tool(0, "call_z", "f", '{"n": 2}', "function")), index=1),
               chunk(finish="length", index=0), chunk(finish="tool_calls", index=1),
               chunk(usage=USAGE))
    dec, events, _ = differential(body)
    first, second = dec.messages
    assert (first.text, first.finish_reason) == ("Uno", FinishReason.LENGTH)
    assert (second.text, second.finish_reason) == ("Ein", FinishReason.TOOL_CALLS)
    assert [summary(c) for c in second.tool_calls] == [("call_z", "f", '{"n": 2}')]
    assert first.usage == second.usage == USAGE_EVENT
    assert [(e.choice, e.raw_reason) for e in of(events, MessageFinished)] == [
        (0, "length"), (1, "tool_calls")]


def test_keep_alive_comments():
    body = sse(b": keep-alive\n\n", chunk({"role": "assistant", "content": "a"}),
               b": OPENROUTER PROCESSING\n\n", b": ping\n", chunk({"content": "b"}),
               b": OPENROUTER PROCESSING\n\n: ping\n\n", chunk(finish="stop"), b": keep-alive\n\n")
    dec, _, _ = differential(body)
    assert dec.message.text == "ab"


def test_data_without_space():
    body = sse(chunk({"role": "assistant", "content": "de"}), chunk({"content": "ep"}),
               chunk(finish="stop"), data="data:")
    assert body.startswith(b"data:{") and body.endswith(b"data:[DONE]\n\n")
    dec, _, _ = differential(body)
    assert dec.message.text == "deep"


def test_error_object_after_200():
    """llama.cpp and OpenAI send `data: {"error": {...}}` inside a 200 stream:
    a ProviderError, then decoding goes on (the body usually just ends)."""
    err = {"error": {"message": "The server had an error", "type": "server_error",
                     "param": None, "code": None}}
    body = sse(chunk({"role": "assistant", "content": "par"}), err, done=False)
    dec, events = decode_every_way(body)
    [e] = of(events, ProviderError)
    assert (e.type, e.message) == ("server_error", "The server had an error")
    assert json.loads(e.raw) == err["error"]
    assert of(events, MessageIncomplete) and dec.message.text == "par"
    with pytest.raises(SDKStreamError) as info:
        sdk_decode([body])
    assert info.value.body == err["error"]


def test_bare_error_field_is_an_unknown_field():
    """Older llama.cpp: an `error:` SSE field, which the SSE spec ignores."""
    body = (sse(chunk({"role": "assistant", "content": "x"}), done=False)
            + b"error: {\"code\":500,\"message\":\"slot unavailable\"}\n\n")
    dec, events = decode_every_way(body)
    [u] = of(events, UnknownField)
    assert u.name == "error" and u.preview == b'{"code":500,"message":"slot unavailable"}'
    assert u.size == len(u.preview)
    assert of(events, MessageIncomplete) and dec.message.text == "x"
    assert not of(events, ProviderError)
    # the SDK drops the field silently and sees a normal (short) stream
    assert sdk_decode([body]).choices[0].message.content == "x"


@pytest.mark.parametrize("tail", [b"", b"\n"], ids=["no-newline", "newline"])
def test_unframed_json_error_body(tail):
    """A proxy's plain JSON error body under a 200: not SSE at all. The
    decoder does not turn it into a ProviderError (see the truth table): the
    body is one unterminated line (Truncated) or one unknown field named
    `{"error"`, and the stream is incomplete."""
    body = b'{"error": {"message": "upstream timeout", "type": "proxy_error"}}' + tail
    dec, events = decode_every_way(body)
    assert not of(events, ProviderError)
    assert isinstance(events[-1], MessageIncomplete)
    if tail:
        [u] = of(events, UnknownField)
        assert u.name == '{"error"'
        assert u.preview == b'{"message": "upstream timeout", "type": "proxy_error"}}'
    else:
        [t] = of(events, Truncated)
        assert t.partial_line and not t.unterminated_event
    assert dec.message.text == "" and dec.message.tool_calls == []


def test_llamacpp_timings_ignored():
    timings = {"prompt_n": 12, "prompt_ms": 31.5, "predicted_n": 3, "predicted_ms": 40.1,
               "predicted_per_second": 74.8}
    body = sse(chunk({"role": "assistant", "content": "Hel"}, timings=timings),
               chunk({"content": "lo"}, timings=timings),
               chunk(finish="stop", timings=timings, usage={"prompt_tokens": 12,
                                                              "completion_tokens": 3,
                                                              "total_tokens": 15}))
    dec, _, _ = differential(body)
    assert dec.message.text == "Hello" and dec.message.usage == Usage(12, 3, 15)


@pytest.mark.parametrize("eol", ["\r\n", "\r"], ids=["crlf", "cr"])
def test_crlf_line_ends(eol):
    body = sse(b": keep-alive" + eol.encode() * 2,
               chunk({"role": "assistant", "content": "line\r\nbreak"}),
               chunk(calls(tool(0, "call_1", "f", '{"k": "\\r\\n"}', "function"))),
               chunk(finish="tool_calls"), eol=eol)
    assert b"\n\n" not in body
    dec, _, _ = differential(body)
    assert dec.message.text == "line\r\nbreak"
    assert dec.message.tool_calls[0].parsed == {"k": "\r\n"}


def test_cjk_and_emoji_text():
    pieces = ["你好", "，世界", "！👋🏽", "👨‍👩‍👧 ", "日本語のテキスト", "🇯🇵", "한국어"]
    body = sse(chunk({"role": "assistant", "content": ""}),
               *[chunk({"content": p}) for p in pieces],
               chunk(calls(tool(0, "call_u", "说", '{"文": "😀"}', "function"))),
               chunk(finish="stop"))
    dec, _, _ = differential(body)
    assert dec.message.text == "".join(pieces)
    assert summary(dec.message.tool_calls[0]) == ("call_u", "说", '{"文": "😀"}')
    # the same with every non-ASCII character \u-escaped on the wire
    ascii_body = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in (
        chunk({"content": "".join(pieces)}), chunk(finish="stop"))) + b"data: [DONE]\n\n"
    assert ascii_body.isascii()
    dec2, _, _ = differential(ascii_body)
    assert dec2.message.text == dec.message.text


# ---------------------------------------------------------------------------
# (a) generated streams
# ---------------------------------------------------------------------------

_WIDE = list("你好世界中文日本語한국어") + ["😀", "🎉", "👍🏽", "🇯🇵", "👨‍👩‍👧", "\u2028", "é"]
TEXT = st.lists(st.one_of(st.sampled_from(_WIDE), st.characters(codec="utf-8")),
                max_size=8).map("".join)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(TEXT, kids, max_size=3),
    max_leaves=6)
KEEP_ALIVES = [b": keep-alive", b": OPENROUTER PROCESSING", b": ping"]
USAGE_PLACES = ["final-chunk", "on-finish", "second-to-last", "none"]


@st.composite
def pieces(draw, s: str, max_pieces: int) -> list[str]:
    """s cut into up to max_pieces pieces (some may be empty)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(s)), max_size=max_pieces - 1)))
    bounds = [0, *cuts, len(s)]
    return [s[a:b] for a, b in zip(bounds, bounds[1:])]


@st.composite
def chat_streams(draw, small: bool = False):
    """(body, truth, usage place): a valid stream and what it must decode to."""
    n_choices = 1 if small else draw(st.integers(1, 2))
    max_pieces = 2 if small else 4
    max_items = 1 if small else 3
    reasoning_key = draw(st.sampled_from(["reasoning_content", "reasoning"]))
    empty_finish = draw(st.booleans())  # finish_reason "" instead of null
    not_last = "" if empty_finish else None
    per_choice, truth = [], []
    for k in range(n_choices):
        reasoning = draw(st.lists(TEXT, max_size=max_items))
        text = draw(st.lists(TEXT, max_size=max_pieces))
        n_calls = draw(st.integers(0, 1 if small else 3))
        deltas = [{"role": "assistant", "content": ""}]
        deltas += [{reasoning_key: r} for r in reasoning]
        deltas += [{"content": t} for t in text]
        call_truth, streams = [], []
        for j in range(n_calls):
            cid = "call_" + draw(st.text("abcdefXYZ0189", min_size=1, max_size=8))
            name = draw(st.sampled_from(["get_weather", "查询", "lookup_stock", "f"]))
            args = json.dumps(draw(st.dictionaries(TEXT, JSON_VALUES, max_size=max_items)),
                              ensure_ascii=draw(st.booleans()))
            split = draw(pieces(args, max_pieces))
            seq = [calls(tool(j, cid, name, split[0], "function"))]
            seq += [calls(tool(j, args=p)) for p in split[1:]]
            streams.append(seq)
            call_truth.append((cid, name, args))
        if draw(st.booleans()):  # parallel calls' pieces interleaved, heads in order
            started = 0
            while any(streams):
                live = [j for j, s in enumerate(streams) if s and j <= started]
                j = live[draw(st.integers(0, len(live) - 1))]
                started = max(started, j + 1)
                deltas.append(streams[j].pop(0))
        else:
            deltas += [d for s in streams for d in s]
        finish = "tool_calls" if n_calls else draw(st.sampled_from(["stop", "length"]))
        per_choice.append([chunk(d, index=k, finish=not_last) for d in deltas]
                          + [chunk(index=k, finish=finish, delta={})])
        truth.append(("".join(reasoning), "".join(text), call_truth, finish))
    # interleave the choices; each choice starts after the one before it
    # (the SDK files choices by order of first appearance)
    chunks, started = [], [False] * n_choices
    while any(per_choice):
        live = [k for k, s in enumerate(per_choice) if s and (k == 0 or started[k - 1])]
        k = live[draw(st.integers(0, len(live) - 1))]
        started[k] = True
        chunks.append(per_choice[k].pop(0))
    place = draw(st.sampled_from(USAGE_PLACES))
    usage = {"prompt_tokens": draw(st.integers(0, 10**6)),
             "completion_tokens": draw(st.integers(0, 10**6))}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    if draw(st.booleans()):
        usage["prompt_tokens_details"] = {"cached_tokens": draw(st.integers(0, 99))}
    if draw(st.booleans()):
        usage["completion_tokens_details"] = {"reasoning_tokens": draw(st.integers(0, 99))}
    if place == "final-chunk":
        chunks.append(chunk(usage=usage))
    elif place == "on-finish":
        chunks[-1]["usage"] = usage
    elif place == "second-to-last":
        chunks[-2]["usage"] = usage
    if draw(st.booleans()):  # llama.cpp / OpenAI extras
        for c in chunks:
            c["timings"] = {"predicted_n": 1}
            c["obfuscation"] = "zz"
    if not small and draw(st.booleans()):
        chunks.insert(0, AZURE_PROMPT_FILTER)
    if small:  # fewer bytes, so that every split point stays cheap
        for c in chunks:
            c.pop("created", None)
            for choice in c["choices"]:
                choice.pop("logprobs", None)
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    prefix = draw(st.sampled_from(["data: ", "data:"]))
    events = []
    for c in chunks:
        if draw(st.integers(0, 4)) == 0:
            events.append(draw(st.sampled_from(KEEP_ALIVES)) + (eol * 2).encode())
        events.append(c)
    body = sse(*events, eol=eol, data=prefix, compact=small)
    return body, truth, usage, place


def assert_truth(dec: OpenAIChatDecoder, truth, usage, place) -> None:
    messages = dec.messages
    assert len(messages) == len(truth)
    for m, (reasoning, text, call_truth, finish) in zip(messages, truth):
        assert (m.reasoning, m.text, m.raw_finish_reason) == (reasoning, text, finish)
        assert [summary(c) for c in m.tool_calls] == call_truth
        assert [c.parsed for c in m.tool_calls] == [json.loads(a) for _, _, a in call_truth]
        assert m.refusal is None and (m.id, m.model) == (ID, MODEL)
        if place == "none":
            assert m.usage is None
        else:
            details_in = usage.get("prompt_tokens_details", {})
            details_out = usage.get("completion_tokens_details", {})
            assert m.usage == Usage(usage["prompt_tokens"], usage["completion_tokens"],
                                    usage["total_tokens"], details_in.get("cached_tokens"),
                                    None, details_out.get("reasoning_tokens"))


@settings(max_examples=scaled(60), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_generated_streams_match_sdk_in_random_splits(data):
    body, truth, usage, place = data.draw(chat_streams())
    cuts = data.draw(cuts_for(len(body)))
    bounds = [0, *sorted(set(cuts)), len(body)]
    reads = [body[a:b] for a, b in zip(bounds, bounds[1:])]
    dec, events = decode(body, cuts)
    assert_truth(dec, truth, usage, place)
    assert not warnings(events) and not of(events, MessageIncomplete)
    snap = sdk_decode(reads)
    assert_matches_sdk(dec, snap, reads, usage=place != "second-to-last")
    if place == "second-to-last":
        assert snap.usage is None  # the SDK's deviation: the last chunk erased it


@settings(max_examples=scaled(12), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stream=chat_streams(small=True))
def test_short_generated_streams_at_every_split_point(stream):
    body, truth, usage, place = stream
    whole, events = decode(body)
    assert_truth(whole, truth, usage, place)
    # a 4 KiB buffer (every event here fits) makes each of the many decoders cheap
    for cut in range(1, len(body)):
        dec, evs = decode(body, [cut], buffer_size=4096)
        assert dec.messages == whole.messages, f"split at {cut}"
        assert split_view(evs) == split_view(events), f"split at {cut}"


# ---------------------------------------------------------------------------
# (b) truncation at every byte offset
# ---------------------------------------------------------------------------

def assert_prefix_consistent(body: bytes, end: int) -> None:
    """Cut body at every offset: never an exception; MessageIncomplete
    exactly when the cut comes before `end` (the blank line that ends the
    [DONE] event); and a partial message consistent with the full one."""
    full = decode(body)[0].messages
    for cut in range(len(body) + 1):
        dec = OpenAIChatDecoder()
        events = dec.feed(body[:cut]) + dec.close()
        incomplete = of(events, MessageIncomplete)
        if cut >= end:
            assert not incomplete, cut
        else:
            assert incomplete == [events[-1]], cut
        messages = dec.messages
        assert len(messages) <= len(full), cut
        for m, f in zip(messages, full):
            assert f.text.startswith(m.text), cut
            assert f.reasoning.startswith(m.reasoning), cut
            assert (f.refusal or "").startswith(m.refusal or ""), cut
            assert m.raw_finish_reason in (None, f.raw_finish_reason), cut
            assert m.usage in (None, f.usage), cut
            assert m.id in (None, f.id) and m.model in (None, f.model), cut
            assert len(m.tool_calls) <= len(f.tool_calls), cut
            for c, fc in zip(m.tool_calls, f.tool_calls):
                if c.complete:
                    assert c == fc, cut
                else:
                    assert c.error is ArgumentsError.TRUNCATED and c.parsed is None, cut
                    assert (c.id, c.name) == (fc.id, fc.name), cut
                    assert fc.arguments.startswith(c.arguments), cut
        if cut >= end:
            assert messages == full


def test_fixture_truncated_at_every_offset():
    body = fixture_body()
    assert body.endswith(b"data: [DONE]\n\n")
    assert_prefix_consistent(body, len(body))


HAND_WRITTEN = sse(
    AZURE_PROMPT_FILTER,
    chunk({"role": "assistant", "content": "", "reasoning_content": "想"}),
    b": keep-alive\n\n",
    chunk({"reasoning_content": "一想🤔"}),
    chunk({"content": "Voilà 你好 "}), chunk({"content": "👋🏽!"}),
    chunk({"role": "assistant", "refusal": "non"}, index=1),
    chunk(calls(tool(0, "call_1", "get_weather", "", "function"))),
    chunk(calls(tool(0, args='{"city": "東'))),
    chunk(calls(tool(1, "call_2", "get_time", '{"tz":', "function"),
                tool(0, args='京"}'))),
    chunk(calls(tool(1, args=' "JST"}'))),
    chunk(finish="tool_calls"),
    chunk(finish="content_filter", index=1),
    chunk(usage=USAGE),
) + b": trailing comment after the end\n"


def test_hand_written_truncated_at_every_offset():
    full = decode(HAND_WRITTEN)[0].messages
    assert [summary(c) for c in full[0].tool_calls] == [
        ("call_1", "get_weather", '{"city": "東京"}'), ("call_2", "get_time", '{"tz": "JST"}')]
    assert (full[0].reasoning, full[0].text) == ("想一想🤔", "Voilà 你好 👋🏽!")
    assert (full[1].refusal, full[1].finish_reason) == ("non", FinishReason.CONTENT_FILTER)
    end = HAND_WRITTEN.index(b"data: [DONE]\n\n") + len(b"data: [DONE]\n\n")
    assert_prefix_consistent(HAND_WRITTEN, end)


def test_hand_written_matches_sdk():
    differential(HAND_WRITTEN)


# ---------------------------------------------------------------------------
# (b) malformed chunks in the middle, data after [DONE]
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("bad, code, detail", [
    pytest.param('{"id": "x", "choices": [{"index": 0, "delta": {"content": "X"}}',
                 WarningCode.BAD_JSON, None, id="bad-json"),
    pytest.param('{"choices": [{"index": 0, "delta": {"content": 5}}]}',
                 WarningCode.FIELD_TYPE, "choices[].delta.content", id="content-5"),
    pytest.param('{"choices": {}}', WarningCode.FIELD_TYPE, "choices", id="choices-object"),
    pytest.param('{"choices": [{"index": "0", "delta": {"content": "X"}}]}',
                 WarningCode.FIELD_TYPE, "choices[].index", id="index-string"),
    pytest.param('[{"choices": []}]', WarningCode.NOT_OBJECT, None, id="not-an-object"),
])
def test_malformed_chunk_in_the_middle_warns_and_decoding_goes_on(bad, code, detail):
    body = sse(chunk({"role": "assistant", "content": "a"}),
               chunk(calls(tool(0, "call_1", "f", '{"q": ', "function"))),
               bad, chunk({"content": "b"}), chunk(calls(tool(0, args="1}"))),
               chunk(finish="tool_calls"), chunk(usage=USAGE))
    dec, events = decode_every_way(body)
    [w] = warnings(events)
    assert (w.code, w.detail, w.raw) == (code, detail, bad.encode())
    m = dec.message
    # "index": "0" falls back to the choice's position: its text is kept
    assert m.text == ("aXb" if detail == "choices[].index" else "ab")
    assert [summary(c) for c in m.tool_calls] == [("call_1", "f", '{"q": 1}')]
    assert m.finish_reason is FinishReason.TOOL_CALLS and m.usage == USAGE_EVENT
    assert not of(events, MessageIncomplete)


def test_data_after_done_warns_after_end_once_however_split():
    # Two text chunks after [DONE]: fed whole the core merges them into one
    # record, split between them it gives two; either way one warning.
    body = sse(chunk({"content": "a"}), chunk(finish="stop")) + sse(
        chunk({"content": "late"}), chunk({"content": "r"}), chunk(usage=USAGE), "not json",
        b"bogus: field\n\n")
    dec, events = decode_every_way(body)
    after = warnings(events, WarningCode.AFTER_END)
    assert [w.detail for w in after] == ["TextDelta"]
    assert warnings(events) == after
    m = dec.message
    assert (m.text, m.usage, m.raw_finish_reason) == ("a", None, "stop")
    assert not of(events, MessageIncomplete)


# ---------------------------------------------------------------------------
# (b) truth table: a wrong-type field spoils that field only
# ---------------------------------------------------------------------------

_TC = '{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}'
GOOD_CALL = [("call_1", "f", "{}")]

# (row id, the chunk between "a" and "b", FIELD_TYPE paths, what the message keeps)
FIELD_TYPE_ROWS = [
    ("id-number", '{"id": 5, "choices": [{"index": 0, "delta": {"content": "X"}}]}',
     ["id"], {"text": "aXb", "id": ID}),
    ("model-array", '{"model": ["m"], "choices": [{"index": 0, "delta": {"content": "X"}}]}',
     ["model"], {"text": "aXb", "model": MODEL}),
    ("choices-object", '{"choices": {"0": {"delta": {"content": "X"}}}, "usage": '
     '{"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}',
     ["choices"], {"text": "ab", "usage": Usage(1, 2, 3)}),
    ("choice-not-object", '{"choices": ["X", {"index": 0, "delta": {"content": "X"}}]}',
     ["choices[]"], {"text": "aXb"}),
    ("choice-index-string", '{"choices": [{"index": "0", "delta": {"content": "X"}}]}',
     ["choices[].index"], {"text": "aXb"}),
    ("choice-index-negative", '{"choices": [{"index": -1, "delta": {"content": "X"}}]}',
     ["choices[].index"], {"text": "aXb"}),
    ("choice-index-fraction", '{"choices": [{"index": 0.5, "delta": {"content": "X"}}]}',
     ["choices[].index"], {"text": "aXb"}),
    ("delta-string", '{"choices": [{"index": 0, "delta": "X", "finish_reason": "length"}]}',
     ["choices[].delta"], {"text": "ab", "finished": ["length", "stop"]}),
    ("content-number", '{"choices": [{"index": 0, "delta": {"content": 5, '
     '"reasoning_content": "R"}}]}',
     ["choices[].delta.content"], {"text": "ab", "reasoning": "R"}),
    ("reasoning_content-object", '{"choices": [{"index": 0, "delta": {"reasoning_content": '
     '{"text": "R"}, "content": "X"}}]}',
     ["choices[].delta.reasoning_content"], {"text": "aXb", "reasoning": ""}),
    ("reasoning-array", '{"choices": [{"index": 0, "delta": {"reasoning": ["R"], '
     '"content": "X"}}]}',
     ["choices[].delta.reasoning"], {"text": "aXb", "reasoning": ""}),
    ("refusal-bool", '{"choices": [{"index": 0, "delta": {"refusal": true, "content": "X"}}]}',
     ["choices[].delta.refusal"], {"text": "aXb", "refusal": None}),
    ("tool_calls-object", '{"choices": [{"index": 0, "delta": {"tool_calls": ' + _TC
     + ', "content": "X"}}]}',
     ["choices[].delta.tool_calls"], {"text": "aXb", "calls": []}),
    ("tool_call-not-object", '{"choices": [{"index": 0, "delta": {"tool_calls": [7, ' + _TC
     + ']}}]}',
     ["choices[].delta.tool_calls[]"], {"calls": GOOD_CALL}),
    ("tool_call-index-string", '{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": '
     '"0", "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}]}',
     ["choices[].delta.tool_calls[].index"], {"calls": GOOD_CALL}),
    ("tool_call-id-number", '{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, '
     '"id": 7, "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}]}',
     ["choices[].delta.tool_calls[].id"], {"calls": [("call_ha_0_0", "f", "{}")]}),
    ("tool_call-type-number", '{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, '
     '"id": "call_1", "type": 1, "function": {"name": "f", "arguments": "{}"}}]}}]}',
     ["choices[].delta.tool_calls[].type"], {"calls": GOOD_CALL}),
    ("tool_call-function-string", '{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": '
     '0, "id": "call_1", "type": "function", "function": "f({})"}]}}]}',
     ["choices[].delta.tool_calls[].function"], {"calls": [("call_1", None, "")]}),
    ("tool_call-name-number", '{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, '
     '"id": "call_1", "type": "function", "function": {"name": 3, "arguments": "{}"}}]}}]}',
     ["choices[].delta.tool_calls[].function.name"], {"calls": [("call_1", None, "{}")]}),
    ("tool_call-arguments-number", '{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": '
     '0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": 1}}]}}]}',
     ["choices[].delta.tool_calls[].function.arguments"], {"calls": [("call_1", "f", "")]}),
    ("finish_reason-number", '{"choices": [{"index": 0, "delta": {"content": "X"}, '
     '"finish_reason": 5}]}',
     ["choices[].finish_reason"], {"text": "aXb", "finished": ["stop"]}),
    ("usage-array", '{"choices": [], "usage": [1, 2, 3]}', ["usage"], {"usage": None}),
    ("prompt_tokens-string", '{"choices": [], "usage": {"prompt_tokens": "5", '
     '"completion_tokens": 2, "total_tokens": 7}}',
     ["prompt_tokens"], {"usage": Usage(None, 2, 7)}),
    ("completion_tokens-fraction", '{"choices": [], "usage": {"prompt_tokens": 5, '
     '"completion_tokens": 2.5, "total_tokens": 7}}',
     ["completion_tokens"], {"usage": Usage(5, None, 7)}),
    ("total_tokens-negative", '{"choices": [], "usage": {"prompt_tokens": 5, '
     '"completion_tokens": 2, "total_tokens": -7}}',
     ["total_tokens"], {"usage": Usage(5, 2, None)}),
    ("prompt_tokens-over-int64", '{"choices": [], "usage": {"prompt_tokens": '
     '18446744073709551616, "completion_tokens": 2, "total_tokens": 7}}',
     ["prompt_tokens"], {"usage": Usage(None, 2, 7)}),
    ("prompt_tokens_details-number", '{"choices": [], "usage": {"prompt_tokens": 5, '
     '"completion_tokens": 2, "total_tokens": 7, "prompt_tokens_details": 3}}',
     ["prompt_tokens_details"], {"usage": Usage(5, 2, 7)}),
    ("cached_tokens-string", '{"choices": [], "usage": {"prompt_tokens": 5, '
     '"completion_tokens": 2, "total_tokens": 7, "prompt_tokens_details": {"cached_tokens": "3"}}}',
     ["cached_tokens"], {"usage": Usage(5, 2, 7)}),
    ("completion_tokens_details-array", '{"choices": [], "usage": {"prompt_tokens": 5, '
     '"completion_tokens": 2, "total_tokens": 7, "completion_tokens_details": []}}',
     ["completion_tokens_details"], {"usage": Usage(5, 2, 7)}),
    ("reasoning_tokens-bool", '{"choices": [], "usage": {"prompt_tokens": 5, '
     '"completion_tokens": 2, "total_tokens": 7, "completion_tokens_details": '
     '{"reasoning_tokens": true}}}',
     ["reasoning_tokens"], {"usage": Usage(5, 2, 7)}),
    ("usage-all-counts-wrong", '{"choices": [], "usage": {"prompt_tokens": "1", '
     '"completion_tokens": "2", "total_tokens": "3"}}',
     ["prompt_tokens", "completion_tokens", "total_tokens"], {"usage": Usage()}),
    ("every-field-null", '{"id": null, "model": null, "error": null, "usage": null, "choices": '
     '[{"index": null, "finish_reason": null, "delta": {"content": null, "reasoning_content": '
     'null, "reasoning": null, "refusal": null, "tool_calls": [{"index": null, "id": null, '
     '"type": null, "function": {"name": null, "arguments": null}}]}}]}',
     [], {"text": "ab", "calls": []}),
    ("choices-null", '{"choices": null, "usage": null}', [], {"text": "ab"}),
]


@pytest.mark.parametrize("bad, paths, keeps",
                         [pytest.param(b, p, k, id=i) for i, b, p, k in FIELD_TYPE_ROWS])
def test_wrong_type_field(bad, paths, keeps):
    body = sse(chunk({"role": "assistant", "content": "a"}), bad, chunk({"content": "b"}),
               chunk(finish="stop"))
    dec, events = decode_every_way(body)
    found = warnings(events)
    assert [(w.code, w.detail) for w in found] == [(WarningCode.FIELD_TYPE, p) for p in paths]
    assert all(w.raw == bad.encode() for w in found)
    m = dec.message
    assert m.text == keeps.get("text", "ab")
    assert m.reasoning == keeps.get("reasoning", "")
    assert m.refusal == keeps.get("refusal")
    assert [summary(c) for c in m.tool_calls] == keeps.get("calls", [])
    assert all(c.complete for c in m.tool_calls)
    assert m.usage == keeps.get("usage")
    assert (m.id, m.model) == (keeps.get("id", ID), keeps.get("model", MODEL))
    assert [e.raw_reason for e in of(events, MessageFinished)] == keeps.get("finished", ["stop"])
    assert m.raw_finish_reason == "stop"
    assert not of(events, MessageIncomplete)


# ---------------------------------------------------------------------------
# (b) truth table: chunk-level and stream-level rows
# ---------------------------------------------------------------------------

def middle(bad, **kwargs):
    """Decode a/bad/b/stop/[DONE] every way; (message, events)."""
    body = sse(chunk({"role": "assistant", "content": "a"}), bad, chunk({"content": "b"}),
               chunk(finish="stop"))
    dec, events = decode_every_way(body, **kwargs)
    assert dec.message.text.startswith("a") and dec.message.text.endswith("b")
    assert not of(events, MessageIncomplete)
    return dec.message, events


@pytest.mark.parametrize("bad, status, offset", [
    pytest.param('{"choices": [}', JSONStatus.SYNTAX, 13, id="syntax"),
    pytest.param("", JSONStatus.EMPTY, 0, id="empty-data"),
    pytest.param('{"choices": []} {}', JSONStatus.TRAILING, 16, id="trailing"),
    pytest.param('{"a":' * 65 + "1" + "}" * 65, JSONStatus.DEPTH, 320, id="too-deep"),
    pytest.param("{'choices': []}", JSONStatus.SYNTAX, 1, id="single-quotes"),
    pytest.param('{"n": NaN}', JSONStatus.SYNTAX, 6, id="nan"),
])
def test_chunk_not_json(bad, status, offset):
    m, events = middle(bad)
    [w] = warnings(events)
    assert (w.code, w.json_status, w.offset, w.raw) == (WarningCode.BAD_JSON, status, offset,
                                                         bad.encode())
    assert m.text == "ab"


@pytest.mark.parametrize("bad", ["[]", '"text"', "42", "true", "null"],
                         ids=["array", "string", "number", "true", "null"])
def test_chunk_not_an_object(bad):
    m, events = middle(bad)
    [w] = warnings(events)
    assert (w.code, w.raw) == (WarningCode.NOT_OBJECT, bad.encode())
    assert m.text == "ab"


@pytest.mark.parametrize("error, type_, message", [
    pytest.param({"message": "Rate limit", "type": "rate_limit_error", "code": "rate_limit"},
                 "rate_limit_error", "Rate limit", id="type-and-message"),
    pytest.param({"message": "Context too long", "code": "context_length_exceeded"},
                 "context_length_exceeded", "Context too long", id="code-string"),
    pytest.param({"code": 500, "message": "slot unavailable", "type": None},
                 "500", "slot unavailable", id="code-number-llamacpp"),
    pytest.param("upstream failed", None, "upstream failed", id="string"),
])
def test_error_chunk(error, type_, message):
    """An `error` object with members, or a message string, makes the whole
    chunk a ProviderError (its other members are not decoded); decoding goes
    on with the next chunk."""
    bad = {"error": error, "choices": [{"index": 0, "delta": {"content": "LOST"}}]}
    m, events = middle(bad)
    [e] = of(events, ProviderError)
    assert (e.type, e.message) == (type_, message)
    assert json.loads(e.raw) == error
    assert m.text == "ab" and not warnings(events)


@pytest.mark.parametrize("error", [None, False, "", {}], ids=["null", "false", "empty-string", "empty-object"])
def test_falsy_error_is_no_error(error):
    """What some servers send when there is no error (the SDK agrees: it
    checks data.get("error"))."""
    m, events = middle({"error": error, "choices": [{"index": 0, "delta": {"content": "X"}}]})
    assert m.text == "aXb" and not of(events, ProviderError) and not warnings(events)


@pytest.mark.parametrize("error", [42, True, [1]], ids=["number", "true", "array"])
def test_error_of_another_type_warns_and_the_chunk_is_decoded(error):
    m, events = middle({"error": error, "choices": [{"index": 0, "delta": {"content": "X"}}]})
    [w] = warnings(events)
    assert (w.code, w.detail) == (WarningCode.FIELD_TYPE, "error")
    assert m.text == "aXb" and not of(events, ProviderError)


@pytest.mark.parametrize("done, ends", [
    pytest.param(b"data: [DONE]\n\n", True, id="done"),
    pytest.param(b"data:[DONE]\n\n", True, id="done-no-space"),
    pytest.param(b"data: [DONE] \n\n", False, id="done-trailing-space"),
    pytest.param(b"data: [done]\n\n", False, id="done-lowercase"),
    pytest.param(b"data: [DONE]\n", False, id="done-without-blank-line"),
    pytest.param(b"data: [DONE]", False, id="done-without-line-end"),
])
def test_done_sentinel_variants(done, ends):
    body = sse(chunk({"content": "a"}), chunk(finish="stop"), done=False) + done
    dec, events = decode_every_way(body)
    assert bool(of(events, MessageIncomplete)) is not ends
    assert dec.message.text == "a" and dec.message.raw_finish_reason == "stop"
    if not ends and done.endswith(b"\n\n"):
        [w] = warnings(events)
        assert w.code is WarningCode.BAD_JSON and w.raw == done[6:-2]
    if not done.endswith(b"\n\n"):
        [t] = of(events, Truncated)
        assert t.unterminated_event and t.pending == len(b"[DONE]")


def test_end_without_done_truncates_open_calls():
    body = sse(chunk({"content": "a"}),
               chunk(calls(tool(0, "call_1", "f", '{"x": 1}', "function"),
                           tool(1, "call_2", "g", '{"y": "cut', "function"))), done=False)
    dec, events = decode_every_way(body)
    assert isinstance(events[-1], MessageIncomplete)
    c1, c2 = dec.message.tool_calls
    assert (c1.error, c1.complete, c1.parsed) == (ArgumentsError.TRUNCATED, False, None)
    assert (c2.error, c2.arguments) == (ArgumentsError.TRUNCATED, '{"y": "cut')
    assert dec.message.finish_reason is None


def test_cut_inside_an_event_reports_truncated():
    body = sse(chunk({"content": "a"}), done=False) + b'data: {"choices": [{"ind'
    dec, events = decode_every_way(body)
    [t] = of(events, Truncated)
    assert t.unterminated_event and t.partial_line
    assert isinstance(events[-1], MessageIncomplete) and dec.message.text == "a"


@pytest.mark.parametrize("raw_text, shown", [
    pytest.param(b"ok\xff", "ok\ufffd", id="invalid-utf8"),
    pytest.param(b"ok\\ud83d", "ok\ufffd", id="lone-surrogate-escape"),
    pytest.param(b"ok\xe4\xbd", "ok\ufffd", id="cut-utf8-sequence"),
])
def test_text_replaced_utf8(raw_text, shown):
    bad = b'{"choices": [{"index": 0, "delta": {"content": "' + raw_text + b'"}}]}'
    body = (sse(chunk({"content": "a"}), done=False) + b"data: " + bad + b"\n\n"
            + sse(chunk({"content": "b"}), chunk(finish="stop")))
    dec, events = decode_every_way(body)
    [w] = warnings(events)
    assert (w.code, w.raw) == (WarningCode.REPLACED_UTF8, bad)
    assert dec.message.text == "a" + shown + "b"


def test_delta_over_the_buffer_is_elided_and_counted():
    """A content delta longer than the buffer cannot be kept: it is elided,
    warned and counted as damage; the chunk's other fields and the rest of the
    stream arrive."""
    big = chunk({"content": "x" * 5000})
    m, events = middle(big, buffer_size=4096)
    assert not of(events, FramingError)
    [w] = [e for e in events if isinstance(e, DecodeWarning)]
    assert w.code is WarningCode.DELTA_ELIDED and w.detail == "choices[].delta.content"
    assert m.text == "ab" and m.dropped_events == {"delta_elided": 1}


def test_event_too_large_is_dropped_and_decoding_goes_on():
    big = chunk({"content": "x", "pad": ["x"] * 2000})
    m, events = middle(big, buffer_size=4096)
    [f] = of(events, FramingError)
    assert f.code is FramingErrorCode.EVENT_TOO_LARGE and f.size > 4096
    assert m.text == "ab"


def test_event_name_is_ignored():
    body = (b"event: completion\n"
            + sse(chunk({"content": "a"}), chunk(finish="stop")))
    dec, events, _ = differential(body)
    assert dec.message.text == "a"


def test_tool_id_and_name_conflicts_keep_the_first():
    body = sse(chunk(calls(tool(0, "call_a", "f", "{", "function"))),
               chunk(calls(tool(0, "call_b", "g", "}"))), chunk(finish="tool_calls"))
    dec, events = decode_every_way(body)
    assert [summary(c) for c in dec.message.tool_calls] == [("call_a", "f", "{}")]
    assert [(w.code, w.detail) for w in warnings(events)] == [
        (WarningCode.TOOL_ID_CONFLICT, "call 0: kept 'call_a', got 'call_b'"),
        (WarningCode.TOOL_NAME_CONFLICT, "call 0: kept 'f', got 'g'")]


def test_head_fields_missing_at_first_are_filled_later():
    body = sse(chunk(calls(tool(0, type="function", args="{"))),
               chunk(calls(tool(0, "call_late", "f_late", "}"))), chunk(finish="tool_calls"))
    dec, events, _ = differential(body)
    assert [summary(c) for c in dec.message.tool_calls] == [("call_late", "f_late", "{}")]


def test_arguments_before_any_head():
    body = sse(chunk(calls(tool(0, args='{"q": 1}'))), chunk(finish="tool_calls"))
    dec, events = decode_every_way(body)
    [c] = dec.message.tool_calls
    assert (summary(c), c.parsed) == (("call_ha_0_0", None, '{"q": 1}'), {"q": 1})
    assert not warnings(events)


@pytest.mark.parametrize("args, parsed, error", [
    pytest.param('{"a": ', None, ArgumentsError.INVALID_JSON, id="invalid-json"),
    pytest.param("[1, 2]", None, ArgumentsError.NOT_AN_OBJECT, id="array"),
    pytest.param("", {}, None, id="empty"),
    pytest.param(" \n", {}, None, id="whitespace"),
    pytest.param('{"a": 1, "a": 2}', {"a": 2}, None, id="duplicate-key-last-wins"),
])
def test_complete_arguments_parsed(args, parsed, error):
    body = sse(chunk(calls(tool(0, "call_1", "f", args, "function"))),
               chunk(finish="tool_calls"))
    dec, events = decode_every_way(body)
    [c] = dec.message.tool_calls
    assert (c.arguments, c.parsed, c.error, c.complete) == (args, parsed, error, True)
    assert not warnings(events)


@pytest.mark.parametrize("raw, reason", [
    ("stop", FinishReason.STOP), ("length", FinishReason.LENGTH),
    ("tool_calls", FinishReason.TOOL_CALLS), ("function_call", FinishReason.TOOL_CALLS),
    ("content_filter", FinishReason.CONTENT_FILTER), ("eos", FinishReason.OTHER),
], ids=lambda v: v if isinstance(v, str) else v.name)
def test_finish_reason_normalised_raw_kept(raw, reason):
    body = sse(chunk({"content": "a"}), chunk(finish=raw))
    dec, events, _ = differential(body)
    assert (dec.message.finish_reason, dec.message.raw_finish_reason) == (reason, raw)


def test_choice_seen_before_choice_zero():
    """Choices are keyed by index, not by order of appearance. (The SDK files
    them by appearance and crashes on this stream's first chunk.)"""
    body = sse(chunk({"content": "B"}, index=1), chunk({"content": "A"}, index=0),
               chunk(finish="stop", index=0), chunk(finish="length", index=1))
    dec, events = decode_every_way(body)
    assert [(m.text, m.raw_finish_reason) for m in dec.messages] == [("A", "stop"),
                                                                    ("B", "length")]
    with pytest.raises(IndexError):
        sdk_decode([body])


def test_tool_index_seen_out_of_order_keeps_arrival_order():
    body = sse(chunk(calls(tool(1, "call_b", "g", "{}", "function"))),
               chunk(calls(tool(0, "call_a", "f", "{", "function"))),
               chunk(calls(tool(0, args="}"))), chunk(finish="tool_calls"))
    dec, events = decode_every_way(body)
    assert [summary(c) for c in dec.message.tool_calls] == [("call_b", "g", "{}"),
                                                          ("call_a", "f", "{}")]


def test_usage_in_every_chunk_present_counts_replace():
    body = sse(chunk({"content": "a"}, usage={"prompt_tokens": 9, "completion_tokens": 1,
                                             "total_tokens": 10,
                                             "prompt_tokens_details": {"cached_tokens": 4}}),
               chunk({"content": "b"}, usage={"prompt_tokens": 9, "completion_tokens": 2,
                                             "total_tokens": 11}),
               chunk(finish="stop", usage=None))
    dec, events = decode_every_way(body)
    assert dec.message.usage == Usage(9, 2, 11, 4, None, None)
    # the SDK keeps only the last chunk's usage, here null
    assert sdk_decode([body]).usage is None


# ---------------------------------------------------------------------------
# duplicate and mirrored members of one delta
# ---------------------------------------------------------------------------

def test_duplicate_delta_key_last_wins():
    bad = '{"choices": [{"index": 0, "delta": {"content": "A", "content": "B"}}]}'
    body = sse(bad, chunk(finish="stop"))
    dec, events = decode(body)
    assert json.loads(bad)["choices"][0]["delta"]["content"] == "B"  # the JSON rule
    assert dec.message.text == "B"


def test_reasoning_mirrored_in_both_fields_is_kept_once():
    """A gateway may mirror `reasoning` into `reasoning_content`: kept once."""
    body = sse(chunk({"reasoning": "think", "reasoning_content": "think"}),
               chunk({"content": "ok"}), chunk(finish="stop"))
    dec, _ = decode(body)
    assert dec.message.reasoning == "think"


# ---------------------------------------------------------------------------
# local servers in OpenAI-compatible mode (issue 14): one row each in
# docs/truth-table-openai-chat.md
# ---------------------------------------------------------------------------

def test_tool_calls_without_id_get_stable_ids():
    """Ollama's compatible endpoint and some proxies send calls without an id:
    each gets call_ha_<choice>_<position>, the same however the body was split,
    so its result can be matched to it; a real id that comes later wins."""
    body = sse(chunk(calls(tool(0, name="f", args='{"a": 1}', type="function"),
                           tool(1, name="g", args="{}", type="function"))),
               chunk(calls(tool(2, name="h", args="{}"))),
               chunk(calls(tool(2, id="call_real"))),
               chunk(finish="tool_calls"))
    dec, events = decode_every_way(body)
    assert [summary(c) for c in dec.message.tool_calls] == [
        ("call_ha_0_0", "f", '{"a": 1}'), ("call_ha_0_1", "g", "{}"), ("call_real", "h", "{}")]
    assert [e.tool_call.id for e in of(events, ToolCallDone)] == [
        "call_ha_0_0", "call_ha_0_1", "call_real"]
    assert not warnings(events)


def test_tool_calls_without_index_or_id():
    body = sse(chunk(calls(tool(name="f", args='{"a"', type="function"))),
               chunk(calls(tool(args=": 1}"))),
               chunk(calls(tool(name="g", args="{}", type="function"))),
               chunk(finish="tool_calls"))
    dec, events = decode_every_way(body)
    assert [summary(c) for c in dec.message.tool_calls] == [
        ("call_ha_0_0", "f", '{"a": 1}'), ("call_ha_0_1", "g", "{}")]
    assert all(c.complete for c in dec.message.tool_calls) and not warnings(events)


@pytest.mark.parametrize("arguments", [
    pytest.param('{"city": "Z\\u00fcrich", "days": [1, 2], "x": {}}', id="nested-escaped"),
    pytest.param("{}", id="empty"),
    pytest.param('{ "a" : true }', id="spaced"),
])
def test_arguments_sent_as_an_object_are_its_bytes(arguments):
    """Some compatible servers send function.arguments as a JSON object, not a
    string: the argument string is the object's bytes exactly as sent."""
    data = ('{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", '
            '"type": "function", "function": {"name": "f", "arguments": ' + arguments + '}}]}}]}')
    dec, events = decode_every_way(sse(data, chunk(finish="tool_calls")))
    [c] = dec.message.tool_calls
    assert (c.arguments, c.parsed, c.complete) == (arguments, json.loads(arguments), True)
    assert not warnings(events)


def test_a_first_chunk_without_id():
    """continuedev/continue PR 13235: the first chunk has no id; a later one may."""
    body = sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]},
               chunk({"content": "!"}, id="chatcmpl-1"), chunk(finish="stop", id="chatcmpl-1"))
    dec, events = decode_every_way(body)
    assert (dec.message.text, dec.message.id) == ("Hi!", "chatcmpl-1")
    body = sse({"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]})
    dec, events = decode_every_way(body)
    assert (dec.message.text, dec.message.id, dec.message.finish_reason) == (
        "Hi", None, FinishReason.STOP)
    assert not warnings(events)


@pytest.mark.parametrize("with_calls, reason", [(False, FinishReason.STOP),
                                                (True, FinishReason.TOOL_CALLS)])
def test_done_without_any_finish_reason_infers_it(with_calls, reason):
    """[DONE] ends a stream that named no finish_reason (or only ""): the
    message is complete, finished with tool_calls when it called tools, else
    stop; raw_finish_reason None says no reason was sent."""
    parts = [chunk({"content": "a"}, finish=""), chunk({"content": "b"})]
    if with_calls:
        parts.append(chunk(calls(tool(0, "call_1", "f", "{}", "function"))))
    dec, events = decode_every_way(sse(*parts))
    assert (dec.message.finish_reason, dec.message.raw_finish_reason) == (reason, None)
    assert [(e.reason, e.raw_reason) for e in of(events, MessageFinished)] == [(reason, None)]
    assert not of(events, MessageIncomplete)
    assert all(c.complete for c in dec.message.tool_calls)
