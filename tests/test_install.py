"""`homeagent install` and `homeagent uninstall` for real, in a throwaway
board tree: real systemd-sysusers and systemctl with --root=, every file
checked, idempotence by comparing the whole tree.

Each test lays out a minimal Debian root (dialout is gid 20 there) and, as
the board recipe does, a venv at ROOT/opt/homeagent whose bin/homeagent is
the console script pip writes. The package is not pip-installed into that
venv here (that needs its dependencies' wheels): a .pth file gives it this
test run's packages. The one test that runs pip for real needs a wheelhouse,
HOMEAGENT_WHEELHOUSE.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import io
import json
import os
import platform
import re
import shlex
import stat
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import agent
from agent import cli
from agent.service import install
from agent.service.config import default_config_text
from conftest import EMULATED, timeout
from daemon_harness import child_env

BOARD_FILES = {  # a Debian 12 root's own accounts, before homeagent
    "etc/passwd": "root:x:0:0:root:/root:/bin/bash\n",
    "etc/group": "root:x:0:\ndialout:x:20:\naudio:x:29:\n",
    "etc/shadow": "root:*:19000:0:99999:7:::\n",
    "etc/gshadow": "root:*::\ndialout:*::\naudio:*::\n",
}
BOARD_DIRS = ("etc/systemd/system", "etc/sysusers.d", "etc/modules-load.d", "usr/local/bin",
              "opt", "var/lib")
# what systemd-sysusers changes: the account files, their backups (FILE-), its lock
ACCOUNTS = {f"etc/{name}{suffix}" for name in ("passwd", "group", "shadow", "gshadow")
            for suffix in ("", "-")} | {"etc/.pwd.lock"}
PROGRAM = "/opt/homeagent/bin/homeagent"


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under root: kind, mode, and for files mtime and content."""
    entries = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            info = path.lstat()
            key = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                entries[key] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                entries[key] = ("dir", stat.S_IMODE(info.st_mode))
            else:
                entries[key] = ("file", stat.S_IMODE(info.st_mode), info.st_mtime_ns,
                                path.read_bytes())
    return entries


def without(entries: dict[str, tuple], *prefixes: str) -> dict[str, tuple]:
    return {key: value for key, value in entries.items()
            if not any(key == p or key.startswith(p + "/") for p in prefixes)}


class Board:
    """A throwaway board root: `bare` is its tree before the venv was made."""

    def __init__(self, root: Path, venv: str = install.DEFAULT_VENV) -> None:
        self.root, self.venv = root, venv
        for path in BOARD_DIRS:
            (root / path).mkdir(parents=True, exist_ok=True)
        for path, text in BOARD_FILES.items():
            (root / path).write_text(text)
            (root / path).chmod(0o000 if "shadow" in path else 0o644)
        self.bare = tree(root)

    def path(self, board_path: str) -> Path:
        return self.root / board_path.lstrip("/")

    @property
    def program(self) -> Path:
        return self.path(f"{self.venv}/bin/homeagent")

    def make_venv(self, real: bool = True) -> None:
        """The board recipe's `python3 -m venv` and pip install, without pip;
        real=False: only the two files install and uninstall look at."""
        venv = self.path(self.venv)
        if not real:
            self.program.parent.mkdir(parents=True)
            (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
            self.program.write_text("#!/bin/sh\n")
            self.program.chmod(0o755)
            return
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                       timeout=timeout(60))
        # what pip would have installed: this run's agent and its dependencies
        site = glob.glob(str(venv / "lib" / "python*" / "site-packages"))[0]
        paths = [str(Path(agent.__file__).resolve().parents[1])]
        paths += [p for p in sys.path if p and os.path.isdir(p)]
        Path(site, "homeagent-test.pth").write_text("\n".join(paths) + "\n")
        self.program.write_text(f"#!{venv}/bin/python\nimport sys\nfrom agent.cli import main\n"
                                "if __name__ == '__main__':\n    sys.exit(main())\n")
        self.program.chmod(0o755)

    def homeagent(self, *args: str, venv_program: bool = True) -> subprocess.CompletedProcess:
        """Run homeagent: the venv's own program, as `sudo /opt/homeagent/bin/homeagent`
        does on a board (under qemu its interpreter runs it: execve is not emulated)."""
        if venv_program and not EMULATED:
            command = [str(self.program)]
        elif venv_program:
            command = [sys.executable, str(self.program)]
        else:
            command = [sys.executable, "-m", "agent.cli"]
        return subprocess.run([*command, *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, env=child_env(), timeout=timeout(120))

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        """homeagent in this process: the same CLI, without an interpreter's start
        (seconds under qemu). The systemd tools still run as programs."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(args))
        return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())

    def install(self, *args: str, in_process: bool = False) -> subprocess.CompletedProcess:
        run = self.cli if in_process else self.homeagent
        result = run("install", "--root", str(self.root), "--venv", self.venv, *args)
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    def uninstall(self, *args: str) -> subprocess.CompletedProcess:
        result = self.cli("uninstall", "--root", str(self.root), "--venv", self.venv, *args)
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    def account(self, file: str, name: str) -> list[str]:
        lines = [line.split(":") for line in self.path(file).read_text().splitlines()]
        found = [fields for fields in lines if fields[0] == name]
        assert len(found) == 1, (file, name, lines)
        return found[0]


@pytest.fixture
def board(tmp_path: Path) -> Board:
    board = Board(tmp_path / "root")
    board.make_venv()
    return board


@pytest.fixture
def quick_board(tmp_path: Path) -> Board:
    """For the tests that run install in this process: no interpreter in the venv."""
    board = Board(tmp_path / "root")
    board.make_venv(real=False)
    return board


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_install_lays_out_the_board(board):
    result = board.install()
    assert "kept the venv" in result.stdout
    if not EMULATED:
        assert "(this homeagent runs from it)" in result.stdout

    for name in install.UNITS:
        unit = board.path(f"/etc/systemd/system/{name}")
        assert unit.read_text() == install.unit_text(name, install.DEFAULT_VENV)
        assert mode(unit) == 0o644
    service = board.path("/etc/systemd/system/homeagent.service").read_text()
    assert f"\nExecStart={PROGRAM} serve --config /etc/homeagent/config.toml\n" in service
    assert os.access(board.path(PROGRAM), os.X_OK)  # what ExecStart runs is there

    sysusers = board.path("/etc/sysusers.d/homeagent.conf")
    assert sysusers.read_text() == install.shipped("homeagent.sysusers") and mode(sysusers) == 0o644
    modules = board.path("/etc/modules-load.d/homeagent.conf")
    assert modules.read_text() == install.shipped("homeagent.modules-load")
    assert mode(modules) == 0o644
    config = board.path("/etc/homeagent/config.toml")
    assert config.read_text() == default_config_text() and mode(config) == 0o644
    check = board.homeagent("serve", "--check", "--config", str(config), venv_program=False)
    assert check.returncode == 0 and "ok; providers: local" in check.stdout, check.stderr
    assert mode(board.path("/etc/homeagent")) == 0o755
    assert mode(board.path("/etc/homeagent/credentials")) == 0o700

    link = board.path("/usr/local/bin/homeagent")
    assert os.readlink(link) == PROGRAM  # the board's path, not this machine's
    help_text = subprocess.run([sys.executable, str(board.path(os.readlink(link))), "--help"],
                               capture_output=True, text=True, env=child_env(),
                               timeout=timeout(60))
    assert "install" in help_text.stdout and "serve" in help_text.stdout

    # enabled: the symlinks systemctl makes from the [Install] sections
    wants = board.path("/etc/systemd/system/sockets.target.wants/homeagent.socket")
    assert os.readlink(wants) == "/etc/systemd/system/homeagent.socket"
    wants = board.path("/etc/systemd/system/multi-user.target.wants/homeagent.service")
    assert os.readlink(wants) == "/etc/systemd/system/homeagent.service"
    enabled = subprocess.run(["systemctl", f"--root={board.root}", "is-enabled", *install.UNITS],
                             capture_output=True, text=True, timeout=timeout(60))
    assert enabled.stdout.split() == ["enabled", "enabled"]

    # systemd-sysusers made the system user, its group, and put it in dialout and audio
    user = board.account("etc/passwd", "homeagent")
    assert int(user[2]) < 1000 and user[6] == "/usr/sbin/nologin"
    assert board.account("etc/group", "homeagent")[2] == user[3]
    assert board.account("etc/group", "dialout") == ["dialout", "x", "20", "homeagent"]
    assert board.account("etc/group", "audio") == ["audio", "x", "29", "homeagent"]
    assert board.account("etc/shadow", "homeagent")[1] in ("!*", "!", "*")  # no password


def test_a_second_install_changes_nothing(board):
    board.install()
    before = tree(board.root)
    result = board.install()
    assert tree(board.root) == before
    assert "wrote" not in result.stdout and "created" not in result.stdout
    assert result.stdout.rstrip().endswith("homeagent install: nothing to change, already installed")


def test_install_loads_the_usb_serial_drivers_at_boot_and_uninstall_removes_that(quick_board):
    """DeviceAllow=char-ttyUSB and char-ttyACM resolve their major numbers
    when the service starts: an adapter plugged in later is allowed only if
    its driver was loaded by then, so install has the boot load them."""
    board = quick_board
    modules = board.path("/etc/modules-load.d/homeagent.conf")
    first = board.install(in_process=True)
    assert f"wrote {modules}" in first.stdout
    names = [line.strip() for line in modules.read_text().splitlines()
             if line.strip() and not line.lstrip().startswith(("#", ";"))]
    assert names == ["usbserial", "cdc_acm"]
    written = tree(board.root)["etc/modules-load.d/homeagent.conf"]

    second = board.install(in_process=True)
    assert f"unchanged {modules}" in second.stdout
    assert tree(board.root)["etc/modules-load.d/homeagent.conf"] == written

    assert f"removed {modules}" in board.uninstall().stdout
    assert not modules.exists()
    assert board.path("/etc/modules-load.d").is_dir()  # the board's directory stays


def test_install_repairs_what_drifted_and_never_touches_the_config(quick_board):
    board = quick_board
    board.install(in_process=True)
    config = board.path("/etc/homeagent/config.toml")
    config.write_text(config.read_text().replace('model = "llama3.2"', 'model = "qwen3"'))
    mine = tree(board.root)["etc/homeagent/config.toml"]
    service = board.path("/etc/systemd/system/homeagent.service")
    service.write_text(service.read_text() + "# an older version\n")
    board.path("/etc/homeagent/credentials").chmod(0o755)
    board.path("/usr/local/bin/homeagent").unlink()
    board.path("/etc/systemd/system/sockets.target.wants/homeagent.socket").unlink()

    result = board.install(in_process=True)
    assert service.read_text() == install.unit_text("homeagent.service")
    assert mode(board.path("/etc/homeagent/credentials")) == 0o700
    assert os.readlink(board.path("/usr/local/bin/homeagent")) == PROGRAM
    assert board.path("/etc/systemd/system/sockets.target.wants/homeagent.socket").is_symlink()
    assert tree(board.root)["etc/homeagent/config.toml"] == mine
    assert "homeagent install: 4 changes" in result.stdout


def test_install_without_a_venv_says_how_and_writes_nothing(tmp_path):
    board = Board(tmp_path / "root")
    result = board.cli("install", "--root", str(board.root))
    assert result.returncode == 1
    assert f"no {board.program}: create the venv and pip install" in result.stderr
    assert tree(board.root) == board.bare


def test_another_venv_and_no_enable(tmp_path):
    board = Board(tmp_path / "root", venv="/srv/ha")
    board.make_venv(real=False)
    board.install("--no-enable", in_process=True)
    service = board.path("/etc/systemd/system/homeagent.service").read_text()
    assert "\nExecStart=/srv/ha/bin/homeagent serve --config" in service
    assert os.readlink(board.path("/usr/local/bin/homeagent")) == "/srv/ha/bin/homeagent"
    assert not board.path("/etc/systemd/system/sockets.target.wants").exists()
    assert not board.path("/etc/systemd/system/multi-user.target.wants").exists()


def test_a_venv_path_systemd_would_misread_is_refused(tmp_path):
    board = Board(tmp_path / "root")
    result = board.cli("install", "--root", str(board.root), "--venv", "/opt/home agent")
    assert result.returncode == 1 and "--venv '/opt/home agent'" in result.stderr
    assert tree(board.root) == board.bare


def test_uninstall_removes_what_install_wrote_and_keeps_config_and_state(board):
    board.install()
    key = board.path("/etc/homeagent/credentials/openai.key")
    key.write_text("sk-test\n")
    key.chmod(0o600)
    session = board.path("/var/lib/homeagent/sessions/s1.json")
    session.parent.mkdir(parents=True)
    session.write_text("{}")
    kept = {k: v for k, v in tree(board.root).items()
            if k.startswith(("etc/homeagent", "var/lib/homeagent"))}

    result = board.uninstall()
    after = tree(board.root)
    # the venv, the units, the enable links, the sysusers file and the link are gone;
    # the config, the key, the state and the accounts stay
    assert without(after, "etc/homeagent", "var/lib/homeagent", *ACCOUNTS) == \
        without(board.bare, *ACCOUNTS)
    assert {k: v for k, v in after.items()
            if k.startswith(("etc/homeagent", "var/lib/homeagent"))} == kept
    board.account("etc/passwd", "homeagent")
    assert "kept the user and group homeagent" in result.stdout

    again = board.uninstall()
    assert tree(board.root) == after
    assert again.stdout.rstrip().endswith("homeagent uninstall: nothing to remove")

    board.uninstall("--purge")
    assert without(tree(board.root), *ACCOUNTS) == without(board.bare, *ACCOUNTS)
    assert board.uninstall("--purge").stdout.rstrip().endswith("nothing to remove")


def test_uninstall_leaves_a_homeagent_command_that_is_not_its_link(quick_board):
    board = quick_board
    board.install(in_process=True)
    link = board.path("/usr/local/bin/homeagent")
    link.unlink()
    link.write_text("#!/bin/sh\n")  # someone else's program
    result = board.uninstall()
    assert link.read_text() == "#!/bin/sh\n"
    assert f"left {link}" in result.stdout


WHEELHOUSE = os.environ.get("HOMEAGENT_WHEELHOUSE")


@pytest.mark.not_emulated(reason="install creates the venv and runs its pip with the aarch64 "
                          "interpreter by execve, which qemu-user does not follow")
@pytest.mark.skipif(not WHEELHOUSE, reason="HOMEAGENT_WHEELHOUSE is not set: a directory "
                    "with this build's homeagent wheel and its dependencies' wheels "
                    "(pip wheel -w DIR .) lets install create the venv and run pip offline")
def test_install_from_a_wheel_creates_the_venv(tmp_path):
    wheels = glob.glob(os.path.join(WHEELHOUSE, f"homeagent-*_{platform.machine()}.whl"))
    assert len(wheels) == 1, f"expected one homeagent wheel for {platform.machine()} " \
                             f"in {WHEELHOUSE}, found {wheels}"
    board = Board(tmp_path / "root")
    env = {k: v for k, v in child_env().items() if k != "PYTHONPATH"}  # the venv's own code

    def run(*command: str) -> subprocess.CompletedProcess:
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path,
                                stdin=subprocess.DEVNULL, timeout=timeout(300))
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    first = run(sys.executable, "-m", "agent.cli", "install", "--root", str(board.root),
                "--wheel", wheels[0], "--find-links", WHEELHOUSE)
    assert f"created the venv {board.path('/opt/homeagent')}" in first.stdout
    assert "pip installed" in first.stdout
    imported = run(str(board.path("/opt/homeagent/bin/python")), "-c",
                   "import agent, agent.stream; print(agent.__file__)")
    assert imported.stdout.startswith(str(board.path("/opt/homeagent/lib/")))
    config = board.path("/etc/homeagent/config.toml")
    assert "ok; providers: local" in run(str(board.program), "serve", "--check",
                                         "--config", str(config)).stdout

    # again, now from the venv's own homeagent: pip finds it installed
    before = without(tree(board.root), *(k for k in tree(board.root) if "__pycache__" in k))
    second = run(str(board.program), "install", "--root", str(board.root),
                 "--wheel", wheels[0], "--find-links", WHEELHOUSE)
    assert "nothing to change" in second.stdout
    after = without(tree(board.root), *(k for k in tree(board.root) if "__pycache__" in k))
    assert after == before

    run(sys.executable, "-m", "agent.cli", "uninstall", "--root", str(board.root), "--purge")
    assert without(tree(board.root), *ACCOUNTS) == without(board.bare, *ACCOUNTS)


def test_on_a_booted_system_units_start_and_restart_only_when_needed(tmp_path, monkeypatch):
    """The live branch (root / under a running systemd) with a stand-in
    systemctl that logs its calls: on this machine systemd is not PID 1, and
    a real run would change /etc. Files go to a throwaway root as before."""
    board = Board(tmp_path / "root")
    board.make_venv(real=False)
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    # is-active answers from $ACTIVE; enable makes the wants links like the real one
    systemctl.write_text(f"""#!/bin/sh
echo "$*" >> {calls}
case "$*" in
  *is-active*) [ "$ACTIVE" = yes ]; exit ;;
  *systemd-modules-load*) [ "$MODULES" != fail ]; exit ;;
  *" enable "*) mkdir -p {board.root}/etc/systemd/system/sockets.target.wants \\
        {board.root}/etc/systemd/system/multi-user.target.wants
     ln -sfn /etc/systemd/system/homeagent.socket \\
        {board.root}/etc/systemd/system/sockets.target.wants/homeagent.socket
     ln -sfn /etc/systemd/system/homeagent.service \\
        {board.root}/etc/systemd/system/multi-user.target.wants/homeagent.service ;;
  *" disable "*) rm -rf {board.root}/etc/systemd/system/*.wants ;;
esac
""")
    systemctl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(install.Target, "live", property(lambda self: True))
    root = f"--root={board.root}"

    def run(function, active: bool, **kwargs) -> list[str]:
        monkeypatch.setenv("ACTIVE", "yes" if active else "no")
        calls.write_text("")
        out = io.StringIO()
        assert function(str(board.root), out=out, **kwargs) == 0, out.getvalue()
        return calls.read_text().splitlines()

    # first install: new units, nothing running yet: reload, load the USB serial
    # drivers before the service resolves its DeviceAllow=, enable and start
    assert run(install.install, active=False) == [
        "is-active --quiet homeagent.service", "daemon-reload",
        "restart systemd-modules-load.service",
        f"{root} enable --now homeagent.socket homeagent.service"]
    # again, running, nothing changed: no reload, no restart
    assert run(install.install, active=True) == [
        "is-active --quiet homeagent.service",
        f"{root} enable --now homeagent.socket homeagent.service"]
    # a changed unit while the daemon runs: reload, then restart it
    service = board.path("/etc/systemd/system/homeagent.service")
    service.write_text(service.read_text() + "# older\n")
    assert run(install.install, active=True) == [
        "is-active --quiet homeagent.service", "daemon-reload",
        f"{root} enable --now homeagent.socket homeagent.service",
        f"{root} restart homeagent.service"]
    # a new modules-load file while the daemon runs (an upgrade from a version
    # without it): the drivers now, and a restart so that DeviceAllow= sees them
    board.path(install.MODULES_LOAD).unlink()
    assert run(install.install, active=True) == [
        "is-active --quiet homeagent.service", "restart systemd-modules-load.service",
        f"{root} enable --now homeagent.socket homeagent.service",
        f"{root} restart homeagent.service"]
    # drivers that cannot be loaded now (no such module): said, and not fatal
    board.path(install.MODULES_LOAD).unlink()
    monkeypatch.setenv("MODULES", "fail")
    out = io.StringIO()
    assert install.install(str(board.root), out=out) == 0, out.getvalue()
    assert "could not load the USB serial drivers now" in out.getvalue()
    # uninstall stops and disables both, and reloads once the files are gone
    assert run(install.uninstall, active=True) == [
        f"{root} disable --now homeagent.socket homeagent.service", "daemon-reload"]
    assert not board.path("/etc/systemd/system/homeagent.service").exists()


# ---- the board recipe of docs/on-a-board.md ----

CHECKOUT = Path(__file__).resolve().parents[1]
BOARD_WHEEL = f"homeagent-{agent.__version__}-cp311-cp311-linux_aarch64.whl"


def documented(command: str) -> list[list[str]]:
    """The commands in docs/on-a-board.md's code blocks that start with
    `command`, continuation lines joined, each split as the shell would."""
    text = (CHECKOUT / "docs" / "on-a-board.md").read_text(encoding="utf-8")
    lines = re.sub(r"\\\n\s*", " ", text).splitlines()
    return [shlex.split(line, comments=True) for line in lines
            if line.startswith("    ") and line.strip().startswith(command)]


def test_the_offline_download_admits_the_board_wheel_itself():
    """The homeagent wheel is tagged linux_aarch64: `pip download` with only
    manylinux platforms refuses it as "not a supported wheel"."""
    [download] = documented("pip download")
    platforms = [download[i + 1] for i, word in enumerate(download) if word == "--platform"]
    assert "linux_aarch64" in platforms and "manylinux2014_aarch64" in platforms
    assert download[download.index("--python-version") + 1] == "3.11"
    assert "--only-binary=:all:" in download
    assert download[-1] == f"./{BOARD_WHEEL}"
    [install_offline] = documented("sudo /opt/homeagent/bin/pip install --no-index")
    assert install_offline[-1] == f"./{BOARD_WHEEL}"


def _project(requirement: str) -> str:
    return Requirement(requirement).name


def _metadata_wheel(directory: Path, name: str, version: str, tag: str,
                    requires: tuple[str, ...] = ()) -> Path:
    """A wheel holding only its metadata: all that `pip download` reads."""
    dist = f"{name.replace('-', '_')}-{version}"
    info = f"{dist}.dist-info"
    files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
             + "".join(f"Requires-Dist: {requirement}\n" for requirement in requires),
             f"{info}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n"}
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    path = directory / f"{dist}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
    return path


@pytest.mark.skipif(importlib.util.find_spec("pip") is None,
                    reason="pip is not installed for this interpreter")
def test_the_documented_offline_download_resolves(tmp_path):
    """The documented command, run offline against an index of stand-in
    wheels tagged as the real ones are (homeagent linux_aarch64, cffi
    manylinux2014 aarch64, the rest pure Python), fetches them all; without
    --platform linux_aarch64 it fails, as it did."""
    requires = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["dependencies"]
    index = tmp_path / "index"
    index.mkdir()
    for requirement in requires:
        tag = ("cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64"
               if _project(requirement) == "cffi" else "py3-none-any")
        _metadata_wheel(index, _project(requirement), "99.0", tag)  # 99.0 meets every >= of pyproject.toml
    _metadata_wheel(tmp_path, "homeagent", agent.__version__, "cp311-cp311-linux_aarch64",
                    tuple(requires))
    [download] = documented("pip download")

    def run(argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", *argv, "--no-index", "--find-links",
                               str(index)], cwd=tmp_path, capture_output=True, text=True,
                              env=child_env({"PIP_CONFIG_FILE": os.devnull}),
                              stdin=subprocess.DEVNULL, timeout=timeout(120))

    done = run(download)
    assert done.returncode == 0, done.stdout + done.stderr
    fetched = sorted(path.name.split("-")[0] for path in (tmp_path / "wheels").iterdir())
    assert fetched == sorted(["homeagent", *(_project(r).replace("-", "_") for r in requires)])

    at = download.index("linux_aarch64")
    refused = run([*download[:at - 1], *download[at + 1:]])
    assert refused.returncode != 0 and "is not a supported wheel" in refused.stderr, \
        refused.stdout + refused.stderr


@pytest.mark.not_emulated(reason="arm64.sh runs on the build machine; it makes a venv of "
                          "the host interpreter")
def test_the_wheel_is_built_with_the_setuptools_the_project_needs(tmp_path):
    """`toolchain/arm64.sh wheel` built with PYTHON's own setuptools, which in
    a fresh venv of Debian 12's Python is 65 (the project needs 77): the build
    failed. It now builds in a venv of its own holding pyproject.toml's build
    requirements, made from a plain interpreter here as on a fresh machine."""
    base = getattr(sys, "_base_executable", sys.executable)
    work = tmp_path / "arm64"
    result = subprocess.run(["bash", str(CHECKOUT / "toolchain" / "arm64.sh"), "buildenv"],
                            capture_output=True, text=True, stdin=subprocess.DEVNULL,
                            env=child_env({"ARM64_WORK": str(work), "PYTHON": base}),
                            timeout=timeout(300))
    assert result.returncode == 0, result.stdout + result.stderr
    listed = subprocess.run([str(work / "buildenv" / "bin" / "python"), "-m", "pip", "list",
                             "--format=json", "--disable-pip-version-check"],
                            capture_output=True, text=True, timeout=timeout(60), check=True)
    installed = {canonicalize_name(d["name"]): d["version"] for d in json.loads(listed.stdout)}
    requires = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["build-system"]["requires"]
    for requirement in map(Requirement, requires):
        version = installed.get(canonicalize_name(requirement.name))
        assert version is not None and requirement.specifier.contains(version), \
            (str(requirement), version)
