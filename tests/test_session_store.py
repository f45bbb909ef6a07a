"""The session history store: the codec's exact round trip, trimming by whole
exchanges, files that do not read, and a real kill -9 in the middle of commits."""

from __future__ import annotations

import errno
import inspect
import json
import logging
import os
import random
import re
import resource
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.providers.requests import AssistantTurn, ToolResult, UserTurn
from agent.session.codec import turn_from_json, turn_summary, turn_to_json
from agent.session.store import Retention, SessionStore, StorageError, TooLargeToKeep
from agent.stream.records import Usage
from agent.stream.message import (ArgumentsError, FinishReason, Message, TextPart, ThinkingPart,
                                  ToolCall, parse_arguments)
from conftest import scaled, timeout

ROOT = Path(__file__).resolve().parent.parent
NO_TRIM = {"max_turns": 10**6, "max_bytes": 10**9}


def exchange(n):
    """Exchange n: a question, a tool call, its result, the answer.
    The kill -9 child runs this very source."""
    call = ToolCall(f"call_{n}", "read_sensor", '{"sensor": %d}' % n, parsed={"sensor": n},
                    complete=True)
    return [UserTurn(f"ask {n}"),
            AssistantTurn(Message(parts=[call], finish_reason=FinishReason.TOOL_CALLS)),
            ToolResult(f"call_{n}", "read_sensor", f"{n} degrees"),
            AssistantTurn(Message(parts=[TextPart(f"answer {n}")],
                                  finish_reason=FinishReason.STOP))]


def exchanges(first, last):
    return [turn for n in range(first, last + 1) for turn in exchange(n)]


def round_trip(turn):
    return turn_from_json(json.loads(json.dumps(turn_to_json(turn))))


def open_store(tmp_path, **limits) -> SessionStore:
    return SessionStore(str(tmp_path / "sessions"), **{**NO_TRIM, **limits})


def assert_results_follow_calls(turns):
    """Every tool result answers a call of the assistant turn before its run of results."""
    calls: set = set()
    for turn in turns:
        if isinstance(turn, UserTurn):
            calls = set()
        elif isinstance(turn, AssistantTurn):
            calls = {call.id for call in turn.message.tool_calls}
        elif isinstance(turn, ToolResult):
            assert turn.call_id in calls, f"{turn} lost its call"


# ---- codec ----

RICH_MESSAGE = Message(
    id="msg_01", model="claude-test",
    parts=[ThinkingPart("Relay 1 it is.", signature="EqQBCgIYAhIM+sig/with==padding"),
           ThinkingPart("", redacted_data="c2VjcmV0"),
           ThinkingPart("summary two", item_id="rs_1", summary_index=1),
           TextPart("Switching."),
           ToolCall("call_1", "set_relay", '{"on":true,  "channel":1}',
                    parsed={"on": True, "channel": 1}, complete=True, item_id="fc_1"),
           ToolCall("call_2", "set_relay", '{"on":tru', error=ArgumentsError.INVALID_JSON,
                    error_detail="bad literal at 6", complete=True),
           ToolCall(None, None, '{"a', error=ArgumentsError.TRUNCATED)],
    refusal="I cannot open the safe.",
    citations=[{"type": "url_citation", "url": "https://example.org", "start_index": 0}],
    usage=Usage(input_tokens=12, output_tokens=34, cache_read_tokens=0),
    finish_reason=FinishReason.OTHER, raw_finish_reason="surprise", stop_sequence="###",
    dropped_events={"bad_json": 2, "event_too_large": 1})


@pytest.mark.parametrize("turn", [
    UserTurn("Turn the heating up"),
    UserTurn(""),
    AssistantTurn(RICH_MESSAGE),
    AssistantTurn(Message()),
    AssistantTurn(Message(usage=Usage())),
    ToolResult("call_1", "set_relay", '{"ok": true}'),
    ToolResult("call_2", "set_relay", "relay busy", is_error=True),
], ids=["user", "user-empty", "assistant-rich", "assistant-empty", "usage-empty", "tool",
        "tool-error"])
def test_round_trip_is_exact(turn):
    assert round_trip(turn) == turn


def test_none_fields_are_left_out():
    assert turn_to_json(AssistantTurn(Message(parts=[TextPart("hi")]))) == {
        "role": "assistant", "parts": [{"type": "text", "text": "hi"}]}


texts = st.text(max_size=12)
maybe_texts = st.none() | texts
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8)
json_objects = st.dictionaries(texts, json_values, max_size=3)


def decoded_call(id, name, arguments: str, complete: bool, cut: ArgumentsError | None,
                 detail, item_id) -> ToolCall:
    """A call as a decoder makes one: parsed from its arguments when it is
    complete (the store keeps only the arguments), else cut off or too large."""
    call = ToolCall(id, name, arguments, complete=complete, item_id=item_id)
    if complete:
        parse_arguments(call)
    else:
        call.error, call.error_detail = cut, detail
    return call
parts = st.one_of(
    st.builds(TextPart, texts),
    st.builds(ThinkingPart, texts, maybe_texts, maybe_texts, maybe_texts,
              st.none() | st.integers(0, 9)),
    st.builds(decoded_call, maybe_texts, maybe_texts,
              texts | json_objects.map(json.dumps), st.booleans(),
              st.sampled_from([None, ArgumentsError.TRUNCATED, ArgumentsError.TOO_LARGE]),
              maybe_texts, maybe_texts))
counts = st.none() | st.integers(0, 2**40)
generated_turns = st.one_of(
    st.builds(UserTurn, texts),
    st.builds(AssistantTurn, st.builds(
        Message, maybe_texts, maybe_texts, st.lists(parts, max_size=4), maybe_texts,
        st.lists(json_objects, max_size=2), st.none() | st.builds(Usage, *[counts] * 6),
        st.none() | st.sampled_from(FinishReason), maybe_texts, maybe_texts)),
    st.builds(ToolResult, texts, texts, texts, st.booleans()))


@settings(max_examples=scaled(200))
@given(generated_turns)
def test_generated_turns_round_trip(turn):
    assert round_trip(turn) == turn
    json.dumps(turn_summary(turn))


@settings(max_examples=scaled(30), deadline=None)  # each commit fsyncs
@given(st.lists(generated_turns, max_size=6))
def test_generated_turns_survive_the_store(history):
    with tempfile.TemporaryDirectory() as directory:
        SessionStore(directory, **NO_TRIM).commit("s", history)
        assert SessionStore(directory, **NO_TRIM).load("s") == history


CALL = {"type": "tool_call", "arguments": "{}", "complete": True}


@pytest.mark.parametrize("obj, problem", [
    ([], "a turn must be an object, not an array"),
    ({}, "missing 'role'"),
    ({"role": 1}, "'role' must be a string, not an integer"),
    ({"role": "system", "text": "x"}, "unknown role 'system'"),
    ({"role": "user"}, "missing 'text'"),
    ({"role": "user", "text": None}, "'text' must be a string, not null"),
    ({"role": "tool", "call_id": "c", "name": "n", "content": "x", "is_error": "yes"},
     "'is_error' must be a boolean, not a string"),
    ({"role": "tool", "call_id": "c", "content": "x"}, "missing 'name'"),
    ({"role": "assistant"}, "missing 'parts'"),
    ({"role": "assistant", "parts": {}}, "'parts' must be an array, not an object"),
    ({"role": "assistant", "parts": ["hi"]}, "parts[0] must be an object, not a string"),
    ({"role": "assistant", "parts": [{"type": "image"}]}, "parts[0]: unknown part type 'image'"),
    ({"role": "assistant", "parts": [{**CALL, "arguments": {}}]},
     "parts[0]: 'arguments' must be a string, not an object"),
    ({"role": "assistant", "parts": [{**CALL, "complete": 1}]},
     "parts[0]: 'complete' must be a boolean, not an integer"),
    ({"role": "assistant", "parts": [CALL, {**CALL, "error": "bogus"}]},
     "parts[1]: unknown error 'bogus'"),
    ({"role": "assistant", "parts": [{**CALL, "parsed": [1]}]},
     "parts[0]: 'parsed' must be an object, not an array"),
    ({"role": "assistant", "parts": [{"type": "thinking", "text": "", "summary_index": True}]},
     "parts[0]: 'summary_index' must be an integer, not a boolean"),
    ({"role": "assistant", "parts": [], "usage": {"input_tokens": "3"}},
     "usage: 'input_tokens' must be an integer, not a string"),
    ({"role": "assistant", "parts": [], "usage": 3}, "'usage' must be an object, not an integer"),
    ({"role": "assistant", "parts": [], "finish_reason": "done"}, "unknown finish_reason 'done'"),
    ({"role": "assistant", "parts": [], "citations": {}},
     "'citations' must be an array, not an object"),
    ({"role": "assistant", "parts": [], "dropped_events": {"bad_json": "1"}},
     "dropped_events: 'bad_json' must be an integer, not a string"),
])
def test_malformed_turns_are_rejected(obj, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        turn_from_json(obj)


def test_turn_summary():
    assert turn_summary(UserTurn("hi")) == {"role": "user", "text": "hi"}
    assert turn_summary(AssistantTurn(RICH_MESSAGE)) == {
        "role": "assistant", "text": "Switching.", "reasoning": "Relay 1 it is.summary two",
        "tool_calls": [{"id": "call_1", "name": "set_relay",
                        "arguments": '{"on":true,  "channel":1}'},
                       {"id": "call_2", "name": "set_relay", "arguments": '{"on":tru'},
                       {"id": None, "name": None, "arguments": '{"a'}],
        "finish_reason": "other", "dropped_events": {"bad_json": 2, "event_too_large": 1}}
    assert turn_summary(AssistantTurn(Message(parts=[TextPart("Done.")]))) == {
        "role": "assistant", "text": "Done.", "finish_reason": None}
    assert turn_summary(ToolResult("call_1", "set_relay", "ok", is_error=True)) == {
        "role": "tool", "call_id": "call_1", "name": "set_relay", "content": "ok",
        "is_error": True}


# ---- the store ----

def test_commit_load_forget_sessions(tmp_path):
    store = open_store(tmp_path)
    assert store.load("kitchen") == [] and store.sessions() == []
    before = time.time()
    assert store.commit("kitchen", exchange(1)) == []
    store.commit("kitchen", exchange(2))
    store.commit("hall", [UserTurn("hello")])
    assert store.load("kitchen") == exchanges(1, 2)
    store.load("kitchen").clear()  # a copy
    assert len(store.load("kitchen")) == 8
    hall, kitchen = store.sessions()
    assert (hall["id"], hall["turns"], kitchen["id"], kitchen["turns"]) == ("hall", 1, "kitchen", 8)
    assert kitchen["bytes"] == (tmp_path / "sessions" / "kitchen.json").stat().st_size
    assert before <= hall["updated"] <= time.time()
    assert store.forget("kitchen") and not store.forget("kitchen")
    assert store.load("kitchen") == [] and [s["id"] for s in store.sessions()] == ["hall"]
    assert sorted(os.listdir(tmp_path / "sessions")) == ["hall.json"]


def test_opaque_reasoning_round_trips_and_older_files_read_without_it():
    item = '{"id": "rs_1", "type": "reasoning", "encrypted_content": "gAAA+/=="}'
    turn = AssistantTurn(Message(parts=[
        ThinkingPart("why", item_id="rs_1", summary_index=0, opaque=item),
        ThinkingPart("", redacted_data="EmwK+/=="), TextPart("ok")]))
    assert round_trip(turn) == turn
    assert turn_to_json(turn)["parts"][0]["opaque"] == item
    older = {"role": "assistant", "parts": [{"type": "thinking", "text": "why",
                                             "item_id": "rs_1", "summary_index": 0}]}
    assert turn_from_json(older).message.parts == [ThinkingPart("why", item_id="rs_1",
                                                                summary_index=0)]


# ---- what stays in memory, what stays on disk (hardening item 13) ----

def test_memory_holds_the_most_recently_used_sessions_by_count_and_reads_the_rest(tmp_path):
    store = open_store(tmp_path, retention=Retention(memory_sessions=3))
    for n in range(6):
        store.commit(f"room{n}", exchange(n))
    assert store.in_memory()[0] == 3
    assert [store.cached(f"room{n}") is None for n in range(6)] == [True] * 3 + [False] * 3
    assert store.cached("never") == []  # nothing to read: a new session
    # an older one is read from its file, and becomes the most recently used
    assert store.load("room0") == exchange(0)
    assert store.cached("room0") == exchange(0) and store.cached("room3") is None
    assert store.in_memory()[0] == 3
    # committing to a session out of memory appends to what its file holds
    store.commit("room1", exchange(9))
    assert store.load("room1") == exchange(1) + exchange(9)
    assert [s["turns"] for s in store.sessions()] == [4, 8, 4, 4, 4, 4]


def test_memory_holds_at_most_memory_bytes_of_session_files(tmp_path):
    store = open_store(tmp_path, retention=Retention(memory_sessions=100, memory_bytes=20000))
    for n in range(10):
        store.commit(f"room{n}", [UserTurn("x" * 5000)])
    count, size = store.in_memory()
    assert count == 3 and size <= 20000, (count, size)
    # the most recent stays even when it alone is over the bound
    store.commit("big", [UserTurn("y" * 30000)])
    assert store.in_memory()[0] == 1 and store.cached("big") == [UserTurn("y" * 30000)]
    assert all(store.load(f"room{n}") == [UserTurn("x" * 5000)] for n in range(10))
    # a reload's smaller bound holds at once
    store.set_retention(Retention(memory_sessions=2, memory_bytes=10**6))
    assert store.in_memory()[0] == 2


def test_a_session_file_that_no_longer_reads_is_set_aside_when_loaded(tmp_path):
    store = open_store(tmp_path, retention=Retention(memory_sessions=1))
    store.commit("old", exchange(1))
    store.commit("new", exchange(2))
    (tmp_path / "sessions" / "old.json").write_bytes(b"{ damaged")
    assert store.load("old") == [] and [s["id"] for s in store.sessions()] == ["new"]
    assert any(name.startswith("old.json.corrupt-") for name in os.listdir(tmp_path / "sessions"))


def unnamed(n: int) -> str:
    return f"s-{n:012x}"


def test_at_most_unnamed_keep_unnamed_sessions_stay_on_disk_named_ones_all(tmp_path):
    store = open_store(tmp_path, retention=Retention(unnamed_keep=3))
    store.commit("kitchen", exchange(0))
    for n in range(6):
        store.commit(unnamed(n), exchange(n))
    store.commit("mqtt-" + "ab" * 8, exchange(7))
    store.commit("wyoming-" + "cd" * 8, exchange(8))
    store.commit("s-not-hex-named", exchange(9))  # named by a client: kept
    names = sorted(os.listdir(tmp_path / "sessions"))
    assert names == sorted(["kitchen.json", f"{unnamed(5)}.json", "mqtt-" + "ab" * 8 + ".json",
                            "wyoming-" + "cd" * 8 + ".json", "s-not-hex-named.json"])
    assert sorted(s["id"] for s in store.sessions()) == sorted(n[:-5] for n in names)
    assert store.load(unnamed(0)) == []  # removed: a new session
    # a later ask on a kept one makes it the newest: the next removal spares it
    store.commit(unnamed(5), exchange(10))
    store.commit(unnamed(6), exchange(11))
    assert unnamed(5) in {s["id"] for s in store.sessions()}
    assert "mqtt-" + "ab" * 8 not in {s["id"] for s in store.sessions()}


def test_unnamed_sessions_expire_after_unnamed_max_age_at_commit_and_at_startup(tmp_path):
    directory = tmp_path / "sessions"
    store = open_store(tmp_path, retention=Retention(unnamed_max_age=3600))
    store.commit(unnamed(1), exchange(1))
    store.commit("kitchen", exchange(2))
    # written a day ago (a daemon that was stopped since): gone at startup
    for name in (f"{unnamed(1)}.json", "kitchen.json"):
        doc = json.loads((directory / name).read_bytes())
        doc["updated"] -= 86400
        (directory / name).write_text(json.dumps(doc))
    again = open_store(tmp_path, retention=Retention(unnamed_max_age=3600))
    assert [s["id"] for s in again.sessions()] == ["kitchen"]
    assert sorted(os.listdir(directory)) == ["kitchen.json"]
    # and at a commit, once it is older than the age
    again.commit(unnamed(2), exchange(3))
    again.set_retention(Retention(unnamed_max_age=0.001))
    time.sleep(0.01)
    again.commit("kitchen", exchange(4))
    assert sorted(os.listdir(directory)) == ["kitchen.json"]
    # 0: no age limit
    again.set_retention(Retention(unnamed_max_age=0))
    again.commit(unnamed(3), exchange(5))
    time.sleep(0.01)
    again.commit("kitchen", exchange(6))
    assert f"{unnamed(3)}.json" in os.listdir(directory)


def test_sessions_persist_across_instances(tmp_path):
    store = open_store(tmp_path)
    store.commit("a-1.b_2", exchanges(1, 2))
    store.commit("z", [UserTurn("\ud800 a lone surrogate from a client")])
    again = open_store(tmp_path)
    assert again.load("a-1.b_2") == exchanges(1, 2)
    assert again.load("z") == [UserTurn("\ud800 a lone surrogate from a client")]
    assert again.sessions() == store.sessions()
    directory = tmp_path / "sessions"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / "z.json").stat().st_mode) == 0o600
    doc = json.loads((directory / "a-1.b_2.json").read_bytes())
    assert (doc["version"], doc["id"]) == (1, "a-1.b_2")
    assert doc["turns"] == [turn_to_json(turn) for turn in exchanges(1, 2)]


@pytest.mark.parametrize("bad", ["../x", "", "a" * 65, ".hidden", "-x", "a/b", "a b", "ä", "x\n",
                                 None])
def test_bad_session_ids_are_rejected(tmp_path, bad):
    store = open_store(tmp_path)
    for call in (store.load, store.forget, lambda i: store.commit(i, [UserTurn("x")])):
        with pytest.raises(ValueError, match="bad session id"):
            call(bad)
    assert os.listdir(tmp_path / "sessions") == []
    store.commit("a" * 64, [UserTurn("x")])


def test_trimming_by_turns_drops_oldest_exchanges(tmp_path):
    store = open_store(tmp_path, max_turns=8)
    store.commit("s", exchange(1))
    store.commit("s", exchange(2))
    assert store.commit("s", exchange(3)) == exchange(1)
    assert store.load("s") == exchanges(2, 3)


def test_trimming_by_bytes_with_limits_from_a_reload(tmp_path):
    store = open_store(tmp_path)
    store.commit("s", exchanges(1, 2))
    two = store.sessions()[0]["bytes"]
    store.set_limits(max_turns=100, max_bytes=two + 10)  # two exchanges fit, three do not
    assert store.load("s") == exchanges(1, 2)  # applied at the next commit only
    assert store.commit("s", exchange(3)) == exchange(1)
    assert store.load("s") == exchanges(2, 3)
    assert store.sessions()[0]["bytes"] <= two + 10


def test_exchanges_are_never_split(tmp_path):
    two_rounds = [UserTurn("two rounds of calls"),
                  AssistantTurn(Message(parts=[ToolCall("c1", "a", "{}"),
                                               ToolCall("c2", "b", "{}")])),
                  ToolResult("c1", "a", "1"), ToolResult("c2", "b", "2"),
                  AssistantTurn(Message(parts=[ToolCall("c3", "a", "{}")])),
                  ToolResult("c3", "a", "3"),
                  AssistantTurn(Message(parts=[TextPart("done")]))]
    chat = [UserTurn("hi"), AssistantTurn(Message(parts=[TextPart("hello")]))]
    shapes = [exchange(1), [UserTurn("no answer yet")], chat, two_rounds, exchange(2)[:2]]
    for max_turns in range(1, 12):
        store = SessionStore(str(tmp_path / str(max_turns)), max_turns=max_turns, max_bytes=10**6)
        committed, dropped = [], []
        for shape in shapes * 2:
            committed += shape
            dropped += store.commit("s", shape)
            kept = store.load("s")
            assert dropped + kept == committed
            assert isinstance(kept[0], UserTurn)
            assert len(kept) <= max_turns or kept == shape
            assert_results_follow_calls(kept)


def test_newest_exchange_keeps_its_prompt_and_last_step_when_oversized(tmp_path):
    # 250 bytes: room for a prompt and an answer, not for a tool step too
    store = open_store(tmp_path, max_turns=1, max_bytes=250)
    assert store.commit("s", exchange(1)) == []
    assert store.load("s") == [exchange(1)[0], exchange(1)[3]]
    assert store.commit("s", exchange(2)) == [exchange(1)[0], exchange(1)[3]]
    assert store.load("s") == [exchange(2)[0], exchange(2)[3]]


def test_turns_before_the_first_user_turn_go_first(tmp_path):
    directory = tmp_path / "sessions"
    directory.mkdir()
    orphans = exchange(1)[1:3]  # a hand-edited file lost the question
    stored = [turn_to_json(turn) for turn in orphans + exchange(2)]
    (directory / "s.json").write_text(json.dumps(
        {"version": 1, "id": "s", "updated": 5, "turns": stored}))
    store = open_store(tmp_path, max_turns=9)
    assert store.load("s") == orphans + exchange(2)
    assert store.sessions()[0]["updated"] == 5.0
    assert store.commit("s", exchange(3)) == orphans
    assert store.commit("s", exchange(4)) == exchange(2)


@pytest.mark.parametrize("content, reason", [
    (b"{not json", "invalid JSON: syntax at byte 1"),
    (b"\xff\xfe\xff", "invalid JSON: syntax at byte 0"),
    (b'{"version": 1, "id": "s", "updated": 1, "turns": [{"role": "user", "text": "\xff"}]}',
     "not UTF-8"),
    (b'{"version": 1, "id": "s", "updated": NaN, "turns": []}', "invalid JSON: syntax"),
    (b'{"version": 1, "id": "s", "updated": 1e999, "turns": []}', "invalid JSON: range"),
    (b"[]", "not a JSON object"),
    (b'{"version": 2, "id": "s", "updated": 1, "turns": []}', "unknown version 2"),
    (b'{"version": 1, "id": "t", "updated": 1, "turns": []}', "names session 't'"),
    (b'{"version": 1, "id": "s", "updated": "now", "turns": []}', "'updated' is not a number"),
    (b'{"version": 1, "id": "s", "updated": 1%s, "turns": []}' % (b"0" * 400),
     "'updated' is out of range"),
    (b'{"version": 1, "id": "s", "updated": 1, "turns": {}}', "'turns' is not an array"),
    (b'{"version": 1, "id": "s", "updated": 1, "turns": [{"role": "user", "text": "a"}, '
     b'{"role": "system"}]}', "turn 1: unknown role 'system'"),
    (b"[" * 100_000, "invalid JSON: depth"),
])
def test_a_corrupt_file_is_moved_aside_and_logged(tmp_path, caplog, content, reason):
    directory = tmp_path / "sessions"
    directory.mkdir()
    (directory / "s.json").write_bytes(content)
    (directory / "good.json").write_bytes(
        b'{"version": 1, "id": "good", "updated": 1, "turns": []}')
    with caplog.at_level(logging.ERROR, logger="homeagent.session"):
        store = open_store(tmp_path)
    [record] = caplog.records
    assert record.name == "homeagent.session" and record.levelno == logging.ERROR
    assert str(directory / "s.json") in record.getMessage()
    assert reason in record.getMessage()
    [aside] = [name for name in os.listdir(directory) if name.startswith("s.json.")]
    assert re.fullmatch(r"s\.json\.corrupt-\d+", aside)
    assert (directory / aside).read_bytes() == content
    assert store.load("s") == [] and [s["id"] for s in store.sessions()] == ["good"]
    store.commit("s", exchange(1))
    assert open_store(tmp_path).load("s") == exchange(1)


def test_temp_leftovers_are_removed_at_startup(tmp_path):
    directory = tmp_path / "sessions"
    directory.mkdir()
    leftovers = [".s.json.tmp-4242", ".a.b.json.tmp-1"]
    others = ["notes.txt", "s.json.corrupt-5", ".hidden", ".s.json.tmp-x"]
    for name in leftovers + others:
        (directory / name).write_text("{half")
    open_store(tmp_path)
    assert sorted(os.listdir(directory)) == sorted(others)


# ---- kill -9 ----

CHILD_IMPORTS = """
import sys
from agent.providers.requests import AssistantTurn, ToolResult, UserTurn
from agent.session.store import SessionStore
from agent.stream.message import FinishReason, Message, TextPart, ToolCall
"""
CHILD_LOOP = """
store = SessionStore(sys.argv[1], max_turns=10**6, max_bytes=10**9)
count = len(store.load("s")) // 4
while True:
    count += 1
    store.commit("s", exchange(count))
    print(count, flush=True)
"""


def test_kill_9_mid_commit_loses_at_most_the_exchange_in_flight(tmp_path, caplog):
    script = CHILD_IMPORTS + inspect.getsource(exchange) + CHILD_LOOP
    directory = str(tmp_path / "sessions")
    for _ in range(5):
        child = subprocess.Popen([sys.executable, "-c", script, directory], cwd=ROOT,
                                 stdout=subprocess.PIPE, text=True)
        try:
            first = child.stdout.readline()  # the child is committing: kill it at some instant
            time.sleep(timeout(random.uniform(0.02, 0.2)))
        finally:
            child.kill()
            child.wait(timeout(10))
        output = first + child.stdout.read()
        child.stdout.close()
        assert output, "the child died before its first commit"
        reported = int(output.split()[-1])
        with caplog.at_level(logging.ERROR, logger="homeagent.session"):
            history = SessionStore(directory, **NO_TRIM).load("s")
        assert not caplog.records, "a session file was corrupt"
        assert os.listdir(directory) == ["s.json"], "a temp file was left"
        committed = len(history) // 4
        assert history == exchanges(1, committed)
        assert reported <= committed <= reported + 1


# ---- the disk refuses ----

def test_no_file_descriptors_left_is_a_storage_error_and_changes_nothing(tmp_path):
    store = open_store(tmp_path)
    store.commit("s", exchange(1))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
    taken = []
    try:
        with pytest.raises(OSError) as full:
            while True:
                taken.append(os.open(os.devnull, os.O_RDONLY))
        assert full.value.errno == errno.EMFILE
        with pytest.raises(StorageError, match=r"^session 's' was not written: Too many open "):
            store.commit("s", exchange(2))
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert store.load("s") == exchange(1)  # memory as before the failed commit
    assert open_store(tmp_path).load("s") == exchange(1)  # and the file
    assert not [n for n in os.listdir(tmp_path / "sessions") if ".tmp-" in n]


def test_an_unusable_directory_is_a_storage_error_at_open(tmp_path):
    (tmp_path / "sessions").write_text("a file, not a directory")
    with pytest.raises(StorageError, match=r"^session directory .*sessions: File exists"):
        open_store(tmp_path)


# ---- links planted in the directory are never followed ----

def _outside(tmp_path, exists: bool) -> Path:
    outside = tmp_path / "outside" / "precious.txt"
    outside.parent.mkdir()
    if exists:
        outside.write_text("not the daemon's to write\n")
    return outside


def _outside_untouched(outside: Path, existed: bool) -> None:
    if existed:
        assert outside.read_text() == "not the daemon's to write\n"
    else:
        assert not outside.exists() and not outside.is_symlink()
    assert sorted(os.listdir(outside.parent)) == (["precious.txt"] if existed else [])


@pytest.mark.parametrize("exists", [True, False], ids=["target", "dangling"])
@pytest.mark.parametrize("where", ["temporary", "session"])
def test_a_link_planted_in_the_directory_is_not_followed_by_a_commit(tmp_path, where, exists):
    """A link to a file outside, at the name of the next commit's temporary
    file or in place of the session file: the commit writes neither through
    it nor onto it, and the session is kept, in a regular file."""
    store = open_store(tmp_path)
    store.commit("s", exchange(1))
    outside = _outside(tmp_path, exists)
    sessions = tmp_path / "sessions"
    name = f".s.json.tmp-{os.getpid()}" if where == "temporary" else "s.json"
    (sessions / name).unlink(missing_ok=True)
    (sessions / name).symlink_to(outside)
    store.commit("s", exchanges(2, 2))
    _outside_untouched(outside, exists)
    assert store.load("s") == exchanges(1, 2)
    assert stat.S_ISREG(os.lstat(sessions / "s.json").st_mode)
    assert os.listdir(sessions) == ["s.json"]
    assert open_store(tmp_path).load("s") == exchanges(1, 2)


def test_a_sessions_directory_that_is_a_symlink_is_not_followed_at_open(tmp_path):
    outside = _outside(tmp_path, True)
    (tmp_path / "sessions").symlink_to(outside.parent)
    with pytest.raises(StorageError, match=r"^session directory .*sessions is a symbolic link, "
                                           r"not followed: "):
        open_store(tmp_path)
    _outside_untouched(outside, True)


def test_a_sessions_directory_replaced_by_a_symlink_later_is_not_followed(tmp_path):
    """The store keeps to the directory it opened: a link put in its place
    while the daemon runs sends no commit, forget or set-aside elsewhere."""
    store = open_store(tmp_path)
    store.commit("s", exchange(1))
    store.commit("t", exchange(1))
    outside = _outside(tmp_path, True)
    (tmp_path / "sessions").rename(tmp_path / "opened")
    (tmp_path / "sessions").symlink_to(outside.parent)
    store.commit("s", exchanges(2, 2))
    assert store.forget("t")
    _outside_untouched(outside, True)
    assert sorted(os.listdir(tmp_path / "opened")) == ["s.json"]
    assert SessionStore(str(tmp_path / "opened"), **NO_TRIM).load("s") == exchanges(1, 2)


def test_a_calls_arguments_are_stored_once_and_parsed_again_on_reading(tmp_path):
    arguments = json.dumps({"text": "x" * 5000})
    call = ToolCall("call_1", "say", arguments, complete=True)
    parse_arguments(call)
    exchange = [UserTurn("say it"), AssistantTurn(Message(parts=[call])),
                ToolResult("call_1", "say", "said")]
    open_store(tmp_path).commit("once", exchange)
    data = (tmp_path / "sessions" / "once.json").read_bytes()
    assert data.count(b"x" * 5000) == 1
    [_, stored, _] = open_store(tmp_path).load("once")
    assert stored.message.parts == [call] and stored.message.parts[0].parsed == {"text": "x" * 5000}


def test_a_file_that_also_holds_parsed_arguments_still_reads(tmp_path):
    store = open_store(tmp_path)
    call = ToolCall("call_1", "say", '{"a": 1}', parsed={"a": 1}, complete=True)
    store.commit("old", [UserTurn("hi"), AssistantTurn(Message(parts=[call]))])
    path = tmp_path / "sessions" / "old.json"
    doc = json.loads(path.read_bytes())
    doc["turns"][1]["parts"][0]["parsed"] = {"a": 1}  # as files written before kept it
    path.write_text(json.dumps(doc))
    assert open_store(tmp_path).load("old")[1].message.parts == [call]


def tool_step(call_id: str, padding: int) -> list:
    call = ToolCall(call_id, "say", json.dumps({"text": "x" * padding}), complete=True)
    parse_arguments(call)
    return [AssistantTurn(Message(parts=[TextPart("Saying."), call])),
            ToolResult(call_id, "say", "said")]


def test_max_bytes_holds_for_the_newest_exchange_too(tmp_path):
    store = open_store(tmp_path, max_bytes=4096)
    store.commit("big", [UserTurn("an old one"), AssistantTurn(Message(parts=[TextPart("ok")]))])
    last = AssistantTurn(Message(parts=[TextPart("All said.")]))
    exchange = [UserTurn("say it all"), *tool_step("c1", 3000), *tool_step("c2", 3000),
                *tool_step("c3", 100), last]
    assert store.commit("big", exchange)[0] == UserTurn("an old one")
    # Its earliest tool step went, and so it fits; the prompt and the rest stay.
    assert store.load("big") == [exchange[0], *exchange[3:]]
    assert (tmp_path / "sessions" / "big.json").stat().st_size <= 4096
    assert open_store(tmp_path).load("big") == store.load("big")


def test_an_exchange_over_max_bytes_even_trimmed_is_not_kept_and_changes_nothing(tmp_path):
    store = open_store(tmp_path, max_bytes=4096)
    before = [UserTurn("an old one"), AssistantTurn(Message(parts=[TextPart("ok")]))]
    store.commit("one", before)
    path = tmp_path / "sessions" / "one.json"
    on_disk = path.read_bytes()
    # Trimmed to its prompt and its last step, it is still over 4096 bytes.
    exchange = [UserTurn("say it"), *tool_step("c1", 3000), *tool_step("c2", 5000)]
    with pytest.raises(TooLargeToKeep, match=r"the exchange is \d+ bytes even with only its "
                       r"prompt and its last step, over sessions.max_bytes \(4096\)"):
        store.commit("one", exchange)
    assert store.load("one") == before
    assert path.read_bytes() == on_disk
    with pytest.raises(TooLargeToKeep):
        store.commit("new", exchange)
    assert store.load("new") == [] and not (tmp_path / "sessions" / "new.json").exists()
