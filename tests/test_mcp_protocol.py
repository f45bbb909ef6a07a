"""The MCP client's sans-IO parts (agent/tools/mcp/protocol.py, content.py):
the session's handshake, pagination, list changes, answers, cancellation
and violations; the stdio framer and the SSE parser in pieces; the tool
catalog and the rendering of results. No I/O: the daemon tests
(test_mcp_daemon.py) run the same against real servers."""

import json

import pytest

from agent.tools.mcp.content import catalog, render
from agent.tools.mcp.protocol import (MAX_PAGES, Answered, Failed, Framer, Listed,
                                      McpSession, Ready, SseParser, TooLarge, Violation)

TOOL = {"name": "add", "inputSchema": {"type": "object", "properties": {
    "a": {"type": "integer", "format": "int32"}}, "required": ["a"]}}


def answer(request_id, result) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode()


def ready(tools=(TOOL,)) -> McpSession:
    """A session past the handshake and its first listing."""
    session = McpSession("1")
    [initialize] = session.outgoing()
    assert initialize["method"] == "initialize"
    assert initialize["params"]["protocolVersion"] == "2025-11-25"
    events = session.receive_bytes(answer(initialize["id"], {
        "protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": True}},
        "serverInfo": {"name": "peer", "version": "2"}}))
    assert events == [Ready("2025-06-18", "peer 2", True)]
    initialized, listing = session.outgoing()
    assert initialized == {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert session.receive_bytes(answer(listing["id"], {"tools": list(tools)})) == \
        [Listed(tuple(tools), False)]
    return session


def test_a_version_the_client_does_not_speak_is_a_violation():
    session = McpSession()
    [initialize] = session.outgoing()
    [event] = session.receive_bytes(answer(initialize["id"], {
        "protocolVersion": "1999-01-01", "capabilities": {}}))
    assert isinstance(event, Violation) and "'1999-01-01'" in event.why
    assert session.outgoing() == []


def test_pages_are_followed_and_bounded():
    session = ready()
    session.receive({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    for page in range(MAX_PAGES):
        [listing] = session.outgoing()
        assert listing["params"] == ({} if page == 0 else {"cursor": f"c{page}"})
        events = session.receive_bytes(answer(listing["id"], {
            "tools": [{**TOOL, "name": f"t{page}"}], "nextCursor": f"c{page + 1}"}))
    [listed] = events
    assert len(listed.tools) == MAX_PAGES and listed.truncated
    assert session.outgoing() == []


def test_a_change_during_a_listing_lists_again_after_it():
    session = ready()
    session.receive({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    [first] = session.outgoing()
    session.receive({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    assert session.outgoing() == []
    assert session.receive_bytes(answer(first["id"], {"tools": []})) == [Listed((), False)]
    [again] = session.outgoing()
    assert again["method"] == "tools/list"


def test_a_call_is_answered_failed_or_cancelled():
    session = ready()
    one, two, three = (session.call("add", {"a": n}) for n in (1, 2, 3))
    assert [m["params"] for m in session.outgoing()] == [
        {"name": "add", "arguments": {"a": n}} for n in (1, 2, 3)]
    assert session.receive_bytes(answer(one, {"content": []})) == [Answered(one, {"content": []})]
    error = {"jsonrpc": "2.0", "id": two, "error": {"code": -32000, "message": "no"}}
    assert session.receive(error) == [Failed(two, "error -32000: no")]
    session.cancel(three, "timed out")
    assert session.outgoing() == [{"jsonrpc": "2.0", "method": "notifications/cancelled",
                                   "params": {"requestId": three, "reason": "timed out"}}]
    assert session.receive_bytes(answer(three, {"content": []})) == []  # late: dropped


@pytest.mark.parametrize("message, why", [
    (b"not json", "not JSON"),
    (b'[{"jsonrpc": "2.0", "id": 1, "result": {}}]', "batch"),
    (b'{"id": 1, "result": {}}', "not JSON-RPC 2.0"),
    (b'{"jsonrpc": "2.0", "id": 99, "result": {}}', "never asked"),
    (b'{"jsonrpc": "2.0", "id": 3, "result": {}, "error": {}}', "neither"),
    (b'{"jsonrpc": "2.0", "id": 3, "error": "bad"}', "not a JSON-RPC error"),
])
def test_a_broken_message_is_a_named_violation(message, why):
    session = ready()
    assert session.call("add", {"a": 1}) == 3
    [event] = session.receive_bytes(message)
    assert isinstance(event, Violation) and why in event.why, event


def test_the_server_is_answered_ping_and_refused_the_rest():
    session = ready()
    session.receive({"jsonrpc": "2.0", "id": "p", "method": "ping"})
    session.receive({"jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage"})
    pong, refused = session.outgoing()
    assert pong == {"jsonrpc": "2.0", "id": "p", "result": {}}
    assert refused["id"] == 7 and refused["error"]["code"] == -32601


def test_an_answer_too_large_fails_its_call_by_the_id_at_its_head():
    session = ready()
    call = session.call("add", {"a": 1})
    head = b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"xxx' % call
    assert session.too_large(head, 100) == [
        Failed(call, "the answer was over 100 bytes and was dropped")]
    [event] = session.too_large(b'{"result": {}, "id": 5', 100)
    assert isinstance(event, Violation)


def test_the_framer_bounds_a_line_and_keeps_its_head_across_reads():
    framer = Framer(64)
    assert framer.feed(b'{"a": 1}\n\n{"b"') == [b'{"a": 1}']
    assert framer.feed(b': 2}\r\n') == [b'{"b": 2}']
    big = b'{"jsonrpc":"2.0","id":4,' + b"x" * 100
    pieces = [framer.feed(big[i:i + 7]) for i in range(0, len(big), 7)]
    [[too_large]] = [p for p in pieces if p]
    assert too_large.limit == 64 and too_large.head.startswith(b'{"jsonrpc":"2.0","id":4,')
    assert framer.feed(b"yyy\n" + b'{"c": 3}\n') == [b'{"c": 3}']


def test_the_sse_parser_gives_message_data_in_pieces_and_bounds_it():
    parser = SseParser(64)
    stream = (b": comment\r\nevent: message\r\nid: 1\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n"
              b"event: other\ndata: x\n\ndata: " + b"z" * 100 + b"\n\ndata: {}\n\n")
    out = [item for i in range(len(stream)) for item in parser.feed(stream[i:i + 1])]
    assert out[0] == b'{"a":\n1}'
    assert isinstance(out[1], TooLarge) and out[1].head.startswith(b"zzz")
    assert out[2:] == [b"{}"]


def test_the_catalog_prefixes_filters_and_skips_what_it_cannot_check():
    tools = [TOOL, {**TOOL, "name": "secret"}, {"name": "weird.name", "inputSchema": TOOL[
        "inputSchema"]}, {"name": "refs", "inputSchema": {"type": "object", "$ref": "#/x"}}]
    specs, names, skipped = catalog("srv", tools, (), ("sec*",), 30.0)
    assert [spec.name for spec in specs] == ["srv_add"] and names == {"srv_add": "add"}
    assert "format" not in specs[0].parameters["properties"]["a"]  # an annotation only
    assert [s.tool for s in skipped] == ["weird.name", "refs"]
    assert "unknown keyword '$ref'" in skipped[1].why
    specs, _, _ = catalog("srv", tools, ("add",), (), 30.0)
    assert [spec.name for spec in specs] == ["srv_add"]


def test_a_result_is_text_trimmed_and_media_summarized():
    text, error = render({"content": [
        {"type": "text", "text": "é" * 40},
        {"type": "image", "mimeType": "image/png", "data": "AAAA" * 10},
        {"type": "audio", "mimeType": "audio/wav", "data": "AAA="},
        {"type": "resource", "resource": {"uri": "file:///a", "mimeType": "text/plain",
                                          "text": "abc"}},
        {"type": "resource_link", "uri": "file:///b"}]}, 1000)
    assert not error
    assert text.splitlines()[1:] == ["[image image/png, 30 bytes]", "[audio audio/wav, 2 bytes]",
                                     "[resource file:///a text/plain, 3 bytes]",
                                     "[resource link file:///b unknown]"]
    trimmed, _ = render({"content": [{"type": "text", "text": "é" * 40}]}, 11)
    assert trimmed == "é" * 5 + "\n[trimmed: 80 bytes of text, the first 11 kept]"
    assert render({"isError": True, "content": [{"type": "text", "text": "no"}]}, 10) == \
        ("no", True)
    assert render({"content": [], "structuredContent": {"n": 1}}, 100) == ('{"n":1}', False)
