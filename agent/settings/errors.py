"""A bad setting of a device or tool provider's own table, named by its key."""

from __future__ import annotations

from typing import Any, Mapping


class SettingError(ValueError):
    """A bad setting: key (dotted, within the table) and problem."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def refuse_unknown(settings: Mapping[str, Any], known) -> None:
    """A table may hold only its known keys: the first unknown one is named,
    with the others and the known ones."""
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise SettingError(unknown[0], f"unknown setting{'s' if len(unknown) > 1 else ''} "
                           f"{', '.join(unknown)} (known: {', '.join(sorted(known))})")
