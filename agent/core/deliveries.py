"""What a device receives: one reply of an ask (or an announcement) with
its Origin, typed; with replies.Sentence, the answer's text cut by the
segmenter (agent/text/segmenter.py), for devices that speak or display it;
with replies.VoiceState, the voice door's state, and replies.TimerRing, a
timer ringing here or gone quiet (each with the hub's Origin for that
kind of notice), for a board that shows them.

A handler matches on the class (`case Delta(text)`, `case Done()`), never
on a type string; `kind` is the name a device's `events` setting uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.core import replies
from agent.core.commands import Origin


# What a device's `events` setting may name, and the classes they are.
KINDS: dict[str, type] = {cls.type: cls for cls in (
    replies.Sentence, replies.Started, replies.Delta, replies.Reasoning, replies.ToolCall,
    replies.ToolResult, replies.Done, replies.Error, replies.VoiceState, replies.TimerRing)}


@dataclass(frozen=True, slots=True)
class Delivery:
    reply: replies.Reply
    origin: Origin

    @property
    def kind(self) -> str:
        return self.reply.type
