"""Smoke test of bench/daemon_bench.py: its statistics, its direct-path SSE
reader on a canned stream cut at awkward places, and one tiny run end to end
(a real daemon and mock server) checked for structure and sanity. No timing
is asserted anywhere."""

from __future__ import annotations

import json

import httpx
import pytest

import bench_module
from agent.mock_llm import scripts, wire

db = bench_module.load("daemon_bench.py")


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert db.percentile(values, 50) == 50
    assert db.percentile(values, 99) == 99
    assert db.percentile(values, 100) == 100
    assert db.percentile([7.0], 99) == 7.0
    assert db.percentile([3, 1, 2], 99) == 3  # sorts first


def test_compare_reports_the_difference_and_the_ratio():
    daemon = [3_000_000, 4_000_000, 5_000_000]  # ns
    direct = [1_000_000, 2_000_000, 2_000_000]
    c = db.compare(daemon, direct)
    assert c["daemon"]["median_ms"] == 4.0 and c["direct"]["median_ms"] == 2.0
    assert c["added_ms"] == 2.0 and c["ratio"] == 2.0
    assert c["added_paired_median_ms"] == 2.0  # per round: 2, 2, 3
    assert c["daemon"]["samples_ms"] == [3.0, 4.0, 5.0]


@pytest.mark.parametrize("size", [1, 7, 64, 100_000])
def test_direct_reader_finds_the_first_content_across_read_splits(size):
    answer = scripts.Answer(scripts.ENGLISH)
    turn = wire.Turn(model="mock-small", seed="0", input_tokens=1, include_usage=True)
    body = b"".join(wire.ChatCompletions.stream(answer, turn))
    assert b'"content":""' in body  # the role chunk first: no content, not a delta
    reads = [body[i:i + size] for i in range(0, len(body), size)]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=iter(reads))

    with httpx.Client(transport=httpx.MockTransport(handler)) as http:
        first, total, text = db.direct_first_delta(http, "http://mock/v1/chat/completions",
                                                   {}, {"stream": True})
    assert text == scripts.ENGLISH
    assert 0 < first <= total


def test_a_tiny_run_end_to_end(capsys):
    assert db.main(["--rounds", "5", "--warmup", "1", "--clients", "4", "--waves", "2",
                    "--json"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert "added by the daemon" in err and "idle, after one ask" in err  # the table
    assert result["config"] == {"rounds": 5, "warmup": 1, "clients": 4, "waves": 2,
                                "load_delay_ms": db.LOAD_DELAY_MS, "prompt": db.PROMPT}
    assert result["env"]["python"] and result["env"]["cpus"]

    memory = result["memory"]
    for key in ("idle_rss_kib", "idle_hwm_kib", "load_peak_rss_kib", "load_hwm_kib",
                "after_load_rss_kib", "after_latency_rss_kib"):
        assert isinstance(memory[key], int) and memory[key] > 0, key
    # VmHWM is at least VmRSS in one read of /proc/PID/status. Across two
    # reads it can fall: the kernel raises its stored high-water mark only
    # now and then, and shows the current RSS when that is higher.
    assert memory["idle_hwm_kib"] >= memory["idle_rss_kib"]
    assert len(memory["waves"]) == 2
    for wave in memory["waves"]:
        assert wave["seconds"] > 0 and wave["samples"] >= 1
        assert wave["peak_rss_kib"] > 0 and wave["after_rss_kib"] > 0
        assert wave["hwm_kib"] >= wave["after_rss_kib"]  # one read

    first = result["first_delta"]
    for path in ("daemon", "direct"):
        s = first[path]
        assert s["n"] == len(s["samples_ms"]) == 5
        assert all(x > 0 for x in s["samples_ms"])
        assert 0 < s["min_ms"] <= s["median_ms"] <= s["p99_ms"] <= s["max_ms"]
        assert s["min_ms"] <= s["mean_ms"] <= s["max_ms"]
    assert first["ratio"] > 0
    assert first["added_ms"] == pytest.approx(first["daemon"]["median_ms"]
                                              - first["direct"]["median_ms"])


def test_the_run_stops_when_the_direct_request_is_not_the_daemons(monkeypatch, capsys):
    """The latency comparison is only fair on the same request: a body that
    differs from what the mock recorded of the daemon's fails the run before
    any figure."""
    real = db.build_request

    def other_prompt(provider, conversation, tools=None):
        url, headers, body = real(provider, conversation, tools)
        body["messages"][0]["content"] += " Be brief."
        return url, headers, body

    monkeypatch.setattr(db, "build_request", other_prompt)
    assert db.main(["--rounds", "1", "--warmup", "0", "--clients", "1", "--waves", "1"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "FAIL: the direct request differs from the daemon's in body" in err
