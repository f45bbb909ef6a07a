"""The types of JSON and TOML values in Python terms.

Python's bool is an int, so `isinstance(True, int)` holds; to JSON and TOML
`true` is no number. Every check of a value's type that must tell the two
apart goes through is_type.
"""

from __future__ import annotations

from typing import Any


def is_type(value: Any, kind: type | tuple[type, ...]) -> bool:
    """isinstance(value, kind), except that a bool is only ever a bool."""
    if isinstance(value, bool):
        return bool in kind if isinstance(kind, tuple) else kind is bool
    return isinstance(value, kind)
