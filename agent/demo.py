"""`homeagent demo`: the whole product on loopback, with no key and no network.

It starts `homeagent mock-llm` (scripted answers in the real wire formats),
and a virtual relay board: a pty pair whose far end a thread here drives,
speaking the serial line protocol (docs/serial-protocol.md) from the board's
side with the daemon's own agent/devices/serial_protocol.py. It writes a
config for both in a temporary directory (the board is a serial device
offering the tool set_relay), starts `homeagent serve` with a
NOTIFY_SOCKET of its own (so it waits for READY=1, as systemd would), asks
over the Unix socket and streams each answer as it arrives: one of them
makes the model switch a relay, the board answers, the model confirms.
Then it stops the daemon with SIGTERM and the mock server, and checks that
both exited cleanly.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from agent.api.client import Client
from agent.cli_render import AskPrinter
from agent.devices import serial_protocol as wire
from agent.mock_llm import server as mock_server

QUESTIONS = ("Why is the heating on?", "客厅现在怎么样？", "And in German, please?",
             "Please switch on relay 2.")
SESSION = "demo"
START_TIMEOUT = float(os.environ.get("HOMEAGENT_DEMO_TIMEOUT", "60"))  # qemu is slow
STOP_TIMEOUT = 30.0
BOARD_MAX_LINE = 64 * 1024  # far above any line the daemon sends


def run(questions: list[str] | None = None, out=sys.stdout) -> int:
    with tempfile.TemporaryDirectory(prefix="homeagent-demo-") as tmp:
        try:
            mock, url = mock_server.spawn()
        except RuntimeError as exc:
            print(f"demo failed: {exc}", file=out)
            return 1
        board = RelayBoard(os.path.join(tmp, "relay-board"))
        daemon = None
        try:
            config = os.path.join(tmp, "config.toml")
            with open(config, "w", encoding="utf-8") as f:
                f.write(config_text(url, tmp, board.port))
            print(f"mock model server: {url}", file=out)
            print(f"virtual relay board on {board.port}", file=out)
            daemon, ready_after = _start_daemon(config, tmp)
            print(f"daemon ready after {ready_after:.2f} s (READY=1), socket "
                  f"{os.path.join(tmp, 'agent.sock')}", file=out)
            code = _ask_all(os.path.join(tmp, "agent.sock"), questions or QUESTIONS, board, out)
        except RuntimeError as exc:
            print(f"demo failed: {exc}", file=out)
            code = 1
        finally:
            stopped = _stop(daemon, "daemon", out) if daemon is not None else True
            _stop(mock, "mock-llm", out)
            board.close()
        if daemon is not None and (code or not stopped):
            _show_log(os.path.join(tmp, "daemon.log"), out)
        return code or (0 if stopped else 1)


def config_text(mock_url: str, directory: str, board_port: str) -> str:
    return f"""[daemon]
socket = "{directory}/agent.sock"
state_directory = "{directory}/state"
shutdown_grace = 5.0

[providers.mock]
protocol = "openai-chat"
base_url = "{mock_url}/v1"
model = "mock-small"

[devices.relay-board]
type = "serial"
port = "{board_port}"
commands = {{ set_relay = "RELAY {{channel}} {{on}}" }}

[[devices.relay-board.tools]]
name = "set_relay"
description = "Switch one of the relay board's eight channels on or off"
parameters = {{ type = "object", properties = {{ channel = {{ type = "integer", minimum = 1, maximum = 8 }}, on = {{ type = "boolean" }} }}, required = ["channel", "on"], additionalProperties = false }}
timeout = 5
"""


class RelayBoard:
    """A relay board on the far end of a pty: it shows the sentences it
    gets and answers CALL ... RELAY <channel> <true|false>. `port` is a
    symlink to the pty, as /dev/serial/by-id/... would be."""

    def __init__(self, port: str) -> None:
        self.port = port
        self.relays: dict[str, bool] = {}
        self.shown: list[str] = []  # what it did, for the demo to print between answers
        self._answers = threading.Semaphore(0)  # one release per DONE line
        self._master, self._slave = os.openpty()
        os.symlink(os.ttyname(self._slave), port)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        receiver = wire.Receiver(wire.parse_daemon_line, BOARD_MAX_LINE)
        while True:
            try:
                data = os.read(self._master, 4096)
            except OSError:  # closed: the demo is over
                return
            if not data:
                return
            for message in receiver.feed(data):
                self._take(message)

    def _take(self, message: wire.DaemonMessage | wire.Blank | wire.BadLine) -> None:
        match message:
            case wire.Text(text):
                self.shown.append(f"  [relay board display] {text}")
            case wire.Done() | wire.Error():
                self._answers.release()
            case wire.Call():
                reply = self._run(message)
                self.shown.append(f"  [relay board] {wire.format_line(message)} -> "
                                  f"{wire.format_line(reply)}")
                os.write(self._master, wire.encode(reply))

    def _run(self, call: wire.Call) -> wire.Ok | wire.Fail:
        parts = call.command.split()
        if len(parts) == 3 and parts[0] == "RELAY" and parts[2] in ("true", "false"):
            self.relays[parts[1]] = parts[2] == "true"
            return wire.Ok(call.call_id, f"relay {parts[1]} is "
                           f"{'on' if self.relays[parts[1]] else 'off'}")
        return wire.Fail(call.call_id, f"unknown command {call.command}")

    def take_shown(self, timeout: float) -> list[str]:
        """What the board did for one answer, once its DONE (or ERROR) came."""
        self._answers.acquire(timeout=timeout)
        shown, self.shown = self.shown, []
        return shown

    def close(self) -> None:
        os.close(self._master)
        os.close(self._slave)
        self._thread.join(5)


def _start_daemon(config: str, tmp: str) -> tuple[subprocess.Popen, float]:
    """Start `homeagent serve` and wait for its READY=1 on our notify socket."""
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(os.path.join(tmp, "notify.sock"))
    notify.settimeout(0.2)
    env = {**os.environ, "NOTIFY_SOCKET": os.path.join(tmp, "notify.sock")}
    began = time.monotonic()
    with open(os.path.join(tmp, "daemon.log"), "w") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "agent.cli", "serve", "--config",
                                   config], stdin=subprocess.DEVNULL, env=env, stderr=log)
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


def _ask_all(path: str, questions, board: RelayBoard, out) -> int:
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
            for line in board.take_shown(timeout=10):
                print(line, file=out)
            if printer.exit_code:
                return printer.exit_code
        history = client.call("history", session=SESSION)
    print(f"\nsession {SESSION!r} keeps {len(history['turns'])} turns", file=out)
    return 0


def terminate(process: subprocess.Popen, wait: float = STOP_TIMEOUT) -> int:
    """SIGTERM, up to `wait` seconds for it to exit, then SIGKILL: its exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()
    return process.returncode


def _stop(process: subprocess.Popen, name: str, out) -> bool:
    """Stop it and say so; True when it exited 0."""
    code = terminate(process)
    print(f"{name} stopped (exit status {code})", file=out)
    return code == 0


def _show_log(path: str, out) -> None:
    with open(path, encoding="utf-8", errors="replace") as f:
        tail = f.readlines()[-30:]
    print("daemon log (last lines):", file=out)
    out.writelines(tail)
