"""A USB adapter just plugged in: its node is root's alone until udev gives
it the dialout group. The serial device tries such a node again for
UDEV_GRACE instead of failing (and logging a denial) at once; a node that
stays refused is still an error. A pty stands in for the adapter, owned by
another user; the opener is a root process without CAP_DAC_OVERRIDE, so
the node's mode holds for it as for the daemon's user."""

from __future__ import annotations

import ctypes
import os
import pwd
import subprocess
import sys
import time

import pytest

from conftest import timeout
from daemon_harness import child_env

OPEN = """
import sys, types
from agent.devices.serial import SerialDevice
stand_in = types.SimpleNamespace(port=sys.argv[1], _open_args={"baudrate": 115200})
try:
    SerialDevice._open(stand_in).close()
    print("open")
except Exception as error:
    print(f"refused errno {getattr(error, 'errno', None)}")
"""


PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def _without_dac_override() -> None:
    """In the child before exec: root's file-permission override gone."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.fixture
def node():
    if os.geteuid() != 0:
        pytest.skip("dropping root's permission override needs root")
    controller, terminal = os.openpty()
    path = os.ttyname(terminal)
    # another user's alone, as a node is the kernel's before udev gives it a group
    os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)
    os.chmod(path, 0o600)
    try:
        probe = subprocess.run([sys.executable, "-c", f"open({path!r}, 'rb')"],
                               preexec_fn=_without_dac_override, capture_output=True)
    except (OSError, subprocess.SubprocessError) as error:
        pytest.skip(f"root's permission override cannot be dropped here: {error}")
    if probe.returncode == 0:
        pytest.skip("root keeps its permission override here (no CAP_SETPCAP to drop it)")
    os.chmod(path, 0o600)   # the probe's moment is over: the node is new again
    yield path
    os.close(terminal)
    os.close(controller)


def opener(path: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", OPEN, path],
                            preexec_fn=_without_dac_override, env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_node_given_its_mode_a_moment_later_opens(node):
    path = node
    process = opener(path)
    time.sleep(0.3)   # udev's moment (the grace is 3 s)
    os.chmod(path, 0o666)
    out, err = process.communicate(timeout=timeout(30))
    assert out.strip() == "open", err


def test_a_node_that_stays_refused_is_an_error(node):
    out, err = opener(node).communicate(timeout=timeout(30))
    assert out.strip() == "refused errno 13", err
