"""Provider decoder benchmark: our whole decoders against the official SDKs'
own streaming paths, on the same bytes.

    python bench/decoder_bench.py [--quick] [--json]

For each protocol (OpenAI Chat Completions, Anthropic Messages, OpenAI
Responses) a synthetic stream made from a fixed seed, shaped like a real one,
is fed in two regimes: (A) the body cut into 4 KiB reads, (B) one SSE event
per read. Two approaches run on the same reads, each from the first byte to
the final accumulated answer:

  ours  OpenAIChatDecoder / AnthropicDecoder / OpenAIResponsesDecoder:
        feed(read) per read, close(), then read `.message`
  sdk   the SDK's own path with no network, per event as its stream helpers
        run it: its SSEDecoder, JSON, construct_type into the event models,
        then its accumulator (openai ChatCompletionStreamState.handle_chunk,
        anthropic accumulate_event + build_events, openai
        ResponseStreamState.handle_event), to its final snapshot / Response

Before any timing, both are checked to give the same final text, the same
tool call ids, names and argument strings (and the generator's values) in
both regimes; a mismatch stops the run.

The method is bench/stream_bench.py's: interleaved rounds (every protocol,
approach and regime once per round, the order rotating), gc disabled in the
timed sections, warm-up rounds, each sample sized to last about target_ms,
fresh per-stream state built outside the clock; reported are medians of
ns per SSE event with their interquartile range, and the ratio SDK / ours of
medians, of per-round pairs and of minima. Absolute nanoseconds drift with
the machine and its load; the ratios within one run are what hold.

With --json the human-readable report goes to stderr and one JSON document
with every figure goes to stdout.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent

try:
    import agent.stream  # noqa: F401
except ImportError:  # not installed: run from the source tree (needs the built core)
    sys.path.insert(0, str(HERE.parent))

from agent.stream.decoders import (  # noqa: E402
    AnthropicDecoder,
    OpenAIChatDecoder,
    OpenAIResponsesDecoder,
)


def _load_stream_bench():
    """bench/stream_bench.py, by path (bench/ is no package): the Chat stream
    generator, the read splitters and the timing helpers come from there."""
    name = "homeagent_stream_bench"  # the name tests/test_bench_smoke.py uses
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / "stream_bench.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


sb = _load_stream_bench()

try:
    import openai
    from openai._models import construct_type as _oa_construct_type
    from openai._streaming import SSEDecoder as _OASSEDecoder
    from openai._types import omit as _oa_omit
    from openai._utils import is_mapping as _oa_is_mapping
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.lib.streaming.chat._completions import (
        _is_valid_chat_completion_chunk_weak,
    )
    from openai.lib.streaming.responses._responses import ResponseStreamState
    from openai.types.chat import ChatCompletionChunk
    from openai.types.responses import ResponseStreamEvent
except ImportError:  # pragma: no cover - reported, the protocols needing it are skipped
    openai = None
try:
    import anthropic
    from anthropic._models import construct_type as _an_construct_type
    from anthropic._streaming import SSEDecoder as _ANSSEDecoder
    from anthropic.lib.streaming._messages import accumulate_event, build_events
    from anthropic.types import RawMessageStreamEvent
except ImportError:  # pragma: no cover
    anthropic = None

# The SDK paths used are private; the versions they were written against
# (pinned in pyproject.toml). Another version is run, and flagged in the log.
SDK_PINS = {"openai": "3.57.0", "anthropic": "2.14.0"}

PROTOCOLS = ("chat", "anthropic", "responses")
LABELS = {"chat": "OpenAI Chat Completions", "anthropic": "Anthropic Messages",
          "responses": "OpenAI Responses"}
REGIMES = ("4k", "event")
REGIME_LABELS = {"4k": "4 KiB reads", "event": "1 event/read"}


# --------------------------------------------------------------------------
# Synthetic streams. Text deltas come from stream_bench's generator (1-20
# code points mixing ASCII with quotes, backslashes, newlines and tabs, CJK,
# emoji with ZWJ sequences and flags, a few control / Latin-1 characters);
# the share of events serialized with \uXXXX escapes is the same (10%).
# Each maker returns (events as bytes, one per SSE event; expected) with
# expected = {"text": str, "tool_calls": [(id, name, arguments)]}.
# --------------------------------------------------------------------------

_TOOL_ARGS = ("get_weather", {"city": "Edinburgh", "country": "UK", "unit": "celsius",
                              "days": 5, "note": "東京 → 🌧? \"quoted\" back\\slash"})


def _tool_arguments(rng: random.Random, size: int) -> str:
    """The tool call's JSON arguments, padded with free text to about size."""
    args = dict(_TOOL_ARGS[1])
    body = json.dumps(args, ensure_ascii=False)
    if len(body) < size:
        args["details"] = sb._ascii_text(rng, size - len(body))
        body = json.dumps(args, ensure_ascii=False)
    return body


def _dumps(rng: random.Random, obj: dict, escaped_share: float) -> str:
    return json.dumps(obj, ensure_ascii=rng.random() < escaped_share, separators=(",", ":"))


def make_chat_stream(seed: int, text_chunks: int, tool_arg_chars: int,
                     reasoning_chunks: int) -> tuple[list[bytes], dict]:
    """stream_bench.make_stream: role chunk, reasoning deltas, text deltas,
    two parallel tool calls, finish chunk, usage-only chunk, [DONE]."""
    events, exp = sb.make_stream(seed, text_chunks, reasoning_chunks, tool_arg_chars)
    return events, {"text": exp["content"],
                    "tool_calls": [(cid, name, args) for _, cid, name, args in exp["tool_calls"]]}


def make_anthropic_stream(seed: int, text_chunks: int, tool_arg_chars: int,
                          escaped_share: float = 0.1) -> tuple[list[bytes], dict]:
    """message_start, ping, a text block of text_chunks text_delta events, a
    tool_use block whose input arrives in input_json_delta pieces of 3-15
    characters (the first one empty, as the API sends it), message_delta with
    stop_reason tool_use and cumulative usage, message_stop. `event:` names
    every event, as the API does."""
    rng = random.Random(seed)
    alnum = sb._ALNUM
    mid = "msg_01" + "".join(rng.choice(alnum) for _ in range(22))
    tid = "toolu_01" + "".join(rng.choice(alnum) for _ in range(22))
    usage0 = {"input_tokens": 472 + text_chunks, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 2048,
              "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
              "output_tokens": 2, "service_tier": "standard"}
    objs: list = [
        {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": usage0}},
        "ping",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    text = []
    for _ in range(text_chunks):
        t = sb._delta_text(rng)
        text.append(t)
        objs.append({"type": "content_block_delta", "index": 0,
                     "delta": {"type": "text_delta", "text": t}})
    objs.append({"type": "content_block_stop", "index": 0})
    name = _TOOL_ARGS[0]
    args = _tool_arguments(rng, tool_arg_chars)
    objs.append({"type": "content_block_start", "index": 1,
                 "content_block": {"type": "tool_use", "id": tid, "name": name, "input": {}}})
    for piece in [""] + sb._split_pieces(rng, args, 3, 15):
        objs.append({"type": "content_block_delta", "index": 1,
                     "delta": {"type": "input_json_delta", "partial_json": piece}})
    objs.append({"type": "content_block_stop", "index": 1})
    objs.append({"type": "message_delta",
                 "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                 "usage": {"input_tokens": 472 + text_chunks, "cache_creation_input_tokens": 0,
                           "cache_read_input_tokens": 2048, "output_tokens": 60 + text_chunks}})
    objs.append({"type": "message_stop"})
    events = []
    for o in objs:
        if o == "ping":  # the API's own spelling, with a space
            events.append(b'event: ping\ndata: {"type": "ping"}\n\n')
            continue
        data = _dumps(rng, o, escaped_share)
        events.append(f"event: {o['type']}\ndata: {data}\n\n".encode())
    return events, {"text": "".join(text), "tool_calls": [(tid, name, args)]}


def _response(rid: str, status: str, output: list, usage: dict | None) -> dict:
    """A Response object with the fields the API sends in its lifecycle events."""
    return {"id": rid, "object": "response", "created_at": 1756400000, "status": status,
            "background": False, "error": None, "incomplete_details": None,
            "instructions": None, "max_output_tokens": None, "max_tool_calls": None,
            "model": "gpt-5-mini-2025-08-07", "output": output, "parallel_tool_calls": True,
            "previous_response_id": None, "prompt_cache_key": None,
            "reasoning": {"effort": "minimal", "summary": None}, "safety_identifier": None,
            "service_tier": "default", "store": True, "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": "auto", "tools": [], "top_logprobs": 0, "top_p": 1.0,
            "truncation": "disabled", "usage": usage, "user": None, "metadata": {}}


def make_responses_stream(seed: int, text_chunks: int, tool_arg_chars: int,
                          escaped_share: float = 0.1) -> tuple[list[bytes], dict]:
    """response.created, response.in_progress, output_item.added (message),
    content_part.added, text_chunks output_text.delta events (with the
    obfuscation and logprobs fields the API adds), output_text.done,
    content_part.done, output_item.done; output_item.added (function_call),
    its arguments in function_call_arguments.delta pieces of 1-8
    characters, function_call_arguments.done, output_item.done;
    response.completed with the full output and usage. `event:` repeats the
    JSON type and every event carries its sequence_number, as the API sends."""
    rng = random.Random(seed)
    hexd = "0123456789abcdef"

    def hid(prefix: str) -> str:
        return prefix + "_" + "".join(rng.choice(hexd) for _ in range(50))

    rid, mid, fid = hid("resp"), hid("msg"), hid("fc")
    call_id = "call_" + "".join(rng.choice(sb._ALNUM) for _ in range(24))
    objs: list[dict] = [
        {"type": "response.created", "response": _response(rid, "in_progress", [], None)},
        {"type": "response.in_progress", "response": _response(rid, "in_progress", [], None)},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": mid, "type": "message", "status": "in_progress", "content": [],
                  "role": "assistant"}},
        {"type": "response.content_part.added", "item_id": mid, "output_index": 0,
         "content_index": 0,
         "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}},
    ]
    text = []
    for _ in range(text_chunks):
        t = sb._delta_text(rng)
        text.append(t)
        obf = "".join(rng.choice(sb._ALNUM) for _ in range(rng.randint(2, 14)))
        objs.append({"type": "response.output_text.delta", "item_id": mid, "output_index": 0,
                     "content_index": 0, "delta": t, "logprobs": [], "obfuscation": obf})
    full = "".join(text)
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": full}
    message = {"id": mid, "type": "message", "status": "completed", "content": [part],
               "role": "assistant"}
    objs += [
        {"type": "response.output_text.done", "item_id": mid, "output_index": 0,
         "content_index": 0, "text": full, "logprobs": []},
        {"type": "response.content_part.done", "item_id": mid, "output_index": 0,
         "content_index": 0, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": message},
    ]
    name = _TOOL_ARGS[0]
    args = _tool_arguments(rng, tool_arg_chars)
    objs.append({"type": "response.output_item.added", "output_index": 1,
                 "item": {"id": fid, "type": "function_call", "status": "in_progress",
                          "arguments": "", "call_id": call_id, "name": name}})
    for piece in sb._split_pieces(rng, args, 1, 8):
        objs.append({"type": "response.function_call_arguments.delta", "item_id": fid,
                     "output_index": 1, "delta": piece,
                     "obfuscation": "".join(rng.choice(sb._ALNUM) for _ in range(8))})
    call = {"id": fid, "type": "function_call", "status": "completed", "arguments": args,
            "call_id": call_id, "name": name}
    objs += [
        {"type": "response.function_call_arguments.done", "item_id": fid, "output_index": 1,
         "arguments": args},
        {"type": "response.output_item.done", "output_index": 1, "item": call},
    ]
    usage = {"input_tokens": 1200 + text_chunks,
             "input_tokens_details": {"cached_tokens": 1024},
             "output_tokens": 60 + text_chunks,
             "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 1260 + 2 * text_chunks}
    objs.append({"type": "response.completed",
                 "response": _response(rid, "completed", [message, call], usage)})
    events = []
    for seq, o in enumerate(objs):
        data = _dumps(rng, {**o, "sequence_number": seq}, escaped_share)
        events.append(f"event: {o['type']}\ndata: {data}\n\n".encode())
    return events, {"text": full, "tool_calls": [(call_id, name, args)]}


def make_streams(cfg: dict) -> dict:
    """protocol -> (events, expected)."""
    seed, n, a = cfg["seed"], cfg["text_chunks"], cfg["tool_arg_chars"]
    return {"chat": make_chat_stream(seed, n, a, cfg["reasoning_chunks"]),
            "anthropic": make_anthropic_stream(seed + 1, n, a),
            "responses": make_responses_stream(seed + 2, n, a)}


def make_reads(events: list[bytes]) -> dict:
    return {"4k": sb.reads_4k(events), "event": sb.reads_per_event(events)}


# --------------------------------------------------------------------------
# Our side: prepare(k) builds k fresh decoders outside the clock; run(state,
# reads) decodes one stream and returns the final Message. The events of
# each read are dropped once returned, as by a consumer that handles them.
# --------------------------------------------------------------------------

_OURS = {"chat": OpenAIChatDecoder, "anthropic": AnthropicDecoder,
         "responses": OpenAIResponsesDecoder}


def _ours_prepare(protocol: str) -> Callable:
    cls = _OURS[protocol]
    return lambda k: [cls() for _ in range(k)]


def _ours_run(dec, reads: list[bytes]):
    feed = dec.feed
    for r in reads:
        feed(r)
    dec.close()
    return dec.message


# --------------------------------------------------------------------------
# The SDKs' side, offline. Each mirrors, per event, what the SDK's stream
# helper does with the network reads (the same paths as the differential
# tests: tests/test_chat_decoder.py sdk_decode, tests/test_anthropic_decoder.py
# sdk, tests/test_responses_decoder.py sdk_run). A stream error the SDK would
# raise is raised here too (the synthetic streams have none).
# --------------------------------------------------------------------------


class SDKStreamError(Exception):
    """What an SDK's stream raises at an error event (its own APIError needs an
    httpx request). body is the event's error; result, where the caller has
    one, what was accumulated until then. The differential tests raise it too."""

    def __init__(self, body, result=None) -> None:
        super().__init__(body)
        self.body = body
        self.result = result


def _sdk_chat_prepare(k: int) -> list:
    return [(_OASSEDecoder(), ChatCompletionStreamState()) for _ in range(k)]


def _sdk_chat_run(state, reads: list[bytes]):
    """openai Stream.__stream__ (legacy mode: [DONE], json, `error` check,
    _process_response_data non-strict = construct_type into
    ChatCompletionChunk), ChatCompletionStream.__stream__ (the weak chunk
    filter, ChatCompletionStreamState.handle_chunk, which accumulates and
    builds its events). Returns the accumulated ChatCompletion snapshot."""
    decoder, acc = state
    construct, is_mapping, is_chunk = (_oa_construct_type, _oa_is_mapping,
                                       _is_valid_chat_completion_chunk_weak)
    for sse in decoder.iter_bytes(iter(reads)):
        if sse.data.startswith("[DONE]"):
            break
        data = sse.json()
        if is_mapping(data) and data.get("error"):
            raise SDKStreamError(data["error"])
        chunk = construct(type_=ChatCompletionChunk, value=data)
        if not is_chunk(chunk):
            continue
        acc.handle_chunk(chunk)
    return acc.current_completion_snapshot


def _sdk_anthropic_prepare(k: int) -> list:
    return [(_ANSSEDecoder(), {}) for _ in range(k)]


def _sdk_anthropic_run(state, reads: list[bytes]):
    """anthropic Stream.__stream__ (ping and unnamed events skipped,
    `event: error` raises, json, _process_response_data non-strict =
    construct_type into RawMessageStreamEvent), MessageStream.__stream__
    (accumulate_event, which re-parses the growing tool input with jiter's
    partial mode at each input_json_delta, then build_events). Returns
    (final Message snapshot, json_bufs: block index -> raw tool input)."""
    decoder, json_bufs = state
    construct = _an_construct_type
    snapshot = None
    for sse in decoder.iter_bytes(iter(reads)):
        if sse.event == "ping" or sse.event is None:
            continue
        if sse.event == "error":
            raise SDKStreamError(sse.data)
        if not sse.data:
            continue
        event = construct(type_=RawMessageStreamEvent, value=sse.json())
        if snapshot is None and event.type != "message_start":
            continue  # yielded unaccumulated
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=json_bufs)
        build_events(event=event, message_snapshot=snapshot)
    return snapshot, json_bufs


def _sdk_responses_prepare(k: int) -> list:
    return [(_OASSEDecoder(), ResponseStreamState(input_tools=_oa_omit, text_format=_oa_omit))
            for _ in range(k)]


def _sdk_responses_run(state, reads: list[bytes]):
    """openai Stream.__stream__ (as for Chat, construct_type into
    ResponseStreamEvent), ResponseStream.__stream__
    (ResponseStreamState.handle_event: accumulates and builds its events).
    Returns the final ParsedResponse (what get_final_response() returns)."""
    decoder, acc = state
    construct, is_mapping = _oa_construct_type, _oa_is_mapping
    for sse in decoder.iter_bytes(iter(reads)):
        if sse.data.startswith("[DONE]"):
            break
        data = sse.json()
        if is_mapping(data) and data.get("error"):
            raise SDKStreamError(data["error"])
        acc.handle_event(construct(type_=ResponseStreamEvent, value=data))
    return acc._completed_response


_SDK = {"chat": (_sdk_chat_prepare, _sdk_chat_run),
        "anthropic": (_sdk_anthropic_prepare, _sdk_anthropic_run),
        "responses": (_sdk_responses_prepare, _sdk_responses_run)}
_SDK_NEEDS = {"chat": "openai", "anthropic": "anthropic", "responses": "openai"}
_SDK_LABELS = {"chat": "openai ChatCompletionStreamState",
               "anthropic": "anthropic accumulate_event",
               "responses": "openai ResponseStreamState"}


def sdk_available(protocol: str) -> bool:
    return {"openai": openai, "anthropic": anthropic}[_SDK_NEEDS[protocol]] is not None


def runners(protocol: str) -> dict:
    """approach -> (prepare(k), run(state, reads))."""
    out = {"ours": (_ours_prepare(protocol), _ours_run)}
    if sdk_available(protocol):
        out["sdk"] = _SDK[protocol]
    return out


# --------------------------------------------------------------------------
# The final answers, side by side: {"text", "tool_calls": [(id, name, args)]}
# --------------------------------------------------------------------------


def ours_view(msg) -> dict:
    return {"text": msg.text,
            "tool_calls": [(c.id, c.name, c.arguments) for c in msg.tool_calls]}


def sdk_view(protocol: str, final) -> dict:
    if protocol == "chat":
        m = final.choices[0].message
        return {"text": m.content or "",
                "tool_calls": [(t.id, t.function.name, t.function.arguments)
                               for t in m.tool_calls or []]}
    if protocol == "anthropic":
        snap, json_bufs = final
        text, calls = [], []
        for i, block in enumerate(snap.content):
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use":
                calls.append((block.id, block.name, json_bufs.get(i, b"").decode("utf-8")))
        return {"text": "".join(text), "tool_calls": calls}
    text, calls = [], []
    for item in final.output:
        if item.type == "message":
            text += [c.text for c in item.content if c.type == "output_text"]
        elif item.type == "function_call":
            calls.append((item.call_id, item.name, item.arguments))
    return {"text": "".join(text), "tool_calls": calls}


def decode_once(protocol: str, approach: str, reads: list[bytes]) -> dict:
    """One decode of the reads by one approach, as a comparable view."""
    prepare, run = runners(protocol)[approach]
    final = run(prepare(1)[0], reads)
    return ours_view(final) if approach == "ours" else sdk_view(protocol, final)


class Mismatch(AssertionError):
    pass


def _diff(got, want) -> str:
    if isinstance(got, str) and isinstance(want, str):
        k = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y),
                 min(len(got), len(want)))
        return (f"first difference at character {k} (lengths {len(got)}, {len(want)}): "
                f"{got[max(0, k - 20):k + 20]!r} vs {want[max(0, k - 20):k + 20]!r}")
    return f"{got!r} vs {want!r}"


def check_agreement(protocol: str, reads: list[bytes], expected: dict) -> dict:
    """Ours and the SDK on the same reads: the same final text and the same
    tool calls (id, name, argument string), each also equal to what the
    generator put in; ours must have parsed every call's arguments to the
    JSON object they are. Raises Mismatch, naming what differs."""
    approaches = runners(protocol)
    prepare, run = approaches["ours"]
    msg = run(prepare(1)[0], reads)
    views = {"ours": ours_view(msg)}
    if "sdk" in approaches:
        views["sdk"] = decode_once(protocol, "sdk", reads)
    for key in ("text", "tool_calls"):
        if "sdk" in views and views["ours"][key] != views["sdk"][key]:
            raise Mismatch(f"{protocol}: ours and the SDK give different {key}: "
                           + _diff(views["ours"][key], views["sdk"][key]))
        for approach, view in views.items():
            if view[key] != expected[key]:
                raise Mismatch(f"{protocol}: {approach} {key} is not the generator's: "
                               + _diff(view[key], expected[key]))
    for call, (_, _, args) in zip(msg.tool_calls, expected["tool_calls"]):
        if not call.complete or call.error is not None or call.parsed != json.loads(args):
            raise Mismatch(f"{protocol}: ours left tool call {call.name} unparsed or parsed "
                           f"it differently: {call.error} {call.error_detail}")
    return views


# --------------------------------------------------------------------------
# Timing (stream_bench's method and its helpers)
# --------------------------------------------------------------------------


def bench(cfg: dict, streams: dict, log) -> dict:
    cases = []  # (protocol, approach, regime)
    reads = {p: make_reads(streams[p][0]) for p in PROTOCOLS}
    all_runners = {p: runners(p) for p in PROTOCOLS}
    for p in PROTOCOLS:
        for a in all_runners[p]:
            for reg in REGIMES:
                cases.append((p, a, reg))
    n_events = {p: len(streams[p][0]) for p in PROTOCOLS}

    # warm-up, then size each sample to about target_ms
    reps: dict = {}
    for case in cases:
        p, a, reg = case
        prepare, run = all_runners[p][a]
        for _ in range(cfg["warmup"]):
            sb._time_sample(run, prepare(1), reads[p][reg])
        t = sb._time_sample(run, prepare(1), reads[p][reg])
        reps[case] = max(1, min(cfg["max_reps"], math.ceil(cfg["target_ms"] * 1e6 / max(t, 1))))
    log(f"warm-up done; samples of about {cfg['target_ms']} ms, {cfg['rounds']} rounds")

    samples: dict = {c: [] for c in cases}
    for rnd in range(cfg["rounds"]):
        k = rnd % len(cases)
        for case in cases[k:] + cases[:k]:  # rotate who goes first
            p, a, reg = case
            prepare, run = all_runners[p][a]
            states = prepare(reps[case])
            ns = sb._time_sample(run, states, reads[p][reg])
            samples[case].append(ns / (reps[case] * n_events[p]))
            del states
        gc.collect()

    # construction of one decoder / SDK state (excluded from the figures above)
    ctor: dict = {}
    for p in PROTOCOLS:
        for a, (prepare, _) in all_runners[p].items():
            xs = []
            for _ in range(max(5, cfg["rounds"])):
                gc.disable()
                t0 = time.perf_counter_ns()
                prepare(1)
                xs.append(time.perf_counter_ns() - t0)
                gc.enable()
            ctor.setdefault(p, {})[a] = statistics.median(xs)

    res: dict = {}
    for p in PROTOCOLS:
        ev_bytes = streams[p][0]
        entry = {"label": LABELS[p], "events": n_events[p], "bytes": sum(map(len, ev_bytes)),
                 "reads": {reg: len(reads[p][reg]) for reg in REGIMES},
                 "sdk": _SDK_LABELS[p] if "sdk" in all_runners[p] else None,
                 "construction_ns": ctor[p], "regimes": {}}
        for reg in REGIMES:
            r: dict = {}
            for a in all_runners[p]:
                xs = samples[p, a, reg]
                q1, med, q3 = sb._quantiles(xs)
                r[a] = {"median": med, "q1": q1, "q3": q3, "min": min(xs),
                        "iqr_pct": (q3 - q1) / med * 100, "reps": reps[p, a, reg],
                        "samples": xs}
            if "sdk" in r:
                s, o = r["sdk"], r["ours"]
                r["ratio"] = s["median"] / o["median"]
                r["ratio_paired_rounds"] = statistics.median(
                    x / y for x, y in zip(s["samples"], o["samples"]))
                r["ratio_from_minima"] = s["min"] / o["min"]
            entry["regimes"][reg] = r
        res[p] = entry
    return res


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def _env() -> dict:
    import cffi

    def ver(name):
        try:
            from importlib.metadata import version
            return version(name)
        except Exception:  # noqa: BLE001 - not installed
            return None

    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        load = None
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "machine": platform.machine(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "cffi": cffi.__version__, "openai": ver("openai"),
            "anthropic": ver("anthropic"), "pydantic": ver("pydantic"),
            "pydantic_core": ver("pydantic-core"), "jiter": ver("jiter"),
            "homeagent": ver("homeagent"), "loadavg_start": load}


def rows(res: dict) -> list[dict]:
    """One flat row per protocol and regime."""
    out = []
    for p in PROTOCOLS:
        e = res["protocols"][p]
        for reg in REGIMES:
            r = e["regimes"][reg]
            row = {"protocol": p, "regime": reg, "events": e["events"],
                   "reads": e["reads"][reg],
                   "ours_ns_per_event": r["ours"]["median"],
                   "ours_iqr_pct": r["ours"]["iqr_pct"]}
            if "sdk" in r:
                row.update({"sdk_ns_per_event": r["sdk"]["median"],
                            "sdk_iqr_pct": r["sdk"]["iqr_pct"], "ratio": r["ratio"],
                            "ratio_paired_rounds": r["ratio_paired_rounds"],
                            "ratio_from_minima": r["ratio_from_minima"]})
            out.append(row)
    return out


def report(res: dict, out) -> None:
    def p(s=""):
        print(s, file=out)

    env, cfg = res["env"], res["config"]
    p(f"homeagent decoder bench: our provider decoders vs the official SDKs' stream paths, "
      f"seed {cfg['seed']}{' (--quick)' if cfg['quick'] else ''}")
    p(f"python {env['python']} {env['machine']}, {env['cpus']} CPUs, cffi {env['cffi']}, "
      f"openai {env['openai']}, anthropic {env['anthropic']}, pydantic {env['pydantic']} "
      f"(core {env['pydantic_core']}), jiter {env['jiter']}")
    p(f"load average at start {env['loadavg_start']}, at end {res['loadavg_end']}")
    for name, want in SDK_PINS.items():
        if env[name] is not None and env[name] != want:
            p(f"NOTE: {name} {env[name]} is not the pinned {want}; its private paths may differ")
    for name in res["missing"]:
        p(f"MISSING: {name} is not installed; its protocols are timed for ours only")
    p(f"{cfg['rounds']} interleaved rounds after {cfg['warmup']} warm-up; medians; "
      "ns per SSE event = time / events of the stream")
    p("ours: feed every read, close(), .message   sdk: SSEDecoder, json, construct_type, "
      "its accumulator, to the final snapshot")
    p("both checked before timing: same final text, tool call ids, names and argument strings")
    p()
    hdr = (f"{'protocol':<32}{'regime':<14}{'reads':>6}{'ours ns/ev':>12}{'IQR':>7}"
           f"{'SDK ns/ev':>12}{'IQR':>7}{'SDK/ours':>10}{'paired':>8}{'minima':>8}")
    p(hdr)
    p("-" * len(hdr))
    for pr in PROTOCOLS:
        e = res["protocols"][pr]
        for reg in REGIMES:
            r = e["regimes"][reg]
            o = r["ours"]
            label = f"{e['label']} ({e['events']} ev)" if reg == REGIMES[0] else ""
            line = (f"{label:<32}{REGIME_LABELS[reg]:<14}{e['reads'][reg]:>6}"
                    f"{o['median']:>12,.0f}{o['iqr_pct']:>6.1f}%")
            if "sdk" in r:
                s = r["sdk"]
                line += (f"{s['median']:>12,.0f}{s['iqr_pct']:>6.1f}%{r['ratio']:>9.1f}x"
                         f"{r['ratio_paired_rounds']:>7.1f}x{r['ratio_from_minima']:>7.1f}x")
            else:
                line += f"{'MISSING':>12}"
            p(line)
    p()
    p("SDK/ours: ratio of medians (above 1: ours is faster); paired: median of the per-round "
      "ratios; minima: ratio of the per-approach minima. IQR: interquartile range over rounds, "
      "% of the median.")
    worst = max((r[a]["iqr_pct"] for e in res["protocols"].values()
                 for r in e["regimes"].values() for a in ("ours", "sdk") if a in r), default=0)
    if worst > 10:
        p(f"largest IQR {worst:.0f}% of its median: the machine was busy during the run; "
          "read the paired and minima columns, rerun on a quiet machine before concluding")
    p()
    p("construction, excluded above (ours: the decoder and its core; sdk: SSEDecoder + "
      "accumulator state):")
    for pr in PROTOCOLS:
        c = res["protocols"][pr]["construction_ns"]
        p(f"  {LABELS[pr]:<26} ours {c['ours'] / 1000:,.1f} us"
          + (f"   sdk {c['sdk'] / 1000:,.1f} us" if "sdk" in c else ""))
    p(f"total bench time {res['elapsed_s']:.1f} s")


def configure(quick: bool) -> dict:
    if quick:
        return {"seed": 20240926, "text_chunks": 30, "reasoning_chunks": 6,
                "tool_arg_chars": 60, "rounds": 5, "warmup": 1, "target_ms": 0.5,
                "max_reps": 20}
    return {"seed": 20240926, "text_chunks": 260, "reasoning_chunks": 40,
            "tool_arg_chars": 180, "rounds": 25, "warmup": 2, "target_ms": 8.0,
            "max_reps": 200}


def run(quick: bool = False, log=None) -> dict:
    log = log or (lambda s: None)
    cfg = configure(quick)
    t0 = time.perf_counter()
    env = _env()
    streams = make_streams(cfg)
    # correctness first, outside any timing: a mismatch stops the run
    for p in PROTOCOLS:
        events, expected = streams[p]
        for reg, reads in make_reads(events).items():
            check_agreement(p, reads, expected)
    log("agreement checked: " + ", ".join(
        f"{p} ({len(streams[p][0])} events)" for p in PROTOCOLS))
    protocols = bench(cfg, streams, log)
    try:
        load_end = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        load_end = None
    res = {"env": env, "config": {**cfg, "quick": quick},
           "missing": [n for n, m in (("openai", openai), ("anthropic", anthropic)) if m is None],
           "protocols": protocols, "loadavg_end": load_end}
    res["rows"] = rows(res)
    res["elapsed_s"] = time.perf_counter() - t0
    return res


def command(doc: str, run: Callable, report: Callable, argv: list[str] | None) -> int:
    """The command line of a bench that checks agreement first (this one,
    bench/ollama_bench.py): --quick, --json, exit 1 on a Mismatch."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small streams, few rounds (smoke test)")
    ap.add_argument("--json", action="store_true",
                    help="print the results as JSON on stdout (the table goes to stderr)")
    args = ap.parse_args(argv)
    out = sys.stderr if args.json else sys.stdout
    try:
        res = run(quick=args.quick, log=lambda s: print(s, file=sys.stderr))
    except Mismatch as exc:
        print(f"FAIL: the approaches disagree before timing: {exc}", file=sys.stderr)
        return 1
    report(res, out)
    if args.json:
        json.dump(res, sys.stdout, indent=1)
        print()
    return 0


def main(argv: list[str] | None = None) -> int:
    return command(__doc__, run, report, argv)


if __name__ == "__main__":
    sys.exit(main())
