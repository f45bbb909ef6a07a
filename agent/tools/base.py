"""The tool-provider interface, and the toolbox every model tool call goes
through.

A provider (a device with tools, the Home Assistant REST tool, later an MCP
server or the timers) lists its tools, which it may learn at run time, says
whether it can take a call now, and runs one. The toolbox, which the runner
is given, holds the providers in the order the daemon added them:
- tools(): the tools of every provider that can take calls now, for the
  next model request; a name offered by an earlier provider is never
  shadowed by a later one. shadowed() names the tools hidden so, for
  status: an MCP server's tool that a device's hides is never called.
- call(): one tool call of the model, to an outcome, never an exception:
  a call whose arguments were damaged on the way, an unknown tool, arguments
  that do not match the tool's schema, a provider that is down, a timeout,
  a ToolError and a bug in a provider each become an error result for the
  model, naming why, and nothing runs where nothing may. The calls of one
  provider run one at a time (or max_concurrent at a time, for a provider
  that says so: an MCP server), in the order asked (the timeout starts when
  the call's turn comes): many calls at once never make a device run many
  programs or commands at once.
- prepare(): before a request, each provider that has a prepare() may get
  ready for it (an MCP server started at the first ask), all at once.
  Every outcome is masked (_run, the one place each result passes): the
  configured secrets (agent/masking.py) and the provider's own (its
  secrets(), if it has one) never reach the model or the history, even
  when a server reflects them (Home Assistant's token in a state).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

import trio

from agent import masking
from agent.providers.requests import Tool
from agent.stream.message import ToolCall

log = logging.getLogger("homeagent.tools")

RESULT_LIMIT = 16 * 1024     # characters of a tool result sent to the model


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model; parameters is a JSON Schema object
    (checked when the config loads, or when a provider lists it)."""
    name: str
    description: str
    parameters: Mapping[str, Any]
    timeout: float = 10.0


class ToolError(Exception):
    """A tool that ran and failed: str() is what the model is told."""


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    content: str
    is_error: bool


class ToolProvider(Protocol):
    name: str  # how messages and status name it: "device relay", "homeassistant ha"

    def offered(self) -> tuple[ToolSpec, ...]:
        """Every tool it has, available now or not."""

    def unavailable(self) -> str | None:
        """Why it cannot take a call now (said to the model); None: it can."""

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one of its tools, arguments already valid against its schema;
        the toolbox applies the timeout. Raise ToolError on failure."""

    def status(self) -> dict[str, Any]: ...

    # Optional: max_concurrent (int), the calls it takes at once (1 without
    # it); async prepare(), run before each model request that offers tools.


class Toolbox:
    def __init__(self) -> None:
        self._providers: list[ToolProvider] = []
        # id(provider) -> its turns, taken in FIFO order (trio's are fair)
        self._turns: dict[int, trio.Semaphore] = {}

    def add(self, provider: ToolProvider) -> None:
        self._providers.append(provider)
        self._turns[id(provider)] = trio.Semaphore(getattr(provider, "max_concurrent", 1))

    async def prepare(self) -> None:
        async with trio.open_nursery() as nursery:
            for provider in self._providers:
                prepare = getattr(provider, "prepare", None)
                if prepare is not None:
                    nursery.start_soon(prepare)

    def __bool__(self) -> bool:
        return bool(self._providers)

    @property
    def providers(self) -> tuple[ToolProvider, ...]:
        return tuple(self._providers)

    def _entries(self) -> dict[str, tuple[ToolProvider, ToolSpec]]:
        """Every tool by name, the first provider's where two offer one."""
        entries: dict[str, tuple[ToolProvider, ToolSpec]] = {}
        for provider in self._providers:
            for spec in provider.offered():
                entries.setdefault(spec.name, (provider, spec))
        return entries

    def shadowed(self) -> list[dict[str, str]]:
        """The tools no model is offered because an earlier provider has one
        of the same name: the tool, its provider, and the provider whose
        tool is offered instead."""
        owners: dict[str, ToolProvider] = {}
        hidden = []
        for provider in self._providers:
            for spec in provider.offered():
                owner = owners.setdefault(spec.name, provider)
                if owner is not provider:
                    hidden.append({"tool": spec.name, "provider": provider.name,
                                   "by": owner.name})
        return hidden

    def tools(self) -> list[Tool]:
        """The tools of the providers that can take calls now, for the next request."""
        return [Tool(spec.name, spec.description, spec.parameters)
                for provider, spec in self._entries().values()
                if provider.unavailable() is None]

    async def call(self, call: ToolCall) -> ToolOutcome:
        if call.error is not None:
            return ToolOutcome(f"the arguments were not usable ({call.error.value}: "
                               f"{call.error_detail or 'no detail'}); nothing was run", True)
        entries = self._entries()
        entry = entries.get(call.name or "")
        if entry is None:
            known = ", ".join(sorted(entries)) or "none"
            return ToolOutcome(f"there is no tool named {call.name!r} (tools: {known})", True)
        from agent.tools.schema import validate

        provider, spec = entry
        problems = validate(call.parsed, spec.parameters)
        if problems:
            return ToolOutcome("invalid arguments, nothing was run: " + "; ".join(problems),
                               True)
        async with self._turns[id(provider)]:
            return await _run(provider, spec, call.parsed)


async def _run(provider: ToolProvider, spec: ToolSpec, arguments) -> ToolOutcome:
    outcome = await _outcome(provider, spec, arguments)
    secrets = getattr(provider, "secrets", None)
    content = masking.mask(outcome.content)
    if secrets is not None:
        content = masking.Masker(secrets()).mask(content)
    # cut once masked: a secret across the cut is masked whole
    return ToolOutcome(content[:RESULT_LIMIT], outcome.is_error)


async def _outcome(provider: ToolProvider, spec: ToolSpec, arguments) -> ToolOutcome:
    why = provider.unavailable()  # checked when its turn comes
    if why is not None:
        return ToolOutcome(why, True)
    try:
        with trio.fail_after(spec.timeout):
            content = await provider.call_tool(spec.name, arguments)
    except trio.TooSlowError:
        return ToolOutcome(f"{spec.name} did not finish within {spec.timeout:g} s", True)
    except ToolError as exc:
        return ToolOutcome(str(exc), True)
    except Exception as exc:
        log.exception("%s: tool %s failed", provider.name, spec.name)
        return ToolOutcome(f"{spec.name} failed in the handler of {provider.name}: "
                           f"{type(exc).__name__}", True)
    return ToolOutcome(str(content), False)
