"""Load: 50 concurrent streaming clients against one daemon and the mock
model server, in waves. Every client must get exactly its own answer on its
own session, the daemon must hold no ask or connection after a wave, and, on
the host, its resident memory must not climb from wave to wave.

Bounded: 50 clients a wave, a warm-up wave and WAVES measured waves, every
wait a timeout; about 3 s on the host, 15 s emulated. No timing is asserted."""

from __future__ import annotations

import json
import threading
import time

from agent.mock_llm import scripts
from conftest import EMULATED, timeout
from daemon_harness import Daemon

CLIENTS = 50
# Measured waves after the warm-up one. Emulated (about 10x slower), fewer
# waves, never fewer clients.
WAVES = 2 if EMULATED else 3
# x-mock-delay-ms: the mock waits this long before each part of an answer but
# the first, so an answer of ~20 parts takes ~60 ms and the 50 streams overlap.
PACED = {"headers": {"x-mock-delay-ms": "3"}}

# Memory. The daemon's RSS after the warm-up wave and after each later one;
# the growth must stay under RSS_GROWTH_LIMIT_KIB. The daemon of this test
# runs with glibc's mmap threshold fixed at 4 KiB (MALLOC_MMAP_THRESHOLD_,
# see mallopt(3)): every block of 4 KiB or more is its own mapping and goes
# back to the kernel when freed, so RSS follows the memory in use instead of
# where the heap's top happens to end. Why, from runs on the 2-core x86_64
# development machine (1 warm-up + 3 waves of 50 unless said otherwise):
#   - glibc's defaults: each ask holds ~330 KiB of stream-decoder buffers while
#     it streams (64 KiB SSE buffer, 196 KiB text area, 65 KiB raw area),
#     ~16 MiB for 50 at once, and the heap gives memory back only from its
#     top. RSS after a wave was 0.1-15.4 MiB above the warm-up's (18 runs),
#     up and down, while tracemalloc inside the daemon showed Python memory
#     flat: the allocator's steps, not a leak.
#   - with the 4 KiB threshold: 0.05-0.93 MiB (15 runs; 3 runs of 6 waves
#     stayed under 0.82 MiB). Emulated (qemu-user, 2 waves): 1.1-1.7 MiB
#     (3 runs), and once 3.2 MiB, which failed the bound.
#   - a leak, patched into the daemon through sitecustomize for the
#     measurement only: keeping every ask's decoder alive grew RSS by
#     ~1.9 MiB a wave, 5.1-6.0 MiB over 3 waves (only the touched pages of
#     its buffers count now), and failed this test; keeping every reply
#     dict (~25 per ask) grew it by ~0.4 MiB a wave, 1.0-1.4 MiB over 3,
#     which passes: below this check's resolution.
# 3 MiB is 3x the largest growth seen on the host; it is broken by any
# per-ask leak of >= ~20 KiB resident (3 MiB / 150 asks). Smaller leaks are
# left to the status check (no ask or connection left behind) and to the
# tests of the parts.
# A host-only check: the test's docstring says why.
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "4096"}
RSS_GROWTH_LIMIT_KIB = 3 * 1024

# One prompt per script; client i asks PROMPTS[i % 4].
PROMPTS = [
    ("How warm is the living room right now?", scripts.ENGLISH),
    ("客厅现在多少度？", scripts.CHINESE),
    ("Wie warm ist es im Wohnzimmer? Bitte auf Deutsch.", scripts.GERMAN),
    ("Say good night with emoji.", scripts.EMOJI),
]


def test_each_prompt_gets_its_own_script():
    """The test's own premise: four prompts, four different scripted answers."""
    answers = [scripts.choose_answer(scripts.Conversation(prompt, None, ())).text
               for prompt, _ in PROMPTS]
    assert answers == [expected for _, expected in PROMPTS]
    assert len(set(answers)) == len(PROMPTS)


def _client(daemon: Daemon, request_id: str, prompt: str, session: str,
            barrier: threading.Barrier, results: dict) -> None:
    """One client on its own connection: connect, wait for the others, ask,
    read every line up to the ask's end (unfiltered: a line meant for another
    client would be seen here)."""
    raw = None
    try:
        raw = daemon.raw()
        barrier.wait(timeout(30))
        raw.send(json.dumps({"id": request_id, "op": "ask", "prompt": prompt,
                             "session": session}, ensure_ascii=False).encode() + b"\n")
        replies = []
        while not replies or replies[-1].get("type") not in ("done", "error"):
            replies.append(raw.line())
        results[request_id] = replies
    except BaseException as exc:  # reported by the main thread
        results[request_id] = exc
        barrier.abort()
    finally:
        if raw is not None:
            raw.close()


def _wave(daemon: Daemon, wave: int) -> dict[str, tuple[str, str, str, list]]:
    """50 clients at once; request id -> (session, prompt, expected, replies)."""
    plan = {}
    for index in range(CLIENTS):
        prompt, expected = PROMPTS[index % len(PROMPTS)]
        # Ids and sessions unique across clients, so a reply or a history
        # entry that went to the wrong client cannot pass for the right one.
        plan[f"w{wave}-c{index}"] = (f"load-w{wave}-c{index}", prompt, expected)
    results: dict = {}
    barrier = threading.Barrier(CLIENTS)
    threads = [threading.Thread(target=_client, args=(daemon, request_id, prompt, session,
                                                      barrier, results), daemon=True)
               for request_id, (session, prompt, _) in plan.items()]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout(60)
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, (f"wave {wave}: {len(stuck)} clients still streaming:\n"
                       f"{daemon.log()[-4000:]}")
    failed = {k: v for k, v in results.items() if isinstance(v, BaseException)}
    assert not failed, (f"wave {wave}: {len(failed)} clients failed, e.g. "
                        f"{next(iter(failed.items()))}")
    assert set(results) == set(plan)
    return {request_id: (*plan[request_id], results[request_id]) for request_id in plan}


def _check_streams(wave: int, outcome: dict) -> None:
    for request_id, (session, prompt, expected, replies) in outcome.items():
        where = f"wave {wave}, {request_id}"
        kinds = [r.get("type") for r in replies]
        assert kinds[0] == "started" and kinds[-1] == "done", f"{where}: {kinds}"
        assert set(kinds[1:-1]) == {"delta"}, f"{where}: {kinds}"
        assert all(r.get("id") == request_id for r in replies), \
            f"{where}: a reply with another id: {[r.get('id') for r in replies]}"
        started, done = replies[0], replies[-1]
        assert started["session"] == done["session"] == session, where
        text = "".join(r["text"] for r in replies[1:-1])
        assert text == done["text"] == expected, f"{where}: {text!r} / {done['text']!r}"
        assert done["finish_reason"] == "stop" and done["attempts"] == 1, where


def _check_histories_and_forget(daemon: Daemon, wave: int, outcome: dict) -> None:
    with daemon.client() as client:
        for request_id, (session, prompt, expected, _) in outcome.items():
            history = client.call("history", session=session)
            assert history["type"] == "history", history
            assert history["turns"] == [
                {"role": "user", "text": prompt},
                {"role": "assistant", "text": expected, "finish_reason": "stop"},
            ], f"wave {wave}, {request_id}: {history['turns']}"
        # Forgotten, so that what is left after a wave is what the daemon
        # keeps for itself: the next wave's sessions are new ones.
        for session, *_ in outcome.values():
            reply = client.call("forget", session=session)
            assert reply["type"] == "ok" and reply["forgotten"] is True, reply


def _wait_idle(daemon: Daemon, wave: int) -> dict:
    """Status until no ask is active and the only connection is the one
    asking (bounded poll: a closed client's connection ends a moment later)."""
    deadline = time.monotonic() + timeout(10)
    with daemon.client() as client:
        while True:
            status = client.call("status")
            if not status["active"] and status["clients"] == 1:
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"wave {wave}: not idle: {len(status['active'])} asks "
                                     f"active, {status['clients']} connections (1 is the "
                                     f"status request's own)")
            time.sleep(0.05)


def test_fifty_concurrent_streaming_clients(tmp_path, mock):
    """Every wave's streams, histories and counters, everywhere; the RSS
    bound on the host only. Under qemu-user the daemon's process is qemu, and
    its RSS holds qemu's own memory too: the code it translates (more as the
    waves reach new paths of the interpreter) and the tables that track it,
    which grow by chance and cannot be told apart from the daemon's. The
    bound once failed there at 3.2 MiB with no leak: a check that fails by
    chance proves nothing and blocks landings. The daemon's code is the same
    on both, so the host run, whose RSS is the daemon's own, is where the
    bound means what it says, and it stays as strict as it was; what only
    the aarch64 build could leak is left to the tests of the parts, as the
    emulated RSS could not show it anyway."""
    daemon = Daemon(tmp_path, mock.url, providers={"mock": PACED}, env=ALLOCATOR).start()
    try:
        rss = []
        for wave in range(1 + WAVES):
            outcome = _wave(daemon, wave)
            _check_streams(wave, outcome)
            _check_histories_and_forget(daemon, wave, outcome)
            status = _wait_idle(daemon, wave)
            counters = status["counters"]
            assert counters["asks"] == counters["answered"] == CLIENTS * (wave + 1), counters
            assert counters["failed"] == counters["cancelled"] == counters["overflows"] == 0
            rss.append(daemon.rss_kib())
        if not EMULATED:  # host only: see the docstring
            growth = [kib - rss[0] for kib in rss[1:]]
            assert max(growth) < RSS_GROWTH_LIMIT_KIB, \
                f"RSS after each wave (KiB): {rss}; growth after the warm-up: {growth}"
    finally:
        status = daemon.stop()
    assert status == 0, daemon.log()[-4000:]
