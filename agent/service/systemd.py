"""systemd integration without libsystemd: sd_notify(3), the service watchdog
and socket activation (sd_listen_fds(3)).

The wire protocols are small and stable, so they are spoken here directly:
every function is a no-op, or returns nothing, when the process was not
started by systemd, so the daemon runs the same from a terminal.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

import trio

SD_LISTEN_FDS_START = 3
_LISTEN_VARS = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")
# A full notify queue means systemd is busy: wait a little rather than lose
# READY=1, but never block the event loop for long on it.
_SEND_TIMEOUT = 1.0

_log = logging.getLogger("homeagent.systemd")


def _uint(raw: str | None) -> int | None:
    """A decimal unsigned integer as systemd writes them, or None."""
    if raw is None or not (raw.isascii() and raw.isdigit()):
        return None
    return int(raw)


class Notifier:
    """sd_notify: state changes for the service manager, one datagram a call.

    Built from NOTIFY_SOCKET ('@' prefix: the abstract namespace); without it
    every method is a no-op. A failed send is logged once and never raised:
    losing a status line must not take the daemon down.
    """

    def __init__(self, address: str | None) -> None:
        self._address = address
        self._socket: socket.socket | None = None
        self._warned = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Notifier:
        path = environ.get("NOTIFY_SOCKET")
        if not path:
            return cls(None)
        if path.startswith("@"):
            return cls("\0" + path[1:])
        if not path.startswith("/"):
            _log.warning("NOTIFY_SOCKET=%r is not a Unix socket path: not notifying systemd", path)
            return cls(None)
        return cls(path)

    def notify(self, *states: str) -> None:
        """Send KEY=value states in one datagram, e.g. notify("READY=1", "STATUS=up")."""
        if self._address is None or not states:
            return
        # A newline separates assignments in the protocol: keep each one on one line.
        payload = "\n".join(" ".join(state.splitlines()) for state in states).encode()
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._socket.settimeout(_SEND_TIMEOUT)
            self._socket.sendto(payload, self._address)
        except OSError as error:
            level = logging.DEBUG if self._warned else logging.WARNING
            self._warned = True
            _log.log(level, "sd_notify to %r failed: %s", self._address, error)

    def ready(self, status: str) -> None:
        """Startup, or a reload, is complete."""
        self.notify("READY=1", f"STATUS={status}")

    def status(self, text: str) -> None:
        self.notify(f"STATUS={text}")

    def stopping(self, status: str) -> None:
        self.notify("STOPPING=1", f"STATUS={status}")

    def reloading(self) -> None:
        """A reload begins (Type=notify-reload); call ready() when it is done."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")


def watchdog_interval(environ: Mapping[str, str] = os.environ,
                      pid: int | None = None) -> float | None:
    """Seconds between WATCHDOG=1 pings, half of WatchdogSec= as sd_watchdog_enabled(3)
    advises; None when the watchdog is off, meant for another process, or garbled."""
    raw = environ.get("WATCHDOG_USEC")
    if raw is None:
        return None
    watchdog_pid = environ.get("WATCHDOG_PID")
    if watchdog_pid is not None and _uint(watchdog_pid) != (os.getpid() if pid is None else pid):
        return None
    usec = _uint(raw)
    if not usec:
        _log.warning("ignoring WATCHDOG_USEC=%r: not a positive integer", raw)
        return None
    return usec / 2_000_000


async def watchdog(notifier: Notifier, interval: float) -> None:
    """Ping the watchdog every `interval` seconds until cancelled.

    A trio task, not a thread, on purpose: a blocked event loop stops the
    pings and systemd restarts the daemon.
    """
    while True:
        notifier.notify("WATCHDOG=1")
        await trio.sleep(interval)


def listen_fds(environ: Mapping[str, str] = os.environ, pid: int | None = None,
               unset: bool = True) -> list[socket.socket]:
    """The sockets systemd passed by socket activation, in order; [] when none.

    With `unset` (and the real environment) the LISTEN_* variables are removed
    whatever they held, so processes the daemon starts do not inherit them.
    """
    ours = _uint(environ.get("LISTEN_PID")) == (os.getpid() if pid is None else pid)
    count = _uint(environ.get("LISTEN_FDS")) if ours else None
    if unset and environ is os.environ:
        for name in _LISTEN_VARS:
            os.environ.pop(name, None)
    sockets = []
    for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + (count or 0)):
        os.set_inheritable(fd, False)  # FD_CLOEXEC: ours alone, like every fd Python opens
        sockets.append(socket.socket(fileno=fd))
    return sockets

