"""Helpers shared by the tests (h11's tests/helpers.py is the model)."""

from __future__ import annotations

import trio

from conftest import timeout


def of_type(replies: list[dict], kind: str) -> list[dict]:
    """The replies (socket API objects) of one type, in order."""
    return [r for r in replies if r["type"] == kind]


async def until(condition, seconds: float = 5) -> None:
    """Wait, polling, until condition() holds; fail after `seconds` (scaled)."""
    with trio.fail_after(timeout(seconds)):
        while not condition():
            await trio.sleep(0.005)
