"""Smoke test of bench/ollama_bench.py: on a small synthetic stream, ours,
the ollama client's path and the line splitter + msgspec give the same
answer in every regime and in random reads; the check fails loudly on a
difference; `--quick --json` runs end to end. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import bench_module
from streams import random_reads

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "ollama_bench.py"

ob = bench_module.load("ollama_bench.py")


@pytest.fixture(scope="module")
def stream():
    return ob.make_stream(11, text_chunks=40, thinking_chunks=8, tool_arg_chars=80)


def test_the_stream_is_shaped_as_claimed(stream):
    lines, expected = stream
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)
    assert len(lines) == 40 + 8 + 2 + 1
    assert json.loads(lines[-1])["done"] is True
    assert any(ord(c) > 0xFFFF for c in expected["text"])
    assert [name for name, _ in expected["calls"]] == ["get_weather", "get_time"]
    assert all(isinstance(json.loads(args), dict) for _, args in expected["calls"])
    # the same seed gives the same bytes
    assert ob.make_stream(11, 40, 8, 80)[0] == lines


@pytest.mark.parametrize("regime", ["4k", "line", "random-1", "random-2"])
def test_every_approach_agrees(stream, regime):
    lines, expected = stream
    reads = (ob.make_reads(lines)[regime] if regime in ob.REGIMES
             else random_reads(lines, seed=int(regime.split("-")[1])))
    # msgspec may have no wheel for the platform (toolchain/arm64.sh's missing peers)
    assert set(ob.runners()) == {"ours", "client"} | ({"msgspec"} if ob.msgspec else set())
    ob.check_agreement(reads, expected)


def test_the_check_fails_loudly_on_a_difference(stream):
    lines, expected = stream
    (name, args), *rest = expected["calls"]
    wrong = {**expected, "calls": [(name, args + " "), *rest]}
    with pytest.raises(ob.db.Mismatch, match="calls"):
        ob.check_agreement(ob.make_reads(lines)["line"], wrong)


def test_quick_mode_runs_end_to_end():
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(proc.stdout)
    assert "peer/ours" in proc.stderr  # the table went to stderr
    assert res["config"]["quick"] is True and res["lines"] > 0
    for regime in ob.REGIMES:
        r = res["regimes"][regime]
        assert r["reads"] > 0 and r["ours"]["median"] > 0
        for peer in ("client", "msgspec") if ob.msgspec else ("client",):
            assert r[peer]["median"] > 0 and r[f"ratio_{peer}"]["medians"] > 0
        # the floor is timed alongside, one line per read, and no ratio to
        # ours is made of it
        assert ("floor" in r) == ("bare" in r) == (regime == "line")
        assert "ratio_floor" not in r and "ratio_bare" not in r
    assert res["regimes"]["line"]["floor"]["median"] > 0
    assert ("msgspec/floor" in proc.stderr) == ("msgspec/bare" in proc.stderr) == bool(ob.msgspec)


def test_the_floor_does_no_decoding(stream):
    """The diagnostic's one event per read holds a piece of the read's own
    bytes, not the stream's text: it is a bound, not a decoder."""
    lines, _ = stream
    out = ob._floor_run(ob._floor_prepare(1)[0], lines)
    assert [type(e).__name__ for e in out] == ["TextDelta"] and out[0].text == lines[-1][2:7].decode()


def test_the_bare_bound_decodes_every_packed_piece(stream):
    """The bare diagnostic does the short way's real work: its events are
    ours' deltas, piece by piece, for every line but the first (which also
    names the model, so its read is not packed and bare only calls)."""
    lines, _ = stream
    events = ob._bare_run(ob._floor_prepare(1)[0], lines)
    dec = ob.OllamaDecoder()
    ours = [e for line in lines for e in dec.feed(line)
            if type(e) in (ob.TextDelta, ob.ReasoningDelta)]
    assert type(events[0]) is ob.ReasoningDelta and type(events[-1]) is ob.TextDelta
    assert events == ours[1:]
