"""Smoke test of bench/stream_bench.py, and a correctness check of its peers and of
the core: every approach must extract the same content, reasoning, tool calls,
finish reasons and usage from the same bytes. No timing is asserted anywhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import bench_module
from streams import random_reads

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "stream_bench.py"


sb = bench_module.load("stream_bench.py")

from agent.stream import Protocol, StreamDecoder  # noqa: E402
from agent.stream.records import SSEEvent


@pytest.fixture(scope="module")
def small():
    return sb.make_stream(seed=7, text_chunks=40, reasoning_chunks=8, tool_arg_chars=80)


def _reads(events: list[bytes], regime: str) -> list[bytes]:
    if regime == "4k":
        return sb.reads_4k(events)
    if regime == "event":
        return sb.reads_per_event(events)
    if regime == "bytewise":
        body = b"".join(events)
        return [body[i:i + 1] for i in range(len(body))]
    return random_reads(events, seed=int(regime.split("-")[1]))


def test_synthetic_stream_is_what_the_benchmark_claims(small):
    events, expected = small
    assert events[-1] == b"data: [DONE]\n\n"
    assert all(e.startswith(b"data: ") and e.endswith(b"\n\n") for e in events)
    body = b"".join(events)
    assert b"\r" not in body  # the peers' framer handles LF only
    content = expected["content"]
    assert any(ord(c) > 0xFFFF for c in content)          # emoji (astral)
    assert any(0x4E00 <= ord(c) <= 0x9FFF for c in content)  # CJK
    assert any(c.isascii() and c.isalpha() for c in content)
    assert expected["reasoning"]
    assert [t[0] for t in expected["tool_calls"]] == [0, 1]
    for _, call_id, name, args in expected["tool_calls"]:
        assert call_id.startswith("call_") and name
        json.loads(args)  # the pieces join into whole JSON arguments
    assert expected["finish"] == ["tool_calls"]
    assert all(isinstance(v, int) for v in expected["usage"])
    last = json.loads(events[-2][6:])
    assert last["choices"] == [] and last["usage"]["total_tokens"] == expected["usage"][2]
    # the same seed gives the same bytes
    assert sb.make_stream(seed=7, text_chunks=40, reasoning_chunks=8,
                          tool_arg_chars=80)[0] == events


# the SDK path over 1-byte reads is slow and checks nothing the others miss
_CASES = [(name, regime) for name in sb.APPROACHES
          for regime in ("4k", "event", "random-1", "random-2", "bytewise")
          if not (name == "openai" and regime == "bytewise")]


@pytest.mark.parametrize("name, regime", _CASES)
def test_every_approach_extracts_the_same(small, name, regime):
    if name not in sb.available_approaches():
        pytest.skip(f"peer {name} is not installed (pip install -e .[bench])")
    events, expected = small
    got = sb.summarize(sb.decode_once(name, _reads(events, regime)))
    for key in ("content", "reasoning", "tool_calls", "finish", "usage"):
        assert got[key] == expected[key], f"{name}/{regime}: {key} differs"


def test_core_events_and_peer_tuples_describe_the_same_stream(small):
    """Beyond the joined text: per event (one event per read, where the core
    cannot coalesce), the core and the json peer see the same pieces."""
    events, _ = small
    reads = sb.reads_per_event(events)
    core = sb.decode_once("core", reads)
    peer = sb.decode_once("json", reads)

    def pieces(items):
        s = []
        for it in items:
            if isinstance(it, tuple):
                if it[0] in ("text", "reasoning"):
                    s.append((it[0], it[2]))
                elif it[0] == "tool_args":
                    s.append(("tool_args", it[2], it[3]))
            else:
                kind = type(it).__name__
                if kind == "TextDelta":
                    s.append(("text", it.text))
                elif kind == "ReasoningDelta":
                    s.append(("reasoning", it.text))
                elif kind == "ToolArgsDelta" and it.text:
                    s.append(("tool_args", it.tool_index, it.text))
        return s

    assert pieces(core) == pieces(peer)


SSE_CASES = [
    b"data: one\n\n",
    b"data:no-space\n\n",
    b": a comment\ndata: after comment\n\n",
    b"data: line1\ndata: line2\ndata:\n\n",
    b"event: ping\ndata: named\n\n",
    b"id: 7\ndata: with id\n\n",
    b"\n\n\ndata: after blank lines\n\n",
    b"data\n\n",
    b": only a comment\n\n",
    "data: ünï 東京 🚀\n\n".encode(),
    b"data: " + b"x" * 5000 + b"\n\n",
]


@pytest.mark.parametrize("seed", range(8))
def test_peer_framer_agrees_with_the_core_on_lf_sse(seed):
    body = b"".join(SSE_CASES) * 3
    reads = random_reads([body], seed, hi=[1, 3, 17, 200, 4096, 7, 2, 64][seed])
    framer = sb.SSEFramer()
    got = [d for r in reads for d in framer.feed(r)]
    dec = StreamDecoder(Protocol.SSE)
    want = [e.data for r in reads for e in dec.feed(r) if isinstance(e, SSEEvent)]
    want += [e.data for e in dec.close() if isinstance(e, SSEEvent)]
    assert got == want
    assert b"x" * 5000 in got


def test_allocation_measure_counts_events(small):
    a = sb.measure_allocations("core", 100, seed=3)
    assert a["n"] == 100 and a["objects"] >= 100
    assert a["blocks"] > 0 and a["peak_bytes"] >= a["retained_bytes"] > 0


def test_quick_mode_runs_end_to_end():
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(proc.stdout)
    table = proc.stderr
    assert "core speed-up over msgspec" in table and "framing" in table
    ns = res["streams"]["ns_per_event"]
    for name in sb.available_approaches():
        for regime in ("4k", "event"):
            m = ns[name][regime]
            assert m["median"] > 0 and len(m["samples"]) == res["config"]["rounds"] >= 5
    assert set(res["targets"]) == {"4k", "event"}
    assert res["allocations"]["by_approach"]["core"]["blocks_per_event"] > 0
    assert res["framing"]["ratio"] > 0
    assert res["config"]["quick"] is True
