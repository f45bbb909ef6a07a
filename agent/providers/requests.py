"""Providers and their requests, sans-IO: a conversation in, the exact
request of one wire format out.

`base_url` includes the API version prefix for every protocol
(`https://api.openai.com/v1`, `https://api.anthropic.com/v1`,
`http://127.0.0.1:11434/v1` for Ollama's OpenAI-compatible endpoint); the
builder appends the path. Ollama's native API (protocol `ollama`) has no
prefix: `http://127.0.0.1:11434`, the builder appends `/api/chat`.

What each format can carry back of an earlier assistant turn (the table
with its tests is docs/reasoning-replay.md):
- OpenAI Chat: text, tool calls (arguments as the exact string) and the
  reasoning as `reasoning_content` when the turn had any: DeepSeek's
  thinking mode answers 400 when a tool-call turn's reasoning is not sent
  back in every later request; servers without it ignore the field.
- Anthropic: thinking blocks with their signatures byte-exact (required
  back when the turn has tool use), redacted thinking with its data, text,
  tool_use with `input` the parsed arguments ({} when they did not parse:
  Anthropic takes an object). `thinking_budget` turns thinking on.
- OpenAI Responses: every request has `store: false` and asks for
  `include: ["reasoning.encrypted_content"]`, so a reasoning model's
  reasoning items come whole in the stream; each is sent back before the
  items it led to exactly as it came (RawJSON: byte-exact, never
  re-encoded), then text as an output message item and function_call items
  (exact argument string) without item ids. An item that came damaged is
  not sent back, nor one with nothing after it (the API refuses a
  reasoning item without its following item).
- Ollama: text and tool calls, arguments as the parsed object ({} when
  they did not parse: Ollama takes an object), without ids (its format
  has none); a tool result names its tool (`tool_name`). Thinking is not
  sent back.
A tool result's is_error is a field only in Anthropic's format; the others
get the content text alone.

A resumed answer (agent/providers/resume.py, docs/failover.md): a
Conversation with `resume` adds the delivered text after the history, as a
final assistant message to continue (Anthropic without thinking; an
openai-chat provider with `prefill`) or as an assistant turn and an
instruction to continue (the others).

Prompt caching (docs/caching.md): every body puts what stays the same
first and the growing history last (model and settings, then the tools,
sorted by name, then Anthropic's system, then the messages or input), so
that a request's body without its closing brackets is a byte prefix of the
next request's in the same session. On top of that, per `cache`:
Anthropic's `cache_control` breakpoints (CACHE_BREAKPOINTS), OpenAI's
`prompt_cache_key` (a hash of the session id), llama.cpp's `cache_prompt`.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets as _secrets
from dataclasses import dataclass, field, fields
from typing import Any, Mapping
from urllib.parse import urlsplit

from agent.providers.resume import CONTINUE_INSTRUCTION, RESUME_MODES, prefill_text
from agent.stream.message import Message, TextPart, ThinkingPart, ToolCall

PROTOCOLS = ("openai-chat", "anthropic", "openai-responses", "ollama")
# What each protocol streams, by media type: the accept header, and what a
# 2xx body must be to go to the decoder.
STREAM_TYPES = {"ollama": "application/x-ndjson"}
DEFAULT_STREAM_TYPE = "text/event-stream"
OLLAMA_OPTIONS = ("num_ctx", "keep_alive", "think", "format")
THINK_LEVELS = ("low", "medium", "high")  # gpt-oss; other models take true or false
# A Go duration, as Ollama parses keep_alive: "5m", "1h30m", "-1s", "0"
_GO_DURATION = re.compile(r"-?(0|([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+")
ANTHROPIC_VERSION = "2023-06-01"
SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "proxy-authorization"})
ANTHROPIC_DEFAULT_MAX_TOKENS = 4096  # Anthropic requires max_tokens; the others do not
ANTHROPIC_MIN_THINKING_BUDGET = 1024  # Anthropic's least budget_tokens
RESPONSES_INCLUDE = ["reasoning.encrypted_content"]
# What `cache` may say per protocol. "auto": what the provider is known to
# take (Anthropic: the breakpoints; OpenAI's own host: prompt_cache_key;
# nothing for other OpenAI-compatible servers, which cache a repeated prefix
# on their own and may refuse a field they do not know); "off": no field.
CACHE_MODES = {"openai-chat": ("auto", "off", "prompt_cache_key", "cache_prompt"),
               "openai-responses": ("auto", "off", "prompt_cache_key"),
               "anthropic": ("auto", "off"), "ollama": ("auto", "off")}
OPENAI_HOSTS = frozenset({"api.openai.com"})  # take prompt_cache_key under cache = "auto"
# Anthropic's cache_control places, all by default: the last tool, the
# system prompt, the last message of the previous request (where the last
# request's cache entry ends: read back even past the 20-block lookback) and
# the last message (written for the next request). Anthropic takes at most 4.
CACHE_BREAKPOINTS = ("tools", "system", "previous", "last")
EPHEMERAL = {"type": "ephemeral"}


class RawJSON(str):
    """JSON text that goes into a request body as it is, byte for byte
    (encode_body): a provider's opaque item sent back."""

    __slots__ = ()


def encode_body(body: dict) -> bytes:
    """A request body as compact UTF-8 JSON, each RawJSON in it spliced in
    exactly as it came. (Encoded as a placeholder string with a random
    nonce first, which no other string of the body can hold.)"""
    raws: list[str] = []
    nonce = _secrets.token_hex(8)

    def default(value):
        raise TypeError(f"not JSON: {type(value).__name__}")

    def walk(value):
        if isinstance(value, RawJSON):
            raws.append(value)
            return f"{nonce}:{len(raws) - 1}"
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    text = json.dumps(walk(body), ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                      default=default)
    for index, raw in enumerate(raws):
        text = text.replace(f'"{nonce}:{index}"', raw, 1)
    return text.encode("utf-8", "surrogatepass")


@dataclass(frozen=True, repr=False)
class Provider:
    """One upstream model endpoint. api_key is never shown by repr."""
    name: str
    protocol: str
    base_url: str
    model: str
    api_key: str = ""            # empty: no auth header (local servers)
    connect_timeout: float = 10.0
    read_timeout: float = 60.0   # between two reads of the body, not the whole answer
    total_timeout: float = 300.0  # the whole answer, retries included
    max_tokens: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # Ollama's native API only (protocol "ollama"), each sent only when set:
    num_ctx: int | None = None                 # options.num_ctx: the context window, tokens
    keep_alive: str | float | None = None      # a Go duration ("5m", "-1") or seconds
    think: bool | str | None = None            # true, false, or a level (THINK_LEVELS)
    format: str | Mapping[str, Any] | None = None  # "json", or a JSON Schema object
    # Anthropic only: extended thinking with this budget (tokens, at least
    # 1024 and under max_tokens); its blocks go back in tool loops.
    thinking_budget: int | None = None
    # Prompt caching (CACHE_MODES); Anthropic's breakpoints, None for all
    # of CACHE_BREAKPOINTS.
    cache: str = "auto"
    cache_breakpoints: tuple[str, ...] | None = None
    # An answer whose stream breaks after part of it was delivered goes on
    # (RESUME_MODES): "fallback" on the next healthy provider of its
    # failover order (this one when none is), "same" here, "off" not at all.
    resume: str = "fallback"
    # openai-chat only: the server continues a final assistant message
    # (llama.cpp; vLLM with continue_final_message, which is sent).
    prefill: bool = False
    # A PEM file of CAs trusted for this provider besides the default bundle
    # (a private CA); an absolute path once the config has read it.
    ca_file: str | None = None

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"provider {self.name!r}: protocol must be one of "
                             f"{', '.join(PROTOCOLS)}, not {self.protocol!r}")
        problem = base_url_problem(self.base_url)
        if problem is not None:
            raise ValueError(f"provider {self.name!r}: base_url {problem}")
        for name in ("connect_timeout", "read_timeout", "total_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"provider {self.name!r}: {name} must be positive")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"provider {self.name!r}: max_tokens must be positive")
        problem = (self._ollama_problem() or self._thinking_problem() or self._cache_problem()
                   or self._resume_problem())
        if problem is not None:
            raise ValueError(f"provider {self.name!r}: {problem}")

    def _thinking_problem(self) -> str | None:
        budget = self.thinking_budget
        if budget is None:
            return None
        if self.protocol != "anthropic":
            return f"thinking_budget is an option of protocol \"anthropic\" only, not {self.protocol!r}"
        limit = self.max_tokens or ANTHROPIC_DEFAULT_MAX_TOKENS
        if type(budget) is not int or not ANTHROPIC_MIN_THINKING_BUDGET <= budget < limit:
            return (f"thinking_budget must be an integer from {ANTHROPIC_MIN_THINKING_BUDGET} "
                    f"to below max_tokens ({limit}), not {budget!r}")
        return None

    def _cache_problem(self) -> str | None:
        modes = CACHE_MODES[self.protocol]
        if self.cache not in modes:
            return (f"cache must be one of {', '.join(modes)} for protocol "
                    f"{self.protocol!r}, not {self.cache!r}")
        places = self.cache_breakpoints
        if places is None:
            return None
        if self.protocol != "anthropic":
            return ("cache_breakpoints is an option of protocol \"anthropic\" only, "
                    f"not {self.protocol!r}")
        if isinstance(places, str) or not all(place in CACHE_BREAKPOINTS for place in places):
            return (f"cache_breakpoints must be a list of {', '.join(CACHE_BREAKPOINTS)}, "
                    f"not {places!r}")
        if len(set(places)) != len(places):
            return "cache_breakpoints names a place more than once"
        object.__setattr__(self, "cache_breakpoints", tuple(places))  # frozen: a list from TOML
        return None

    def _resume_problem(self) -> str | None:
        if self.resume not in RESUME_MODES:
            return f"resume must be one of {', '.join(RESUME_MODES)}, not {self.resume!r}"
        if type(self.prefill) is not bool:
            return f"prefill must be true or false, not {self.prefill!r}"
        if self.prefill and self.protocol != "openai-chat":
            return ("prefill is an option of protocol \"openai-chat\" only: anthropic "
                    f"continues a final assistant message by itself, {self.protocol!r} not")
        return None

    def continues_prefill(self) -> bool:
        """Whether a resumed answer is asked for as a final assistant message
        to continue (agent/providers/resume.py), not with an instruction."""
        if self.protocol == "anthropic":
            return self.thinking_budget is None  # Anthropic refuses a prefill with thinking
        return self.prefill

    def prompt_cache(self) -> str | None:
        """The cache field this provider's requests carry, or None."""
        if self.cache == "auto":
            if self.protocol.startswith("openai-") \
                    and urlsplit(self.base_url).hostname in OPENAI_HOSTS:
                return "prompt_cache_key"
            return "cache_control" if self.protocol == "anthropic" else None
        return None if self.cache == "off" else self.cache

    def _ollama_problem(self) -> str | None:
        """What is wrong with the Ollama options (the words start with the
        option's name), or None."""
        for name in OLLAMA_OPTIONS:
            if getattr(self, name) is not None and self.protocol != "ollama":
                return f"{name} is an option of protocol \"ollama\" only, not {self.protocol!r}"
        if self.num_ctx is not None and (type(self.num_ctx) is not int or self.num_ctx < 1):
            return "num_ctx must be a positive integer (tokens)"
        keep = self.keep_alive
        if keep is not None and not (
                (type(keep) in (int, float) and keep == keep)
                or (type(keep) is str and _GO_DURATION.fullmatch(keep))):
            return ("keep_alive must be seconds, or a duration such as \"5m\", \"1h30m\" "
                    f"or \"-1s\" (forever), not {keep!r}")
        if self.think is not None and type(self.think) is not bool and self.think not in THINK_LEVELS:
            return f"think must be true, false or one of {', '.join(THINK_LEVELS)}, not {self.think!r}"
        fmt = self.format
        if fmt is not None and fmt != "json" and not (isinstance(fmt, Mapping) and fmt):
            return "format must be \"json\" or a JSON Schema table"
        return None

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.api_key:
            shown["api_key"] = "***"
        # Extra headers may carry a proxy's credentials too.
        shown["headers"] = {name: "***" if name.lower() in SECRET_HEADERS else value
                            for name, value in self.headers.items()}
        return f"Provider({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    __str__ = __repr__

    def secrets(self) -> tuple[str, ...]:
        """What this provider sends that must never be shown: the key and the
        values of credential headers, with the credential of "SCHEME CREDENTIAL"
        also alone (a server quotes the token it refused, not the header)."""
        found = [self.api_key] if self.api_key else []
        for name, value in self.headers.items():
            if name.lower() in SECRET_HEADERS:
                found.append(value)
                credential = value.rpartition(" ")[2]
                if credential != value:
                    found.append(credential)
        return tuple(found)


def base_url_problem(url: str) -> str | None:
    """What makes url unusable as a base_url (the words after "base_url"), or None.
    Checked here, at load, so that no ask fails on it later."""
    if not url.startswith(("http://", "https://")):
        return "must start with http:// or https://"
    if any(c.isspace() or not c.isprintable() for c in url):
        return "must not hold spaces or control characters"
    parts = urlsplit(url)
    if "@" in parts.netloc:
        # httpx would send user:password as Basic auth in place of the key,
        # and every echo of the URL would show it.
        return ("must not hold a user or password (user:password@); give the key "
                "with api_key_env or api_key_file")
    if not parts.hostname:
        return "has no host"
    try:
        port = parts.port
    except ValueError:
        port = 0  # not a number, or beyond 65535
    if port == 0:
        return "has a port that is not a number from 1 to 65535"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "must not have a query or a fragment: the request path is appended to it"
    return None


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool offered to the model; parameters is a JSON Schema object.
    strict asks OpenAI for strict schema adherence (its Responses API
    defaults to strict, which rejects ordinary schemas, so it is always sent there)."""
    name: str
    description: str
    parameters: Mapping[str, Any]
    strict: bool = False


@dataclass(frozen=True, slots=True)
class UserTurn:
    text: str


@dataclass(frozen=True, slots=True)
class AssistantTurn:
    message: Message


@dataclass(frozen=True, slots=True)
class ToolResult:
    call_id: str
    name: str
    content: str
    is_error: bool = False


@dataclass
class Conversation:
    """A system prompt and the turns: UserTurn, AssistantTurn, ToolResult;
    session names the history they come from (a prompt_cache_key derives
    from it), None for none. resume: the text of a broken answer, delivered
    already, that the request asks the model to continue; it goes after
    the turns, so the cached prefix stays as it was."""
    system: str | None = None
    turns: list = field(default_factory=list)
    session: str | None = None
    resume: str | None = None


def prompt_cache_key(session: str) -> str:
    """The prompt_cache_key of a session: stable across restarts, and not
    the session's name, which the provider need not learn."""
    return "homeagent-" + hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def build_request(provider: Provider, conversation: Conversation,
                  tools: list[Tool] | None = None) -> tuple[str, dict[str, str], dict]:
    """(url, headers, json body) of a streaming request in the provider's format."""
    # Sorted: the order a reload or a tool source lists them in must not
    # change the bytes of the cached prefix.
    tools = sorted(tools or (), key=lambda tool: tool.name)
    path, body = _BUILDERS[provider.protocol](provider, conversation, tools)
    headers = {
        "accept": STREAM_TYPES.get(provider.protocol, DEFAULT_STREAM_TYPE),
        # The body goes to the stream core as raw bytes: no gzip.
        "accept-encoding": "identity",
        **_auth(provider),
        **provider.headers,
    }
    return provider.base_url.rstrip("/") + path, headers, body


def _auth(provider: Provider) -> dict[str, str]:
    if provider.protocol == "anthropic":
        auth = {"anthropic-version": ANTHROPIC_VERSION}
        if provider.api_key:
            auth["x-api-key"] = provider.api_key
        return auth
    return {"authorization": f"Bearer {provider.api_key}"} if provider.api_key else {}


# ---- OpenAI Chat Completions ----

def _role_messages(conversation: Conversation, assistant, tool_result) -> list[dict]:
    """The messages of the formats with a system message, one message per
    turn and tool results as role "tool" (OpenAI Chat, Ollama): assistant
    and tool_result make the two that differ."""
    messages: list[dict] = []
    if conversation.system is not None:
        messages.append({"role": "system", "content": conversation.system})
    for turn in conversation.turns:
        if isinstance(turn, UserTurn):
            messages.append({"role": "user", "content": turn.text})
        elif isinstance(turn, AssistantTurn):
            messages.append(assistant(turn.message))
        elif isinstance(turn, ToolResult):
            messages.append({"role": "tool", **tool_result(turn), "content": turn.content})
        else:
            raise TypeError(f"not a conversation turn: {turn!r}")
    return messages


def _chat(provider: Provider, conversation: Conversation, tools: list[Tool]):
    body: dict = {"model": provider.model, "stream": True,
                  "stream_options": {"include_usage": True}}
    if provider.max_tokens is not None:
        body["max_tokens"] = provider.max_tokens
    _cache_fields(provider, conversation, body)
    if tools:
        body["tools"] = [{"type": "function", "function": _function(t)} for t in tools]
    body["messages"] = _role_messages(conversation, _chat_assistant,
                                      lambda result: {"tool_call_id": result.call_id})
    if _continue_roles(provider, conversation, body["messages"]):
        # vLLM's names for "continue it"; llama.cpp continues by itself and
        # ignores them. After the messages: the cached prefix stays.
        body["continue_final_message"] = True
        body["add_generation_prompt"] = False
    return "/chat/completions", body


def _continue_roles(provider: Provider, conversation: Conversation, messages: list) -> bool:
    """The continuation of a broken answer in the formats of role messages:
    an assistant message, then the instruction unless it is a prefill;
    whether it is one."""
    if not conversation.resume:
        return False
    prefill = provider.continues_prefill()
    messages.append({"role": "assistant",
                     "content": prefill_text(conversation.resume) if prefill
                     else conversation.resume})
    if not prefill:
        messages.append({"role": "user", "content": CONTINUE_INSTRUCTION})
    return prefill


def _cache_fields(provider: Provider, conversation: Conversation, body: dict) -> None:
    """OpenAI's prompt_cache_key (one per session), or llama.cpp's cache_prompt."""
    field = provider.prompt_cache()
    if field == "prompt_cache_key" and conversation.session is not None:
        body["prompt_cache_key"] = prompt_cache_key(conversation.session)
    elif field == "cache_prompt":
        body["cache_prompt"] = True


def _chat_assistant(message: Message) -> dict:
    calls = message.tool_calls
    text = message.text
    out: dict = {"role": "assistant", "content": text if text or not calls else None}
    reasoning = message.reasoning
    if reasoning:
        out["reasoning_content"] = reasoning
    if calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments}}
                             for c in calls]
    return out


def _function(tool: Tool) -> dict:
    out = {"name": tool.name, "description": tool.description,
           "parameters": dict(tool.parameters)}
    if tool.strict:
        out["strict"] = True
    return out


# ---- Anthropic Messages ----

def _anthropic(provider: Provider, conversation: Conversation, tools: list[Tool]):
    messages: list[dict] = []

    def add(role: str, blocks: list[dict]) -> None:
        # Consecutive turns of one role become one message: tool results
        # and a user text that follows them share the user turn.
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"] += blocks
        elif blocks:
            messages.append({"role": role, "content": blocks})

    for turn in conversation.turns:
        if isinstance(turn, UserTurn):
            add("user", [{"type": "text", "text": turn.text}])
        elif isinstance(turn, AssistantTurn):
            add("assistant", _anthropic_blocks(turn.message))
        elif isinstance(turn, ToolResult):
            block = {"type": "tool_result", "tool_use_id": turn.call_id, "content": turn.content}
            if turn.is_error:
                block["is_error"] = True
            add("user", [block])
        else:
            raise TypeError(f"not a conversation turn: {turn!r}")
    places = (provider.cache_breakpoints or CACHE_BREAKPOINTS
              if provider.prompt_cache() == "cache_control" else ())
    body: dict = {"model": provider.model,
                  "max_tokens": provider.max_tokens or ANTHROPIC_DEFAULT_MAX_TOKENS,
                  "stream": True}
    if provider.thinking_budget is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": provider.thinking_budget}
    if tools:
        body["tools"] = [{"name": t.name, "description": t.description,
                          "input_schema": dict(t.parameters)} for t in tools]
        if "tools" in places:
            body["tools"][-1]["cache_control"] = EPHEMERAL
    if conversation.system is not None:
        # an empty text block would be refused: an empty prompt stays a string
        body["system"] = conversation.system if "system" not in places \
            or not conversation.system else [
                {"type": "text", "text": conversation.system, "cache_control": EPHEMERAL}]
    # The last message is a user turn (a prompt or tool results); the one
    # two before it ended the previous request of the session.
    for place, at in (("previous", -3), ("last", -1)):
        if place in places and len(messages) >= -at:
            _mark_last_block(messages[at])
    if conversation.resume:  # after the breakpoints: they mark what the next ask repeats
        if provider.continues_prefill():
            add("assistant", [{"type": "text", "text": prefill_text(conversation.resume)}])
        else:
            add("assistant", [{"type": "text", "text": conversation.resume}])
            add("user", [{"type": "text", "text": CONTINUE_INSTRUCTION}])
    body["messages"] = messages
    return "/messages", body


def _mark_last_block(message: dict) -> None:
    """A cache breakpoint on a message's last block, a new dict: the blocks
    may be the history's own. Thinking blocks cannot carry one."""
    last = message["content"][-1]
    if last["type"] not in ("thinking", "redacted_thinking"):
        message["content"][-1] = {**last, "cache_control": EPHEMERAL}


def _anthropic_blocks(message: Message) -> list[dict]:
    blocks: list[dict] = []
    for part in message.parts:
        if isinstance(part, ThinkingPart):
            if part.redacted_data is not None:
                blocks.append({"type": "redacted_thinking", "data": part.redacted_data})
            elif part.signature is not None:
                blocks.append({"type": "thinking", "thinking": part.text,
                               "signature": part.signature})
            # Unsigned thinking (another provider's reasoning) would be rejected.
        elif isinstance(part, TextPart):
            if part.text:  # Anthropic rejects empty text blocks
                blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ToolCall):
            blocks.append({"type": "tool_use", "id": part.id, "name": part.name,
                           "input": part.parsed if part.parsed is not None else {}})
    return blocks


# ---- OpenAI Responses ----

def _responses(provider: Provider, conversation: Conversation, tools: list[Tool]):
    items: list[dict] = []
    for turn in conversation.turns:
        if isinstance(turn, UserTurn):
            items.append({"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": turn.text}]})
        elif isinstance(turn, AssistantTurn):
            items += _responses_items(turn.message)
        elif isinstance(turn, ToolResult):
            items.append({"type": "function_call_output", "call_id": turn.call_id,
                          "output": turn.content})
        else:
            raise TypeError(f"not a conversation turn: {turn!r}")
    body: dict = {"model": provider.model, "stream": True, "store": False,
                  "include": list(RESPONSES_INCLUDE)}
    if provider.max_tokens is not None:
        body["max_output_tokens"] = provider.max_tokens
    _cache_fields(provider, conversation, body)
    if tools:
        body["tools"] = [{"type": "function", "name": t.name, "description": t.description,
                          "parameters": dict(t.parameters), "strict": t.strict} for t in tools]
    if conversation.system is not None:
        body["instructions"] = conversation.system
    if conversation.resume:  # no prefill in this format: an instruction
        items += [{"type": "message", "role": "assistant",
                   "content": [{"type": "output_text", "text": conversation.resume}]},
                  {"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": CONTINUE_INSTRUCTION}]}]
    body["input"] = items
    return "/responses", body


def _responses_items(message: Message) -> list:
    items: list = []
    for part in message.parts:
        if isinstance(part, ThinkingPart):
            if part.opaque is not None:
                items.append(RawJSON(part.opaque))
        elif isinstance(part, TextPart) and part.text:
            items.append({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": part.text}]})
        elif isinstance(part, ToolCall):
            items.append({"type": "function_call", "call_id": part.id, "name": part.name,
                          "arguments": part.arguments})
    while items and isinstance(items[-1], RawJSON):
        items.pop()  # a reasoning item needs the item it led to after it
    return items


# ---- Ollama's native API ----

def _ollama(provider: Provider, conversation: Conversation, tools: list[Tool]):
    body: dict = {"model": provider.model, "stream": True}
    options: dict = {}
    if provider.num_ctx is not None:
        options["num_ctx"] = provider.num_ctx
    if provider.max_tokens is not None:
        options["num_predict"] = provider.max_tokens
    if options:
        body["options"] = options
    for name in ("keep_alive", "think"):
        if getattr(provider, name) is not None:
            body[name] = getattr(provider, name)
    if provider.format is not None:
        body["format"] = provider.format if isinstance(provider.format, str) else dict(provider.format)
    if tools:
        body["tools"] = [{"type": "function", "function": _function(t)} for t in tools]
    body["messages"] = _role_messages(conversation, _ollama_assistant,
                                      lambda result: {"tool_name": result.name})
    _continue_roles(provider, conversation, body["messages"])
    return "/api/chat", body


def _ollama_assistant(message: Message) -> dict:
    out: dict = {"role": "assistant", "content": message.text}
    if message.tool_calls:
        out["tool_calls"] = [{"function": {
            "name": c.name, "arguments": c.parsed if c.parsed is not None else {}}}
            for c in message.tool_calls]
    return out


_BUILDERS = {"openai-chat": _chat, "anthropic": _anthropic, "openai-responses": _responses,
             "ollama": _ollama}
