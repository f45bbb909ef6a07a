"""Smoke test of bench/startup_bench.py: one round end to end, this
package's daemon against itself through --against (the same interpreter and
PYTHONPATH), checked for structure and sanity; and a daemon that cannot
start fails the run. No timing is asserted."""

from __future__ import annotations

import json
import sys

import bench_module

sb = bench_module.load("startup_bench.py")


def test_one_round_against_itself(capsys):
    assert sb.main(["--rounds", "1", "--against", sys.executable,
                    "--against-path", sb.db.AGENT_ROOT, "--json"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert "exec to READY=1" in err and "this/against" in err  # the table
    assert result["config"]["rounds"] == 1 and result["config"]["against"] == sys.executable
    assert result["bare_interpreter_ms"] > 0
    for name in ("this", "against"):
        (sample,) = result["samples"][name]
        assert sample == result["variants"][name]  # one round: the medians are its figures
        assert set(sample) == set(sb.FIGURES)
        assert all(value > 0 for value in sample.values())
        assert sample["idle_hwm_kib"] >= sample["idle_rss_kib"]  # a high-water mark
    assert set(result["ratios"]) == set(sb.FIGURES)
    assert all(ratio > 0 for ratio in result["ratios"].values())


def test_a_daemon_that_does_not_start_fails_the_run(monkeypatch, capsys):
    real = sb.db.write_config

    def broken(directory, mock_url, load_delay_ms):
        path = real(directory, mock_url, load_delay_ms)
        with open(path, "a", encoding="utf-8") as f:
            f.write("[nonsense]\n")  # an unknown table: the config is refused
        return path

    monkeypatch.setattr(sb.db, "write_config", broken)
    assert sb.main(["--rounds", "1"]) == 1
    assert "FAIL: the daemon exited (2) before READY=1" in capsys.readouterr().err
