"""Ollama decoder benchmark: OllamaDecoder against the official client's own
parsing path and against a Python line splitter + msgspec, on the same bytes.

    python bench/ollama_bench.py [--quick] [--json]

A synthetic /api/chat stream made from a fixed seed, shaped like a real one
(thinking lines, content lines of 1-20 code points with CJK and emoji, two
tool-call lines, the done line), is fed in two regimes: (A) the body cut into
4 KiB reads, (B) one NDJSON line per read. Three approaches run on the same
reads, each from the first byte to the final answer (text, thinking, tool
calls with their argument bytes, done_reason, counts):

  ours     OllamaDecoder: feed(read) per read, close(), then `.message`
  client   the ollama package's path with no network, as Client.chat(
           stream=True) runs it: httpx's incremental UTF-8 and line decoders
           (Response.iter_lines), json.loads, the `error` check, then
           ChatResponse(**part); the pieces accumulated into the answer
  msgspec  a Python line splitter (bytes, split at LF, the tail kept) and
           msgspec.json.decode into typed Structs, the arguments kept as
           msgspec.Raw (their bytes as sent, as ours keeps them); per read
           it returns the same delta objects ours does (TextDelta,
           ReasoningDelta), the work a consumer that forwards deltas needs
  floor    a diagnostic, no decoder: per read ours' call (the binding of
           csrc/pyfeed.c) given an empty read, one str and one TextDelta in
           a list. msgspec / floor is the most any decoder reaching Python
           by this call and one event object per read could show against
           msgspec, whatever its C code cost; it is timed in the same rounds
           and checked against nothing
  bare     a diagnostic, a bound on ours: per read ours' own call and, for
           the reads it packs (one plain delta: all but a few lines), that
           delta's str and event, inline in the loop with no decoder code
           around them: no method call, no check of the read, no part
           kept. msgspec / bare is the most any Python around this call
           could show against msgspec; the events are checked (the smoke
           test), the time against nothing
  core_call, msgspec_decode
           diagnostics of the same kind: ours' C call alone per read, and
           msgspec's decode alone per line. Each approach less its parse
           is what its Python costs beside that parse, to hold against the
           floor's cost alone

Before any timing, all three are checked to give the same answer in both
regimes; a mismatch stops the run. The method is bench/decoder_bench.py's
(interleaved rounds, rotating order, gc off in the timed sections, samples of
about target_ms, fresh state built outside the clock); reported are medians
of ns per line with their interquartile range, and each peer / ours as a
ratio of medians, of per-round pairs and of minima. Only the ratios within
one run hold: the machine's load moves the nanoseconds.
"""

from __future__ import annotations

import gc
import json
import math
import random
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench/ is no package: its siblings by name

import decoder_bench as db  # noqa: E402  (sets up agent.stream from the tree if needed)

from agent.stream.decoders import OllamaDecoder  # noqa: E402
from agent.stream.decoder import (  # noqa: E402
    _PACKED,
    _PACKED_INDEX,
    _PACKED_KIND,
    _PACKED_KIND_BITS,
    _PACKED_TEXT_SHIFT,
    NO_PACKED_CODE,
    StreamDecoder,
    packed_code,
)
from agent.stream.records import Protocol, ReasoningDelta, TextDelta  # noqa: E402

sb = db.sb

try:
    import ollama
    from httpx._decoders import LineDecoder, TextDecoder
except ImportError:  # pragma: no cover - the test extra brings it
    ollama = None
try:
    import msgspec
except ImportError:  # pragma: no cover - the bench extra brings it
    msgspec = None

REGIMES = ("4k", "line")
MODEL = "qwen3:8b"


# --------------------------------------------------------------------------
# The stream
# --------------------------------------------------------------------------

# Go's encoding/json, which Ollama's server writes with: compact, UTF-8 as
# is but for the HTML characters and the two JavaScript line separators
_GO_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                             "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _go_json(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).translate(_GO_ESCAPES)


def _line(obj: dict) -> bytes:
    return _go_json(obj).encode() + b"\n"


def make_stream(seed: int, text_chunks: int, thinking_chunks: int,
                tool_arg_chars: int) -> tuple[list[bytes], dict]:
    """The stream as a list of lines, and the answer it carries."""
    rng = random.Random(seed)
    stamp = "2026-12-01T10:00:00.%06dZ"
    lines, thinking, text = [], [], []

    def piece(message: dict, i: int) -> bytes:
        return _line({"model": MODEL, "created_at": stamp % i,
                      "message": {"role": "assistant", "content": "", **message}, "done": False})

    for i in range(thinking_chunks):
        t = sb._delta_text(rng)
        thinking.append(t)
        lines.append(piece({"thinking": t}, i))
    for i in range(text_chunks):
        t = sb._delta_text(rng)
        text.append(t)
        lines.append(piece({"content": t}, thinking_chunks + i))
    calls = []
    for k, name in enumerate(("get_weather", "get_time")):
        args = json.loads(db._tool_arguments(rng, tool_arg_chars))
        lines.append(piece({"tool_calls": [{"function": {"name": name, "arguments": args}}]},
                           thinking_chunks + text_chunks + k))
        # the argument string: the object's bytes as the server wrote them
        calls.append((name, _go_json(args)))
    lines.append(_line({"model": MODEL, "created_at": stamp % len(lines),
                        "message": {"role": "assistant", "content": ""}, "done": True,
                        "done_reason": "stop", "total_duration": 4_100_000_000,
                        "load_duration": 60_000_000, "prompt_eval_count": 412,
                        "prompt_eval_duration": 300_000_000, "eval_count": len(lines),
                        "eval_duration": 3_700_000_000}))
    expected = {"text": "".join(text), "thinking": "".join(thinking), "calls": calls,
                "done_reason": "stop", "counts": (412, len(lines) - 1)}
    return lines, expected


def make_reads(lines: list[bytes]) -> dict:
    return {"4k": sb.reads_4k(lines), "line": list(lines)}


# --------------------------------------------------------------------------
# The approaches: prepare(k) builds k fresh states outside the clock;
# run(state, reads) decodes one stream and returns its answer as a dict.
# --------------------------------------------------------------------------

def _ours_prepare(k: int) -> list:
    return [OllamaDecoder() for _ in range(k)]


def _ours_run(dec: OllamaDecoder, reads: list[bytes]) -> dict:
    feed = dec.feed
    for r in reads:
        feed(r)
    dec.close()
    m = dec.message
    return {"text": m.text, "thinking": m.reasoning,
            "calls": [(c.name, c.arguments) for c in m.tool_calls],
            "done_reason": m.raw_finish_reason,
            "counts": (m.usage.input_tokens, m.usage.output_tokens)}


class UpstreamErrorLine(Exception):
    """What the client raises at an error line (its ResponseError)."""


def _client_prepare(k: int) -> list:
    return [(TextDecoder(), LineDecoder()) for _ in range(k)]


def _client_run(state, reads: list[bytes]) -> dict:
    """ollama._client.Client._request's stream loop over Response.iter_lines."""
    text_dec, line_dec = state
    chat = ollama.ChatResponse
    text, thinking, calls, final = [], [], [], None

    def lines():
        for r in reads:
            yield from line_dec.decode(text_dec.decode(r))
        yield from line_dec.decode(text_dec.flush())
        yield from line_dec.flush()

    for line in lines():
        part = json.loads(line)
        if part.get("error"):
            raise UpstreamErrorLine(part["error"])
        resp = chat(**part)
        m = resp.message
        if m.content:
            text.append(m.content)
        if m.thinking:
            thinking.append(m.thinking)
        for c in m.tool_calls or ():
            # the arguments are a dict by now: written back as the server did
            calls.append((c.function.name, _go_json(c.function.arguments)))
        if resp.done:
            final = resp
    return {"text": "".join(text), "thinking": "".join(thinking), "calls": calls,
            "done_reason": final.done_reason,
            "counts": (final.prompt_eval_count, final.eval_count)}


if msgspec is not None:
    class _Function(msgspec.Struct):
        name: str
        arguments: msgspec.Raw

    class _Call(msgspec.Struct):
        function: _Function

    class _Message(msgspec.Struct):
        content: str = ""
        thinking: str | None = None
        tool_calls: list[_Call] | None = None

    class _Line(msgspec.Struct):
        message: _Message | None = None
        done: bool = False
        done_reason: str | None = None
        prompt_eval_count: int | None = None
        eval_count: int | None = None
        error: str | None = None

    _DECODE_LINE = msgspec.json.Decoder(_Line).decode


def _msgspec_prepare(k: int) -> list:
    return [[b""] for _ in range(k)]


def _msgspec_run(tail: list, reads: list[bytes]) -> dict:
    """Per read, like ours: the events a consumer forwards (the same record
    objects ours returns), and the pieces for the answer."""
    decode = _DECODE_LINE
    text, thinking, calls, final = [], [], [], None
    for r in reads:
        parts = (tail[0] + r).split(b"\n") if tail[0] else r.split(b"\n")
        tail[0] = parts.pop()
        out = []
        for line in parts:
            if not line:
                continue
            obj = decode(line)
            if obj.error:
                raise UpstreamErrorLine(obj.error)
            m = obj.message
            if m is not None:
                if m.content:
                    text.append(m.content)
                    out.append(TextDelta(0, m.content))
                if m.thinking:
                    thinking.append(m.thinking)
                    out.append(ReasoningDelta(0, m.thinking))
                if m.tool_calls:
                    for c in m.tool_calls:
                        calls.append((c.function.name, bytes(c.function.arguments).decode()))
            if obj.done:
                final = obj
    return {"text": "".join(text), "thinking": "".join(thinking), "calls": calls,
            "done_reason": final.done_reason,
            "counts": (final.prompt_eval_count, final.eval_count)}


def _floor_prepare(k: int) -> list:
    return [StreamDecoder(Protocol.OLLAMA) for _ in range(k)]


def _floor_run(dec: StreamDecoder, reads: list[bytes]) -> list:
    """Diagnostic, no decoder: per read the least any decoder on this binding
    with one event object per delta does, ours' call given no bytes (so no
    framing, no parsing), one str made from the read's bytes and one
    TextDelta in a list; no answer. msgspec / floor bounds the ratio such a
    decoder can reach over the msgspec peer."""
    feed = dec._feed
    out: list = []
    for r in reads:
        feed(b"", NO_PACKED_CODE)
        out = [TextDelta(0, r[2:7].decode("utf-8"))]
    return out


def _bare_run(dec: StreamDecoder, reads: list[bytes]) -> list:
    """Diagnostic, a bound on ours: a provider decoder's short way inline,
    with nothing of a decoder around it. Per read the core's call, told the
    code of the delta before; a delta that continues it comes back as its
    text's str, and its event is kept. A delta that starts another part
    (packed, another code) is made from the text area, as StreamDecoder
    does. The few other reads (the first line's model, the tool calls, the
    done line) get the call alone, less than ours does for them."""
    feed, text = dec._feed, dec._text
    events: list = []
    keep = events.append
    code, cls, index = NO_PACKED_CODE, None, 0
    for r in reads:
        n = feed(r, code)
        if type(n) is str:
            keep(cls(index, n))
        elif n < 0:
            n = ~n
            delta = _PACKED[n & _PACKED_KIND](n >> _PACKED_KIND_BITS & _PACKED_INDEX,
                                              text[0:n >> _PACKED_TEXT_SHIFT].decode())
            keep(delta)
            code, cls, index = packed_code(delta), type(delta), delta.index
    return events


def _core_call_run(dec: StreamDecoder, reads: list[bytes]) -> None:
    """Diagnostic: ours' call alone, one ha_stream_feed_packed per read by
    the binding, its records and text left in the areas; no Python object
    made but the call's int."""
    feed = dec._feed
    for r in reads:
        feed(r, NO_PACKED_CODE)


def _msgspec_decode_run(_, reads: list[bytes]) -> None:
    """Diagnostic: msgspec's decode alone of each read, which is one line
    in regime (B); no splitting, no event."""
    decode = _DECODE_LINE
    for r in reads:
        decode(r)


# timed with the others (one line per read), no ratio to ours made of them;
# only bare's events are checked (the smoke test), against ours' deltas
DIAGNOSTICS = ("floor", "bare", "core_call", "msgspec_decode")


def runners(diagnostics: bool = False) -> dict:
    out = {"ours": (_ours_prepare, _ours_run)}
    if ollama is not None:
        out["client"] = (_client_prepare, _client_run)
    if msgspec is not None:
        out["msgspec"] = (_msgspec_prepare, _msgspec_run)
    if diagnostics:
        out["floor"] = (_floor_prepare, _floor_run)
        out["bare"] = (_floor_prepare, _bare_run)
        out["core_call"] = (_floor_prepare, _core_call_run)
        if msgspec is not None:
            out["msgspec_decode"] = (_msgspec_prepare, _msgspec_decode_run)
    return out


def check_agreement(reads: list[bytes], expected: dict) -> None:
    for name, (prepare, run) in runners().items():
        got = run(prepare(1)[0], reads)
        if got != expected:
            diff = {k: (got.get(k), expected[k]) for k in expected if got.get(k) != expected[k]}
            raise db.Mismatch(f"{name}: {str(diff)[:400]}")


# --------------------------------------------------------------------------
# Timing and report
# --------------------------------------------------------------------------

def bench(cfg: dict, lines: list[bytes], log) -> dict:
    reads = make_reads(lines)
    run_by = runners(diagnostics=True)
    # the floor bounds the one-line-per-read regime only: with 4 KiB reads
    # the parsing of many lines per call is what costs
    cases = [(a, reg) for a in run_by for reg in REGIMES
             if a not in DIAGNOSTICS or reg == "line"]
    reps: dict = {}
    for case in cases:
        prepare, run = run_by[case[0]]
        for _ in range(cfg["warmup"]):
            sb._time_sample(run, prepare(1), reads[case[1]])
        t = sb._time_sample(run, prepare(1), reads[case[1]])
        reps[case] = max(1, min(cfg["max_reps"], math.ceil(cfg["target_ms"] * 1e6 / max(t, 1))))
    log(f"warm-up done; samples of about {cfg['target_ms']} ms, {cfg['rounds']} rounds")
    samples: dict = {c: [] for c in cases}
    for rnd in range(cfg["rounds"]):
        k = rnd % len(cases)
        for case in cases[k:] + cases[:k]:
            prepare, run = run_by[case[0]]
            states = prepare(reps[case])
            ns = sb._time_sample(run, states, reads[case[1]])
            samples[case].append(ns / (reps[case] * len(lines)))
            del states
        gc.collect()
    res: dict = {}
    for reg in REGIMES:
        r: dict = {"reads": len(reads[reg])}
        for a in run_by:
            if (a, reg) not in samples:
                continue
            xs = samples[a, reg]
            q1, med, q3 = sb._quantiles(xs)
            r[a] = {"median": med, "q1": q1, "q3": q3, "min": min(xs),
                    "iqr_pct": (q3 - q1) / med * 100, "reps": reps[a, reg], "samples": xs}
        o = r["ours"]
        for peer in run_by:
            if peer not in ("ours", *DIAGNOSTICS):
                s = r[peer]
                r[f"ratio_{peer}"] = {
                    "medians": s["median"] / o["median"],
                    "paired_rounds": statistics.median(x / y for x, y in zip(s["samples"],
                                                                              o["samples"])),
                    "minima": s["min"] / o["min"]}
        res[reg] = r
    return res


def configure(quick: bool) -> dict:
    """decoder_bench's sizes and rounds; thinking lines where it has reasoning."""
    cfg = db.configure(quick)
    cfg["thinking_chunks"] = cfg.pop("reasoning_chunks")
    cfg["seed"] = 20261201
    return cfg


def run(quick: bool = False, log=None) -> dict:
    log = log or (lambda s: None)
    cfg = configure(quick)
    t0 = time.perf_counter()
    env = db._env()
    env["ollama"] = version("ollama") if ollama else None
    env["msgspec"] = msgspec.__version__ if msgspec else None
    lines, expected = make_stream(cfg["seed"], cfg["text_chunks"], cfg["thinking_chunks"],
                                  cfg["tool_arg_chars"])
    for reads in make_reads(lines).values():
        check_agreement(reads, expected)
    log(f"agreement checked: {len(lines)} lines, {sum(map(len, lines))} bytes")
    regimes = bench(cfg, lines, log)
    return {"env": env, "config": {**cfg, "quick": quick}, "lines": len(lines),
            "bytes": sum(map(len, lines)),
            "missing": [n for n, m in (("ollama", ollama), ("msgspec", msgspec)) if m is None],
            "regimes": regimes, "elapsed_s": time.perf_counter() - t0}


def report(res: dict, out) -> None:
    def p(s=""):
        print(s, file=out)

    env, cfg = res["env"], res["config"]
    p(f"homeagent ollama bench: OllamaDecoder vs the ollama client's path and a line "
      f"splitter + msgspec, seed {cfg['seed']}{' (--quick)' if cfg['quick'] else ''}")
    p(f"python {env['python']} {env['machine']}, {env['cpus']} CPUs, ollama {env['ollama']}, "
      f"msgspec {env['msgspec']}, pydantic {env['pydantic']}, load {env['loadavg_start']}")
    p(f"stream: {res['lines']} lines, {res['bytes']} bytes; {cfg['rounds']} rounds")
    if res["missing"]:
        p(f"not installed, left out: {', '.join(res['missing'])}")
    p()
    p(f"{'regime':<8}{'reads':>6}  {'approach':<9}{'ns/line':>10}{'IQR %':>7}"
      f"{'peer/ours: medians':>20}{'paired':>8}{'minima':>8}")
    for reg in REGIMES:
        r = res["regimes"][reg]
        for a in ("ours", "client", "msgspec"):
            if a not in r:
                continue
            x = r[a]
            ratio = r.get(f"ratio_{a}")
            tail = (f"{ratio['medians']:>19.2f}x{ratio['paired_rounds']:>7.2f}x"
                    f"{ratio['minima']:>7.2f}x") if ratio else ""
            p(f"{reg:<8}{r['reads']:>6}  {a:<9}{x['median']:>10,.0f}{x['iqr_pct']:>6.0f}%{tail}")
        # the bounds: msgspec against each, medians and per-round pairs
        for name, what in (("floor", "the most a decoder of this call and one event "
                                     "per read could show"),
                           ("bare", "ours' C call, str and event with no decoder code "
                                    "around them, the most any could show")):
            if name in r and "msgspec" in r:
                b, m = r[name], r["msgspec"]
                paired = statistics.median(x / y for x, y in zip(m["samples"], b["samples"]))
                p(f"{'':<14}  {name:<5}{b['median']:>14,.0f}{b['iqr_pct']:>6.0f}%   "
                  f"msgspec/{name} {m['median'] / b['median']:.2f}x, paired {paired:.2f}x: "
                  f"{what}")
        if {"core_call", "msgspec_decode", "floor"} <= r.keys():
            c, d, f = (r[k]["median"] for k in ("core_call", "msgspec_decode", "floor"))
            p(f"{'':<14}  core_call{c:>10,.0f}   msgspec_decode {d:,.0f}: each parse alone; "
              f"ours less its C call {r['ours']['median'] - c:,.0f} against the floor "
              f"{f:,.0f}, msgspec less its decode {r['msgspec']['median'] - d:,.0f}")
    p(f"total bench time {res['elapsed_s']:.1f} s")


def main(argv: list[str] | None = None) -> int:
    return db.command(__doc__, run, report, argv)


if __name__ == "__main__":
    sys.exit(main())
