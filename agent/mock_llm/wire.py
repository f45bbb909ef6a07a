"""The four wire formats, sans-IO: a request body in, a Conversation out;
an Answer in, the SSE events or Ollama's NDJSON lines (a list of byte
strings, one per event or line) or the non-stream JSON out; and each
provider's error shapes.

Everything is a pure function of its arguments: ids come from a hash of
the request body, `created` is fixed, so the same request gives the same
bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from agent.mock_llm import scripts
from agent.providers.resume import CONTINUE_INSTRUCTION
from agent.mock_llm.cache import Figures
from agent.mock_llm.scripts import Answer, Conversation

DELTA_CHARS = 4       # characters per text or reasoning delta: many events per answer
ARGUMENT_CHARS = 5    # characters per tool-argument piece
ARGUMENT_PIECES = 256  # at most, so that megabytes of arguments are not millions of events
CREATED = 1764400000  # fixed, for byte-identical answers


@dataclass(frozen=True, slots=True)
class Turn:
    """What an answer's bytes depend on besides the Answer itself."""
    model: str
    seed: str             # from the request body's hash: ids
    input_tokens: int
    eol: str = "\n"
    include_usage: bool = False  # Chat Completions: stream_options.include_usage
    quirks: frozenset[str] = frozenset()  # Chat Completions: CHAT_QUIRKS, as local servers send
    user_text: str = ""   # the last user text: what the opaque reasoning tokens derive from
    # The prompt cache's figures (agent/mock_llm/cache.py), reported only
    # when the request asked for the simulation.
    cache: Figures | None = None


# What OpenAI-compatible local servers do differently (wire-quirks.md).
CHAT_QUIRKS = frozenset({
    "no-index",          # tool calls without index (Ollama, Gemini's compatibility layer)
    "no-id",             # tool calls without id
    "no-chunk-id",       # chunks without id
    "object-arguments",  # the arguments as a JSON object in the call's one chunk
    "reasoning",         # reasoning in delta.reasoning (vLLM, Ollama), not reasoning_content
    "no-finish",         # no finish_reason at all; [DONE] ends the stream
    "tools-400",         # tools refused with 400, as Ollama does for a model without tools
    "tools-500",         # ... with 500, as llama.cpp does without --jinja
    "deepseek-usage",    # cache figures as prompt_cache_hit_tokens / _miss_tokens (DeepSeek)
})


def pieces(text: str, size: int = DELTA_CHARS) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def sse(data: dict | str, eol: str, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else _json(data)
    lines = ([f"event: {event}"] if event else []) + [f"data: {payload}"]
    return (eol.join(lines) + eol + eol).encode()


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def arguments_json(answer: Answer) -> str:
    if answer.tool_use is None:
        return ""
    if answer.tool_use.raw is not None:
        return answer.tool_use.raw
    return json.dumps(answer.tool_use.arguments)


def argument_pieces(answer: Answer) -> list[str]:
    arguments = arguments_json(answer)
    return pieces(arguments, max(ARGUMENT_CHARS, -(-len(arguments) // ARGUMENT_PIECES)))


def _output_tokens(answer: Answer) -> int:
    return (len(pieces(answer.text)) + len(pieces(answer.reasoning))
            + len(argument_pieces(answer)))


def _text(content) -> str:
    """Message content as text: a string, or the text of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content
                       if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def _last_user_text(messages: list) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _text(message.get("content"))
    return ""


def _last(items: list) -> dict:
    """The last message or item, {} when there is none or it is not an object."""
    return items[-1] if items and isinstance(items[-1], dict) else {}


def _continuation(messages: list) -> tuple[list, dict]:
    """A request to continue a cut answer (agent/providers/requests.py): the
    messages or items before the cut answer, and the Conversation fields
    saying so: its text as the final assistant message (a prefill), or that
    followed by the instruction to continue (restart)."""
    last = _last(messages)
    if last.get("role") == "assistant":
        return messages[:-1], {"continues": _text(last.get("content"))}
    before = _last(messages[:-1])
    if last.get("role") == "user" and _text(last.get("content")) == CONTINUE_INSTRUCTION \
            and before.get("role") == "assistant":
        return messages[:-2], {"continues": _text(before.get("content")), "restart": True}
    return messages, {}


def _names(tools, name_of) -> tuple[str, ...]:
    if not isinstance(tools, list):
        return ()
    names = (name_of(tool) for tool in tools if isinstance(tool, dict))
    return tuple(name for name in names if isinstance(name, str))


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _openai_error(status: int, message: str) -> dict:
    kind, code = {
        401: ("invalid_request_error", "invalid_api_key"),
        404: ("invalid_request_error", "unknown_url"),
        429: ("rate_limit_error", "rate_limit_exceeded"),
    }.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class ChatCompletions:
    path = "/v1/chat/completions"
    key_header = "authorization"
    stream_type = "text/event-stream"

    @staticmethod
    def conversation(body: dict) -> Conversation:
        messages, continuation = _continuation(_list(body.get("messages")))
        last = _last(messages)
        result = _text(last.get("content")) if last.get("role") == "tool" else None
        tools = _names(body.get("tools"), lambda t: (t.get("function") or {}).get("name"))
        return Conversation(_last_user_text(messages), result, tools, **continuation)

    @staticmethod
    def stream(answer: Answer, turn: Turn) -> list[bytes]:
        quirks = turn.quirks
        head = {"id": f"chatcmpl-mock-{turn.seed}", "object": "chat.completion.chunk",
                "created": CREATED, "model": turn.model}
        if "no-chunk-id" in quirks:
            del head["id"]

        def chunk(delta: dict, finish: str | None = None) -> bytes:
            if "no-finish" in quirks:
                finish = None
            return sse({**head, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                             "finish_reason": finish}]}, turn.eol)

        def call(index: int, fields: dict) -> bytes:
            return chunk({"tool_calls": [
                fields if "no-index" in quirks else {"index": index, **fields}]})

        reasoning = "reasoning" if "reasoning" in quirks else "reasoning_content"
        events = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({reasoning: p}) for p in pieces(answer.reasoning)]
        events += [chunk({"content": p}) for p in pieces(answer.text)]
        for index in range(answer.tool_use.count if answer.tool_use else 0):
            # The head (id, type, name) comes first, the arguments in pieces after it.
            fields = {"id": f"call_mock_{turn.seed}" + (f"_{index}" if index else ""),
                      "type": "function", "function": {"name": answer.tool_use.name,
                                                       "arguments": ""}}
            if "no-id" in quirks:
                del fields["id"]
            if "object-arguments" in quirks and answer.tool_use.raw is None:
                fields["function"]["arguments"] = answer.tool_use.arguments
                events.append(call(index, fields))
                continue
            events.append(call(index, fields))
            events += [call(index, {"function": {"arguments": p}}) for p in argument_pieces(answer)]
        events.append(chunk({}, "tool_calls" if answer.tool_use else "stop"))
        if turn.include_usage:
            events.append(sse({**head, "choices": [], "usage": ChatCompletions._usage(answer, turn)},
                              turn.eol))
        events.append(sse("[DONE]", turn.eol))
        return events

    @staticmethod
    def replay_problem(body: dict, raw: bytes) -> str | None:
        """DeepSeek's thinking mode: an assistant message with tool calls
        whose reasoning the mock sent must have it back as reasoning_content."""
        user = ""
        for message in _list(body.get("messages")):
            if not isinstance(message, dict):
                continue
            if message.get("role") == "user":
                user = _text(message.get("content"))
            elif message.get("role") == "assistant" and message.get("tool_calls") \
                    and scripts.reasons_before_tools(user) \
                    and message.get("reasoning_content") != scripts.REASONING_TOOL:
                return "The reasoning_content in the thinking mode must be passed back to the API."
        return None

    @staticmethod
    def complete(answer: Answer, turn: Turn) -> dict:
        message: dict = {"role": "assistant", "content": answer.text or None}
        if answer.reasoning:
            message["reasoning_content"] = answer.reasoning
        if answer.tool_use:
            message["tool_calls"] = [{"id": f"call_mock_{turn.seed}", "type": "function",
                                      "function": {"name": answer.tool_use.name,
                                                   "arguments": arguments_json(answer)}}]
        return {"id": f"chatcmpl-mock-{turn.seed}", "object": "chat.completion",
                "created": CREATED, "model": turn.model,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": "tool_calls" if answer.tool_use else "stop"}],
                "usage": ChatCompletions._usage(answer, turn)}

    @staticmethod
    def _usage(answer: Answer, turn: Turn) -> dict:
        out = _output_tokens(answer)
        usage: dict = {"prompt_tokens": turn.input_tokens, "completion_tokens": out,
                       "total_tokens": turn.input_tokens + out}
        if turn.cache is not None:
            hits = min(turn.cache.read, turn.input_tokens)
            if "deepseek-usage" in turn.quirks:
                usage.update(prompt_cache_hit_tokens=hits,
                             prompt_cache_miss_tokens=turn.input_tokens - hits)
            else:
                usage["prompt_tokens_details"] = {"cached_tokens": hits}
        return usage

    error_body = staticmethod(_openai_error)

    @staticmethod
    def error_event(message: str, turn: Turn, sequence: int) -> bytes:
        return sse(_openai_error(500, message), turn.eol)


class AnthropicMessages:
    path = "/v1/messages"
    key_header = "x-api-key"
    stream_type = "text/event-stream"

    @staticmethod
    def conversation(body: dict) -> Conversation:
        messages, continuation = _continuation(_list(body.get("messages")))
        last = _last(messages)
        results = [block for block in _list(last.get("content"))
                   if isinstance(block, dict) and block.get("type") == "tool_result"]
        result = _text(results[-1].get("content")) if results else None
        return Conversation(_last_user_text(messages), result,
                            _names(body.get("tools"), lambda t: t.get("name")),
                            thinking=AnthropicMessages._thinking(body), **continuation)

    @staticmethod
    def _thinking(body: dict) -> bool:
        thinking = body.get("thinking")
        return isinstance(thinking, dict) and thinking.get("type") == "enabled"

    @staticmethod
    def _reasoned_blocks(user_text: str) -> list[dict]:
        """The blocks before the tool call of an answer that reasoned first:
        signed thinking and redacted thinking, both required back unchanged."""
        return [{"type": "thinking", "thinking": scripts.REASONING_TOOL,
                 "signature": scripts.opaque_token("signature", user_text)},
                {"type": "redacted_thinking",
                 "data": scripts.opaque_token("redacted", user_text)}]

    @staticmethod
    def replay_problem(body: dict, raw: bytes) -> str | None:
        """With thinking on, an assistant turn with tool use whose thinking
        the mock sent must start with those blocks, signature and data
        unchanged (Anthropic's rule for tool loops)."""
        if not AnthropicMessages._thinking(body):
            return None
        user = ""
        for n, message in enumerate(_list(body.get("messages"))):
            if not isinstance(message, dict):
                continue
            content = _list(message.get("content"))
            if message.get("role") == "user" and _text(content):
                user = _text(content)
            elif message.get("role") == "assistant" and scripts.reasons_before_tools(user) \
                    and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content) \
                    and content[:2] != AnthropicMessages._reasoned_blocks(user):
                return (f"messages.{n}.content: an assistant turn with tool_use must start with "
                        "its thinking and redacted_thinking blocks as they were sent, "
                        "signature and data unchanged, when thinking is enabled")
        return None

    @staticmethod
    def _blocks(answer: Answer, turn: Turn) -> list[dict]:
        """The content blocks of the complete answer, in stream order."""
        blocks = []
        if answer.reasoning == scripts.REASONING_TOOL and answer.tool_use:
            blocks += AnthropicMessages._reasoned_blocks(turn.user_text)
        elif answer.reasoning:
            blocks.append({"type": "thinking", "thinking": answer.reasoning,
                           "signature": f"mock-signature-{turn.seed}"})
        if answer.text:
            blocks.append({"type": "text", "text": answer.text})
        for index in range(answer.tool_use.count if answer.tool_use else 0):
            blocks.append({"type": "tool_use",
                           "id": f"toolu_mock_{turn.seed}" + (f"_{index}" if index else ""),
                           "name": answer.tool_use.name, "input": answer.tool_use.arguments})
        return blocks

    @staticmethod
    def stream(answer: Answer, turn: Turn) -> list[bytes]:
        def event(data: dict) -> bytes:
            return sse(data, turn.eol, event=data["type"])

        events = [event({"type": "message_start", "message": {
            "id": f"msg_mock_{turn.seed}", "type": "message", "role": "assistant",
            "model": turn.model, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {**AnthropicMessages._input_usage(turn), "output_tokens": 1}}}),
            event({"type": "ping"})]
        for index, block in enumerate(AnthropicMessages._blocks(answer, turn)):
            if block["type"] == "thinking":
                start = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces(block["thinking"])]
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
            elif block["type"] == "redacted_thinking":
                start, deltas = block, []
            elif block["type"] == "text":
                start = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
            else:
                start = {**block, "input": {}}
                deltas = [{"type": "input_json_delta", "partial_json": p}
                          for p in argument_pieces(answer)]
            events.append(event({"type": "content_block_start", "index": index,
                                 "content_block": start}))
            events += [event({"type": "content_block_delta", "index": index, "delta": d})
                       for d in deltas]
            events.append(event({"type": "content_block_stop", "index": index}))
        events.append(event({"type": "message_delta",
                             "delta": {"stop_reason": AnthropicMessages._stop(answer),
                                       "stop_sequence": None},
                             "usage": {"output_tokens": _output_tokens(answer)}}))
        events.append(event({"type": "message_stop"}))
        return events

    @staticmethod
    def complete(answer: Answer, turn: Turn) -> dict:
        return {"id": f"msg_mock_{turn.seed}", "type": "message", "role": "assistant",
                "model": turn.model, "content": AnthropicMessages._blocks(answer, turn),
                "stop_reason": AnthropicMessages._stop(answer), "stop_sequence": None,
                "usage": {**AnthropicMessages._input_usage(turn),
                          "output_tokens": _output_tokens(answer)}}

    @staticmethod
    def _input_usage(turn: Turn) -> dict:
        """input_tokens counts what was neither read from the cache nor written to it."""
        if turn.cache is None:
            return {"input_tokens": turn.input_tokens}
        read = min(turn.cache.read, turn.input_tokens)
        written = min(turn.cache.written, turn.input_tokens - read)
        return {"input_tokens": turn.input_tokens - read - written,
                "cache_creation_input_tokens": written, "cache_read_input_tokens": read}

    @staticmethod
    def _stop(answer: Answer) -> str:
        return "tool_use" if answer.tool_use else "end_turn"

    @staticmethod
    def error_body(status: int, message: str) -> dict:
        kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                429: "rate_limit_error"}.get(
            status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    @staticmethod
    def error_event(message: str, turn: Turn, sequence: int) -> bytes:
        return sse({"type": "error", "error": {"type": "overloaded_error", "message": message}},
                   turn.eol, event="error")


class Responses:
    path = "/v1/responses"
    key_header = "authorization"
    stream_type = "text/event-stream"

    @staticmethod
    def conversation(body: dict) -> Conversation:
        items = body.get("input")
        if isinstance(items, str):
            return Conversation(items, None, ())
        items, continuation = _continuation(_list(items))
        last = _last(items)
        result = None
        if last.get("type") == "function_call_output":
            output = last.get("output")
            result = output if isinstance(output, str) else _json(output)
        return Conversation(_last_user_text(items), result,
                            _names(body.get("tools"), lambda t: t.get("name")), **continuation)

    @staticmethod
    def reasoned_item(user_text: str) -> str:
        """The reasoning item before the tool call of an answer that reasoned
        first, as the JSON text its output_item.done carries: ASCII escapes
        and spaces after separators, so that only the bytes as they came,
        never a re-encoding, match it when it is sent back."""
        return json.dumps({"id": "rs_mock_" + scripts.opaque_token("id", user_text)[:24]
                           .replace("+", "0").replace("/", "1"),
                           "type": "reasoning",
                           "summary": [{"type": "summary_text", "text": scripts.REASONING_TOOL}],
                           "encrypted_content": "gAAAAA" + scripts.opaque_token("encrypted",
                                                                                user_text)},
                          ensure_ascii=True)

    @staticmethod
    def replay_problem(body: dict, raw: bytes) -> str | None:
        """A function_call whose reasoning the mock sent needs that
        reasoning item before it in the input, byte for byte as it came."""
        user = ""
        for item in _list(body.get("input")):
            if not isinstance(item, dict):
                continue
            if item.get("role") == "user":
                user = _text(item.get("content"))
            elif item.get("type") == "function_call" and scripts.reasons_before_tools(user) \
                    and Responses.reasoned_item(user).encode() not in raw:
                return (f"Item {item.get('call_id')!r} of type 'function_call' was provided "
                        "without its required 'reasoning' item (sent back byte-exact)")
        return None

    @staticmethod
    def _items(answer: Answer, turn: Turn) -> list[dict]:
        """The output items of the complete answer, in output_index order."""
        items = []
        if answer.reasoning == scripts.REASONING_TOOL and answer.tool_use:
            items.append(json.loads(Responses.reasoned_item(turn.user_text)))
        elif answer.reasoning:
            items.append({"id": f"rs_mock_{turn.seed}", "type": "reasoning",
                          "summary": [{"type": "summary_text", "text": answer.reasoning}]})
        if answer.text:
            items.append({"id": f"msg_mock_{turn.seed}", "type": "message", "status": "completed",
                          "role": "assistant",
                          "content": [{"type": "output_text", "text": answer.text,
                                       "annotations": []}]})
        if answer.tool_use:
            items.append({"id": f"fc_mock_{turn.seed}", "type": "function_call",
                          "status": "completed", "call_id": f"call_mock_{turn.seed}",
                          "name": answer.tool_use.name, "arguments": arguments_json(answer)})
        return items

    @staticmethod
    def _response(answer: Answer, turn: Turn, done: bool) -> dict:
        out = _output_tokens(answer)
        return {"id": f"resp_mock_{turn.seed}", "object": "response", "created_at": CREATED,
                "status": "completed" if done else "in_progress", "model": turn.model,
                "output": Responses._items(answer, turn) if done else [],
                "usage": {"input_tokens": turn.input_tokens,
                          "input_tokens_details": {"cached_tokens": min(
                              turn.cache.read, turn.input_tokens) if turn.cache else 0},
                          "output_tokens": out,
                          "output_tokens_details": {"reasoning_tokens": len(pieces(answer.reasoning))},
                          "total_tokens": turn.input_tokens + out} if done else None}

    @staticmethod
    def stream(answer: Answer, turn: Turn) -> list[bytes]:
        events: list[dict] = [{"type": "response.created",
                               "response": Responses._response(answer, turn, done=False)}]
        for index, item in enumerate(Responses._items(answer, turn)):
            where = {"item_id": item["id"], "output_index": index}
            if item["type"] == "reasoning":
                added = {**item, "summary": []}
                deltas = [{"type": "response.reasoning_summary_text.delta", **where,
                           "summary_index": 0, "delta": p} for p in pieces(answer.reasoning)]
            elif item["type"] == "message":
                added = {**item, "status": "in_progress", "content": []}
                deltas = [{"type": "response.output_text.delta", **where, "content_index": 0,
                           "delta": p} for p in pieces(answer.text)]
            else:
                added = {**item, "status": "in_progress", "arguments": ""}
                deltas = [{"type": "response.function_call_arguments.delta", **where, "delta": p}
                          for p in argument_pieces(answer)]
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": added})
            events += deltas
            events.append({"type": "response.output_item.done", "output_index": index,
                           "item": item})
        events.append({"type": "response.completed",
                       "response": Responses._response(answer, turn, done=True)})
        return [Responses._event(e, n, turn) for n, e in enumerate(events)]

    @staticmethod
    def _event(e: dict, n: int, turn: Turn) -> bytes:
        item = e.get("item")
        if e["type"] == "response.output_item.done" and item.get("encrypted_content"):
            # the reasoning item's bytes as reasoned_item() wrote them
            head = _json({"type": e["type"], "output_index": e["output_index"]})[:-1]
            payload = f'{head},"item":{Responses.reasoned_item(turn.user_text)},' \
                      f'"sequence_number":{n}}}'
            return sse(payload, turn.eol, event=e["type"])
        return sse({**e, "sequence_number": n}, turn.eol, event=e["type"])

    @staticmethod
    def complete(answer: Answer, turn: Turn) -> dict:
        return Responses._response(answer, turn, done=True)

    error_body = staticmethod(_openai_error)

    @staticmethod
    def error_event(message: str, turn: Turn, sequence: int) -> bytes:
        return sse({"type": "error", "code": "server_error", "message": message, "param": None,
                    "sequence_number": sequence}, turn.eol, event="error")


class OllamaChat:
    """Ollama's native /api/chat: one JSON object per line, a tool call
    whole in one line with its arguments an object and no id."""
    path = "/api/chat"
    key_header = "authorization"
    stream_type = "application/x-ndjson"
    conversation = staticmethod(ChatCompletions.conversation)  # the same message shapes

    @staticmethod
    def _line(value: dict, turn: Turn) -> bytes:
        return (_json(value) + turn.eol).encode()

    @staticmethod
    def _head(turn: Turn) -> dict:
        return {"model": turn.model, "created_at": "2025-11-29T07:06:40.000000Z"}

    @staticmethod
    def _calls(answer: Answer) -> list[dict]:
        if answer.tool_use is None:
            return []
        # raw arguments (a fault a test asks for) go in as they are: no object then
        arguments = (answer.tool_use.arguments if answer.tool_use.raw is None
                     else answer.tool_use.raw)
        return [{"function": {"name": answer.tool_use.name, "arguments": arguments}}
                for _ in range(answer.tool_use.count)]

    @staticmethod
    def _done(answer: Answer, turn: Turn) -> dict:
        out = _output_tokens(answer)
        return {"done": True, "done_reason": "stop", "total_duration": 1_000_000 * out,
                "load_duration": 1_000_000, "prompt_eval_count": turn.input_tokens,
                "prompt_eval_duration": 10_000 * turn.input_tokens, "eval_count": out,
                "eval_duration": 900_000 * out}

    @staticmethod
    def stream(answer: Answer, turn: Turn) -> list[bytes]:
        head = OllamaChat._head(turn)

        def line(message: dict) -> bytes:
            return OllamaChat._line({**head, "message": {"role": "assistant", "content": "",
                                                         **message}, "done": False}, turn)

        lines = [line({"thinking": p}) for p in pieces(answer.reasoning)]
        lines += [line({"content": p}) for p in pieces(answer.text)]
        if answer.tool_use is not None:
            lines.append(line({"tool_calls": OllamaChat._calls(answer)}))
        lines.append(OllamaChat._line({**head, "message": {"role": "assistant", "content": ""},
                                       **OllamaChat._done(answer, turn)}, turn))
        return lines

    @staticmethod
    def complete(answer: Answer, turn: Turn) -> dict:
        message: dict = {"role": "assistant", "content": answer.text}
        if answer.reasoning:
            message["thinking"] = answer.reasoning
        if answer.tool_use is not None:
            message["tool_calls"] = OllamaChat._calls(answer)
        return {**OllamaChat._head(turn), "message": message, **OllamaChat._done(answer, turn)}

    @staticmethod
    def error_body(status: int, message: str) -> dict:
        return {"error": message}

    @staticmethod
    def error_event(message: str, turn: Turn, sequence: int) -> bytes:
        return OllamaChat._line({"error": message}, turn)


FORMATS = {f.path: f for f in (ChatCompletions, AnthropicMessages, Responses, OllamaChat)}
