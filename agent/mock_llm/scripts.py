"""The scripted answers: which answer a conversation gets.

Pure functions of the request, so the same request always gets the same
answer. The wire formats only differ in where they keep the messages and
the tools; `Conversation` is what is left once that is read
(agent/mock_llm/wire.py reads it), and `choose_answer` decides from it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, replace

from agent.providers.resume import sentence_starts

ENGLISH = "The living room is 21.5 °C and the humidity is 40 %. Anything else?"
CHINESE = "客厅现在是二十一度半，湿度百分之四十。还需要什么吗？"
GERMAN = "Im Wohnzimmer sind es 21,5 °C. Die Tür ist zu, die Lüftung läuft – schöne Grüße!"
# A skin-tone modifier, a ZWJ family and a flag: deltas of a few code points
# cut these grapheme clusters, as real streams do.
EMOJI = "Lights off 💡➡️🌙, door locked 🔒, plants watered 🪴💧. Good night 👋🏽 from 👨‍👩‍👧 in 🇩🇪!"
REASONING = ("The user asks why the heating is on. The thermostat schedule keeps "
             "the living room at 21 °C from 06:00 to 22:00, and it is daytime.")
REASONED = "The heating is on because the schedule keeps the living room at 21 °C from 06:00 to 22:00."
NO_SWITCH_TOOL = "I cannot switch anything: no switching tool was offered."
# The reasoning before a tool call, asked for by a prompt with both switch
# and reason words (and, in Anthropic's format, thinking turned on). A
# reasoning model's provider requires it back in the requests after the
# tool step (docs/reasoning-replay.md); the mock answers 400 when it is not.
REASONING_TOOL = "The user wants it switched → the switching tool does that, so I call it (21 °C)."

_SWITCH_WORDS = re.compile(r"\bswitch|\bturn (on|off)\b|schalte|打开|关闭|开灯|关灯")
_OFF_WORDS = re.compile(r"\boff\b|\baus\b|ausschalten|关")
_REASON_WORDS = re.compile(r"\bwhy\b|\bthink|\breason|\bwarum\b|为什么")
_CJK = re.compile(r"[\u3400-\u9fff]")
_GERMAN = re.compile(r"[äöüß]|\bdeutsch|\bgerman")
# A tool whose name holds one of these can switch something.
_SWITCH_TOOL_WORDS = ("relay", "switch", "light", "power", "set_")


@dataclass(frozen=True, slots=True)
class Conversation:
    """What decides the answer: the last user text, the tool result when the
    last message is one, and the names of the tools offered, in order.
    continues: the text of a cut answer the request asks to continue, as a
    final assistant message (a prefill) or, with restart, followed by the
    daemon's instruction to continue."""
    user_text: str
    tool_result: str | None
    tool_names: tuple[str, ...]
    thinking: bool = True  # may reason before a tool call (Anthropic: thinking enabled)
    continues: str | None = None
    restart: bool = False


@dataclass(frozen=True, slots=True)
class ToolUse:
    name: str
    arguments: dict
    raw: str | None = None  # the argument string to send instead, valid JSON or not
    count: int = 1          # the same call this many times in one answer (Chat Completions)


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    reasoning: str = ""
    tool_use: ToolUse | None = None


def confirmation(tool_result: str) -> str:
    return f"Done. The device reported: {tool_result.strip()[:200]}"


def forced_tool_call(spec: str) -> Answer:
    """The tool call an x-mock-tool-call header asks for: a JSON object with
    "name" and "arguments" (the exact string the model sends, so a test can
    send an unknown tool, arguments off the schema, or invalid JSON), and
    optionally "count": how many such calls the answer makes, or "size": the
    arguments are that many bytes, the given ones padded with a "pad" string
    (Chat Completions and Anthropic send the calls of an answer one after
    the other, so "count" is sent by those formats only)."""
    value = json.loads(spec)
    count, size = (value.get("count", 1), value.get("size", 0)) if isinstance(value, dict) \
        else (None, None)
    if not (isinstance(value, dict) and isinstance(value.get("name"), str)
            and isinstance(value.get("arguments"), str)
            and type(count) is int and count >= 1 and type(size) is int):
        raise ValueError('x-mock-tool-call is {"name": "...", "arguments": "...", '
                         '"count": 1, "size": 0}')
    arguments = value["arguments"]
    if size:
        head = json.loads(arguments)
        padding = max(0, size - len(json.dumps({**head, "pad": ""})))
        arguments = json.dumps({**head, "pad": "x" * padding})
    return Answer(f"Calling {value['name']}.",
                  tool_use=ToolUse(value["name"], {}, raw=arguments, count=count))


def forced_text(spec: str) -> str:
    """The answer text an x-mock-answer header asks for: a JSON string, so
    that a header (ASCII, no controls) can carry any text, controls included."""
    value = json.loads(spec)
    if not isinstance(value, str):
        raise ValueError('x-mock-answer is a JSON string: "..."')
    return value


def choose_answer(conversation: Conversation) -> Answer:
    if conversation.tool_result is not None:
        return Answer(confirmation(conversation.tool_result))
    text = conversation.user_text.lower()
    if _SWITCH_WORDS.search(text):
        answer = _switch(text, conversation.tool_names)
        if answer.tool_use and conversation.thinking and reasons_before_tools(text):
            answer = replace(answer, reasoning=REASONING_TOOL)
        return answer
    if _REASON_WORDS.search(text):
        return Answer(REASONED, reasoning=REASONING)
    if _CJK.search(text) or "chinese" in text:
        return Answer(CHINESE)
    if _GERMAN.search(text):
        return Answer(GERMAN)
    if "emoji" in text:
        return Answer(EMOJI)
    return Answer(ENGLISH)


def continued(answer: Answer, conversation: Conversation) -> Answer:
    """The rest of an answer whose cut text the request carries: after the
    text of a prefill (which may have lost its trailing whitespace), or,
    asked by instruction, from the start of the sentence the cut is in, as
    the instruction says (the daemon removes the repeat). No reasoning again."""
    cut, text = conversation.continues or "", answer.text
    if conversation.restart:
        start = max(s for s in sentence_starts(text) if s <= len(cut))
    else:
        start = len(cut) if text.startswith(cut) else 0
    return Answer(text[start:], tool_use=answer.tool_use)


def reasons_before_tools(user_text: str) -> bool:
    """Whether the answer to this user text reasons before its tool call
    (when a switching tool is offered): its reasoning must come back."""
    text = user_text.lower()
    return bool(_SWITCH_WORDS.search(text) and _REASON_WORDS.search(text))


def opaque_token(kind: str, user_text: str) -> str:
    """A provider's opaque token (a signature, redacted data, encrypted
    content), the same for the same exchange: derived from its user text."""
    digest = hashlib.sha256(f"{kind}\0{user_text}".encode("utf-8", "surrogatepass")).digest()
    return base64.b64encode(digest * 3).decode("ascii")


def _switch(text: str, tool_names: tuple[str, ...]) -> Answer:
    name = _switch_tool(tool_names)
    if name is None:
        return Answer(NO_SWITCH_TOOL)
    on = not _OFF_WORDS.search(text)
    number = re.search(r"\d+", text)
    channel = int(number.group()) if number else 1
    arguments = {"channel": channel, "on": on} if "relay" in name.lower() else {"on": on}
    state = "on" if on else "off"
    return Answer(f"Switching channel {channel} {state}.", tool_use=ToolUse(name, arguments))


def _switch_tool(tool_names: tuple[str, ...]) -> str | None:
    return next((name for name in tool_names
                 if any(word in name.lower() for word in _SWITCH_TOOL_WORDS)), None)
