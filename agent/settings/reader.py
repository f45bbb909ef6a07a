"""Typed reads of TOML tables, for the config and the device types' settings.

A value is read as TOML's types go: a bool is no number, an integer is also
a float, a float must be finite; bounds are checked with the value in the
message. A problem is raised as the reader's error(key, problem) makes it:
ConfigError with the file and the line for the config, SettingError for a
device's settings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.jsontypes import is_type
from agent.settings.lines import dotted, locate

REQUIRED: Any = object()
_EXPECTED = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "an array", dict: "a table"}
_KINDS = ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
          (list, "an array"), (dict, "a table"))


class ConfigError(Exception):
    """A config the daemon cannot run with. line is None when unknown,
    key is None when the problem is about the whole file."""

    def __init__(self, path: str, problem: str, key: str | None = None,
                 line: int | None = None):
        self.path, self.problem, self.key, self.line = path, problem, key, line
        where = path if line is None else f"{path}:{line}"
        super().__init__(f"{where}: {key}: {problem}" if key else f"{where}: {problem}")


def is_toml(value: Any, kind: type) -> bool:
    """TOML's types as the schema sees them: a bool is no number, an int is a float."""
    return is_type(value, (int, float) if kind is float else kind)


def describe(value: Any) -> str:
    return next((name for kind, name in _KINDS if is_type(value, kind)), "a date or time")


class Reader:
    """The keys of one table, read with their types and bounds checked.
    error(name, problem) makes the exception for a key (None: the table)."""

    def __init__(self, values: Mapping[str, Any],
                 error: Callable[[str | None, str], Exception]) -> None:
        self.values, self.error = values, error

    def get(self, name: str, kind: type, default: Any = REQUIRED) -> Any:
        if name not in self.values:
            if default is REQUIRED:
                raise self.error(name, "required key is missing")
            return default
        value = self.values[name]
        if not is_toml(value, kind):
            raise self.error(name, f"expected {_EXPECTED[kind]}, got {describe(value)}")
        if kind is float:
            if not math.isfinite(value):
                raise self.error(name, f"expected a finite number, got {value}")
            return float(value)
        return value

    def integer(self, name: str, default: int, low: int, high: int | None = None) -> int:
        return self._within(name, self.get(name, int, default), low, high)

    def number(self, name: str, default: float, low: float, high: float | None = None) -> float:
        return self._within(name, self.get(name, float, default), low, high)

    def positive(self, name: str, default: float) -> float:
        value = self.number(name, default, 0)
        if value <= 0:
            raise self.error(name, "must be positive")
        return value

    def choice(self, name: str, choices: tuple, default: Any) -> Any:
        value = self.values.get(name, default)
        # `stopbits = true` is a mistake, not one stop bit, though True == 1
        if not is_type(value, (int, float, str)) or value not in choices:
            raise self.error(name, "one of " + ", ".join(map(str, choices)))
        return value

    def _within(self, name: str, value: Any, low: float, high: float | None) -> Any:
        if high is None and value < low:
            raise self.error(name, f"must be at least {low}, got {value}")
        if high is not None and not low <= value <= high:
            raise self.error(name, f"must be between {low} and {high}, got {value}")
        return value


@dataclass(frozen=True)
class Source:
    """The config file: its path and text, for messages that name a line."""
    path: str
    text: str

    def error(self, key: tuple[str, ...], problem: str) -> ConfigError:
        return ConfigError(self.path, problem, dotted(key) if key else None,
                           locate(self.text, key))


class Table(Reader):
    """One table of the config file. known=None takes any key (provider
    names, header names); an unknown key or table is an error."""

    def __init__(self, source: Source, key: tuple[str, ...], values: Mapping[str, Any],
                 known: tuple[str, ...] | None = None):
        super().__init__(values, lambda name, problem: source.error(
            key if name is None else (*key, name), problem))
        self.source, self.key = source, key
        for name, value in values.items():
            if known is not None and name not in known:
                what = "table" if isinstance(value, dict) else "key"
                raise self.error(name, f"unknown {what} (known: {', '.join(known)})")

    def table(self, name: str, known: tuple[str, ...] | None = None) -> Table:
        return Table(self.source, (*self.key, name), self.get(name, dict, {}), known)
