"""The timers and reminders of one daemon, sans-IO: no clock, no disk.

The caller gives every time (seconds since the epoch, a wall clock, since
a timer outlives the process and the boot): set() checks the bounds and
adds one, cancel() removes one, timers() lists them soonest first, due(now)
takes out those whose time has come, next_due() says when to wake. A
reminder's local time is turned into such a time by reminder_time(), in a
zoneinfo zone, so "7:00" stays 7:00 across a change of daylight saving.

Everything the model (or a socket client) can make the daemon hold is
bounded: the count of timers, a label's length and characters, how far
ahead. Each refusal is a ScheduleError subclass whose str() is said to
the model or the client.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import unicodedata
from dataclasses import asdict, dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MAX_TIMERS = 32
MAX_LABEL_CHARS = 80
MIN_TIMER_SECONDS = 1.0
MAX_TIMER_SECONDS = 7 * 86400.0
MAX_REMINDER_SECONDS = 366 * 86400.0
TIMER = "timer"
REMINDER = "reminder"
KINDS = (TIMER, REMINDER)
TIMER_ID = re.compile(r"t[1-9][0-9]{0,9}")
# "7:30", "07:30:15", or a date and time "2025-03-30T07:30" (a space for the T too)
_CLOCK = re.compile(r"([01]?[0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9]))?")


class ScheduleError(Exception):
    """A refused change: str() says why, for the model or the client."""


class TooManyTimers(ScheduleError):
    pass


class UnknownTimer(ScheduleError):
    pass


class BadLabel(ScheduleError):
    pass


class BadTime(ScheduleError):
    pass


@dataclass(frozen=True, slots=True)
class Timer:
    id: str
    kind: str          # TIMER or REMINDER
    label: str
    due: float         # when it rings, seconds since the epoch
    set_at: float
    board: str | None  # another board on the broker; None: this daemon's speech devices
    set_by: str        # who set it, as shown: "device board", "client 3", "mqtt"

    def shown(self, zone: dt.tzinfo, now: float) -> dict:
        """The timer as the socket, the CLI, MQTT and the model see it."""
        return {**asdict(self), "at": local_iso(self.due, zone),
                "remaining": round(max(0.0, self.due - now), 1)}


def local_iso(when: float, zone: dt.tzinfo) -> str:
    """A time as ISO 8601 in the zone, with its offset: Home Assistant's timestamp."""
    return dt.datetime.fromtimestamp(when, zone).isoformat(timespec="seconds")


def check_label(label: str) -> str:
    label = label.strip()
    if not label:
        raise BadLabel("the label is empty: say what the timer is for")
    if len(label) > MAX_LABEL_CHARS:
        raise BadLabel(f"the label has {len(label)} characters, more than {MAX_LABEL_CHARS}")
    # it is spoken and shown on boards' lines and displays: text only
    if any(unicodedata.category(c)[0] == "C" for c in label):
        raise BadLabel("the label holds a control or format character")
    return label


class Schedule:
    def __init__(self, max_timers: int = MAX_TIMERS, timers: tuple[Timer, ...] = (),
                 next_number: int = 1) -> None:
        self.max_timers = max_timers
        self._timers = {timer.id: timer for timer in timers}
        self.next_number = max(next_number, 1 + max(
            (int(t.id[1:]) for t in timers), default=0))

    def set(self, kind: str, label: str, due: float, now: float, *, board: str | None = None,
            set_by: str = "") -> Timer:
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r}")
        label = check_label(label)
        ahead = due - now
        if kind == TIMER and not MIN_TIMER_SECONDS <= ahead <= MAX_TIMER_SECONDS:
            raise BadTime(f"a timer runs from {MIN_TIMER_SECONDS:g} s to "
                          f"{MAX_TIMER_SECONDS / 86400:g} days, not {ahead:g} s")
        if kind == REMINDER and not 0 < ahead <= MAX_REMINDER_SECONDS:
            raise BadTime("a reminder is for a time to come, within a year" if ahead > 0
                          else "that time has passed")
        if len(self._timers) >= self.max_timers:
            raise TooManyTimers(f"{len(self._timers)} timers and reminders are set, the most "
                                "this board keeps; cancel one first")
        timer = Timer(f"t{self.next_number}", kind, label, due, now, board, set_by)
        self.next_number += 1
        self._timers[timer.id] = timer
        return timer

    def cancel(self, timer_id: str) -> Timer:
        timer = self._timers.pop(timer_id, None)
        if timer is None:
            known = ", ".join(t.id for t in self.timers()) or "none is set"
            raise UnknownTimer(f"no timer {timer_id!r} ({known})")
        return timer

    def timers(self) -> list[Timer]:
        """Every timer and reminder, the soonest first."""
        return sorted(self._timers.values(), key=lambda t: (t.due, int(t.id[1:])))

    def next_due(self) -> float | None:
        return min((t.due for t in self._timers.values()), default=None)

    def due(self, now: float) -> list[Timer]:
        """The timers whose time has come (the soonest first), out of the schedule."""
        rung = [t for t in self.timers() if t.due <= now]
        for timer in rung:
            del self._timers[timer.id]
        return rung

    def __len__(self) -> int:
        return len(self._timers)


def reminder_time(text: str, zone: dt.tzinfo, now: float) -> float:
    """When a reminder for `text` rings: "HH:MM[:SS]" is its next coming in
    the zone (today, or else tomorrow: by the calendar, so across a change
    of daylight saving it is still that wall-clock time), or a date and
    time "YYYY-MM-DDTHH:MM[:SS]" in the zone. A time the clocks skip (in a
    spring-forward gap) rings as the zone maps it, after the gap."""
    text = text.strip()
    clock = _CLOCK.fullmatch(text)
    if clock is not None:
        today = dt.datetime.fromtimestamp(now, zone).date()
        wall = dt.time(int(clock[1]), int(clock[2]), int(clock[3] or 0))
        for day in (today, today + dt.timedelta(days=1)):
            when = dt.datetime.combine(day, wall, zone).timestamp()
            if when > now:
                return when
        raise AssertionError("tomorrow's time is past")  # pragma: no cover
    try:
        local = dt.datetime.fromisoformat(text)
    except ValueError:
        raise BadTime(f"{text[:40]!r} is no time: \"HH:MM\" or \"YYYY-MM-DDTHH:MM\"") from None
    if local.tzinfo is not None:
        raise BadTime("give the local time without an offset: the board's time zone applies")
    return local.replace(tzinfo=zone).timestamp()


def zone_named(name: str) -> dt.tzinfo:
    """The zone of the config's timers.timezone; "" is the system's ($TZ,
    else /etc/localtime, else UTC). Raises ValueError naming a zone not found."""
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"no time zone named {name!r} (such as \"Europe/Berlin\")") \
                from None
    environ_zone = os.environ.get("TZ", "").removeprefix(":")
    if environ_zone:
        with contextlib.suppress(ZoneInfoNotFoundError, ValueError):
            return ZoneInfo(environ_zone)  # a POSIX rule such as "CET-1" is no key: the file
    try:
        with open("/etc/localtime", "rb") as file:
            return ZoneInfo.from_file(file, key="localtime")
    except (OSError, ValueError):
        return dt.timezone.utc
