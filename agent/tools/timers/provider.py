"""TimerTools: the model's timers and reminders, and the task that rings them.

A tool provider (agent/tools/base.py) of four tools: timer_set,
reminder_set, timer_list and timer_cancel. The schedule is the sans-IO
Schedule (schedule.py), kept on disk by TimerStore (store.py) after every
change, before the model is told: what timer_list, the socket's `timers`,
`homeagent timers` and the MQTT topic show is what the file holds, never
what a model remembers saying.

The board a timer rings on is the asker's (agent/core/center.py's
asking(), the Origin of the ask whose tool call this is): an ask spoken on
another board (speak_on) rings there, through the broker; any other on this
daemon's speech devices. The model may name another board itself.

run() is the thin trio shell: it sleeps until the next due time
(trio.sleep_until, so trio's MockClock drives it in tests), at most
WALL_CHECK at a time, since due times are wall-clock times (they survive a
reboot) and a board without a clock chip steps its wall clock when NTP
answers. A timer that came due, also while the daemon was down, leaves the
schedule and rings: its label spoken through the center's announce every
ring_interval_seconds (the first time with how late it is, when it is),
until a stop of everything (Center.stop calls silence(): the socket's
`stop`, a board's STOP, MQTT's stop, a barge-in wake word) or
ring_limit_seconds. With a `chime` (a WAV file), each repetition plays it
first on this board's speech devices (the center's play(), as the voice
door's wake sound); a ring on another board is its announce alone. Its
start and end are notices of the center (replies.TimerRing): the socket's
subscribers see them, and a serial board here shows them as TIMER lines.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from typing import Any, Callable, Mapping

import trio

from agent.core import replies
from agent.core.center import Center, asking
from agent.core.commands import Announce, Door, Origin, Refused
from agent.core.edge import outgoing
from agent.tools.base import ToolError, ToolSpec
from agent.tools.timers.config import TimersConfig
from agent.tools.timers.schedule import (MAX_LABEL_CHARS, MAX_TIMER_SECONDS, REMINDER, TIMER,
                                         Schedule, ScheduleError, Timer, local_iso,
                                         reminder_time, zone_named)
from agent.tools.timers.store import TimerStore, TimerStoreError

log = logging.getLogger("homeagent.timers")

WALL_CHECK = 60.0  # seconds the task sleeps at most: a stepped wall clock is seen this soon
LATE_NOTE = 2.0    # seconds late a ring says it is late
_BOARD = {"type": "string", "pattern": "^[a-z0-9_-]{1,64}$",
          "description": "another board on the MQTT broker to ring on; "
                         "leave out to ring where you were asked"}
_LABEL = {"type": "string", "minLength": 1, "maxLength": MAX_LABEL_CHARS,
          "description": "what it is for, spoken when it rings, such as \"tea\""}
_AMOUNT = {"type": "number", "minimum": 0, "maximum": MAX_TIMER_SECONDS}
TOOLS = (
    ToolSpec("timer_set", "Start a timer that rings after a duration (give hours, minutes "
             "and/or seconds; 1 second to 7 days)",
             {"type": "object", "properties": {"hours": _AMOUNT, "minutes": _AMOUNT,
                                               "seconds": _AMOUNT, "label": _LABEL,
                                               "board": _BOARD},
              "required": ["label"], "additionalProperties": False}),
    ToolSpec("reminder_set", "Set a reminder that rings at a local time: \"HH:MM\" (the next "
             "one to come) or \"YYYY-MM-DDTHH:MM\", within a year",
             {"type": "object", "properties": {"at": {"type": "string", "maxLength": 32},
                                               "label": _LABEL, "board": _BOARD},
              "required": ["at", "label"], "additionalProperties": False}),
    ToolSpec("timer_list", "List the timers and reminders that are set, with their ids and "
             "when they ring",
             {"type": "object", "properties": {}, "additionalProperties": False}),
    ToolSpec("timer_cancel", "Cancel a timer or reminder by its id (from timer_list)",
             {"type": "object", "properties": {"id": {"type": "string",
                                                      "pattern": "^t[0-9]{1,10}$"}},
              "required": ["id"], "additionalProperties": False}),
)
TOOL_NAMES = tuple(tool.name for tool in TOOLS)

NextWatcher = Callable[[dict], None]


def set_by(origin: Origin | None) -> str:
    """Who set a timer, as the list shows it."""
    if origin is None:
        return "unknown"
    if origin.door is Door.SOCKET:
        return f"client {origin.client}"
    return f"{origin.door.value} {origin.name}"[:64] if origin.name is not None \
        else origin.door.value


def spoken_duration(seconds: float) -> str:
    seconds = round(seconds)
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = round(seconds / size)
            return f"{count} {unit}{'s' * (count != 1)}"
    return f"{seconds} second{'s' * (seconds != 1)}"


def ring_text(timer: Timer, late: float) -> str:
    said = f"Timer {timer.label} is done." if timer.kind == TIMER \
        else f"Reminder: {timer.label}."
    if late >= LATE_NOTE:
        said += f" It rang {spoken_duration(late)} late, while the assistant was not running."
    return said


class TimerTools:
    name = "timers"

    def __init__(self, config: TimersConfig, store: TimerStore, center: Center, *,
                 wall: Callable[[], float] = time.time) -> None:
        self.config = config
        self.store = store
        self.center = center
        self.wall = wall
        self.zone = zone_named(config.timezone)
        timers, next_number = store.load()
        self.schedule = Schedule(config.max_timers, tuple(timers), next_number)
        self._ringing: dict[str, trio.CancelScope] = {}
        self._wake = trio.CancelScope()
        self._watchers: list[NextWatcher] = []
        self.rung = 0

    # ---- the tool provider ----

    def offered(self) -> tuple[ToolSpec, ...]:
        return TOOLS

    def unavailable(self) -> str | None:
        return None

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        now = self.wall()
        try:
            if name == "timer_list":
                return json.dumps({"now": local_iso(now, self.zone), "timers": self.listing()},
                                  ensure_ascii=False)
            if name == "timer_cancel":
                timer = self.cancel(arguments["id"])
                return f"cancelled {timer['kind']} {timer['id']} ({timer['label']})"
            board = self._board(arguments.get("board"))
            if name == "timer_set":
                seconds = sum(arguments.get(unit, 0) * size for unit, size
                              in (("hours", 3600), ("minutes", 60), ("seconds", 1)))
                timer = self._set(TIMER, arguments["label"], now + seconds, now, board)
            else:
                timer = self._set(REMINDER, arguments["label"],
                                  reminder_time(arguments["at"], self.zone, now), now, board)
        except (ScheduleError, TimerStoreError) as error:
            raise ToolError(str(error)) from None
        where = f" on board {board}" if board is not None else ""
        return (f"{timer.kind} {timer.id} ({timer.label}) rings at "
                f"{local_iso(timer.due, self.zone)}{where}, in "
                f"{spoken_duration(timer.due - now)}")

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "timers": len(self.schedule), "next": self.next_timer(),
                "ringing": sorted(self._ringing), "rung": self.rung,
                "timezone": str(self.zone), "file": self.store.path}

    def _board(self, named: str | None) -> str | None:
        """Where a timer set now rings: the named board, or the asker's."""
        origin = asking()
        board = named if named is not None else origin.speak_on if origin else None
        if board is not None:
            try:
                self.center.board(board)
            except Refused as refusal:
                raise ToolError(str(refusal)) from None
        return board

    # ---- without the model: the socket, the CLI, MQTT ----

    def listing(self) -> list[dict]:
        """Every timer and reminder as the file holds it, soonest first."""
        now = self.wall()
        return outgoing([timer.shown(self.zone, now) for timer in self.schedule.timers()])

    def next_timer(self) -> dict | None:
        timers = self.listing()
        return timers[0] if timers else None

    def cancel(self, timer_id: str) -> dict:
        """Cancel one; raises UnknownTimer, or TimerStoreError (then it stays)."""
        cancelled = self._change(lambda schedule: schedule.cancel(timer_id))
        log.info("%s %s (%s) cancelled", cancelled.kind, cancelled.id, cancelled.label)
        return outgoing(cancelled.shown(self.zone, self.wall()))

    def watch(self, watcher: NextWatcher) -> None:
        """watcher(next timer or None) now and after every change."""
        self._watchers.append(watcher)
        watcher(self.next_timer())

    def silence(self) -> int:
        """End every ring now (a stop of everything); how many were ringing."""
        for scope in self._ringing.values():
            scope.cancel()
        return len(self._ringing)

    # ---- changes, kept on disk first ----

    def _set(self, kind: str, label: str, due: float, now: float, board: str | None) -> Timer:
        who = set_by(asking())
        timer = self._change(lambda schedule: schedule.set(kind, label, due, now, board=board,
                                                           set_by=who))
        log.info("%s %s (%s) set by %s, due %s", kind, timer.id, timer.label, who,
                 local_iso(due, self.zone))
        return timer

    def _change(self, change: Callable[[Schedule], Any]):
        """Apply change to the schedule and write the file; when the disk
        refuses, the schedule is as it was and TimerStoreError says why."""
        schedule = self.schedule
        before = (tuple(schedule.timers()), schedule.next_number)
        result = change(schedule)
        try:
            self.store.save(schedule.timers(), schedule.next_number)
        except TimerStoreError:
            self.schedule = Schedule(schedule.max_timers, *before)
            raise
        self._changed()
        return result

    def _changed(self) -> None:
        self._wake.cancel()
        shown = self.next_timer()
        for watcher in self._watchers:
            watcher(shown)

    # ---- the shell ----

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as rings:
            task_status.started()
            while True:
                now = self.wall()
                due = self.schedule.due(now)
                if due:
                    try:
                        self.store.save(self.schedule.timers(), self.schedule.next_number)
                    except TimerStoreError as error:  # they ring all the same
                        log.error("%s; a restart may ring them again", error)
                    self._changed()
                for timer in due:
                    rings.start_soon(self._ring, timer, now - timer.due)
                next_due = self.schedule.next_due()
                sleep = WALL_CHECK if next_due is None else min(WALL_CHECK, next_due - now)
                with trio.CancelScope() as self._wake:
                    await trio.sleep_until(trio.current_time() + sleep)

    def _notice(self, timer: Timer, state: str) -> None:
        """A ring's start and end to the center's listeners: the socket's
        subscribers, and a serial board's TIMER line when it rings here."""
        self.center.notice(replies.TimerRing(state, timer.id, timer.kind, timer.label,
                                             timer.board))

    async def _ring(self, timer: Timer, late: float) -> None:
        config = self.config
        self.rung += 1
        log.info("%s %s (%s) rings%s", timer.kind, timer.id, timer.label,
                 f", {late:.0f} s late" if late >= LATE_NOTE else "")
        refused = False
        with trio.CancelScope() as scope:
            self._ringing[timer.id] = scope
            self._notice(timer, "ringing")
            scope.deadline = trio.current_time() + config.ring_limit_seconds
            try:
                for repetition in itertools.count():
                    text = ring_text(timer, late if repetition == 0 else 0)
                    try:
                        if config.chime is not None and timer.board is None:
                            await self.center.play(config.chime)
                        await self.center.announce(Announce(text, board=timer.board))
                    except Refused as refusal:
                        if not refused:  # said once a ring, not every repetition
                            log.warning("%s %s: cannot ring: %s", timer.kind, timer.id,
                                        refusal)
                        refused = True
                    except Exception:  # a bug costs this ring, never the daemon
                        log.exception("%s %s: ringing failed", timer.kind, timer.id)
                        return
                    await trio.sleep(config.ring_interval_seconds)
            finally:
                del self._ringing[timer.id]
                self._notice(timer, "quiet")
        how = "stopped" if trio.current_time() < scope.deadline else "at its limit"
        log.info("%s %s: ringing ended, %s", timer.kind, timer.id, how)

