"""`homeagent serve` as a service, end to end: real daemon processes against
the mock model server, with a real notify socket. sd_notify and the
watchdog, start errors, socket activation, the SIGTERM drain, SIGHUP
reload, a kill -9 in the middle of an answer, and every upstream fault the
mock can inject, each ending in a defined reply."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest
import trio

from agent.api.client import Client, DaemonUnavailable
from agent.mock_llm import scripts
from conftest import timeout
from daemon_harness import Daemon, MockServer, Raw, ask_text, child_env

COMPLETIONS = "/v1/chat/completions"
ANSWER = scripts.ENGLISH  # what the mock answers a plain question


def _no_traceback(replies) -> None:
    text = json.dumps(replies, ensure_ascii=False)
    assert "Traceback" not in text and 'File "' not in text, text


def _read_until(raw: Raw, kinds: set[str]) -> list[dict]:
    """Reply lines up to and including the first of one of `kinds`."""
    lines = []
    while True:
        lines.append(raw.line())
        if lines[-1]["type"] in kinds:
            return lines


def _ask_line(request_id, prompt: str, **fields) -> bytes:
    return json.dumps({"id": request_id, "op": "ask", "prompt": prompt, **fields}).encode() + b"\n"


def _requests_with(mock: MockServer, header: str, value: str) -> list[dict]:
    return [r for r in mock.requests()
            if r["path"] == COMPLETIONS and r["headers"].get(header) == value]


def _client_when_listening(path: str, wait: float) -> Client:
    deadline = time.monotonic() + wait
    while True:
        try:
            return Client(path, timeout=wait)
        except DaemonUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _refused_soon(path: str, wait: float) -> None:
    """Connecting to `path` is refused within `wait` seconds (the listener
    closes just after STOPPING=1, so a connect may slip in before it)."""
    deadline = time.monotonic() + wait
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except ConnectionRefusedError:
            return
        finally:
            sock.close()
        assert time.monotonic() < deadline, f"{path} still accepts connections while draining"
        time.sleep(0.01)


def _line_of(text: str, start: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), 1)
                if line.startswith(start))


# ---- sd_notify and the watchdog ----

def test_ready_status_stopping_exit_zero_and_socket_removed(tmp_path, mock, monkeypatch):
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    daemon = Daemon(tmp_path, mock.url)
    daemon.start(wait=False)
    ready = daemon.wait_notify(b"READY=1")[-1].split(b"\n")
    status = [line for line in ready if line.startswith(b"STATUS=")]
    assert status == [f"STATUS=listening on {daemon.socket_path}".encode()]
    assert os.stat(daemon.socket_path).st_mode & 0o777 == 0o660  # socket_mode's default
    with daemon.client() as client:
        text, replies = ask_text(client, "hello")
        assert replies[-1]["type"] == "done" and text == ANSWER
    daemon.signal(signal.SIGTERM)
    before_stop = daemon.wait_notify(b"STOPPING=1")
    stopping = before_stop[-1].split(b"\n")
    assert any(line.startswith(b"STATUS=SIGTERM") for line in stopping), stopping
    # no WATCHDOG_USEC in the environment: no pings
    assert not any(b"WATCHDOG=1" in d.split(b"\n") for d in before_stop), before_stop
    assert daemon.exited() == 0, daemon.log()
    assert not os.path.exists(daemon.socket_path)
    assert "Traceback" not in daemon.log()


def test_watchdog_pings_at_half_the_interval(tmp_path, mock, monkeypatch):
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    daemon = Daemon(tmp_path, mock.url, env={"WATCHDOG_USEC": "200000"})
    daemon.start()
    try:
        stamps = []
        for _ in range(4):
            daemon.wait_notify(b"WATCHDOG=1", wait=timeout(3))
            stamps.append(time.monotonic())
        # WatchdogSec=0.2 s: a ping every 0.1 s, not a flood; that they keep
        # coming is the four received (each waited for as a hang bound only)
        assert stamps[-1] - stamps[0] >= 0.25
        print(f"\nwatchdog pings, WatchdogSec=0.2 s: "
              f"{', '.join(f'{(b - a) * 1000:.0f}' for a, b in zip(stamps, stamps[1:]))} ms apart")
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_signal_handlers_are_in_place_when_ready_is_sent(tmp_path, mock, monkeypatch):
    """READY=1 tells systemd it may now stop or reload the daemon: a SIGTERM or
    SIGHUP sent right after it must reach the daemon's handlers, not kill it.
    In-process, so the moment of READY=1 is seen exactly."""
    from agent.service import daemon as service
    from agent.service.config import load
    from agent.service.systemd import Notifier

    config = load(str(Daemon(tmp_path, mock.url).config_path))
    handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    before = {signum: signal.getsignal(signum) for signum in handled}
    at_ready = {}

    class Ready(Exception):
        pass

    def ready(self, status):
        at_ready.update({signum: signal.getsignal(signum) for signum in handled})
        raise Ready  # stop here: the daemon unwinds and removes its socket

    monkeypatch.setattr(Notifier, "ready", ready)
    try:
        trio.run(service._serve, config, {})
    except* Ready:
        pass
    assert at_ready, "READY=1 was never sent"
    unhandled = [signal.Signals(signum).name for signum in handled
                 if at_ready[signum] == before[signum]]
    assert not unhandled, f"READY=1 sent before the daemon handles {unhandled}"


# ---- start errors ----

def test_bad_config_exits_2_naming_file_line_and_key(tmp_path, mock):
    daemon = Daemon(tmp_path, mock.url, daemon={"shutdown_grace": "soon"})
    text = daemon.config_path.read_text()
    assert _line_of(text, "shutdown_grace") == 5
    daemon.start(wait=False)
    assert daemon.exited() == 2, daemon.log()
    log = daemon.log()
    assert f"{daemon.config_path}:5: daemon.shutdown_grace: expected a number" in log, log
    assert not os.path.exists(daemon.socket_path)
    assert not os.path.exists(tmp_path / "state")


def test_stale_socket_file_is_replaced(tmp_path, mock):
    daemon = Daemon(tmp_path, mock.url)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(daemon.socket_path)
    stale.close()  # the file stays: what a daemon killed with -9 leaves
    with pytest.raises(ConnectionRefusedError):
        Raw(daemon.socket_path)
    daemon.start()
    try:
        with daemon.client() as client:
            assert ask_text(client, "hello")[0] == ANSWER
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_second_daemon_on_the_same_socket_exits_1(tmp_path, mock):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = Daemon(tmp_path / "a", mock.url)
    first.start()
    try:
        second = Daemon(tmp_path / "b", mock.url, daemon={"socket": first.socket_path})
        second.start(wait=False)
        assert second.exited() == 1, second.log()
        assert f"another daemon is listening on {first.socket_path}" in second.log()
        # the first one keeps its socket and goes on serving
        with first.client() as client:
            assert ask_text(client, "hello")[0] == ANSWER
    finally:
        assert first.stop() == 0, first.log()


def test_regular_file_at_the_socket_path_exits_1(tmp_path, mock):
    daemon = Daemon(tmp_path, mock.url)
    with open(daemon.socket_path, "w") as file:
        file.write("not a socket\n")
    daemon.start(wait=False)
    assert daemon.exited() == 1, daemon.log()
    assert f"{daemon.socket_path} exists and is not a socket" in daemon.log()
    with open(daemon.socket_path) as file:
        assert file.read() == "not a socket\n"  # left alone


# ---- socket activation ----

def test_socket_activation_by_systemd_socket_activate(tmp_path, mock):
    tool = shutil.which("systemd-socket-activate")
    if tool is None:
        pytest.skip("systemd-socket-activate is not on PATH (Debian: the systemd package)")
    daemon = Daemon(tmp_path, mock.url, daemon={"socket": str(tmp_path / "configured.sock")})
    path = str(tmp_path / "activated.sock")
    # It passes its child only TERM, PATH, USER, HOME and what -E names: name
    # everything the harness sets (PYTHONPATH, NOTIFY_SOCKET, an emulated run's wrapper).
    names = [f"--setenv={name}" for name in child_env({"NOTIFY_SOCKET": daemon.notify_path})]
    daemon.start(wait=False, argv_prefix=[tool, "-l", path, *names])
    try:
        # the first connection starts the daemon, which then accepts it
        with _client_when_listening(path, timeout(20)) as client:
            assert client.hello["type"] == "hello"
            text, replies = ask_text(client, "hello")
            assert replies[-1]["type"] == "done" and text == ANSWER
            status = client.call("status")
            assert status["socket"].endswith("(from systemd)") and path in status["socket"]
            assert status["pid"] == daemon.process.pid  # exec'd in place: LISTEN_PID held
        daemon.wait_notify(b"READY=1")
        assert not os.path.exists(daemon.socket_path)
    finally:
        assert daemon.stop() == 0, daemon.log()
    assert os.path.exists(path)  # not the daemon's to remove


def _activating(fd: int) -> list[str]:
    """argv_prefix for a daemon handed `fd` as systemd would: as fd 3, with
    LISTEN_FDS=1 and LISTEN_PID set by the very process that runs the daemon."""
    # argv after the -c code: [sys.executable, "-m", "agent.cli", "serve", "--config", ...]
    code = ("import os, sys\n"
            f"os.dup2({fd}, 3)\n"
            f"if {fd} != 3: os.close({fd})\n"
            "os.environ['LISTEN_FDS'] = '1'\n"
            "os.environ['LISTEN_PID'] = str(os.getpid())\n"
            "from agent.cli import main\n"
            "sys.exit(main(sys.argv[4:]))\n")
    return [sys.executable, "-c", code]


def test_socket_activation_by_hand(tmp_path, mock):
    """LISTEN_FDS=1 and LISTEN_PID set by the process that then runs the
    daemon itself, as systemd does after fork."""
    daemon = Daemon(tmp_path, mock.url)
    path = str(tmp_path / "passed.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    try:
        daemon.start(argv_prefix=_activating(listener.fileno()), pass_fds=(listener.fileno(),))
        listener.close()  # the daemon holds its own copy
        assert not os.path.exists(daemon.socket_path)
        with Client(path, timeout=timeout(20)) as client:
            text, replies = ask_text(client, "hello")
            assert replies[-1]["type"] == "done" and text == ANSWER
            status = client.call("status")
            assert status["socket"] == f"{path} (from systemd)"
    finally:
        listener.close()
        assert daemon.stop() == 0, daemon.log()
    assert not os.path.exists(daemon.socket_path)
    assert os.path.exists(path)  # not the daemon's to remove


def test_socket_activation_with_a_datagram_socket_exits_1(tmp_path, mock):
    daemon = Daemon(tmp_path, mock.url)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as passed:
        passed.bind(str(tmp_path / "dgram.sock"))
        daemon.start(wait=False, argv_prefix=_activating(passed.fileno()),
                     pass_fds=(passed.fileno(),))
        assert daemon.exited() == 1, daemon.log()
    assert "the socket systemd passed is not a Unix stream socket" in daemon.log()
    assert not os.path.exists(daemon.socket_path)


# ---- SIGTERM: the drain ----

def _slow(delay_ms: float) -> dict:
    return {"headers": {"x-mock-delay-ms": str(int(delay_ms))}}


def _in_flight(daemon: Daemon, prompt: str, **fields) -> tuple[Raw, list[dict]]:
    """A bare connection with an ask streaming: replies up to its first delta."""
    raw = daemon.raw()
    raw.send(_ask_line(1, prompt, **fields))
    return raw, _read_until(raw, {"delta", "done", "error"})


def test_idle_daemon_exits_promptly_on_sigterm(tmp_path, mock):
    # the longest grace the config takes, far over exited()'s hang bound
    # (timeout(20)): a daemon that waited for it would not have exited by then
    grace = 3600.0
    daemon = Daemon(tmp_path, mock.url, daemon={"shutdown_grace": grace})
    daemon.start()
    with daemon.client() as client:  # a round trip: the signal handlers are in place
        assert client.call("status")["clients"] == 1
    started = time.monotonic()
    daemon.signal(signal.SIGTERM)
    # nothing in flight: the grace is not waited for
    assert daemon.exited() == 0, daemon.log()
    print(f"\nidle daemon, SIGTERM to exit: {(time.monotonic() - started) * 1000:.0f} ms "
          f"(grace {grace:g} s)")
    assert not os.path.exists(daemon.socket_path)


def test_drain_lets_an_answer_finish_then_says_shutdown(tmp_path, mock):
    # about 20 parts 0.1 s apart: two seconds of answer, well inside the grace
    daemon = Daemon(tmp_path, mock.url, daemon={"shutdown_grace": timeout(30)},
                    providers={"slow": _slow(timeout(0.1) * 1000)})
    daemon.start()
    other = daemon.raw()  # connected before the drain, asks during it
    raw, first = _in_flight(daemon, "hello", provider="slow", session="drain")
    assert first[-1]["type"] == "delta", first
    daemon.signal(signal.SIGTERM)
    daemon.wait_notify(b"STOPPING=1")
    _refused_soon(daemon.socket_path, timeout(5))
    assert daemon.process.poll() is None  # still answering
    other.send(_ask_line("late", "hello"))
    late = _read_until(other, {"shutdown"})
    assert late[0]["type"] == "error" and late[0]["code"] == "shutting_down", late
    assert late[0]["id"] == "late"
    rest = _read_until(raw, {"shutdown"})
    replies = first + rest
    kinds = [r["type"] for r in replies]
    assert kinds[-2:] == ["done", "shutdown"], kinds
    assert replies[-2]["text"] == ANSWER == "".join(r["text"] for r in replies
                                                  if r["type"] == "delta")
    assert "SIGTERM" in replies[-1]["reason"]
    with pytest.raises(EOFError):
        raw.line()
    _no_traceback(replies + late)
    assert daemon.exited() == 0, daemon.log()
    assert not os.path.exists(daemon.socket_path)


def test_drain_cuts_an_answer_off_after_the_grace(tmp_path, mock):
    # 0.2 s between parts: seconds of answer against a 0.3 s grace
    daemon = Daemon(tmp_path, mock.url, daemon={"shutdown_grace": 0.3},
                    providers={"slow": _slow(200)})
    daemon.start()
    raw, first = _in_flight(daemon, "hello", provider="slow", session="cut")
    assert first[-1]["type"] == "delta", first
    started = time.monotonic()
    daemon.signal(signal.SIGTERM)
    rest = _read_until(raw, {"shutdown"})
    kinds = [r["type"] for r in rest]
    assert kinds[-2:] == ["error", "shutdown"] and "done" not in kinds, kinds
    error = rest[-2]
    assert error["code"] == "shutting_down" and error["id"] == 1, error
    assert "0.3 s grace" in error["message"], error
    assert time.monotonic() - started >= 0.3
    _no_traceback(first + rest)
    assert daemon.exited() == 0, daemon.log()
    # a cut answer is not history
    assert not (tmp_path / "state" / "sessions" / "cut.json").exists()


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_second_signal_during_the_drain_does_not_kill_the_daemon(tmp_path, mock, second):
    """systemd, or a user pressing Ctrl-C twice, may signal again while the
    daemon drains; a reload during a stop must not kill it either."""
    daemon = Daemon(tmp_path, mock.url, daemon={"shutdown_grace": timeout(30)},
                    providers={"slow": _slow(timeout(0.05) * 1000)})
    daemon.start()
    raw, first = _in_flight(daemon, "hello", provider="slow")
    daemon.signal(signal.SIGTERM)
    daemon.wait_notify(b"STOPPING=1")
    daemon.signal(second)
    rest = _read_until(raw, {"shutdown"})
    assert [r["type"] for r in rest][-2:] == ["done", "shutdown"], rest
    assert daemon.exited() == 0, daemon.log()
    assert not os.path.exists(daemon.socket_path)  # the cleanup ran
    assert "stopped" in daemon.log()


# ---- SIGHUP: reload ----

def test_reload_adds_a_provider_and_keeps_connections(tmp_path, mock):
    daemon = Daemon(tmp_path, mock.url)
    daemon.start()
    try:
        with daemon.client() as before:
            assert [p["name"] for p in before.call("status")["providers"]] == ["mock"]
            marker = uuid.uuid4().hex
            daemon.providers["extra"] = {"headers": {"x-test-marker": marker},
                                         "model": "mock-extra"}
            daemon.write_config()
            daemon.signal(signal.SIGHUP)
            datagrams = daemon.wait_notify(b"READY=1")
            reloading = [i for i, d in enumerate(datagrams) if b"RELOADING=1" in d.split(b"\n")]
            assert reloading and reloading[0] < len(datagrams) - 1, datagrams
            assert b"MONOTONIC_USEC=" in datagrams[reloading[0]]
            assert b"STATUS=reloaded; providers: mock, extra" in datagrams[-1].split(b"\n")

            # the connection opened before the reload sees the new config
            status = before.call("status")
            assert [(p["name"], p["model"]) for p in status["providers"]] == [
                ("mock", "mock-small"), ("extra", "mock-extra")]
            text, replies = ask_text(before, "hello", provider="extra")
            assert replies[0]["provider"] == "extra" and replies[-1]["type"] == "done"
            assert text == ANSWER
            sent = _requests_with(mock, "x-test-marker", marker)
            assert len(sent) == 1 and sent[0]["body"]["model"] == "mock-extra"
        with daemon.client() as after:
            assert ask_text(after, "hello")[0] == ANSWER
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_bad_reload_keeps_the_running_config(tmp_path, mock):
    daemon = Daemon(tmp_path, mock.url, providers={"second": {}})
    daemon.start()
    try:
        with daemon.client() as client:
            status = client.call("status")
            daemon.providers["second"] = {"retries": "many"}
            text = daemon.config_text()
            line = _line_of(text, "retries")
            daemon.write_config(text)
            daemon.signal(signal.SIGHUP)
            ready = daemon.wait_notify(b"READY=1")[-1].split(b"\n")
            assert any(b"reload refused" in item for item in ready), ready
            log = daemon.log()
            assert "reload refused" in log
            assert f"{daemon.config_path}:{line}: providers.second.retries" in log, log
            again = client.call("status")
            assert again["providers"] == status["providers"]
            assert again["default_provider"] == status["default_provider"] == "mock"
            text, replies = ask_text(client, "hello", provider="second")
            assert replies[-1]["type"] == "done" and text == ANSWER
    finally:
        assert daemon.stop() == 0, daemon.log()


def _reload_command(daemon: Daemon, pid: int | None = None) -> subprocess.CompletedProcess:
    """`homeagent reload`, as the unit's ExecReload= runs it."""
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "reload", "--pid", str(pid or daemon.process.pid),
         "--socket", daemon.socket_path, "--timeout", str(timeout(30))],
        env=child_env(), capture_output=True, text=True, timeout=timeout(60))


def test_reload_command_returns_once_the_new_config_is_in_use(tmp_path, mock):
    """What systemctl reload waits for on systemd 252: when `homeagent reload`
    exits 0, the daemon already serves the new config; a refused config makes
    it exit 1 and names the key, and the daemon runs on."""
    daemon = Daemon(tmp_path, mock.url)
    daemon.start()
    try:
        with daemon.client() as client:
            assert client.call("status")["reloads"] == 0
            for round_ in range(1, 4):
                daemon.providers[f"extra{round_}"] = {}
                daemon.write_config()
                done = _reload_command(daemon)
                assert done.returncode == 0, (done.stdout, done.stderr)
                # no waiting here: the reload is complete when the command returns
                status = client.call("status")
                assert status["reloads"] == round_ and status["reload_error"] is None
                assert [p["name"] for p in status["providers"]][-1] == f"extra{round_}"
                assert f"extra{round_}" in done.stdout
            daemon.providers["extra1"] = {"retries": "many"}
            daemon.write_config()
            refused = _reload_command(daemon)
            assert refused.returncode == 1, (refused.stdout, refused.stderr)
            assert "reload refused" in refused.stderr
            assert "providers.extra1.retries" in refused.stderr
            status = client.call("status")
            assert status["reloads"] == 4 and "providers.extra1.retries" in status["reload_error"]
            assert [p["name"] for p in status["providers"]] == ["mock", "extra1", "extra2",
                                                                "extra3"]
            assert ask_text(client, "hello")[0] == ANSWER
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_reload_command_signals_only_the_daemon_at_the_socket(tmp_path, mock):
    daemon = Daemon(tmp_path, mock.url)
    daemon.start()
    try:
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        try:
            wrong = _reload_command(daemon, pid=other.pid)
            assert wrong.returncode == 1 and f"not {other.pid}" in wrong.stderr, wrong.stderr
            assert other.poll() is None  # no SIGHUP: it would have ended
        finally:
            other.kill()
            other.wait()
        with daemon.client() as client:
            assert client.call("status")["reloads"] == 0
    finally:
        assert daemon.stop() == 0, daemon.log()
    gone = _reload_command(daemon, pid=12345)
    assert gone.returncode == 3 and "not running" in gone.stderr, gone.stderr


# ---- kill -9 in the middle of an answer ----

def test_kill_9_mid_stream_keeps_complete_exchanges_only(tmp_path, mock):
    daemon = Daemon(tmp_path, mock.url, providers={"slow": _slow(200)})
    daemon.start()
    prompts = [f"kill test {n} {uuid.uuid4().hex[:8]}" for n in range(4)]
    with daemon.client() as client:
        for prompt in prompts[:2]:
            assert ask_text(client, prompt, session="k")[1][-1]["type"] == "done"
    raw, first = _in_flight(daemon, prompts[2], session="k", provider="slow")
    assert first[-1]["type"] == "delta", first
    daemon.kill()
    raw.close()
    assert daemon.stop() == -signal.SIGKILL
    assert os.path.exists(daemon.socket_path)  # left behind by the kill

    daemon.start()  # same config, same state directory, same socket path
    try:
        with daemon.client() as client:
            history = client.call("history", session="k")["turns"]
            assert [(t["role"], t.get("text", t.get("content"))) for t in history] == [
                ("user", prompts[0]), ("assistant", ANSWER),
                ("user", prompts[1]), ("assistant", ANSWER)], history
            text, replies = ask_text(client, prompts[3], session="k")
            assert replies[-1]["type"] == "done" and text == ANSWER
        sent = [r for r in mock.requests() if r["path"] == COMPLETIONS][-1]["body"]["messages"]
        assert [(m["role"], m["content"]) for m in sent if m["role"] != "system"] == [
            ("user", prompts[0]), ("assistant", ANSWER), ("user", prompts[1]),
            ("assistant", ANSWER), ("user", prompts[3])], sent
    finally:
        assert daemon.stop() == 0, daemon.log()


# ---- upstream faults ----

# Each provider sends every request with one fault; "marker" tells its
# requests apart in the mock's record.
FAULTS = {
    "drop": {"x-mock-fault": "drop"},
    "stall": {"x-mock-fault": "stall"},
    "r429": {"x-mock-fault": "429"},
    "r429retry": {"x-mock-fault": "429"},
    "once": {"x-mock-fault": "500-once"},
    "errev": {"x-mock-fault": "error-event"},
    "garbage": {"x-mock-fault": "garbage"},
}
READ_TIMEOUT = timeout(0.5)


@pytest.fixture(scope="module")
def closed_port():
    """A loopback port bound but not listening: connecting is refused, and no
    one else can take the port while the tests run."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture(scope="module")
def faulty(tmp_path_factory, mock, closed_port):
    run = uuid.uuid4().hex  # 500-once fails once per key: a fresh key per run
    providers = {name: {"headers": {**headers, "x-test-marker": f"{name}-{run}"},
                        "retries": 0}
                 for name, headers in FAULTS.items()}
    providers["stall"]["read_timeout"] = READ_TIMEOUT
    providers["r429retry"]["retries"] = 1
    providers["once"]["retries"] = 2
    providers["once"]["headers"]["x-mock-fault-key"] = run
    providers["refused"] = {"base_url": f"http://127.0.0.1:{closed_port}/v1", "retries": 0}
    daemon = Daemon(tmp_path_factory.mktemp("faults"), mock.url, providers=providers)
    daemon.start()
    daemon.run = run
    yield daemon
    assert daemon.stop() == 0, daemon.log()


def _fault(faulty: Daemon, provider: str) -> tuple[str, list[dict], dict]:
    """An ask to a faulty provider: its text, replies and final reply; then a
    normal ask on the same connection still works."""
    with faulty.client() as client:
        text, replies = ask_text(client, "hello", provider=provider)
        _no_traceback(replies)
        assert replies[0]["type"] == "started" and replies[0]["provider"] == provider, replies
        assert replies[-1]["type"] in ("done", "error"), replies
        after, normal = ask_text(client, "hello")
        assert normal[-1]["type"] == "done" and after == ANSWER, normal
    assert "Traceback" not in faulty.log()
    return text, replies, replies[-1]


def _sent(mock: MockServer, faulty: Daemon, provider: str) -> int:
    return len(_requests_with(mock, "x-test-marker", f"{provider}-{faulty.run}"))


def test_fault_drop_mid_stream_is_interrupted_with_the_partial_text(faulty):
    text, replies, error = _fault(faulty, "drop")
    assert error["code"] == "interrupted", error
    assert "connection lost" in error["message"] and "not kept" in error["message"], error
    assert text and ANSWER.startswith(text) and text != ANSWER
    assert error["text"] == text


def test_fault_stall_hits_the_read_timeout(faulty):
    started = time.monotonic()
    text, replies, error = _fault(faulty, "stall")
    # the mock sent half the answer before stalling: forwarded, so interrupted
    assert error["code"] == "interrupted", error
    assert "read timeout" in error["message"], error
    assert text and ANSWER.startswith(text) and error["text"] == text
    assert time.monotonic() - started >= READ_TIMEOUT


def test_fault_429_without_retries(faulty, mock):
    _, replies, error = _fault(faulty, "r429")
    assert error["code"] == "upstream_http" and error["status"] == 429, error
    assert "rate limit reached (mock)" in error["message"], error
    assert [r["type"] for r in replies] == ["started", "error"]
    assert _sent(mock, faulty, "r429") == 1


def test_fault_429_retried_after_retry_after(faulty, mock):
    started = time.monotonic()
    _, replies, error = _fault(faulty, "r429retry")
    elapsed = time.monotonic() - started
    assert error["code"] == "upstream_http" and error["status"] == 429, error
    assert "rate limit reached (mock)" in error["message"], error
    assert _sent(mock, faulty, "r429retry") == 2  # one retry, then the error
    # Retry-After: 1 is honoured: the retry waited at least that (plus a jitter)
    assert 1.0 <= elapsed, elapsed
    print(f"\n429 with Retry-After: 1, the retry's error after {elapsed:.2f} s")


def test_fault_500_once_is_retried_to_an_answer(faulty, mock):
    text, replies, done = _fault(faulty, "once")
    assert done["type"] == "done", replies
    assert done["attempts"] == 2 and text == ANSWER
    assert _sent(mock, faulty, "once") == 2


def test_fault_error_event_is_a_provider_error(faulty):
    text, replies, error = _fault(faulty, "errev")
    assert error["code"] == "provider_error", error
    assert error["message"] == "errev: the model is overloaded (mock)", error
    assert text and ANSWER.startswith(text)  # what came before the error event


def test_fault_garbage_is_interrupted_with_warnings(faulty):
    text, replies, error = _fault(faulty, "garbage")
    assert error["code"] == "interrupted", error
    assert text == "" and error["text"] == ""
    assert "without [DONE]" in error["message"], error
    warnings = [r for r in replies if r["type"] == "warning"]
    # the HTML page's lines are no SSE fields the decoder knows
    assert "unknown_sse_field" in {w["code"] for w in warnings}, replies
    assert all(isinstance(w["detail"], str) for w in warnings)


def test_fault_connection_refused_is_upstream_unavailable(faulty):
    _, replies, error = _fault(faulty, "refused")
    assert error["code"] == "upstream_unavailable", error
    assert error["message"].startswith("refused: cannot connect"), error
    assert [r["type"] for r in replies] == ["started", "error"]
