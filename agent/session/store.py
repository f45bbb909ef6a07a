"""The session history store: one JSON file per session, written crash-safely.

Names in the directory:
- `<id>.json`: a session, {"version": 1, "id", "updated", "turns": [...]},
  one turn a line so that a person can read it.
- `.<id>.json.tmp-<pid>`: a write in progress. Only a crash leaves one, so
  they are removed at startup; the leading dot keeps them apart from session
  files, since no id starts with a dot.
- `<id>.json.corrupt-<unix time>`: a session file that did not read at
  startup, or is not a regular file (a directory, a FIFO, a symlink), moved
  aside for a person to look at; that session starts empty. Files are opened
  non-blocking and without following links, so a FIFO cannot hang startup.
  They are parsed by the strict scanner (agent/stream/jsonscan.py): a NaN or
  an Infinity is a corrupt file, never a value a reply would have to carry.

Every session file is read when the store opens: a corrupt one shows at
startup rather than in the middle of an answer. What stays in memory is
bounded (Retention, the [sessions] config): an index of every session on
disk (its size, turn count and update time, so sessions() reads nothing),
and the turns of the most recently used sessions only, at most
memory_sessions of them and memory_bytes of their files together. Any other
session is read from its file when it is asked for (load), and becomes the
most recently used. One store owns its directory: files put there later are
not seen, and a file the index names is the one this store wrote.

Unnamed sessions, the ones the daemon names itself (UNNAMED: `s-<12 hex>` for
an ask without a session, `mqtt-<16 hex>` and `wyoming-<16 hex>` for the
doors' asks; Wyoming names a conversation by a hash of the same shape, and
Home Assistant's conversations are short-lived too), are capped on disk: at
most unnamed_keep of them, the least recently updated removed first, and
none older than unnamed_max_age seconds. They are pruned at startup and
after each commit, so a daemon that answers for months keeps a bounded
directory and a bounded index.

A write goes to a temporary file in the same directory, is fsynced, replaces
the session file by rename and the directory is fsynced: a kill (or a power
cut) at any instant leaves either the old or the new file, complete.

No link is followed: the directory is opened once, without following a
symlink in its place, and every name in it is reached through that
descriptor (a directory renamed or replaced by a link later is not
followed either). A temporary file is created exclusively (O_EXCL never
follows a link): whatever sits at its name is not a write in progress, since
the calls for one session are serialised, and is unlinked first. A link in
place of a session file is replaced by the rename, its target untouched.

The disk can fail (ENOSPC, EROFS, EACCES, EMFILE, a directory where a
session file should be): every OSError of the store is raised as a
StorageError naming the operation and the OS's reason, with memory left as
it was before the call. Opening writes and fsyncs a probe file of real
bytes, so an unusable state directory (read-only, full, not writable) stops
the daemon at start rather than at the first answer.

Not thread-safe: the caller serialises every call (the runner holds one
lock around them); they may run in different threads, one at a time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import stat
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass

from agent.jsontypes import is_type
from agent.providers.requests import AssistantTurn, UserTurn
from agent.session.codec import turn_from_json, turn_to_json
from agent.stream.jsonscan import FLAG_BAD_UTF8, FLAG_LONE_SURROGATE, loads_flagged

SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # fullmatch; ids become file names
# fullmatch: the ids the daemon gives itself (agent/session/runner.py, the MQTT
# and Wyoming doors), whose sessions are capped and expire (Retention)
UNNAMED = re.compile(r"s-[0-9a-f]{12}|mqtt-[0-9a-f]{16}|wyoming-[0-9a-f]{16}")
FORMAT_VERSION = 1

log = logging.getLogger("homeagent.session")

_TEMP = re.compile(rf"\.(?:{SESSION_ID.pattern})\.json\.tmp-\d+")
_SUFFIX = ".json"
_SEPARATOR = b",\n"
_TAIL = b"\n]}\n"
_PROBE = "probe"  # a session id: its write test is a temporary file _TEMP matches
_PROBE_BYTES = b"\n" * 4096  # a page: a full disk refuses it, as it would a session
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


class StorageError(Exception):
    """The disk refused: str() names what was being done and the OS's reason."""

    def __init__(self, doing: str, exc: OSError) -> None:
        super().__init__(f"{doing}: {exc.strerror or exc}")
        self.errno = exc.errno


class TooLargeToKeep(Exception):
    """An exchange that alone, trimmed to its prompt and last step, is over
    max_bytes: not kept, and the session is left as it was."""


@dataclass(frozen=True, slots=True)
class Retention:
    """What the store holds ([sessions] config): the turns of at most
    memory_sessions sessions in memory and memory_bytes of their files
    together (the most recently used; the others are read when asked for);
    at most unnamed_keep unnamed sessions on disk, none older than
    unnamed_max_age seconds (0: no age limit)."""
    memory_sessions: int = 16
    memory_bytes: int = 1 << 20
    unnamed_keep: int = 64
    unnamed_max_age: float = 7 * 86400.0

    def __post_init__(self) -> None:
        if self.memory_sessions < 1 or self.memory_bytes < 1 or self.unnamed_keep < 1 \
                or not self.unnamed_max_age >= 0:
            raise ValueError("memory_sessions, memory_bytes and unnamed_keep must be positive, "
                             "unnamed_max_age not negative")


@dataclass(slots=True)
class _Entry:
    """A session on disk, as the index knows it."""
    turns: int  # how many
    size: int  # bytes of its file
    updated: float


class SessionStore:
    def __init__(self, directory: str, *, max_turns: int, max_bytes: int,
                 retention: Retention = Retention()) -> None:
        self.set_limits(max_turns=max_turns, max_bytes=max_bytes)
        self.retention = retention
        self.directory = directory
        self._index: dict[str, _Entry] = {}  # every session on disk
        # the turns and file size of the most recently used sessions, least recent first
        self._cache: OrderedDict[str, tuple[list, int]] = OrderedDict()
        self._cached_bytes = 0  # their files' sizes together
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            self._dirfd = os.open(directory, _DIRECTORY_FLAGS)
        except OSError as exc:
            if os.path.islink(directory):
                raise StorageError(f"session directory {directory} is a symbolic link, "
                                   "not followed", exc) from exc
            raise StorageError(f"session directory {directory}", exc) from exc
        weakref.finalize(self, os.close, self._dirfd)
        try:
            names = sorted(os.listdir(self._dirfd))
            for name in names:
                if _TEMP.fullmatch(name):
                    os.unlink(name, dir_fd=self._dirfd)
            # a read-only, full or unwritable disk shows now
            os.unlink(self._write_temp(_PROBE, _PROBE_BYTES), dir_fd=self._dirfd)
        except OSError as exc:
            raise StorageError(f"session directory {directory}", exc) from exc
        read = []
        for name in names:
            if name.endswith(_SUFFIX) and SESSION_ID.fullmatch(name[:-len(_SUFFIX)]):
                session_id = name[:-len(_SUFFIX)]
                turns = self._read(session_id)
                if turns is not None:
                    read.append((self._index[session_id].updated, session_id, turns))
        self._prune(time.time())
        # The most recently updated stay in memory, as far as the bounds allow.
        for _, session_id, turns in sorted(read):
            if session_id in self._index:
                self._remember(session_id, turns)

    def set_retention(self, retention: Retention) -> None:
        """New bounds (a config reload): memory meets them at once, the
        directory at the next commit."""
        self.retention = retention
        self._evict()

    def set_limits(self, *, max_turns: int, max_bytes: int) -> None:
        """New limits (a config reload); a session meets them at its next commit."""
        if max_turns < 1 or max_bytes < 1:
            raise ValueError("max_turns and max_bytes must be positive")
        self.max_turns, self.max_bytes = max_turns, max_bytes

    def load(self, session_id: str) -> list:
        """The session's turns (a new list); [] for a session never committed
        (or forgotten, or expired). Reads its file when it is not in memory:
        a file that no longer reads is moved aside and the session starts
        empty, as at startup."""
        turns = self.cached(session_id)
        if turns is not None:
            return turns
        turns = self._read(session_id)
        if turns is None:
            return []
        self._remember(session_id, turns)
        return list(turns)

    def cached(self, session_id: str) -> list | None:
        """load() without the disk: the turns when they are in memory (or
        there are none), None when only load() can read them."""
        cached = self._cache.get(check_session_id(session_id))
        if cached is not None:
            self._cache.move_to_end(session_id)
            return list(cached[0])
        return None if session_id in self._index else []

    def in_memory(self) -> tuple[int, int]:
        """The sessions whose turns are in memory, and their files' bytes."""
        return len(self._cache), self._cached_bytes

    def commit(self, session_id: str, new_turns: list) -> list:
        """Append the turns of one finished exchange, trim to the limits and
        write the file; returns the turns trimmed away, oldest first. Raises
        TooLargeToKeep, changing nothing, when the exchange cannot fit."""
        turns = self.load(session_id) + list(new_turns)
        # ASCII JSON: a lone surrogate (a client may send "\ud800") still encodes.
        encoded = [_ENCODER.encode(turn_to_json(turn)).encode("ascii") for turn in turns]
        updated = time.time()
        # The id needs no JSON escaping, and a float's repr is a JSON number.
        head = (f'{{"version":{FORMAT_VERSION},"id":"{session_id}",'
                f'"updated":{updated!r},"turns":[\n').encode("ascii")
        first = self._first_kept(turns, encoded, len(head) + len(_TAIL))
        kept = [first + i for i in self._fit_newest(turns[first:], encoded[first:],
                                                     len(head) + len(_TAIL))]
        data = head + _SEPARATOR.join(encoded[i] for i in kept) + _TAIL
        if len(data) > self.max_bytes:
            raise TooLargeToKeep(
                f"the exchange is {len(data)} bytes even with only its prompt and its last "
                f"step, over sessions.max_bytes ({self.max_bytes}); the session is as before")
        if len(kept) < len(turns) - first:
            log.warning("an exchange over max_bytes (%d): %d of its turns, its earliest tool "
                        "steps, are not kept", self.max_bytes, len(turns) - first - len(kept))
        try:
            self._write(session_id, data)
        except OSError as exc:
            raise StorageError(f"session {session_id!r} was not written", exc) from exc
        self._forget_cached(session_id)
        self._index[session_id] = _Entry(len(kept), len(data), updated)
        self._remember(session_id, [turns[i] for i in kept])
        self._prune(updated)
        return turns[:first]

    def forget(self, session_id: str) -> bool:
        """Delete the session from memory and disk; False if there is none."""
        if check_session_id(session_id) not in self._index:
            return False
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(session_id + _SUFFIX, dir_fd=self._dirfd)
            self._sync_directory()
        except OSError as exc:
            raise StorageError(f"session {session_id!r} was not deleted", exc) from exc
        del self._index[session_id]
        self._forget_cached(session_id)
        return True

    def sessions(self) -> list[dict]:
        return [{"id": session_id, "turns": e.turns, "bytes": e.size, "updated": e.updated}
                for session_id, e in sorted(self._index.items())]

    def _remember(self, session_id: str, turns: list) -> None:
        """Keep a session's turns in memory as the most recently used."""
        self._forget_cached(session_id)
        size = self._index[session_id].size
        self._cache[session_id] = (turns, size)
        self._cached_bytes += size
        self._evict()

    def _forget_cached(self, session_id: str) -> None:
        cached = self._cache.pop(session_id, None)
        if cached is not None:
            self._cached_bytes -= cached[1]

    def _evict(self) -> None:
        """The least recently used leave memory (their files stay) until the
        bounds hold; the most recent stays even alone over memory_bytes."""
        retention = self.retention
        while len(self._cache) > 1 and (len(self._cache) > retention.memory_sessions
                                        or self._cached_bytes > retention.memory_bytes):
            self._forget_cached(next(iter(self._cache)))

    def _prune(self, now: float) -> None:
        """Remove the unnamed sessions past unnamed_keep (the least recently
        updated) or older than unnamed_max_age. A file the disk will not let
        go is logged and stays in the index, to be tried again."""
        retention = self.retention
        unnamed = sorted((e.updated, session_id) for session_id, e in self._index.items()
                         if UNNAMED.fullmatch(session_id))
        excess = len(unnamed) - retention.unnamed_keep
        expired = [session_id for i, (updated, session_id) in enumerate(unnamed)
                   if i < excess or (retention.unnamed_max_age
                                     and updated < now - retention.unnamed_max_age)]
        if not expired:
            return
        removed = []
        for session_id in expired:
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(session_id + _SUFFIX, dir_fd=self._dirfd)
            except OSError as exc:
                log.error("unnamed session %s was not removed: %s", session_id,
                          exc.strerror or exc)
                continue
            self._forget_cached(session_id)
            del self._index[session_id]
            removed.append(session_id)
        if removed:
            with contextlib.suppress(OSError):
                self._sync_directory()  # a removal lost to a crash is redone at startup
            log.info("removed %d unnamed sessions (over sessions.unnamed_keep %d or older "
                     "than sessions.unnamed_max_age %gs)", len(removed),
                     retention.unnamed_keep, retention.unnamed_max_age)

    def _first_kept(self, turns: list, encoded: list[bytes], overhead: int) -> int:
        """Index of the first turn to keep. Whole exchanges (a user turn up to
        the next) go, oldest first, so that no tool result loses its call;
        turns before the first user turn go first as one unit; the newest
        exchange always stays."""
        first = 0
        size = overhead + sum(len(e) + len(_SEPARATOR) for e in encoded) - len(_SEPARATOR)
        for start in (i for i in range(1, len(turns)) if isinstance(turns[i], UserTurn)):
            if len(turns) - first <= self.max_turns and size <= self.max_bytes:
                break
            size -= sum(len(e) + len(_SEPARATOR) for e in encoded[first:start])
            first = start
        return first

    def _fit_newest(self, turns: list, encoded: list[bytes], overhead: int) -> list[int]:
        """Indexes (into turns) of what is kept once older exchanges are
        trimmed. When the newest exchange alone is over max_bytes, its tool
        steps (an assistant turn and its tool results) go, oldest first, down
        to its prompt and its last step (commit refuses what is still over),
        so that the turns left alternate as every provider needs."""
        kept = list(range(len(turns)))

        def size() -> int:
            return overhead + sum(len(encoded[i]) + len(_SEPARATOR) for i in kept)

        if size() - len(_SEPARATOR) <= self.max_bytes:
            return kept
        start = next((i for i in reversed(range(len(turns))) if isinstance(turns[i], UserTurn)),
                     0)
        steps = [i for i in range(start, len(turns)) if isinstance(turns[i], AssistantTurn)]
        for step, following in zip(steps, steps[1:]):
            if size() - len(_SEPARATOR) <= self.max_bytes:
                break
            kept = [i for i in kept if not step <= i < following]
        return kept

    def _read(self, session_id: str) -> list | None:
        """A session file's turns, the index told of it; None when there is
        none or it does not read (then it is moved aside, out of the index)."""
        name = session_id + _SUFFIX
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self._dirfd)  # a symlink fails with ELOOP
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise ValueError("not a regular file")
                with open(fd, "rb", closefd=False) as f:
                    data = f.read()
            finally:
                os.close(fd)
            turns, updated = _parse(session_id, data)
        # JSON and UTF-8 errors are ValueErrors; nesting too deep is a RecursionError.
        except FileNotFoundError:
            self._forget_cached(session_id)
            self._index.pop(session_id, None)
            return None
        except (OSError, ValueError, RecursionError) as exc:
            self._set_aside(name, exc)
            self._forget_cached(session_id)
            self._index.pop(session_id, None)
            return None
        self._index[session_id] = _Entry(len(turns), len(data), updated)
        return turns

    def _set_aside(self, name: str, reason: Exception) -> None:
        path = os.path.join(self.directory, name)
        aside = f"{path}.corrupt-{int(time.time())}"
        try:
            os.replace(name, os.path.basename(aside),
                       src_dir_fd=self._dirfd, dst_dir_fd=self._dirfd)
        except OSError as exc:
            log.error("session file %s does not read (%s) and cannot be moved aside (%s); "
                      "the session starts empty", path, reason, exc)
            return
        log.error("session file %s does not read (%s): moved aside to %s, "
                  "the session starts empty", path, reason, aside)

    def _write(self, session_id: str, data: bytes) -> None:
        temp = self._write_temp(session_id, data)
        try:
            os.replace(temp, session_id + _SUFFIX, src_dir_fd=self._dirfd,
                       dst_dir_fd=self._dirfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=self._dirfd)
            raise
        self._sync_directory()

    def _write_temp(self, session_id: str, data: bytes) -> str:
        """data in a fsynced temporary file of the session: its name."""
        temp = f".{session_id}{_SUFFIX}.tmp-{os.getpid()}"
        try:
            fd = os.open(temp, _WRITE_FLAGS, 0o600, dir_fd=self._dirfd)
        except FileExistsError:
            # not a write in progress (one session's calls are serialised): a
            # leftover or a planted link, removed (never followed)
            os.unlink(temp, dir_fd=self._dirfd)
            fd = os.open(temp, _WRITE_FLAGS, 0o600, dir_fd=self._dirfd)
        try:
            with open(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=self._dirfd)
            raise
        return temp

    def _sync_directory(self) -> None:
        """Make a rename or unlink in the directory durable."""
        os.fsync(self._dirfd)


def check_session_id(session_id: str) -> str:
    """The id itself when it can name a session file; ValueError says why not."""
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        raise ValueError(f"bad session id {session_id!r}: 1 to 64 letters, digits, '.', '_' "
                         "or '-', not starting with '.', '_' or '-'")
    return session_id


def _parse(session_id: str, data: bytes) -> tuple[list, float]:
    """The turns and update time of a session file; ValueError says what is wrong."""
    doc, flags = loads_flagged(data)
    if flags & FLAG_BAD_UTF8:
        raise ValueError("not UTF-8")
    if flags & FLAG_LONE_SURROGATE:
        # Valid strict JSON; only Python's parser keeps an escaped lone
        # surrogate (a client's "\ud800") as it was committed.
        doc = json.loads(data)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    if doc.get("version") != FORMAT_VERSION:
        raise ValueError(f"unknown version {doc.get('version')!r}")
    if doc.get("id") != session_id:
        raise ValueError(f"names session {doc.get('id')!r}")
    updated, turns = doc.get("updated"), doc.get("turns")
    if not is_type(updated, (int, float)):
        raise ValueError("'updated' is not a number")
    # The scanner keeps integers beyond int64 exact: one may be beyond a float too.
    if not (isinstance(updated, float) or abs(updated) < 2 ** 53) or not math.isfinite(updated):
        raise ValueError("'updated' is out of range")
    if not isinstance(turns, list):
        raise ValueError("'turns' is not an array")
    decoded = []
    for i, obj in enumerate(turns):
        try:
            decoded.append(turn_from_json(obj))
        except ValueError as exc:
            raise ValueError(f"turn {i}: {exc}") from None
    return decoded, float(updated)
