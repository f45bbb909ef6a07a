"""Timers and reminders without a daemon: the sans-IO schedule, its file on a
real disk (tmp_path), and TimerTools' trio task on trio's MockClock
(autojump: the clock jumps to the next deadline when every task sleeps, so
minutes of ringing take no time and their counts are exact). The center is
the real one; its speech is a recorder, since no speech device runs here.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from zoneinfo import ZoneInfo

import pytest
import trio

from agent.core.center import Center, asking
from agent.core.commands import Ask, Door, Refused, StopAsks
from agent.core.replies import ErrorCode, TimerRing
from agent.tools.base import ToolError, Toolbox
from agent.tools.timers import store as timer_store
from agent.tools.timers.config import TimersConfig
from agent.tools.timers.provider import TimerTools
from agent.tools.timers.schedule import (REMINDER, TIMER, BadLabel, BadTime, Schedule,
                                         TooManyTimers, UnknownTimer, reminder_time)
from agent.tools.timers.store import TimerStore
from agent.stream.message import ToolCall

BERLIN = ZoneInfo("Europe/Berlin")
EPOCH = dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.timezone.utc).timestamp()


# ---- the schedule ----

def test_set_list_cancel_and_due_in_order():
    schedule = Schedule()
    tea = schedule.set(TIMER, "tea", 1300, 1000)
    pills = schedule.set(REMINDER, " pills ", 1100, 1000, set_by="client 1")
    assert (tea.id, pills.id, pills.label) == ("t1", "t2", "pills")
    assert [t.id for t in schedule.timers()] == ["t2", "t1"]
    assert schedule.next_due() == 1100
    assert schedule.due(1099) == []
    assert schedule.due(1100) == [pills]
    assert schedule.cancel("t1") == tea
    assert len(schedule) == 0 and schedule.next_due() is None
    with pytest.raises(UnknownTimer, match="no timer 't1'"):
        schedule.cancel("t1")
    assert schedule.set(TIMER, "egg", 1400, 1000).id == "t3"  # ids are never reused


def test_due_takes_every_timer_that_came_due_while_away():
    read = Schedule()
    for n in (3, 1, 2):
        read.set(TIMER, f"x{n}", 1000 + n, 999)
    schedule = Schedule(timers=tuple(read.timers()), next_number=1)
    assert [t.label for t in schedule.due(5000)] == ["x1", "x2", "x3"]
    assert schedule.set(TIMER, "next", 5100, 5000).id == "t4"  # past every id read


@pytest.mark.parametrize("kind, due, error", [
    (TIMER, 1000.5, "from 1 s to 7 days"), (TIMER, 1000 + 8 * 86400, "from 1 s to 7 days"),
    (REMINDER, 999, "has passed"), (REMINDER, 1000 + 400 * 86400, "within a year")])
def test_times_out_of_range_are_refused_by_name(kind, due, error):
    with pytest.raises(BadTime, match=error):
        Schedule().set(kind, "x", due, 1000)


@pytest.mark.parametrize("label, error", [
    ("", "empty"), ("  ", "empty"), ("x" * 81, "81 characters"),
    ("tea\nSTOP", "control"), ("tea\u202e", "format"), ("\x1b[2J", "control")])
def test_bad_labels_are_refused_by_name(label, error):
    with pytest.raises(BadLabel, match=error):
        Schedule().set(TIMER, label, 1100, 1000)


def test_the_count_is_bounded():
    schedule = Schedule(max_timers=2)
    schedule.set(TIMER, "a", 1100, 1000)
    schedule.set(TIMER, "b", 1100, 1000)
    with pytest.raises(TooManyTimers, match="cancel one first"):
        schedule.set(TIMER, "c", 1100, 1000)


def _at(year, month, day, hour, minute=0) -> float:
    return dt.datetime(year, month, day, hour, minute, tzinfo=BERLIN).timestamp()


@pytest.mark.parametrize("now, hours", [
    (_at(2025, 3, 29, 20), 10),  # the clocks go forward in the night: 10 h to 7:00, not 11
    (_at(2025, 10, 25, 20), 12),  # and back: 12 h, not 11
    (_at(2025, 6, 1, 20), 11)])
def test_a_reminder_keeps_its_wall_clock_time_across_a_change_of_daylight_saving(now, hours):
    when = reminder_time("7:00", BERLIN, now)
    assert dt.datetime.fromtimestamp(when, BERLIN).strftime("%H:%M") == "07:00"
    assert when - now == hours * 3600


def test_a_reminder_later_today_and_a_dated_one():
    now = _at(2025, 3, 30, 1)  # 01:00, before the change at 02:00
    assert reminder_time("06:30", BERLIN, now) - now == 4.5 * 3600  # an hour is skipped
    assert reminder_time("2025-03-31T08:15", BERLIN, now) == _at(2025, 3, 31, 8, 15)
    # a time the clocks skip rings as the zone maps it, after the gap
    gap = reminder_time("2025-03-30T02:30", BERLIN, now)
    assert dt.datetime.fromtimestamp(gap, BERLIN).strftime("%H:%M") == "03:30"


@pytest.mark.parametrize("text", ["tomorrow", "25:00", "7.30", "2025-03-31T08:15+02:00", ""])
def test_what_is_no_local_time_is_refused_by_name(text):
    with pytest.raises(BadTime):
        reminder_time(text, BERLIN, _at(2025, 3, 30, 1))


# ---- the file ----

def test_the_file_keeps_the_timers_and_the_next_number(tmp_path):
    store = TimerStore(str(tmp_path))
    schedule = Schedule()
    schedule.set(TIMER, "tea", 1300, 1000, board="kitchen", set_by="device board")
    schedule.cancel(schedule.set(REMINDER, "pills", 1200, 1000).id)
    store.save(schedule.timers(), schedule.next_number)
    timers, next_number = TimerStore(str(tmp_path)).load()
    assert (timers, next_number) == (schedule.timers(), 3)
    assert sorted(os.listdir(tmp_path)) == ["timers.json"]


@pytest.mark.parametrize("content", [
    b"not json", b'{"version": 2, "next_number": 1, "timers": []}',
    b'{"version": 1, "next_number": 1, "timers": [{"id": "t1"}]}',
    b'{"version": 1, "next_number": 1, "timers": [], "x": NaN}',
    b" " * (timer_store.MAX_FILE_BYTES + 1),
    json.dumps({"version": 1, "next_number": 2, "timers": [
        {"id": "t1", "kind": "timer", "label": "a\x1b[2Jb", "due": 1.0, "set_at": 0.0,
         "board": None, "set_by": ""}]}).encode()])
def test_a_damaged_file_is_set_aside_and_no_timer_is_read(tmp_path, content, caplog):
    (tmp_path / "timers.json").write_bytes(content)
    assert TimerStore(str(tmp_path)).load() == ([], 1)
    aside = [name for name in os.listdir(tmp_path) if ".corrupt-" in name]
    assert len(aside) == 1 and (tmp_path / aside[0]).read_bytes() == content
    assert "does not read" in caplog.text


def test_a_link_in_place_of_the_file_is_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    directory = tmp_path / "timers"
    directory.mkdir()
    (directory / "timers.json").symlink_to(target)
    store = TimerStore(str(directory))
    assert store.load() == ([], 1)
    store.save([], 5)
    assert target.read_text() == "keep"


def test_a_fifo_in_place_of_the_file_does_not_hang_the_start(tmp_path):
    os.mkfifo(tmp_path / "timers.json")
    assert TimerStore(str(tmp_path)).load() == ([], 1)


def test_an_unusable_directory_is_a_named_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(timer_store.TimerStoreError, match="timer directory"):
        TimerStore(str(tmp_path / "file"))


# ---- the provider and its task on the fake clock ----

class Speech:
    """The center's speech: every text it was given, and what stops silenced."""

    def __init__(self) -> None:
        self.said: list[tuple[float, str]] = []

    async def announce(self, text, device, origin) -> list[str]:
        self.said.append((trio.current_time(), text))
        return ["recorder"]

    async def play(self, sound, origin) -> list[str]:
        self.said.append((trio.current_time(), sound))
        return ["recorder"]

    def silence(self, origins, everything) -> list[str]:
        return []


class Notices:
    """A listener of the center: the notices it gives, with when."""

    def __init__(self) -> None:
        self.given: list[tuple[float, object]] = []

    async def deliver(self, reply, origin) -> None:
        pass

    def notice(self, reply) -> None:
        self.given.append((trio.current_time(), reply))


def tools_on(tmp_path, center: Center, **config) -> TimerTools:
    timers = TimerTools(TimersConfig(**config), TimerStore(str(tmp_path)), center,
                        wall=lambda: EPOCH + trio.current_time())
    center.alarms = timers
    return timers


def center_with_speech() -> tuple[Center, Speech]:
    center = Center(runner=None)
    center.speech = speech = Speech()
    return center, speech


async def wait_for(condition) -> None:
    while not condition():
        await trio.sleep(0.5)


@pytest.mark.trio
async def test_a_timer_rings_its_label_until_a_stop(tmp_path, autojump_clock):
    center, speech = center_with_speech()
    center.add_listener(notices := Notices())
    timers = tools_on(tmp_path, center, ring_interval_seconds=5, ring_limit_seconds=600)
    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        began = trio.current_time()
        said = await timers.call_tool("timer_set", {"minutes": 3, "label": "tea"})
        assert said.startswith("timer t1 (tea) rings at ") and "in 3 minutes" in said
        await wait_for(lambda: len(speech.said) >= 3)
        assert speech.said[0] == (began + 180, "Timer tea is done.")
        assert [when - began for when, _ in speech.said[:3]] == [180, 185, 190]
        assert timers.status()["ringing"] == ["t1"] and timers.listing() == []
        # the ring's start is a notice of the center, given as it began
        assert notices.given == [(began + 180, TimerRing("ringing", "t1", "timer", "tea"))]
        stopped = await center.stop(StopAsks("test"))
        assert stopped is not None and list(stopped.asks) == []
        rung = len(speech.said)
        await trio.sleep(60)
        assert len(speech.said) == rung and timers.status()["ringing"] == []
        assert [reply for _, reply in notices.given] == [
            TimerRing("ringing", "t1", "timer", "tea"), TimerRing("quiet", "t1", "timer", "tea")]
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_chime_sounds_before_each_repetition_of_the_label(tmp_path, autojump_clock):
    from agent.core.replies import Sound

    chime = Sound(b"\x01\x00" * 800, 16000, 2, 1)
    center, speech = center_with_speech()
    timers = tools_on(tmp_path, center, ring_interval_seconds=5, ring_limit_seconds=600,
                      chime=chime)
    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        await timers.call_tool("timer_set", {"seconds": 30, "label": "eggs"})
        await wait_for(lambda: len(speech.said) >= 4)
        assert [what for _, what in speech.said[:4]] == [chime, "Timer eggs is done.",
                                                         chime, "Timer eggs is done."]
        await center.stop(StopAsks("test"))
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_stop_of_one_session_leaves_the_ring_alone(tmp_path, autojump_clock):
    center, speech = center_with_speech()
    timers = tools_on(tmp_path, center)
    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        await timers.call_tool("timer_set", {"seconds": 1, "label": "tea"})
        await wait_for(lambda: speech.said)
        assert await center.stop(StopAsks("test", session="kitchen")) is None
        assert timers.status()["ringing"] == ["t1"]
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_ring_nobody_stops_ends_at_its_limit(tmp_path, autojump_clock, caplog):
    center, speech = center_with_speech()
    caplog.set_level(logging.INFO, "homeagent.timers")
    center.add_listener(notices := Notices())
    timers = tools_on(tmp_path, center, ring_interval_seconds=5, ring_limit_seconds=60)
    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        await timers.call_tool("timer_set", {"seconds": 10, "label": "egg"})
        await trio.sleep(3600)
        assert len(speech.said) == 12  # at 0, 5, ... 55 s of its minute
        quiet = TimerRing("quiet", "t1", "timer", "egg")
        assert [(when - 10, reply.state) for when, reply in notices.given] == [
            (0, "ringing"), (60, "quiet")] and notices.given[1][1] == quiet
        assert timers.status()["ringing"] == [] and timers.status()["rung"] == 1
        assert "ringing ended, at its limit" in caplog.text
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_timer_due_while_the_daemon_was_down_rings_at_start_saying_how_late(
        tmp_path, autojump_clock):
    schedule = Schedule()
    schedule.set(TIMER, "bread", EPOCH - 600, EPOCH - 900)
    schedule.set(TIMER, "later", EPOCH + 600, EPOCH)
    TimerStore(str(tmp_path)).save(schedule.timers(), schedule.next_number)
    center, speech = center_with_speech()
    timers = tools_on(tmp_path, center)
    assert [t["id"] for t in timers.listing()] == ["t1", "t2"]
    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        await wait_for(lambda: speech.said)
        assert speech.said[0] == (0, "Timer bread is done. It rang 10 minutes late, while "
                                     "the assistant was not running.")
        assert [t["id"] for t in timers.listing()] == ["t2"]
        nursery.cancel_scope.cancel()
    # what rang is gone from the file too
    assert [t.id for t in TimerStore(str(tmp_path)).load()[0]] == ["t2"]


@pytest.mark.trio
async def test_a_cancelled_timer_never_rings_and_the_list_is_the_files(tmp_path, autojump_clock):
    center, speech = center_with_speech()
    timers = tools_on(tmp_path, center, timezone="Europe/Berlin")
    shown = []
    timers.watch(shown.append)
    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        await timers.call_tool("timer_set", {"hours": 1, "label": "oven"})
        await timers.call_tool("reminder_set", {"at": "23:59", "label": "bins"})
        listed = json.loads(await timers.call_tool("timer_list", {}))
        on_disk = TimerStore(str(tmp_path)).load()[0]
        assert [t["id"] for t in listed["timers"]] == [t.id for t in on_disk] == ["t1", "t2"]
        assert await timers.call_tool("timer_cancel", {"id": "t1"}) == "cancelled timer t1 (oven)"
        with pytest.raises(ToolError, match="no timer 't1' \\(t2\\)"):
            await timers.call_tool("timer_cancel", {"id": "t1"})
        await trio.sleep(3 * 3600)  # past the oven's hour, before 23:59 in Berlin
        assert speech.said == []
        nursery.cancel_scope.cancel()
    assert [s and s["id"] for s in shown] == [None, "t1", "t1", "t2"]


@pytest.mark.trio
async def test_bad_arguments_are_error_results_for_the_model(tmp_path, autojump_clock):
    center, _ = center_with_speech()
    toolbox = Toolbox()
    toolbox.add(tools_on(tmp_path, center, max_timers=1))

    async def call(name, arguments):
        return await toolbox.call(ToolCall(id="c", name=name, arguments=json.dumps(arguments),
                                           parsed=arguments))

    for name, arguments, error in [
            ("timer_set", {"label": "x"}, "from 1 s to 7 days, not 0 s"),
            ("timer_set", {"seconds": -5, "label": "x"}, "less than the minimum"),
            ("timer_set", {"seconds": 5, "label": "x" * 200}, "more than the maximum"),
            ("timer_set", {"seconds": 5, "label": "x", "board": "hall"}, "no MQTT broker"),
            ("reminder_set", {"at": "noon", "label": "x"}, "is no time"),
            ("timer_cancel", {"id": "../etc"}, "does not match the pattern")]:
        outcome = await call(name, arguments)
        assert outcome.is_error and error in outcome.content, (name, outcome)
    assert not (await call("timer_set", {"seconds": 5, "label": "x"})).is_error
    outcome = await call("timer_set", {"seconds": 5, "label": "y"})
    assert outcome.is_error and "cancel one first" in outcome.content


@pytest.mark.trio
async def test_a_disk_that_refuses_leaves_the_schedule_as_it_was(tmp_path, autojump_clock):
    center, _ = center_with_speech()
    timers = tools_on(tmp_path, center)
    await timers.call_tool("timer_set", {"seconds": 50, "label": "kept"})
    # a directory where the write's temporary file goes: refused even to root
    blocker = tmp_path / f".timers.json.tmp-{os.getpid()}"
    (blocker / "x").mkdir(parents=True)
    with pytest.raises(ToolError, match="the timers were not written"):
        await timers.call_tool("timer_set", {"seconds": 50, "label": "lost"})
    with pytest.raises(ToolError, match="the timers were not written"):
        await timers.call_tool("timer_cancel", {"id": "t1"})
    assert [t["label"] for t in timers.listing()] == ["kept"]
    (blocker / "x").rmdir()
    blocker.rmdir()
    await timers.call_tool("timer_set", {"seconds": 50, "label": "then"})
    assert [t.id for t in TimerStore(str(tmp_path)).load()[0]] == ["t1", "t2"]  # t2 was never promised


class AskingRunner:
    """A runner whose answer is one tool call, run in a child task as the
    real runner runs its calls."""

    def __init__(self, timers: TimerTools) -> None:
        self.timers = timers
        self.said: list[str] = []

    async def ask(self, prompt, session, provider, emit, stop) -> None:
        async def call() -> None:
            self.said.append(await self.timers.call_tool("timer_set",
                                                         {"seconds": 30, "label": prompt}))
        async with trio.open_nursery() as calls:
            calls.start_soon(call)


class Boards:
    def __init__(self) -> None:
        self.rung: list[tuple[str, str]] = []

    def check_board(self, board: str) -> None:
        if board != "kitchen":
            raise Refused(ErrorCode.UNKNOWN_BOARD, f"board {board!r} is not online")

    def announce_on(self, board, text, device) -> list[str]:
        self.rung.append((board, text))
        return [f"board:{board}"]


@pytest.mark.trio
async def test_the_asker_is_known_to_the_tool_and_a_speak_on_ask_rings_on_that_board(
        tmp_path, autojump_clock):
    center, speech = center_with_speech()
    center.boards = boards = Boards()
    timers = tools_on(tmp_path, center)
    center.runner = runner = AskingRunner(timers)
    assert asking() is None

    async def ignore(reply) -> None:
        pass

    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        await center.ask(Ask(center.origin(Door.DEVICE, "panel", "device-panel"), "tea"),
                         ignore)
        await center.ask(Ask(center.origin(Door.MQTT, "a1", speak_on="kitchen"), "soup"),
                         ignore)
        listed = timers.listing()
        assert [(t["label"], t["set_by"], t["board"]) for t in listed] == [
            ("tea", "device panel", None), ("soup", "mqtt a1", "kitchen")]
        await wait_for(lambda: speech.said and boards.rung)
        assert speech.said[0][1] == "Timer tea is done."
        assert boards.rung[0] == ("kitchen", "Timer soup is done.")
        nursery.cancel_scope.cancel()
    assert runner.said[1].endswith("on board kitchen, in 30 seconds")



# ---- [timers] in the config ----

def timers_table(text: str, where: str = "/etc/homeagent/config.toml"):
    from agent.service.config import parse
    from test_voice_config import LOCAL

    return parse(LOCAL + "[timers]\n" + text, where, {}).timers


def test_the_timers_table_is_read_and_its_chime_loaded(tmp_path):
    from voice_audio import write_wav

    write_wav(tmp_path / "chime.wav", b"\x10\x00" * 1600)
    config = timers_table('timezone = "Europe/Berlin"\nring_limit_seconds = 30\n'
                          'chime = "chime.wav"\n', str(tmp_path / "config.toml"))
    assert (config.timezone, config.ring_limit_seconds, config.ring_interval_seconds) == (
        "Europe/Berlin", 30.0, 5.0)
    assert (config.chime.rate, config.chime.pcm) == (16000, b"\x10\x00" * 1600)
    assert timers_table("").chime is None and timers_table("").enabled


@pytest.mark.parametrize("text,key,problem", [
    ('timezone = "Mars/Olympus"\n', "timers.timezone", "Mars/Olympus"),
    ("ring_limit_seconds = 0\n", "timers.ring_limit_seconds", "between"),
    ("max_timers = 1000\n", "timers.max_timers", "between"),
    ('chime = "nowhere.wav"\n', "timers.chime", "not a PCM WAV file"),
    ("chime = 3\n", "timers.chime", "expected a string"),
    ("alarm = true\n", "timers.alarm", "unknown key"),
])
def test_timers_mistakes_are_named(text, key, problem):
    from agent.service.config import ConfigError

    with pytest.raises(ConfigError) as caught:
        timers_table(text)
    assert key in str(caught.value) and problem in str(caught.value), str(caught.value)
