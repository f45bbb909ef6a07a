"""Smoke test of bench/decoder_bench.py: on each protocol's small synthetic
stream, our decoder and the official SDK's own path give the same final text,
tool call names and argument strings; and `--quick --json` runs end to end.
No timing is asserted anywhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import bench_module
from streams import random_reads

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "decoder_bench.py"


db = bench_module.load("decoder_bench.py")

SMALL = {"seed": 11, "text_chunks": 40, "reasoning_chunks": 8, "tool_arg_chars": 80}


@pytest.fixture(scope="module")
def streams():
    return db.make_streams(SMALL)


def _reads(events: list[bytes], regime: str) -> list[bytes]:
    if regime in ("4k", "event"):
        return db.make_reads(events)[regime]
    return random_reads(events, seed=int(regime.split("-")[1]))


def _need_sdk(protocol: str) -> None:
    if not db.sdk_available(protocol):
        pytest.skip(f"the SDK for {protocol} is not installed (pip install -e .[test])")


@pytest.mark.parametrize("protocol", db.PROTOCOLS)
def test_synthetic_stream_is_shaped_as_claimed(streams, protocol):
    events, expected = streams[protocol]
    body = b"".join(events)
    assert all(e.endswith(b"\n\n") and e.count(b"\n\n") == 1 for e in events)
    text = expected["text"]
    assert any(ord(c) > 0xFFFF for c in text)            # emoji (astral)
    assert any(0x4E00 <= ord(c) <= 0x9FFF for c in text)  # CJK
    assert any(c.isascii() and c.isalpha() for c in text)
    assert len(expected["tool_calls"]) >= 1
    for call_id, name, args in expected["tool_calls"]:
        assert call_id and name
        assert isinstance(json.loads(args), dict)
    # the same seed gives the same bytes
    assert db.make_streams(SMALL)[protocol][0] == events
    if protocol == "anthropic":
        names = [e.split(b"\n", 1)[0] for e in events]
        assert names[:3] == [b"event: message_start", b"event: ping",
                             b"event: content_block_start"]
        assert names[-2:] == [b"event: message_delta", b"event: message_stop"]
        assert names.count(b"event: content_block_delta") > SMALL["text_chunks"]
        assert b'"input_json_delta"' in body and b'"tool_use"' in body
    elif protocol == "responses":
        names = [e.split(b"\n", 1)[0] for e in events]
        assert names[0] == b"event: response.created"
        assert names[-1] == b"event: response.completed"
        assert names.count(b"event: response.output_text.delta") == SMALL["text_chunks"]
        assert b"event: response.function_call_arguments.delta" in names
        assert names.count(b"event: response.output_item.done") == 2
        seqs = [json.loads(e.split(b"data: ", 1)[1])["sequence_number"] for e in events]
        assert seqs == list(range(len(events)))
        assert json.loads(events[-1].split(b"data: ", 1)[1])["response"]["usage"]
    else:
        assert events[-1] == b"data: [DONE]\n\n"


@pytest.mark.parametrize("regime", ["4k", "event", "random-1", "random-2"])
@pytest.mark.parametrize("protocol", db.PROTOCOLS)
def test_ours_and_the_sdk_agree(streams, protocol, regime):
    _need_sdk(protocol)
    events, expected = streams[protocol]
    reads = _reads(events, regime)
    ours = db.decode_once(protocol, "ours", reads)
    sdk = db.decode_once(protocol, "sdk", reads)
    assert ours["text"] == sdk["text"] == expected["text"]
    assert [c[1] for c in ours["tool_calls"]] == [c[1] for c in sdk["tool_calls"]]  # names
    assert [c[2] for c in ours["tool_calls"]] == [c[2] for c in sdk["tool_calls"]]  # arguments
    assert ours["tool_calls"] == sdk["tool_calls"] == expected["tool_calls"]  # ids too
    # the bench's own pre-timing check passes on the same reads
    db.check_agreement(protocol, reads, expected)


@pytest.mark.parametrize("protocol", db.PROTOCOLS)
def test_the_check_fails_loudly_on_a_difference(streams, protocol):
    events, expected = streams[protocol]
    reads = db.make_reads(events)["event"]
    wrong_text = {**expected, "text": expected["text"][:-1] + "?"}
    with pytest.raises(db.Mismatch, match="text"):
        db.check_agreement(protocol, reads, wrong_text)
    cid, name, args = expected["tool_calls"][0]
    wrong_args = {**expected, "tool_calls": [(cid, name, args + " ")]
                  + expected["tool_calls"][1:]}
    with pytest.raises(db.Mismatch, match="tool_calls"):
        db.check_agreement(protocol, reads, wrong_args)


def test_the_check_compares_the_two_sides(streams, monkeypatch):
    """A difference between ours and the SDK alone is caught too."""
    _need_sdk("anthropic")
    events, expected = streams["anthropic"]
    real = db.sdk_view

    def off_by_one(protocol, final):
        v = real(protocol, final)
        return {**v, "text": v["text"] + "x"}

    monkeypatch.setattr(db, "sdk_view", off_by_one)
    with pytest.raises(db.Mismatch, match="ours and the SDK"):
        db.check_agreement("anthropic", db.make_reads(events)["4k"], expected)


def test_quick_mode_runs_end_to_end():
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(proc.stdout)
    assert "SDK/ours" in proc.stderr  # the table went to stderr
    assert res["config"]["quick"] is True
    assert res["env"]["python"] and res["env"]["cpus"]
    rows = {(r["protocol"], r["regime"]): r for r in res["rows"]}
    assert set(rows) == {(p, reg) for p in db.PROTOCOLS for reg in db.REGIMES}
    for (protocol, regime), r in rows.items():
        assert r["events"] > 0 and r["reads"] > 0
        assert r["ours_ns_per_event"] > 0
        if db.sdk_available(protocol):
            assert r["sdk_ns_per_event"] > 0 and r["ratio"] > 0
            assert r["ratio_paired_rounds"] > 0 and r["ratio_from_minima"] > 0
        detail = res["protocols"][protocol]["regimes"][regime]
        for approach in ("ours", "sdk") if db.sdk_available(protocol) else ("ours",):
            assert len(detail[approach]["samples"]) == res["config"]["rounds"] >= 5
            assert all(x > 0 for x in detail[approach]["samples"])
