"""Smoke test of bench/mcp_bench.py: --quick end to end (a real daemon, the
mock model, the `mcp` package's server on stdio and over HTTP, a command
device), checked for what it names: every path timed each round, the tool
calls answered, the start-up variants measured. No timing is asserted."""

from __future__ import annotations

import json

import bench_module

mb = bench_module.load("mcp_bench.py")


def test_quick_reports_every_path_and_every_start_up_variant(capsys):
    assert mb.main(["--quick", "--json"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    for label in ("ask ms: median", "-builtin", "/command", "MCP latency",
                  "exec to READY=1", "exec to the server ready", "MCP server's RSS after"):
        assert label in err, label  # the table
    config = result["config"]
    assert (config["rounds"], config["warmup"], config["starts"], config["calls"]) == (3, 1, 1, 2)

    calls = result["calls"]
    for path, tool in mb.TOOLS.items():
        entry = calls[path]
        assert len(entry["samples"]["ask_ms"]) == 3
        assert all(value > 0 for value in entry["samples"]["ask_ms"])
        assert entry["ask_ms"]["min"] <= entry["ask_ms"]["median"]
        # a call on every tool path's ask, read between the ask's replies
        assert len(entry["samples"]["call_ms"]) == (0 if tool is None else 3)
        assert ("over_builtin_ms" in entry) == (tool is not None)
        # the daemon's own latency figure, for the MCP paths only
        assert len(entry["samples"]["mcp_latency_ms"]) == (3 if path in ("stdio", "http") else 0)
        assert entry["daemon_cpu_ms"] >= 0 and entry["tool_cpu_ms"] >= 0
    assert calls["command"]["ask_ratio_to_command"] == 1
    assert calls["builtin"]["over_builtin_ms"] == 0
    assert calls["daemon_memory_after_kib"]["hwm"] >= calls["daemon_memory_after_kib"]["rss"] > 0

    startup = result["startup"]
    assert set(startup) == set(mb.VARIANTS)
    for variant in mb.VARIANTS:
        (sample,) = startup[variant]["samples"]
        assert sample == startup[variant]["median"]  # one start: the medians are its figures
        assert all(value > 0 for value in sample.values())
        assert sample["after_hwm_kib"] >= sample["after_rss_kib"]
        # the server's figures where there is a server, its start where it starts at once
        assert ("server_rss_kib" in sample) == (variant != "none")
        assert ("server_ready_ms" in sample) == (variant == "start")
    assert startup["start"]["median"]["server_ready_ms"] > startup["start"]["median"]["ready_ms"]
    assert startup["none"]["ratio_to_none"]["ready_ms"] == 1
