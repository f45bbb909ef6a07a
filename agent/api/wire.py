"""The socket API's wire (docs/protocol.md): a reply as its JSON line.

`encode()` turns a reply into its line, with the id of the request it
answers (or of the subscription it is shown to) and, for subscribers, the
ask it came from. It masks nothing: what it is given has passed the masking
edge (agent/core/edge.py) already, the replies of asks in the center, the
server's own replies and the request ids where the server makes them. A
float JSON cannot hold would be refused here (allow_nan=False), never
written: the edge has made them null.

This module loads json and the reply vocabulary only: the blocking client
(client.py) uses it too, and must start without trio, httpx or the C core.
"""

from __future__ import annotations

from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any, Mapping

from agent.core.replies import (Announced, Delta, Done, Error, History, Ok, Reply, RequestId,
                                Sessions, Status, Stopped, Timers)
from agent.jsonline import dump_line, dump_utf8

PROTOCOL_VERSION = 1

# The reply that ends a request, by operation; ask and subscribe stream until it.
FINAL = {"ask": frozenset({Done.type, Error.type}), "subscribe": frozenset({Error.type})}
FINAL_DEFAULT = frozenset({Status.type, Sessions.type, History.type, Ok.type, Announced.type,
                           Stopped.type, Timers.type, Error.type})


class _Unaddressed:
    __slots__ = ()


UNADDRESSED: Any = _Unaddressed()  # a reply without an id: hello, shutdown, a device's state


def encode(reply: Reply, request_id: RequestId | None = UNADDRESSED,
           request: Mapping[str, Any] | None = None) -> bytes:
    """The line of a reply: id (when addressed; None is null), type, the
    reply's fields, then request (the ask a subscriber is shown)."""
    if type(reply) is Delta:
        if request is None and type(request_id) is int:
            return delta_line(request_id, reply.text)
        if request is not None and request_id is UNADDRESSED:  # for subscribers
            return _delta_for(reply.text, request)
    line = {} if request_id is UNADDRESSED else {"id": request_id}
    line["type"] = reply.type
    line.update(reply.fields())
    if request is not None:
        line["request"] = request
    return dump_line(line)


def delta_line(request_id: int, text: str) -> bytes:
    """encode(Delta(text), request_id) without the generic walk: the line of
    every streamed token. UTF-8 as is, ASCII escapes for a lone surrogate."""
    try:
        return f'{{"id":{request_id},"type":"delta","text":{encode_basestring(text)}}}\n' \
            .encode("utf-8")
    except UnicodeEncodeError:
        return f'{{"id":{request_id},"type":"delta","text":{encode_basestring_ascii(text)}}}\n' \
            .encode("ascii")


class _RequestCache:
    """The encoded `request` of the last ask whose deltas went to the
    subscribers: an Origin's request is made once and never changed, so the
    same object means the same JSON."""
    __slots__ = ("request", "json")

    def __init__(self) -> None:
        self.request: Mapping[str, Any] | None = None
        self.json: bytes | None = b"{}"


_last_request = _RequestCache()


def _delta_for(text: str, request: Mapping[str, Any]) -> bytes:
    """encode(Delta(text), request=request), the generic walk only for a
    request not seen last time."""
    cache = _last_request
    if request is not cache.request:
        cache.request = request
        try:
            cache.json = dump_utf8(request)
        except UnicodeEncodeError:
            cache.json = None  # a lone surrogate: the whole line goes ASCII
    if cache.json is not None:
        try:
            return (f'{{"type":"delta","text":{encode_basestring(text)},"request":'
                    .encode("utf-8") + cache.json + b"}\n")
        except UnicodeEncodeError:
            pass
    return dump_line({"type": "delta", "text": text, "request": request})


def address_prefix(request_id: RequestId) -> bytes:
    """The start of a line addressed to request_id, for a reply encoded once
    without an id and sent to many: `readdress`."""
    return dump_line({"id": request_id})[:-2] + b","


def readdress(unaddressed: bytes, prefix: bytes) -> bytes:
    """The line encode(reply, request_id, request) would give, from
    encode(reply, request=request) and address_prefix(request_id)."""
    return prefix + unaddressed[1:]
