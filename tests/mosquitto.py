"""A real Mosquitto broker for the tests, and real MQTT peers beside it.

    broker = Broker(tmp_path).start()        # loopback, a free port, persistence on
    broker = Broker(tmp_path, tls=True, users={"board": "secret-pass"}).start()
    watcher = broker.subscribe("homeagent/#")  # mosquitto_sub, waits for its SUBACK
    watcher.wait("homeagent/a/availability", lambda m: m.payload == b"online")
    broker.publish("homeagent/a/ask", b'{"text": "hi"}')   # mosquitto_pub, QoS 1
    broker.kill(); broker.start()             # kill -9, same port, same persistence file

The peers are mosquitto_sub and mosquitto_pub: independent of the daemon's
own client. The broker saves its state after every change, so that a kill
-9 keeps sessions, subscriptions and queued QoS 1 messages.
"""

from __future__ import annotations

import os
import pwd
import queue
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from conftest import timeout
from helpers import make_certificates

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
START_TIMEOUT = timeout(10)


def require_mosquitto() -> None:
    missing = [name for name in (MOSQUITTO, "mosquitto_sub", "mosquitto_pub", "openssl")
               if shutil.which(name) is None]
    if missing:
        pytest.skip(f"needs Debian's mosquitto and mosquitto-clients: {', '.join(missing)} "
                    "not found")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A plain broker per test module (import it into the module to use it)."""
    require_mosquitto()
    broker = Broker(tmp_path_factory.mktemp("broker")).start()
    yield broker
    broker.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class Message:
    topic: str
    payload: bytes
    retained: bool

    def __repr__(self) -> str:  # a failure's list of them stays readable
        shown = self.payload[:60] + (b"..." if len(self.payload) > 60 else b"")
        return f"Message({self.topic!r}, {shown!r}{', retained' if self.retained else ''})"


class Broker:
    def __init__(self, directory: Path, *, tls: bool = False,
                 users: dict[str, str] | None = None) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.host = "127.0.0.1"
        self.port = free_port()
        self.tls = tls
        self.users = users
        self.process: subprocess.Popen | None = None
        self.log_path = self.dir / "mosquitto.log"
        self.config_path = self.dir / "mosquitto.conf"
        self.ca_file = self.dir / "ca.pem" if tls else None
        self.write_config()

    def write_config(self) -> None:
        lines = [f"listener {self.port} {self.host}",
                 "persistence true", f"persistence_location {self.dir}/",
                 # saved after every change: a kill -9 loses nothing
                 "autosave_on_changes true", "autosave_interval 1",
                 f"user {pwd.getpwuid(os.getuid()).pw_name}",
                 "log_dest stderr", "log_type all", "max_queued_messages 1000"]
        if self.users:
            password_file = self.dir / "passwords"
            password_file.touch()
            for user, password in self.users.items():
                subprocess.run(["mosquitto_passwd", "-b", str(password_file), user, password],
                               check=True, capture_output=True)
            lines += ["allow_anonymous false", f"password_file {password_file}"]
        else:
            lines.append("allow_anonymous true")
        if self.tls:
            make_certificates(self.dir)
            lines += [f"cafile {self.ca_file}", f"certfile {self.dir / 'server.pem'}",
                      f"keyfile {self.dir / 'server.key'}"]
        self.config_path.write_text("\n".join(lines) + "\n")

    def start(self) -> "Broker":
        log = open(self.log_path, "a")
        self.process = subprocess.Popen([MOSQUITTO, "-c", str(self.config_path)],
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"mosquitto did not start:\n{self.log()}") from None
                time.sleep(0.02)

    def kill(self) -> None:
        """kill -9: no clean shutdown, no last save."""
        self.process.kill()
        self.process.wait(START_TIMEOUT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(START_TIMEOUT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def saves(self) -> int:
        """How many times the broker has written its persistence file."""
        return self.log().count("Saving in-memory database")

    def wait_saved(self, after: int) -> None:
        """Until the broker wrote its persistence file after `after` saves:
        what changed before is then safe from a kill -9. The broker logs
        "Saving" before it writes; it is single-threaded, so a connection it
        logs after that line comes once the file is written."""
        deadline = time.monotonic() + START_TIMEOUT
        while self.saves() <= after:
            if time.monotonic() > deadline:
                raise AssertionError(f"mosquitto did not save:\n{self.log()}")
            time.sleep(0.02)
        with socket.create_connection((self.host, self.port), timeout=START_TIMEOUT) as probe:
            seen = f"New connection from {self.host}:{probe.getsockname()[1]} "
            while True:
                log = self.log()
                saved_at = -1
                for _ in range(after + 1):
                    saved_at = log.index("Saving in-memory database", saved_at + 1)
                if seen in log[saved_at:]:
                    return
                if time.monotonic() > deadline:
                    raise AssertionError(f"mosquitto did not finish saving:\n{log}")
                time.sleep(0.02)

    def client_options(self, user: str | None = None) -> list[str]:
        options = ["-h", self.host, "-p", str(self.port), "-V", "mqttv311"]
        if self.tls:
            options += ["--cafile", str(self.ca_file)]
        if user is not None:
            options += ["-u", user, "-P", self.users[user]]
        elif self.users:
            user, password = next(iter(self.users.items()))
            options += ["-u", user, "-P", password]
        return options

    def publish(self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False,
                user: str | None = None) -> None:
        """One message by mosquitto_pub (the payload from stdin: any bytes)."""
        argv = ["mosquitto_pub", *self.client_options(user), "-t", topic, "-q", str(qos),
                *(["-s"] if payload else ["-n"])]
        if retain:
            argv.append("-r")
        subprocess.run(argv, input=payload, check=True, capture_output=True,
                       timeout=START_TIMEOUT)

    def subscribe(self, *topics: str, user: str | None = None,
                  client_id: str | None = None) -> "Watcher":
        """client_id: a persistent session of that id (messages for it are
        queued while it is away), else a clean one."""
        return Watcher(self, topics, user, client_id)


def on_filter(topic_filter: str, topic: str) -> bool:
    """topic matches the filter (MQTT 3.1.1, 4.7: + one level, # the rest)."""
    want, have = topic_filter.split("/"), topic.split("/")
    for at, level in enumerate(want):
        if level == "#":
            return True
        if at >= len(have) or level not in ("+", have[at]):
            return False
    return len(want) == len(have)


class Watcher:
    """mosquitto_sub on topics, every message kept in arrival order."""

    def __init__(self, broker: Broker, topics: tuple[str, ...], user: str | None,
                 client_id: str | None) -> None:
        # line-buffered: its debug lines (the SUBACK) are otherwise held in a pipe
        argv = ["stdbuf", "-oL", "mosquitto_sub", *broker.client_options(user), "-q", "1", "-d",
                "-F", "MSG %r %t %x"]
        if client_id is not None:
            argv += ["-i", client_id, "-c"]
        for topic in topics:
            argv += ["-t", topic]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.messages: list[Message] = []
        self._lines: queue.Queue = queue.Queue()
        self._subscribed = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._subscribed.wait(START_TIMEOUT):
            self.close()
            raise AssertionError("mosquitto_sub got no SUBACK")

    def _read(self) -> None:
        for raw in self.process.stdout:
            if not raw.endswith(b"\n"):
                # its last line, cut where close() killed it mid-write (a
                # line over stdio's buffer is written in pieces): no message
                break
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith("MSG "):
                _, retained, topic, hex_payload = (line.split(" ", 3) + [""])[:4]
                self._lines.put(Message(topic, bytes.fromhex(hex_payload), retained == "1"))
            elif "received SUBACK" in line:
                self._subscribed.set()
        self._lines.put(None)

    def wait(self, topic: str, match: Callable[[Message], bool] = lambda m: True,
             wait: float = 10, after: int = 0) -> Message:
        """The first message on topic (a filter: + and # as MQTT's) that
        matches, already seen (from the after-th message on) or still to come."""
        for message in self.messages[after:]:
            if on_filter(topic, message.topic) and match(message):
                return message
        deadline = time.monotonic() + timeout(wait)
        while True:
            left = deadline - time.monotonic()
            try:
                message = self._lines.get(timeout=max(left, 0))
            except queue.Empty:
                raise AssertionError(f"no matching message on {topic} within {timeout(wait):g} "
                                     f"s; seen: {self.messages[-20:]}") from None
            if message is None:
                raise AssertionError("mosquitto_sub ended")
            self.messages.append(message)
            if on_filter(topic, message.topic) and match(message):
                return message

    def on(self, topic: str) -> list[Message]:
        return [m for m in self.messages if m.topic == topic]

    def close(self) -> None:
        self.process.terminate()
        try:
            # mosquitto_sub acts on a SIGTERM only when its network loop wakes,
            # which an idle subscription may not do for a keepalive; a kill
            # ends its connection all the same (a persistent session stays).
            self.process.wait(1)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(START_TIMEOUT)
        self._reader.join(START_TIMEOUT)  # it reads the pipe to its end: close it after
        self.process.stdout.close()
