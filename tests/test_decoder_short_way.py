"""The provider decoders' short way for the usual read (ProviderDecoder.feed):
a read that is one text or reasoning piece of the part the last read's
delta went to is passed on without _handle. It must give exactly what
_handle gives, for any order of events: the same events from every read and
the same final message. The oracle is the same decoder with the short way
off (`_continued` answering None, so every read goes through _handle), fed
the same reads, one event per read so that the short way is taken wherever
it can be."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from agent.stream.decoders import AnthropicDecoder, OllamaDecoder, OpenAIChatDecoder

TEXT = st.text(alphabet="ab é🙂\n\"", min_size=0, max_size=4)
INDEX = st.integers(0, 2)


def _sse(obj: dict, name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(obj)}\n\n".encode()


def _chat_event() -> st.SearchStrategy[bytes]:
    def chunk(index, delta, finish=None):
        return _sse({"choices": [{"index": index, "delta": delta, "finish_reason": finish}]})

    return st.one_of(
        st.builds(lambda i, t: chunk(i, {"content": t}), INDEX, TEXT),
        st.builds(lambda i, t: chunk(i, {"reasoning_content": t}), INDEX, TEXT),
        st.builds(lambda i, t: chunk(i, {"refusal": t}), INDEX, TEXT),
        st.builds(lambda i, c, t: chunk(i, {"tool_calls": [
            {"index": c, "id": f"call_{c}", "function": {"name": "f", "arguments": t}}]}),
            INDEX, INDEX, TEXT),
        st.builds(lambda i: chunk(i, {}, "stop"), INDEX),
        st.just(b"data: [DONE]\n\n"),
    )


def _anthropic_event() -> st.SearchStrategy[bytes]:
    blocks = {"text": {"type": "text", "text": ""},
              "thinking": {"type": "thinking", "thinking": ""},
              "tool_use": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}}
    deltas = {"text_delta": "text", "thinking_delta": "thinking",
              "input_json_delta": "partial_json"}

    def start(i, kind):
        return _sse({"type": "content_block_start", "index": i, "content_block": blocks[kind]},
                    "content_block_start")

    def delta(i, kind, t):
        return _sse({"type": "content_block_delta", "index": i,
                     "delta": {"type": kind, deltas[kind]: t}}, "content_block_delta")

    return st.one_of(
        st.builds(start, INDEX, st.sampled_from(sorted(blocks))),
        st.builds(delta, INDEX, st.sampled_from(sorted(deltas)), TEXT),
        st.builds(delta, INDEX, st.just("text_delta"), TEXT),
        st.builds(lambda i: _sse({"type": "content_block_stop", "index": i},
                                 "content_block_stop"), INDEX),
        st.just(_sse({"type": "message_stop"}, "message_stop")),
    )


def _ollama_event() -> st.SearchStrategy[bytes]:
    def line(message, done=False):
        return json.dumps({"model": "m", "message": {"role": "assistant", **message},
                           "done": done}).encode() + b"\n"

    return st.one_of(
        st.builds(lambda t: line({"content": t}), TEXT),
        st.builds(lambda t: line({"content": "", "thinking": t}), TEXT),
        st.builds(lambda t, u: line({"content": t, "thinking": u}), TEXT, TEXT),
        st.just(line({"content": "", "tool_calls": [{"function": {"name": "f",
                                                                   "arguments": {"a": 1}}}]})),
        st.just(line({"content": ""}, done=True)),
    )


def _without_short_way(cls):
    class Long(cls):
        def _continued(self, delta):
            return None
    return Long


def _same_either_way(cls, reads: list[bytes]) -> None:
    short, long = cls(), _without_short_way(cls)()
    for r in reads:
        assert short.feed(r) == long.feed(r), r
    assert short.close() == long.close()
    assert short.message == long.message


@given(st.lists(_chat_event(), max_size=30))
def test_chat_short_way_is_handle(reads):
    _same_either_way(OpenAIChatDecoder, reads)


@given(st.lists(_anthropic_event(), max_size=30))
def test_anthropic_short_way_is_handle(reads):
    _same_either_way(AnthropicDecoder, reads)


@given(st.lists(_ollama_event(), max_size=30))
def test_ollama_short_way_is_handle(reads):
    _same_either_way(OllamaDecoder, reads)


def test_the_short_way_is_taken():
    """The oracle above means something only if the short way runs: a
    second piece of the same part leaves _handle alone."""
    dec = OllamaDecoder()
    dec.feed(b'{"message":{"content":"a"}}\n')
    calls = []
    dec._handle = lambda events, out: calls.append(events)
    got = dec.feed(b'{"message":{"content":"b"}}\n')
    assert [e.text for e in got] == ["b"] and calls == []
    assert dec.message.text == "ab"
