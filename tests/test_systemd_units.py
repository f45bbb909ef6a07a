"""The shipped systemd units (agent/service/units/, also at systemd/ in the
checkout) checked by systemd 252's own tools: `systemd-analyze verify` on
the units as `homeagent install` writes them, `systemd-analyze security
--offline` for the hardening, and the facts that tie the units to the daemon,
its config defaults, the sysusers file and the installer."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.api.client import DEFAULT_SOCKET
from agent.api.server import GOODBYE_TIMEOUT
from agent.service import install
from agent.service.daemon import UPSTREAM_CONNECTIONS
from agent.paths import DEFAULT_PATH
from agent.service.config import DEFAULT_STATE_DIRECTORY, parse
from conftest import timeout
from test_daemon_load import CLIENTS

# The most exposure `systemd-analyze security` may rate the service (0 to 10;
# "OK" ends at 2.0). Measured: 1.5.
MAX_EXPOSURE = 2.0

needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                   reason="systemd-analyze is not installed (systemd package)")


def unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """A unit file's sections, each a list of (key, value) in order: keys repeat."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
        else:
            key, _, value = line.partition("=")
            current.append((key.strip(), value.strip()))
    return sections


def values(section: list[tuple[str, str]], key: str) -> list[str]:
    return [value for name, value in section if name == key]


def one(section: list[tuple[str, str]], key: str) -> str:
    found = values(section, key)
    assert len(found) == 1, f"{key}= set {len(found)} times"
    return found[0]


SERVICE = unit(install.shipped("homeagent.service"))
SOCKET = unit(install.shipped("homeagent.socket"))
SYSUSERS = [line.split() for line in install.shipped("homeagent.sysusers").splitlines()
            if line.strip() and not line.startswith("#")]


def analyze(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["systemd-analyze", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout(60))


def write_units(directory: Path, text_of) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in install.UNITS:
        (directory / name).write_text(text_of(name))
        paths.append(str(directory / name))
    return paths


@pytest.fixture
def venv(tmp_path: Path) -> str:
    """A venv path whose bin/homeagent exists: verify checks ExecStart= is executable."""
    program = tmp_path / "venv" / "bin" / "homeagent"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    return str(tmp_path / "venv")


@needs_analyze
def test_verify_passes_the_units_install_writes(tmp_path, venv):
    paths = write_units(tmp_path / "units", lambda name: install.unit_text(name, venv))
    result = analyze("verify", "--man=no", "--generators=no", *paths)
    # verify exits 0 even on lines it ignores: any diagnostic at all fails
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@needs_analyze
def test_verify_would_report_a_bad_line(tmp_path, venv):
    """The check above can fail: a wrong value is named with its line."""
    def broken(name):
        text = install.unit_text(name, venv)
        return text.replace("DeviceAllow=char-ttyUSB rw\n", "DeviceAllow=char-ttyUSB rwz\n")
    paths = write_units(tmp_path / "units", broken)
    result = analyze("verify", "--man=no", "--generators=no", *paths)
    assert "Invalid device rights 'rwz'" in result.stdout + result.stderr


@needs_analyze
def test_verify_needs_the_program(tmp_path):
    """ExecStart= is checked: the units name a program that must exist."""
    paths = write_units(tmp_path / "units",
                        lambda name: install.unit_text(name, str(tmp_path / "nowhere")))
    result = analyze("verify", "--man=no", "--generators=no", *paths)
    assert f"{tmp_path}/nowhere/bin/homeagent is not executable" in result.stderr


@needs_analyze
def test_security_exposure_is_low(tmp_path):
    path = tmp_path / "homeagent.service"
    path.write_text(install.unit_text("homeagent.service"))
    result = analyze("security", "--offline=yes", f"--threshold={int(MAX_EXPOSURE * 10)}",
                     str(path))
    found = re.search(r"Overall exposure level for homeagent\.service: (\d+\.\d+) (\w+)",
                      result.stdout)
    assert found, result.stdout + result.stderr
    exposure = float(found[1])
    assert exposure <= MAX_EXPOSURE and found[2] == "OK", result.stdout
    assert result.returncode == 0, result.stderr
    # what remains exposed is what the daemon needs, and only that
    open_items = {line.split()[1] for line in result.stdout.splitlines()
                  if line.startswith("✗")}
    assert open_items <= {
        "RootDirectory=/RootImage=", "SupplementaryGroups=", "PrivateDevices=",
        "DeviceAllow=", "RestrictAddressFamilies=~AF_UNIX",
        "RestrictAddressFamilies=~AF_(INET|INET6)", "PrivateNetwork=", "PrivateUsers=",
        "IPAddressDeny="}, result.stdout


def test_the_service_is_a_notify_daemon_with_watchdog_and_reload():
    service = SERVICE["Service"]
    assert one(service, "Type") == "notify"  # notify-reload needs systemd 253
    assert one(service, "NotifyAccess") == "main"
    assert one(service, "ExecStart") == f"{install.DEFAULT_VENV}/bin/homeagent serve --config {DEFAULT_PATH}"
    # waits for the reload to be done: systemd 252 has no Type=notify-reload
    assert one(service, "ExecReload") == f"{install.DEFAULT_VENV}/bin/homeagent reload --pid $MAINPID"
    assert int(one(service, "WatchdogSec")) >= 10
    # a daemon the watchdog caught is killed soon after, not a stop timeout later
    assert float(one(service, "TimeoutAbortSec")) < float(one(service, "TimeoutStopSec"))
    assert one(service, "Restart") == "on-failure"
    assert one(service, "RestartPreventExitStatus") == "2"  # `serve`: bad config
    # the default grace, then the goodbye to clients
    grace = parse(_minimal_config(), "config.toml").daemon.shutdown_grace
    assert float(one(service, "TimeoutStopSec")) > grace + 2 * GOODBYE_TIMEOUT


def _minimal_config() -> str:
    return '[providers.p]\nprotocol = "openai-chat"\nbase_url = "http://127.0.0.1:1/v1"\nmodel = "m"\n'


def test_the_socket_is_where_clients_and_the_config_look():
    socket = SOCKET["Socket"]
    path = one(socket, "ListenStream")
    assert path == DEFAULT_SOCKET == parse(_minimal_config(), "config.toml").daemon.socket
    assert one(socket, "Accept") == "no"
    assert one(socket, "SocketMode") == "0660"
    assert one(socket, "RemoveOnStop") == "yes"
    assert one(SOCKET["Install"], "WantedBy") == "sockets.target"
    assert values(SERVICE["Unit"], "Requires") == ["homeagent.socket"]
    assert "homeagent.socket" in one(SERVICE["Unit"], "After").split()


def test_the_socket_is_not_in_a_directory_the_service_removes():
    """RuntimeDirectory= is removed when the service stops; the socket unit's
    socket must survive that, so it may not live there."""
    path = one(SOCKET["Socket"], "ListenStream")
    for entry in values(SERVICE["Service"], "RuntimeDirectory"):
        for name in entry.split():
            directory = "/run/" + name.split(":")[0]
            assert not path.startswith(directory + "/"), (path, entry)


def test_user_groups_and_directories_agree():
    service, socket = SERVICE["Service"], SOCKET["Socket"]
    assert ["u", "homeagent"] == SYSUSERS[0][:2]
    assert ["m", "homeagent", "dialout"] in SYSUSERS and ["m", "homeagent", "audio"] in SYSUSERS
    assert one(service, "User") == one(service, "Group") == one(socket, "SocketGroup") == "homeagent"
    assert one(service, "SupplementaryGroups") == "dialout audio"
    assert "/var/lib/" + one(service, "StateDirectory") == DEFAULT_STATE_DIRECTORY
    assert one(service, "StateDirectoryMode") == "0700"
    assert "/etc/" + one(service, "ConfigurationDirectory") == install.CONFIG_DIR
    assert one(service, "LoadCredential") == f"credentials:{install.CREDENTIALS}"


def test_a_key_file_in_the_credentials_directory_reaches_the_provider(tmp_path):
    """LoadCredential=ID:DIR names each file's credential ID_FILE (systemd.exec(5));
    the key the docs tell users to write then reaches the provider."""
    credential_id, source = one(SERVICE["Service"], "LoadCredential").split(":", 1)
    assert source == install.CREDENTIALS
    credentials = tmp_path / "credentials.homeagent.service"
    credentials.mkdir()
    (credentials / f"{credential_id}_openai.key").write_text("sk-from-systemd\n")
    config = _minimal_config() + 'api_key_file = "credentials_openai.key"\n'
    loaded = parse(config, str(tmp_path / "config.toml"),
                   {"CREDENTIALS_DIRECTORY": str(credentials)})
    assert loaded.providers["p"].provider.api_key == "sk-from-systemd"


def test_hardening_keeps_what_the_daemon_needs():
    service = SERVICE["Service"]
    names = {key for key, _ in service}
    # serial ports and sound, peer credentials, model servers anywhere
    assert not names & {"PrivateDevices", "PrivateUsers", "PrivateNetwork", "IPAddressDeny"}
    assert one(service, "DevicePolicy") == "closed"
    assert values(service, "DeviceAllow") == [f"char-{kind} rw" for kind in
                                              ("ttyS", "ttyUSB", "ttyACM", "ttyAMA", "alsa")]
    assert one(service, "RestrictAddressFamilies").split() == ["AF_UNIX", "AF_INET", "AF_INET6"]
    for key, value in {"ProtectSystem": "strict", "ProtectHome": "yes", "NoNewPrivileges": "yes",
                       "CapabilityBoundingSet": "", "MemoryDenyWriteExecute": "yes",
                       "UMask": "0077", "MemoryMax": "160M"}.items():
        assert one(service, key) == value, key


# The serial ports a board's devices are on, by the driver name systemd looks
# up in /proc/devices for DeviceAllow=char-NAME, and the module that registers
# that name when it is not built into the kernel.
BOARD_SERIAL = {
    "ttyS": None,          # 8250 UARTs: a Raspberry Pi 3, 4 or Zero 2 W's GPIO UART (ttyS0, serial0)
    "ttyAMA": None,        # PL011 UARTs: the Pi's other UART, most other aarch64 boards
    "ttyUSB": "usbserial",  # USB serial adapters (FTDI, CH340, CP210x, PL2303)
    "ttyACM": "cdc_acm",    # USB CDC ACM boards (Arduino, Pico)
}


def test_every_board_serial_port_is_allowed():
    """A board on a platform UART was refused with EPERM: ttyS was missing."""
    allowed = {value.split()[0] for value in values(SERVICE["Service"], "DeviceAllow")}
    assert {f"char-{driver}" for driver in BOARD_SERIAL} <= allowed


def test_usb_serial_drivers_are_loaded_before_the_service_starts():
    """systemd resolves char-ttyUSB to a major number when the service starts
    and drops the entry while usbserial is not loaded: an adapter plugged in
    later was refused with EPERM until a restart. The modules-load.d file
    install writes loads each such driver at boot (sysinit.target, which the
    service is ordered after by its default dependencies)."""
    modules = [line.strip() for line in install.shipped("homeagent.modules-load").splitlines()
               if line.strip() and not line.lstrip().startswith(("#", ";"))]
    assert modules == [module for module in BOARD_SERIAL.values() if module]
    assert values(SERVICE["Unit"], "DefaultDependencies") in ([], ["yes"])


def test_open_files_are_bounded_for_a_board():
    """LimitNOFILE= leaves the daemon room for the upstream pool and the load
    test's clients, and that many connections' request lines fit MemoryMax."""
    service = SERVICE["Service"]
    limit = int(one(service, "LimitNOFILE"))
    assert limit >= UPSTREAM_CONNECTIONS + 2 * CLIENTS
    max_line = parse(_minimal_config(), "config.toml").daemon.max_line_bytes
    memory_max = int(one(service, "MemoryMax").removesuffix("M")) * 1024 * 1024
    assert limit * max_line < memory_max / 2


def test_install_changes_only_the_program_path():
    shipped = install.shipped("homeagent.service").splitlines()
    written = install.unit_text("homeagent.service", "/srv/ha").splitlines()
    changed = [(a, b) for a, b in zip(shipped, written) if a != b]
    assert len(shipped) == len(written)
    assert changed == [(f"ExecStart={install.DEFAULT_VENV}/bin/homeagent serve --config {DEFAULT_PATH}",
                        f"ExecStart=/srv/ha/bin/homeagent serve --config {DEFAULT_PATH}"),
                       (f"ExecReload={install.DEFAULT_VENV}/bin/homeagent reload --pid $MAINPID",
                        "ExecReload=/srv/ha/bin/homeagent reload --pid $MAINPID")]
    assert install.unit_text("homeagent.socket", "/srv/ha") == install.shipped("homeagent.socket")


def test_the_checkout_links_systemd_to_the_shipped_units():
    """systemd/ in a checkout is the package's units/, not a copy that could drift."""
    checkout = Path(install.__file__).resolve().parents[2] / "systemd"
    if not checkout.exists():
        pytest.skip("not a checkout: the package comes from an installed wheel")
    assert checkout.resolve() == Path(install.__file__).resolve().parent / "units"
