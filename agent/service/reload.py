"""`homeagent reload --pid PID`: the unit's ExecReload=.

systemd 252 has no Type=notify-reload, and with ExecReload=kill -HUP
`systemctl reload` returns as soon as the signal is sent, before the daemon
has read its config. This sends the SIGHUP and then waits until the daemon's
status counts one more reload, so `systemctl reload` returns once the new
config is in use, and fails when the daemon refused it.

The count is read before the signal: any reload counted after that read the
file after the caller changed it (reloads run one at a time, between
replies), even if another SIGHUP came in between.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from agent.api.client import Client

POLL_INTERVAL = 0.05
# systemd's own limit on ExecReload= is TimeoutStartSec= (90 s by default)
DEFAULT_TIMEOUT = 60.0


def reload(pid: int, socket_path: str, timeout: float = DEFAULT_TIMEOUT) -> int:
    """0: reloaded; 1: refused, or not done within timeout. DaemonUnavailable
    and ConnectionLost propagate (the CLI makes them exit 3)."""
    deadline = time.monotonic() + timeout
    with Client(socket_path, timeout=timeout) as client:
        before = client.call("status")
        if before.get("pid") != pid:
            print(f"homeagent: the daemon at {socket_path} is pid {before.get('pid')}, "
                  f"not {pid}: not reloading it", file=sys.stderr)
            return 1
        os.kill(pid, signal.SIGHUP)
        while True:
            status = client.call("status")
            if status["reloads"] > before["reloads"]:
                break
            if time.monotonic() > deadline:
                print(f"homeagent: pid {pid} did not reload within {timeout:g} s",
                      file=sys.stderr)
                return 1
            time.sleep(POLL_INTERVAL)
    if status["reload_error"] is not None:
        print(f"homeagent: reload refused, the running configuration stays: "
              f"{status['reload_error']}", file=sys.stderr)
        return 1
    print(f"homeagent: reloaded; providers: "
          f"{', '.join(p['name'] for p in status['providers'])}")
    return 0
