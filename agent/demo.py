"""`homeagent demo`: decode a built-in Chat Completions stream, as it would
arrive from a server, in reads cut at random places (inside UTF-8 characters
and CRLF pairs too), and print the message the decoder builds.

It is the main job until the daemon lands: it needs no network and no key.
"""

from __future__ import annotations

import json
import random
import sys

from agent.stream import events as ev
from agent.stream.decoders import OpenAIChatDecoder

_PROBLEMS = (ev.DecodeWarning, ev.FramingError, ev.Truncated, ev.ProviderError,
             ev.StreamIncomplete, ev.UnknownField)

_ANSWER = [
    "The living room is 21.5 °C. ",
    "客厅现在是二十一度半，",
    "湿度百分之四十。",
    " Shall I open the blinds? 🌤️",
]
_REASONING = ["The user asks about the room; ", "the sensor tool has the answer."]


def sample_stream() -> bytes:
    """A Chat Completions body shaped like a real one (role chunk, reasoning,
    a tool call with split arguments, text, finish, usage-only chunk, [DONE]),
    with CRLF line ends and a keep-alive comment."""
    head = {"id": "chatcmpl-demo", "object": "chat.completion.chunk",
            "created": 1764400000, "model": "demo-model"}

    def chunk(delta=None, finish=None, usage=None, choices=True):
        body = dict(head)
        body["choices"] = [{"index": 0, "delta": delta or {}, "logprobs": None,
                            "finish_reason": finish}] if choices else []
        if usage:
            body["usage"] = usage
        return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\r\n\r\n"

    parts = [b": keep-alive\r\n\r\n", chunk({"role": "assistant", "content": ""})]
    parts += [chunk({"reasoning_content": piece}) for piece in _REASONING]
    parts.append(chunk({"tool_calls": [{"index": 0, "id": "call_demo_1", "type": "function",
                                        "function": {"name": "read_sensor", "arguments": ""}}]}))
    for piece in ['{"room": ', '"living', ' room"}']:
        parts.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
    parts += [chunk({"content": piece}) for piece in _ANSWER]
    parts.append(chunk(finish="stop"))
    parts.append(chunk(usage={"prompt_tokens": 42, "completion_tokens": 31, "total_tokens": 73},
                       choices=False))
    parts.append(b"data: [DONE]\r\n\r\n")
    return b"".join(parts)


def run(seed: int = 7, out=sys.stdout) -> int:
    body = sample_stream()
    rng = random.Random(seed)
    decoder = OpenAIChatDecoder()
    reads, pos, produced = 0, 0, []
    while pos < len(body):
        size = rng.randint(1, 64)
        produced += decoder.feed(body[pos:pos + size])
        pos += size
        reads += 1
    produced += decoder.close()

    message = decoder.message
    problems = [e for e in produced if isinstance(e, _PROBLEMS)]
    print(f"decoded {len(body)} bytes in {reads} reads of 1-64 bytes", file=out)
    print(f"reasoning: {message.reasoning}", file=out)
    for index, call in enumerate(message.tool_calls):
        print(f"tool call {index}: {call.name}({call.arguments}) -> parsed {call.parsed}", file=out)
    print(f"answer:    {message.text}", file=out)
    print(f"finish:    {message.finish_reason.value} (raw {message.raw_finish_reason!r})", file=out)
    print(f"usage:     {message.usage}", file=out)
    for problem in problems:
        print(f"problem:   {problem}", file=out)
    return 1 if problems else 0
