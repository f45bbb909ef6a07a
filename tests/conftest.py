"""Shared test helpers.

HOMEAGENT_TEST_SCALE (float, default 1.0) scales every hypothesis example
count in the golden tests: 0.2 for a quick run, 10 for a soak.
"""

from __future__ import annotations

import os
import platform
import sys

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis's own clocks (an example's deadline, "input generation is
# slow") are checks that fail by chance on a loaded or emulated machine: a
# test checks its property, never how long an example took to make or run.
settings.register_profile("homeagent", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("homeagent")


def _positive(name: str, default: str) -> float:
    """A positive number from the environment variable `name`."""
    raw = os.environ.get(name, default)
    try:
        value = float(raw)
    except ValueError:
        raise RuntimeError(f"{name} must be a number, got {raw!r}") from None
    if not value > 0:
        raise RuntimeError(f"{name} must be positive, got {raw!r}")
    return value


TEST_SCALE = _positive("HOMEAGENT_TEST_SCALE", "1.0")


def scaled(n: int) -> int:
    """A hypothesis max_examples of n at scale 1.0, never below 1."""
    return max(1, int(n * TEST_SCALE))


# ---------------------------------------------------------------------------
# Emulated runs (toolchain/arm64.sh): the aarch64 interpreter under qemu-user.
#
# HOMEAGENT_EMULATED=1 on an aarch64 interpreter marks the run as emulated.
# qemu-user does not follow execve, so a test that starts sys.executable would
# get "Exec format error": sys.executable points at the wrapper script named by
# HOMEAGENT_PYTHON_WRAPPER instead. Emulation is 7-10x slower than the host:
# timeouts in tests go through timeout() (HOMEAGENT_TIMEOUT_SCALE, 10 when
# emulated, 1.0 otherwise). A test that truly cannot run emulated is marked
# @pytest.mark.not_emulated(reason="...") and is skipped, with that reason,
# only in the emulated run.
# ---------------------------------------------------------------------------

EMULATED = platform.machine() == "aarch64" and os.environ.get("HOMEAGENT_EMULATED") == "1"
TIMEOUT_SCALE = _positive("HOMEAGENT_TIMEOUT_SCALE", "10" if EMULATED else "1.0")


def timeout(seconds: float) -> float:
    """A timeout of `seconds` on the host, scaled by HOMEAGENT_TIMEOUT_SCALE."""
    return seconds * TIMEOUT_SCALE


if EMULATED:
    _wrapper = os.environ.get("HOMEAGENT_PYTHON_WRAPPER")
    if not _wrapper or not os.access(_wrapper, os.X_OK):
        raise RuntimeError("emulated run: HOMEAGENT_PYTHON_WRAPPER must name an executable "
                           f"wrapper that runs this interpreter under qemu, got {_wrapper!r}")
    sys.executable = _wrapper


@pytest.fixture(scope="module")
def mock():
    """`homeagent mock-llm` as a subprocess (tests/daemon_harness.py), one per module."""
    from daemon_harness import MockServer

    server = MockServer.start()
    yield server
    server.stop()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "not_emulated(reason): cannot run under qemu-user; skipped, with the "
        "reason, in the emulated run (toolchain/arm64.sh)")


def pytest_collection_modifyitems(config, items):
    if not EMULATED:
        return
    for item in items:
        mark = item.get_closest_marker("not_emulated")
        if mark is not None:
            why = mark.kwargs.get("reason") or (mark.args[0] if mark.args else "no reason given")
            item.add_marker(pytest.mark.skip(reason=f"not emulated: {why}"))


def pytest_report_header(config):
    if EMULATED:
        return (f"emulated: {platform.machine()} under qemu-user, sys.executable={sys.executable}, "
                f"HOMEAGENT_TIMEOUT_SCALE={TIMEOUT_SCALE:g}, HOMEAGENT_TEST_SCALE={TEST_SCALE:g}")
    return None
