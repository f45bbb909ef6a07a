"""`homeagent demo`: the whole product on loopback, with no key and no network.

It starts `homeagent mock-llm` (scripted answers in the real wire formats),
writes a config for it in a temporary directory, starts `homeagent serve`
with a NOTIFY_SOCKET of its own (so it waits for READY=1, as systemd
would), asks over the Unix socket and streams each answer as it arrives,
then stops the daemon with SIGTERM and the mock server, and checks that
both exited cleanly.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

from agent.api.client import Client
from agent.cli_render import AskPrinter

QUESTIONS = ("Why is the heating on?", "客厅现在怎么样？", "And in German, please?")
SESSION = "demo"
START_TIMEOUT = float(os.environ.get("HOMEAGENT_DEMO_TIMEOUT", "60"))  # qemu is slow
STOP_TIMEOUT = 30.0


def run(questions: list[str] | None = None, out=sys.stdout) -> int:
    with tempfile.TemporaryDirectory(prefix="homeagent-demo-") as tmp:
        mock = _start([sys.executable, "-m", "agent.cli", "mock-llm", "--port", "0"],
                      stdout=subprocess.PIPE)
        daemon = None
        try:
            url = _mock_url(mock)
            config = os.path.join(tmp, "config.toml")
            with open(config, "w", encoding="utf-8") as f:
                f.write(config_text(url, tmp))
            print(f"mock model server: {url}", file=out)
            daemon, ready_after = _start_daemon(config, tmp)
            print(f"daemon ready after {ready_after:.2f} s (READY=1), socket "
                  f"{os.path.join(tmp, 'agent.sock')}", file=out)
            code = _ask_all(os.path.join(tmp, "agent.sock"), questions or QUESTIONS, out)
        except RuntimeError as exc:
            print(f"demo failed: {exc}", file=out)
            code = 1
        finally:
            stopped = _stop(daemon, "daemon", out) if daemon is not None else True
            _stop(mock, "mock-llm", out)
        if daemon is not None and (code or not stopped):
            _show_log(os.path.join(tmp, "daemon.log"), out)
        return code or (0 if stopped else 1)


def config_text(mock_url: str, directory: str) -> str:
    return (f'[daemon]\nsocket = "{directory}/agent.sock"\n'
            f'state_directory = "{directory}/state"\nshutdown_grace = 5.0\n\n'
            f'[providers.mock]\nprotocol = "openai-chat"\nbase_url = "{mock_url}/v1"\n'
            'model = "mock-small"\n')


def _start(argv: list[str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, text=True, **kwargs)


def _mock_url(mock: subprocess.Popen) -> str:
    line = mock.stdout.readline()
    match = re.search(r"listening on (http://\S+)", line)
    if match is None:
        raise RuntimeError(f"mock-llm did not start (it said {line.strip()!r})")
    return match.group(1)


def _start_daemon(config: str, tmp: str) -> tuple[subprocess.Popen, float]:
    """Start `homeagent serve` and wait for its READY=1 on our notify socket."""
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(os.path.join(tmp, "notify.sock"))
    notify.settimeout(0.2)
    env = {**os.environ, "NOTIFY_SOCKET": os.path.join(tmp, "notify.sock")}
    began = time.monotonic()
    with open(os.path.join(tmp, "daemon.log"), "w") as log:
        daemon = _start([sys.executable, "-m", "agent.cli", "serve", "--config", config],
                        env=env, stderr=log)
    with notify:
        while time.monotonic() - began < START_TIMEOUT:
            if daemon.poll() is not None:
                raise RuntimeError(f"the daemon exited with status {daemon.returncode}")
            try:
                if b"READY=1" in notify.recv(4096).split(b"\n"):
                    return daemon, time.monotonic() - began
            except TimeoutError:
                continue
    raise RuntimeError(f"the daemon sent no READY=1 within {START_TIMEOUT:g} s")


def _ask_all(path: str, questions, out) -> int:
    printer = AskPrinter(out, out, reasoning="dim" if out.isatty() else "show")
    with Client(path) as client:
        for question in questions:
            print(f"\n> {question}", file=out)
            for reply in client.request("ask", prompt=question, session=SESSION):
                printer.show(reply)
                if reply["type"] == "done":
                    usage = reply.get("usage") or {}
                    print(f"[{reply['finish_reason']}, {usage.get('output_tokens', '?')} "
                          f"output tokens]", file=out)
            if printer.exit_code:
                return printer.exit_code
        history = client.call("history", session=SESSION)
    print(f"\nsession {SESSION!r} keeps {len(history['turns'])} turns", file=out)
    return 0


def _stop(process: subprocess.Popen, name: str, out) -> bool:
    """SIGTERM, then wait; True when it exited 0."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()
    print(f"{name} stopped (exit status {process.returncode})", file=out)
    return process.returncode == 0


def _show_log(path: str, out) -> None:
    with open(path, encoding="utf-8", errors="replace") as f:
        tail = f.readlines()[-30:]
    print("daemon log (last lines):", file=out)
    out.writelines(tail)
