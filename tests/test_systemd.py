"""agent.service.systemd and agent.service.log against the real thing: datagrams
on real Unix sockets, socket activation of a real child process (by hand, and
by systemd-socket-activate where it is installed), log lines in real files."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import warnings
from pathlib import Path

import pytest
import trio

from agent import masking
from agent.service import log, systemd
from conftest import timeout
from daemon_harness import REPO, Daemon, MockServer, ask_text, child_env

# where `agent` was imported from (the checkout, or the installed wheel of an emulated
# run) ahead of the path the tests were started with
CHILD_PATH = os.pathsep.join(filter(None, [str(Path(systemd.__file__).resolve().parents[2]),
                                           os.environ.get("PYTHONPATH")]))

# The activated child: what it was handed, reported over the first connection.
CHILD = """
import fcntl, json, os, socket
from agent.service import systemd

sockets = systemd.listen_fds()
report = {
    "fds": [s.fileno() for s in sockets],
    "unix_stream": [s.family == socket.AF_UNIX and s.type == socket.SOCK_STREAM
                    for s in sockets],
    "cloexec": [bool(fcntl.fcntl(s.fileno(), fcntl.F_GETFD) & fcntl.FD_CLOEXEC)
                for s in sockets],
    "left": sorted(name for name in os.environ if name.startswith("LISTEN_")),
}
connection, _ = sockets[0].accept()
with connection:
    connection.sendall(b"activated " + json.dumps(report).encode())
"""
ACTIVATED = {"fds": [3], "unix_stream": [True], "cloexec": [True], "left": []}


@pytest.fixture
def receiver(tmp_path):
    """A datagram socket standing in for systemd's notify socket, and its path."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        path = tmp_path / "notify"
        sock.bind(str(path))
        sock.settimeout(timeout(5))
        yield sock, str(path)


@pytest.fixture
def homeagent_logger(monkeypatch):
    """Put the loggers and hooks back as they were: log.setup() changes process state."""
    logger, root = logging.getLogger("homeagent"), logging.getLogger()
    saved = logger.level, root.handlers[:], root.level
    for hook in ("excepthook", "unraisablehook"):
        monkeypatch.setattr(sys, hook, getattr(sys, hook))
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    yield logger
    logging.captureWarnings(False)
    logger.level, root.handlers[:], root.level = saved


# ------------------------------------------------------------------ sd_notify

def test_notify_payloads(receiver):
    sock, path = receiver
    notifier = systemd.Notifier.from_environ({"NOTIFY_SOCKET": path})
    notifier.ready("listening on /run/homeagent.sock")
    assert sock.recv(4096) == b"READY=1\nSTATUS=listening on /run/homeagent.sock"
    notifier.status("2 sessions\nidle")
    assert sock.recv(4096) == b"STATUS=2 sessions idle"
    notifier.stopping("draining 2 sessions")
    assert sock.recv(4096) == b"STOPPING=1\nSTATUS=draining 2 sessions"
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    notifier.reloading()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    first, second = sock.recv(4096).split(b"\n")
    assert first == b"RELOADING=1"
    name, _, usec = second.partition(b"=")
    assert name == b"MONOTONIC_USEC" and before <= int(usec) <= after
    notifier.notify("WATCHDOG=1")
    assert sock.recv(4096) == b"WATCHDOG=1"


def test_notify_abstract_namespace():
    name = f"homeagent-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(timeout(5))
        notifier = systemd.Notifier.from_environ({"NOTIFY_SOCKET": "@" + name})
        notifier.ready("up")
        assert sock.recv(4096) == b"READY=1\nSTATUS=up"
    

def test_notify_without_socket_is_a_noop(monkeypatch):
    notifier = systemd.Notifier.from_environ({})

    def no_socket(*args):
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(systemd.socket, "socket", no_socket)
    notifier.ready("up")
    notifier.reloading()


def test_notify_failure_is_logged_once_and_never_raised(tmp_path, caplog):
    notifier = systemd.Notifier.from_environ({"NOTIFY_SOCKET": str(tmp_path / "missing")})
    with caplog.at_level(logging.WARNING, logger="homeagent.systemd"):
        notifier.ready("up")
        notifier.status("still up")
        notifier.stopping("down")
    warnings = [r for r in caplog.records if r.name == "homeagent.systemd"]
    assert len(warnings) == 1 and "missing" in warnings[0].getMessage()


# ------------------------------------------------------------------ watchdog

@pytest.mark.parametrize("environ, expected", [
    ({"WATCHDOG_USEC": "30000000"}, 15.0),
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4242"}, 15.0),
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4243"}, None),
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "me"}, None),
    ({"WATCHDOG_USEC": "thirty"}, None),
    ({"WATCHDOG_USEC": "-5"}, None),
    ({"WATCHDOG_USEC": "0"}, None),
    ({}, None),
])
def test_watchdog_interval(environ, expected):
    assert systemd.watchdog_interval(environ, pid=4242) == expected


def test_watchdog_interval_defaults_to_our_pid():
    assert systemd.watchdog_interval({"WATCHDOG_USEC": "1000000",
                                      "WATCHDOG_PID": str(os.getpid())}) == 0.5


@pytest.mark.trio
async def test_watchdog_pings_from_the_event_loop(receiver):
    sock, path = receiver
    sock.setblocking(False)
    incoming = trio.socket.from_stdlib_socket(sock)
    interval = 0.02
    notifier = systemd.Notifier.from_environ({"NOTIFY_SOCKET": path})
    with trio.fail_after(timeout(5)):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(systemd.watchdog, notifier, interval)
            start = trio.current_time()
            for _ in range(3):
                assert await incoming.recv(64) == b"WATCHDOG=1"
            assert trio.current_time() - start >= 2 * interval
            # While the loop is blocked nothing pings: that is what systemd watches for.
            _drain(sock)
            time.sleep(5 * interval)
            assert _drain(sock) == 0
            assert await incoming.recv(64) == b"WATCHDOG=1"
            nursery.cancel_scope.cancel()


def _drain(sock: socket.socket) -> int:
    """How many datagrams were waiting; reads them all without blocking."""
    count = 0
    while True:
        try:
            sock.recv(64, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return count
        count += 1


# ---------------------------------------------------------- socket activation

@pytest.mark.parametrize("environ", [
    {},
    {"LISTEN_PID": "4243", "LISTEN_FDS": "1"},
    {"LISTEN_PID": "4242", "LISTEN_FDS": "many"},
    {"LISTEN_PID": "4242", "LISTEN_FDS": "0"},
])
def test_listen_fds_none(environ):
    assert systemd.listen_fds(environ, pid=4242) == []


def test_listen_fds_unsets_the_real_environment(monkeypatch):
    monkeypatch.setenv("LISTEN_PID", str(os.getpid() + 1))  # someone else's
    monkeypatch.setenv("LISTEN_FDS", "1")
    monkeypatch.setenv("LISTEN_FDNAMES", "api")
    assert systemd.listen_fds(unset=False) == []
    assert "LISTEN_FDS" in os.environ
    assert systemd.listen_fds() == []
    assert not any(name.startswith("LISTEN_") for name in os.environ)


def test_listen_fds_in_an_activated_child(tmp_path):
    """What systemd does, by hand: the listening socket as fd 3 of a child whose
    LISTEN_PID is its own pid (the shell sets it to $$, then execs python)."""
    path = str(tmp_path / "api.sock")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("LISTEN_")}
    environ.update(PYTHONPATH=CHILD_PATH, LISTEN_FDS="1", LISTEN_FDNAMES="api")
    output = tmp_path / "child.out"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen()
        os.set_inheritable(listener.fileno(), True)  # dup2 onto itself keeps FD_CLOEXEC
        pid = os.posix_spawnp(
            "sh", ["sh", "-c", 'export LISTEN_PID=$$; exec "$0" "$@"', sys.executable, "-c", CHILD],
            environ, file_actions=[
                (os.POSIX_SPAWN_DUP2, listener.fileno(), systemd.SD_LISTEN_FDS_START),
                (os.POSIX_SPAWN_OPEN, 1, str(output), os.O_WRONLY | os.O_CREAT, 0o600),
                (os.POSIX_SPAWN_DUP2, 1, 2),
            ])
    # the child holds the only copy of the listener now: if it dies, connecting fails
    try:
        reply = _exchange(path)
    finally:
        status = _reap(pid, timeout(20))
    assert status == 0, output.read_text()
    _check(reply)


def test_listen_fds_under_systemd_socket_activate(tmp_path):
    tool = shutil.which("systemd-socket-activate")
    if tool is None:
        pytest.skip("systemd-socket-activate is not installed (Debian: the systemd package)")
    path = str(tmp_path / "api.sock")
    # it passes the child only TERM, PATH, USER, HOME and what -E names
    child = subprocess.Popen(
        [tool, "-l", path, "--fdname=api", "-E", f"PYTHONPATH={CHILD_PATH}",
         sys.executable, "-c", CHILD],
        stderr=subprocess.PIPE)
    try:
        reply = _exchange(path)
        _, errors = child.communicate(timeout=timeout(20))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, errors.decode(errors="replace")
    _check(reply)


def _exchange(path: str) -> bytes:
    """Connect once the activated socket listens; all the child sends back, or
    the error that cut it short (the child's own output then tells why)."""
    deadline = time.monotonic() + timeout(20)
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            break
        except (FileNotFoundError, ConnectionRefusedError) as error:
            sock.close()
            if time.monotonic() > deadline:
                return repr(error).encode()
            time.sleep(0.01)
    reply = b""
    with sock:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            while chunk := sock.recv(4096):
                reply += chunk
        except OSError as error:
            reply += repr(error).encode()
    return reply


def _check(reply: bytes) -> None:
    word, _, report = reply.partition(b" ")
    assert word == b"activated", reply
    assert json.loads(report) == ACTIVATED


def _reap(pid: int, seconds: float) -> int:
    """The exit code of child `pid`, killing it after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the activated child did not exit within {seconds:g} s")
        time.sleep(0.01)


# ------------------------------------------------------------------ logging

def _record_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def _log_all(logger: logging.Logger) -> None:
    logger.debug("one")
    logger.info("two")
    logger.warning("three")
    logger.error("four")
    logger.critical("five")


JOURNAL_LINES = ["<7>homeagent.test: one", "<6>homeagent.test: two", "<4>homeagent.test: three",
                 "<3>homeagent.test: four", "<2>homeagent.test: five"]


def test_log_prefix_forced(homeagent_logger, tmp_path):
    with open(tmp_path / "stderr", "w") as stream:
        log.setup("debug", stream, environ={"HOMEAGENT_LOG_PREFIX": "1"})
        _log_all(logging.getLogger("homeagent.test"))
    assert _record_lines(tmp_path / "stderr") == JOURNAL_LINES


def test_log_prefix_when_stderr_is_the_journal_stream(homeagent_logger, tmp_path, monkeypatch):
    with open(tmp_path / "stderr", "w") as stream:
        st = os.fstat(stream.fileno())
        monkeypatch.setattr(sys, "stderr", stream)
        log.setup("debug", environ={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
        _log_all(logging.getLogger("homeagent.test"))
    assert _record_lines(tmp_path / "stderr") == JOURNAL_LINES


def test_log_plain_on_another_stream(homeagent_logger, tmp_path):
    with open(tmp_path / "stderr", "w") as stream, open(tmp_path / "other", "w") as other:
        st = os.fstat(other.fileno())
        log.setup("info", stream, environ={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
        _log_all(logging.getLogger("homeagent.test"))
    lines = _record_lines(tmp_path / "stderr")
    assert [line.split(" ", 1)[1] for line in lines] == [
        "INFO homeagent.test: two", "WARNING homeagent.test: three",
        "ERROR homeagent.test: four", "CRITICAL homeagent.test: five"]
    time.strptime(lines[0].split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S")


def test_log_record_is_one_line(homeagent_logger):
    stream = io.StringIO()
    log.setup("info", stream, environ={"HOMEAGENT_LOG_PREFIX": "1"})
    logger = logging.getLogger("homeagent.test")
    logger.warning("first\nsecond\r\nthird\0")
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        logger.exception("failed")
    lines = stream.getvalue().split("\n")
    assert lines[-1] == "" and len(lines) == 3
    assert lines[0] == r"<4>homeagent.test: first\nsecond\r\nthird\0"
    assert lines[1].startswith(r"<3>homeagent.test: failed\nTraceback (most recent call last):\n")
    assert lines[1].endswith(r"ValueError: bad\nvalue")
    assert "\r" not in stream.getvalue()


def test_log_setup_is_idempotent_and_levels_change(homeagent_logger):
    first, second = io.StringIO(), io.StringIO()
    log.setup("info", first, environ={})
    log.setup("warning", second, environ={})
    ours = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)
            and h.stream in (first, second)]
    assert len(ours) == 1
    logger = logging.getLogger("homeagent.test")
    logger.info("hidden")
    logger.warning("shown")
    log.set_level("debug")
    logger.debug("now shown")
    assert first.getvalue() == ""
    assert [line.split(" ", 2)[2] for line in second.getvalue().splitlines()] == [
        "homeagent.test: shown", "homeagent.test: now shown"]
    with pytest.raises(ValueError, match="verbose"):
        log.setup("verbose", first, environ={})
    assert [h.stream for h in logging.getLogger().handlers
            if isinstance(h, logging.StreamHandler) and h.stream in (first, second)] == [second]


# Whatever logs, a record is one line: "<priority>logger: message".
JOURNAL_LINE = re.compile(r"<[0-7]>[\w.]+: \S")


def test_library_records_warnings_and_uncaught_errors_take_the_one_line_way(
        homeagent_logger):
    stream = io.StringIO()
    log.setup("info", stream, environ={"HOMEAGENT_LOG_PREFIX": "1"})
    logging.getLogger("trio").error("task failed:\nsecond line")
    logging.getLogger("httpx").info("HTTP Request: below the libraries' warning level")
    try:
        raise OSError("connection\nlost")
    except OSError:
        logging.getLogger("httpcore.connection").warning("closing", exc_info=True)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("deprecated\nthing", DeprecationWarning)
    thread = threading.Thread(target=lambda: 1 / 0, name="worker")
    thread.start()
    thread.join()
    lines = stream.getvalue().splitlines()
    assert lines[0] == r"<3>trio: task failed:\nsecond line"
    assert lines[1].startswith(r"<4>httpcore.connection: closing\nTraceback (most recent")
    assert lines[1].endswith(r"OSError: connection\nlost")
    assert lines[2].startswith("<4>py.warnings: ") and "deprecated\\nthing" in lines[2]
    assert lines[3].startswith(r"<2>homeagent: uncaught exception in thread worker\nTraceback")
    assert len(lines) == 4 and all(JOURNAL_LINE.match(line) for line in lines)


def test_an_uncaught_exception_in_a_real_process_is_one_journal_line(tmp_path):
    script = ("from agent.service import log\nlog.setup('info')\n"
              "raise RuntimeError('first\\nsecond')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=child_env({"HOMEAGENT_LOG_PREFIX": "1"}), cwd=REPO,
                          timeout=timeout(30))
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith(r"<2>homeagent: uncaught exception\nTraceback (most recent call")
    assert line.endswith(r"RuntimeError: first\nsecond")


def test_the_daemons_log_under_journald_is_one_line_a_record_httpx_included(tmp_path):
    mock = MockServer.start()
    try:
        daemon = Daemon(tmp_path, mock.url, daemon={"log_level": "debug"},
                        env={"HOMEAGENT_LOG_PREFIX": "1"}).start()
        with daemon.client() as client:
            ask_text(client, "Hello")
        assert daemon.stop() == 0
    finally:
        mock.stop()
    lines = daemon.log().splitlines()
    assert any(line.startswith("<6>httpx: HTTP Request: POST ") for line in lines), lines
    assert [line for line in lines if not JOURNAL_LINE.match(line)] == []


def test_log_lines_have_the_secrets_masked_in_message_arguments_and_traceback(
        homeagent_logger, monkeypatch):
    secret = "sk-log-secret-0123456789"
    monkeypatch.setattr(masking, "_active", masking.Masker([secret]))
    stream = io.StringIO()
    log.setup("info", stream, environ={"HOMEAGENT_LOG_PREFIX": "1"})
    try:
        raise ValueError(f"Illegal header value b'Bearer {secret}\\n'")
    except ValueError:
        logging.getLogger("httpx").error(f"sent {secret}: %s", {"key": secret},
                                         exc_info=True)
    [line] = stream.getvalue().splitlines()
    assert secret not in line
    assert line.startswith("<3>httpx: sent ***: {'key': '***'}\\nTraceback")
    assert line.endswith("ValueError: Illegal header value b'Bearer ***\\n'")
