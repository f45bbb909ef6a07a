"""The timers' file: one small JSON document, written crash-safely, as the
session store writes a session (agent/session/store.py).

`<state_directory>/timers/timers.json` holds {"version": 1, "next_number",
"timers": [...]}. A write goes to `.timers.json.tmp-<pid>` (created
exclusively, so never through a link), is fsynced, renamed over the file,
and the directory is fsynced: a kill -9 or a power cut leaves the old file
or the new one, whole. The directory is opened once without following a
link, and every name is reached through that descriptor; the file is read
non-blocking without following a link (a FIFO or a link in its place is a
damaged file, never followed or waited on).

A file that does not read (not JSON, a wrong shape, over MAX_FILE_BYTES,
not a regular file) is moved aside to `timers.json.corrupt-<unix time>`,
logged with the reason, and the daemon starts with no timers. A directory
that cannot be used stops the start (TimerStoreError), as the sessions'
does: a timer the disk refuses must not be promised to anyone.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import stat
import time

from agent.tools.timers.schedule import KINDS, TIMER_ID, ScheduleError, Timer, check_label

log = logging.getLogger("homeagent.timers")

FILE = "timers.json"
FORMAT_VERSION = 1
MAX_FILE_BYTES = 64 * 1024  # 32 timers are about 8 KiB; more is not a file of ours
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FIELDS = {"id": str, "kind": str, "label": str, "due": float, "set_at": float,
           "board": (str, type(None)), "set_by": str}


class TimerStoreError(Exception):
    """The disk refused: str() names what was being done and the OS's reason."""

    def __init__(self, doing: str, exc: OSError) -> None:
        super().__init__(f"{doing}: {exc.strerror or exc}")


class TimerStore:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            self._dirfd = os.open(directory, _DIRECTORY_FLAGS)
        except OSError as exc:
            raise TimerStoreError(f"timer directory {directory}", exc) from None
        self._temp = f".{FILE}.tmp-{os.getpid()}"

    def close(self) -> None:
        os.close(self._dirfd)

    def load(self) -> tuple[list[Timer], int]:
        """The timers on disk and the next timer number; none when there is
        no file or it is damaged (then it is moved aside). What was read is
        written back at once: a directory the daemon cannot write to shows
        at start, not when a timer is set."""
        timers, next_number = self._read()
        self.save(timers, next_number)
        return timers, next_number

    def _read(self) -> tuple[list[Timer], int]:
        try:
            for name in os.listdir(self._dirfd):
                if name.startswith(f".{FILE}.tmp-"):  # a write a crash cut short
                    os.unlink(name, dir_fd=self._dirfd)
            fd = os.open(FILE, _READ_FLAGS, dir_fd=self._dirfd)
        except FileNotFoundError:
            return [], 1
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):  # a link, a socket
                self._set_aside(f"not a regular file ({exc.strerror})")
                return [], 1
            raise TimerStoreError(f"timer file {self.path}", exc) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError("not a regular file")
            with open(fd, "rb", closefd=False) as file:
                data = file.read(MAX_FILE_BYTES + 1)
            return parse(data)
        except (ValueError, RecursionError, OSError) as exc:
            self._set_aside(str(exc))
            return [], 1
        finally:
            os.close(fd)

    def save(self, timers: list[Timer], next_number: int) -> None:
        """Write them all, crash-safely; TimerStoreError if the disk refuses."""
        data = encode(timers, next_number)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._temp, dir_fd=self._dirfd)  # a leftover, never followed
            fd = os.open(self._temp, _WRITE_FLAGS, 0o600, dir_fd=self._dirfd)
            try:
                with open(fd, "wb") as file:
                    file.write(data)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(self._temp, FILE, src_dir_fd=self._dirfd, dst_dir_fd=self._dirfd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(self._temp, dir_fd=self._dirfd)
                raise
            os.fsync(self._dirfd)
        except OSError as exc:
            raise TimerStoreError("the timers were not written", exc) from None

    @property
    def path(self) -> str:
        return os.path.join(self.directory, FILE)

    def _set_aside(self, reason: str) -> None:
        aside = f"{FILE}.corrupt-{int(time.time())}"
        try:
            os.replace(FILE, aside, src_dir_fd=self._dirfd, dst_dir_fd=self._dirfd)
        except OSError as exc:
            log.error("timer file %s does not read (%s) and cannot be moved aside (%s); "
                      "starting with no timers", self.path, reason, exc.strerror)
            return
        log.error("timer file %s does not read (%s): moved aside to %s, starting with no "
                  "timers", self.path, reason, os.path.join(self.directory, aside))


def encode(timers: list[Timer], next_number: int) -> bytes:
    document = {"version": FORMAT_VERSION, "next_number": next_number,
                "timers": [{name: getattr(t, name) for name in _FIELDS} for t in timers]}
    return json.dumps(document, ensure_ascii=True, allow_nan=False, indent=1).encode("ascii")


def parse(data: bytes) -> tuple[list[Timer], int]:
    """The timers and next number of a file's bytes; ValueError says what is wrong."""
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"over {MAX_FILE_BYTES} bytes")
    document = json.loads(data, parse_constant=_no_constant)
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        raise ValueError("not a version 1 timer file")
    next_number, entries = document.get("next_number"), document.get("timers")
    if type(next_number) is not int or next_number < 1 or not isinstance(entries, list):
        raise ValueError("next_number or timers is missing or wrong")
    timers = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) != set(_FIELDS):
            raise ValueError(f"timer {index}: not a timer's fields")
        for name, kind in _FIELDS.items():
            value = entry[name]
            if kind is float and type(value) is int:
                entry[name] = value = float(value)
            if not isinstance(value, kind) or type(value) is bool \
                    or (kind is float and not math.isfinite(value)):
                raise ValueError(f"timer {index}: {name} is wrong")
        if entry["kind"] not in KINDS or not TIMER_ID.fullmatch(entry["id"]):
            raise ValueError(f"timer {index}: kind or id is wrong")
        try:  # it is spoken and shown: the checks of a label the model gives
            check_label(entry["label"])
        except ScheduleError as error:
            raise ValueError(f"timer {index}: {error}") from None
        timers.append(Timer(**entry))
    return timers, next_number


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number a timer has")
