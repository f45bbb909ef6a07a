"""`homeagent install` and `homeagent uninstall`: the daemon as a systemd
service on a board (docs/on-a-board.md).

install lays out, each step only when needed, so a second run changes
nothing and says so:

- the venv: kept when it already holds homeagent (the board recipe
  pip-installs the wheel first and runs the venv's own homeagent); with
  --wheel, created if absent and the wheel pip-installed into it
- the units (units/ beside this file, ExecStart= at the venv's homeagent),
  the sysusers file, and a modules-load.d file that loads the USB serial
  drivers at boot, so that an adapter plugged in later is allowed (the
  unit's DeviceAllow= sees only drivers loaded when it starts); on this
  machine's running systemd they are loaded at once
- a commented config, only where there is none: a user's is never touched
- the credentials directory (0700) whose files systemd hands the daemon
- /usr/local/bin/homeagent, a symlink to the venv's
- the user and group homeagent (systemd-sysusers), then the units enabled

With --root DIR the same tree is written under DIR (an image being
prepared, a test): systemd-sysusers and systemctl get --root=DIR and nothing
is started. Paths inside the files are always those of the board. Only with
the root / on a machine booted with systemd are units started, restarted or
stopped.

uninstall undoes it but keeps the config and the state (the session
history) unless --purge, and always keeps the user and group: systemd never
removes accounts, since files may still belong to them.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from agent.paths import DEFAULT_PATH, DEFAULT_VENV
from agent.service.config import DEFAULT_STATE_DIRECTORY, default_config_text

UNITS = ("homeagent.socket", "homeagent.service")  # the order systemctl is given them
UNIT_DIR = "/etc/systemd/system"
SYSUSERS = "/etc/sysusers.d/homeagent.conf"
MODULES_LOAD = "/etc/modules-load.d/homeagent.conf"
CONFIG_DIR = os.path.dirname(DEFAULT_PATH)
CREDENTIALS = f"{CONFIG_DIR}/credentials"
LINK = "/usr/local/bin/homeagent"
# the enable symlinks, from the units' [Install] sections
WANTS = (f"{UNIT_DIR}/sockets.target.wants/homeagent.socket",
         f"{UNIT_DIR}/multi-user.target.wants/homeagent.service")
# what the shipped homeagent.service runs; install points it at its venv
SHIPPED_EXEC_START = f"ExecStart={DEFAULT_VENV}/bin/homeagent serve --config {DEFAULT_PATH}\n"
SHIPPED_EXEC_RELOAD = f"ExecReload={DEFAULT_VENV}/bin/homeagent reload --pid $MAINPID\n"
ACCOUNT_FILES = ("/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow")
_UNITS_SOURCE = Path(__file__).resolve().parent / "units"
# a path systemd takes in ExecStart= without quoting or specifier expansion
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9._/+-]*")


class InstallError(Exception):
    """install or uninstall cannot go on: the message says why and what to do."""


def shipped(name: str) -> str:
    """A file of units/ as shipped: homeagent.service, .socket, .sysusers or .modules-load."""
    return (_UNITS_SOURCE / name).read_text(encoding="utf-8")


def executable(venv: str) -> str:
    return f"{venv.rstrip('/')}/bin/homeagent"


def unit_text(name: str, venv: str = DEFAULT_VENV) -> str:
    """The unit `name` as install writes it, ExecStart= and ExecReload= at
    venv's homeagent."""
    text = shipped(name)
    if name == "homeagent.service":
        for line in (SHIPPED_EXEC_START, SHIPPED_EXEC_RELOAD):
            if text.count(line) != 1:
                raise InstallError(f"the shipped {name} does not have {line.strip()!r}")
            text = text.replace(line, line.replace(f"{DEFAULT_VENV}/bin/homeagent",
                                                   executable(venv)))
    return text


@dataclass(frozen=True)
class Target:
    """Where to install: root is "/" for this machine, venv a path on the board."""
    root: str
    venv: str

    @classmethod
    def of(cls, root: str, venv: str) -> Target:
        if not _PLAIN_PATH.fullmatch(venv) or os.path.normpath(venv) == "/":
            raise InstallError(f"--venv {venv!r}: give an absolute directory of its own, "
                               "of letters, digits and . _ - + / only")
        return cls(os.path.abspath(root), os.path.normpath(venv))

    def disk(self, path: str) -> str:
        """Where the board's `path` is on this machine."""
        return os.path.join(self.root, path.lstrip("/"))

    @property
    def live(self) -> bool:
        """This machine's own systemd is running (sd_booted(3)): start and stop units."""
        return self.root == "/" and os.path.isdir("/run/systemd/system")

    def root_option(self) -> list[str]:
        return [] if self.root == "/" else [f"--root={self.root}"]


class _Report:
    """Prints each step and counts the ones that changed something."""

    def __init__(self, out: TextIO | None) -> None:
        self.out = out or sys.stdout
        self.changes = 0

    def changed(self, line: str) -> None:
        self.changes += 1
        self.say(line)

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)


def _command(function):
    """An install step's InstallError is a one-line message and exit status 1."""
    @functools.wraps(function)
    def run(*args, **kwargs) -> int:
        try:
            return function(*args, **kwargs)
        except InstallError as exc:
            print(f"homeagent: {exc}", file=sys.stderr)
            return 1
    return run


@_command
def install(root: str = "/", venv: str = DEFAULT_VENV, wheel: str | None = None,
            find_links: str | None = None, enable: bool = True,
            out: TextIO | None = None) -> int:
    target = Target.of(root, venv)
    _need_root(target, "install")
    report = _Report(out)
    umask = os.umask(0o022)
    try:
        upgraded = _venv(report, target, wheel, find_links)
        units_changed = False
        for name in UNITS:
            units_changed |= _write(report, target.disk(f"{UNIT_DIR}/{name}"),
                                    unit_text(name, target.venv), 0o644)
        _write(report, target.disk(SYSUSERS), shipped("homeagent.sysusers"), 0o644)
        modules_changed = _write(report, target.disk(MODULES_LOAD),
                                 shipped("homeagent.modules-load"), 0o644)
        _directory(report, target.disk(CONFIG_DIR), 0o755)
        _directory(report, target.disk(CREDENTIALS), 0o700)
        config = target.disk(DEFAULT_PATH)
        if os.path.lexists(config):
            report.say(f"kept {config} (an existing config is never overwritten)")
        else:
            _write(report, config, default_config_text(), 0o644)
        _link(report, target)
        _sysusers(report, target)
        if enable:
            _enable(report, target, units_changed, modules_changed, upgraded)
        else:
            report.say("units not enabled (--no-enable)")
    finally:
        os.umask(umask)
    report.say(f"homeagent install: {_count(report.changes, 'change')}" if report.changes
               else "homeagent install: nothing to change, already installed")
    return 0


@_command
def uninstall(root: str = "/", venv: str = DEFAULT_VENV, purge: bool = False,
              out: TextIO | None = None) -> int:
    target = Target.of(root, venv)
    _need_root(target, "uninstall")
    report = _Report(out)
    present = [name for name in UNITS if os.path.lexists(target.disk(f"{UNIT_DIR}/{name}"))]
    if present:
        wanted = [path for path in WANTS if os.path.lexists(target.disk(path))]
        _systemctl(target, "disable", *(["--now"] if target.live else []), *present)
        for path in wanted:
            if not os.path.lexists(target.disk(path)):
                report.changed(f"disabled: removed {target.disk(path)}")
    for path in (*(f"{UNIT_DIR}/{name}" for name in UNITS), SYSUSERS, MODULES_LOAD):
        _remove(report, target.disk(path))
    if present and target.live:
        _run(["systemctl", "daemon-reload"])
    link = target.disk(LINK)
    if os.path.islink(link) and os.readlink(link) == executable(target.venv):
        _remove(report, link)
    elif os.path.lexists(link):
        report.say(f"left {link}: it is not the link to {executable(target.venv)}")
    if purge:
        for path in (CONFIG_DIR, DEFAULT_STATE_DIRECTORY,
                     *(f"{UNIT_DIR}/{name}.d" for name in UNITS)):
            _remove(report, target.disk(path))
    else:
        for path in (CONFIG_DIR, DEFAULT_STATE_DIRECTORY):
            if os.path.lexists(target.disk(path)):
                report.say(f"kept {target.disk(path)} (--purge removes it)")
    # last: this very program may be running from the venv
    path = target.disk(target.venv)
    if os.path.isfile(os.path.join(path, "pyvenv.cfg")):
        _remove(report, path)
    elif os.path.lexists(path):
        report.say(f"left {path}: not a venv")
    report.say("kept the user and group homeagent (userdel homeagent removes them)")
    report.say(f"homeagent uninstall: {_count(report.changes, 'change')}" if report.changes
               else "homeagent uninstall: nothing to remove")
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _need_root(target: Target, what: str) -> None:
    if target.root == "/" and os.geteuid() != 0:
        raise InstallError(f"{what} changes /etc and /opt: run it as root (sudo)")


# ---- the venv ----

def _venv(report: _Report, target: Target, wheel: str | None,
          find_links: str | None) -> bool:
    """Ready the venv; True when its packages changed (the daemon needs a restart)."""
    path = target.disk(target.venv)
    program = os.path.join(path, "bin", "homeagent")
    if wheel is None:
        if find_links is not None:
            raise InstallError("--find-links goes with --wheel")
        if not os.access(program, os.X_OK):
            raise InstallError(
                f"no {program}: create the venv and pip install the homeagent wheel "
                "into it first (docs/on-a-board.md), or give --wheel")
        running = os.path.realpath(sys.prefix) == os.path.realpath(path)
        report.say(f"kept the venv {path}" + (" (this homeagent runs from it)" if running
                                              else "; --wheel installs another build"))
        return False
    wheel = os.path.abspath(wheel)
    if not os.path.isfile(wheel):
        raise InstallError(f"--wheel {wheel}: no such file")
    created = False
    if not os.path.isfile(os.path.join(path, "pyvenv.cfg")):
        if os.path.isdir(path) and os.listdir(path):
            raise InstallError(f"{path} is not empty and not a venv: remove it or choose --venv")
        _run([sys.executable, "-m", "venv", path])
        report.changed(f"created the venv {path}")
        if target.root != "/":
            report.say(f"note: its scripts start {path}/bin/python, and a venv cannot be "
                       "moved: it runs here, not copied onto a board")
        created = True
    before = _distributions(path)
    pip = [os.path.join(path, "bin", "python"), "-m", "pip", "install",
           "--disable-pip-version-check", "--no-input"]
    if find_links is not None:
        pip += ["--no-index", "--find-links", os.path.abspath(find_links)]
    _run([*pip, wheel])
    installed = _distributions(path) != before
    if installed:
        report.changed(f"pip installed {os.path.basename(wheel)} into {path}")
    else:
        report.say(f"kept the venv {path}: {os.path.basename(wheel)} is installed")
    if not os.access(program, os.X_OK):
        raise InstallError(f"pip did not give {program}: is {os.path.basename(wheel)} homeagent?")
    return created or installed


def _distributions(venv: str) -> set[tuple[str, int]]:
    """Each installed distribution with the time its RECORD was written."""
    return {(os.path.basename(os.path.dirname(record)), os.stat(record).st_mtime_ns)
            for record in glob.glob(os.path.join(venv, "lib", "python*", "site-packages",
                                                 "*.dist-info", "RECORD"))}


# ---- files ----

def _write(report: _Report, path: str, text: str, mode: int) -> bool:
    """path holds text with mode afterwards; True if that took a write."""
    data = text.encode()
    try:
        info = os.lstat(path)
        if stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == mode:
            with open(path, "rb") as file:
                if file.read() == data:
                    report.say(f"unchanged {path}")
                    return False
    except FileNotFoundError:
        pass
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".homeagent-")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            os.fchmod(file.fileno(), mode)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    report.changed(f"wrote {path}")
    return True


def _directory(report: _Report, path: str, mode: int) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        if stat.S_IMODE(os.stat(path).st_mode) == mode:
            report.say(f"unchanged {path}/")
            return
        os.chmod(path, mode)
        report.changed(f"set {path}/ to mode {mode:o}")
        return
    os.makedirs(path, exist_ok=True)
    os.chmod(path, mode)
    report.changed(f"created {path}/ (mode {mode:o})")


def _link(report: _Report, target: Target) -> None:
    link, points_to = target.disk(LINK), executable(target.venv)
    if os.path.islink(link):
        if os.readlink(link) == points_to:
            report.say(f"unchanged {link} -> {points_to}")
            return
        os.unlink(link)
    elif os.path.lexists(link):
        report.say(f"left {link}: it is not a symlink; homeagent is at {points_to}")
        return
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(points_to, link)
    report.changed(f"linked {link} -> {points_to}")


def _remove(report: _Report, path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
        report.changed(f"removed {path}/")
    elif os.path.lexists(path):
        os.unlink(path)
        report.changed(f"removed {path}")


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return None


# ---- systemd ----

def _run(command: list[str]) -> None:
    if shutil.which(command[0]) is None:
        needs = (": homeagent needs systemd 252 or newer"
                 if command[0] in ("systemctl", "systemd-sysusers") else "")
        raise InstallError(f"{command[0]} not found{needs}")
    completed = subprocess.run(command, stdin=subprocess.DEVNULL)
    if completed.returncode != 0:
        raise InstallError(f"{' '.join(command)} failed (exit status {completed.returncode})")


def _systemctl(target: Target, *arguments: str) -> None:
    _run(["systemctl", *target.root_option(), *arguments])


def _sysusers(report: _Report, target: Target) -> None:
    accounts = [target.disk(path) for path in ACCOUNT_FILES]
    before = [_read(path) for path in accounts]
    # a bare name: found in the root's sysusers.d, the file written above
    _run(["systemd-sysusers", *target.root_option(), os.path.basename(SYSUSERS)])
    if [_read(path) for path in accounts] != before:
        report.changed("systemd-sysusers: added the user homeagent, or its groups "
                       "(homeagent, dialout, audio)")
    else:
        report.say("unchanged: the user homeagent exists")


def _load_modules(report: _Report) -> None:
    """Load the modules-load.d file now, as the boot does, before the service
    starts and resolves its DeviceAllow= drivers. Not fatal: the next boot
    loads them too."""
    loaded = subprocess.run(["systemctl", "restart", "systemd-modules-load.service"],
                            stdin=subprocess.DEVNULL).returncode == 0
    if loaded:
        report.changed("loaded the USB serial drivers (systemd-modules-load)")
    else:
        report.say("could not load the USB serial drivers now (systemctl status "
                   "systemd-modules-load): until the next boot, restart homeagent "
                   "after plugging in a USB serial adapter")


def _enable(report: _Report, target: Target, units_changed: bool, modules_changed: bool,
            upgraded: bool) -> None:
    wanted = [os.path.lexists(target.disk(path)) for path in WANTS]
    if target.live:
        running = subprocess.run(["systemctl", "is-active", "--quiet", "homeagent.service"],
                                 stdin=subprocess.DEVNULL).returncode == 0
        if units_changed:
            _run(["systemctl", "daemon-reload"])
        if modules_changed:
            _load_modules(report)
        try:
            _systemctl(target, "enable", "--now", *UNITS)
            if running and (units_changed or modules_changed or upgraded):
                # the running daemon gets the new units, device majors or code
                _systemctl(target, "restart", "homeagent.service")
                report.changed("restarted homeagent.service")
        except InstallError as exc:
            raise InstallError(f"{exc}; see systemctl status homeagent and "
                               "journalctl -u homeagent") from None
    else:
        _systemctl(target, "enable", *UNITS)
    if wanted != [os.path.lexists(target.disk(path)) for path in WANTS]:
        report.changed("enabled " + " and ".join(UNITS)
                       + (" and started them" if target.live else
                          ": they start at the next boot"))
    else:
        report.say("unchanged: " + " and ".join(UNITS) + " are enabled")
