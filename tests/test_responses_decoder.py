"""OpenAIResponsesDecoder (agent/stream/decoders/openai_responses.py).

(a) Differential against the official SDK (openai==3.57.0, pinned in
    pyproject.toml): the same bytes go through its own path with no network,
    exactly as its ResponseStream does (SSEDecoder.iter_bytes, json, the
    legacy-mode `error` check of Stream.__stream__, construct_type into the
    ResponseStreamEvent models, ResponseStreamState.handle_event), and its
    final Response is compared with our Message field by field. Streams:
    one hand-written stream per Responses quirk of wire-quirks.md, each
    checked at every single split point and byte at a time, plus
    hypothesis-generated valid streams in random splits. Every hand-written
    event the SDK has a model for is validated strictly against that model,
    so the streams carry the fields the real API sends.
(b) Fault cases: truncation at every byte offset, malformed chunks
    mid-stream, wrong-type fields (the rows of
    docs/truth-table-openai-responses.md), unknown types, data after the end.

Where the SDK is wrong or raises, the test asserts the correct behaviour and
says why. No timing is asserted anywhere.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

import httpx2
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai._models import construct_type, validate_type
from openai._streaming import SSEDecoder
from openai._types import omit
from openai._utils import is_mapping
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from agent.stream import records as rec
from agent.stream.decoders import events as ev
from agent.stream.decoders.base import OtherPart
from agent.stream.decoders.openai_responses import OpenAIResponsesDecoder
from agent.stream.records import (
    DecodeWarning,
    FramingError,
    FramingErrorCode,
    ProviderError,
    Truncated,
    WarningCode,
)
from agent.stream.decoders.events import MessageIncomplete
from agent.stream.message import (
    ArgumentsError,
    FinishReason,
    TextPart,
    ThinkingPart,
    ToolCall,
    normalise_finish,
)
from conftest import scaled
from streams import assert_split_independent, cuts_for, feed_split, split_view

# The SDK paths used here are private; their signatures change between
# versions (ResponseStreamState took no keyword-only input_tools before 1.x).
assert openai.__version__ == "3.57.0", openai.__version__

RESP_ID = "resp_68b0c3f1e2d4a5b6c7d8e9f00112233445566778899aabbc"
MODEL = "gpt-5-mini-2025-08-07"
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


# ---------------------------------------------------------------------------
# building realistic Responses streams
# ---------------------------------------------------------------------------

def hid(prefix: str, n: int) -> str:
    """An id shaped like the API's: prefix, underscore, 50 hex digits."""
    return f"{prefix}_{n:02x}" + "68b0c3f1e2d4a5b6c7d8e9f00112233445566778899aab"


def usage_obj(inp=1200, out=340, cached=1024, reasoning=192):
    return {"input_tokens": inp,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": inp + out}


def response_obj(status: str, output=(), usage=None, incomplete=None, error=None,
                 drop_output: bool = False, verbose: bool = False) -> dict:
    """A Response object with the fields the SDK model requires; verbose
    adds the optional ones the API also sends (kept out of most streams so
    that checking every split point stays cheap)."""
    r = {"id": RESP_ID, "object": "response", "created_at": 1756400000, "status": status,
         "error": error, "incomplete_details": incomplete, "model": MODEL,
         "output": list(output), "parallel_tool_calls": True, "tool_choice": "auto",
         "tools": [], "usage": usage}
    if verbose:
        r.update({"background": False, "instructions": None, "max_output_tokens": None,
                  "max_tool_calls": None, "previous_response_id": None,
                  "prompt_cache_key": None, "reasoning": {"effort": "medium", "summary": "auto"},
                  "safety_identifier": None, "service_tier": "default", "store": True,
                  "temperature": 1.0, "text": {"format": {"type": "text"}, "verbosity": "medium"},
                  "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled", "user": None,
                  "metadata": {}})
    if drop_output:
        # the SDK then rebuilds output from its own accumulation
        # (ResponseStreamState.handle_event / accumulate_event)
        del r["output"]
    return r


def head() -> list[dict]:
    return [{"type": "response.created", "response": response_obj("in_progress")},
            {"type": "response.in_progress", "response": response_obj("in_progress")}]


@dataclass
class Item:
    """One output item's events (in order) and its final JSON."""
    events: list
    final: dict


def message_item(idx: int, n: int, parts: list, annotations: dict | None = None,
                 status: str = "completed") -> Item:
    """parts: [("output_text" | "refusal", [delta, ...]), ...]; annotations:
    {content_index: [annotation, ...]} added after that part's deltas."""
    iid = hid("msg", n)
    base = {"item_id": iid, "output_index": idx}
    evs = [{"type": "response.output_item.added", "output_index": idx,
            "item": {"id": iid, "type": "message", "status": "in_progress",
                     "content": [], "role": "assistant"}}]
    content = []
    for ci, (kind, deltas) in enumerate(parts):
        text = "".join(deltas)
        if kind == "output_text":
            notes = (annotations or {}).get(ci, [])
            evs.append({"type": "response.content_part.added", **base, "content_index": ci,
                        "part": {"type": "output_text", "annotations": [], "logprobs": [],
                                 "text": ""}})
            evs += [{"type": "response.output_text.delta", **base, "content_index": ci,
                     "delta": d, "logprobs": [], "obfuscation": "xK3"} for d in deltas]
            evs += [{"type": "response.output_text.annotation.added", **base,
                     "content_index": ci, "annotation_index": k, "annotation": a}
                    for k, a in enumerate(notes)]
            evs.append({"type": "response.output_text.done", **base, "content_index": ci,
                        "text": text, "logprobs": []})
            part = {"type": "output_text", "annotations": notes, "logprobs": [], "text": text}
        else:
            evs.append({"type": "response.content_part.added", **base, "content_index": ci,
                        "part": {"type": "refusal", "refusal": ""}})
            evs += [{"type": "response.refusal.delta", **base, "content_index": ci, "delta": d}
                    for d in deltas]
            evs.append({"type": "response.refusal.done", **base, "content_index": ci,
                        "refusal": text})
            part = {"type": "refusal", "refusal": text}
        evs.append({"type": "response.content_part.done", **base, "content_index": ci,
                    "part": part})
        content.append(part)
    final = {"id": iid, "type": "message", "status": status, "content": content,
             "role": "assistant"}
    evs.append({"type": "response.output_item.done", "output_index": idx, "item": final})
    return Item(evs, final)


def reasoning_item(idx: int, n: int, summaries: list, content: list | None = None) -> Item:
    """summaries: [[delta, ...] per summary_index]; content: reasoning_text
    deltas (gpt-oss style) or None."""
    iid = hid("rs", n)
    base = {"item_id": iid, "output_index": idx}
    evs = [{"type": "response.output_item.added", "output_index": idx,
            "item": {"id": iid, "type": "reasoning", "summary": [], "encrypted_content": None}}]
    summary = []
    for si, deltas in enumerate(summaries):
        text = "".join(deltas)
        evs.append({"type": "response.reasoning_summary_part.added", **base, "summary_index": si,
                    "part": {"type": "summary_text", "text": ""}})
        evs += [{"type": "response.reasoning_summary_text.delta", **base, "summary_index": si,
                 "delta": d, "obfuscation": "Qz"} for d in deltas]
        evs.append({"type": "response.reasoning_summary_text.done", **base, "summary_index": si,
                    "text": text})
        evs.append({"type": "response.reasoning_summary_part.done", **base, "summary_index": si,
                    "part": {"type": "summary_text", "text": text}})
        summary.append({"type": "summary_text", "text": text})
    final = {"id": iid, "type": "reasoning", "summary": summary,
             "encrypted_content": "gAAAAABo" + "x" * 40}
    if content is not None:
        text = "".join(content)
        evs += [{"type": "response.reasoning_text.delta", **base, "content_index": 0, "delta": d}
                for d in content]
        evs.append({"type": "response.reasoning_text.done", **base, "content_index": 0,
                    "text": text})
        final["content"] = [{"type": "reasoning_text", "text": text}]
    evs.append({"type": "response.output_item.done", "output_index": idx, "item": final})
    return Item(evs, final)


def call_item(idx: int, n: int, name: str, deltas: list, done_args: str | None = None,
              status: str = "completed", with_done: bool = True) -> Item:
    iid, call_id = hid("fc", n), f"call_{n:02d}TNG5uqSoWvdMD4MFV6wK"
    args = "".join(deltas) if done_args is None else done_args
    evs = [{"type": "response.output_item.added", "output_index": idx,
            "item": {"id": iid, "type": "function_call", "status": "in_progress",
                     "arguments": "", "call_id": call_id, "name": name}}]
    evs += [{"type": "response.function_call_arguments.delta", "item_id": iid,
             "output_index": idx, "delta": d, "obfuscation": "p0"} for d in deltas]
    final = {"id": iid, "type": "function_call", "status": status, "arguments": args,
             "call_id": call_id, "name": name}
    if with_done:
        evs.append({"type": "response.function_call_arguments.done", "item_id": iid,
                    "output_index": idx, "arguments": args})
        evs.append({"type": "response.output_item.done", "output_index": idx, "item": final})
    return Item(evs, final)


def web_search_item(idx: int, n: int) -> Item:
    """A real item type the SDK knows and our core does not: an OTHER item,
    with event types the core reports as UNKNOWN_EVENT."""
    iid = hid("ws", n)
    base = {"item_id": iid, "output_index": idx}
    final = {"id": iid, "type": "web_search_call", "status": "completed",
             "action": {"type": "search", "query": "weather in Oslo"}}
    evs = [{"type": "response.output_item.added", "output_index": idx,
            "item": {**final, "status": "in_progress", "action": {"type": "search"}}},
           {"type": "response.web_search_call.in_progress", **base},
           {"type": "response.web_search_call.searching", **base},
           {"type": "response.web_search_call.completed", **base},
           {"type": "response.output_item.done", "output_index": idx, "item": final}]
    return Item(evs, final)


def interleave(items: list[Item], choices: list[int]) -> list[dict]:
    """Merge the items' events keeping each item's own order, and the
    output_item.added events in output_index order; choices pick which item
    goes next (empty: one item after another)."""
    pos = [0] * len(items)
    started, out, k = 0, [], 0
    while True:
        cands = [i for i in range(started) if pos[i] < len(items[i].events)]
        if started < len(items):
            cands.append(started)
        if not cands:
            return out
        pick = cands[choices[k % len(choices)] % len(cands)] if choices else cands[0]
        k += 1
        if pick == started:
            started += 1
        out.append(items[pick].events[pos[pick]])
        pos[pick] += 1


def numbered(events: list[dict]) -> list[dict]:
    return [{**e, "sequence_number": i} if isinstance(e, dict) else e
            for i, e in enumerate(events)]


def sse(e, ascii_only: bool = False) -> bytes:
    """One SSE event: `event:` repeats the JSON type, as the API sends it.
    bytes are taken as the data verbatim (malformed chunks)."""
    if isinstance(e, bytes):
        return b"data: " + e + b"\n\n"
    data = json.dumps(e, ensure_ascii=ascii_only, separators=(",", ":"))
    name = e.get("type") if isinstance(e.get("type"), str) else "message"
    return f"event: {name}\ndata: {data}\n\n".encode()


def body_of(events: list, ascii_only: bool = False) -> bytes:
    return b"".join(sse(e, ascii_only) for e in numbered(events))


def terminal_offset(body: bytes) -> int:
    """Offset just past the blank line that dispatches the terminal event."""
    best = -1
    for name in TERMINAL:
        at = body.rfind(f"event: {name}\n".encode())
        best = max(best, at)
    assert best >= 0
    return body.index(b"\n\n", best) + 2


# ---------------------------------------------------------------------------
# the SDK's path, offline
# ---------------------------------------------------------------------------

@dataclass
class SDKRun:
    final: object = None       # the Response of get_final_response(), if any
    terminal: object = None    # the completed / incomplete / failed event it fired
    errors: list = field(default_factory=list)  # `error` events it fired
    exception: BaseException | None = None


_REQUEST = httpx2.Request("POST", "https://api.openai.com/v1/responses")


def sdk_run(chunks: list[bytes]) -> SDKRun:
    """What openai.Stream.__stream__ (legacy stream mode, the default) and
    ResponseStream.__stream__ do with these network reads."""
    run = SDKRun()
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    try:
        for sse_event in SSEDecoder().iter_bytes(iter(chunks)):
            if sse_event.data.startswith("[DONE]"):
                break
            data = sse_event.json()
            if is_mapping(data) and data.get("error"):
                error = data["error"]
                message = error.get("message") if is_mapping(error) else None
                raise openai.APIError(message or "An error occurred during streaming",
                                      request=_REQUEST, body=error)
            event = construct_type(type_=ResponseStreamEvent, value=data)
            for out in state.handle_event(event):
                if out.type in TERMINAL:
                    run.terminal = out
                elif out.type == "error":
                    run.errors.append(out)
    except Exception as exc:  # noqa: BLE001 - what the SDK raised is the result
        run.exception = exc
    run.final = state._completed_response
    return run


def sdk_validates(events: list) -> None:
    """Every event the SDK has a model for passes its strict validation."""
    for e in numbered(events):
        validate_type(type_=ResponseStreamEvent, value=e)


# ---------------------------------------------------------------------------
# our side, and the comparison
# ---------------------------------------------------------------------------

def ours(body: bytes, cuts=(), buffer_size: int | None = None):
    dec = OpenAIResponsesDecoder(buffer_size) if buffer_size else OpenAIResponsesDecoder()
    events = feed_split(dec, body, list(cuts))
    return dec.message, events


def sdk_view(response) -> tuple[list, str | None]:
    """The SDK Response's output items as comparable tuples, and its refusal."""
    items, refusal = [], []
    for item in response.output:
        if item.type == "message":
            for c in item.content:
                if c.type == "output_text":
                    if c.text:
                        items.append(("text", c.text))
                elif c.type == "refusal":
                    refusal.append(c.refusal)
        elif item.type == "reasoning":
            got = [("thinking", item.id, i, s.text) for i, s in enumerate(item.summary) if s.text]
            text = "".join(c.text for c in item.content or [])
            if text:
                got.append(("thinking", item.id, None, text))
            items += got or [("thinking", item.id, None, "")]
        elif item.type == "function_call":
            items.append(("call", item.call_id, item.name, item.arguments, item.id))
        else:
            items.append(("other", item.type, getattr(item, "id", None)))
    return items, ("".join(refusal) if refusal else None)


def our_view(msg) -> list:
    items = []
    for p in msg.parts:
        if isinstance(p, TextPart):
            if p.text:
                items.append(("text", p.text))
        elif isinstance(p, ThinkingPart):
            items.append(("thinking", p.item_id, p.summary_index, p.text))
        elif isinstance(p, ToolCall):
            items.append(("call", p.id, p.name, p.arguments, p.item_id))
        elif isinstance(p, OtherPart):
            items.append(("other", p.type, json.loads(p.raw).get("id")))
        else:
            raise AssertionError(f"unexpected part {p!r}")
    return items


def compare(msg, response) -> None:
    """Our Message against the SDK's Response, field by field."""
    assert msg.id == response.id
    assert msg.model == response.model
    items, refusal = sdk_view(response)
    assert our_view(msg) == items
    assert msg.refusal == refusal
    calls = [i for i in response.output if i.type == "function_call"]
    if response.status == "completed":
        assert msg.raw_finish_reason == "completed"
        assert msg.finish_reason is (FinishReason.TOOL_CALLS if calls else FinishReason.STOP)
    elif response.status == "incomplete":
        assert msg.raw_finish_reason == response.incomplete_details.reason
        assert msg.finish_reason is normalise_finish(response.incomplete_details.reason)
    else:
        assert response.status == "failed"
        assert msg.finish_reason is FinishReason.ERROR
    assert len(msg.tool_calls) == len(calls)
    for ours_call, theirs in zip(msg.tool_calls, calls):
        # arguments stay a string end to end; parsed only when complete. A
        # call not "completed" (cut short, or the SDK's in-progress snapshot
        # of one never done) is TRUNCATED, except that response.completed
        # completes a call whose done item never came
        if theirs.status != "completed" and not (response.status == "completed"
                                                 and theirs.status == "in_progress"):
            assert ours_call.error is ArgumentsError.TRUNCATED and ours_call.parsed is None
        else:
            assert ours_call.complete and ours_call.error is None
            assert ours_call.parsed == json.loads(theirs.arguments)
    u = response.usage
    if u is None:
        assert msg.usage is None
    else:
        assert (msg.usage.input_tokens, msg.usage.output_tokens, msg.usage.total_tokens,
                msg.usage.cache_read_tokens, msg.usage.reasoning_tokens) == (
            u.input_tokens, u.output_tokens, u.total_tokens,
            u.input_tokens_details.cached_tokens, u.output_tokens_details.reasoning_tokens)
    got = [c for c in msg.citations]
    want = [a.to_dict() for i in response.output if i.type == "message"
            for c in i.content if c.type == "output_text" for a in c.annotations]
    assert got == want


def check_events(msg, events: list) -> None:
    """The event stream tells the same story as the message."""
    assert not [e for e in events if isinstance(e, MessageIncomplete)]
    # deltas joined per item and part, in output_index order, are the parts
    text: dict = {}
    for e in events:
        if isinstance(e, rec.TextDelta):
            text[(e.index, e.content_index, e.item_id)] = text.get(
                (e.index, e.content_index, e.item_id), "") + e.text
    assert "".join(text[k] for k in sorted(text, key=lambda k: k[:2])) == msg.text
    thinking: dict = {}
    for e in events:
        if isinstance(e, rec.ReasoningDelta):
            k = (e.index, e.summary_index is None, e.summary_index or 0, e.item_id)
            thinking[k] = thinking.get(k, "") + e.text
    assert "".join(thinking[k] for k in sorted(thinking, key=lambda k: k[:3])) == msg.reasoning
    args: dict = {}
    for e in events:
        if isinstance(e, ev.ToolCallDelta):
            args[e.call] = args.get(e.call, "") + e.text
    mismatched = {w.detail.split(":")[0]
                  for w in warnings_of(events, WarningCode.ARGUMENTS_MISMATCH)}
    for i, call in enumerate(msg.tool_calls):
        if f"call {i}" not in mismatched:
            assert args.get(i, "") == call.arguments
    started = [e for e in events if isinstance(e, ev.ToolCallOpened)]
    done = [e for e in events if isinstance(e, ev.ToolCallDone)]
    assert [e.call for e in started] == list(range(len(msg.tool_calls)))
    assert sorted(e.call for e in done) == list(range(len(msg.tool_calls)))
    by_call = {e.call: e.tool_call for e in done}
    assert [by_call[i] for i in range(len(done))] == msg.tool_calls
    finished = [e for e in events if isinstance(e, ev.MessageFinished)]
    assert len(finished) == 1 and finished[0].reason is msg.finish_reason
    assert finished[0].raw_reason == msg.raw_finish_reason
    # every ToolCallDone comes before MessageFinished
    assert all(events.index(d) < events.index(finished[0]) for d in done)


def sdk_result(run: SDKRun):
    """The Response to compare with: the final one, or the one the terminal
    incomplete / failed event carries (get_final_response() raises there)."""
    if run.final is not None:
        return run.final
    assert run.terminal is not None, run.exception
    return run.terminal.response


def differential(events: list, ascii_only: bool = False, every_split: bool = True,
                 validate: bool = True):
    """The full check of one hand-written stream; returns (message, events)."""
    if validate:
        sdk_validates(events)
    body = body_of(events, ascii_only)
    run = sdk_run([body])
    assert run.exception is None, run.exception
    # the SDK itself does not depend on the reads
    run1 = sdk_run([body[i:i + 1] for i in range(len(body))])
    assert (run1.final or run1.terminal.response).to_dict() == sdk_result(run).to_dict()
    want = sdk_result(run)
    msg, out = ours(body)
    compare(msg, want)
    check_events(msg, out)
    # every split point of a short stream; a long one at ~700 points, an odd
    # stride apart so that the cuts land at every kind of position
    step = 1 if every_split and len(body) <= 5000 else len(body) // 700 | 1
    for k in range(1, len(body), step):
        m, o = ours(body, [k])
        assert m == msg, k
        assert split_view(o) == split_view(out), k
    m, o = ours(body, range(1, len(body)))  # byte at a time
    assert m == msg
    assert merged(o) == merged(out)
    return msg, out


_MERGE = {rec.TextDelta: lambda e: (e.index, e.content_index, e.item_id),
          rec.ReasoningDelta: lambda e: (e.index, e.summary_index, e.item_id),
          rec.RefusalDelta: lambda e: (e.index, e.content_index, e.item_id),
          ev.ToolCallDelta: lambda e: (e.call, e.choice)}


def merged(events: list) -> list:
    """Events with neighbouring deltas of one kind and key joined: the core
    merges the pieces of one read, so record boundaries follow the reads."""
    out: list = []
    for e in events:
        key = _MERGE.get(type(e))
        if key and out and type(out[-1]) is type(e) and key(out[-1]) == key(e):
            prev = out[-1]
            out[-1] = type(e)(**{**{f: getattr(prev, f) for f in prev.__slots__},
                                 "text": prev.text + e.text})
        else:
            out.append(e)
    return out


def warnings_of(events, code=None):
    return [e for e in events if isinstance(e, DecodeWarning) and (code is None or e.code is code)]


# ---------------------------------------------------------------------------
# (a) hand-written streams, one per quirk
# ---------------------------------------------------------------------------

CJK = ["你好，", "世界！", "日本語の", "テキスト、", "한국어 ", "😀👍🏽", " 👨‍👩‍👧 done"]


@pytest.mark.parametrize("ascii_only", [False, True], ids=["utf8", "escaped"])
def test_cjk_emoji_text(ascii_only):
    """Raw UTF-8 on the wire (split mid-character by the every-split check)
    and \\uXXXX escapes with surrogate pairs decode to the same text."""
    items = [message_item(0, 1, [("output_text", CJK)])]
    events = head() + interleave(items, []) + [
        {"type": "response.completed",
         "response": response_obj("completed", [i.final for i in items], usage_obj())}]
    msg, out = differential(events, ascii_only)
    assert msg.text == "".join(CJK)
    assert not warnings_of(out)


def out_of_order_stream(drop_output: bool = False) -> list:
    items = [reasoning_item(0, 1, [["Plan: ", "look up both cities."]]),
             call_item(1, 2, "get_weather", ['{"city":', '"Oslo"', "}"]),
             call_item(2, 3, "get_weather", ['{"city":"', "Tōkyō", '","unit":"c"}']),
             message_item(3, 4, [("output_text", ["Checking ", "both."])])]
    r, c1, c2, m = (i.events for i in items)
    # added in order; deltas interleaved; done 2, 3, 1, 0 (out of order)
    events = (head() + r[:-1] + c1[:1] + c2[:1] + c1[1:2] + c2[1:3] + m[:3] + c1[2:3]
              + c2[3:] + m[3:-1] + m[-1:] + c1[3:] + r[-1:])
    final = [i.final for i in items]
    return events + [{"type": "response.completed",
                      "response": response_obj("completed", final, usage_obj(),
                                               drop_output=drop_output)}]


@pytest.mark.parametrize("drop_output", [False, True], ids=["api-output", "sdk-rebuilt"])
def test_items_complete_out_of_order(drop_output):
    """Deltas of four items interleave and the items complete in the order
    2, 3, 1, 0: parts follow output_index, each delta its item id. With the
    response's output dropped the SDK rebuilds it from output_item.done."""
    events = out_of_order_stream(drop_output)
    msg, out = differential(events, validate=not drop_output)
    assert [c.name for c in msg.tool_calls] == ["get_weather", "get_weather"]
    assert [c.parsed for c in msg.tool_calls] == [{"city": "Oslo"},
                                                  {"city": "Tōkyō", "unit": "c"}]
    assert [type(p).__name__ for p in msg.parts] == ["ThinkingPart", "ToolCall", "ToolCall",
                                                     "TextPart"]
    # ToolCallDone in completion order: call 1 (output 2) before call 0
    assert [e.call for e in out if isinstance(e, ev.ToolCallDone)] == [1, 0]
    assert not warnings_of(out)


def test_several_summary_indexes():
    items = [reasoning_item(0, 1, [["**Reading** ", "the question"], ["Then ", "answer."],
                                   ["Third ", "summary 😀"]]),
             message_item(1, 2, [("output_text", ["42"])])]
    events = head() + interleave(items, []) + [
        {"type": "response.completed",
         "response": response_obj("completed", [i.final for i in items], usage_obj())}]
    msg, _ = differential(events)
    thinking = [p for p in msg.parts if isinstance(p, ThinkingPart)]
    assert [(p.summary_index, p.item_id) for p in thinking] == [(0, hid("rs", 1)),
                                                                (1, hid("rs", 1)),
                                                                (2, hid("rs", 1))]


def test_reasoning_text_and_empty_reasoning():
    """reasoning_text deltas (gpt-oss) give a ThinkingPart without a
    summary_index; a reasoning item with no text at all keeps its id."""
    items = [reasoning_item(0, 1, [], content=["The user ", "wants ", "x."]),
             reasoning_item(1, 2, []),
             message_item(2, 3, [("output_text", ["ok"])])]
    events = head() + interleave(items, []) + [
        {"type": "response.completed",
         "response": response_obj("completed", [i.final for i in items], usage_obj())}]
    msg, _ = differential(events)
    first, second = msg.parts[0].opaque, msg.parts[1].opaque
    assert msg.parts[0] == ThinkingPart("The user wants x.", item_id=hid("rs", 1), opaque=first)
    assert msg.parts[1] == ThinkingPart("", item_id=hid("rs", 2), opaque=second)
    # each reasoning item's output_item.done whole, its bytes as they came
    body = body_of(events)
    assert first.encode() in body and second.encode() in body
    assert json.loads(first) == items[0].final and json.loads(second) == items[1].final


ARGS = '{"path":"/tmp/a \\"b\\".txt","note":"日本 😀\\u2028","n":[1,2.5,-3e2],"ok":true}'


def test_arguments_in_many_deltas():
    """One character per delta, escapes and surrogate pairs split apart on
    the arguments' own level: the string is kept exactly."""
    items = [call_item(0, 1, "write_file", list(ARGS))]
    events = head() + interleave(items, []) + [
        {"type": "response.completed",
         "response": response_obj("completed", [i.final for i in items], usage_obj())}]
    msg, out = differential(events, every_split=False)
    (call,) = msg.tool_calls
    assert call.arguments == ARGS and call.parsed == json.loads(ARGS)
    assert call.item_id == hid("fc", 1) and call.id.startswith("call_01")
    # the core merges neighbouring deltas of one read: fewer, longer pieces
    assert "".join(e.text for e in out if isinstance(e, ev.ToolCallDelta)) == ARGS


def test_multiple_content_parts_refusal_and_annotations():
    note = {"type": "url_citation", "start_index": 0, "end_index": 5, "title": "Oslo",
            "url": "https://example.org/oslo"}
    items = [message_item(0, 1, [("output_text", ["Oslo ", "is cold."]),
                                 ("refusal", ["I can't ", "help with that."]),
                                 ("output_text", [" Bye."])], annotations={0: [note]})]
    events = head() + interleave(items, []) + [
        {"type": "response.completed",
         "response": response_obj("completed", [i.final for i in items], usage_obj())}]
    msg, out = differential(events)
    assert msg.text == "Oslo is cold. Bye."
    assert msg.refusal == "I can't help with that."
    assert msg.citations == [note]
    assert len([e for e in out if isinstance(e, rec.Citation)]) == 1


@pytest.mark.parametrize("drop_output", [False, True], ids=["api-output", "sdk-rebuilt"])
def test_response_incomplete(drop_output):
    """max_output_tokens: the text stops, the call's done item says
    "incomplete" with a prefix of its arguments: the call is TRUNCATED with
    exactly that string; LENGTH with the raw reason."""
    items = [message_item(0, 1, [("output_text", ["The answer ", "is"])], status="incomplete"),
             call_item(1, 2, "search", ['{"q":"oslo', " weath"], status="incomplete")]
    final = [i.final for i in items]
    events = head() + interleave(items, []) + [
        {"type": "response.incomplete",
         "response": response_obj("incomplete", final, usage_obj(out=16),
                                  incomplete={"reason": "max_output_tokens"},
                                  drop_output=drop_output)}]
    msg, out = differential(events, validate=not drop_output)
    assert msg.finish_reason is FinishReason.LENGTH
    assert msg.raw_finish_reason == "max_output_tokens"
    (call,) = msg.tool_calls
    assert call.arguments == '{"q":"oslo weath' and call.error is ArgumentsError.TRUNCATED


def test_response_incomplete_content_filter_with_open_call():
    """An incomplete response whose call never got its done item: TRUNCATED
    from the deltas; content_filter -> CONTENT_FILTER."""
    items = [call_item(0, 1, "search", ['{"q":', '"x'], with_done=False)]
    events = head() + interleave(items, []) + [
        {"type": "response.incomplete",
         "response": response_obj("incomplete", drop_output=True,
                                  incomplete={"reason": "content_filter"})}]
    body = body_of(events)
    run = sdk_run([body])
    assert run.exception is None
    msg, out = ours(body)
    compare(msg, run.terminal.response)  # the SDK's in-progress snapshot of the call
    assert msg.finish_reason is FinishReason.CONTENT_FILTER
    assert msg.tool_calls[0].arguments == '{"q":"x'


@pytest.mark.parametrize("drop_output", [False, True], ids=["api-output", "sdk-rebuilt"])
def test_response_failed(drop_output):
    """response.failed: its error object arrives as a ProviderError before
    MessageFinished(ERROR); what had streamed is kept, the open call TRUNCATED."""
    items = [message_item(0, 1, [("output_text", ["Partial ", "answer"])]),
             call_item(1, 2, "search", ['{"q":', '"x"}'], with_done=False)]
    error = {"code": "server_error", "message": "The server had an error while processing."}
    events = head() + interleave(items, []) + [
        {"type": "response.failed",
         "response": response_obj("failed", [items[0].final, {**items[1].final,
                                                             "status": "incomplete"}],
                                  error=error, drop_output=drop_output)}]
    msg, out = differential(events, validate=not drop_output)
    (perr,) = [e for e in out if isinstance(e, ProviderError)]
    assert (perr.type, perr.message) == ("server_error", error["message"])
    assert msg.finish_reason is FinishReason.ERROR and msg.raw_finish_reason == "failed"
    assert events_order(out, ProviderError, ev.MessageFinished)
    assert msg.tool_calls[0].error is ArgumentsError.TRUNCATED


def events_order(out, first, second) -> bool:
    a = [i for i, e in enumerate(out) if isinstance(e, first)]
    b = [i for i, e in enumerate(out) if isinstance(e, second)]
    return bool(a) and bool(b) and max(a) < min(b)


def test_error_event_then_close():
    """An `error` event after HTTP 200, then the body ends. The SDK fires a
    ResponseErrorEvent and has no final response (get_final_response()
    raises RuntimeError); we pass a ProviderError through, keep the partial
    message and end with MessageIncomplete."""
    items = [message_item(0, 1, [("output_text", ["Hal", "f"])])]
    events = head() + items[0].events[:4] + [
        {"type": "error", "code": "rate_limit_exceeded", "message": "Rate limit reached",
         "param": None}]
    sdk_validates(events)
    body = body_of(events)
    run = sdk_run([body])
    assert run.exception is None and run.final is None and run.terminal is None
    (sdk_err,) = run.errors
    msg, out = ours(body)
    (perr,) = [e for e in out if isinstance(e, ProviderError)]
    assert (perr.type, perr.message) == (sdk_err.code, sdk_err.message)
    assert json.loads(perr.raw)["code"] == sdk_err.code
    assert isinstance(out[-1], MessageIncomplete)
    assert msg.text == "Half" and msg.finish_reason is None


@pytest.mark.parametrize("code, want", [("rate_limit_exceeded", "rate_limit_exceeded"),
                                         (429, "429"), (None, "error")],
                         ids=["code", "code-number", "code-null"])
def test_error_event_code_is_the_type(code, want):
    """The flat error event's `type` only says "error": its `code` names the
    error (a number as written; with none the type stays "error")."""
    event = {"type": "error", "code": code, "message": "slow down", "param": None}
    _, out = ours(body_of([event]))
    (perr,) = [e for e in out if isinstance(e, ProviderError)]
    assert (perr.type, perr.message) == (want, "slow down")
    assert json.loads(perr.raw) == {**event, "sequence_number": 0}
    assert not warnings_of(out)


def test_error_event_nested():
    """`{"type": "error", "error": {...}}` (older servers and proxies): the
    SDK's legacy stream mode raises APIError on any top-level `error` and
    the stream is lost; we report it and keep decoding."""
    events = head() + [{"type": "error", "error": {"type": "server_error", "code": None,
                                                   "message": "overloaded"}}]
    body = body_of(events)
    run = sdk_run([body])
    assert isinstance(run.exception, openai.APIError)
    msg, out = ours(body)
    (perr,) = [e for e in out if isinstance(e, ProviderError)]
    assert (perr.type, perr.message) == ("server_error", "overloaded")
    assert msg.id == RESP_ID and isinstance(out[-1], MessageIncomplete)


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # SDK to_dict, unknown item
def test_unknown_item_and_event_types():
    """web_search_call (the SDK knows it, the core does not) and an invented
    item and event type: OtherPart + UNKNOWN_ITEM_TYPE, UNKNOWN_EVENT passed
    through, decoding goes on."""
    future = {"id": "fx_01abc", "type": "future_tool_call", "status": "completed",
              "payload": {"k": [1, 2]}}
    items = [web_search_item(0, 1),
             Item([{"type": "response.output_item.added", "output_index": 1,
                    "item": {**future, "status": "in_progress"}},
                   {"type": "response.future_tool_call.progress", "item_id": "fx_01abc",
                    "output_index": 1, "percent": 50},
                   {"type": "response.output_item.done", "output_index": 1, "item": future}],
                  future),
             message_item(2, 3, [("output_text", ["Oslo: ", "-3 °C"])])]
    events = head() + interleave(items, []) + [
        {"type": "response.completed",
         "response": response_obj("completed", [i.final for i in items], usage_obj())}]
    sdk_validates(items[0].events + items[2].events)
    msg, out = differential(events, validate=False)
    others = [p for p in msg.parts if isinstance(p, OtherPart)]
    assert [p.type for p in others] == ["web_search_call", "future_tool_call"]
    assert json.loads(others[1].raw) == future  # the done item, carried through
    unknown_events = [w.detail and json.loads(w.raw)["type"]
                      for w in warnings_of(out, WarningCode.UNKNOWN_EVENT)]
    assert unknown_events == ["response.web_search_call.in_progress",
                              "response.web_search_call.searching",
                              "response.web_search_call.completed",
                              "response.future_tool_call.progress"]
    assert [w.detail for w in warnings_of(out, WarningCode.UNKNOWN_ITEM_TYPE)] == [
        "web_search_call", "future_tool_call"]
    assert msg.text == "Oslo: -3 °C"
    # the SDK builds an unknown event into some other event model: harmless
    # here (its accumulator only looks at .type), but not a faithful object
    odd = construct_type(type_=ResponseStreamEvent, value=items[1].events[1])
    assert odd.type == "response.future_tool_call.progress"
    assert type(odd).__name__ == "ResponseAudioDeltaEvent"


def test_arguments_mismatch_done_wins():
    """output_item.done's arguments differ from the joined deltas: done is
    authoritative (so is the SDK's final output), with ARGUMENTS_MISMATCH."""
    items = [call_item(0, 1, "f", ['{"a":', "1}"], done_args='{"a":2}')]
    events = head() + interleave(items, []) + [
        {"type": "response.completed",
         "response": response_obj("completed", [items[0].final], usage_obj(),
                                   drop_output=True)}]
    msg, out = differential(events, validate=False)
    assert msg.tool_calls[0].arguments == '{"a":2}' and msg.tool_calls[0].parsed == {"a": 2}
    assert len(warnings_of(out, WarningCode.ARGUMENTS_MISMATCH)) == 1


def test_completed_without_done_items():
    """A server that never sends output_item.done (some compatible servers):
    calls complete at response.completed from their deltas. With the output
    in response.completed the SDK agrees; without it the SDK raises
    "Cannot complete response with unfinished output items" although every
    delta arrived: ours is still the complete answer."""
    items = [call_item(0, 1, "f", ['{"a":', '"b"}'], with_done=False),
             message_item(1, 2, [("output_text", ["hi"])])]
    items[1].events.pop()  # no done for the message either
    final = [items[0].final, items[1].final]
    events = head() + interleave(items, []) + [
        {"type": "response.completed", "response": response_obj("completed", final,
                                                                usage_obj())}]
    msg, _ = differential(events)
    assert msg.tool_calls[0].parsed == {"a": "b"} and msg.tool_calls[0].complete
    events[-1] = {"type": "response.completed",
                  "response": response_obj("completed", usage=usage_obj(), drop_output=True)}
    run = sdk_run([body_of(events)])
    assert isinstance(run.exception, RuntimeError)
    msg2, out2 = ours(body_of(events))
    assert our_view(msg2) == our_view(msg) and not warnings_of(out2)


def test_delta_before_added():
    """A delta whose item was never added: the SDK raises RuntimeError
    ("Received a content event ... before receiving its output item"); we
    warn UNKNOWN_BLOCK once, create the item and keep its text."""
    iid = hid("msg", 1)
    events = head() + [
        {"type": "response.output_text.delta", "item_id": iid, "output_index": 0,
         "content_index": 0, "delta": "early ", "logprobs": []},
        {"type": "response.output_text.delta", "item_id": iid, "output_index": 0,
         "content_index": 0, "delta": "text", "logprobs": []},
        {"type": "response.completed", "response": response_obj("completed")}]
    run = sdk_run([body_of(events)])
    assert isinstance(run.exception, RuntimeError)
    msg, out = ours(body_of(events))
    assert msg.text == "early text"
    assert len(warnings_of(out, WarningCode.UNKNOWN_BLOCK)) == 1


def test_lifecycle_events_and_keepalives():
    """response.queued / in_progress repeat the meta; comments are skipped."""
    items = [message_item(0, 1, [("output_text", ["a"])])]
    events = (head()[:1] + [{"type": "response.queued", "response": response_obj("queued")}]
              + head()[1:] + interleave(items, []) + [
                  {"type": "response.completed",
                   "response": response_obj("completed", [items[0].final], usage_obj())}])
    sdk_validates(events)
    body = b": keep-alive\n\n" + body_of(events).replace(b"\n\nevent:", b"\n\n: ping\n\nevent:")
    run = sdk_run([body])
    msg, out = ours(body)
    compare(msg, run.final)
    assert msg.text == "a" and msg.id == RESP_ID and msg.model == MODEL
    assert not warnings_of(out)


# ---------------------------------------------------------------------------
# (a) hypothesis: valid streams, random splits
# ---------------------------------------------------------------------------

_text = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=24),
    st.sampled_from(["你好世界", "😀👍🏽", "\u2028\u0085\r\n", '"\\', "é", "\x00\x1f", " "]))

_json_value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), _text),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(_text, inner, max_size=3)),
    max_leaves=6)


def _pieces(draw, text: str) -> list[str]:
    if len(text) < 2:
        return [text]
    cuts = sorted(set(draw(st.lists(st.integers(1, len(text) - 1), max_size=6))))
    return [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]


@st.composite
def streams(draw, max_items: int = 5, lifecycle: bool = True):
    kinds = draw(st.lists(st.sampled_from(["message", "reasoning", "call", "refusal", "other"]),
                          max_size=max_items))
    items = []
    for idx, kind in enumerate(kinds):
        if kind == "message":
            items.append(message_item(idx, idx, [("output_text", _pieces(draw, draw(_text)))]))
        elif kind == "reasoning":
            n = draw(st.integers(0, 3))
            items.append(reasoning_item(idx, idx, [_pieces(draw, draw(_text)) for _ in range(n)]))
        elif kind == "refusal":
            items.append(message_item(idx, idx, [("refusal", _pieces(draw, draw(_text)))]))
        elif kind == "other":
            items.append(web_search_item(idx, idx))
        else:
            args = json.dumps(draw(st.dictionaries(_text, _json_value, max_size=4)),
                              ensure_ascii=draw(st.booleans()))
            items.append(call_item(idx, idx, draw(st.sampled_from(["get_weather", "run", "f"])),
                                   _pieces(draw, args)))
    choices = draw(st.lists(st.integers(0, 1000), max_size=60))
    u = draw(st.tuples(*[st.integers(0, 10**6)] * 4))
    drop = draw(st.booleans())
    end = draw(st.sampled_from(["completed", "completed", "completed", "incomplete"]))
    reason = {"reason": "max_output_tokens"} if end == "incomplete" else None
    events = (head() if lifecycle else head()[:1]) + interleave(items, choices) + [
        {"type": f"response.{end}",
         "response": response_obj(end, [i.final for i in items], usage_obj(*u),
                                  incomplete=reason, drop_output=drop)}]
    return events, draw(st.booleans())


def expected_warnings(events) -> set:
    """Warnings a valid generated stream may give: web_search_call items."""
    if any(e.get("item", {}).get("type") == "web_search_call" for e in events):
        return {WarningCode.UNKNOWN_ITEM_TYPE, WarningCode.UNKNOWN_EVENT}
    return set()


@settings(max_examples=scaled(80), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(streams(), st.data())
def test_generated_streams_against_sdk(stream, data):
    events, ascii_only = stream
    body = body_of(events, ascii_only)
    cuts = data.draw(cuts_for(len(body)))
    chunks, start = [], 0
    for c in sorted(set(cuts)):
        chunks.append(body[start:c])
        start = c
    chunks.append(body[start:])
    run = sdk_run(chunks)
    assert run.exception is None, run.exception
    msg, out = ours(body, cuts)
    compare(msg, sdk_result(run))
    check_events(msg, out)
    assert {w.code for w in warnings_of(out)} <= expected_warnings(events)


@settings(max_examples=scaled(5), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(streams(max_items=2, lifecycle=False))
def test_generated_short_streams_every_split(stream):
    """Short generated streams: every single split point gives the result
    of the whole body, which is the SDK's."""
    events, ascii_only = stream
    body = body_of(events, ascii_only)
    msg, out = ours(body)
    compare(msg, sdk_result(sdk_run([body])))
    for k in range(1, len(body)):
        m, o = ours(body, [k])
        assert m == msg, k
        assert merged(o) == merged(out), k


@settings(max_examples=scaled(40), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(streams(), st.data())
def test_generated_streams_truncated(stream, data):
    """A random cut: MessageIncomplete and a consistent prefix, or the clean
    result when the cut is after the terminal event."""
    events, ascii_only = stream
    body = body_of(events, ascii_only)
    full, _ = ours(body)
    cut = data.draw(st.integers(0, len(body)))
    check_truncated(body, cut, full, terminal_offset(body))


# ---------------------------------------------------------------------------
# (b) faults: truncation at every byte offset
# ---------------------------------------------------------------------------

def is_prefix_part(part, whole) -> bool:
    if type(part) is not type(whole):
        return False
    if isinstance(part, TextPart):
        return whole.text.startswith(part.text)
    if isinstance(part, ThinkingPart):
        if part.item_id != whole.item_id:
            return False
        if part.text == "" and part.summary_index is None:
            return True  # a reasoning item with no text yet
        return part.summary_index == whole.summary_index and whole.text.startswith(part.text)
    if isinstance(part, ToolCall):
        if (part.id, part.name, part.item_id) != (whole.id, whole.name, whole.item_id):
            return False
        if part.complete:
            return part == whole
        return part.error is ArgumentsError.TRUNCATED and whole.arguments.startswith(
            part.arguments) and part.parsed is None
    if isinstance(part, OtherPart):
        return part.type == whole.type
    return False


def check_truncated(body: bytes, cut: int, full, end: int) -> None:
    dec = OpenAIResponsesDecoder()
    out = dec.feed(body[:cut]) + dec.close()
    msg = dec.message
    if cut >= end:
        assert not [e for e in out if isinstance(e, MessageIncomplete)]
        assert msg == full
        return
    assert isinstance(out[-1], MessageIncomplete), cut
    assert sum(isinstance(e, MessageIncomplete) for e in out) == 1
    assert msg.finish_reason is None
    # the partial message aligns, in order, with the full one
    j = 0
    for part in msg.parts:
        while j < len(full.parts) and not is_prefix_part(part, full.parts[j]):
            j += 1
        assert j < len(full.parts), (cut, part)
        j += 1
    # every call was reported done exactly once, complete or TRUNCATED
    done = sorted((e for e in out if isinstance(e, ev.ToolCallDone)), key=lambda e: e.call)
    assert [e.tool_call for e in done] == msg.tool_calls
    assert all(c.complete or c.error is ArgumentsError.TRUNCATED for c in msg.tool_calls)
    # the core reports what it held back: a partial line or an event's data;
    # a lone `event:` line holds nothing (such an event dispatches nothing)
    prefix = body[:cut]
    pending = prefix[prefix.rfind(b"\n\n") + 2:] if b"\n\n" in prefix else prefix
    held = bool(pending) and not (pending.endswith(b"\n") and all(
        line.startswith(b"event:") for line in pending[:-1].split(b"\n")))
    assert any(isinstance(e, Truncated) for e in out) == held, cut


def test_truncation_at_every_byte_offset():
    events = out_of_order_stream()
    body = body_of(events)
    full, _ = ours(body)
    end = terminal_offset(body)
    assert end == len(body)
    for cut in range(len(body) + 1):
        check_truncated(body, cut, full, end)


def test_truncation_every_offset_with_trailing_data():
    """A cut after the terminal event gives the clean result even when more
    bytes (a stray event) follow: they are AFTER_END warnings."""
    items = [call_item(0, 1, "f", ['{"x":', '"日本"}']),
             message_item(1, 2, [("output_text", ["é😀", "z"])])]
    events = head() + interleave(items, [1, 0, 1]) + [
        {"type": "response.completed",
         "response": response_obj("completed", [i.final for i in items], usage_obj())}]
    body = body_of(events)
    end = len(body)
    body += sse({"type": "response.output_text.delta", "item_id": hid("msg", 2),
                 "output_index": 1, "content_index": 0, "delta": "late"})
    full, out = ours(body[:end])
    for cut in range(len(body) + 1):
        check_truncated(body, cut, full, end)
    msg, out = ours(body)
    assert msg == full
    assert [w.detail for w in warnings_of(out, WarningCode.AFTER_END)] == ["TextDelta"]


def test_message_mid_stream_does_not_freeze_calls():
    """Reading .message while a call is open shows it as it stands (not
    complete, no error yet), and the call still completes later."""
    items = [call_item(0, 1, "f", ['{"a"', ":1}"])]
    body = body_of(head() + items[0].events + [
        {"type": "response.completed",
         "response": response_obj("completed", [items[0].final])}])
    dec = OpenAIResponsesDecoder()
    mid = body.index(b'"delta":":1}"')
    dec.feed(body[:mid])
    assert dec.message.tool_calls[0] == ToolCall(items[0].final["call_id"], "f", '{"a"',
                                                 item_id=hid("fc", 1))
    out = dec.feed(body[mid:]) + dec.close()
    assert dec.message.tool_calls[0].parsed == {"a": 1}
    assert [e.tool_call.parsed for e in out if isinstance(e, ev.ToolCallDone)] == [{"a": 1}]


# ---------------------------------------------------------------------------
# (b) faults: malformed chunks, wrong-type fields (the truth table's rows)
# ---------------------------------------------------------------------------

IID = hid("msg", 1)
FID = hid("fc", 2)


def base_stream(*middle, end=None) -> list:
    """created, a message item 0 and a call item 1 (added), the `middle`
    events, both items' remaining events, completed."""
    msg = message_item(0, 1, [("output_text", ["Hello", " world"])])
    call = call_item(1, 2, "f", ['{"a":', "1}"])
    if end is None:
        end = {"type": "response.completed",
               "response": response_obj("completed", [msg.final, call.final], usage_obj())}
    return (head() + msg.events[:2] + call.events[:1] + list(middle) + msg.events[2:]
            + call.events[1:] + [end])


CLEAN_TEXT = "Hello world"


def text_delta(**kw) -> dict:
    e = {"type": "response.output_text.delta", "item_id": IID, "output_index": 0,
         "content_index": 0, "delta": "!", "logprobs": []}
    e.update(kw)
    return {k: v for k, v in e.items() if v is not ...}


def run_row(events: list):
    msg, out = ours(body_of(events))
    return msg, out, [(w.code, w.detail) for w in warnings_of(out)]


FT = WarningCode.FIELD_TYPE
MF = WarningCode.MISSING_FIELD


@dataclass
class Row:
    id: str
    events: list
    warnings: list          # [(code, detail)] expected, in order
    check: object = None    # extra assertions on (msg, out)


def _completed(**resp) -> dict:
    r = response_obj("completed", usage=usage_obj())
    r.update(resp)
    return {"type": "response.completed", "response": r}


def _usage(**u) -> dict:
    x = usage_obj()
    x.update(u)
    return _completed(usage=x)


# response.completed with an invalid UTF-8 byte in a field nobody reads
_BAD_UTF8_END = json.dumps(_completed(user="@"), separators=(",", ":")).encode().replace(
    b'"user":"@"', b'"user":"\xff"')

ROWS = [
    Row("bad-json", base_stream(b'{"type":"response.output_text.delta","delta":"x'),
        [(WarningCode.BAD_JSON, None)],
        lambda m, o: m.text == CLEAN_TEXT and m.tool_calls[0].parsed == {"a": 1}),
    Row("not-object", base_stream(b'["response.output_text.delta"]'),
        [(WarningCode.NOT_OBJECT, None)], lambda m, o: m.text == CLEAN_TEXT),
    Row("empty-data-line", base_stream(b""), [(WarningCode.BAD_JSON, None)],
        lambda m, o: m.text == CLEAN_TEXT
        and warnings_of(o)[0].json_status is rec.JSONStatus.EMPTY),
    Row("invalid-utf8", base_stream(
        b'{"type":"response.output_text.delta","item_id":"' + IID.encode()
        + b'","output_index":0,"content_index":0,"delta":"\xff!"}'),
        [(WarningCode.REPLACED_UTF8, None)], lambda m, o: m.text == "\ufffd!" + CLEAN_TEXT),
    Row("type-not-string", base_stream({"type": 7, "delta": "x"}), [(FT, "type")],
        lambda m, o: m.text == CLEAN_TEXT),
    Row("type-unknown", base_stream({"type": "response.audio.future", "delta": "x"}),
        [(WarningCode.UNKNOWN_EVENT, "response.audio.future")], lambda m, o: m.text == CLEAN_TEXT),
    Row("delta-not-string", base_stream(text_delta(delta=5)), [(FT, "delta")],
        lambda m, o: m.text == CLEAN_TEXT),
    Row("delta-empty", base_stream(text_delta(delta="")), [],
        lambda m, o: m.text == CLEAN_TEXT),
    Row("args-delta-not-string", base_stream(
        {"type": "response.function_call_arguments.delta", "item_id": FID, "output_index": 1,
         "delta": ["x"]}, {"type": "response.function_call_arguments.delta", "item_id": FID,
                           "output_index": 1, "delta": "{\"b\":0,"}),
        [(FT, "delta"), (WarningCode.ARGUMENTS_MISMATCH, None)],
        lambda m, o: m.tool_calls[0].arguments == '{"a":1}'),
    Row("item-id-not-string", base_stream(text_delta(item_id=9)), [(FT, "item_id")],
        lambda m, o: m.text == "!" + CLEAN_TEXT),
    Row("item-id-unknown", base_stream(text_delta(item_id="msg_other", output_index=5)),
        [(WarningCode.UNKNOWN_BLOCK, None)],
        lambda m, o: m.text == CLEAN_TEXT + "!" and len(m.parts) == 3),
    Row("output-index-not-int", base_stream(text_delta(output_index="0")),
        [(FT, "output_index")], lambda m, o: m.text == "!" + CLEAN_TEXT),
    Row("output-index-negative", base_stream(text_delta(output_index=-1)),
        [(FT, "output_index")], lambda m, o: m.text == "!" + CLEAN_TEXT),
    Row("content-index-not-int", base_stream(text_delta(content_index="0")),
        [(FT, "content_index")], lambda m, o: m.parts[0] == TextPart("!" + CLEAN_TEXT)),
    Row("summary-index-not-int", head() + [
        *reasoning_item(0, 1, [["a"]]).events[:-1],
        {"type": "response.reasoning_summary_text.delta", "item_id": hid("rs", 1),
         "output_index": 0, "summary_index": "1", "delta": "b"},
        reasoning_item(0, 1, [["a"]]).events[-1], _completed()],
        [(FT, "summary_index")],
        lambda m, o: m.parts == [ThinkingPart("a", item_id=hid("rs", 1), summary_index=0,
                                              opaque=m.parts[0].opaque),
                                 ThinkingPart("b", item_id=hid("rs", 1))]
        and json.loads(m.parts[0].opaque)["id"] == hid("rs", 1)),
    Row("item-not-object", head() + [
        {"type": "response.output_item.added", "output_index": 0, "item": "message"},
        text_delta(), _completed()],
        [(FT, "item"), (WarningCode.UNKNOWN_BLOCK, None)], lambda m, o: m.text == "!"),
    Row("item-type-absent", head() + [
        {"type": "response.output_item.added", "output_index": 0, "item": {"id": IID}},
        text_delta(), _completed()],
        [(MF, "item.type"), (WarningCode.UNKNOWN_BLOCK, None)], lambda m, o: m.text == "!"),
    Row("item-type-not-string", head() + [
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": IID, "type": ["message"]}}, text_delta(), _completed()],
        [(FT, "item.type"), (WarningCode.UNKNOWN_BLOCK, None)], lambda m, o: m.text == "!"),
    Row("item-type-unknown", head() + [
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": "x_1", "type": "x_future"}},
        {"type": "response.output_item.done", "output_index": 0,
         "item": {"id": "x_1", "type": "x_future", "v": 2}}, _completed()],
        [(WarningCode.UNKNOWN_ITEM_TYPE, "x_future")],
        lambda m, o: len(m.parts) == 1 and m.parts[0].type == "x_future"
        and json.loads(m.parts[0].raw)["v"] == 2),
    Row("item-id-field-not-string", head() + [
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": 5, "type": "function_call", "call_id": "c1", "name": "f",
                  "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "item_id": FID, "output_index": 0,
         "delta": "{}"}, _completed()],
        [(FT, "item.id")],
        lambda m, o: m.tool_calls[0].item_id == FID and m.tool_calls[0].parsed == {}),
    Row("item-call-id-not-string", head() + [
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": FID, "type": "function_call", "call_id": 1, "name": "f",
                  "arguments": ""}},
        {"type": "response.output_item.done", "output_index": 0,
         "item": {"id": FID, "type": "function_call", "call_id": "c1", "name": "f",
                  "arguments": "{}"}}, _completed()],
        [(FT, "item.call_id")],
        lambda m, o: m.tool_calls[0].id == "c1"
        and [e.id for e in o if isinstance(e, ev.ToolCallOpened)] == [None]),
    Row("item-name-not-string", head() + [
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": FID, "type": "function_call", "call_id": "c1", "name": 7,
                  "arguments": ""}},
        {"type": "response.output_item.done", "output_index": 0,
         "item": {"id": FID, "type": "function_call", "call_id": "c1", "name": "late",
                  "arguments": "{}"}}, _completed()],
        [(FT, "item.name")], lambda m, o: m.tool_calls[0].name == "late"),
    Row("item-arguments-not-string", head() + [
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": FID, "type": "function_call", "call_id": "c1", "name": "f",
                  "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "item_id": FID, "output_index": 0,
         "delta": '{"k":1}'},
        {"type": "response.output_item.done", "output_index": 0,
         "item": {"id": FID, "type": "function_call", "call_id": "c1", "name": "f",
                  "arguments": {"k": 1}}}, _completed()],
        [(FT, "item.arguments")], lambda m, o: m.tool_calls[0].arguments == '{"k":1}'),
    Row("done-never-added", head() + [
        {"type": "response.output_item.done", "output_index": 0,
         "item": {"id": FID, "type": "function_call", "call_id": "c1", "name": "f",
                  "arguments": '{"z":0}', "status": "completed"}}, _completed()],
        [(WarningCode.UNKNOWN_BLOCK, None)],
        lambda m, o: (m.tool_calls[0].id, m.tool_calls[0].name, m.tool_calls[0].parsed)
        == ("c1", "f", {"z": 0})),
    Row("done-status-incomplete", head() + call_item(0, 2, "f", ['{"a":'],
                                                     status="incomplete").events + [
        {"type": "response.incomplete", "response": response_obj(
            "incomplete", incomplete={"reason": "max_output_tokens"})}],
        [], lambda m, o: m.tool_calls[0].error is ArgumentsError.TRUNCATED
        and m.tool_calls[0].arguments == '{"a":' and m.finish_reason is FinishReason.LENGTH),
    Row("added-twice", base_stream({"type": "response.output_item.added", "output_index": 0,
                                    "item": {"id": IID, "type": "message", "content": [],
                                             "role": "assistant", "status": "in_progress"}}),
        [], lambda m, o: m.text == CLEAN_TEXT and len(m.parts) == 2),
    Row("added-out-of-order", head() + [
        *message_item(1, 1, [("output_text", ["second"])]).events,
        *message_item(0, 2, [("output_text", ["first "])]).events, _completed()],
        [], lambda m, o: m.text == "first second"),
    Row("output-index-absent-on-added", head() + [
        {"type": "response.output_item.added",
         "item": {"id": "msg_z", "type": "message", "content": [], "role": "assistant",
                  "status": "in_progress"}},
        {**text_delta(item_id="msg_z", delta="last"), "output_index": None},
        *message_item(0, 1, [("output_text", ["first "])]).events, _completed()],
        [], lambda m, o: m.text == "first last"),
    Row("annotation-not-object", base_stream(
        {"type": "response.output_text.annotation.added", "item_id": IID, "output_index": 0,
         "content_index": 0, "annotation_index": 0, "annotation": "cite"}),
        [(FT, "annotation")], lambda m, o: m.citations == []),
    Row("response-not-object-in-created", [{"type": "response.created", "response": [1]}]
        + base_stream()[2:], [(FT, "response")], lambda m, o: m.id == RESP_ID),
    *[Row(f"response-{how}-in-{name}", base_stream(end={"type": f"response.{name}", **body}),
          [(code, "response")],
          lambda m, o, name=name: m.finish_reason is {
              "completed": FinishReason.TOOL_CALLS, "incomplete": FinishReason.OTHER,
              "failed": FinishReason.ERROR}[name] and m.raw_finish_reason == name
          and m.tool_calls[0].complete)
      for name in ("completed", "incomplete", "failed")
      for how, body, code in (("not-object", {"response": 42}, FT), ("absent", {}, MF),
                              ("null", {"response": None}, MF))],
    Row("response-id-not-string", base_stream(end=_completed(id=5, model=None)),
        [(FT, "id")], lambda m, o: m.id == RESP_ID and m.model == MODEL),
    Row("response-model-not-string", base_stream(end=_completed(model={"m": 1})),
        [(FT, "model")], lambda m, o: m.model == MODEL),
    Row("usage-not-object", base_stream(end=_completed(usage=[1])),
        [(FT, "response.usage")], lambda m, o: m.usage is None),
    Row("usage-count-wrong", base_stream(end=_usage(input_tokens="5", output_tokens=-1,
                                                    total_tokens=2.5)),
        [(FT, "input_tokens"), (FT, "output_tokens"), (FT, "total_tokens")],
        lambda m, o: (m.usage.input_tokens, m.usage.output_tokens, m.usage.total_tokens,
                      m.usage.cache_read_tokens) == (None, None, None, 1024)),
    Row("usage-details-not-object", base_stream(end=_usage(input_tokens_details=3)),
        [(FT, "input_tokens_details")],
        lambda m, o: m.usage.cache_read_tokens is None and m.usage.input_tokens == 1200),
    Row("usage-cached-not-int", base_stream(end=_usage(input_tokens_details={
        "cached_tokens": "1", "cache_write_tokens": 0})),
        [(FT, "cached_tokens")], lambda m, o: m.usage.cache_read_tokens is None),
    Row("incomplete-details-string", base_stream(end={
        "type": "response.incomplete", "response": response_obj(
            "incomplete", incomplete="max_output_tokens")}),
        [(FT, "response.incomplete_details")], lambda m, o: m.finish_reason is FinishReason.OTHER
        and m.raw_finish_reason == "incomplete"),
    Row("incomplete-details-null", base_stream(end={
        "type": "response.incomplete", "response": response_obj("incomplete")}),
        [], lambda m, o: m.finish_reason is FinishReason.OTHER
        and m.raw_finish_reason == "incomplete"),
    Row("incomplete-reason-not-string", base_stream(end={
        "type": "response.incomplete", "response": response_obj(
            "incomplete", incomplete={"reason": 3})}),
        [(FT, "response.incomplete_details.reason")],
        lambda m, o: m.finish_reason is FinishReason.OTHER and m.raw_finish_reason == "incomplete"),
    Row("incomplete-reason-and-status-not-string", base_stream(end={
        "type": "response.incomplete", "response": {**response_obj(
            "incomplete", incomplete={"reason": 3}), "status": 4}}),
        [(FT, "response.incomplete_details.reason"), (FT, "response.status")],
        # no usable word in the body: the event type's own
        lambda m, o: m.finish_reason is FinishReason.OTHER and m.raw_finish_reason == "incomplete"),
    Row("status-not-string", base_stream(end=_completed(status=1)),
        [(FT, "response.status")],
        lambda m, o: m.finish_reason is FinishReason.TOOL_CALLS and m.raw_finish_reason == "completed"),
    Row("failed-error-not-object", base_stream(end={
        "type": "response.failed", "response": response_obj("failed", error="boom")}),
        [(FT, "response.error")], lambda m, o: m.finish_reason is FinishReason.ERROR
        and m.raw_finish_reason == "failed" and not [e for e in o if isinstance(e, ProviderError)]),
    Row("done-item-not-object", head() + call_item(0, 2, "f", ['{"a":', "1}"]).events[:-2] + [
        {"type": "response.output_item.done", "output_index": 0, "item": 5}, _completed()],
        [(FT, "item")], lambda m, o: m.tool_calls[0].parsed == {"a": 1}
        and m.tool_calls[0].complete),
    Row("usage-reasoning-not-int", base_stream(end=_usage(output_tokens_details={
        "reasoning_tokens": "7"})),
        [(FT, "reasoning_tokens")], lambda m, o: m.usage.reasoning_tokens is None
        and m.usage.output_tokens == 340),
    Row("error-member-not-object", base_stream({"type": "error", "error": "boom",
                                                "message": "upstream said no"}),
        [], lambda m, o: [(e.type, e.message) for e in o if isinstance(e, ProviderError)]
        == [("error", "upstream said no")] and m.text == CLEAN_TEXT),
    Row("invalid-utf8-in-terminal", base_stream(end=_BAD_UTF8_END),
        [(WarningCode.REPLACED_UTF8, None)],
        lambda m, o: m.finish_reason is FinishReason.TOOL_CALLS),
    # two text pieces after the end: one record fed whole, two split between
    # them; one warning for all that follows the end, however split
    Row("data-after-end", base_stream() + [text_delta(), text_delta(), _completed()],
        [(WarningCode.AFTER_END, "TextDelta")],
        lambda m, o: m.text == CLEAN_TEXT),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_field_rows(row):
    """One row of docs/truth-table-openai-responses.md each: the warnings
    (code and, where the core names one, the field path; None = the
    decoder's free-text detail) in order, the message, and a clean end."""
    msg, out, warns = run_row(row.events)
    body = body_of(row.events)
    assert_split_independent(OpenAIResponsesDecoder, body)
    assert len(warns) == len(row.warnings), warns
    for (code, detail), (want_code, want_detail) in zip(warns, row.warnings):
        assert code is want_code
        assert want_detail is None or detail == want_detail
    if row.check is not None:
        assert row.check(msg, out)
    assert sum(isinstance(e, ev.MessageFinished) for e in out) == 1
    assert not [e for e in out if isinstance(e, MessageIncomplete)]
    # a terminal event's own warnings come before its MessageFinished; only data
    # after the end follows it
    end = next(i for i, e in enumerate(out) if isinstance(e, ev.MessageFinished))
    assert all(e.code is WarningCode.AFTER_END for e in out[end:] if isinstance(e, DecodeWarning))


def _drop(event: dict, key: str, null: bool) -> dict:
    event = dict(event)
    if null:
        event[key] = None
    else:
        del event[key]
    return event


def _item_without_type(null: bool) -> dict:
    return {"type": "response.output_item.added", "output_index": 2,
            "item": _drop({"id": "msg_new", "type": "message"}, "type", null)}


_ARGS_DELTA = {"type": "response.function_call_arguments.delta", "item_id": FID,
               "output_index": 1, "delta": "{}"}
_SUMMARY_DELTA = {"type": "response.reasoning_summary_text.delta", "item_id": IID,
                  "output_index": 0, "summary_index": 0, "delta": "x"}
_REASONING_DELTA = {"type": "response.reasoning_text.delta", "item_id": IID, "output_index": 0,
                    "content_index": 0, "delta": "x"}
_REFUSAL_DELTA = {"type": "response.refusal.delta", "item_id": IID, "output_index": 0,
                  "content_index": 0, "delta": "x"}
_ADDED = {"type": "response.output_item.added", "output_index": 2,
          "item": {"id": "msg_new", "type": "message"}}
_ANNOTATION = {"type": "response.output_text.annotation.added", "item_id": IID,
               "output_index": 0, "content_index": 0, "annotation_index": 0,
               "annotation": {"type": "url_citation"}}

# every member a Responses event type needs (the core's `required`), in the
# middle of base_stream: (id, event -> the event without it, path)
REQUIRED = [
    ("type", lambda null: _drop(text_delta(), "type", null), "type"),
    ("output_text-delta", lambda null: _drop(text_delta(), "delta", null), "delta"),
    ("function_call_arguments-delta", lambda null: _drop(_ARGS_DELTA, "delta", null), "delta"),
    ("reasoning_summary_text-delta", lambda null: _drop(_SUMMARY_DELTA, "delta", null), "delta"),
    ("reasoning_text-delta", lambda null: _drop(_REASONING_DELTA, "delta", null), "delta"),
    ("refusal-delta", lambda null: _drop(_REFUSAL_DELTA, "delta", null), "delta"),
    ("added-item", lambda null: _drop(_ADDED, "item", null), "item"),
    ("done-item", lambda null: _drop({**_ADDED, "type": "response.output_item.done"}, "item",
                                     null), "item"),
    ("added-item-type", _item_without_type, "item.type"),
    ("annotation", lambda null: _drop(_ANNOTATION, "annotation", null), "annotation"),
    *[(f"{name}-response", lambda null, name=name: _drop(
        {"type": f"response.{name}", "response": response_obj("in_progress")}, "response", null),
       "response") for name in ("created", "in_progress", "queued")],
]


@pytest.mark.parametrize("null", [False, True], ids=["absent", "null"])
@pytest.mark.parametrize("case", REQUIRED, ids=[c[0] for c in REQUIRED])
def test_required_member_absent_warns(case, null):
    """An event without a member its type needs, or with it null: one
    DecodeWarning(MISSING_FIELD, <path>, raw), the event is skipped, nothing
    else changes. (A wrong type gives FIELD_TYPE with the same path: the
    rows of test_field_rows. The terminal events' `response`:
    test_field_rows[response-absent-in-*].)"""
    odd = case[1](null)
    msg, out, warns = run_row(base_stream(odd))
    assert warns == [(WarningCode.MISSING_FIELD, case[2])]
    (w,) = warnings_of(out)
    raw = json.loads(w.raw)
    del raw["sequence_number"]
    assert raw == odd
    clean, _, _ = run_row(base_stream())
    assert msg == clean


def test_event_over_the_buffer_keeps_its_small_fields():
    """An argument delta padded past the SSE buffer by a long `obfuscation`:
    the padding is elided, the delta itself arrives, nothing is warned."""
    items = [call_item(0, 1, "f", ['{"blob":', '"abc"', "}"])]
    items[0].events[2]["obfuscation"] = "P" * 5000  # the API pads deltas with it
    events = head() + items[0].events + [_completed()]
    msg, out = ours(body_of(events), buffer_size=4096)
    assert not [e for e in out if isinstance(e, (FramingError, DecodeWarning))]
    assert msg.tool_calls[0].parsed == {"blob": "abc"} and not msg.dropped_events


def test_event_too_large_is_dropped_and_done_restores_arguments():
    """An argument delta whose structure alone (short strings, nothing to
    elide) is larger than the SSE buffer: FramingError, the event is skipped,
    output_item.done restores the exact string (mismatch warned)."""
    items = [call_item(0, 1, "f", ['{"blob":', '"abc"', "}"])]
    items[0].events[2]["obfuscation"] = ["P"] * 2000
    events = head() + items[0].events + [_completed()]
    msg, out = ours(body_of(events), buffer_size=4096)
    assert [e.code for e in out if isinstance(e, FramingError)] == [
        FramingErrorCode.EVENT_TOO_LARGE]
    assert msg.tool_calls[0].arguments == '{"blob":"abc"}'
    assert msg.tool_calls[0].parsed == {"blob": "abc"}
    assert len(warnings_of(out, WarningCode.ARGUMENTS_MISMATCH)) == 1


def test_empty_data_event_sdk_raises():
    """An event with an empty data buffer dispatches nothing (WHATWG); the
    SDK dispatches it and json.loads("") raises (openai-python issue 2722)."""
    events = base_stream()
    body = body_of(events)
    cut = body.index(b"event: response.output_text.delta")
    body = body[:cut] + b"event: response.output_text.delta\n\n" + body[cut:]
    assert isinstance(sdk_run([body]).exception, json.JSONDecodeError)
    msg, out = ours(body)
    assert msg.text == CLEAN_TEXT and not warnings_of(out)


def test_malformed_chunk_sdk_raises_we_continue():
    """A malformed chunk mid-stream: the SDK's json.loads raises and the
    whole answer is lost; we warn BAD_JSON and finish the message."""
    body = body_of(base_stream(b'{"type":"response.output_text.delta",'))
    assert isinstance(sdk_run([body]).exception, json.JSONDecodeError)
    msg, out = ours(body)
    assert msg.text == CLEAN_TEXT and msg.finish_reason is FinishReason.TOOL_CALLS


def test_invalid_utf8_sdk_raises_we_replace():
    """Invalid UTF-8 in a delta: the SDK's line decode raises
    UnicodeDecodeError; we replace it with U+FFFD and warn REPLACED_UTF8."""
    bad = (b'{"type":"response.output_text.delta","item_id":"' + IID.encode()
           + b'","output_index":0,"content_index":0,"delta":"\xc3(","logprobs":[]}')
    body = body_of(base_stream(bad))
    assert isinstance(sdk_run([body]).exception, UnicodeDecodeError)
    msg, out = ours(body)
    assert msg.text == "\ufffd(" + CLEAN_TEXT
    assert len(warnings_of(out, WarningCode.REPLACED_UTF8)) == 1


def test_never_raises_on_random_garbage_between_events():
    """Random bytes spliced in at seeded offsets: no exception, the decoder
    ends cleanly or with MessageIncomplete."""
    body = body_of(out_of_order_stream())
    rng = random.Random(1234)
    for _ in range(scaled(200)):
        at = rng.randrange(len(body))
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        dec = OpenAIResponsesDecoder()
        mixed = body[:at] + junk + body[at:]
        out = []
        for k in range(0, len(mixed), 61):
            out += dec.feed(mixed[k:k + 61])
        out += dec.close()
        msg = dec.message
        # the stream either ended (once) or is reported incomplete (once)
        assert sum(isinstance(e, (ev.MessageFinished, MessageIncomplete)) for e in out) == 1
        assert all(isinstance(p, (TextPart, ThinkingPart, ToolCall, OtherPart))
                   for p in msg.parts)


MIB = 1 << 20


def _big_stream(item: Item) -> bytes:
    """A stream whose done events repeat a 1 MiB answer or argument, each far
    over the 64 KiB buffer."""
    final = response_obj("completed", usage=usage_obj())
    final["output"] = [item.final]
    return body_of(head() + item.events + [{"type": "response.completed", "response": final}])


@pytest.mark.parametrize("seed", range(3))
def test_one_mib_answer_keeps_usage_and_finish(seed):
    """1 MiB of text: output_text.done, output_item.done and
    response.completed outgrow the buffer; their long strings are elided, so
    usage and the finish arrive, whatever the read sizes."""
    text = "".join(random.Random(seed).choice("ab\"\\\u00e9 ") for _ in range(MIB))
    deltas = [text[i:i + 997] for i in range(0, len(text), 997)]
    body = _big_stream(message_item(0, 1, [("output_text", deltas)]))
    dec = OpenAIResponsesDecoder()
    out = feed_split(dec, body, sorted(random.Random(seed).sample(range(1, len(body)), 300)))
    msg = dec.message
    assert not [e for e in out if isinstance(e, (FramingError, ev.MessageIncomplete))]
    assert msg.text == text and msg.finish_reason is FinishReason.STOP
    assert msg.usage is not None and msg.usage.output_tokens == usage_obj()["output_tokens"]
    assert not msg.dropped_events


@pytest.mark.parametrize("seed", range(3))
def test_one_mib_tool_argument_completes(seed):
    """A 1 MiB argument (the cap raised to 2 MiB): the done item's arguments
    are elided and read as absent, so the call completes from its deltas,
    unmarked, and parses."""
    args = json.dumps({"blob": "x\"y\\" * (MIB // 4)})
    deltas = [args[i:i + 1000] for i in range(0, len(args), 1000)]
    body = _big_stream(call_item(0, 1, "save", deltas))
    dec = OpenAIResponsesDecoder(max_arguments=2 * MIB)
    out = feed_split(dec, body, sorted(random.Random(seed).sample(range(1, len(body)), 300)))
    msg = dec.message
    assert not [e for e in out if isinstance(e, (FramingError, ev.MessageIncomplete))]
    assert [w.detail for w in warnings_of(out)] == ["item.arguments"]  # ELIDED, the deltas kept it
    [call] = msg.tool_calls
    assert call.complete and call.error is None and call.arguments == args
    assert call.parsed == json.loads(args) and call.name == "save"
    assert msg.finish_reason is FinishReason.TOOL_CALLS and msg.usage is not None
    assert not msg.dropped_events
