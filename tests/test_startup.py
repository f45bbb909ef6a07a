"""What the daemon imports before its first ask, read in the daemon process
itself: a probe runs `homeagent serve` and, on SIGUSR1, writes the names in
sys.modules to a file. An idle daemon holds no httpx (nor its TLS set-up) and
no installer; the first ask brings the upstream client in, made once for
the requests that arrive together. A client command (ask, status...) imports
none of the daemon's modules, read from `python -X importtime`. No timing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
import trio

from agent.mock_llm import scripts
from agent.service import daemon as service
from conftest import timeout
from daemon_harness import Daemon, ask_text

# Runs as `PYTHON probe.py PYTHON -m agent.cli serve ...` (the harness's
# argv after its prefix), so the daemon is this very process.
PROBE = """\
import json, os, runpy, signal, sys

def dump(signum, frame):
    path = os.environ["HOMEAGENT_TEST_MODULES"]
    with open(path + ".tmp", "w") as f:
        json.dump(sorted(sys.modules), f)
    os.replace(path + ".tmp", path)

signal.signal(signal.SIGUSR1, dump)
assert sys.argv[2:4] == ["-m", "agent.cli"], sys.argv
sys.argv = ["agent.cli", *sys.argv[4:]]
runpy.run_module("agent.cli", run_name="__main__", alter_sys=True)
"""

# Not needed until an ask goes upstream, or never by `serve`.
IDLE_ABSENT = ("httpx", "httpcore", "h11", "certifi", "agent.providers.client",
               "agent.service.install", "serial")
# What the first ask brings in: the probe sees imports happen.
FIRST_ASK = ("httpx", "agent.providers.client", "agent.providers.transport")


def _modules(daemon: Daemon, path) -> set[str]:
    """sys.modules of the daemon, from the probe's file, written on SIGUSR1."""
    path.unlink(missing_ok=True)
    daemon.signal(signal.SIGUSR1)
    deadline = time.monotonic() + timeout(20)
    while not path.exists():
        assert daemon.process.poll() is None, daemon.log()
        assert time.monotonic() < deadline, "the probe wrote no module list"
        time.sleep(0.02)
    return set(json.loads(path.read_text()))


def test_an_idle_daemon_imports_no_upstream_client(tmp_path, mock):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    listing = tmp_path / "modules.json"
    daemon = Daemon(tmp_path, mock.url, env={"HOMEAGENT_TEST_MODULES": str(listing)})
    daemon.start(argv_prefix=[sys.executable, str(probe)])  # waits for READY=1
    try:
        idle = _modules(daemon, listing)
        assert "agent.service.daemon" in idle and "trio" in idle  # the probe reads the daemon
        assert sorted(m for m in IDLE_ABSENT if m in idle) == []
        with daemon.client() as client:
            text, _ = ask_text(client, "How warm is the living room right now?")
        assert text == scripts.ENGLISH
        after = _modules(daemon, listing)
        assert sorted(m for m in FIRST_ASK if m not in after) == []
    finally:
        assert daemon.stop() == 0, daemon.log()


# Never imported by a client command: the daemon's config, its event loop,
# the upstream client, the C core.
CLIENT_ABSENT = ("agent.service.config", "trio", "httpx", "agent.stream", "_cffi_backend")


def _imported_by(*argv: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run `python -X importtime -m agent.cli ARGV`: the process, and the
    modules it imported (importtime's stderr lines name each one)."""
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "agent.cli", *argv],
                         capture_output=True, text=True, timeout=timeout(60))
    modules = {line.split("|")[-1].strip() for line in run.stderr.splitlines()
               if line.startswith("import time:")}
    return run, modules - {"imported package"}


@pytest.mark.parametrize("command", [["ask", "hi"], ["status"], ["history"], ["forget", "s"],
                                     ["say", "hi"], ["stop"]], ids=lambda c: c[0])
def test_a_client_command_imports_neither_the_daemon_nor_its_libraries(tmp_path, command):
    run, modules = _imported_by(*command, "--socket", str(tmp_path / "no-daemon.sock"))
    assert run.returncode == 3, run.stderr  # it got as far as connecting: no daemon there
    assert "agent.api.client" in modules, sorted(modules)  # the client was imported
    absent = sorted(m for m in modules
                    if any(m == name or m.startswith(name + ".") for name in CLIENT_ABSENT))
    assert absent == []


@pytest.mark.trio
async def test_requests_arriving_together_share_the_one_client_made_for_them(mock, monkeypatch):
    made = []

    def counted():
        made.append(real())
        return made[-1]

    real = service.http_client
    monkeypatch.setattr(service, "http_client", counted)
    http = service.LazyHttp()
    statuses = []

    async def get() -> None:
        async with http.stream("GET", mock.url + "/_mock/requests") as response:
            statuses.append(response.status_code)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(get)
    await get()  # made: straight to it
    await http.aclose()
    assert statuses == [200] * 4 and len(made) == 1
