"""Daemon benchmark: the daemon's memory, idle and under load, and the latency
it adds to the first text delta.

    python bench/daemon_bench.py [--rounds N] [--clients N] [--waves N] [--json]

Starts `homeagent mock-llm` (the scripted model server, on loopback) and
`homeagent serve` on a Unix socket in a temporary directory, as subprocesses
of this interpreter, with the daemon's default settings but for the paths.

Memory (the daemon's VmRSS / VmHWM from /proc):
  idle   after start and one ask (the request check's, below), its
         connection closed;
  load   `--clients` clients at once, each streaming one answer on its own
         session from a paced provider (x-mock-delay-ms, 3 ms between the
         parts of an answer, so the streams overlap), `--waves` times: the
         peak of RSS sampled every ~5 ms while a wave runs, VmHWM (the
         kernel's own peak) after it, and RSS once the wave's connections
         are gone and its sessions forgotten.

First delta: the time from sending a request to receiving the first text
delta of the answer, with no mock delay, two ways in interleaved rounds
(each round does both, in alternating order; warm-up rounds first):
  daemon  one connection to the daemon's socket kept open: the `ask` line is
          written, reply lines are read (and json-decoded) until the first
          `delta`. Includes the daemon's whole path: request parsing, the
          session's history load (in memory), the upstream request
          on its pooled keep-alive connection, the mock's answer, decoding,
          the reply line; and the client's own encode/decode.
  direct  one httpx.Client kept open (keep-alive, like the daemon's pooled
          AsyncClient): the same Chat Completions request the daemon sends
          (built with build_request from the daemon's own Provider and system
          prompt; checked against what the mock recorded before timing), the
          raw body read and split into SSE events until the first data line
          whose delta has non-empty content. Includes httpx's request setup
          on a kept-alive connection and the mock's answer.
The rest of each answer is read outside the clock and checked. The session
is forgotten after each daemon round (outside the clock), so every round
sends the same request. Reported: median, p99, mean and min of each, the
added latency (daemon median - direct median, and the median of the paired
per-round differences) and the ratio of medians. Both paths share the CPU
with the mock server (2 cores here); the daemon path also with the daemon.

With --json the table goes to stderr and one JSON document to stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

try:
    import agent
except ImportError:  # not installed: run from the source tree
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import agent

import httpx  # noqa: E402

from agent.api.client import Client, DaemonUnavailable  # noqa: E402
from agent.demo import terminate  # noqa: E402
from agent.mock_llm import scripts  # noqa: E402
from agent.mock_llm import server as mock_server  # noqa: E402
from agent.providers.requests import Conversation, UserTurn, build_request  # noqa: E402
from agent.service.config import load as load_config  # noqa: E402

PROMPT = "How warm is the living room right now?"  # scripted answer: ENGLISH
EXPECTED = scripts.ENGLISH
# The load's prompts, one per script, client i asks LOAD_PROMPTS[i % 4].
LOAD_PROMPTS = [
    (PROMPT, scripts.ENGLISH),
    ("客厅现在多少度？", scripts.CHINESE),
    ("Wie warm ist es im Wohnzimmer? Bitte auf Deutsch.", scripts.GERMAN),
    ("Say good night with emoji.", scripts.EMOJI),
]
LOAD_DELAY_MS = 3
SESSION = "bench-latency"
START_TIMEOUT = 60.0
IO_TIMEOUT = 60.0
SAMPLE_INTERVAL = 0.005
# Where `agent` was imported from: the children import the same one.
AGENT_ROOT = str(Path(agent.__file__).resolve().parent.parent)


class BenchError(Exception):
    """The run cannot give honest figures: a check failed or a process died."""


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values_ns: list[int]) -> dict:
    ms = [v / 1e6 for v in values_ns]
    return {"n": len(ms), "median_ms": statistics.median(ms), "p99_ms": percentile(ms, 99),
            "mean_ms": statistics.fmean(ms), "min_ms": min(ms), "max_ms": max(ms),
            "samples_ms": ms}


def compare(daemon_ns: list[int], direct_ns: list[int]) -> dict:
    a, b = summary(daemon_ns), summary(direct_ns)
    paired = [(x - y) / 1e6 for x, y in zip(daemon_ns, direct_ns)]
    return {"daemon": a, "direct": b,
            "added_ms": a["median_ms"] - b["median_ms"],
            "added_paired_median_ms": statistics.median(paired),
            "added_p99_ms": a["p99_ms"] - b["p99_ms"],
            "ratio": a["median_ms"] / b["median_ms"]}


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [AGENT_ROOT, env.get("PYTHONPATH")]))
    for name in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "HOMEAGENT_SOCKET"):
        env.pop(name, None)
    return env


def start_mock(python: str) -> tuple[subprocess.Popen, str]:
    try:
        return mock_server.spawn(python, env=child_env())
    except RuntimeError as exc:
        raise BenchError(str(exc)) from None


def write_config(directory: str, mock_url: str, load_delay_ms: int, *,
                 timers: bool = False) -> str:
    """The bench's daemon; without timers (the default) its requests carry no
    tools, the same as the direct request's."""
    path = os.path.join(directory, "config.toml")
    provider = ('protocol = "openai-chat"\nbase_url = {url}\nmodel = "mock-small"\n'
                .format(url=json.dumps(mock_url + "/v1")))
    text = (f'default_provider = "mock"\n'
            f'[daemon]\nsocket = {json.dumps(os.path.join(directory, "agent.sock"))}\n'
            f'state_directory = {json.dumps(os.path.join(directory, "state"))}\n'
            f'[providers.mock]\n{provider}'
            f'[providers.paced]\n{provider}'
            f'headers = {{ "x-mock-delay-ms" = "{load_delay_ms}" }}\n'
            f'[timers]\nenabled = {"true" if timers else "false"}\n')
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def start_daemon(python: str, config_path: str, socket_path: str,
                 log_path: str) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        process = subprocess.Popen([python, "-m", "agent.cli", "serve", "--config", config_path],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   env=child_env())
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise BenchError(f"the daemon exited ({process.returncode}):\n{_tail(log_path)}")
        try:
            Client(socket_path, timeout=IO_TIMEOUT).close()
            return process
        except (DaemonUnavailable, OSError):
            if time.monotonic() > deadline:
                process.kill()
                raise BenchError(f"the daemon did not answer within {START_TIMEOUT:g} s:\n"
                                 f"{_tail(log_path)}") from None
            time.sleep(0.05)


def _tail(path: str, size: int = 4000) -> str:
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")[-size:]


def proc_memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, KiB."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS", "VmHWM")))
    return {"rss": int(fields["VmRSS"].split()[0]), "hwm": int(fields["VmHWM"].split()[0])}


# --------------------------------------------------------------------------
# Clients
# --------------------------------------------------------------------------


def ask(client: Client, prompt: str, **fields) -> tuple[int | None, int, str]:
    """One ask: (ns from send to the first delta, ns to the end, joined text).
    Raises BenchError on an error reply."""
    t0 = time.perf_counter_ns()
    request_id = client.send("ask", prompt=prompt, **fields)
    first = None
    text = []
    for reply in client.replies(request_id, "ask"):
        kind = reply.get("type")
        if kind == "delta":
            if first is None:
                first = time.perf_counter_ns() - t0
            text.append(reply["text"])
        elif kind in ("error", "shutdown"):
            raise BenchError(f"the daemon answered {reply}")
    return first, time.perf_counter_ns() - t0, "".join(text)


def wait_idle(socket_path: str, timeout: float = IO_TIMEOUT) -> dict:
    """Status until no ask is active and the only connection is this one."""
    deadline = time.monotonic() + timeout
    with Client(socket_path, timeout=IO_TIMEOUT) as client:
        while True:
            status = client.call("status")
            if not status["active"] and status["clients"] == 1:
                return status
            if time.monotonic() > deadline:
                raise BenchError(f"the daemon is not idle: {status}")
            time.sleep(0.01)


def direct_first_delta(http: httpx.Client, url: str, headers: dict,
                       body: dict) -> tuple[int | None, int, str]:
    """The same request straight to the mock: (ns from the request to the first
    SSE data line with content, ns to the end, joined content)."""
    t0 = time.perf_counter_ns()
    first = None
    text = []
    buffer = b""
    with http.stream("POST", url, headers=headers, json=body) as response:
        if response.status_code != 200:
            raise BenchError(f"the mock answered HTTP {response.status_code}")
        for chunk in response.iter_raw():
            buffer += chunk
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                for line in event.split(b"\n"):
                    if not line.startswith(b"data: ") or line == b"data: [DONE]":
                        continue
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    content = (choices[0].get("delta") or {}).get("content")
                    if content:
                        if first is None:
                            first = time.perf_counter_ns() - t0
                        text.append(content)
    return first, time.perf_counter_ns() - t0, "".join(text)


def mock_requests(http: httpx.Client, mock_url: str) -> list[dict]:
    return http.get(mock_url + "/_mock/requests").json()


def check_same_request(http: httpx.Client, mock_url: str, daemon_client: Client,
                       url: str, headers: dict, body: dict) -> None:
    """Before any timing: the direct path sends what the daemon sends."""
    http.delete(mock_url + "/_mock/requests")
    _, _, text = ask(daemon_client, PROMPT, session=SESSION, provider="mock")
    daemon_client.call("forget", session=SESSION)
    if text != EXPECTED:
        raise BenchError(f"the first ask was answered {text!r}")
    direct_first_delta(http, url, headers, body)
    records = mock_requests(http, mock_url)
    if len(records) != 2:
        raise BenchError(f"expected 2 requests at the mock, got {len(records)}")
    via_daemon, direct = records
    for key in ("method", "path", "body", "headers"):  # headers: every one, httpx's too
        if via_daemon[key] != direct[key]:
            raise BenchError(f"the direct request differs from the daemon's in {key}: "
                             f"{via_daemon[key]!r} != {direct[key]!r}")
    http.delete(mock_url + "/_mock/requests")


# --------------------------------------------------------------------------
# The phases
# --------------------------------------------------------------------------


def load_wave(socket_path: str, pid: int, clients: int, wave: int) -> dict:
    """`clients` clients at once, each streaming one answer on its own session."""
    results: dict[int, object] = {}
    barrier = threading.Barrier(clients + 1)
    done = threading.Event()
    samples: list[int] = []

    def one(index: int) -> None:
        prompt, expected = LOAD_PROMPTS[index % len(LOAD_PROMPTS)]
        try:
            with Client(socket_path, timeout=IO_TIMEOUT) as client:
                barrier.wait(IO_TIMEOUT)
                _, _, text = ask(client, prompt, session=f"bench-load-{wave}-{index}",
                                 provider="paced")
            results[index] = None if text == expected else f"client {index}: {text!r}"
        except Exception as exc:  # reported below
            results[index] = f"client {index}: {exc!r}"
            barrier.abort()

    def sample() -> None:
        while not done.is_set():
            samples.append(proc_memory(pid)["rss"])
            time.sleep(SAMPLE_INTERVAL)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    try:
        barrier.wait(IO_TIMEOUT)
    except threading.BrokenBarrierError:
        pass
    for thread in threads:
        thread.join(IO_TIMEOUT)
    elapsed = time.perf_counter() - t0
    done.set()
    sampler.join()
    problems = [p for p in results.values() if p is not None]
    if len(results) != clients or problems:
        raise BenchError(f"load wave {wave}: {clients - len(results)} clients unfinished, "
                         f"problems: {problems[:3]}")
    with Client(socket_path, timeout=IO_TIMEOUT) as client:
        for index in range(clients):
            client.call("forget", session=f"bench-load-{wave}-{index}")
    wait_idle(socket_path)
    memory = proc_memory(pid)
    return {"seconds": elapsed, "peak_rss_kib": max(samples), "hwm_kib": memory["hwm"],
            "after_rss_kib": memory["rss"], "samples": len(samples)}


def latency_rounds(daemon_client: Client, http: httpx.Client, url: str, headers: dict,
                   body: dict, rounds: int, warmup: int) -> tuple[list[int], list[int]]:
    daemon_ns: list[int] = []
    direct_ns: list[int] = []

    def via_daemon() -> int:
        first, _, text = ask(daemon_client, PROMPT, session=SESSION, provider="mock")
        daemon_client.call("forget", session=SESSION)
        if first is None or text != EXPECTED:
            raise BenchError(f"daemon path: {text!r}")
        return first

    def direct() -> int:
        first, _, text = direct_first_delta(http, url, headers, body)
        if first is None or text != EXPECTED:
            raise BenchError(f"direct path: {text!r}")
        return first

    for index in range(warmup + rounds):
        if index % 2 == 0:
            a = via_daemon()
            b = direct()
        else:
            b = direct()
            a = via_daemon()
        if index >= warmup:
            daemon_ns.append(a)
            direct_ns.append(b)
    return daemon_ns, direct_ns


def run(rounds: int = 200, clients: int = 50, waves: int = 3, warmup: int = 10,
        load_delay_ms: int = LOAD_DELAY_MS, python: str | None = None) -> dict:
    python = python or sys.executable
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="hab-") as directory:
        mock, mock_url = start_mock(python)
        daemon = None
        log_path = os.path.join(directory, "daemon.log")
        try:
            config_path = write_config(directory, mock_url, load_delay_ms)
            config = load_config(config_path)
            socket_path = config.daemon.socket
            daemon = start_daemon(python, config_path, socket_path, log_path)
            provider = config.providers["mock"].provider
            url, headers, body = build_request(
                provider, Conversation(config.sessions.system_prompt, [UserTurn(PROMPT)]))

            with httpx.Client(timeout=IO_TIMEOUT) as http:
                # Before any figure: the direct path sends what the daemon
                # sends. Its ask is the warm-up ask of the idle figure.
                with Client(socket_path, timeout=IO_TIMEOUT) as daemon_client:
                    check_same_request(http, mock_url, daemon_client, url, headers, body)
                wait_idle(socket_path)
                idle = proc_memory(daemon.pid)

                load = [load_wave(socket_path, daemon.pid, clients, wave)
                        for wave in range(waves)]

                with Client(socket_path, timeout=IO_TIMEOUT) as daemon_client:
                    daemon_ns, direct_ns = latency_rounds(daemon_client, http, url, headers,
                                                          body, rounds, warmup)
                http.delete(mock_url + "/_mock/requests")
            after_latency = proc_memory(daemon.pid)
        except BaseException:
            if daemon is not None and daemon.poll() is not None:
                print(_tail(log_path), file=sys.stderr)
            raise
        finally:
            if daemon is not None:
                terminate(daemon, START_TIMEOUT)
            terminate(mock, START_TIMEOUT)
            mock.stdout.close()
        if daemon.returncode != 0:
            raise BenchError(f"the daemon exited {daemon.returncode}:\n{_tail(log_path)}")
    return {
        "config": {"rounds": rounds, "warmup": warmup, "clients": clients, "waves": waves,
                   "load_delay_ms": load_delay_ms, "prompt": PROMPT},
        "env": {"python": platform.python_version(), "machine": platform.machine(),
                "cpus": os.cpu_count(), "httpx": httpx.__version__,
                "loadavg_start": load_start, "loadavg_end": os.getloadavg()},
        "memory": {"idle_rss_kib": idle["rss"], "idle_hwm_kib": idle["hwm"],
                   "load_peak_rss_kib": max(w["peak_rss_kib"] for w in load),
                   "load_hwm_kib": max(w["hwm_kib"] for w in load),
                   "after_load_rss_kib": load[-1]["after_rss_kib"],
                   "after_latency_rss_kib": after_latency["rss"],
                   "waves": load},
        "first_delta": compare(daemon_ns, direct_ns),
    }


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def report(result: dict) -> str:
    c, m, f = result["config"], result["memory"], result["first_delta"]
    env = result["env"]
    mib = lambda kib: f"{kib / 1024:7.1f} MiB"  # noqa: E731
    lines = [
        f"homeagent daemon bench: Python {env['python']} {env['machine']}, {env['cpus']} CPUs, "
        f"httpx {env['httpx']}, load average {env['loadavg_start'][0]:.2f} -> "
        f"{env['loadavg_end'][0]:.2f}",
        "",
        f"daemon memory (VmRSS; {c['clients']} clients x {c['waves']} waves, "
        f"x-mock-delay-ms {c['load_delay_ms']})",
        f"  idle, after one ask        {mib(m['idle_rss_kib'])}",
        f"  peak under load (sampled)  {mib(m['load_peak_rss_kib'])}",
        f"  peak under load (VmHWM)    {mib(m['load_hwm_kib'])}",
        f"  after the load             {mib(m['after_load_rss_kib'])}",
        "  after each wave            " + ", ".join(f"{w['after_rss_kib'] / 1024:.1f}"
                                                    for w in m["waves"]) + " MiB",
        "  wave durations             " + ", ".join(f"{w['seconds']:.2f}"
                                                    for w in m["waves"]) + " s",
        "",
        f"first text delta, {c['rounds']} interleaved rounds (+{c['warmup']} warm-up), "
        "no mock delay",
        f"  {'path':<8} {'median':>9} {'p99':>9} {'mean':>9} {'min':>9}",
    ]
    for name in ("daemon", "direct"):
        s = f[name]
        lines.append(f"  {name:<8} {s['median_ms']:7.3f}ms {s['p99_ms']:7.3f}ms "
                     f"{s['mean_ms']:7.3f}ms {s['min_ms']:7.3f}ms")
    lines += [
        f"  added by the daemon: {f['added_ms']:.3f} ms at the median "
        f"(paired per-round median {f['added_paired_median_ms']:.3f} ms), "
        f"{f['added_p99_ms']:.3f} ms at p99; daemon/direct {f['ratio']:.2f}x",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="timed latency rounds")
    parser.add_argument("--warmup", type=int, default=10, help="latency rounds not timed")
    parser.add_argument("--clients", type=int, default=50, help="clients in a load wave")
    parser.add_argument("--waves", type=int, default=3, help="load waves")
    parser.add_argument("--load-delay-ms", type=int, default=LOAD_DELAY_MS,
                        help="x-mock-delay-ms of the load's provider")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter for the daemon and the mock (default: this one)")
    parser.add_argument("--json", action="store_true",
                        help="table to stderr, JSON to stdout")
    args = parser.parse_args(argv)
    for name in ("rounds", "clients", "waves"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup < 0 or args.load_delay_ms < 0:
        parser.error("--warmup and --load-delay-ms cannot be negative")
    return finish(lambda: run(args.rounds, args.clients, args.waves, args.warmup,
                              args.load_delay_ms, args.python), report, args.json)


def finish(measure, describe, as_json: bool) -> int:
    """Run measure(); print describe(result), with --json on stderr and the
    result as JSON on stdout. The exit status: 1 with FAIL on a BenchError."""
    try:
        result = measure()
    except BenchError as exc:
        print(f"FAIL: {exc}", file=sys.stderr)
        return 1
    table = describe(result)
    if as_json:
        print(table, file=sys.stderr)
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
