"""HomeAssistantTools: the model reads entity states and calls services
through Home Assistant's REST API, within the config's allow-lists.

A tool provider (agent/tools/base.py), not a device: it takes no part in
answers, only in calls. It is configured as `[devices.NAME]` with
`type = "homeassistant"`, as before providers had a table of their own.

Settings (its own keys):
- url: Home Assistant's base URL, "http://HOST:PORT" (https too).
- token_file: a file holding a long-lived access token, read when the
  config loads: an absolute path, or a name in $CREDENTIALS_DIRECTORY (a
  systemd credential). The token is a secret: the masker hides it on every
  path out (secrets()).
- allow_entities: entity ids or globs (`light.*`, `sensor.kitchen_*`; `*`
  only) the model may read and act on.
- allow_domains: domains whose every entity is allowed, as `DOMAIN.*`.
- allow_services: "DOMAIN.SERVICE" the model may call (none: read only);
  a call also needs its entity allowed.
- timeout: seconds a request may take (default 10).
- max_result_chars: characters of a tool result (default 1000).

The tools (its own; a `tools` key is refused): ha_get_state,
ha_call_service and ha_list_entities. The model's arguments are data:
every entity id, domain and service is checked against its syntax and the
allow-lists before a request is made, so it becomes a path segment only
once it is known to be one plain word; the service data may not name a
target (entity_id, area_id, ..., or `target` itself, in any case: Home
Assistant reads `Entity_ID` too): the call acts on the one entity checked.
A refusal, an HTTP error, a timeout or an unreachable server is a
ToolError naming the reason; the provider itself never fails on a call.

An answer is asked for in identity encoding; one that comes gzip- or
deflate-encoded all the same is inflated in bounded pieces (the provider
path's Inflater), and MAX_ANSWER_BYTES holds for the decoded answer. JSON
nested deeper than Python's parser goes is a ToolError saying so.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import re
import zlib
from typing import Any, Mapping
from urllib.parse import urlsplit

import httpx
import trio

from agent.jsontypes import is_type
from agent.masking import MIN_SECRET_CHARS
from agent.providers.client import Inflater
from agent.settings.errors import SettingError, refuse_unknown
from agent.tools.base import ToolError, ToolSpec

log = logging.getLogger("homeagent.tools")

_KEYS = frozenset({"url", "token_file", "allow_entities", "allow_domains", "allow_services",
                   "timeout", "max_result_chars"})
WORD = r"[a-z0-9_]+"
ENTITY_ID = re.compile(rf"{WORD}\.{WORD}")
NAME = re.compile(WORD)
_GLOB = re.compile(r"[a-z0-9_*]+\.[a-z0-9_*]+")
_TOKEN = re.compile(r"[\x21-\x7e]+")  # what an Authorization header carries
MAX_DATA_BYTES = 2048  # a service call's data, as JSON
MAX_ANSWER_BYTES = 1024 * 1024  # an answer read from Home Assistant (all its states)
MAX_LISTED = 100       # entities ha_list_entities names
MAX_ATTRIBUTES = 8     # attributes of a state told to the model
_FIRST_ATTRIBUTES = ("friendly_name", "unit_of_measurement", "device_class")  # then the rest
_TARGET_KEYS = frozenset({"entity_id", "device_id", "area_id", "floor_id", "label_id",
                          "target"})  # compared with the data's keys in lower case
_ENTITY_SCHEMA = {"type": "string", "maxLength": 255, "pattern": rf"^{WORD}\.{WORD}$",
                  "description": "an entity id, such as light.kitchen"}
_NAME_SCHEMA = {"type": "string", "maxLength": 64, "pattern": rf"^{WORD}$"}
TOOLS = (
    ToolSpec("ha_get_state", "Read the state and main attributes of a Home Assistant entity",
             {"type": "object", "properties": {"entity_id": _ENTITY_SCHEMA},
              "required": ["entity_id"], "additionalProperties": False}),
    ToolSpec("ha_call_service", "Call a Home Assistant service (such as light.turn_on) on "
             "one entity, with optional service data (such as brightness)",
             {"type": "object",
              "properties": {"domain": {**_NAME_SCHEMA, "description": "such as light"},
                             "service": {**_NAME_SCHEMA, "description": "such as turn_on"},
                             "entity_id": _ENTITY_SCHEMA,
                             "data": {"type": "object", "description": "service data"}},
              "required": ["domain", "service", "entity_id"], "additionalProperties": False}),
    ToolSpec("ha_list_entities", "List the Home Assistant entities this assistant may use, "
             "with their states",
             {"type": "object", "properties": {}, "additionalProperties": False}),
)
TOOL_NAMES = tuple(tool.name for tool in TOOLS)


def _strings(settings: Mapping[str, Any], key: str, pattern: re.Pattern, what: str) -> tuple:
    values = settings.get(key, [])
    if not (isinstance(values, list) and all(isinstance(v, str) for v in values)):
        raise SettingError(key, f"must be a list of {what}")
    for value in values:
        if not pattern.fullmatch(value):
            raise SettingError(key, f"{value!r} is not {what}")
    return tuple(values)


def _base_url(value: Any) -> str:
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname \
            or parts.query or parts.fragment or parts.username or parts.password:
        raise SettingError("url", 'required: Home Assistant\'s base URL, "http://HOST:8123"')
    return value.rstrip("/")


def _token(value: Any) -> str:
    """The token in token_file; messages name the file, never what it holds."""
    if not isinstance(value, str) or not value:
        raise SettingError("token_file", "required: a file holding a long-lived access token")
    credentials = os.environ.get("CREDENTIALS_DIRECTORY")
    if os.path.isabs(value):
        path = value
    elif credentials and "/" not in value:
        path = os.path.join(credentials, value)
    else:
        raise SettingError("token_file", "an absolute path, or a credential's name with "
                                         "$CREDENTIALS_DIRECTORY set")
    try:
        with open(path, encoding="utf-8") as file:
            token = file.read().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise SettingError("token_file", f"cannot read {path}: "
                                         f"{getattr(error, 'strerror', None) or 'not UTF-8'}")
    if not _TOKEN.fullmatch(token) or len(token) < MIN_SECRET_CHARS:
        raise SettingError("token_file", f"{path} must hold one token of printable ASCII, "
                                         f"at least {MIN_SECRET_CHARS} characters")
    return token


def _positive(settings: Mapping[str, Any], key: str, default, kind) -> Any:
    value = settings.get(key, default)
    if not is_type(value, kind) or not value > 0:
        raise SettingError(key, "must be a positive number")
    return value


def summarize(state: Mapping[str, Any]) -> str:
    """An entity's state as the model is told it: the state and a few
    short attributes, on one line."""
    attributes = state.get("attributes") if isinstance(state.get("attributes"), dict) else {}
    first = [key for key in _FIRST_ATTRIBUTES if key in attributes]
    keys = first + [key for key in attributes if key not in _FIRST_ATTRIBUTES]
    shown = [f"{key}={json.dumps(attributes[key], ensure_ascii=False)}" for key in keys
             if is_type(attributes[key], (str, int, float, bool))
             and len(str(attributes[key])) <= 80][:MAX_ATTRIBUTES]
    return f"{state.get('entity_id')}: {state.get('state')}" + \
        (f" ({', '.join(shown)})" if shown else "")


class HomeAssistantTools:
    kind = "homeassistant"
    DEFAULT_EVENTS = frozenset()  # the config's device table: it takes no events

    def __init__(self, common, *, url: str, token: str, entities: tuple[str, ...],
                 domains: tuple[str, ...], services: tuple[str, ...], timeout: float,
                 max_result_chars: int) -> None:
        self.common, self.name = common, f"homeassistant {common.name}"
        self.url, self._token = url, token
        self.entities, self.domains, self.services = entities, domains, frozenset(services)
        self.timeout, self.max_result_chars = timeout, max_result_chars
        self.calls = self.refused = self.failed = 0
        self._client: httpx.AsyncClient | None = None

    @classmethod
    def from_settings(cls, common, settings: Mapping[str, Any]) -> HomeAssistantTools:
        """common: its table's common settings (its name, the tools the
        config declared for it, which must be its own)."""
        refuse_unknown(settings, _KEYS)
        # common.tools holds its own once the config has loaded (DeviceSpec)
        if any(tool.name not in TOOL_NAMES for tool in common.tools):
            raise SettingError("tools", "a homeassistant device offers its own tools "
                                        f"({', '.join(TOOL_NAMES)})")
        entities = _strings(settings, "allow_entities", _GLOB,
                            "entity ids or globs such as light.*")
        domains = _strings(settings, "allow_domains", NAME, "domain names such as light")
        services = _strings(settings, "allow_services", ENTITY_ID,
                            "services such as light.turn_on")
        if not (entities or domains):
            raise SettingError("allow_entities", "allow at least one entity "
                                                 "(allow_entities or allow_domains)")
        return cls(common, url=_base_url(settings.get("url")),
                   token=_token(settings.get("token_file")), entities=entities,
                   domains=domains, services=services,
                   timeout=float(_positive(settings, "timeout", 10.0, (int, float))),
                   max_result_chars=_positive(settings, "max_result_chars", 1000, int))

    def own_tools(self) -> tuple[ToolSpec, ...]:
        # The hub's timeout is a last resort: each request has its own, named.
        return tuple(ToolSpec(t.name, t.description, t.parameters, self.timeout + 5)
                     for t in TOOLS)

    def secrets(self) -> tuple[str, ...]:
        return (self._token,)

    def offered(self) -> tuple[ToolSpec, ...]:
        return self.common.tools

    def unavailable(self) -> str | None:
        return None if self._client is not None else f"{self.name} is not running"

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Its HTTP client, open until cancelled: calls are taken meanwhile."""
        async with httpx.AsyncClient(base_url=self.url, timeout=self.timeout,
                                     headers={"authorization": f"Bearer {self._token}",
                                              "accept-encoding": "identity"},
                                     follow_redirects=False) as client:
            self._client = client
            try:
                task_status.started()
                await trio.sleep_forever()
            finally:
                self._client = None

    # ---- tools ----

    def allowed(self, entity_id: str) -> bool:
        domain = entity_id.partition(".")[0]
        return domain in self.domains or any(fnmatch.fnmatchcase(entity_id, pattern)
                                             for pattern in self.entities)

    def _check_entity(self, entity_id: Any) -> str:
        if not (isinstance(entity_id, str) and ENTITY_ID.fullmatch(entity_id)):
            raise self._refuse("not an entity id (domain.object_id, lower case)")
        if not self.allowed(entity_id):
            raise self._refuse(f"{entity_id} is not in this device's allow-list")
        return entity_id

    def _refuse(self, why: str) -> ToolError:
        self.refused += 1
        return ToolError(f"refused, nothing was sent to Home Assistant: {why}")

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        self.calls += 1
        if name == "ha_get_state":
            entity_id = self._check_entity(arguments.get("entity_id"))
            return self._cut(summarize(await self._request("GET", f"/api/states/{entity_id}")))
        if name == "ha_call_service":
            return await self._call_service(arguments)
        if name == "ha_list_entities":
            states = await self._request("GET", "/api/states")
            lines = [summarize(state) for state in states if isinstance(state, dict)
                     and isinstance(state.get("entity_id"), str)
                     and self.allowed(state["entity_id"])]
            return self._cut("\n".join(lines[:MAX_LISTED]) or "no allowed entity exists")
        raise ToolError(f"{self.name} has no tool {name!r}")

    async def _call_service(self, arguments: Mapping[str, Any]) -> str:
        domain, service = arguments.get("domain"), arguments.get("service")
        if not all(isinstance(v, str) and NAME.fullmatch(v) for v in (domain, service)):
            raise self._refuse("a domain and a service are lower-case words")
        if f"{domain}.{service}" not in self.services:
            raise self._refuse(f"the service {domain}.{service} is not in this device's "
                               "allow_services")
        entity_id = self._check_entity(arguments.get("entity_id"))
        data = arguments.get("data", {})
        if not isinstance(data, dict):
            raise self._refuse("data must be an object")
        targets = sorted(key for key in data if key.lower() in _TARGET_KEYS)
        if targets:
            raise self._refuse(f"data may not name a target ({', '.join(targets)}): the "
                               "call acts on entity_id alone")
        body = json.dumps({**data, "entity_id": entity_id}, ensure_ascii=False)
        if len(body.encode()) > MAX_DATA_BYTES:
            raise self._refuse(f"the service data is over {MAX_DATA_BYTES} bytes")
        changed = await self._request("POST", f"/api/services/{domain}/{service}", body)
        mine = [state for state in changed if isinstance(state, dict)
                and state.get("entity_id") == entity_id] if isinstance(changed, list) else []
        outcome = summarize(mine[0]) if mine else f"{entity_id}: no state change reported"
        return self._cut(f"called {domain}.{service}; {outcome}")

    def _cut(self, text: str) -> str:
        if len(text) <= self.max_result_chars:
            return text
        return text[:self.max_result_chars - 1] + "…"

    async def _request(self, method: str, path: str, body: str | None = None) -> Any:
        """The decoded JSON answer; ToolError with the reason for anything else."""
        if self._client is None:
            raise ToolError(f"{self.name} is not running")
        try:
            async with self._client.stream(
                    method, path, content=body,
                    headers={"content-type": "application/json"} if body is not None
                    else None) as response:
                answer = await self._answer(response)
        except httpx.TimeoutException:
            raise self._failure(f"no answer within {self.timeout:g} s") from None
        except httpx.TransportError as error:
            raise self._failure(f"cannot reach {self.url}: {type(error).__name__}") from None
        if response.status_code == 401:
            raise self._failure("401 unauthorized: the token was refused")
        if response.status_code == 404:
            raise self._failure(f"404 not found: Home Assistant knows no {path}")
        if response.status_code != 200:
            raise self._failure(f"HTTP {response.status_code} {response.reason_phrase} "
                                f"for {method} {path}")
        try:
            return json.loads(answer)
        except ValueError:
            raise self._failure("the answer is not JSON") from None
        except RecursionError:
            raise self._failure("the answer is JSON nested too deep to read") from None

    async def _answer(self, response: httpx.Response) -> bytearray:
        """The body, decoded, of at most MAX_ANSWER_BYTES."""
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("identity", "gzip", "deflate"):
            raise self._failure(f"the answer is in {encoding!r} encoding: only gzip and "
                                "deflate are decoded")
        inflater = None if encoding == "identity" else Inflater(encoding)
        answer = bytearray()
        try:
            async for read in response.aiter_raw():
                for piece in inflater.feed(read) if inflater else (read,):
                    answer += piece
                    if len(answer) > MAX_ANSWER_BYTES:
                        raise self._failure(f"the answer is over {MAX_ANSWER_BYTES} bytes")
        except zlib.error as error:
            raise self._failure(f"the {encoding} answer does not decode: {error}") from None
        return answer

    def _failure(self, why: str) -> ToolError:
        self.failed += 1
        log.warning("%s: Home Assistant request failed: %s", self.name, why)
        return ToolError(f"Home Assistant: {why}")

    def status(self) -> dict[str, Any]:
        return {"name": self.common.name, "kind": self.kind,
                "state": "running" if self._client is not None else "starting",
                "tools": [tool.name for tool in self.common.tools], "url": self.url,
                "calls": self.calls, "refused": self.refused, "failed": self.failed}
