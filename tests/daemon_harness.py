"""Real processes for the daemon tests: `homeagent mock-llm` and
`homeagent serve` as subprocesses on loopback and a Unix socket, with a
real NOTIFY_SOCKET receiving their sd_notify datagrams.

    mock = MockServer.start()                 # one per test module is enough
    daemon = Daemon(tmp_path, mock.url, providers={"slow": {"headers": {...}}})
    daemon = Daemon(tmp_path, mock.url, extra="[devices.board]\ntype = ...")  # raw TOML
    daemon.start()                            # waits for READY=1
    with daemon.client() as client: ...
    daemon.stop()                             # SIGTERM; returns the exit status
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from signal import SIGTERM

from agent.api.client import Client
from agent.mock_llm.server import spawn
from conftest import timeout

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT = timeout(20)


def _env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    # The daemon imports the package from this checkout (or the installed wheel).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("NOTIFY_SOCKET", None)
    env.pop("LISTEN_FDS", None)
    env.pop("LISTEN_PID", None)
    env.update(extra or {})
    return env


def child_env(extra: dict | None = None) -> dict:
    """The environment the harness gives its child processes, with `extra`."""
    return _env(extra)


class MockServer:
    def __init__(self, process: subprocess.Popen, url: str) -> None:
        self.process = process
        self.url = url

    @classmethod
    def start(cls, *args: str) -> "MockServer":
        """args: the mock-llm's options, such as "--fault", "500"."""
        return cls(*spawn(sys.executable, *args, env=_env(), cwd=REPO))

    def set_faults(self, *faults: str, retry_after: float = 1) -> None:
        """The faults of every request to this instance from now on (none: healthy)."""
        httpx.put(self.url + "/_mock/faults", json={"faults": faults, "retry_after": retry_after},
                  timeout=timeout(10)).raise_for_status()

    def requests(self) -> list[dict]:
        return httpx.get(self.url + "/_mock/requests", timeout=timeout(10)).json()

    def clear(self) -> None:
        """Forget the recorded requests."""
        httpx.delete(self.url + "/_mock/requests", timeout=timeout(10)).raise_for_status()

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout(20))
        self.process.stdout.close()


def toml_value(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def command_device(name: str, tool_argv: dict, tools: list[dict], **settings) -> str:
    """The TOML of a [devices.NAME] of type "command" offering tools."""
    return "\n".join([f"[devices.{name}]", 'type = "command"',
                      *(f"{key} = {toml_value(value)}" for key, value in settings.items()),
                      f"tool_argv = {toml_value(tool_argv)}", f"tools = {toml_value(tools)}"])


class Daemon:
    """One `homeagent serve` in tmp_path: config, socket, state, notify socket, log."""

    def __init__(self, directory: Path, mock_url: str, *, daemon: dict | None = None,
                 sessions: dict | None = None, providers: dict | None = None,
                 default_provider: str = "mock", env: dict | None = None,
                 extra: str | None = None) -> None:
        self.dir = Path(directory)
        self.socket_path = str(self.dir / "agent.sock")
        self.config_path = self.dir / "config.toml"
        self.log_path = self.dir / "daemon.log"
        self.notify_path = str(self.dir / "notify.sock")
        self.mock_url = mock_url
        self.daemon_settings = {"socket": self.socket_path,
                                "state_directory": str(self.dir / "state"),
                                "shutdown_grace": 5.0, **(daemon or {})}
        self.session_settings = sessions or {}
        self.providers = {"mock": {}, **(providers or {})}
        self.default_provider = default_provider
        self.extra_env = env or {}
        self.extra = extra  # raw TOML appended to the config, e.g. [devices.NAME] tables
        self.process: subprocess.Popen | None = None
        self.notify: socket.socket | None = None
        self.write_config()

    def config_text(self) -> str:
        lines = [f"default_provider = {toml_value(self.default_provider)}", "[daemon]"]
        lines += [f"{k} = {toml_value(v)}" for k, v in self.daemon_settings.items()]
        if self.session_settings:
            lines.append("[sessions]")
            lines += [f"{k} = {toml_value(v)}" for k, v in self.session_settings.items()]
        for name, settings in self.providers.items():
            block = {"protocol": "openai-chat", "base_url": self.mock_url + "/v1",
                     "model": "mock-small", **settings}
            lines.append(f"[providers.{name}]")
            lines += [f"{k} = {toml_value(v)}" for k, v in block.items()]
        if self.extra:
            lines.append(self.extra.rstrip("\n"))
        return "\n".join(lines) + "\n"

    def write_config(self, text: str | None = None) -> None:
        self.config_path.write_text(self.config_text() if text is None else text,
                                    encoding="utf-8")

    def start(self, *, wait: bool = True, argv_prefix: list[str] | None = None,
              pass_fds: tuple = (), env: dict | None = None) -> "Daemon":
        if self.notify is None:
            self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.notify.bind(self.notify_path)
        argv = [*(argv_prefix or []), sys.executable, "-m", "agent.cli", "serve",
                "--config", str(self.config_path)]
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(
                argv, env=_env({"NOTIFY_SOCKET": self.notify_path, **self.extra_env,
                                **(env or {})}),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=REPO, pass_fds=pass_fds)
        if wait:
            self.wait_notify(b"READY=1")
        return self

    def wait_notify(self, state: bytes, wait: float = START_TIMEOUT) -> list[bytes]:
        """Datagrams up to the first holding `state` (a line such as b"READY=1")."""
        seen = []
        deadline = time.monotonic() + wait
        self.notify.settimeout(0.1)
        while time.monotonic() < deadline:
            try:
                datagram = self.notify.recv(4096)
            except TimeoutError:
                if self.process.poll() is not None:
                    raise AssertionError(f"the daemon exited ({self.process.returncode}) "
                                         f"before {state!r}:\n{self.log()}") from None
                continue
            seen.append(datagram)
            if state in datagram.split(b"\n"):
                return seen
        raise AssertionError(f"no {state!r} within {wait:g} s; got {seen}:\n{self.log()}")

    def client(self, wait: float | None = START_TIMEOUT) -> Client:
        return Client(self.socket_path, timeout=wait)

    def raw(self) -> "Raw":
        """A bare connection, hello already read."""
        raw = Raw(self.socket_path)
        raw.line()
        return raw

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def stop(self, signum: int = SIGTERM, wait: float = START_TIMEOUT) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            return self.process.wait(wait)
        finally:
            if self.notify is not None:
                self.notify.close()
                self.notify = None
                os.unlink(self.notify_path)

    def exited(self, wait: float = START_TIMEOUT) -> int:
        """Wait for the daemon to end by itself (no signal sent); its exit status."""
        self.process.wait(wait)
        return self.stop()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(START_TIMEOUT)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def rss_kib(self, field: str = "VmRSS") -> int:
        with open(f"/proc/{self.process.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

    def peak_rss_mib(self, what: str) -> float:
        """The daemon's peak resident memory so far (VmHWM), printed with
        what it was under, for docs/robustness.md's figures."""
        peak = self.rss_kib("VmHWM") / 1024
        print(f"\npeak RSS of the daemon under {what}: {peak:.1f} MiB")
        return peak


def _memory_high_mib() -> int:
    """The shipped unit's MemoryHigh, from the installed package's unit file."""
    from agent.service.install import shipped

    return int(re.search(r"^MemoryHigh=(\d+)M$", shipped("homeagent.service"), re.M)[1])


MEMORY_HIGH_MIB = _memory_high_mib()


class Raw:
    """A bare socket to the daemon: bytes out, reply lines in; received keeps
    every byte that came in, for tests that look at the bytes themselves."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(START_TIMEOUT)
        self.sock.connect(path)
        self._buffer = bytearray()
        self.received = bytearray()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def line(self) -> dict:
        while b"\n" not in self._buffer:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError(f"connection closed; {len(self._buffer)} bytes without a newline")
            self._buffer += data
            self.received += data
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer[:] = rest
        return json.loads(line)

    def close(self) -> None:
        self.sock.close()


def ask_text(client: Client, prompt: str, **fields) -> tuple[str, list[dict]]:
    """Stream one ask: the joined deltas and every reply."""
    replies = list(client.request("ask", prompt=prompt, **fields))
    return "".join(r["text"] for r in replies if r["type"] == "delta"), replies
