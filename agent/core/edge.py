"""The masking edge: every reply, origin and value leaves the daemon through
here, whichever door or device it goes to.

The center passes each reply of an ask through masked() once, before the
asker and any listener (subscribers, devices, the MQTT board) sees it; an
Origin's wire form is made by outgoing() when the origin is made; a door's
own replies (the socket's status, the MQTT refusals, the Wyoming echoes)
pass outgoing() or masked() where the door makes them. The encoders after
this point mask nothing: what reaches them is already what may leave.

outgoing(): each string (keys too) with the configured secrets masked
(agent/masking.py), each float JSON cannot hold (NaN, Infinity, as a damaged
session file may give) null. Enums stay what they are: their values are the
daemon's own words.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Mapping

from agent import masking
from agent.core import replies

_TEXT = (replies.Delta, replies.Reasoning, replies.Refusal)


def outgoing(value: Any) -> Any:
    """value as it may leave the daemon: each string masked, each float
    JSON cannot hold None; mappings and sequences walked (a sequence
    becomes a list)."""
    if isinstance(value, enum.Enum):
        return value
    if isinstance(value, str):
        return masking.mask(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {outgoing(k): outgoing(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [outgoing(item) for item in value]
    return value


def masked(reply: replies.Reply) -> replies.Reply:
    """The reply as it may leave: the same object when nothing in it
    changes (the per-token path makes no copy)."""
    kind = type(reply)
    if kind in _TEXT:
        text = masking.mask(reply.text)
        return reply if text is reply.text else kind(text)
    changes = {}
    for field in dataclasses.fields(reply):
        value = getattr(reply, field.name)
        if isinstance(value, (str, float, Mapping, list, tuple)) \
                and not isinstance(value, enum.Enum):
            changes[field.name] = outgoing(value)
    return dataclasses.replace(reply, **changes) if changes else reply
