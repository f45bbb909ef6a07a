"""The host side of toolchain/vm.sh: boot one image under qemu-system (TCG),
read the guest's check lines from the console, play the serial boards on
ptys with the daemon's own line protocol, hot-plug the USB adapter when the
guest asks, and kill qemu by its pid if the run outlasts the timeout.

    python host.py --arch ARCH --image DIR --share DIR --log FILE --timeout S

Prints one line per check, "ARCH pass|fail NAME: detail", and the figures;
exits 1 if any check failed or the run did not end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import tty

from agent.devices import serial_protocol as wire

BOARD_PROMPT = "What is the temperature in the living room?"
QMP_WAIT = 60.0
POWEROFF_WAIT = 180.0   # from the guest's "done" to qemu's exit


def qemu_command(arch: str, image: str, share: str, qmp: str) -> list[str]:
    # one vCPU: with two, a warm reboot under x86_64 TCG once hung the guest
    # (a soft lockup of CPU 1 in PID 1), and the guest's work is one Python
    # process at a time anyway
    common = ["-m", "1024", "-smp", "1", "-nographic", "-nic", "none", "-no-user-config",
              "-kernel", f"{image}/vmlinuz", "-initrd", f"{image}/initrd.img",
              "-drive", f"file={image}/root.img,if=virtio,format=raw,snapshot=on",
              "-virtfs", f"local,path={share},mount_tag=host0,security_model=none,id=host0",
              "-chardev", "stdio,id=con,signal=off", "-chardev", "pty,id=board",
              "-device", "qemu-xhci,id=xhci",
              "-qmp", f"unix:{qmp},server=on,wait=off", "-monitor", "none"]
    quiet = "loglevel=4 systemd.show_status=1 panic=-1"
    if arch == "x86_64":
        # ttyS0 the console, ttyS1 (the second 8250) a board: a platform UART
        return ["qemu-system-x86_64", "-accel", "tcg,thread=multi", *common,
                "-serial", "chardev:con", "-serial", "chardev:board",
                "-append", f"root=/dev/vda rw console=ttyS0 {quiet}"]
    # virt has one PL011 (ttyAMA0, the class of a Pi's UART): the board gets
    # it, the console is virtio (hvc0)
    return ["qemu-system-aarch64", "-M", "virt", "-cpu", "cortex-a72",
            "-accel", "tcg,thread=multi", *common,
            "-device", "virtio-serial-pci", "-device", "virtconsole,chardev=con",
            "-serial", "chardev:board",
            "-append", f"root=/dev/vda rw console=hvc0 {quiet}"]


class Qmp:
    """The QEMU Machine Protocol on a Unix socket: one command at a time."""

    def __init__(self, path: str) -> None:
        deadline = time.monotonic() + QMP_WAIT
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.file = self.sock.makefile("rb")
        self._read()  # the greeting
        self.execute("qmp_capabilities")

    def _read(self) -> dict:
        while True:
            message = json.loads(self.file.readline())
            if "event" not in message:
                return message

    def execute(self, command: str, **arguments) -> object:
        self.sock.sendall(json.dumps({"execute": command, "arguments": arguments}).encode())
        reply = self._read()
        if "error" in reply:
            raise RuntimeError(f"qmp {command}: {reply['error']}")
        return reply["return"]

    def pty_of(self, label: str) -> str:
        for chardev in self.execute("query-chardev"):
            if chardev["label"] == label:
                return chardev["filename"].removeprefix("pty:")
        raise RuntimeError(f"no chardev {label}")


class Board:
    """A board on a pty, as a microcontroller would be: it answers each HELLO
    with a PROMPT and collects the TEXT lines up to DONE."""

    def __init__(self, name: str, path: str) -> None:
        self.name = name
        self.fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
        tty.setraw(self.fd)   # no echo: the daemon must read only what the board sends
        self.hellos = 0
        self.exchanges: list[tuple[list[str], str]] = []   # (TEXT lines, DONE reason)
        self.errors: list[str] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        receiver = wire.Receiver(wire.parse_daemon_line, 4096)
        texts: list[str] = []
        while True:
            try:
                data = os.read(self.fd, 4096)
            except OSError:
                return
            if not data:
                return
            for message in receiver.feed(data):
                match message:
                    case wire.Hello():
                        self.hellos += 1
                        texts = []
                        os.write(self.fd, wire.encode(wire.Prompt(BOARD_PROMPT)))
                    case wire.Text(text):
                        texts.append(text)
                    case wire.Done(reason):
                        self.exchanges.append((texts, reason))
                        texts = []
                    case wire.Error(code, text):
                        self.errors.append(f"{code} {text}")

    def verdict(self) -> tuple[bool, str]:
        full = [(t, r) for t, r in self.exchanges if t]
        if not full:
            return False, (f"no answer reached the board: {self.hellos} HELLO, "
                           f"errors {self.errors[-2:]}")
        texts, reason = full[0]
        return True, (f"{self.hellos} HELLO (one PROMPT each), {len(full)} answers streamed "
                      f"to it (every ask's, the devices see them all); first: "
                      f"{len(texts)} TEXT lines {' '.join(texts)[:60]!r}..., DONE {reason}")


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("arch", "image", "share", "log"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--timeout", type=float, required=True)
    args = parser.parse_args()

    qmp_path = os.path.join(args.share, "..", f"qmp-{args.arch}.sock")
    if os.path.exists(qmp_path):
        os.unlink(qmp_path)
    t0 = time.monotonic()
    with open(args.log, "wb") as log:
        qemu = subprocess.Popen(qemu_command(args.arch, args.image, args.share, qmp_path),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=log)
        # killed by pid when the whole run outlasts the timeout
        timer = threading.Timer(args.timeout, os.kill, (qemu.pid, signal.SIGKILL))
        timer.start()
        passed = failed = 0
        boards: list[Board] = []
        done = None

        def result(ok: bool, text: str) -> None:
            nonlocal passed, failed
            passed, failed = passed + ok, failed + (not ok)
            print(f"{args.arch} {'pass' if ok else 'fail'} {text} "
                  f"[{time.monotonic() - t0:.0f} s]", flush=True)

        try:
            qmp = Qmp(qmp_path)
            uart = "ttyS1" if args.arch == "x86_64" else "ttyAMA0"
            boards.append(Board(f"a board on the platform UART {uart}", qmp.pty_of("board")))
            for raw in qemu.stdout:
                log.write(raw)
                log.flush()
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("@@vm "):
                    continue
                kind, _, rest = line[5:].partition(" ")
                if kind in ("pass", "fail"):
                    result(kind == "pass", rest)
                elif kind == "figure":
                    print(f"{args.arch} figure (emulated, TCG) {rest}", flush=True)
                elif line == "@@vm event plug-usb":
                    path = qmp.execute("chardev-add", id="usbpty",
                                       backend={"type": "pty", "data": {}})["pty"]
                    boards.append(Board("a USB serial adapter hot-plugged (usb-serial)", path))
                    qmp.execute("device_add", driver="usb-serial", chardev="usbpty",
                                id="usbser", bus="xhci.0")
                elif line == "@@vm done":
                    done = time.monotonic() - t0
                    break
        finally:
            if done is not None:
                try:
                    qemu.wait(POWEROFF_WAIT)
                except subprocess.TimeoutExpired:
                    os.kill(qemu.pid, signal.SIGKILL)
            else:
                os.kill(qemu.pid, signal.SIGKILL)
            qemu.wait()
            timer.cancel()
    for board in boards:
        ok, detail = board.verdict()
        result(ok, f"host: {board.name}: {detail}")
    if done is None:
        result(False, f"run: the guest did not finish (see {args.log}); "
                      f"qemu ended after {time.monotonic() - t0:.0f} s")
    else:
        print(f"{args.arch} run: {done:.0f} s from qemu start to the guest's last check, "
              f"{time.monotonic() - t0:.0f} s to qemu's exit", flush=True)
    print(f"{args.arch}: {passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
