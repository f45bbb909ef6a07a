"""Stream core benchmark: agent.stream.StreamDecoder against its Python peers.

    python bench/stream_bench.py [--quick] [--json]

One run measures every approach on the same bytes, in interleaved rounds
(each round runs every approach once, in a rotating order), and reports
medians and ratios between approaches measured in that run; absolute
nanoseconds drift from run to run, the ratios are what hold. See
bench/README.md for what is counted.

The input is a synthetic OpenAI Chat Completions stream generated from a
fixed seed, shaped like a recorded gpt-4o response: role chunk, reasoning
deltas, text deltas of 1-20 code points mixing ASCII, CJK and emoji, two
parallel tool calls with their arguments split over many chunks, a finish
chunk, a usage-only chunk (choices: []) and `data: [DONE]`. It is fed in two
regimes: (A) the body cut into 4 KiB reads, (B) one SSE event per read.

Approaches; each extracts per event the content text, reasoning text, tool
call index/id/name/arguments pieces, finish_reason and usage, and builds one
small Python object per extracted item:
  core      StreamDecoder(Protocol.OPENAI_CHAT).feed(read) per read
  json      pure-Python SSE framer + json.loads + dict walk -> tuples
  msgspec   same framer + msgspec.json.Decoder(typed Structs) + walk -> tuples
  orjson    same framer + orjson.loads + dict walk -> tuples
  openai    the openai SDK's own path: its Stream class (SSEDecoder,
            json.loads, construct_type into ChatCompletionChunk) over a fake
            response that yields the reads, then the same walk -> tuples

With --json the human-readable report goes to stderr and one JSON document
with every figure goes to stdout.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
from typing import Any, Callable

try:
    import agent.stream  # noqa: F401
except ImportError:  # not installed: run from the source tree (needs the built core)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent.stream import Protocol, StreamDecoder  # noqa: E402
from agent.stream import records as rec  # noqa: E402

try:
    import msgspec
except ImportError:  # pragma: no cover - reported as a missing peer
    msgspec = None
try:
    import orjson
except ImportError:  # pragma: no cover
    orjson = None
try:
    import openai
    from openai._streaming import Stream as _OpenAIStream
    from openai.types.chat import ChatCompletionChunk as _OpenAIChunk
except ImportError:  # pragma: no cover
    openai = None

KIB = 1024
MIB = 1024 * 1024

# Targets for the core's speed-up over the msgspec peer on this machine.
TARGETS = {"4k": 3.0, "event": 1.5}

# --------------------------------------------------------------------------
# Synthetic stream
# --------------------------------------------------------------------------

_ASCII_WORDS = (
    "the of and to in is it that for on with as was at by this be from or "
    "have an are not but can all your has more will one about which their "
    "stream parse token model reply weather server event buffer Edinburgh "
    "temperature Python JSON value 42 3.14 2024 OK"
).split()
_ASCII_PUNCT = [" ", " ", " ", ", ", ". ", "\n", "\n\n", "\"", "'", "(", ")",
                ": ", "- ", "`", "\\", "\t", "/", "?", "!"]
_CJK = ("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主"
        "发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力"
        "里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由"
        "東京天気予報こんにちはありがとう한국어데이터")
_EMOJI = ["😀", "🎉", "🚀", "✨", "👍", "🔥", "🤖", "💡", "🌍", "📦", "☕", "❤️",
          "👩‍💻", "🇬🇧", "👍🏽", "🧪"]
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_CTRL = ["\u2028", "\x01", "\u00e9", "\u00fc", "\u00df"]


def _ascii_text(rng: random.Random, n: int) -> str:
    out: list[str] = []
    size = 0
    while size < n:
        piece = rng.choice(_ASCII_WORDS) if rng.random() < 0.7 else rng.choice(_ASCII_PUNCT)
        out.append(piece)
        size += len(piece)
    return "".join(out)[:n]


def _delta_text(rng: random.Random) -> str:
    """1-20 code points: mostly ASCII, some CJK, some emoji, some mixed."""
    n = rng.randint(1, 20)
    r = rng.random()
    if r < 0.62:
        return _ascii_text(rng, n)
    if r < 0.84:
        return "".join(rng.choice(_CJK) for _ in range(n))
    if r < 0.92:
        return "".join(rng.choice(_EMOJI) for _ in range(max(1, n // 3)))[:n]
    mixed = []
    for _ in range(n):
        k = rng.random()
        if k < 0.5:
            mixed.append(rng.choice("abcdefghijklmnopqrstuvwxyz ,."))
        elif k < 0.75:
            mixed.append(rng.choice(_CJK))
        elif k < 0.93:
            mixed.append(rng.choice(_EMOJI))
        else:
            mixed.append(rng.choice(_CTRL))
    return "".join(mixed)[:n] or "x"


def _split_pieces(rng: random.Random, s: str, lo: int, hi: int) -> list[str]:
    pieces, i = [], 0
    while i < len(s):
        k = rng.randint(lo, hi)
        pieces.append(s[i:i + k])
        i += k
    return pieces


def make_stream(seed: int = 20240926, text_chunks: int = 260,
                reasoning_chunks: int = 40, tool_arg_chars: int = 180,
                ascii_escaped_share: float = 0.1) -> tuple[list[bytes], dict]:
    """The synthetic stream as a list of SSE events (bytes, one per event,
    `[DONE]` last) and the expected extraction (see summarize()).

    ascii_escaped_share of the chunks are serialized with ensure_ascii=True
    (\\uXXXX escapes, surrogate pairs for emoji), the rest as raw UTF-8."""
    rng = random.Random(seed)
    cid = "chatcmpl-" + "".join(rng.choice(_ALNUM) for _ in range(29))
    base = {"id": cid, "object": "chat.completion.chunk", "created": 1727346178,
            "model": "gpt-4o-2024-08-06", "system_fingerprint": "fp_5050236cbd"}

    chunks: list[dict] = []

    def chunk(delta: dict, finish: str | None = None) -> None:
        chunks.append({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                            "finish_reason": finish}]})

    chunk({"role": "assistant", "content": "", "refusal": None})
    reasoning = []
    for _ in range(reasoning_chunks):
        t = _delta_text(rng)
        reasoning.append(t)
        chunk({"content": None, "reasoning_content": t})
    content = []
    for _ in range(text_chunks):
        t = _delta_text(rng)
        content.append(t)
        chunk({"content": t})

    tools = []
    calls = [("GetWeatherArgs", {"city": "Edinburgh", "country": "UK", "unit": "celsius",
                                 "days": 5, "note": "東京 → 🌧? \"quoted\" back\\slash"}),
             ("GetStockPrice", {"ticker": "NASDAQ:AAPL", "exchange": "NASDAQ",
                                "window": [1, 7, 30], "memo": "Zürich ☕ straße"})]
    for ti, (name, args) in enumerate(calls):
        body = json.dumps(args, ensure_ascii=False)
        # pad the arguments with a free-text field to the requested size
        if len(body) < tool_arg_chars:
            args = {**args, "details": _ascii_text(rng, tool_arg_chars - len(body))}
            body = json.dumps(args, ensure_ascii=False)
        call_id = "call_" + "".join(rng.choice(_ALNUM) for _ in range(24))
        chunk({"tool_calls": [{"index": ti, "id": call_id, "type": "function",
                               "function": {"name": name, "arguments": ""}}]})
        for piece in _split_pieces(rng, body, 1, 8):
            chunk({"tool_calls": [{"index": ti, "function": {"arguments": piece}}]})
        tools.append((ti, call_id, name, body))
    chunk({}, "tool_calls")
    usage = {"prompt_tokens": 149 + text_chunks, "completion_tokens": 60 + text_chunks,
             "total_tokens": 209 + 2 * text_chunks,
             "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
             "completion_tokens_details": {"reasoning_tokens": reasoning_chunks, "audio_tokens": 0,
                                           "accepted_prediction_tokens": 0,
                                           "rejected_prediction_tokens": 0}}
    chunks.append({**base, "choices": [], "usage": usage})

    events = []
    for c in chunks:
        ascii_only = rng.random() < ascii_escaped_share
        data = json.dumps(c, ensure_ascii=ascii_only, separators=(",", ":"))
        events.append(b"data: " + data.encode("utf-8") + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    expected = {
        "content": "".join(content),
        "reasoning": "".join(reasoning),
        "tool_calls": [list(t) for t in tools],
        "finish": ["tool_calls"],
        "usage": [usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"],
                  64, reasoning_chunks],
    }
    return events, expected


def make_text_stream(seed: int, n: int) -> list[bytes]:
    """n text-only chunks (no role / finish / usage / [DONE]), one event each."""
    rng = random.Random(seed)
    base = {"id": "chatcmpl-alloc", "object": "chat.completion.chunk", "created": 1727346178,
            "model": "gpt-4o-2024-08-06", "system_fingerprint": "fp_5050236cbd"}
    out = []
    for _ in range(n):
        c = {**base, "choices": [{"index": 0, "delta": {"content": _delta_text(rng)},
                                  "logprobs": None, "finish_reason": None}]}
        out.append(b"data: " + json.dumps(c, ensure_ascii=False, separators=(",", ":")).encode()
                   + b"\n\n")
    return out


def reads_4k(events: list[bytes]) -> list[bytes]:
    body = b"".join(events)
    return [body[i:i + 4 * KIB] for i in range(0, len(body), 4 * KIB)]


def reads_per_event(events: list[bytes]) -> list[bytes]:
    return list(events)


# --------------------------------------------------------------------------
# The peers' SSE framer (LF line endings only)
# --------------------------------------------------------------------------


def _parse_block(block: bytes) -> bytes | None:
    """The slow path: one event block (no blank line inside) -> its data, or
    None when it has no data field. event/id/retry are read and dropped:
    Chat Completions uses none of them."""
    data = []
    for line in block.split(b"\n"):
        if not line or line[0] == 0x3A:  # leading blank line / comment
            continue
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            data.append(value)
    return b"\n".join(data) if data else None


class SSEFramer:
    """A correct, reasonably fast pure-Python SSE framer for the peers.

    Handles LF line endings only (no CR / CRLF): enough for the synthetic
    stream, which uses LF, and the common case on the wire. A partial event
    is kept as a list of reads and joined only once a blank line may have
    arrived, so a large event fed in small reads stays linear. Returns the
    data of each complete event as bytes."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def feed(self, data: bytes) -> list[bytes]:
        parts = self._parts
        if parts:
            if b"\n\n" not in data and not (parts[-1][-1:] == b"\n" and data[:1] == b"\n"):
                parts.append(data)
                return []
            parts.append(data)
            buf = b"".join(parts)
            parts.clear()
        else:
            buf = data
        out: list[bytes] = []
        find = buf.find
        start = 0
        while True:
            end = find(b"\n\n", start)
            if end < 0:
                break
            if buf.startswith(b"data: ", start) and find(b"\n", start, end) < 0:
                out.append(buf[start + 6:end])  # fast path: one `data: ` line
            elif end > start:
                d = _parse_block(buf[start:end])
                if d is not None:
                    out.append(d)
            start = end + 2
        if start < len(buf):
            parts.append(buf[start:] if start else buf)
        return out


# --------------------------------------------------------------------------
# Per-chunk extraction for the peers: one tuple per extracted item
# --------------------------------------------------------------------------

END = ("end", "[DONE]")


def walk_dict(obj: Any, out: list, st: list) -> None:
    """Extract from a chunk parsed to dicts (json / orjson). st holds the
    last (id, model), to report a change the way the core's Meta does."""
    append = out.append
    cid = obj.get("id")
    model = obj.get("model")
    if cid != st[0] or model != st[1]:
        st[0] = cid
        st[1] = model
        append(("meta", cid, model))
    choices = obj.get("choices")
    if choices:
        for ch in choices:
            idx = ch.get("index", 0)
            delta = ch.get("delta")
            if delta:
                c = delta.get("content")
                if c:
                    append(("text", idx, c))
                r = delta.get("reasoning_content")
                if r:
                    append(("reasoning", idx, r))
                r = delta.get("refusal")
                if r:
                    append(("refusal", idx, r))
                tcs = delta.get("tool_calls")
                if tcs:
                    for tc in tcs:
                        ti = tc.get("index")
                        fn = tc.get("function")
                        tid = tc.get("id")
                        name = fn.get("name") if fn else None
                        if tid is not None or name is not None:
                            append(("tool_start", idx, ti, tid, name, tc.get("type")))
                        a = fn.get("arguments") if fn else None
                        if a:
                            append(("tool_args", idx, ti, a))
            fr = ch.get("finish_reason")
            if fr is not None:
                append(("finish", idx, fr))
    u = obj.get("usage")
    if u:
        pd = u.get("prompt_tokens_details") or {}
        cd = u.get("completion_tokens_details") or {}
        append(("usage", u.get("prompt_tokens"), u.get("completion_tokens"),
                u.get("total_tokens"), pd.get("cached_tokens"), cd.get("reasoning_tokens")))


def walk_obj(c: Any, out: list, st: list) -> None:
    """The same extraction over attribute objects (msgspec Structs, openai
    pydantic models). Extra fields of the openai models are attributes too."""
    append = out.append
    if c.id != st[0] or c.model != st[1]:
        st[0] = c.id
        st[1] = c.model
        append(("meta", c.id, c.model))
    for ch in c.choices:
        idx = ch.index
        d = ch.delta
        if d is not None:
            if d.content:
                append(("text", idx, d.content))
            r = getattr(d, "reasoning_content", None)
            if r:
                append(("reasoning", idx, r))
            if d.refusal:
                append(("refusal", idx, d.refusal))
            if d.tool_calls:
                for tc in d.tool_calls:
                    fn = tc.function
                    name = fn.name if fn is not None else None
                    if tc.id is not None or name is not None:
                        append(("tool_start", idx, tc.index, tc.id, name, tc.type))
                    if fn is not None and fn.arguments:
                        append(("tool_args", idx, tc.index, fn.arguments))
        if ch.finish_reason is not None:
            append(("finish", idx, ch.finish_reason))
    u = c.usage
    if u:
        pd = u.prompt_tokens_details
        cd = u.completion_tokens_details
        append(("usage", u.prompt_tokens, u.completion_tokens, u.total_tokens,
                pd.cached_tokens if pd is not None else None,
                cd.reasoning_tokens if cd is not None else None))


if msgspec is not None:
    # Only the fields we read; msgspec skips unknown fields in C. gc=False:
    # these are acyclic, as a performance-minded user would declare them.
    class MFunction(msgspec.Struct, gc=False):
        name: str | None = None
        arguments: str | None = None

    class MToolCall(msgspec.Struct, gc=False):
        index: int | None = None
        id: str | None = None
        type: str | None = None
        function: MFunction | None = None

    class MDelta(msgspec.Struct, gc=False):
        role: str | None = None
        content: str | None = None
        reasoning_content: str | None = None
        refusal: str | None = None
        tool_calls: list[MToolCall] | None = None

    class MChoice(msgspec.Struct, gc=False):
        index: int = 0
        delta: MDelta | None = None
        finish_reason: str | None = None

    class MPromptDetails(msgspec.Struct, gc=False):
        cached_tokens: int | None = None

    class MCompletionDetails(msgspec.Struct, gc=False):
        reasoning_tokens: int | None = None

    class MUsage(msgspec.Struct, gc=False):
        prompt_tokens: int | None = None
        completion_tokens: int | None = None
        total_tokens: int | None = None
        prompt_tokens_details: MPromptDetails | None = None
        completion_tokens_details: MCompletionDetails | None = None

    class MChunk(msgspec.Struct, gc=False):
        id: str | None = None
        model: str | None = None
        choices: list[MChoice] = []
        usage: MUsage | None = None

    _MSGSPEC_DECODE = msgspec.json.Decoder(MChunk).decode


# --------------------------------------------------------------------------
# Approaches: prepare(k) builds k per-stream states outside the timed section,
# run(state, reads) decodes one stream and returns the extracted objects.
# --------------------------------------------------------------------------


def _core_prepare(k: int) -> list:
    return [StreamDecoder(Protocol.OPENAI_CHAT) for _ in range(k)]


def _core_run(dec: StreamDecoder, reads: list[bytes]) -> list:
    out: list = []
    ext = out.extend
    feed = dec.feed
    for r in reads:
        ext(feed(r))
    ext(dec.close())
    return out


def _framer_prepare(k: int) -> list:
    return [SSEFramer() for _ in range(k)]


def _dict_walk_runner(loads):
    """A peer: the framer, `loads` into dicts, the shared dict walk."""
    def run(framer: SSEFramer, reads: list[bytes]) -> list:
        out: list = []
        st = [None, None]
        feed = framer.feed
        for r in reads:
            for data in feed(r):
                if data == b"[DONE]":
                    out.append(END)
                else:
                    walk_dict(loads(data), out, st)
        return out
    return run


_json_run = _dict_walk_runner(json.loads)


def _msgspec_run(framer: SSEFramer, reads: list[bytes]) -> list:
    out: list = []
    st = [None, None]
    feed = framer.feed
    decode = _MSGSPEC_DECODE
    for r in reads:
        for data in feed(r):
            if data == b"[DONE]":
                out.append(END)
            else:
                walk_obj(decode(data), out, st)
    return out


class _FakeResponse:
    """What openai's Stream touches of an httpx response, minus the network."""

    http_version = "HTTP/1.1"
    request = None

    def __init__(self, reads: list[bytes]) -> None:
        self._reads = reads

    def iter_bytes(self):
        return iter(self._reads)

    def close(self) -> None:
        pass


_OPENAI_CLIENT = None


def _openai_client():
    # A client object only so that Stream can call its _make_sse_decoder and
    # _process_response_data; the key is a placeholder and nothing is sent.
    global _OPENAI_CLIENT
    if _OPENAI_CLIENT is None:
        _OPENAI_CLIENT = openai.OpenAI(api_key="bench-placeholder",
                                       base_url="http://127.0.0.1:9/v1", max_retries=0)
    return _OPENAI_CLIENT


def _openai_prepare(k: int) -> list:
    return [_openai_client() for _ in range(k)]


def _openai_run(client, reads: list[bytes]) -> list:
    out: list = []
    st = [None, None]
    stream = _OpenAIStream(cast_to=_OpenAIChunk, response=_FakeResponse(reads), client=client)
    for chunk in stream:  # SSEDecoder, json.loads, construct_type per event; stops at [DONE]
        walk_obj(chunk, out, st)
    return out


APPROACHES: dict[str, tuple[str, Callable, Callable]] = {
    "core": ("core StreamDecoder", _core_prepare, _core_run),
    "json": ("py framer + json", _framer_prepare, _json_run),
    "msgspec": ("py framer + msgspec Structs", _framer_prepare, _msgspec_run),
    "orjson": ("py framer + orjson", _framer_prepare, _dict_walk_runner(orjson.loads) if orjson else None),
    "openai": ("openai SDK Stream", _openai_prepare, _openai_run),
}
_AVAILABLE = {"core": True, "json": True, "msgspec": msgspec is not None,
              "orjson": orjson is not None, "openai": openai is not None}


def available_approaches() -> list[str]:
    return [k for k in APPROACHES if _AVAILABLE[k]]


def decode_once(name: str, reads: list[bytes]) -> list:
    """Run one approach over one stream (for tests)."""
    _, prepare, run = APPROACHES[name]
    return run(prepare(1)[0], reads)


# --------------------------------------------------------------------------
# Normalized view of what an approach extracted (for the correctness check)
# --------------------------------------------------------------------------


def summarize(items: list) -> dict:
    """content, reasoning, tool_calls [[tool index, id, name, arguments]],
    finish reasons, usage [prompt, completion, total, cached, reasoning]."""
    content: list[str] = []
    reasoning: list[str] = []
    tools: dict = {}
    finish: list = []
    usage = None

    def tool(ti):
        return tools.setdefault(ti, [ti, None, None, []])

    for it in items:
        if isinstance(it, tuple):
            kind = it[0]
            if kind == "text":
                content.append(it[2])
            elif kind == "reasoning":
                reasoning.append(it[2])
            elif kind == "tool_start":
                t = tool(it[2])
                t[1], t[2] = it[3], it[4]
            elif kind == "tool_args":
                tool(it[2])[3].append(it[3])
            elif kind == "finish":
                finish.append(it[2])
            elif kind == "usage":
                usage = list(it[1:])
        elif isinstance(it, rec.TextDelta):
            content.append(it.text)
        elif isinstance(it, rec.ReasoningDelta):
            reasoning.append(it.text)
        elif isinstance(it, rec.ToolCallStart):
            t = tool(it.tool_index)
            t[1], t[2] = it.call_id, it.name
        elif isinstance(it, rec.ToolArgsDelta):
            tool(it.tool_index)[3].append(it.text)
        elif isinstance(it, rec.Finish):
            finish.append(it.reason)
        elif isinstance(it, rec.Usage):
            usage = [it.input_tokens, it.output_tokens, it.total_tokens,
                     it.cache_read_tokens, it.reasoning_tokens]
    return {
        "content": "".join(content),
        "reasoning": "".join(reasoning),
        "tool_calls": [[t[0], t[1], t[2], "".join(t[3])] for _, t in sorted(tools.items())],
        "finish": finish,
        "usage": usage,
    }


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------


def _time_sample(run: Callable, states: list, reads: list[bytes]) -> int:
    """ns for decoding the stream once per state; gc off, outputs kept alive
    until the clock stops."""
    outs = []
    keep = outs.append
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        for s in states:
            keep(run(s, reads))
        t1 = time.perf_counter_ns()
    finally:
        gc.enable()
    del outs
    return t1 - t0


def _core_c_only_prepare(k: int) -> list:
    return _core_prepare(k)


def _core_c_only_run(dec: StreamDecoder, reads: list[bytes]) -> None:
    """Diagnostic: the C calls alone, by StreamDecoder's own call (the
    binding of csrc/pyfeed.c), records written but never unpacked. Reaches
    into StreamDecoder's private members on purpose."""
    from agent.stream._binding import lib
    from agent.stream.decoder import NO_PACKED_CODE

    f = dec._feed
    recs = dec._areas[1]  # the int64 record area; words 2, 3: bytes used, full
    for r in reads:
        f(r, NO_PACKED_CODE)
        while recs[3]:  # HA_HDR_FULL: feed the unconsumed rest
            r = r[recs[2]:]
            f(r, NO_PACKED_CODE)
    lib.ha_stream_close(dec._st)


def _quantiles(xs: list[float]) -> tuple[float, float, float]:
    xs = sorted(xs)
    if len(xs) < 4:
        return xs[0], statistics.median(xs), xs[-1]
    q = statistics.quantiles(xs, n=4)
    return q[0], q[1], q[2]


def bench_streams(cfg: dict, log) -> dict:
    events, _ = make_stream(cfg["seed"], cfg["text_chunks"], cfg["reasoning_chunks"],
                            cfg["tool_arg_chars"])
    n_events = len(events)
    regimes = {"4k": reads_4k(events), "event": reads_per_event(events)}
    names = available_approaches()
    runners = {n: (APPROACHES[n][1], APPROACHES[n][2]) for n in names}
    diag = {"core_c_only": (_core_c_only_prepare, _core_c_only_run)}
    all_runners = {**runners, **diag}

    # warm-up, then size each sample to about target_ms
    reps: dict = {}
    for name, (prepare, run) in all_runners.items():
        for reg, reads in regimes.items():
            for _ in range(cfg["warmup"]):
                _time_sample(run, prepare(1), reads)
            t = _time_sample(run, prepare(1), reads)
            reps[name, reg] = max(1, min(cfg["max_reps"],
                                         math.ceil(cfg["target_ms"] * 1e6 / max(t, 1))))
    samples: dict = {(n, r): [] for n in all_runners for r in regimes}
    order = list(all_runners)
    for rnd in range(cfg["rounds"]):
        k = rnd % len(order)
        for name in order[k:] + order[:k]:  # rotate who goes first
            prepare, run = all_runners[name]
            for reg, reads in regimes.items():
                states = prepare(reps[name, reg])
                ns = _time_sample(run, states, reads)
                samples[name, reg].append(ns / (reps[name, reg] * n_events))
                del states
        gc.collect()

    # construction cost of a StreamDecoder (excluded from the per-event figures)
    ctor = []
    for _ in range(max(5, cfg["rounds"])):
        gc.disable()
        t0 = time.perf_counter_ns()
        StreamDecoder(Protocol.OPENAI_CHAT)
        ctor.append(time.perf_counter_ns() - t0)
        gc.enable()

    res: dict = {
        "events": n_events,
        "bytes": sum(map(len, events)),
        "reads": {r: len(v) for r, v in regimes.items()},
        "approaches": {n: APPROACHES[n][0] for n in names},
        "missing": [k for k in APPROACHES if not _AVAILABLE[k]],
        "reps": {f"{n}/{r}": v for (n, r), v in reps.items()},
        "ns_per_event": {},
        "decoder_construction_ns": statistics.median(ctor),
    }
    for (name, reg), xs in samples.items():
        q1, med, q3 = _quantiles(xs)
        res["ns_per_event"].setdefault(name, {})[reg] = {
            "median": med, "q1": q1, "q3": q3, "min": min(xs), "samples": xs}
    return res


# --------------------------------------------------------------------------
# Allocations
# --------------------------------------------------------------------------


def measure_allocations(name: str, n: int, seed: int) -> dict:
    """Blocks retained per event for decoding n text-only chunks, one per read.

    Counted: every memory block allocated through Python's allocators while
    the decode ran (tracemalloc started just before the first feed) that is
    still alive after it, with all resulting events kept alive in one list:
    the event objects, their strings, the list holding them, and anything
    else the decode left behind. Not counted: the decoder / framer and its
    C buffers (built before tracing), the input bytes, blocks freed before
    the end (per-call lists, parsed dicts, transient ints), tracemalloc's own.
    CPython shares one-character Latin-1 strings, so a one-character ASCII
    delta costs no string block. Peak is the highest traced total during
    the decode, i.e. retained plus transient garbage."""
    _, prepare, run = APPROACHES[name]
    reads = make_text_stream(seed, n)
    run(prepare(1)[0], make_text_stream(seed + 1, 50))  # warm caches outside tracing
    state = prepare(1)[0]
    gc.collect()
    gc.disable()
    try:
        tracemalloc.start()
        tracemalloc.reset_peak()
        out = run(state, reads)
        current, peak = tracemalloc.get_traced_memory()
        snap = tracemalloc.take_snapshot()
        tracemalloc.stop()
    finally:
        gc.enable()
    snap = snap.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    stats = snap.statistics("filename")
    blocks = sum(s.count for s in stats)
    size = sum(s.size for s in stats)
    n_objects = len(out)
    del out
    return {"n": n, "objects": n_objects, "blocks": blocks, "blocks_per_event": blocks / n,
            "retained_bytes": size, "retained_bytes_per_event": size / n,
            "peak_bytes": peak, "current_bytes": current}


# --------------------------------------------------------------------------
# Framing: one huge event, whole vs 1 KiB reads
# --------------------------------------------------------------------------


def bench_framing(size: int, rounds: int) -> dict:
    pattern = "abcdefghij0123456789 {\"k\": [1, 2.5, null]} ünïcödé 東京 🚀 ".encode()
    data = (pattern * (size // len(pattern) + 1))[:size]
    while data[-1] & 0xC0 == 0x80 or data[-1] >= 0xC0:  # end on a whole character
        data = data[:-1] + b"x"
    payload = b"data: " + data + b"\n\n"
    whole = [payload]
    pieces = [payload[i:i + KIB] for i in range(0, len(payload), KIB)]
    buffer_size = size + MIB

    def once(reads: list[bytes]) -> int:
        dec = StreamDecoder(Protocol.SSE, buffer_size=buffer_size)
        out: list = []
        gc.disable()
        try:
            t0 = time.perf_counter_ns()
            for r in reads:
                out.extend(dec.feed(r))
            t1 = time.perf_counter_ns()
        finally:
            gc.enable()
        got = [e for e in out if isinstance(e, rec.SSEEvent)]
        if len(got) != 1 or got[0].data != data:
            raise AssertionError(f"framing check failed: {out[:3]!r}")
        del dec, out, got
        return t1 - t0

    once(whole)  # warm-up
    t_whole, t_pieces = [], []
    for _ in range(rounds):
        t_whole.append(once(whole))
        t_pieces.append(once(pieces))
    mw, mp = statistics.median(t_whole), statistics.median(t_pieces)
    return {"size": size, "buffer_size": buffer_size, "reads_1k": len(pieces),
            "whole_ns": mw, "reads_1k_ns": mp, "ratio": mp / mw,
            "whole_gb_per_s": size / mw, "reads_1k_gb_per_s": size / mp,
            "whole_samples": t_whole, "reads_1k_samples": t_pieces}


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def _env() -> dict:
    import cffi

    def ver(m):
        return getattr(m, "__version__", None) if m is not None else None

    return {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "cffi": cffi.__version__, "msgspec": ver(msgspec),
            "orjson": ver(orjson), "openai": ver(openai)}


def report(res: dict, out) -> None:
    def p(s=""):
        print(s, file=out)

    env, cfg, st = res["env"], res["config"], res["streams"]
    p(f"homeagent stream bench: synthetic Chat Completions stream, {st['events']} events, "
      f"{st['bytes']:,} bytes, seed {cfg['seed']}")
    p(f"python {env['python']} {env['machine']}, {env['cpus']} CPUs, cffi {env['cffi']}, "
      f"msgspec {env['msgspec']}, orjson {env['orjson']}, openai {env['openai']}")
    p(f"{cfg['rounds']} interleaved rounds after {cfg['warmup']} warm-up; medians; "
      f"ns per SSE event = time / {st['events']} events ([DONE] included)")
    if st["missing"]:
        p(f"MISSING peers (not installed): {', '.join(st['missing'])}")
    p()
    ns = st["ns_per_event"]
    core = ns["core"]
    hdr = (f"{'approach':<30}{'4 KiB reads':>13}{'x core':>9}{'IQR':>8}   "
           f"{'1 event/read':>13}{'x core':>9}{'IQR':>8}")
    p(f"{'':30}{'(' + str(st['reads']['4k']) + ' reads)':>30}   "
      f"{'(' + str(st['reads']['event']) + ' reads)':>30}")
    p(hdr)
    p("-" * len(hdr))
    rows = list(st["approaches"]) + [k for k in ns if k not in st["approaches"]]
    for name in rows:
        label = st["approaches"].get(name, "  diag: core C call only"
                                     if name == "core_c_only" else name)
        cells = []
        for reg in ("4k", "event"):
            m = ns[name][reg]
            iqr = (m["q3"] - m["q1"]) / m["median"] * 100
            cells.append(f"{m['median']:>13,.0f}{m['median'] / core[reg]['median']:>8.2f}x"
                         f"{iqr:>7.1f}%")
        p(f"{label:<30}{cells[0]}   {cells[1]}")
    p()
    p("x core = approach ns / core ns (above 1: the core is faster). IQR: interquartile "
      "range over rounds, % of the median.")
    if "core_c_only" in ns:
        for reg, what in (("4k", "4 KiB reads"), ("event", "1 event/read")):
            c_only = ns["core_c_only"][reg]["median"]
            tot = core[reg]["median"]
            p(f"core, {what}: C calls (the call from Python included) {c_only:,.0f} ns/event, Python side "
              f"(feed/_unpack frames, tolist, str decode, event objects) {tot - c_only:,.0f} "
              f"ns/event ({(tot - c_only) / tot * 100:.0f}%)")
    ctor = st["decoder_construction_ns"]
    p(f"StreamDecoder() construction (excluded above): {ctor / 1000:,.1f} us "
      f"= {ctor / st['events']:,.0f} ns per event of this stream")
    p()
    for reg, what in (("4k", "4 KiB reads"), ("event", "one event per read")):
        t = res["targets"][reg]
        if t["speedup"] is None:
            p(f"core speed-up over msgspec, {what}: n/a (msgspec missing)")
        else:
            p(f"core speed-up over msgspec, {what}: {t['speedup']:.2f}x  "
              f"(target >= {t['target']}x: {'PASS' if t['pass'] else 'MISS'})  "
              f"[median of per-round ratios {t['speedup_paired_rounds']:.2f}x, "
              f"from minima {t['speedup_from_minima']:.2f}x]")
    p()
    p(f"Python allocations, {res['allocations']['n']} text-only chunks, one event per read, "
      "all results kept alive:")
    p(f"{'approach':<30}{'N':>6}{'blocks/event':>13}{'bytes/event':>13}{'peak bytes':>13}"
      f"{'objects':>9}")
    for name, a in res["allocations"]["by_approach"].items():
        p(f"{st['approaches'][name]:<30}{a['n']:>6}{a['blocks_per_event']:>13.2f}"
          f"{a['retained_bytes_per_event']:>13.1f}{a['peak_bytes']:>13,}{a['objects']:>9}")
    p("(blocks alive after the decode that were allocated during it, incl. the result list; "
      "see measure_allocations)")
    p()
    f = res["framing"]
    p(f"framing, one {f['size'] / MIB:g} MiB event, StreamDecoder(Protocol.SSE, "
      f"buffer_size={f['buffer_size']:,}):")
    p(f"  whole: {f['whole_ns'] / 1e6:,.2f} ms ({f['whole_gb_per_s']:.2f} GB/s)   "
      f"1 KiB reads x{f['reads_1k']}: {f['reads_1k_ns'] / 1e6:,.2f} ms "
      f"({f['reads_1k_gb_per_s']:.2f} GB/s)   ratio {f['ratio']:.2f} (informative)")
    p(f"total bench time {res['elapsed_s']:.1f} s")


def run(quick: bool = False) -> dict:
    if quick:
        cfg = {"seed": 20240926, "text_chunks": 30, "reasoning_chunks": 6, "tool_arg_chars": 60,
               "rounds": 5, "warmup": 1, "target_ms": 0.5, "max_reps": 20,
               "alloc_n": 200, "framing_size": 1 * MIB, "framing_rounds": 3}
    else:
        cfg = {"seed": 20240926, "text_chunks": 260, "reasoning_chunks": 40, "tool_arg_chars": 180,
               "rounds": 25, "warmup": 2, "target_ms": 8.0, "max_reps": 200,
               "alloc_n": 2000, "framing_size": 16 * MIB, "framing_rounds": 5}
    t0 = time.perf_counter()
    log = lambda s: print(s, file=sys.stderr)  # noqa: E731
    streams = bench_streams(cfg, log)
    targets = {}
    ns = streams["ns_per_event"]
    for reg, target in TARGETS.items():
        if "msgspec" in ns:
            m, c = ns["msgspec"][reg], ns["core"][reg]
            sp = m["median"] / c["median"]
            # secondary views, robust to drift and to preemption on a busy machine
            paired = statistics.median(a / b for a, b in zip(m["samples"], c["samples"]))
            targets[reg] = {"target": target, "speedup": sp, "pass": sp >= target,
                            "speedup_paired_rounds": paired,
                            "speedup_from_minima": m["min"] / c["min"]}
        else:
            targets[reg] = {"target": target, "speedup": None, "pass": None}
    allocs = {name: measure_allocations(name, cfg["alloc_n"] if name != "openai"
                                        else max(50, cfg["alloc_n"] // 4), cfg["seed"])
              for name in available_approaches()}
    framing = bench_framing(cfg["framing_size"], cfg["framing_rounds"])
    return {"env": _env(), "config": {**cfg, "quick": quick}, "streams": streams,
            "targets": targets,
            "allocations": {"n": cfg["alloc_n"], "by_approach": allocs},
            "framing": framing, "elapsed_s": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small stream, few rounds (smoke test)")
    ap.add_argument("--json", action="store_true",
                    help="print the results as JSON on stdout (the table goes to stderr)")
    args = ap.parse_args(argv)
    res = run(quick=args.quick)
    report(res, sys.stderr if args.json else sys.stdout)
    if args.json:
        json.dump(res, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
