"""MCP benchmark: a tool call through an MCP server (stdio and streamable
HTTP) against the same function through a command device, in one run; and
the daemon's start-up and memory with one MCP server configured, against none.

    python bench/mcp_bench.py [--rounds N] [--starts N] [--calls N] [--quick] [--json]

The function is add(a, b), answered "5" for a=2, b=3, offered four ways:
  builtin  the daemon's own timer_list (the timers provider, in the daemon's
           process): no function of ours, the floor of the daemon's tool path;
  command  a command device whose tool_argv runs `PYTHON -c PROGRAM {a} {b}`
           (a new process per call, as a command device does);
  stdio    an MCPServer of the `mcp` package (FastMCP's successor) on stdio,
           started by the daemon (start = "start");
  http     the same server on streamable HTTP, started by this bench.
`homeagent mock-llm` is the model: an ask on a path's provider is answered
with one call of that path's tool (its x-mock-tool-call header), then, given
the tool's result, with a text; `plain` is the same ask answered with a text
and no call (one model request instead of two).

Calls (one daemon with every path configured, one client connection):
warm-up rounds, then `--rounds` rounds, each asking once on every path, the
order rotating from round to round. Each ask is timed at the client:
  ask   from the `ask` line written to the `done` line read;
  call  from the `tool_call` line read to the `tool_result` line read: the
        daemon starts the tool as soon as the model's call is decoded, and
        the result is sent once the call is done and the model's stream has
        ended (its finish chunk and [DONE], the same on every path): the
        dispatch, the argument checks, the tool's own run (a process, a
        JSON-RPC exchange on a pipe or over HTTP), the result's checks, the
        reply line.
The ask's session is forgotten after each ask (outside the clock), so every
ask sends the same requests. CPU, from /proc (clock ticks, summed over the
rounds, per ask): the daemon's utime+stime across each ask, and the tool's
side: the command's processes (the daemon's cutime+cstime: they are its
children, reaped), the stdio server's and the HTTP server's own utime+stime.
The mock's CPU is not counted (the same two requests on every tool path).
Reported per path: the medians with the interquartile range, the minimum,
and the median of the per-round ratios to the command path.

Start-up (a fresh daemon per start, `--starts` rounds of three variants in
alternating order): `none` (the command device only), `lazy` and `start`
(plus one stdio MCP server, lazy and start = "start"):
  ready    from just before the exec to the READY=1 datagram (startup_bench);
  server   (start only) from the exec to the server's state "ready" in status
           (polled every 10 ms after READY=1);
  memory   the daemon's VmRSS and VmHWM at READY=1 and after `--calls` asks
           each calling add once (through the command device for `none`,
           the MCP server otherwise), and the MCP server's own VmRSS then;
  CPU      the daemon's utime+stime from the exec to READY=1.
Reported: the medians and the median of the per-round ratios to `none`.

--quick: 1 warm-up round, 3 rounds, 1 start, 2 calls (for the smoke test;
its figures are not for reading). With --json the table goes to stderr and
one JSON document to stdout.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    from agent.api.client import Client
except ImportError:  # not installed: run from the source tree
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from agent.api.client import Client

import httpx  # noqa: E402

from agent.demo import terminate  # noqa: E402


def _startup_bench():
    """bench/startup_bench.py (and through it daemon_bench.py), loaded once by path."""
    name = "homeagent_bench_startup_bench"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).resolve().parent / "startup_bench.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


sb = _startup_bench()
db = sb.db
BenchError = db.BenchError
IO_TIMEOUT = db.IO_TIMEOUT
START_TIMEOUT = db.START_TIMEOUT

# The MCP server, run as `PYTHON -c SERVER stdio` or `PYTHON -c SERVER http PORT`.
SERVER = '''
import sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("bench")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


if sys.argv[1] == "stdio":
    server.run("stdio")
else:
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
'''
# The command device's program: the same function, one process per call.
PROGRAM = "import sys; print(int(sys.argv[1]) + int(sys.argv[2]))"
ARGUMENTS = {"a": 2, "b": 3}
EXPECTED = "5"
# path: the tool the model calls (None: no call)
TOOLS = {"plain": None, "builtin": "timer_list", "command": "command_add",
         "stdio": "stdio_add", "http": "http_add"}
VARIANTS = ("none", "lazy", "start")
ADD_SCHEMA = ('{ type = "object", properties = { a = { type = "integer" }, '
              'b = { type = "integer" } }, required = ["a", "b"] }')
CLOCK_TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------
# Config and processes
# --------------------------------------------------------------------------


def toml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string of ASCII is a TOML basic string


def toml_strings(items) -> str:
    return "[" + ", ".join(map(toml_string, items)) + "]"


def tool_provider(path: str, mock_url: str) -> str:
    """A provider whose model calls the path's tool once (none for plain)."""
    text = (f"[providers.{path}]\nprotocol = \"openai-chat\"\nmodel = \"mock-small\"\n"
            f"base_url = {toml_string(mock_url + '/v1')}\n")
    tool = TOOLS[path]
    if tool is not None:
        arguments = {} if path == "builtin" else ARGUMENTS
        call = json.dumps({"name": tool, "arguments": json.dumps(arguments)})
        text += f"headers = {{ \"x-mock-tool-call\" = {toml_string(call)} }}\n"
    return text


def command_device(python: str) -> str:
    return ("[devices.calc]\ntype = \"command\"\nargv = [\"true\"]\nevents = []\n"
            f"tool_argv = {{ command_add = {toml_strings([python, '-c', PROGRAM, '{a}', '{b}'])} }}\n"
            "[[devices.calc.tools]]\nname = \"command_add\"\n"
            "description = \"Add two integers.\"\n"
            f"parameters = {ADD_SCHEMA}\n")


def stdio_server(python: str, start: str) -> str:
    return (f"[mcp.stdio]\nargv = {toml_strings([python, '-c', SERVER, 'stdio'])}\n"
            f"start = \"{start}\"\n")


def write_config(directory: str, mock_url: str, python: str, variant: str,
                 http_url: str | None = None) -> str:
    """db.write_config's daemon, plus a provider per path and the tools:
    the command device always; the stdio server unless variant is none;
    the HTTP server when its URL is given."""
    config = db.write_config(directory, mock_url, db.LOAD_DELAY_MS, timers=True)
    parts = [tool_provider(path, mock_url) for path in TOOLS]
    parts.append(command_device(python))
    if variant != "none":
        parts.append(stdio_server(python, variant))
    if http_url:
        parts.append(f"[mcp.http]\nurl = {toml_string(http_url)}\nstart = \"start\"\n")
    with open(config, "a", encoding="utf-8") as f:
        f.write("\n".join(parts))
    return config


def cpu_ticks(pid: int) -> tuple[int, int]:
    """(utime + stime, cutime + cstime) of a process, clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    utime, stime, cutime, cstime = map(int, fields[11:15])
    return utime + stime, cutime + cstime


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_http_server(python: str, log_path: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    with open(log_path, "ab") as log:
        process = subprocess.Popen([python, "-c", SERVER, "http", str(port)],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   env=db.child_env())
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            httpx.get(url, timeout=IO_TIMEOUT)
            return process, url
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                terminate(process, START_TIMEOUT)
                raise BenchError(f"the MCP server did not listen on {url}:\n"
                                 f"{db._tail(log_path)}") from None
            time.sleep(0.05)


def mcp_status(client: Client) -> dict[str, dict]:
    return {entry["name"]: entry for entry in client.call("status")["mcp"]}


def wait_servers_ready(client: Client, names, poll: float = 0.05) -> int:
    """perf_counter_ns when every named server is ready."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        servers = mcp_status(client)
        if all(servers[name]["state"] == "ready" for name in names):
            return time.perf_counter_ns()
        if time.monotonic() > deadline:
            raise BenchError(f"the MCP servers are not ready: {servers}")
        time.sleep(poll)


def serving(python: str, config: str, directory: str):
    """startup_bench's daemon of this config, importing this tree's agent."""
    return sb.serving(python, sb.variant_env(db.AGENT_ROOT), config, directory)


# --------------------------------------------------------------------------
# One ask
# --------------------------------------------------------------------------


def timed_ask(client: Client, path: str, session: str) -> dict:
    """One ask on the path's provider: ns to done, ns from tool_call to
    tool_result (None without a call); checks the tool's result."""
    t0 = time.perf_counter_ns()
    request_id = client.send("ask", prompt="What is two plus three?", provider=path,
                             session=session)
    called = result = None
    for reply in client.replies(request_id, "ask"):
        kind = reply.get("type")
        if kind == "tool_call":
            called = time.perf_counter_ns()
        elif kind == "tool_result":
            result = time.perf_counter_ns()
            if reply["is_error"] or (path != "builtin" and reply["content"] != EXPECTED):
                raise BenchError(f"{path}: the tool answered {reply}")
        elif kind in ("error", "shutdown"):
            raise BenchError(f"{path}: the daemon answered {reply}")
    done = time.perf_counter_ns()
    if (TOOLS[path] is None) != (called is None) or (called is None) != (result is None):
        raise BenchError(f"{path}: expected {'no' if TOOLS[path] is None else 'one'} tool call")
    return {"ask": done - t0, "call": None if called is None else result - called}


# --------------------------------------------------------------------------
# Calls
# --------------------------------------------------------------------------


def quartiles(values: list[float]) -> dict:
    if len(values) < 2:
        return {"median": values[0], "q1": values[0], "q3": values[0], "min": values[0]}
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": q2, "q1": q1, "q3": q3, "min": min(values)}


def measure_calls(python: str, directory: str, mock_url: str, rounds: int,
                  warmup: int) -> dict:
    http_log = os.path.join(directory, "mcp-http.log")
    http, http_url = start_http_server(python, http_log)
    config = write_config(directory, mock_url, python, "start", http_url)
    socket_path = os.path.join(directory, "agent.sock")
    paths = list(TOOLS)
    samples = {path: {"ask": [], "call": [], "latency": [], "daemon_ticks": 0,
                      "tool_ticks": 0} for path in paths}
    try:
        with serving(python, config, directory) as (daemon, _, _), \
                Client(socket_path, timeout=IO_TIMEOUT) as client:
            wait_servers_ready(client, ("stdio", "http"))
            stdio_pid = mcp_status(client)["stdio"]["pid"]
            tool_side = {"command": lambda: cpu_ticks(daemon.pid)[1],
                         "stdio": lambda: cpu_ticks(stdio_pid)[0],
                         "http": lambda: cpu_ticks(http.pid)[0]}
            for index in range(warmup + rounds):
                shift = index % len(paths)
                for path in paths[shift:] + paths[:shift]:
                    session = f"bench-{path}"
                    tool_cpu = tool_side.get(path, lambda: 0)
                    before = cpu_ticks(daemon.pid)[0], tool_cpu()
                    figures = timed_ask(client, path, session)
                    after = cpu_ticks(daemon.pid)[0], tool_cpu()
                    latency = mcp_status(client)[path]["latency_ms"]["last"] \
                        if path in ("stdio", "http") else None
                    client.call("forget", session=session)
                    if index < warmup:
                        continue
                    sample = samples[path]
                    sample["ask"].append(figures["ask"] / 1e6)
                    if figures["call"] is not None:
                        sample["call"].append(figures["call"] / 1e6)
                    if latency is not None:
                        sample["latency"].append(latency)
                    sample["daemon_ticks"] += after[0] - before[0]
                    sample["tool_ticks"] += after[1] - before[1]
            memory = db.proc_memory(daemon.pid)
    finally:
        terminate(http, START_TIMEOUT)
    return summarize_calls(samples, rounds) | {"daemon_memory_after_kib": memory}


def summarize_calls(samples: dict, rounds: int) -> dict:
    """Per path: the figures' quartiles, the paired per-round differences to
    the builtin path and ratios to the command path, CPU per ask."""
    builtin, command = samples["builtin"]["ask"], samples["command"]["ask"]
    result = {}
    for path, sample in samples.items():
        entry = {"ask_ms": quartiles(sample["ask"]),
                 "ask_ratio_to_command": statistics.median(
                     a / b for a, b in zip(sample["ask"], command)),
                 "daemon_cpu_ms": sample["daemon_ticks"] * CLOCK_TICK_MS / rounds,
                 "tool_cpu_ms": sample["tool_ticks"] * CLOCK_TICK_MS / rounds,
                 "samples": {"ask_ms": sample["ask"], "call_ms": sample["call"],
                             "mcp_latency_ms": sample["latency"]}}
        if TOOLS[path] is not None:
            entry["over_builtin_ms"] = statistics.median(
                a - b for a, b in zip(sample["ask"], builtin))
            entry["call_ms"] = quartiles(sample["call"])
        if sample["latency"]:
            entry["mcp_latency_ms"] = quartiles(sample["latency"])
        result[path] = entry
    return result


# --------------------------------------------------------------------------
# Start-up
# --------------------------------------------------------------------------


def one_start(python: str, directory: str, mock_url: str, variant: str, calls: int) -> dict:
    directory = tempfile.mkdtemp(dir=directory)
    config = write_config(directory, mock_url, python, variant)
    figures = {}
    with serving(python, config, directory) as (process, t0, ready):
        figures["ready_ms"] = (ready - t0) / 1e6
        figures["ready_cpu_ms"] = cpu_ticks(process.pid)[0] * CLOCK_TICK_MS
        memory = db.proc_memory(process.pid)
        figures["ready_rss_kib"], figures["ready_hwm_kib"] = memory["rss"], memory["hwm"]
        with Client(os.path.join(directory, "agent.sock"), timeout=IO_TIMEOUT) as client:
            if variant == "start":
                figures["server_ready_ms"] = (wait_servers_ready(client, ("stdio",), poll=0.01)
                                              - t0) / 1e6
            path = "command" if variant == "none" else "stdio"
            for index in range(calls):
                timed_ask(client, path, f"bench-start-{index}")
            if variant != "none":
                server_pid = mcp_status(client)["stdio"]["pid"]
                figures["server_rss_kib"] = db.proc_memory(server_pid)["rss"]
        memory = db.proc_memory(process.pid)
        figures["after_rss_kib"], figures["after_hwm_kib"] = memory["rss"], memory["hwm"]
    return figures


def measure_starts(python: str, directory: str, mock_url: str, starts: int,
                   calls: int) -> dict:
    samples: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
    for index in range(starts):
        shift = index % len(VARIANTS)
        for variant in VARIANTS[shift:] + VARIANTS[:shift]:
            samples[variant].append(one_start(python, directory, mock_url, variant, calls))
    result = {}
    for variant, runs in samples.items():
        medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        ratios = {key: statistics.median(run[key] / none[key]
                                         for run, none in zip(runs, samples["none"]))
                  for key in runs[0] if key in samples["none"][0]}
        result[variant] = {"median": medians, "ratio_to_none": ratios, "samples": runs}
    return result


# --------------------------------------------------------------------------
# The run and its table
# --------------------------------------------------------------------------


def run(python: str, rounds: int, warmup: int, starts: int, calls: int) -> dict:
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="hamb-") as directory:
        mock, mock_url = db.start_mock(python)
        try:
            tool_calls = measure_calls(python, directory, mock_url, rounds, warmup)
            start_up = measure_starts(python, directory, mock_url, starts, calls)
        finally:
            terminate(mock, START_TIMEOUT)
            mock.stdout.close()
    return {
        "config": {"python": python, "rounds": rounds, "warmup": warmup, "starts": starts,
                   "calls": calls},
        "env": {"python": platform.python_version(), "machine": platform.machine(),
                "cpus": os.cpu_count(), "loadavg_start": load_start,
                "loadavg_end": os.getloadavg()},
        "calls": tool_calls,
        "startup": start_up,
    }


def _spread(figure: dict) -> str:
    return f"{figure['median']:9.2f} {figure['q1']:8.2f}-{figure['q3']:<8.2f}{figure['min']:8.2f}"


def report(result: dict) -> str:
    env, c, calls = result["env"], result["config"], result["calls"]
    lines = [
        f"homeagent MCP bench: Python {env['python']} {env['machine']}, {env['cpus']} CPUs, "
        f"load average {env['loadavg_start'][0]:.2f} -> {env['loadavg_end'][0]:.2f}",
        f"tool calls: {c['rounds']} rounds after {c['warmup']} warm-up; the model calls "
        "add(2, 3) once per ask (plain: no call)",
        "",
        f"  {'path':<9}{'ask ms: median':>15} {'IQR':^17}{'min':>6}  {'-builtin':>9}"
        f"{'/command':>9}  {'tool_call->result':>17}{'MCP latency':>12}"
        f"{'CPU ms/ask: daemon':>20}{'tool':>7}",
    ]
    for path in TOOLS:
        entry = calls[path]
        line = f"  {path:<9}{_spread(entry['ask_ms'])}  "
        line += f"{entry['over_builtin_ms']:9.2f}" if "over_builtin_ms" in entry else f"{'-':>9}"
        line += f"{entry['ask_ratio_to_command']:8.2f}x  "
        line += f"{entry['call_ms']['median']:17.2f}" if "call_ms" in entry else f"{'-':>17}"
        line += f"{entry['mcp_latency_ms']['median']:12.2f}" if "mcp_latency_ms" in entry \
            else f"{'-':>12}"
        line += f"{entry['daemon_cpu_ms']:20.2f}{entry['tool_cpu_ms']:7.2f}"
        lines.append(line)
    memory = calls["daemon_memory_after_kib"]
    lines += [
        "  -builtin: median of the per-round differences to the builtin path's ask (ms);",
        "  /command: median of the per-round ratios to the command path's ask;",
        "  tool_call->result: as read by the client (median ms); MCP latency: the daemon's",
        "  own, from the request queued to the calling task woken with its answer (median ms)",
        f"  the daemon's RSS after the calls: {memory['rss'] / 1024:.1f} MiB "
        f"(VmHWM {memory['hwm'] / 1024:.1f} MiB)",
        "",
        f"start-up: {c['starts']} starts of each, {c['calls']} calls of add after READY=1",
        f"  {'median':<34}" + "".join(f"{v:>10}" for v in VARIANTS)
        + "".join(f"{v + '/none':>12}" for v in VARIANTS[1:]),
    ]
    rows = [("exec to READY=1", "ready_ms", "ms"), ("CPU to READY=1", "ready_cpu_ms", "ms"),
            ("exec to the server ready", "server_ready_ms", "ms"),
            ("RSS at READY=1", "ready_rss_kib", "MiB"), ("VmHWM at READY=1", "ready_hwm_kib", "MiB"),
            ("RSS after the calls", "after_rss_kib", "MiB"),
            ("VmHWM after the calls", "after_hwm_kib", "MiB"),
            ("MCP server's RSS after", "server_rss_kib", "MiB")]
    startup = result["startup"]
    for label, key, unit in rows:
        scale = 1024 if unit == "MiB" else 1
        line = f"  {label + f' ({unit})':<34}" + "".join(
            f"{startup[v]['median'][key] / scale:10.2f}" if key in startup[v]["median"]
            else f"{'-':>10}" for v in VARIANTS)
        line += "".join(f"{startup[v]['ratio_to_none'][key]:11.2f}x"
                        if key in startup[v]["ratio_to_none"] else f"{'-':>12}"
                        for v in VARIANTS[1:])
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40, help="timed rounds of asks")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first")
    parser.add_argument("--starts", type=int, default=5, help="daemon starts per variant")
    parser.add_argument("--calls", type=int, default=20, help="calls after each start")
    parser.add_argument("--quick", action="store_true",
                        help="1 warm-up round, 3 rounds, 1 start, 2 calls: for the smoke test")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter for the daemon, the mock, the servers and the "
                             "command (default: this one)")
    parser.add_argument("--json", action="store_true", help="table to stderr, JSON to stdout")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup, args.starts, args.calls = 3, 1, 1, 2
    if min(args.rounds, args.starts, args.calls) < 1 or args.warmup < 0:
        parser.error("--rounds, --starts and --calls must be at least 1, --warmup at least 0")
    return db.finish(lambda: run(args.python, args.rounds, args.warmup, args.starts, args.calls),
                     report, args.json)


if __name__ == "__main__":
    sys.exit(main())
