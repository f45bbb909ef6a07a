"""How the Wyoming peers of the tests (wyoming_asr_server.py,
wyoming_wake_server.py) misbehave when told to, in one place."""

from __future__ import annotations

import asyncio

FAULTS = ("stall", "garbage", "error")


async def misbehave(handler, mode: str | None, error_text: str) -> bool:
    """Act out mode on the handler's connection: stall (never answer),
    garbage (a line that is not Wyoming) or error (an error event); whether
    it was a fault."""
    if mode == "stall":
        await asyncio.sleep(3600)
    elif mode == "garbage":
        handler.writer.write(b"this is not wyoming\n")
        await handler.writer.drain()
    elif mode == "error":
        from wyoming.error import Error

        await handler.write_event(Error(text=error_text).event())
    else:
        return False
    return True
