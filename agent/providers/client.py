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
  provider's own error message. Failing before any event raises
  UpstreamUnavailable. Neither ever holds the API key.
- A body that stops after events were forwarded (connection lost, read
  timeout, the overall deadline) is not an exception: the Answer holds the
  partial message, the decoder's MessageIncomplete and why it stopped.
- The response body goes from `aiter_raw()` to the decoder as bytes.
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
from dataclasses import dataclass
from typing import Awaitable, Callable

import httpx
import trio

from agent.providers.requests import Conversation, Provider, Tool, build_request
from agent.stream import records as rec
from agent.stream.decoders import events as ev
from agent.stream.decoders import AnthropicDecoder, OpenAIChatDecoder, OpenAIResponsesDecoder
from agent.stream.decoders.base import DEFAULT_MAX_ARGUMENTS
from agent.stream.message import Message

DECODERS = {"openai-chat": OpenAIChatDecoder, "anthropic": AnthropicDecoder,
            "openai-responses": OpenAIResponsesDecoder}
RETRY_STATUSES = frozenset({408, 429})  # and every 5xx (Anthropic's 529 overloaded too)
ERROR_BODY_LIMIT = 64 * 1024
ERROR_MESSAGE_LIMIT = 500


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
    provider_error: rec.ProviderError | None = None  # the first error event inside the stream

    @property
    def ok(self) -> bool:
        return self.incomplete is None and self.provider_error is None


class _Retry(Exception):
    def __init__(self, error: UpstreamError, retry_after: float | None = None) -> None:
        self.error = error
        self.retry_after = retry_after


class _Run:
    """One answer across its attempts: the current decoder and what was forwarded."""

    def __init__(self, provider: Provider, on_event, max_tool_arguments: int) -> None:
        self.provider = provider
        self.on_event = on_event
        self.max_tool_arguments = max_tool_arguments
        self.decoder = None
        self.forwarded = False
        self.attempts = 0
        self.interrupted: str | None = None
        self.last_error: UpstreamError | None = None  # of the attempt before a retry wait
        self.provider_error: rec.ProviderError | None = None

    async def emit(self, events: list) -> None:
        for event in events:
            self.forwarded = True
            if isinstance(event, rec.ProviderError) and self.provider_error is None:
                self.provider_error = event
            if self.on_event is not None:
                await self.on_event(event)

    async def finish(self) -> Answer:
        closing = self.decoder.close()
        await self.emit(closing)
        incomplete = next((e for e in closing if isinstance(e, ev.MessageIncomplete)), None)
        return Answer(self.decoder.message, self.attempts, incomplete, self.interrupted,
                      self.provider_error)


async def stream_answer(client: httpx.AsyncClient, provider: Provider,
                        conversation: Conversation, tools: list[Tool] | None = None, *,
                        on_event: Callable[[object], Awaitable[None]] | None = None,
                        retries: int = 3, backoff: Backoff = Backoff(),
                        max_tool_arguments: int = DEFAULT_MAX_ARGUMENTS) -> Answer:
    """Stream one answer; see the module docstring for the rules. A tool
    call's arguments past max_tool_arguments bytes are not kept (the call's
    error is TOO_LARGE)."""
    url, headers, body = build_request(provider, conversation, tools)
    timeout = httpx.Timeout(provider.read_timeout, connect=provider.connect_timeout)
    run = _Run(provider, on_event, max_tool_arguments)
    with trio.move_on_after(provider.total_timeout) as deadline:
        for attempt in range(retries + 1):
            try:
                await _attempt(client, run, url, headers, body, timeout)
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
    try:
        async with client.stream("POST", url, headers=headers, json=body,
                                 timeout=timeout) as response:
            if not 200 <= response.status_code < 300:
                error = await _http_error(provider, response)
                if response.status_code in RETRY_STATUSES or response.status_code >= 500:
                    raise _Retry(error, error.retry_after)
                raise error
            async for read in response.aiter_raw():
                await run.emit(run.decoder.feed(read))
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
    if provider.api_key:
        # Some providers echo a wrong key back in their message.
        message = message.replace(provider.api_key, "***")
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
