"""Streaming one answer from a provider: the thin trio + httpx shell around
build_request (agent/providers/requests.py) and the provider decoders.

    answer = await stream_answer(client, provider, conversation, tools,
                                 on_event=forward)   # async callable, or None
    answer.message                                   # agent.stream.message.Message

Every decoded event is awaited through on_event as it arrives, then the
Answer comes back. The rules:
- Retries (exponential backoff with full jitter, Retry-After honoured, in
  seconds or as an HTTP date) on
  connection failures, 408, 429 and 5xx, only while no event has been
  forwarded: once the caller has seen a delta, a retry would repeat it.
- A non-2xx answer that is not retried raises ProviderHTTPError with the
  provider's own error message; ToolsUnsupported when the request carried
  tools and the error is about them (never retried). Failing before any event raises
  UpstreamUnavailable. Neither ever holds the API key.
- A body that stops after events were forwarded (connection lost, read
  timeout, the overall deadline) is not an exception: the Answer holds the
  partial message, the decoder's MessageIncomplete and why it stopped.
- The response body goes from the transport's reads to the decoder as
  bytes (agent/providers/transport.py; httpx's aiter_raw() elsewhere). A
  2xx answer is looked at first: Content-Encoding gzip or deflate is
  decoded here, in bounded pieces, before the core (any other encoding is
  refused by name); a Content-Type other than text/event-stream
  (application/x-ndjson for Ollama's native API; none at all is taken as
  a stream) is not decoded: a JSON error body ({"error":
  ...}, "model not loaded") becomes the Answer's provider_error, a whole
  JSON completion (a server ignoring "stream": true) and anything else are
  refused, by content type, in Answer.refused. So is an empty body.
- An answer's text, reasoning and refusal together may reach max_text_bytes
  (UTF-8): the event that passes it is not forwarded, the response is
  closed, and the Answer says so in too_large, holding what had arrived.
  A model cannot make the daemon hold an answer of any size.
- The API key is masked in the raw bytes and details of warnings before
  they are passed on: a server may echo the request back.
- Cancelling the caller closes the response (and its connection) at once;
  a complete answer leaves the connection in the client's pool, so pass one
  AsyncClient for all requests to keep connections alive.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import math
import random
import time
import zlib
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterator

import httpx
import trio

from agent.masking import Masker
from agent.providers.transport import BODY_READ, CA_FILE
from agent.providers.requests import (
    DEFAULT_STREAM_TYPE,
    STREAM_TYPES,
    Conversation,
    Provider,
    Tool,
    build_request,
    encode_body,
)
from agent.stream import records as rec
from agent.stream.decoders import events as ev
from agent.stream.decoders import (
    AnthropicDecoder,
    OllamaDecoder,
    OpenAIChatDecoder,
    OpenAIResponsesDecoder,
)
from agent.stream.decoders.base import DEFAULT_MAX_ARGUMENTS
from agent.stream.jsonscan import loads
from agent.stream.message import Message

DECODERS = {"openai-chat": OpenAIChatDecoder, "anthropic": AnthropicDecoder,
            "openai-responses": OpenAIResponsesDecoder, "ollama": OllamaDecoder}
RETRY_STATUSES = frozenset({408, 429})  # and every 5xx (Anthropic's 529 overloaded too)
ERROR_BODY_LIMIT = 64 * 1024
ERROR_MESSAGE_LIMIT = 500
INFLATE_PIECE = 64 * 1024  # decoded bytes per piece: a compressed read may expand 1000-fold


class UpstreamError(Exception):
    """The provider gave no answer; str() names the provider, never the key."""

    def __init__(self, provider: str, message: str) -> None:
        super().__init__(f"{provider}: {message}")
        self.provider = provider


class ProviderHTTPError(UpstreamError):
    """A non-2xx status; message is the provider's own, from its error body."""

    def __init__(self, provider: str, status: int, message: str,
                 retry_after: float | None = None) -> None:
        super().__init__(provider, f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


class ToolsUnsupported(ProviderHTTPError):
    """A request with tools refused for them (400 or 500 naming tools): a
    model or server build without tool support. Not retried: it would be
    refused again."""


def refuses_tools(status: int, message: str) -> bool:
    """Whether an error status of a request that carried tools is about the
    tools. Ollama answers 400 "... does not support tools", llama.cpp 500
    "tools param requires --jinja flag", vLLM 400 about tool choice."""
    return status in (400, 422, 500, 501) and "tool" in message.lower()


class UpstreamUnavailable(UpstreamError):
    """No event arrived: connection failure, timeout, retries used up."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Full-jitter exponential backoff; a Retry-After longer than
    max_retry_after is not waited for (the error goes to the caller)."""
    base: float = 0.5
    cap: float = 8.0
    max_retry_after: float = 60.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        jitter = random.uniform(0, min(self.cap, self.base * 2 ** attempt))
        # Never earlier than the server asked; a little jitter on top so
        # clients told the same second do not all return in it.
        return retry_after + jitter / 4 if retry_after is not None else jitter


@dataclass
class Answer:
    message: Message
    attempts: int                                    # HTTP requests made
    incomplete: ev.MessageIncomplete | None = None   # the body ended before the protocol's end
    interrupted: str | None = None                   # why the body stopped early, if it did
    provider_error: rec.ProviderError | None = None  # the first error event, or an error body
    refused: str | None = None                       # why a 2xx body was not decoded
    too_large: str | None = None                     # why the body was closed at max_text_bytes
    text_bytes: int = 0                              # of text, reasoning and refusal forwarded

    @property
    def ok(self) -> bool:
        return (self.incomplete is None and self.provider_error is None
                and self.refused is None and self.too_large is None)


class _Retry(Exception):
    def __init__(self, error: UpstreamError, retry_after: float | None = None) -> None:
        self.error = error
        self.retry_after = retry_after


class _TooLarge(Exception):
    """Raised out of the body's read loop at max_text_bytes, which closes the response."""


_TEXT_EVENTS = (rec.TextDelta, rec.ReasoningDelta, rec.RefusalDelta)


class _Run:
    """One answer across its attempts: the current decoder and what was forwarded."""

    def __init__(self, provider: Provider, on_event, max_tool_arguments: int,
                 max_text_bytes: int | None) -> None:
        self.provider = provider
        self.on_event = on_event
        self.max_tool_arguments = max_tool_arguments
        self.max_text_bytes = max_text_bytes
        self.text_bytes = 0
        self.too_large: str | None = None
        self.decoder = None
        self.forwarded = False
        self.attempts = 0
        self.interrupted: str | None = None
        self.last_error: UpstreamError | None = None  # of the attempt before a retry wait
        self.provider_error: rec.ProviderError | None = None
        self.refused: str | None = None

    async def emit(self, events: list) -> None:
        on_event = self.on_event
        for event in events:
            if type(event) in _TEXT_EVENTS:  # the per-token path: no other check applies
                if self.max_text_bytes is not None:
                    text = event.text
                    self.text_bytes += len(text) if text.isascii() else len(text.encode())
                    if self.text_bytes > self.max_text_bytes:
                        self.too_large = (f"the answer passed the limit of "
                                          f"{self.max_text_bytes} bytes of text; the stream "
                                          "was closed there")
                        raise _TooLarge
            elif isinstance(event, rec.ProviderError):
                if self.provider_error is None:
                    self.provider_error = event
            elif isinstance(event, (rec.DecodeWarning, rec.UnknownField)):
                self._mask(event)
            self.forwarded = True
            if on_event is not None:
                await on_event(event)

    def _mask(self, warning: rec.DecodeWarning | rec.UnknownField) -> None:
        key = self.provider.api_key
        if not key:
            return
        if isinstance(warning, rec.UnknownField):
            warning.preview = warning.preview.replace(key.encode(), b"***")
            return
        if warning.raw is not None:
            warning.raw = warning.raw.replace(key.encode(), b"***")
        if warning.detail is not None:
            warning.detail = warning.detail.replace(key, "***")

    async def finish(self) -> Answer:
        if self.too_large is not None:
            # Closed on purpose: no end-of-stream events, no truncated tool calls.
            return Answer(self.decoder.message, self.attempts, too_large=self.too_large,
                          text_bytes=self.text_bytes)
        if self.refused is not None or (self.provider_error is not None and not self.forwarded):
            # Nothing was decoded: no end-of-stream events for a body that was no stream.
            return Answer(self.decoder.message, self.attempts, None, None,
                          self.provider_error, self.refused)
        closing = self.decoder.close()
        await self.emit(closing)
        incomplete = next((e for e in closing if isinstance(e, ev.MessageIncomplete)), None)
        return Answer(self.decoder.message, self.attempts, incomplete, self.interrupted,
                      self.provider_error, text_bytes=self.text_bytes)


_JSON_BODY = {"content-type": "application/json"}


async def stream_answer(client: httpx.AsyncClient, provider: Provider,
                        conversation: Conversation, tools: list[Tool] | None = None, *,
                        on_event: Callable[[object], Awaitable[None]] | None = None,
                        retries: int = 3, backoff: Backoff = Backoff(),
                        max_tool_arguments: int = DEFAULT_MAX_ARGUMENTS,
                        max_text_bytes: int | None = None) -> Answer:
    """Stream one answer; see the module docstring for the rules. A tool
    call's arguments past max_tool_arguments bytes are not kept (the call's
    error is TOO_LARGE); text past max_text_bytes closes the stream."""
    url, headers, body = build_request(provider, conversation, tools)
    timeout = httpx.Timeout(provider.read_timeout, connect=provider.connect_timeout)
    run = _Run(provider, on_event, max_tool_arguments, max_text_bytes)
    with trio.move_on_after(provider.total_timeout) as deadline:
        for attempt in range(retries + 1):
            try:
                await _attempt(client, run, url, headers, body, timeout)
                break
            except _TooLarge:
                break
            except _Retry as retry:
                run.last_error = retry.error
                wait = retry.retry_after
                if attempt == retries or (wait is not None and wait > backoff.max_retry_after):
                    raise retry.error from retry.error.__cause__
                await trio.sleep(backoff.delay(attempt, retry.retry_after))
    if deadline.cancelled_caught:
        if not run.forwarded:
            raise UpstreamUnavailable(provider.name, f"no answer within the overall deadline "
                                      f"of {provider.total_timeout:g} s") from run.last_error
        run.interrupted = f"the overall deadline of {provider.total_timeout:g} s passed"
    return await run.finish()


async def _attempt(client: httpx.AsyncClient, run: _Run, url: str, headers: dict,
                   body: dict, timeout: httpx.Timeout) -> None:
    provider = run.provider
    # a retry decodes from scratch
    run.decoder = DECODERS[provider.protocol](max_arguments=run.max_tool_arguments)
    run.attempts += 1
    # the daemon's transport trusts the provider's CA file too (httpx's ignores it)
    extensions = {CA_FILE: provider.ca_file} if provider.ca_file else None
    try:
        # encode_body: a provider's opaque items go back byte-exact
        async with client.stream("POST", url, headers={**headers, **_JSON_BODY},
                                 content=encode_body(body), timeout=timeout,
                                 extensions=extensions) as response:
            if not 200 <= response.status_code < 300:
                error = await _http_error(provider, response)
                if body.get("tools") and refuses_tools(error.status, error.message):
                    raise ToolsUnsupported(provider.name, error.status, error.message)
                if response.status_code in RETRY_STATUSES or response.status_code >= 500:
                    raise _Retry(error, error.retry_after)
                raise error
            await _body(run, response)
    except httpx.TransportError as exc:
        if run.forwarded:
            run.interrupted = _describe(exc)
            return
        error = UpstreamUnavailable(provider.name, _describe(exc))
        error.__cause__ = exc
        # A stalled server would stall again: a read timeout is not retried.
        if isinstance(exc, httpx.ReadTimeout):
            raise error from exc
        raise _Retry(error) from exc


async def _body(run: _Run, response: httpx.Response) -> None:
    """A 2xx body: an event stream into the decoder, or why it is none."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip", "deflate"):
        run.refused = (f"HTTP {response.status_code} with content encoding {encoding!r}: "
                       "only gzip and deflate are decoded")
        return
    inflater = None if encoding == "identity" else Inflater(encoding)
    media = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    stream_type = STREAM_TYPES.get(run.provider.protocol, DEFAULT_STREAM_TYPE)
    try:
        if media and media != stream_type:
            await _not_a_stream(run, response, media, stream_type, inflater)
            return
        received = 0
        feed = run.decoder.feed
        next_read = _body_reads(response)
        while read := await next_read():
            if inflater is None:  # the usual body: one read, one feed
                received += len(read)
                await run.emit(feed(read))
                continue
            for piece in inflater.feed(read):
                received += len(piece)
                await run.emit(feed(piece))
    except zlib.error as exc:
        why = f"the {encoding} body does not decode: {exc}"
        if run.forwarded:
            run.interrupted = why
        else:
            run.refused = why
        return
    if not received:
        run.refused = f"HTTP {response.status_code} with an empty body, no event stream"


def _body_reads(response: httpx.Response):
    """An async callable giving the body's next read, b"" at its end: our
    transport's own (agent/providers/transport.py), else one over httpx's
    aiter_raw()."""
    read = response.extensions.get(BODY_READ)
    if read is not None:
        return read
    chunks = response.aiter_raw()

    async def next_chunk() -> bytes:
        async for data in chunks:  # never empty: httpx yields no empty chunk
            return data
        return b""
    return next_chunk


async def _not_a_stream(run: _Run, response: httpx.Response, media: str, stream_type: str,
                        inflater: "Inflater | None") -> None:
    """A 2xx body of another type: a JSON error is the provider's error;
    a JSON completion, anything else or nothing at all is refused by name."""
    status = response.status_code
    if media != "application/json" and not media.endswith("+json"):
        run.refused = f"HTTP {status} with content type {media!r}, not {stream_type}"
        return
    body = bytearray()
    async for read in response.aiter_raw():
        for piece in inflater.feed(read) if inflater else (read,):
            body += piece
            if len(body) > ERROR_BODY_LIMIT:
                run.refused = (f"HTTP {status} with a {media} body over {ERROR_BODY_LIMIT} "
                               f"bytes, not {stream_type}")
                return
    if not body.strip():
        run.refused = f"HTTP {status} with an empty {media} body, no event stream"
        return
    try:
        value = loads(bytes(body))
    except ValueError as exc:
        run.refused = f"HTTP {status} with a {media} body that is not JSON ({exc})"
        return
    if isinstance(value, dict) and value.get("error") is not None:
        error = value["error"]
        kind = (error.get("type") or error.get("code")) if isinstance(error, dict) else None
        message = Masker(run.provider.secrets()).mask(
            _error_message(bytes(body)) or "an error without a message")
        run.provider_error = rec.ProviderError(kind if isinstance(kind, str) else None,
                                               message[:ERROR_MESSAGE_LIMIT], None)
        return
    # Decided: a whole completion is refused, not decoded: a server that
    # ignores "stream": true is misconfigured, and saying so beats a second
    # decoder per wire format for one case.
    whole = isinstance(value, dict) and any(k in value for k in ("choices", "content", "output"))
    run.refused = (f"HTTP {status} with a whole completion ({media}) instead of an event stream: "
                   "the server ignored \"stream\": true" if whole else
                   f"HTTP {status} with a {media} body that is neither an event stream nor an "
                   "error")


class Inflater:
    """gzip or deflate decoded in pieces of at most INFLATE_PIECE bytes, so
    memory stays bounded whatever the compression ratio. deflate is zlib's
    format (RFC 9110); a raw deflate body, which some servers send, is
    recognised at its first bytes. Raises zlib.error on a corrupt body."""

    def __init__(self, encoding: str) -> None:
        self._raw_fallback = encoding == "deflate"
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip"
                                     else zlib.MAX_WBITS)

    def feed(self, data: bytes) -> Iterator[bytes]:
        try:
            piece = self._z.decompress(data, INFLATE_PIECE)
        except zlib.error:
            if not self._raw_fallback:
                raise
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)
            piece = self._z.decompress(data, INFLATE_PIECE)
        self._raw_fallback = False
        while piece:
            yield piece
            piece = self._z.decompress(self._z.unconsumed_tail, INFLATE_PIECE) \
                if self._z.unconsumed_tail else b""


async def _http_error(provider: Provider, response: httpx.Response) -> ProviderHTTPError:
    body = bytearray()
    try:
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) >= ERROR_BODY_LIMIT:
                break
    except httpx.TransportError:
        pass  # the status alone still says what happened
    message = _error_message(bytes(body)) or response.reason_phrase or "no error message"
    # Some providers echo a wrong key back in their message.
    message = Masker(provider.secrets()).mask(message)
    return ProviderHTTPError(provider.name, response.status_code, message[:ERROR_MESSAGE_LIMIT],
                             retry_after(response.headers.get("retry-after")))


def _error_message(body: bytes) -> str | None:
    """OpenAI and Anthropic: {"error": {"message": ...}}; Ollama and others:
    {"error": "..."}; anything else: the body's text."""
    try:
        value = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip() or None
    if isinstance(value, dict):
        error = value.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(error, str):
            return error
        if isinstance(value.get("message"), str):
            return value["message"]
    return body.decode("utf-8", "replace").strip() or None


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After in seconds from now: delay-seconds or an HTTP date (RFC
    9110); None when absent or unreadable (then backoff decides). A date in
    the past is 0."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:  # an HTTP date is GMT; a naive one is read as such
            when = when.replace(tzinfo=datetime.timezone.utc)
        return max(0.0, when.timestamp() - (time.time() if now is None else now))
    return seconds if seconds >= 0 and math.isfinite(seconds) else None


def _describe(exc: httpx.TransportError) -> str:
    kind = {httpx.ConnectError: "cannot connect", httpx.ConnectTimeout: "connect timeout",
            httpx.ReadTimeout: "read timeout", httpx.RemoteProtocolError: "connection lost",
            httpx.ReadError: "connection lost"}.get(type(exc), type(exc).__name__)
    detail = str(exc)
    return f"{kind}: {detail}" if detail else kind
