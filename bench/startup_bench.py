"""Start-up benchmark: the time from exec to READY=1, the daemon's memory
idle, and what its first ask costs after a start.

    python bench/startup_bench.py [--rounds N] [--against PYTHON [--against-path DIR]] [--json]

Each round execs `homeagent serve` (default settings but for the paths, one
provider: `homeagent mock-llm`, started once for the whole run) with
NOTIFY_SOCKET naming a datagram socket this bench owns, and measures:
  ready      from just before the exec (subprocess.Popen) to the arrival of
             the datagram holding READY=1: the interpreter's start, the
             imports, the config, the history store, the socket;
  idle RSS   VmRSS of the daemon just after READY=1 (and VmHWM, its peak so far);
  first ask  one client connection, one ask: the time from the ask line
             written to the first text delta read, on the daemon's first ask
             (what it did not import at start it imports now; its upstream
             connection is new too), then the same on a second ask of the
             same connection, and VmRSS after both;
then SIGTERM and the exit status (0 or the run fails).

The interpreter alone (`PYTHON -c pass`, same environment) is timed in the
same rounds: the floor under `ready`.

--against PYTHON adds a second daemon to every round, the `agent` that
interpreter imports (with --against-path DIR as its PYTHONPATH, else its own
installation): e.g. a venv of the commit before a change. The two run in
alternating order; reported are each one's medians and the median of the
per-round ratios (this / against).

With --json the table goes to stderr and one JSON document to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import agent
except ImportError:  # not installed: run from the source tree
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import agent

from agent.api.client import Client  # noqa: E402
from agent.demo import terminate  # noqa: E402


def _daemon_bench():
    """bench/daemon_bench.py, for its processes, config, client and /proc
    helpers (under the name tests/bench_module.py gives it, loaded once)."""
    name = "homeagent_bench_daemon_bench"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).resolve().parent / "daemon_bench.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


db = _daemon_bench()
BenchError = db.BenchError
START_TIMEOUT = db.START_TIMEOUT
IO_TIMEOUT = db.IO_TIMEOUT
PROMPT, EXPECTED = db.PROMPT, db.EXPECTED
FIGURES = ("ready_ms", "idle_rss_kib", "idle_hwm_kib", "first_ask_ms", "second_ask_ms",
           "after_asks_rss_kib")


def variant_env(pythonpath: str | None) -> dict:
    """The daemon's environment: PYTHONPATH is `pythonpath` alone (None: unset)."""
    env = db.child_env()
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def wait_ready(notify: socket.socket, process: subprocess.Popen, log_path: str) -> int:
    """perf_counter_ns when a datagram holding READY=1 arrived."""
    deadline = time.monotonic() + START_TIMEOUT
    notify.settimeout(0.05)
    while True:
        try:
            datagram = notify.recv(4096)
        except TimeoutError:
            if process.poll() is not None:
                raise BenchError(f"the daemon exited ({process.returncode}) before READY=1:\n"
                                 f"{db._tail(log_path)}") from None
            if time.monotonic() > deadline:
                raise BenchError(f"no READY=1 within {START_TIMEOUT:g} s:\n"
                                 f"{db._tail(log_path)}") from None
            continue
        if b"READY=1" in datagram.split(b"\n"):
            return time.perf_counter_ns()


@contextlib.contextmanager
def serving(python: str, env: dict, config_path: str, directory: str):
    """Exec a daemon of this config in directory with a notify socket: yields
    (process, ns just before the exec, ns at READY=1); then SIGTERM, and an
    exit status other than 0 fails the run."""
    log_path = os.path.join(directory, "daemon.log")
    notify_path = os.path.join(directory, "notify.sock")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    process = None
    try:
        with open(log_path, "ab") as log:
            t0 = time.perf_counter_ns()
            process = subprocess.Popen(
                [python, "-m", "agent.cli", "serve", "--config", config_path],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=directory,
                env={**env, "NOTIFY_SOCKET": notify_path})
        yield process, t0, wait_ready(notify, process, log_path)
        process.send_signal(signal.SIGTERM)
        status = process.wait(START_TIMEOUT)
        if status != 0:
            raise BenchError(f"the daemon exited {status}:\n{db._tail(log_path)}")
    finally:
        if process is not None and process.poll() is None:
            terminate(process, START_TIMEOUT)
        notify.close()


def one_start(python: str, env: dict, directory: str, mock_url: str) -> dict:
    """Exec a daemon, wait for READY=1, read its memory, ask twice, stop it."""
    directory = tempfile.mkdtemp(dir=directory)  # a fresh state directory each time
    config_path = db.write_config(directory, mock_url, db.LOAD_DELAY_MS)
    socket_path = os.path.join(directory, "agent.sock")
    with serving(python, env, config_path, directory) as (process, t0, ready):
        idle = db.proc_memory(process.pid)
        with Client(socket_path, timeout=IO_TIMEOUT) as client:
            asks = []
            for _ in range(2):
                first, _, text = db.ask(client, PROMPT, provider="mock")
                if first is None or text != EXPECTED:
                    raise BenchError(f"the daemon answered {text!r}")
                asks.append(first)
        after = db.proc_memory(process.pid)
    return {"ready_ms": (ready - t0) / 1e6, "idle_rss_kib": idle["rss"],
            "idle_hwm_kib": idle["hwm"], "first_ask_ms": asks[0] / 1e6,
            "second_ask_ms": asks[1] / 1e6, "after_asks_rss_kib": after["rss"]}


def bare_interpreter(python: str, env: dict) -> float:
    """ms from exec to exit of `python -c pass`."""
    t0 = time.perf_counter_ns()
    subprocess.run([python, "-c", "pass"], env=env, check=True, cwd=os.path.dirname(python))
    return (time.perf_counter_ns() - t0) / 1e6


def run(rounds: int = 10, python: str | None = None, against: str | None = None,
        against_path: str | None = None) -> dict:
    python = python or sys.executable
    variants = {"this": (python, variant_env(db.AGENT_ROOT))}
    if against:
        variants["against"] = (against, variant_env(against_path))
    samples: dict[str, list[dict]] = {name: [] for name in variants}
    bare: list[float] = []
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="hasb-") as directory:
        mock, mock_url = db.start_mock(python)
        try:
            names = list(variants)
            for index in range(rounds):
                bare.append(bare_interpreter(python, variants["this"][1]))
                for name in names if index % 2 == 0 else names[::-1]:
                    samples[name].append(one_start(*variants[name], directory, mock_url))
        finally:
            terminate(mock, START_TIMEOUT)
            mock.stdout.close()
    result = {
        "config": {"rounds": rounds, "python": python, "against": against,
                   "against_path": against_path},
        "env": {"python": platform.python_version(), "machine": platform.machine(),
                "cpus": os.cpu_count(), "loadavg_start": load_start,
                "loadavg_end": os.getloadavg()},
        "bare_interpreter_ms": statistics.median(bare),
        "variants": {name: {key: statistics.median(s[key] for s in runs) for key in FIGURES}
                     for name, runs in samples.items()},
        "samples": samples,
    }
    if against:
        result["ratios"] = {key: statistics.median(a[key] / b[key] for a, b in
                                                   zip(samples["this"], samples["against"]))
                            for key in FIGURES}
    return result


def report(result: dict) -> str:
    env, c = result["env"], result["config"]
    names = list(result["variants"])
    lines = [
        f"homeagent start-up bench: Python {env['python']} {env['machine']}, {env['cpus']} CPUs, "
        f"{c['rounds']} rounds, load average {env['loadavg_start'][0]:.2f} -> "
        f"{env['loadavg_end'][0]:.2f}",
        f"  against: {c['against']} (PYTHONPATH {c['against_path'] or 'unset'})"
        if c["against"] else None,
        "",
        f"  {'median':<34}" + "".join(f"{n:>12}" for n in names)
        + (f"{'this/against':>14}" if "ratios" in result else ""),
    ]
    rows = [("exec to READY=1", "ready_ms", "ms"), ("RSS idle, at READY=1", "idle_rss_kib", "MiB"),
            ("VmHWM at READY=1", "idle_hwm_kib", "MiB"),
            ("first ask: first delta", "first_ask_ms", "ms"),
            ("second ask: first delta", "second_ask_ms", "ms"),
            ("RSS after the two asks", "after_asks_rss_kib", "MiB")]
    for label, key, unit in rows:
        scale = 1024 if unit == "MiB" else 1
        line = f"  {label + f' ({unit})':<34}" + "".join(
            f"{result['variants'][n][key] / scale:12.2f}" for n in names)
        if "ratios" in result:
            line += f"{result['ratios'][key]:13.2f}x"
        lines.append(line)
    lines.append(f"  {'the interpreter alone: -c pass (ms)':<34}{result['bare_interpreter_ms']:12.2f}")
    return "\n".join(line for line in lines if line is not None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="daemon starts per variant")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter for the daemon and the mock (default: this one)")
    parser.add_argument("--against", metavar="PYTHON",
                        help="also start the daemon of this interpreter's agent each round")
    parser.add_argument("--against-path", metavar="DIR",
                        help="with --against: its PYTHONPATH (default: unset)")
    parser.add_argument("--json", action="store_true", help="table to stderr, JSON to stdout")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.against_path and not args.against:
        parser.error("--against-path needs --against")
    return db.finish(lambda: run(args.rounds, args.python, args.against, args.against_path),
                     report, args.json)


if __name__ == "__main__":
    sys.exit(main())
