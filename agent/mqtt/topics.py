"""The topic tree, version 1 (docs/mqtt.md), of one board under a prefix."""

from __future__ import annotations

import re
from dataclasses import dataclass

TREE_VERSION = 1
BOARD_NAME = re.compile(r"[a-z0-9_-]{1,64}")
HOUSE = "house"  # <prefix>/house/ask: an ask to whichever board takes it


def board_name(raw: str) -> str:
    """raw (a host name) as a board name: lower case, [a-z0-9_-], at most 64."""
    name = re.sub(r"[^a-z0-9_-]+", "-", raw.lower()).strip("-")[:64]
    return name or "homeagent"


def _own(leaf: str) -> property:
    return property(lambda self: self.of(self.board, leaf), doc=f"<prefix>/<board>/{leaf}")


@dataclass(frozen=True)
class Topics:
    prefix: str
    board: str

    def of(self, board: str, leaf: str) -> str:
        return f"{self.prefix}/{board}/{leaf}"

    availability = _own("availability")
    state = _own("state")
    voice = _own("voice")        # the voice door's state, with [voice]
    ask = _own("ask")            # in
    announce = _own("announce")  # in
    stop = _own("stop")          # in
    answer = _own("answer")
    done = _own("done")
    delta = _own("delta")
    tool_call = _own("tool_call")
    tool_result = _own("tool_result")
    error = _own("error")
    event = _own("event")        # Home Assistant's event entity
    next_timer = _own("next_timer")  # retained: the soonest timer or reminder
    next_timer_at = _own("next_timer/at")  # retained: its time alone, while there is one

    @property
    def house_ask(self) -> str:
        return f"{self.prefix}/{HOUSE}/ask"

    @property
    def house_share(self) -> str:
        """The shared subscription to house_ask: the broker gives each ask
        to one subscriber of the group, i.e. one board."""
        return f"$share/{self.prefix}/{self.house_ask}"

    @property
    def house_claim(self) -> str:
        """Where boards that heard a wake word claim the utterance (claims.py)."""
        return f"{self.prefix}/{HOUSE}/claim"

    @property
    def every_availability(self) -> str:
        """Every board's availability: which boards are online."""
        return f"{self.prefix}/+/availability"

    @property
    def every_voice(self) -> str:
        """Every board's voice state: which boards hear ([voice])."""
        return f"{self.prefix}/+/voice"

    def commands(self) -> list[str]:
        """What the board subscribes to for commands (QoS 2: a publisher's
        QoS 2 ask runs exactly once)."""
        return [self.ask, self.announce, self.stop, self.house_share]

    def subscriptions(self) -> list[tuple[str, int]]:
        """(topic filter, QoS) of every board topic the board subscribes to:
        the commands, every board's availability and voice state, the claims
        (QoS 0: one that comes late is of no use)."""
        return [*((topic, 2) for topic in self.commands()), (self.every_availability, 1),
                (self.every_voice, 1), (self.house_claim, 0)]

    def board_of_availability(self, topic: str) -> str | None:
        """The board whose availability topic this is; None for any other
        topic, and for a level that is no board name (it will never be
        made into a topic of ours)."""
        return self._board_of(topic, "/availability")

    def board_of_voice(self, topic: str) -> str | None:
        """The board whose voice state topic this is, as board_of_availability."""
        return self._board_of(topic, "/voice")

    def _board_of(self, topic: str, leaf: str) -> str | None:
        head, _, board = topic.removesuffix(leaf).rpartition("/")
        if head == self.prefix and topic.endswith(leaf) and BOARD_NAME.fullmatch(board):
            return board
        return None
