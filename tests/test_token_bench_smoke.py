"""Smoke test of bench/token_bench.py: its token server's two regimes, each
consumer's check of the text it got, and a tiny run end to end (a real
daemon, subscribers, and every peer as a process). No timing is asserted."""

from __future__ import annotations

import pytest

import bench_module

tb = bench_module.load("token_bench.py")

pytestmark = pytest.mark.not_emulated(
    reason="about ten interpreters with httpx and the openai SDK: minutes under qemu-user")


def test_paced_is_one_event_a_write_and_bulk_the_same_bytes_16_a_write():
    paced = tb.stream_writes("paced", 40)
    bulk = tb.stream_writes("bulk", 40)
    assert len(paced) == 41 and all(w.count(b"data: ") == 1 for w in paced[:-1])
    assert paced[-1].endswith(b"data: [DONE]\n\n")
    assert len(bulk) == 3 and b"".join(bulk) == b"".join(paced)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    process, url = tb.start_server(tb.sys.executable, str(tmp_path_factory.mktemp("tokens")))
    yield url
    process.kill()
    process.wait()


@pytest.mark.parametrize("kind", ["httpx", "openai", "raw-trio"])
@pytest.mark.parametrize("regime", tb.REGIMES)
def test_each_peer_gets_the_whole_stream(server, kind, regime):
    spent = tb.peer_round(tb.sys.executable, kind, f"{server}/{regime}/30/v1", 30)
    assert spent > 0


def test_a_peer_that_gets_other_text_fails_the_run(server):
    with pytest.raises(tb.BenchError, match="httpx did not get the 31 tokens sent"):
        tb.peer_round(tb.sys.executable, "httpx", f"{server}/paced/30/v1", 31)


def test_a_tiny_run_end_to_end():
    result = tb.run(tokens=30, rounds=1, warmup=0)
    assert result["tokens"] == 30 and result["rounds"] == 1
    for regime in tb.REGIMES:
        figures = result["regimes"][regime]
        assert set(figures["us_per_token"]) == set(tb.CONSUMERS)
        for values in figures["us_per_token"].values():
            assert 0 < values["min"] <= values["median"] <= values["max"]
        assert set(figures["daemon_over"]) == {"httpx", "openai", "raw-trio"}
        assert all(r["median"] > 0 for r in figures["daemon_over"].values())
    report = tb.report(result)
    assert "daemon / httpx" in report and "each extra subscriber" in report
