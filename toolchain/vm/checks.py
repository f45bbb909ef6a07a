"""The checks of toolchain/vm.sh, inside the booted guest (root, at boot,
the guest's own python3: only the standard library).

Each check prints one line to the console, where toolchain/vm/host.py reads
it: "@@vm pass NAME: detail" or "@@vm fail NAME: detail"; "@@vm event plug-usb"
asks the host to hot-plug the USB serial adapter, "@@vm figure" lines carry
measurements, "@@vm done" ends the run. The run has two boots: the state
between them is in STATE. Every wait polls for its condition up to a
deadline; none is a fixed sleep.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

SHARE = Path("/host")
STATE = Path("/var/lib/vmcheck")
VM = json.loads((SHARE / "vm.json").read_text())
VENV = "/opt/homeagent"
HOMEAGENT = f"{VENV}/bin/homeagent"
VENV_COPY = "/var/tmp/homeagent-venv"
SHARED_DIRECTORIES = ("/etc/sysusers.d", "/etc/modules-load.d")
CONFIG = Path("/etc/homeagent/config.toml")
CREDENTIALS = Path("/etc/homeagent/credentials")
STATE_DIR = Path("/var/lib/homeagent")
SOCKET = "/run/homeagent/agent.sock"
MOCK_PORT = 8400
KEY = "sk-vm-" + hashlib.sha256(VM["arch"].encode()).hexdigest()[:24]
MEMBER, OUTSIDER = "vmmember", "vmoutsider"
ANSWER = "The living room is 21.5"   # the mock's answer to a plain question
WAIT = 300.0                       # seconds for anything to happen under TCG
# what the journal of the whole run must not show: the sandbox refusing
# something (an audit record of a filtered call is type 1326, with syscall=)
DENIED = re.compile(r"EPERM|Operation not permitted|type=1326|syscall=\d+|denied",
                    re.IGNORECASE)


def say(line: str) -> None:
    # one write per line: the console is shared with nothing else, but keep it whole
    with open("/dev/console", "w") as console:
        console.write(f"@@vm {line}\n")


class Failed(Exception):
    pass


def check(name: str):
    """Decorating a function runs it at once as the check `name`: its return
    value is the detail of a pass, Failed or any exception a fail."""
    def wrap(fn):
        try:
            detail = fn()
        except Failed as exc:
            say(f"fail {name}: {exc}")
            return False
        except Exception as exc:  # a check that crashed is a failed check, with why
            tail = traceback.format_exc().strip().splitlines()[-3:]
            say(f"fail {name}: {type(exc).__name__}: {exc} | {' / '.join(tail)}")
            return False
        say(f"pass {name}: {detail}")
        return True
    return wrap


def ensure(condition, message: str) -> None:
    if not condition:
        raise Failed(message)


def run(*argv: str, user: str | None = None, ok: bool = True,
        timeout: float = WAIT) -> subprocess.CompletedProcess:
    if user is not None:
        argv = ("runuser", "-u", user, "--", *argv)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    if ok and done.returncode != 0:
        raise Failed(f"{' '.join(argv)}: exit {done.returncode}: "
                     f"{(done.stderr or done.stdout).strip()[-400:]}")
    return done


def until(what: str, condition, wait: float = WAIT, interval: float = 0.2):
    """condition()'s first true value, polled; Failed naming `what` after wait."""
    deadline = time.monotonic() + wait
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise Failed(f"not within {wait:g} s: {what}")
        time.sleep(interval)
    return value


def prop(name: str, unit: str = "homeagent.service") -> str:
    return run("systemctl", "show", "-P", name, unit).stdout.strip()


def main_pid() -> int:
    return int(prop("MainPID"))


def status() -> dict:
    return json.loads(run(HOMEAGENT, "status", "--json").stdout)


def ask(prompt: str = "hello", user: str | None = None, *extra: str) -> str:
    done = run(HOMEAGENT, "ask", "--reasoning", "hide", *extra, prompt, user=user)
    ensure(ANSWER in done.stdout, f"ask {prompt!r}: unexpected answer {done.stdout[-200:]!r}")
    return done.stdout


def state() -> dict:
    path = STATE / "state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def save(**items) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    (STATE / "state.json").write_text(json.dumps({**state(), **items}))


def files_under(*roots: str) -> list[str]:
    skip = ("/var/lib/systemd", "/var/lib/vmcheck", "/var/lib/dpkg", "/var/lib/apt")
    found = []
    for top in roots:
        for directory, dirs, files in os.walk(top):
            if directory.startswith(skip):
                dirs[:] = []
                continue
            found += [path for path in (os.path.join(directory, name) for name in dirs + files)
                      if not path.startswith(skip)]
    return sorted(found)


def digest(path: Path) -> str:
    if path.is_dir():
        return ",".join(f"{p.name}:{hashlib.sha256(p.read_bytes()).hexdigest()[:12]}"
                        for p in sorted(path.iterdir()))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def start_mock() -> subprocess.Popen:
    mock = subprocess.Popen([HOMEAGENT, "mock-llm", "--port", str(MOCK_PORT),
                             "--require-key", KEY],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def listening() -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", MOCK_PORT)) == 0
    until("the mock model server listens", listening)
    return mock


def config_text(model: str, retries: str = "2") -> str:
    ports = {"uart": VM["uart"], "usb": "/dev/ttyUSB0"}
    devices = "".join(f'\n[devices.{name}]\ntype = "serial"\nport = "{port}"\n'
                      for name, port in ports.items())
    return (f'default_provider = "mock"\n\n[providers.mock]\nprotocol = "openai-chat"\n'
            f'base_url = "http://127.0.0.1:{MOCK_PORT}/v1"\nmodel = "{model}"\n'
            f'api_key_file = "credentials/mock.key"\nretries = {retries}\n' + devices)


def device(name: str) -> dict:
    return next(d for d in status()["devices"] if d["name"] == name)


def board_answered(name: str) -> dict:
    """The board's PROMPT went through: its session has the answer, and the
    daemon wrote the answer's lines to the port (the host checks they arrived)."""
    def answered():
        done = run(HOMEAGENT, "history", f"device-{name}", "--json", ok=False)
        info = device(name)
        # HELLO, START, TEXT, DONE from this daemon, not only an earlier one
        return (done.returncode == 0 and ANSWER in done.stdout and info["connected"]
                and info["lines_out"] >= 4 and info)
    return until(f"the board on {name} is answered", answered)


# ---------------------------------------------------------------- first boot

def first_boot() -> None:
    before_install = files_under("/etc", "/opt", "/usr/local", "/var/lib")
    wheel = SHARE / "wheels" / VM["wheel"]

    @check("install from the wheel as the README says, offline")
    def _():
        run("python3", "-m", "venv", VENV)
        run(f"{VENV}/bin/pip", "install", "--no-index", "--find-links", str(SHARE / "wheels"),
            str(wheel))
        out = run(HOMEAGENT, "install").stdout
        ensure(prop("ActiveState", "homeagent.socket") == "active", "homeagent.socket not active")
        ensure(prop("ActiveState") == "active", "homeagent.service not active")
        return out.strip().splitlines()[-1]

    @check("a second install changes nothing")
    def _():
        out = run(HOMEAGENT, "install").stdout.strip().splitlines()[-1]
        ensure(out == "homeagent install: nothing to change, already installed", out)
        return out

    @check("serve --check of the installed default config")
    def _():
        return run(HOMEAGENT, "serve", "--check").stdout.strip()

    for user in (MEMBER, OUTSIDER):
        run("useradd", "--system", "--no-create-home", user)
    run("usermod", "-aG", "homeagent", MEMBER)
    save(before=before_install)
    start_mock()

    @check("credential: a key in /etc/homeagent/credentials reaches the provider")
    def _():
        (CREDENTIALS / "mock.key").write_text(KEY + "\n")
        os.chmod(CREDENTIALS / "mock.key", 0o600)
        CONFIG.write_text(config_text("mock-a"))
        run("systemctl", "restart", "homeagent.service")  # keys are copied at start
        ask()
        return "the mock (--require-key) answered an ask"

    @check("socket activation: a group member's ask starts the stopped service")
    def _():
        run("systemctl", "stop", "homeagent.service")
        ensure(prop("ActiveState") == "inactive", f"not stopped: {prop('ActiveState')}")
        ensure(prop("ActiveState", "homeagent.socket") == "active", "socket not active")
        ask("hello", MEMBER)
        ensure(prop("ActiveState") == "active", "the ask did not start the service")
        return f"answered; {prop('ActiveState')} {prop('SubState')}, MainPID {main_pid()}"

    @check("a user outside the group is refused with the CLI's message")
    def _():
        done = run(HOMEAGENT, "ask", "hello", user=OUTSIDER, ok=False)
        ensure(done.returncode == 3 and "no permission to connect" in done.stderr,
               f"exit {done.returncode}: {done.stderr.strip()}")
        return done.stderr.strip()

    @check("notify: systemctl status shows active with the daemon's STATUS line")
    def _():
        text = run("systemctl", "status", "--no-pager", "homeagent.service", ok=False).stdout
        ensure("Active: active (running)" in text, text[:300])
        line = next((l.strip() for l in text.splitlines() if l.strip().startswith("Status:")),
                    None)
        ensure(line is not None and ("listening on" in line or "answered" in line), text[:400])
        ensure(prop("Type") == "notify", prop("Type"))
        return line

    @check("cold start to READY (systemctl start of a stopped service)")
    def _():
        run("systemctl", "stop", "homeagent.service")
        t0 = time.monotonic()
        run("systemctl", "start", "homeagent.service")  # Type=notify: returns at READY=1
        wall = time.monotonic() - t0
        exec_ready = (int(prop("ActiveEnterTimestampMonotonic"))
                      - int(prop("ExecMainStartTimestampMonotonic"))) / 1e6
        at_ready = rss(main_pid())
        save(rss_at_ready=at_ready)
        say(f"figure cold start to READY: {wall:.2f} s (systemctl start), "
            f"{exec_ready:.2f} s from exec to READY=1")
        return f"{wall:.2f} s"

    @check("serial: a board on the platform UART " + VM["uart"])
    def _():
        info = board_answered("uart")
        ensure(info["restarts"] == 0 and int(prop("NRestarts")) == 0, f"restarted: {info}")
        return f"answered, {info['lines_out']} lines out, no restart"

    @check("serial: a USB adapter hot-plugged after the start works without a restart")
    def _():
        pid = main_pid()
        save(usb_pid=pid)
        say("event plug-usb")
        until("/dev/ttyUSB0 appears", lambda: os.path.exists("/dev/ttyUSB0"))
        info = board_answered("usb")
        ensure(main_pid() == pid, f"MainPID changed {pid} -> {main_pid()}")
        return f"{info['port']} answered, {info['lines_out']} lines out, same MainPID {pid}"

    figures()

    @check("reload applies a changed provider, and systemctl reload waits for it")
    def _():
        pid = main_pid()
        CONFIG.write_text(config_text("mock-b"))
        run("systemctl", "reload", "homeagent.service")
        # no wait: systemctl reload returned, so the new config must be in use
        now = status()
        model = now["providers"][0]["model"]
        ensure(model == "mock-b", f"right after systemctl reload: model {model}")
        ensure(main_pid() == pid, "MainPID changed")
        ask()
        sent = json.loads(run("python3", "-c", "import sys, urllib.request; sys.stdout.write("
                              f"urllib.request.urlopen('http://127.0.0.1:{MOCK_PORT}"
                              "/_mock/requests').read().decode())").stdout)
        models = [r["body"].get("model") for r in sent if isinstance(r.get("body"), dict)]
        ensure(models and models[-1] == "mock-b", f"the mock got {models[-3:]}")
        return f"model mock-b in status at once and in the next request, MainPID {pid} kept"

    @check("reload refuses a bad config and keeps the old one")
    def _():
        pid = main_pid()
        CONFIG.write_text(config_text("mock-c", retries='"many"'))
        done = run("systemctl", "reload", "homeagent.service", ok=False)
        ensure(done.returncode != 0, "systemctl reload succeeded on a bad config")
        ensure(prop("ActiveState") == "active" and main_pid() == pid, "the daemon did not run on")
        now = status()
        ensure(now["providers"][0]["model"] == "mock-b", f"model {now['providers'][0]['model']}")
        ensure("retries" in (now["reload_error"] or ""), f"reload_error {now['reload_error']}")
        ask()
        CONFIG.write_text(config_text("mock-b"))
        run("systemctl", "reload", "homeagent.service")
        return f"systemctl reload exit {done.returncode}; running on mock-b: {now['reload_error']}"

    @check("limits: MemoryMax, MemoryHigh, TasksMax, LimitNOFILE on the cgroup and process")
    def _():
        cgroup = Path("/sys/fs/cgroup") / prop("ControlGroup").lstrip("/")
        got = {name: (cgroup / name).read_text().strip()
               for name in ("memory.max", "memory.high", "pids.max")}
        want = {"memory.max": str(160 << 20), "memory.high": str(128 << 20), "pids.max": "64"}
        ensure(got == want, f"cgroup {got}")
        limits = Path(f"/proc/{main_pid()}/limits").read_text()
        nofile = re.search(r"Max open files\s+(\d+)\s+(\d+)", limits)
        ensure(nofile and nofile.groups() == ("512", "512"), f"nofile {nofile and nofile.groups()}")
        return f"{got}, nofile 512/512"

    @check("sandbox: Seccomp and NoNewPrivs on the daemon")
    def _():
        text = Path(f"/proc/{main_pid()}/status").read_text()
        fields = dict(re.findall(r"^(Seccomp|NoNewPrivs):\s+(\d+)$", text, re.M))
        ensure(fields == {"Seccomp": "2", "NoNewPrivs": "1"}, str(fields))
        return str(fields)

    @check("systemd-analyze security on the live unit")
    def _():
        out = run("systemd-analyze", "security", "--no-pager", "homeagent.service",
                  ok=False).stdout
        found = re.search(r"Overall exposure level for homeagent.service: ([\d.]+) (\w+)", out)
        ensure(found and float(found[1]) <= 2.0, out[-300:])
        return found[0]

    @check("watchdog: a SIGSTOPped daemon is killed and restarted, the next ask answered")
    def _():
        pid, restarts = main_pid(), int(prop("NRestarts"))
        t0 = time.monotonic()
        os.kill(pid, 19)  # SIGSTOP
        until("a new daemon after the watchdog",
              lambda: main_pid() not in (0, pid) and prop("ActiveState") == "active")
        took = time.monotonic() - t0
        result = run("journalctl", "--no-pager", "-b", "-u", "homeagent.service").stdout
        ensure("Watchdog timeout" in result, "no watchdog timeout in the journal")
        ensure(int(prop("NRestarts")) == restarts + 1, f"NRestarts {prop('NRestarts')}")
        ask()
        return f"killed and restarted after {took:.0f} s (WatchdogSec=30), answered"

    @check("history written before the reboot")
    def _():
        out = run(HOMEAGENT, "ask", "--json", "remember the reboot").stdout
        session = next(json.loads(l)["session"] for l in out.splitlines()
                       if l.strip() and "session" in json.loads(l))
        save(session=session)
        return f"session {session}"

    journal_clean("first boot")
    save(phase=2)
    say("event reboot")
    run("systemctl", "reboot", ok=False)


def figures() -> None:
    @check("figures: RSS idle and after streamed answers, first delta socket vs direct")
    def _():
        pid = main_pid()
        idle = rss(pid)
        ready = state()["rss_at_ready"]
        out = run(f"{VENV}/bin/python", str(SHARE / "figures.py"), SOCKET,
                  f"http://127.0.0.1:{MOCK_PORT}/v1", KEY).stdout.strip()
        after = rss(pid)
        say(f"figure RSS of the daemon: {ready[0] / 1024:.1f} MiB at READY, idle after "
            f"the boards' asks {idle[0] / 1024:.1f} MiB, after 20 more streamed answers "
            f"{after[0] / 1024:.1f} MiB (peak {after[1] / 1024:.1f} MiB)")
        say(f"figure {out}")
        return f"idle {idle[0]} KiB, after {after[0]} KiB"


def rss(pid: int) -> tuple[int, int]:
    text = Path(f"/proc/{pid}/status").read_text()
    return (int(re.search(r"VmRSS:\s+(\d+)", text)[1]), int(re.search(r"VmHWM:\s+(\d+)", text)[1]))


def journal_clean(when: str) -> None:
    @check(f"journal: no EPERM, seccomp, denied line or API key ({when})")
    def _():
        every = run("journalctl", "--no-pager", "-b", "-o", "cat").stdout.splitlines()
        # the daemon, what systemd says of its units, the kernel and audit (seccomp)
        ours = run("journalctl", "--no-pager", "-b", "-o", "cat",
                   "_SYSTEMD_UNIT=homeagent.service", "+", "UNIT=homeagent.service", "+",
                   "UNIT=homeagent.socket", "+", "_TRANSPORT=kernel", "+",
                   "_TRANSPORT=audit").stdout.splitlines()
        bad = [l for l in ours if DENIED.search(l)]
        keyed = [l for l in every if KEY in l]
        ensure(not bad and not keyed, f"{len(bad)} denied, {len(keyed)} with the key: "
               f"{(bad + keyed)[:3]}")
        return f"{len(ours)} lines of the units and the kernel, {len(every)} in all: none"


# --------------------------------------------------------------- second boot

def second_boot() -> None:
    saved = state()

    @check("reboot: the socket listens again at boot")
    def _():
        until("homeagent.socket active", lambda: prop("ActiveState", "homeagent.socket") == "active")
        ensure(Path(SOCKET).is_socket(), f"{SOCKET} is not a socket")
        return f"{SOCKET} listening"

    start_mock()

    @check("reboot: the history written before it is there")
    def _():
        out = run(HOMEAGENT, "history", saved["session"], "--json").stdout
        ensure("remember the reboot" in out and ANSWER in out, out[:300])
        return f"session {saved['session']} kept"

    @check("upgrade: a newer wheel keeps config, credentials and history; the new code runs")
    def _():
        kept = {p: digest(p) for p in (CONFIG, CREDENTIALS)}
        pid = main_pid()
        run(HOMEAGENT, "install", "--wheel", str(SHARE / "upgrade" / VM["upgrade_wheel"]),
            "--find-links", str(SHARE / "wheels"))
        now = {p: digest(p) for p in (CONFIG, CREDENTIALS)}
        ensure(now == kept, "config or credentials changed")
        server = status()["server"]
        ensure(server == f"homeagent {VM['upgrade_version']}", f"running {server}")
        ensure(main_pid() != pid, "not restarted")
        out = run(HOMEAGENT, "history", saved["session"], "--json").stdout
        ensure("remember the reboot" in out, "history lost")
        ask()
        return f"running {server}"

    @check("uninstall removes the service and keeps config, credentials and history")
    def _():
        # a copy of the venv, put back at its own path for the --purge check
        # (a venv cannot move, but it can come back): pip under TCG is slow
        run("cp", "-a", VENV, VENV_COPY)
        run(HOMEAGENT, "uninstall")
        gone = ["/etc/systemd/system/homeagent.service", "/etc/systemd/system/homeagent.socket",
                "/etc/sysusers.d/homeagent.conf", "/etc/modules-load.d/homeagent.conf",
                "/usr/local/bin/homeagent", VENV, SOCKET]
        left = [p for p in gone if os.path.lexists(p)]
        ensure(not left, f"left: {left}")
        for p in (CONFIG, CREDENTIALS / "mock.key", STATE_DIR):
            ensure(p.exists(), f"removed {p}")
        ensure(run("id", "homeagent", ok=False).returncode == 0, "the user was removed")
        for unit in ("homeagent.service", "homeagent.socket"):
            ensure(prop("ActiveState", unit) == "inactive", f"{unit} still active")
        return "units, sysusers, modules-load.d, link, venv gone; config, key, state kept"

    @check("uninstall --purge removes config and state, and nothing else")
    def _():
        run("mv", VENV_COPY, VENV)
        run(HOMEAGENT, "install")
        run(HOMEAGENT, "uninstall", "--purge")
        for p in (CONFIG.parent, STATE_DIR):
            ensure(not p.exists(), f"kept {p}")
        accounts = re.compile(r"^/etc/(passwd|group|shadow|gshadow|subuid|subgid)-?$")
        now = files_under("/etc", "/opt", "/usr/local", "/var/lib")
        before = saved["before"]
        added = [p for p in now if p not in set(before) and not accounts.match(p)]
        removed = [p for p in before if p not in set(now) and not accounts.match(p)]
        # a standard directory that install created and may share with others
        # stays, empty: not a leftover of homeagent's
        empty = [p for p in added if p in SHARED_DIRECTORIES and not os.listdir(p)]
        added = [p for p in added if p not in empty]
        ensure(not added and not removed, f"added {added[:5]}, removed {removed[:5]}")
        return ("the tree is as before the install but for the accounts"
                + (f"; left empty: {', '.join(empty)}" if empty else ""))

    journal_clean("second boot: upgrade, uninstall")


def main() -> None:
    try:
        if state().get("phase") == 2:
            second_boot()
            say("done")
            run("systemctl", "poweroff", ok=False)
        else:
            first_boot()
    except Exception:
        say("fail run: " + " / ".join(traceback.format_exc().strip().splitlines()[-3:]))
        say("done")
        run("systemctl", "poweroff", ok=False)


if __name__ == "__main__":
    sys.exit(main())
