"""The disk under the daemon fails, for real: a small tmpfs filled until
writes fail with ENOSPC, the same tmpfs remounted read-only (EROFS), a
directory where a session file goes, a FIFO and a NaN among the session
files at start. The answer always reaches the client; done says whether it
was kept; the daemon never calls the disk's failure its own bug."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.mock_llm import scripts
from agent.session.store import SessionStore, StorageError
from daemon_harness import Daemon, ask_text

ANSWER = scripts.ENGLISH


def _strict(line: str):
    """json.loads that refuses NaN and Infinity, as a client's parser may."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(line, parse_constant=refuse)


@pytest.fixture
def tmpfs(tmp_path):
    """A 1 MiB tmpfs at tmp_path/state; skipped (with the reason) when it
    cannot be mounted: not root, or no mount permission in this container."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "state"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs",
                              str(where)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=True)


def _fill(directory: Path) -> Path:
    """Write a file until the filesystem is full: the file, to free it later."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:  # nothing left to flush at close
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def _remount(where: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(where)], check=True)


def _not_kept(done: dict, reason: str) -> None:
    assert done["type"] == "done" and done["kept"] is False, done
    assert done["error"]["code"] == "storage_error", done
    assert reason in done["error"]["message"] and "not kept" in done["error"]["message"], done


def test_a_full_disk_still_delivers_the_answer_and_says_it_was_not_kept(tmp_path, tmpfs, mock):
    daemon = Daemon(tmp_path, mock.url, daemon={"state_directory": str(tmpfs)}).start()
    try:
        filler = _fill(tmpfs)
        with daemon.client() as client:
            text, replies = ask_text(client, "hello", session="full")
            assert text == ANSWER == replies[-1]["text"]
            _not_kept(replies[-1], "No space left on device")
            # stream: false: no deltas, and done.text is the whole answer
            _, replies = ask_text(client, "hello", session="full", stream=False)
            assert replies[-1]["text"] == ANSWER
            _not_kept(replies[-1], "No space left on device")
            [history] = client.request("history", session="full")
            assert history["turns"] == []  # as it was before the asks
            filler.unlink()  # space again: the next answer is kept
            _, replies = ask_text(client, "hello", session="full")
            assert replies[-1]["kept"] is True and "error" not in replies[-1]
            [history] = client.request("history", session="full")
            assert [t["role"] for t in history["turns"]] == ["user", "assistant"]
        assert "the disk refused the answer" in daemon.log()
        assert "Traceback" not in daemon.log()
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_a_read_only_disk_still_delivers_the_answer_and_forget_names_it(tmp_path, tmpfs, mock):
    daemon = Daemon(tmp_path, mock.url, daemon={"state_directory": str(tmpfs)}).start()
    try:
        with daemon.client() as client:
            ask_text(client, "hello", session="kept")
            _remount(tmpfs, "ro")
            text, replies = ask_text(client, "hello", session="kept")
            assert text == ANSWER
            _not_kept(replies[-1], "Read-only file system")
            [reply] = client.request("forget", session="kept")
            assert reply["type"] == "error" and reply["code"] == "storage_error", reply
            assert "Read-only file system" in reply["message"], reply
            [history] = client.request("history", session="kept")
            assert len(history["turns"]) == 2  # forget failed: nothing is lost
        assert "Traceback" not in daemon.log()
    finally:
        _remount(tmpfs, "rw")
        assert daemon.stop() == 0, daemon.log()


def _start_refused(daemon: Daemon, reason: str, argv_prefix: list[str] | None = None) -> None:
    """The daemon exits 1 at start naming the unusable state directory and
    reason, without a traceback."""
    daemon.start(wait=False, argv_prefix=argv_prefix)
    assert daemon.exited() == 1
    log = daemon.log()
    assert "cannot start: the state directory is not usable: session directory " in log, log
    assert reason in log and "Traceback" not in log, log


def test_a_read_only_state_directory_stops_the_start_with_a_clear_line(tmp_path, tmpfs, mock):
    _remount(tmpfs, "ro")
    try:
        _start_refused(Daemon(tmp_path, mock.url, daemon={"state_directory": str(tmpfs)}),
                       "Read-only file system")
    finally:
        _remount(tmpfs, "rw")


def test_a_full_state_disk_fails_the_store_probe(tmpfs):
    """The probe at open writes real bytes: an empty file would still be
    created on a disk with no block left."""
    (tmpfs / "sessions").mkdir()
    _fill(tmpfs)
    with pytest.raises(StorageError, match=r"^session directory .*: No space left on device$"):
        SessionStore(str(tmpfs / "sessions"), max_turns=10, max_bytes=10**6)
    assert os.listdir(tmpfs / "sessions") == []  # no probe file left


def test_a_full_state_disk_stops_the_start_with_a_clear_line(tmp_path, tmpfs, mock):
    _fill(tmpfs)
    _start_refused(Daemon(tmp_path, mock.url, daemon={"state_directory": str(tmpfs)}),
                   "No space left on device")


def test_a_directory_in_place_of_the_session_file_is_a_storage_error(tmp_path, mock):
    daemon = Daemon(tmp_path, mock.url).start()
    try:
        with daemon.client() as client:
            ask_text(client, "hello", session="kitchen")
            session_file = tmp_path / "state" / "sessions" / "kitchen.json"
            session_file.unlink()
            session_file.mkdir()
            text, replies = ask_text(client, "hello", session="kitchen")
            assert text == ANSWER
            _not_kept(replies[-1], "Is a directory")
            after, replies = ask_text(client, "hello", session="other")
            assert after == ANSWER and replies[-1]["kept"] is True
        assert "Traceback" not in daemon.log()
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_a_fifo_a_directory_and_a_nan_among_the_session_files_are_set_aside(tmp_path, mock):
    sessions = tmp_path / "state" / "sessions"
    sessions.mkdir(parents=True)
    os.mkfifo(sessions / "x.json")  # opened blocking, it would hang the start forever
    (sessions / "d.json").mkdir()
    (sessions / "nan.json").write_bytes(
        b'{"version": 1, "id": "nan", "updated": NaN, "turns": []}')
    (sessions / "good.json").write_bytes(
        b'{"version": 1, "id": "good", "updated": 1, "turns": []}')
    daemon = Daemon(tmp_path, mock.url).start()  # reaches READY=1
    try:
        with daemon.client() as client:
            [line] = client.request("sessions")
        assert [s["id"] for s in line["sessions"]] == ["good"]
        raw = daemon.raw()
        try:
            raw.send(b'{"id": 1, "op": "sessions"}\n')
            line = b""
            while not line.endswith(b"\n"):
                line += raw.sock.recv(65536)
            assert _strict(line.decode())["sessions"][0]["id"] == "good"
        finally:
            raw.close()
        names = sorted(os.listdir(sessions))
        for name in ("x.json", "d.json", "nan.json"):
            assert name not in names and any(n.startswith(name + ".corrupt-") for n in names)
        log = daemon.log()
        assert "x.json does not read (not a regular file)" in log, log
        assert "nan.json does not read (invalid JSON: syntax" in log, log
    finally:
        assert daemon.stop() == 0, daemon.log()


def _obeying_permissions() -> list[str]:
    """The argv prefix that makes the daemon obey file modes: as root, drop
    the capabilities that override them; as any other user, nothing."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("root ignores file modes, and setpriv (to drop that) is not installed")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


def test_a_state_directory_without_write_permission_is_eacces(tmp_path, mock):
    prefix = _obeying_permissions()
    sessions = tmp_path / "state" / "sessions"
    daemon = Daemon(tmp_path, mock.url).start(argv_prefix=prefix)
    try:
        sessions.chmod(0o500)
        with daemon.client() as client:
            text, replies = ask_text(client, "hello", session="locked")
        assert text == ANSWER
        _not_kept(replies[-1], "Permission denied")
    finally:
        sessions.chmod(0o700)
        assert daemon.stop() == 0, daemon.log()
    sessions.chmod(0o500)  # and at start: a clear line, no traceback
    try:
        _start_refused(Daemon(tmp_path, mock.url), "Permission denied", prefix)
    finally:
        sessions.chmod(0o700)
