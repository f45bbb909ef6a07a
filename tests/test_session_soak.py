"""Hardening item 13: a daemon that answers for months holds a bounded
memory. Each `homeagent ask` without --session makes a new session; before
the store kept every history in memory for the daemon's life, so its RSS grew
with every answer and never came back down.

The soak: a real `homeagent serve` against `homeagent mock-llm`, the
[sessions] defaults (memory_sessions 16, memory_bytes 1 MiB, unnamed_keep
64), asks without a session, each with a prompt of PROMPT_BYTES. The warm-up
fills everything the bounds allow (more asks than unnamed_keep, so the
directory, the index and the in-memory histories are all at their bound);
after it, MORE asks must not grow VmRSS by more than GROWTH_LIMIT_KIB.

The figure: at their bound the in-memory histories are at most memory_bytes
of files, and the warm-up filled them; the index holds unnamed_keep small
entries. A steady state has nothing left to grow, so the limit is one
memory_bytes (the in-memory histories could at worst be held twice while
the allocator reuses their pages) plus one more for the allocator's own
slack: 2 MiB. Without the bound the MORE asks' histories (each holding its
prompt: 160 x 32 KiB = 5 MiB of text alone) stay resident and the growth is
several times that limit.
"""

from __future__ import annotations

import os

from conftest import EMULATED, timeout
from daemon_harness import Daemon, ask_text

MEMORY_BYTES = 1 << 20   # the [sessions] default memory_bytes
UNNAMED_KEEP = 64        # the [sessions] default unnamed_keep
PROMPT_BYTES = 32 * 1024
WARM_UP = UNNAMED_KEEP + 16
MORE = 160
GROWTH_LIMIT_KIB = 2 * MEMORY_BYTES // 1024
# As in test_daemon_load.py: freed memory goes back to the system at once,
# so RSS measures what is held, not what the allocator keeps for later.
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "4096"}


def _ask(daemon: Daemon, n: int) -> str:
    prompt = f"note {n}: " + "the hallway light stays as it is. " * (PROMPT_BYTES // 34)
    with daemon.client(wait=timeout(30)) as client:
        text, replies = ask_text(client, prompt)
    done = replies[-1]
    assert done["type"] == "done" and done["kept"] is True, done
    return done["session"]


def test_unnamed_asks_hold_rss_flat_and_the_directory_bounded(tmp_path, mock):
    """The daemon's VmRSS after WARM_UP asks and after MORE: growth bounded
    by GROWTH_LIMIT_KIB (host only: under qemu-user RSS is qemu's too, see
    test_daemon_load.py); the session files of unnamed asks at most
    unnamed_keep, the newest kept."""
    daemon = Daemon(tmp_path, mock.url, env=ALLOCATOR).start()
    try:
        for n in range(WARM_UP):
            _ask(daemon, n)
        warm = daemon.rss_kib()
        sessions = [_ask(daemon, WARM_UP + n) for n in range(MORE)]
        after = daemon.rss_kib()
        if not EMULATED:
            assert after - warm < GROWTH_LIMIT_KIB, \
                f"VmRSS {warm} KiB after {WARM_UP} asks, {after} KiB after {MORE} more: " \
                f"+{after - warm} KiB, over {GROWTH_LIMIT_KIB} KiB"
        files = sorted(os.listdir(tmp_path / "state" / "sessions"))
        assert len(files) == UNNAMED_KEEP, files
        assert sessions[-1] + ".json" in files
        assert sessions[-UNNAMED_KEEP] + ".json" in files
        assert sessions[-UNNAMED_KEEP - 1] + ".json" not in files
        with daemon.client() as client:
            listed = client.call("sessions")["sessions"]
            assert len(listed) == UNNAMED_KEEP
            # an older session still in the directory but long out of memory
            # is read from its file when it is asked for
            history = client.call("history", session=sessions[-UNNAMED_KEEP])
            assert [t["role"] for t in history["turns"]] == ["user", "assistant"], history
    finally:
        status = daemon.stop()
    assert status == 0, daemon.log()[-4000:]
