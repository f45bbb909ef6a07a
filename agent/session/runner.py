"""One ask, from prompt to committed history: the session layer between the
center's ask lifecycle (agent/core/center.py) and the providers.

    runner = Runner(store, http_client, upstreams, default_provider, system_prompt, toolbox)
    await runner.ask(prompt, session_id, provider_name, emit, stop)

`await emit(reply)` delivers each reply (agent/core/replies.py); the doors
put it in bounded queues, so a slow reader never holds up the upstream stream. The replies of
an ask, in order: started, then delta / reasoning / refusal / tool_call /
tool_result / warning as they come, then done or error. Their shapes are in
docs/protocol.md.

Tools: the toolbox's tools (agent/tools/base.py) go with each request. A tool call starts as soon
as its arguments are complete, while the answer still streams; its result
goes back in the next request of the same ask. The loop is bounded: after
max_tool_steps requests, calls still asked for are not run and get an error
result, and the ask ends with done. One answer runs at most max_tool_calls
calls; the calls past that get an error result too, so a model cannot make
the daemon start or hold more than that per request. A call's arguments
past max_tool_arguments bytes are not kept (the decoder counts and drops
them), echoed or stored: the call gets an error result. The text,
reasoning and refusal of all of an ask's steps together stop at
answer_bytes: the stream is closed and the ask ends with answer_too_large. Every bad call
(unknown tool, arguments that are not JSON or do not match the schema, a
device that fails or times out) is an error result for the model, not an
error of the ask.

History: asks on one session run one at a time (a lock per session), and an
exchange (the prompt, every step's message, every tool result) is committed
only when the ask ends with done, so a history never holds half an answer.
A failed, interrupted or cancelled ask commits nothing. A stopped one
(Stop, barge-in) commits what was said: the steps whose tool calls all have
their results, then the text streamed since, as an assistant turn with
finish_reason "stopped"; a tool call the stop cut off is not kept. When the disk
refuses the commit (full, read-only, ...), the answer has still arrived
whole: the ask ends with done, its text and `kept: false` with a
storage_error saying why, not with an error that would lose the text. So
does an exchange too large for sessions.max_bytes even trimmed to its
prompt and last step (too_large_to_keep); the session stays as it was.

Failover: an ask goes to the first provider of its failover order (the
provider, then its `fallback` list, followed depth first) that its health
(agent/providers/health.py) admits; when none is admitted, to the first not
disabled (trying beats not answering). A first request that fails before
any reply of the answer went out (no connection, a timeout, a 5xx, a 429
after its retries, a refused key, an error event or an error body before
the first delta, a body that is no stream) hands the ask to the next
admitted provider, with a failover reply saying which failed and why. Once
a delta, reasoning, a tool call or a warning was sent, a second answer
after part of a first would be nonsense to the client and to the history:
a stream that breaks then (connection lost, read timeout, an error event,
a body cut short) is resumed instead (docs/failover.md), by the failed
provider's `resume` mode and at most ask_limits.resumes times: the same
request with the delivered text after it goes to the next admitted provider
(or the same one), a failover reply with resumed_at says so, and the
continuation passes through a Splice (agent/providers/resume.py) that drops
what it repeats, so every character reaches the client once. A call the
break cut is never run (held until the stream says it broke, then dropped);
calls that arrived whole ran, so the broken answer ends its step with them
and the next request carries their results. The step keeps one message
(resumed_message). Every request's outcome goes into the provider's
health, in later steps too.

Damage: an upstream event the decoder had to drop (not JSON, too large...)
is a warning as it happens; done counts them in dropped_events, and the
stored message keeps the same counts, so the history shows the turn as
damaged rather than as a whole answer.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import logging
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, Mapping

import trio

from agent import masking
from agent.core import replies
from agent.core.commands import Stop
from agent.core.replies import ErrorCode
from agent.providers.health import HealthBoard, Policy, State, failover_order
from agent.providers.requests import AssistantTurn, Conversation, Provider, ToolResult, UserTurn
from agent.providers.resume import Splice
from agent.tools.base import ToolOutcome
from agent.session.store import StorageError, TooLargeToKeep, check_session_id
from agent.stream import records as rec
from agent.stream.decoders import events as ev
from agent.stream.decoders.damage import warning_detail
from agent.stream.decoders.base import DEFAULT_MAX_ARGUMENTS

DEFAULT_MAX_ANSWER = 1 << 20  # bytes
YIELD_EVERY = 8  # streamed replies between two yields to the other tasks, at most
from agent.stream.message import FinishReason, Message, TextPart, ThinkingPart

if TYPE_CHECKING:
    import httpx

# Streaming an answer: httpx, the decoders. Imported at an ask's first
# request, not with this module: an idle daemon does without.
STREAMING = "agent.providers.client"

USAGE_FIELDS = ("input_tokens", "output_tokens", "total_tokens", "cache_read_tokens",
                "cache_write_tokens", "reasoning_tokens")

Emit = Callable[[replies.Reply], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class AskLimits:
    """What the model may make one ask do and hold ([sessions] config)."""
    steps: int = 8             # model requests per ask
    calls_per_answer: int = 8  # calls run of one model response; the rest get error results
    argument_bytes: int = DEFAULT_MAX_ARGUMENTS  # of one call; past it not kept, not run
    answer_bytes: int = DEFAULT_MAX_ANSWER  # text, reasoning, refusal of every step together
    resumes: int = 2           # broken answers that go on (Provider.resume), per ask

log = logging.getLogger("homeagent.session")


@dataclass(frozen=True, slots=True)
class Upstream:
    """A configured provider, its retry budget, its fallbacks and cooldowns."""
    provider: Provider
    retries: int = 3
    fallback: tuple[str, ...] = ()
    policy: Policy = Policy()
    retry_without_tools: bool = False


NO_TOOLS = ToolOutcome("no tools are available: nothing was run", True)


class Blame(enum.Enum):
    """What a failed request says about its provider's health."""
    NONE = "none"                # nothing: a bad request, a cancelled ask
    FAILED = "failed"            # it cools, and a first request fails over
    KEY_REFUSED = "key_refused"  # 401 or 403: disabled until the config is reloaded


class AskFailed(Exception):
    """An ask that ended without an answer, carrying its error reply; for a
    failed request also what it says about the provider (blame, a 429's
    retry_after) and whether any reply of its answer was sent (delivered).
    A stream that broke mid-answer also carries what it streamed (partial,
    the client.Answer) and its complete tool calls' outcomes, when they
    were waited for."""

    def __init__(self, reply: replies.Error, blame: Blame = Blame.NONE,
                 retry_after: float | None = None, delivered: bool = True) -> None:
        super().__init__(reply.message)
        self.reply = reply
        self.blame = blame
        self.retry_after = retry_after
        self.delivered = delivered
        self.partial = None
        self.outcomes: dict[int, ToolOutcome] = {}


class Runner:
    def __init__(self, store, client: httpx.AsyncClient, upstreams: Mapping[str, Upstream],
                 default_provider: str, system_prompt: str | None, tools=None,
                 ask_limits: AskLimits = AskLimits(),
                 health: HealthBoard | None = None) -> None:
        self.store = store
        self.client = client  # or what has its stream(): the daemon's LazyHttp
        self.tools = tools  # a Toolbox (agent/tools/base.py), or None: no tools
        self.health = health if health is not None else HealthBoard()
        self.configure(upstreams, default_provider, system_prompt, ask_limits)
        self._session_locks: dict[str, trio.Lock] = {}
        self._store_lock = trio.Lock()  # the store is not thread-safe: one call at a time
        self._streaming = None  # the STREAMING module, once imported

    def configure(self, upstreams: Mapping[str, Upstream], default_provider: str,
                  system_prompt: str | None, ask_limits: AskLimits = AskLimits()) -> None:
        """Swap providers, prompt and limits (config reload); asks in flight keep theirs."""
        self.upstreams = dict(upstreams)
        self.health.reconfigure({(name, u.provider.model): u for name, u in upstreams.items()})
        self.default_provider = default_provider
        self.system_prompt = system_prompt
        self.ask_limits = ask_limits

    async def ask(self, prompt: str, session: str | None, provider_name: str | None,
                  emit: Emit, stop: Stop | None = None) -> None:
        """Run one ask to its done or error reply. Cancellation passes through
        (the caller tells the client why); stop.stop() ends it early, with
        what was said kept."""
        stop = stop if stop is not None else Stop()
        try:
            await self._ask(prompt, session, provider_name, emit, stop)
        except AskFailed as failure:
            reply = failure.reply
            if reply.code is ErrorCode.INTERRUPTED:
                # The ask's last word on a cut answer (a failover's message, whose
                # answer goes on and is kept, has no such ending).
                reply = dataclasses.replace(reply,
                                            message=f"{reply.message}; not kept in the history")
            await emit(reply)
        finally:
            stop.closed.set()

    async def _ask(self, prompt: str, session: str | None, provider_name: str | None,
                   emit: Emit, stop: Stop) -> None:
        name = provider_name or self.default_provider
        if name not in self.upstreams:
            raise AskFailed(replies.Error(
                ErrorCode.UNKNOWN_PROVIDER, f"no provider named {name!r}; configured: "
                f"{', '.join(sorted(self.upstreams))}"))
        upstreams = self.upstreams  # a reload during the ask does not change its chain
        chain = [upstreams[n] for n in failover_order(
            name, {n: u.fallback for n, u in upstreams.items()})]
        session = session or "s-" + secrets.token_hex(6)
        try:
            check_session_id(session)
        except ValueError as exc:
            raise AskFailed(replies.Error(ErrorCode.BAD_SESSION, str(exc))) from None
        lock = self._session_locks.setdefault(session, trio.Lock())
        try:
            with stop.cuts() as waiting:
                await lock.acquire()
            if waiting.cancelled_caught:
                raise AskFailed(replies.Error(ErrorCode.STOPPED, "stopped while it waited for "
                                              "an earlier ask of its session; nothing kept"))
            try:
                await self._exchange(prompt, session, chain, lock, emit, stop)
            finally:
                lock.release()
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting \
                    and self._session_locks.get(session) is lock:
                del self._session_locks[session]  # no ask of this session left

    def health_of(self, upstream: Upstream):
        provider = upstream.provider
        return self.health.get(provider.name, provider.model, upstream.policy, upstream)

    def _next_admitted(self, chain: list[Upstream], after: int) -> int | None:
        """The index of the first provider past `after` its health admits;
        the ones passed over count it."""
        for index in range(after + 1, len(chain)):
            health = self.health_of(chain[index])
            if health.admit():
                return index
            health.skipped += 1
        return None

    def _first(self, chain: list[Upstream]) -> int:
        """Where an ask goes first: the first admitted provider, else the first
        not disabled; none at all is the ask's error."""
        index = self._next_admitted(chain, -1)
        if index is not None:
            return index
        for index, upstream in enumerate(chain):
            if self.health_of(upstream).state is not State.DISABLED:
                return index
        raise AskFailed(replies.Error(ErrorCode.PROVIDER_DISABLED, "; ".join(
            f"{u.provider.name} is disabled until the config is reloaded "
            f"({self.health_of(u).last_error})" for u in chain)))

    async def _announce(self, upstream: Upstream, emit: Emit, reply: replies.Reply) -> None:
        """Say where the ask goes; an ask cancelled here gives the half-open try back."""
        try:
            await emit(reply)
        except BaseException:
            self.health_of(upstream).release()
            raise

    async def _fail_over(self, chain: list[Upstream], index: int, failure: AskFailed, step: int,
                         emit: Emit) -> tuple[int, Upstream]:
        """A first request failed before its answer began: the next admitted
        provider takes the ask, or the failure is the ask's."""
        following = None
        if step == 1 and failure.blame is not Blame.NONE:
            following = self._next_admitted(chain, index)
        if following is None:
            raise failure
        return await self._hand_on(chain, index, following, failure, emit, None)

    def _resume_target(self, chain: list[Upstream], index: int, failure: AskFailed,
                       allowed: bool, resuming: bool) -> int | None:
        """Where an answer whose stream broke mid-answer goes on, by its
        provider's resume mode, or None: it ends with its error. A
        continuation (resuming) may also have failed before it streamed:
        refused, an HTTP error, nothing said before the break."""
        mode = chain[index].provider.resume
        if not allowed or mode == "off" or failure.blame is Blame.NONE \
                or (failure.partial is None and not resuming):
            return None
        refused = failure.blame is Blame.KEY_REFUSED  # disabled: never itself again
        following = self._next_admitted(chain, index) if mode == "fallback" or refused \
            else None
        if following is None and refused:
            return None
        return index if following is None else following  # none healthy: itself again

    async def _hand_on(self, chain: list[Upstream], index: int, following: int,
                       failure: AskFailed, emit: Emit,
                       resumed_at: int | None) -> tuple[int, Upstream]:
        """Say that the ask goes from chain[index] to chain[following], and why."""
        self.health_of(chain[index]).failovers += 1
        failed, upstream = chain[index].provider, chain[following]
        if resumed_at is None:
            log.warning("%s failed (%s); the ask goes to %s", failed.name,
                        failure.reply.message, upstream.provider.name)
        else:
            log.warning("%s failed mid-answer (%s); %s goes on from character %d",
                        failed.name, failure.reply.message, upstream.provider.name, resumed_at)
        await self._announce(upstream, emit, replies.Failover(
            failed.name, failure.reply.code, failure.reply.message, upstream.provider.name,
            upstream.provider.model,
            None if failure.reply.status is replies.ABSENT else failure.reply.status,
            resumed_at))
        return following, upstream

    async def _exchange(self, prompt: str, session: str, chain: list[Upstream], lock: trio.Lock,
                        emit: Emit, stop: Stop) -> None:
        if self._streaming is None:  # before _first: nothing admitted waits on it
            await self._import_streaming()
        history = await self._history(session)
        index = self._first(chain)
        upstream = chain[index]
        provider = upstream.provider
        await self._announce(upstream, emit, replies.Started(session, provider.name,
                                                             provider.model))
        exchange: list = [UserTurn(prompt)]
        messages: list[Message] = []
        # What a stop keeps: the exchange up to `whole` turns and `steps`
        # messages has every tool call with its result; `said` is the text
        # streamed since.
        whole, steps, said = 1, 0, []
        attempts = 0
        text_bytes = 0  # of every step so far, against limits.answer_bytes
        resumes = 0  # answers that broke mid-stream and went on, against limits.resumes
        limits = self.ask_limits
        with stop.cuts() as answering:
            for step in range(1, limits.steps + 1):
                conversation = Conversation(self.system_prompt, [*history, *exchange], session)
                broken: list[Message] = []  # this step's attempts that broke mid-answer
                splice = None
                while True:
                    try:
                        # The last request may still ask for tools; they are not run.
                        answer, outcomes = await self._step(
                            upstream, conversation, emit, limits, run_tools=step < limits.steps,
                            earlier=messages, text_budget=limits.answer_bytes - text_bytes,
                            said=said, splice=splice, may_resume=resumes < limits.resumes
                            and upstream.provider.resume != "off")
                        attempts += answer.attempts
                        text_bytes += answer.text_bytes
                        message = answer.message if not broken \
                            else resumed_message(broken, "".join(said), answer.message)
                        break
                    except AskFailed as failure:
                        if not failure.delivered and not broken:
                            index, upstream = await self._fail_over(chain, index, failure,
                                                                    step, emit)
                            continue
                        # Mid-answer: the stream broke after text went out, or a
                        # continuation failed before it said anything new.
                        following = self._resume_target(chain, index, failure,
                                                        resumes < limits.resumes, bool(broken))
                        if following is None:
                            raise
                        resumes += 1
                        partial = failure.partial
                        if partial is not None:
                            attempts += partial.attempts
                            text_bytes += partial.text_bytes
                            broken.append(partial.message)
                        delivered = "".join(said)
                        index, upstream = await self._hand_on(
                            chain, index, following, failure, emit,
                            sum(len(m.text) for m in messages) + len(delivered))
                        done_calls = [] if partial is None else [
                            call for call in partial.message.tool_calls
                            if id(call) in failure.outcomes]
                        if done_calls:
                            # Its complete calls ran: the step ends with them, and the
                            # next request, with their results, goes on from there.
                            outcomes = failure.outcomes
                            message = resumed_message(broken, delivered, Message(
                                model=partial.message.model, parts=done_calls,
                                finish_reason=FinishReason.TOOL_CALLS))
                            break
                        conversation = Conversation(self.system_prompt,
                                                    [*history, *exchange], session,
                                                    resume=delivered)
                        splice = Splice(delivered,
                                        restart=not upstream.provider.continues_prefill())
                messages.append(message)
                exchange.append(AssistantTurn(message))
                calls = message.tool_calls
                for call in calls:
                    outcome = outcomes[id(call)]
                    await emit(replies.ToolResult(call.id, call.name, outcome.content,
                                                  outcome.is_error))
                    await trio.lowlevel.checkpoint()  # as in _step's forward: writers run between
                    exchange.append(ToolResult(call.id or "", call.name or "", outcome.content,
                                               outcome.is_error))
                whole, steps, said = len(exchange), len(messages), []
                if not calls:
                    break
        if answering.cancelled_caught:
            stop.closed.set()  # the model stream is closed: what `stop` waits for
            log.info("session %s: stopped after %d characters of the answer", session,
                     sum(map(len, said)))
            cut = Message(model=upstream.provider.model, parts=[TextPart("".join(said))],
                          finish_reason=FinishReason.STOPPED)
            attempts += len(messages) == steps  # the request it cut, when it cut one
            exchange = exchange[:whole] + ([AssistantTurn(cut)] if cut.text else [])
            messages = messages[:steps] + [cut]
            if len(exchange) == 1:
                await emit(done_reply(session, messages, attempts, replies.Error(
                    ErrorCode.STOPPED, "stopped before the answer said anything; nothing kept")))
                return
        await self._keep(session, lock, exchange, messages, attempts, emit)

    async def _keep(self, session: str, lock: trio.Lock, exchange: list,
                    messages: list[Message], attempts: int, emit: Emit) -> None:
        """Commit an exchange and send its done."""
        if self._session_locks.get(session) is not lock:
            # Forgotten while this ask ran: its exchange must not bring the
            # session back.
            raise AskFailed(replies.Error(ErrorCode.FORGOTTEN, f"session {session!r} was "
                                          "forgotten during the ask; the answer is not kept"))
        try:
            await self._store(self.store.commit, session, exchange)
            not_kept = None
        except StorageError as exc:
            log.error("session %s: the disk refused the answer: %s", session, exc)
            not_kept = replies.Error(ErrorCode.STORAGE_ERROR,
                                     f"{exc}; the answer was not kept in the history")
        except TooLargeToKeep as exc:
            log.warning("session %s: %s", session, exc)
            not_kept = replies.Error(ErrorCode.TOO_LARGE_TO_KEEP,
                                     f"{exc}; the answer was not kept in the history")
        await emit(done_reply(session, messages, attempts, not_kept))

    async def _step(self, upstream: Upstream, conversation: Conversation, emit: Emit,
                    limits: AskLimits, run_tools: bool, earlier: list[Message],
                    text_budget: int, said: list[str], splice: Splice | None = None,
                    may_resume: bool = False):
        """One model request: its replies streamed, its tool calls run as they
        complete: the Answer, and the outcome of each call (keyed by id() of the call).
        earlier: the messages of the ask's steps before, whose text a failure carries;
        said gets the text of each delta sent; splice, for the continuation of
        a broken answer, joins its text to what was said. may_resume: a stream
        that breaks mid-answer may go on, so its complete calls are waited for."""
        provider = upstream.provider
        streaming = self._streaming
        if self.tools:
            await self.tools.prepare()  # a server started at the first ask offers its tools
        tools = self.tools.tools() if self.tools else []
        outcomes: dict[int, ToolOutcome] = {}
        completed = 0  # calls of this answer completed so far
        health = self.health_of(upstream)
        began = self.health.now()
        first_reply: float | None = None  # when the first reply of this answer went out

        async def run_tool(call) -> None:
            outcomes[id(call)] = await self.tools.call(call)

        unyielded = 0  # replies since forward last yielded
        # Calls the decoder gave up on (cut off, damaged): held until the
        # stream says whether it broke; a broken answer that goes on drops them.
        unfinished: list[ev.ToolCallDone] = []

        async with trio.open_nursery() as calls:
            async def forward(event: object) -> None:
                if may_resume and isinstance(event, ev.ToolCallDone) \
                        and not event.tool_call.complete:
                    unfinished.append(event)
                else:
                    await deliver(event)

            async def deliver(event: object) -> None:
                nonlocal completed, unyielded, first_reply
                if type(event) is rec.TextDelta:  # the per-token path
                    text = event.text if splice is None else splice.feed(event.text)
                    if not text:
                        return  # the continuation repeating what was said
                    said.append(text)
                    reply = replies.Delta(text)
                else:
                    reply = event_reply(event)
                if reply is not None:
                    if first_reply is None:
                        first_reply = self.health.now()
                    await emit(reply)
                    # One network read can decode into many replies: let the
                    # clients' writers run between them, so a reading client's
                    # queue measures its reading, not the upstream's chunking.
                    # Every network read yields already: a token a read (the
                    # usual stream) costs no extra pass of the scheduler.
                    unyielded += 1
                    if unyielded >= YIELD_EVERY:
                        unyielded = 0
                        await trio.lowlevel.checkpoint()
                if isinstance(event, ev.ToolCallDone):
                    completed += 1
                    if not run_tools:
                        outcomes[id(event.tool_call)] = ToolOutcome(
                            f"not run: this ask reached its limit of {limits.steps} "
                            "model requests", True)
                    elif completed > limits.calls_per_answer:
                        outcomes[id(event.tool_call)] = ToolOutcome(
                            f"not run: one answer may call at most {limits.calls_per_answer} "
                            "tools; ask for the rest in the next answer", True)
                    elif self.tools:
                        calls.start_soon(run_tool, event.tool_call)
                    else:
                        outcomes[id(event.tool_call)] = NO_TOOLS

            try:
                try:
                    answer = await streaming.stream_answer(
                        self.client, provider, conversation, tools, on_event=forward,
                        retries=upstream.retries, max_tool_arguments=limits.argument_bytes,
                        max_text_bytes=text_budget)
                except streaming.ToolsUnsupported as exc:
                    if not upstream.retry_without_tools:
                        raise
                    log.warning("%s; asking it again without tools", exc)
                    await emit(replies.UpstreamWarning(
                        ErrorCode.TOOLS_UNSUPPORTED.value,
                        f"{exc}; asked again without tools, which it cannot call now"))
                    answer = await streaming.stream_answer(
                        self.client, provider, conversation, [], on_event=forward,
                        retries=upstream.retries, max_tool_arguments=limits.argument_bytes,
                        max_text_bytes=text_budget)
                failure = _failure(provider.name, answer, earlier, "".join(said))
                if failure is not None:
                    failure.partial = answer
                for event in unfinished if failure is None else ():
                    await deliver(event)
            except streaming.ToolsUnsupported as exc:
                # The model's or the server's limit, not an outage: health stays as it is.
                failure = AskFailed(replies.Error(
                    ErrorCode.TOOLS_UNSUPPORTED, f"{exc}; the devices' tools cannot be offered "
                    "to it (retry_without_tools = true asks it without them)",
                    status=exc.status))
            except streaming.ProviderHTTPError as exc:
                failure = AskFailed(replies.Error(ErrorCode.UPSTREAM_HTTP, str(exc),
                                                  status=exc.status), _http_blame(exc.status),
                                    exc.retry_after)
            except streaming.UpstreamError as exc:
                failure = AskFailed(replies.Error(ErrorCode.UPSTREAM_UNAVAILABLE, str(exc)),
                                    Blame.FAILED)
            except BaseException:
                health.release()  # cancelled: no verdict on the provider
                raise
            if failure is not None:
                failure.delivered = first_reply is not None
                failure.outcomes = outcomes
                if not (may_resume and completed and failure.blame is Blame.FAILED):
                    calls.cancel_scope.cancel()  # tools of a failed answer are not waited for
        # Raised out here, not from inside the nursery, so it stays an AskFailed.
        if failure is not None:
            _judge(health, failure)
            raise failure
        health.succeeded(None if first_reply is None else first_reply - began,
                         answer.message.usage)
        # A call the decoder completed without a ToolCallDone cannot happen;
        # should one, it gets a result rather than a KeyError.
        for call in answer.message.tool_calls:
            outcomes.setdefault(id(call), ToolOutcome("not run: the call never completed",
                                                      True))
        return answer, outcomes

    async def forget(self, session: str) -> bool:
        self._session_locks.pop(session, None)  # an ask in flight sees it gone
        return await self._store(self.store.forget, session)

    async def history(self, session: str) -> list:
        return await self._history(session)

    async def _history(self, session: str) -> list:
        # From memory on this thread when the store holds it there (a recent
        # session, or a new one); a file to read goes to a worker thread.
        turns = await self._memory(self.store.cached, session)
        return turns if turns is not None else await self._store(self.store.load, session)

    async def sessions(self) -> list[dict]:
        return await self._memory(self.store.sessions)

    async def _store(self, call, *args):
        # fsync on an SD card can take tens of milliseconds: off the trio loop.
        async with self._store_lock:
            return await trio.to_thread.run_sync(call, *args)

    async def _import_streaming(self) -> None:
        # In a worker thread: on a board the import takes long, and the loop
        # serves the other clients meanwhile; a cancelled ask does not wait
        # for it. Asks arriving together each wait in their thread for the
        # one import.
        self._streaming = await trio.to_thread.run_sync(importlib.import_module, STREAMING,
                                                        abandon_on_cancel=True)

    async def _memory(self, call, *args):
        # A call that reads memory only (the store's index and recent histories):
        # after the writes queued before it, as _store, but on this thread; a
        # worker thread's round trip would delay every ask's first request.
        async with self._store_lock:
            return call(*args)


def _http_blame(status: int) -> Blame:
    if status in (401, 403):
        return Blame.KEY_REFUSED
    # What stream_answer retries: the server's trouble, not the request's.
    # Another 4xx is the request's fault, and another provider would refuse it too.
    return Blame.FAILED if status in (408, 429) or status >= 500 else Blame.NONE


def _judge(health, failure: AskFailed) -> None:
    """A failed request into its provider's health."""
    error = masking.mask(failure.reply.message)
    if failure.blame is Blame.KEY_REFUSED:
        health.disable(error)
    elif failure.blame is Blame.FAILED:
        health.failed(error, failure.retry_after)
    else:
        health.release()


def _failure(provider: str, answer, earlier: list[Message], said: str) -> AskFailed | None:
    """Why a streamed answer is not an answer, or None when it is one. The
    text of a cut answer is all its deltas carried (said, of this step),
    earlier steps' included."""
    if answer.provider_error is not None:
        error = answer.provider_error
        return AskFailed(replies.Error(
            ErrorCode.PROVIDER_ERROR,
            f"{provider}: {error.message or 'error event without a message'}",
            provider_type=error.type), Blame.FAILED)
    if answer.refused is not None:
        return AskFailed(replies.Error(ErrorCode.NOT_A_STREAM, f"{provider}: {answer.refused}"),
                         Blame.FAILED)
    text = "".join(m.text for m in earlier) + said
    if answer.too_large is not None:
        # The model's length, not the provider's health; deltas went out: no failover.
        return AskFailed(replies.Error(
            ErrorCode.ANSWER_TOO_LARGE, f"{provider}: {answer.too_large} "
            "(sessions.max_answer_bytes); not kept in the history", text=text))
    if not answer.ok:
        why = answer.interrupted or (answer.incomplete.detail if answer.incomplete
                                     else "the stream ended early")
        return AskFailed(replies.Error(
            ErrorCode.INTERRUPTED, f"{provider}: the answer was cut short ({why})", text=text),
        Blame.FAILED)
    return None


def resumed_message(broken: list[Message], text: str, last: Message) -> Message:
    """The one answer of a step whose stream broke and went on: every
    attempt's thinking, the text the client got, the last attempt's tool
    calls, usage and finish; the damage of all of them."""
    attempts = [*broken, last]
    dropped: dict[str, int] = {}
    for message in attempts:
        for code, count in message.dropped_events.items():
            dropped[code] = dropped.get(code, 0) + count
    parts = [part for message in attempts for part in message.parts
             if isinstance(part, ThinkingPart)]
    return dataclasses.replace(last, parts=[*parts, *([TextPart(text)] if text else []),
                                            *last.tool_calls], dropped_events=dropped)


def event_reply(event: object) -> replies.Reply | None:
    """The socket reply of one decoder event, or None for events the done
    reply sums up (usage, finish) or that only the message needs."""
    if isinstance(event, rec.TextDelta):
        return replies.Delta(event.text)
    if isinstance(event, rec.ReasoningDelta):
        return replies.Reasoning(event.text)
    if isinstance(event, rec.RefusalDelta):
        return replies.Refusal(event.text)
    if isinstance(event, ev.ToolCallDone):
        call = event.tool_call
        return replies.ToolCall(call.id, call.name,
                                call.parsed if call.parsed is not None else call.arguments,
                                call.error.value if call.error is not None else None)
    if isinstance(event, (rec.DecodeWarning, rec.FramingError)):
        return replies.UpstreamWarning(event.code.name.lower(), warning_detail(event))
    if isinstance(event, rec.UnknownField):
        return replies.UpstreamWarning("unknown_sse_field", warning_detail(event))
    return None


def usage_reply(messages: list[Message]) -> dict[str, int] | None:
    """Token counts summed over the steps of an ask; a count no step reported is left out."""
    totals: dict[str, int] = {}
    for message in messages:
        if message.usage is None:
            continue
        for name in USAGE_FIELDS:
            count = getattr(message.usage, name)
            if count is not None:
                totals[name] = totals.get(name, 0) + count
    return totals or None


def done_reply(session: str, messages: list[Message], attempts: int,
               not_kept: replies.Error | None = None) -> replies.Done:
    """The done reply of an ask: the last message's finish, the text of every
    step (what the deltas carried), usage and dropped events summed over the
    steps; not_kept is why the exchange is not in the history."""
    last = messages[-1]
    finish = last.finish_reason
    dropped: dict[str, int] = {}
    for message in messages:
        for code, count in message.dropped_events.items():
            dropped[code] = dropped.get(code, 0) + count
    return replies.Done(session, finish.value if finish is not None else None,
                        last.raw_finish_reason, usage_reply(messages),
                        "".join(m.text for m in messages), len(messages), attempts,
                        dropped or None, not_kept is None,
                        None if not_kept is None else not_kept.fields())
