"""Tool calls never run damaged: a call that lost any byte of its arguments
on the way ends as a named error result, never runs with what is left.

The losses, each reproduced through the real decoders and end to end
through a real daemon talking to a hand-written server on loopback:

- an argument piece in an SSE event over the stream buffer (64 KiB): the
  framer elides it (DELTA_ELIDED) and the call, until now, completed from
  the rest (`{}`, or JSON missing a member). Servers that send a call's
  arguments in one chunk (Ollama's OpenAI endpoint, vLLM, LiteLLM) hit it
  with about 33-64 KB of arguments, under max_tool_arguments;
- Responses: arguments that came only in an output_item.done over the buffer;
- Anthropic: a tool_use whose input came whole in content_block_start (no
  input_json_delta) in an event over the buffer: the input elided, the call
  ran with {};
- Ollama: a line of tool calls over the buffer, or nested deeper than the
  JSON scanner goes: the line was dropped with a warning and the model never
  heard of its calls.

The calls' tool accepts `{}`, so a damaged call that got through would run:
the device's program logs every run.
"""

from __future__ import annotations

import json
import shlex
import socket

import pytest

from conftest import timeout
from daemon_harness import Daemon, command_device
from helpers import of_type
from hostile import Hostile

from agent.stream import Protocol
from agent.stream.decoders.anthropic import AnthropicDecoder
from agent.stream.decoders.ollama import OllamaDecoder
from agent.stream.decoders.openai_chat import OpenAIChatDecoder
from agent.stream.decoders.openai_responses import OpenAIResponsesDecoder
from agent.stream.message import ArgumentsError, FinishReason
from agent.stream.records import (DecodeWarning, FramingError, FramingErrorCode, JSONStatus,
                                  WarningCode)

# 40 KB of arguments (under the 64 KiB max_tool_arguments) whose event is
# about 120 KB: a server's JSON escapes every non-ASCII character (\u00e9)
ARGUMENTS = json.dumps({"text": "é" * 20000}, ensure_ascii=False)
SMALL = json.dumps({"text": "hi"})
TOO_LARGE_PIECE = ("a piece of the arguments came in an event over the stream buffer of "
                   "65536 bytes and was lost; what arrived is not kept")


def sse(data, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    text = data if isinstance(data, str) else json.dumps(data)
    return head + b"data: " + text.encode() + b"\n\n"


# ---- the bodies a server sends, by protocol ----

def chat_call(arguments: str, split: bool = False) -> bytes:
    """A call whose head and arguments come in one chunk (vLLM, LiteLLM,
    Ollama's OpenAI endpoint); split: head, a small piece, the rest."""
    def chunk(call: dict, finish=None) -> bytes:
        return sse({"id": "c", "object": "chat.completion.chunk", "model": "m",
                    "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **call}]},
                                 "finish_reason": finish}]})
    head = {"id": "call_1", "type": "function", "function": {"name": "note"}}
    if split:
        events = [chunk({**head, "function": {"name": "note", "arguments": arguments[:5]}}),
                  chunk({"function": {"arguments": arguments[5:]}})]
    else:
        events = [chunk({**head, "function": {"name": "note", "arguments": arguments}})]
    finish = sse({"id": "c", "object": "chat.completion.chunk", "model": "m",
                  "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return b"".join(events) + finish + b"data: [DONE]\n\n"


def chat_text(text: str) -> bytes:
    return (sse({"id": "c", "object": "chat.completion.chunk", "model": "m",
                 "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]})
            + b"data: [DONE]\n\n")


def anthropic_stream(blocks: list[bytes], stop: str) -> bytes:
    start = sse({"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
        "stop_reason": None, "usage": {"input_tokens": 1, "output_tokens": 1}}},
        "message_start")
    end = (sse({"type": "message_delta", "delta": {"stop_reason": stop},
                "usage": {"output_tokens": 1}}, "message_delta")
           + sse({"type": "message_stop"}, "message_stop"))
    return start + b"".join(blocks) + end


def anthropic_block(index: int, block: dict, deltas: list[dict]) -> bytes:
    return (sse({"type": "content_block_start", "index": index, "content_block": block},
                "content_block_start")
            + b"".join(sse({"type": "content_block_delta", "index": index, "delta": d},
                           "content_block_delta") for d in deltas)
            + sse({"type": "content_block_stop", "index": index}, "content_block_stop"))


def anthropic_call(arguments: str) -> bytes:
    block = {"type": "tool_use", "id": "toolu_1", "name": "note", "input": {}}
    return anthropic_stream([anthropic_block(0, block, [
        {"type": "input_json_delta", "partial_json": arguments}])], "tool_use")


def anthropic_start_input(arguments: str) -> bytes:
    """The input whole in content_block_start, no input_json_delta."""
    block = {"type": "tool_use", "id": "toolu_1", "name": "note",
             "input": json.loads(arguments)}
    return anthropic_stream([anthropic_block(0, block, [])], "tool_use")


def anthropic_text(text: str) -> bytes:
    return anthropic_stream([anthropic_block(0, {"type": "text", "text": ""}, [
        {"type": "text_delta", "text": text}])], "end_turn")


FUNCTION_CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "note",
                 "arguments": "", "status": "in_progress"}


def responses_stream(events: list[dict]) -> bytes:
    done = {"type": "response.completed",
            "response": {"id": "resp_1", "model": "m", "status": "completed", "output": []}}
    return b"".join(sse(e, e["type"]) for e in [*events, done])


def responses_call(arguments: str, deltas: bool = True) -> bytes:
    where = {"item_id": "fc_1", "output_index": 0}
    done = {**FUNCTION_CALL, "arguments": arguments, "status": "completed"}
    return responses_stream(
        [{"type": "response.output_item.added", "output_index": 0, "item": FUNCTION_CALL}]
        + ([{"type": "response.function_call_arguments.delta", **where, "delta": arguments}]
           if deltas else [])
        + [{"type": "response.output_item.done", "output_index": 0, "item": done}])


def responses_text(text: str) -> bytes:
    item = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    return responses_stream([
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
         "content_index": 0, "delta": text}])


DECODERS = {"chat": OpenAIChatDecoder, "anthropic": AnthropicDecoder,
            "responses": OpenAIResponsesDecoder}


def decode(decoder, body: bytes, read: int = 4096):
    """The body in reads of `read` bytes (a network's): the decoder's
    message and every event."""
    events: list = []
    for i in range(0, len(body), read):
        events += decoder.feed(body[i:i + read])
    events += decoder.close()
    return decoder.message, events


# ---- the decoders ----

ONE_CHUNK = {
    "chat": chat_call(ARGUMENTS),
    "chat-split": chat_call(ARGUMENTS, split=True),
    "anthropic": anthropic_call(ARGUMENTS),
    "responses": responses_call(ARGUMENTS),
}


@pytest.mark.parametrize("case", list(ONE_CHUNK))
def test_an_argument_piece_over_the_buffer_makes_the_call_too_large(case):
    protocol = case.split("-")[0]
    message, events = decode(DECODERS[protocol](), ONE_CHUNK[case])
    [call] = message.tool_calls
    assert (call.name, call.error, call.error_detail) == \
        ("note", ArgumentsError.TOO_LARGE, TOO_LARGE_PIECE)
    assert call.parsed is None and call.arguments == "" and not call.complete
    assert message.dropped_events == {"delta_elided": 1}
    # Responses repeats the arguments in output_item.done: elided there too
    assert [w.code for w in of_class(events, DecodeWarning)] == [WarningCode.DELTA_ELIDED] + (
        [WarningCode.ELIDED] if protocol == "responses" else [])


@pytest.mark.parametrize("protocol", list(DECODERS))
def test_arguments_under_the_buffer_are_whole(protocol):
    """The same calls with small arguments: whole, parsed, no warning."""
    body = {"chat": chat_call, "anthropic": anthropic_call, "responses": responses_call}
    message, events = decode(DECODERS[protocol](), body[protocol](SMALL))
    [call] = message.tool_calls
    assert (call.error, call.parsed, call.arguments) == (None, {"text": "hi"}, SMALL)
    assert not of_class(events, DecodeWarning) and message.dropped_events == {}


def test_anthropic_input_whole_in_a_start_over_the_buffer_is_too_large():
    """The input came only in content_block_start, an event over the
    buffer: its string elided, nothing of it arrived. Small, it is the
    call's arguments (test_anthropic_decoder.py holds that to the SDK)."""
    message, events = decode(AnthropicDecoder(), anthropic_start_input(ARGUMENTS))
    [call] = message.tool_calls
    assert (call.name, call.error, call.error_detail) == (
        "note", ArgumentsError.TOO_LARGE,
        "the input came whole in content_block_start, an event over the stream buffer of "
        "65536 bytes, and was lost")
    assert call.parsed is None and call.arguments == "" and not call.complete
    assert [(w.code, w.detail) for w in of_class(events, DecodeWarning)] == [
        (WarningCode.DELTA_ELIDED, "content_block.input")]
    assert message.dropped_events == {"delta_elided": 1}
    message, events = decode(AnthropicDecoder(), anthropic_start_input(SMALL))
    [call] = message.tool_calls
    assert (call.error, call.parsed, call.arguments) == (None, {"text": "hi"}, SMALL)
    assert not of_class(events, DecodeWarning)


def test_anthropic_pieces_after_an_elided_start_input_are_the_input():
    """As the SDK: pieces replace the start's input, so one lost in the
    start costs nothing when the pieces carry the call."""
    block = {"type": "tool_use", "id": "toolu_1", "name": "note",
             "input": json.loads(ARGUMENTS)}
    body = anthropic_stream([anthropic_block(0, block, [
        {"type": "input_json_delta", "partial_json": SMALL}])], "tool_use")
    message, events = decode(AnthropicDecoder(), body)
    [call] = message.tool_calls
    assert (call.error, call.parsed) == (None, {"text": "hi"})
    assert [w.detail for w in of_class(events, DecodeWarning)] == ["content_block.input"]


def test_responses_arguments_only_in_a_done_item_over_the_buffer_are_too_large():
    """No delta carried them and output_item.done's are elided: nothing of
    them arrived (the core's ELIDED warning names the field)."""
    message, events = decode(OpenAIResponsesDecoder(), responses_call(ARGUMENTS, deltas=False))
    [call] = message.tool_calls
    assert call.error is ArgumentsError.TOO_LARGE and call.parsed is None
    assert call.error_detail == ("the arguments came only in output_item.done, an event over "
                                 "the stream buffer of 65536 bytes, and were lost")
    assert [(w.code, w.detail) for w in of_class(events, DecodeWarning)] == [
        (WarningCode.ELIDED, "item.arguments")]


def test_responses_done_item_over_the_buffer_keeps_arguments_its_deltas_carried():
    """The usual big call: deltas of a few bytes, the done item elided. The
    deltas carried every byte: the call is whole."""
    pieces = [ARGUMENTS[i:i + 100] for i in range(0, len(ARGUMENTS), 100)]
    where = {"item_id": "fc_1", "output_index": 0}
    body = responses_stream(
        [{"type": "response.output_item.added", "output_index": 0, "item": FUNCTION_CALL}]
        + [{"type": "response.function_call_arguments.delta", **where, "delta": p}
           for p in pieces]
        + [{"type": "response.output_item.done", "output_index": 0,
            "item": {**FUNCTION_CALL, "arguments": ARGUMENTS, "status": "completed"}}])
    message, _ = decode(OpenAIResponsesDecoder(), body)
    [call] = message.tool_calls
    assert call.error is None and call.arguments == ARGUMENTS


def test_a_text_piece_lost_beside_an_open_call_leaves_the_call_whole():
    """Only an argument piece damages a call: a content delta elided while a
    call is open costs the text, not the call."""
    call_head = sse({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "function": {"name": "note", "arguments": SMALL}}]}}]})
    big_text = sse({"choices": [{"index": 0, "delta": {"content": "é" * 20000}}]})
    body = call_head + big_text + chat_text("")
    message, _ = decode(OpenAIChatDecoder(), body)
    [call] = message.tool_calls
    assert call.error is None and call.parsed == {"text": "hi"}
    assert message.dropped_events == {"delta_elided": 1}


def ollama_line(message: dict, done: bool = False) -> bytes:
    value = {"model": "m", "created_at": "2025-01-01T00:00:00Z",
             "message": {"role": "assistant", "content": "", **message}, "done": done}
    return json.dumps(value).encode() + b"\n"


def ollama_call(arguments) -> bytes:
    return (ollama_line({"tool_calls": [{"function": {"name": "note", "arguments": arguments}}]})
            + ollama_line({}, done=True))


def ollama_text(text: str) -> bytes:
    return ollama_line({"content": text}) + ollama_line({}, done=True)


NOT_OBJECTS = {"string": SMALL, "array": [1], "number": 5, "null": None}


@pytest.mark.parametrize("kind", list(NOT_OBJECTS))
def test_ollama_arguments_that_are_not_an_object_are_an_error(kind):
    """Ollama's arguments are an object; anything else (a JSON string of one,
    as some compatible servers send) is no arguments to run with."""
    message, events = decode(OllamaDecoder(), ollama_call(NOT_OBJECTS[kind]))
    [call] = message.tool_calls
    assert (call.name, call.error, call.parsed, call.arguments) == \
        ("note", ArgumentsError.NOT_AN_OBJECT, None, "")
    assert call.error_detail == "the call's arguments were missing or not a JSON object"
    [w] = of_class(events, DecodeWarning)
    assert w.detail == "message.tool_calls[].function.arguments"


# a call whose line is over the buffer: 40 KB of arguments, each é escaped
# by the server's JSON (\u00e9), about 120 KB
BIG_CALL = ollama_line({"tool_calls": [{"function": {"name": "note",
                                                     "arguments": json.loads(ARGUMENTS)}}]})
# nested deeper than the core's JSON scanner goes (HA_JSON_MAX_DEPTH, 64)
DEEP_CALL = ollama_line({"tool_calls": [{"function": {"name": "note", "arguments": {
    "a": json.loads("[" * 70 + "]" * 70)}}}]})


def test_an_ollama_line_of_calls_over_the_buffer_is_a_too_large_call():
    message, events = decode(OllamaDecoder(), BIG_CALL + ollama_line({}, done=True))
    [call] = message.tool_calls
    assert (call.name, call.error, call.parsed, call.arguments) == (
        None, ArgumentsError.TOO_LARGE, None, "")
    assert call.error_detail == (f"a line of tool calls was {len(BIG_CALL) - 1} bytes, over the "
                                 f"stream buffer of 65536 bytes, and was lost")
    assert of_class(events, FramingError) == [
        FramingError(FramingErrorCode.LINE_TOO_LARGE, len(BIG_CALL) - 1, "message.tool_calls")]
    assert message.finish_reason is FinishReason.TOOL_CALLS
    assert message.dropped_events == {"line_too_large": 1}


def test_an_ollama_line_of_calls_too_deep_to_scan_is_a_damaged_call():
    message, events = decode(OllamaDecoder(), DEEP_CALL + ollama_line({}, done=True))
    [call] = message.tool_calls
    assert (call.error, call.parsed, call.arguments) == (ArgumentsError.DAMAGED, None, "")
    assert call.error_detail == ("a line of tool calls was not JSON the decoder could read "
                                 "(depth) and was lost")
    [w] = of_class(events, DecodeWarning)
    assert (w.code, w.json_status, w.detail) == (
        WarningCode.BAD_JSON, JSONStatus.DEPTH, "message.tool_calls")
    assert message.finish_reason is FinishReason.TOOL_CALLS


def test_an_ollama_line_whose_calls_follow_a_long_text_is_a_too_large_call():
    """The tool_calls member past the first 64 KiB of the line: the core
    scans all of a line over the buffer, not only the part it held."""
    line = ollama_line({"content": "x" * 70000,
                        "tool_calls": [{"function": {"name": "note", "arguments": {}}}]})
    message, _ = decode(OllamaDecoder(), line + ollama_line({}, done=True))
    assert [c.error for c in message.tool_calls] == [ArgumentsError.TOO_LARGE]


@pytest.mark.parametrize("line", [
    ollama_line({"content": '"tool_calls": [' + "x" * 70000}),
    ollama_line({"content": "x" * 70000, "images": None, "extra": {"tool_calls": [1]}}),
    ollama_line({"thinking": json.loads("[" * 70 + "]" * 70), "content": "tool_calls"}),
], ids=["named-in-text", "other-depth", "deep-without-calls"])
def test_an_ollama_line_dropped_without_calls_makes_no_call(line):
    """Only a line that held message.tool_calls as a member: the name in a
    string, or deeper in another member, is no call."""
    message, events = decode(OllamaDecoder(), line + ollama_line({}, done=True))
    assert message.tool_calls == [] and message.finish_reason is FinishReason.STOP
    dropped = of_class(events, FramingError) + of_class(events, DecodeWarning)
    assert len(dropped) == 1 and dropped[0].detail is None


def of_class(events: list, cls: type) -> list:
    return [e for e in events if type(e) is cls]


# ---- end to end: a daemon, a server on loopback, a device that logs its runs ----

class Upstream(Hostile):
    """The loopback server of tests/hostile.py answering by the behaviours
    given here: the first request of one gets its first body, every later
    one its last (the answer after the tool result)."""

    TYPES = {"ollama": b"application/x-ndjson"}

    def __init__(self, behaviours: dict[str, list[bytes]]) -> None:
        self.behaviours = behaviours
        self.methods = {"_" + name.replace("-", "_"): name for name in behaviours}
        self.seen: dict[str, int] = {}
        super().__init__()

    def __getattr__(self, method: str):
        if method not in self.__dict__.get("methods", {}):
            raise AttributeError(method)
        name = self.methods[method]

        def answer(conn: socket.socket) -> None:
            n = self.seen[name] = self.seen.get(name, 0) + 1
            bodies = self.behaviours[name]
            kind = self.TYPES.get(name.split("-")[0], b"text/event-stream")
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: " + kind
                         + b"\r\nconnection: close\r\n\r\n" + bodies[min(n, len(bodies)) - 1])
        return answer


PROTOCOLS = {"chat": "openai-chat", "anthropic": "anthropic", "responses": "openai-responses",
             "ollama": "ollama"}
NOTE_TOOL = {"name": "note", "description": "Keep a note",
             "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}


def notes_daemon(directory, behaviours: dict[str, list[bytes]]):
    """A daemon whose providers are the behaviours of an Upstream, and a
    device whose tool `note` takes any object (also {}) and logs each run."""
    upstream = Upstream(behaviours)
    log, program = directory / "runs.log", directory / "note.sh"
    program.write_text(f"#!/bin/sh\necho run >> {shlex.quote(str(log))}\necho noted\n")
    program.chmod(0o755)
    device = command_device("notes", {"note": [str(program)]},
                            [{**NOTE_TOOL, "timeout": timeout(10)}], argv=["true"], events=[])
    providers = {}
    for name in behaviours:
        protocol = PROTOCOLS[name.split("-")[0]]
        base = f"{upstream.url}/{name}" + ("" if protocol == "ollama" else "/v1")
        providers[name] = {"protocol": protocol, "base_url": base, "retries": 0}
    daemon = Daemon(directory, upstream.url, providers=providers, extra=device)
    return daemon.start(), upstream, log


def ask(daemon: Daemon, provider: str) -> list[dict]:
    with daemon.client(wait=timeout(60)) as client:
        return list(client.request("ask", prompt="note it", provider=provider,
                                   session=f"s-{provider}"))


E2E_TOO_LARGE = {
    "chat-one-chunk": [chat_call(ARGUMENTS), chat_text("Not noted.")],
    "anthropic-one-delta": [anthropic_call(ARGUMENTS), anthropic_text("Not noted.")],
    "responses-one-delta": [responses_call(ARGUMENTS), responses_text("Not noted.")],
    "responses-done-only": [responses_call(ARGUMENTS, deltas=False),
                            responses_text("Not noted.")],
    "anthropic-start-input": [anthropic_start_input(ARGUMENTS), anthropic_text("Not noted.")],
}
E2E_NOT_AN_OBJECT = {"ollama-string-arguments": [ollama_call(SMALL), ollama_text("Not noted.")]}
E2E_LOST_LINE = {
    "ollama-line-too-large": [BIG_CALL + ollama_line({}, done=True), ollama_text("Not noted.")],
    "ollama-line-too-deep": [DEEP_CALL + ollama_line({}, done=True), ollama_text("Not noted.")],
}


@pytest.fixture(scope="module")
def too_large(tmp_path_factory):
    daemon, upstream, log = notes_daemon(tmp_path_factory.mktemp("too-large"),
                                         {**E2E_TOO_LARGE, **E2E_NOT_AN_OBJECT,
                                          **E2E_LOST_LINE})
    yield daemon, log, upstream
    upstream.close()
    assert daemon.stop() == 0, daemon.log()


@pytest.mark.parametrize("provider", list(E2E_TOO_LARGE))
def test_a_call_that_lost_an_argument_piece_never_runs(too_large, provider):
    daemon, log, _ = too_large
    replies = ask(daemon, provider)
    [call] = of_type(replies, "tool_call")
    assert (call["name"], call.get("error")) == ("note", "too_large"), call
    [result] = of_type(replies, "tool_result")
    assert result["is_error"] is True and result["call_id"] == call["call_id"]
    assert result["content"].startswith("the arguments were not usable (too_large: ")
    assert "stream buffer of 65536 bytes" in result["content"], result
    codes = [w["code"] for w in of_type(replies, "warning")]
    assert codes == {"responses-done-only": ["elided"],
                     "responses-one-delta": ["delta_elided", "elided"]}.get(provider,
                                                                              ["delta_elided"])
    done = replies[-1]
    assert (done["type"], done["steps"], done["text"]) == ("done", 2, "Not noted."), done
    assert not log.exists()  # the tool never ran


def test_an_ollama_call_whose_arguments_are_a_string_never_runs(too_large):
    daemon, log, _ = too_large
    replies = ask(daemon, "ollama-string-arguments")
    [call] = of_type(replies, "tool_call")
    assert (call["name"], call.get("error")) == ("note", "not_an_object"), call
    [result] = of_type(replies, "tool_result")
    assert result["is_error"] is True and result["content"] == (
        "the arguments were not usable (not_an_object: the call's arguments were missing or "
        "not a JSON object); nothing was run")
    assert [w["code"] for w in of_type(replies, "warning")] == ["field_type"]
    done = replies[-1]
    assert (done["type"], done["steps"], done["text"]) == ("done", 2, "Not noted."), done
    assert not log.exists()


@pytest.mark.parametrize("provider, error, warning, detail", [
    ("ollama-line-too-large", "too_large", "line_too_large",
     f"a line of tool calls was {len(BIG_CALL) - 1} bytes, over the stream buffer of 65536 "
     f"bytes, and was lost"),
    ("ollama-line-too-deep", "damaged", "bad_json",
     "a line of tool calls was not JSON the decoder could read (depth) and was lost"),
], ids=["too-large", "too-deep"])
def test_an_ollama_line_of_calls_that_was_lost_is_an_error_result(too_large, provider, error,
                                                                   warning, detail):
    """The line is dropped whole: the model hears that its calls were lost,
    by an error result, and answers on; nothing runs."""
    daemon, log, upstream = too_large
    replies = ask(daemon, provider)
    [call] = of_type(replies, "tool_call")
    assert call.get("error") == error, call
    [result] = of_type(replies, "tool_result")
    assert result["is_error"] is True and result["call_id"] == call["call_id"]
    assert result["content"] == (f"the arguments were not usable ({error}: {detail}); "
                                 f"nothing was run")
    assert [w["code"] for w in of_type(replies, "warning")] == [warning]
    # the model's next request carries the call and its error result
    [_, again] = [json.loads(b) for name, b in upstream.bodies if name == provider]
    assert again["messages"][-1] == {"role": "tool", "content": result["content"],
                                     "tool_name": ""}
    done = replies[-1]
    assert (done["type"], done["steps"], done["text"]) == ("done", 2, "Not noted."), done
    assert not log.exists()
