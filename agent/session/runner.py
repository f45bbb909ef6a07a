"""One ask, from prompt to committed history: the session layer between the
socket API and the providers.

    runner = Runner(store, http_client, providers, default_provider, system_prompt)
    await runner.ask(prompt, session_id, provider_name, emit)

emit(reply) is synchronous and must not block (the server puts replies in
bounded queues), so a slow reader never holds up the upstream stream. The
replies of an ask, in order: started, then delta / reasoning / refusal /
tool_call / warning as the decoder produces them, then done or error. Their
shapes are in docs/protocol.md.

History: asks on one session run one at a time (a lock per session), and an
exchange is committed only when its answer is complete, so a history never
holds half an answer. A failed, interrupted or cancelled ask commits nothing.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import httpx
import trio

from agent.providers import (
    AssistantTurn,
    Conversation,
    ProviderHTTPError,
    UpstreamError,
    UserTurn,
    stream_answer,
)
from agent.providers.requests import Provider
from agent.session.store import check_session_id
from agent.stream import events as ev
from agent.stream.message import Message

Emit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class Upstream:
    """A configured provider and its retry budget."""
    provider: Provider
    retries: int = 3


class AskFailed(Exception):
    """An ask that ended without an answer: code and message for the error reply."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.extra = extra


class Runner:
    def __init__(self, store, client: httpx.AsyncClient, upstreams: Mapping[str, Upstream],
                 default_provider: str, system_prompt: str | None) -> None:
        self.store = store
        self.client = client
        self.configure(upstreams, default_provider, system_prompt)
        self._session_locks: dict[str, trio.Lock] = {}
        self._store_lock = trio.Lock()  # the store is not thread-safe: one call at a time

    def configure(self, upstreams: Mapping[str, Upstream], default_provider: str,
                  system_prompt: str | None) -> None:
        """Swap providers and prompt (config reload); asks in flight keep theirs."""
        self.upstreams = dict(upstreams)
        self.default_provider = default_provider
        self.system_prompt = system_prompt

    async def ask(self, prompt: str, session: str | None, provider_name: str | None,
                  emit: Emit) -> None:
        """Run one ask to its done or error reply. Cancellation passes through
        (the caller tells the client why)."""
        try:
            await self._ask(prompt, session, provider_name, emit)
        except AskFailed as failure:
            emit({"type": "error", "code": failure.code, "message": str(failure),
                  **failure.extra})

    async def _ask(self, prompt: str, session: str | None, provider_name: str | None,
                   emit: Emit) -> None:
        name = provider_name or self.default_provider
        upstream = self.upstreams.get(name)
        if upstream is None:
            raise AskFailed("unknown_provider", f"no provider named {name!r}; configured: "
                            f"{', '.join(sorted(self.upstreams))}")
        session = session or "s-" + secrets.token_hex(6)
        try:
            check_session_id(session)
        except ValueError as exc:
            raise AskFailed("bad_session", str(exc)) from None
        lock = self._session_locks.setdefault(session, trio.Lock())
        try:
            async with lock:
                await self._exchange(prompt, session, upstream, lock, emit)
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting \
                    and self._session_locks.get(session) is lock:
                del self._session_locks[session]  # no ask of this session left

    async def _exchange(self, prompt: str, session: str, upstream: Upstream, lock: trio.Lock,
                        emit: Emit) -> None:
        turns = await self._store(self.store.load, session)
        provider = upstream.provider
        emit({"type": "started", "session": session, "provider": provider.name,
              "model": provider.model})
        user = UserTurn(prompt)
        conversation = Conversation(self.system_prompt, [*turns, user])

        async def forward(event: object) -> None:
            reply = event_reply(event)
            if reply is not None:
                emit(reply)
                # One network read can decode into many replies: let the
                # clients' writers run between them, so a reading client's
                # queue measures its reading, not the upstream's chunking.
                await trio.lowlevel.checkpoint()

        try:
            answer = await stream_answer(self.client, provider, conversation,
                                         on_event=forward, retries=upstream.retries)
        except ProviderHTTPError as exc:
            raise AskFailed("upstream_http", str(exc), status=exc.status) from None
        except UpstreamError as exc:
            raise AskFailed("upstream_unavailable", str(exc)) from None
        if answer.provider_error is not None:
            error = answer.provider_error
            raise AskFailed("provider_error", f"{provider.name}: "
                            f"{error.message or 'error event without a message'}",
                            provider_type=error.type)
        if not answer.ok:
            why = answer.interrupted or (answer.incomplete.detail if answer.incomplete
                                         else "the stream ended early")
            raise AskFailed("interrupted", f"{provider.name}: the answer was cut short "
                            f"({why}); not kept in the history",
                            text=answer.message.text)
        if self._session_locks.get(session) is not lock:
            # Forgotten while this ask ran: its exchange must not bring
            # the session back.
            raise AskFailed("forgotten", f"session {session!r} was forgotten during "
                            "the ask; the answer is not kept")
        await self._store(self.store.commit, session, [user, AssistantTurn(answer.message)])
        emit(done_reply(session, answer.message, answer.attempts))

    async def forget(self, session: str) -> bool:
        self._session_locks.pop(session, None)  # an ask in flight sees it gone
        return await self._store(self.store.forget, session)

    async def history(self, session: str) -> list:
        return await self._store(self.store.load, session)

    async def sessions(self) -> list[dict]:
        return await self._store(self.store.sessions)

    async def _store(self, call, *args):
        # fsync on an SD card can take tens of milliseconds: off the trio loop.
        async with self._store_lock:
            return await trio.to_thread.run_sync(call, *args)


def event_reply(event: object) -> dict[str, Any] | None:
    """The socket reply of one decoder event, or None for events the done
    reply sums up (usage, finish) or that only the message needs."""
    if isinstance(event, ev.TextDelta):
        return {"type": "delta", "text": event.text}
    if isinstance(event, ev.ReasoningDelta):
        return {"type": "reasoning", "text": event.text}
    if isinstance(event, ev.RefusalDelta):
        return {"type": "refusal", "text": event.text}
    if isinstance(event, ev.ToolCallDone):
        call = event.tool_call
        reply = {"type": "tool_call", "call_id": call.id, "name": call.name,
                 "arguments": call.parsed if call.parsed is not None else call.arguments}
        if call.error is not None:
            reply["error"] = call.error.value
        return reply
    if isinstance(event, ev.DecodeWarning):
        return {"type": "warning", "code": event.code.name.lower(), "detail": event.detail}
    if isinstance(event, ev.FramingError):
        return {"type": "warning", "code": event.code.name.lower(),
                "detail": f"an event of {event.size} bytes was dropped"}
    if isinstance(event, ev.UnknownField):
        return {"type": "warning", "code": "unknown_sse_field", "detail": event.name}
    return None


def usage_reply(message: Message) -> dict[str, int] | None:
    usage = message.usage
    if usage is None:
        return None
    counts = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
              "total_tokens": usage.total_tokens, "cache_read_tokens": usage.cache_read_tokens,
              "cache_write_tokens": usage.cache_write_tokens,
              "reasoning_tokens": usage.reasoning_tokens}
    return {name: count for name, count in counts.items() if count is not None}


def done_reply(session: str, message: Message, attempts: int) -> dict[str, Any]:
    finish = message.finish_reason
    return {"type": "done", "session": session,
            "finish_reason": finish.value if finish is not None else None,
            "raw_finish_reason": message.raw_finish_reason,
            "usage": usage_reply(message), "text": message.text, "attempts": attempts}
