"""The daemon's TOML config: read, checked and resolved in one pass.

Every problem is a ConfigError "FILE:LINE: KEY: what is wrong". Unknown keys
and tables are errors, so a typo never passes silently. API keys come from
an environment variable or a key file and never appear in a message or a
repr. User and group names are resolved when the config is loaded, so an
unknown name stops the daemon at start rather than at the first client.

This module reads the file; what it reads into is config_schema.py, the
typed reads of a table are agent/settings/reader.py and the line of a key in the
text is found by agent/settings/lines.py.
"""

from __future__ import annotations

import dataclasses
import grp
import ipaddress
import json
import os
import pwd
import re
import shutil
import socket
import tomllib
from types import MappingProxyType
from typing import Any, Mapping
from urllib.parse import urlsplit

from agent.devices import device_types
from agent.devices.base import (EVENT_TYPES, Common, Device, DeviceSpec, Overflow, SettingError,
                                ToolSpec)
from agent.masking import MIN_SECRET_CHARS
from agent.mqtt.config import MqttConfig, MqttTls
from agent.providers.health import Policy, fallback_cycle
from agent.providers.requests import SECRET_HEADERS, Provider
from agent.service.config_schema import Config, DaemonConfig, ProviderEntry, SessionConfig
from agent.settings.lines import syntax_error
from agent.tools.mcp.config import McpConfig
from agent.settings.reader import ConfigError, Source, Table, describe, is_toml
from agent.tools.timers.config import MAX_RING_SECONDS, TimersConfig
from agent.tools.timers.schedule import MAX_TIMERS, zone_named
from agent.wyoming import framing as wyoming
from agent.voice.config import VoiceConfig
from agent.wyoming.config import WyomingConfig

DEFAULT_STATE_DIRECTORY = "/var/lib/homeagent"
LOG_LEVELS = ("debug", "info", "warning", "error")
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes, the last one a NUL
PROVIDER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an RFC 9110 token
HEADER_VALUE = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")  # printable ASCII
SECRET = re.compile(r"[\x21-\x7e]+")  # one token of printable ASCII: what a header carries
# chown() takes (uid_t)-1 for "unchanged": the highest id a user or group may have is one less.
MAX_ID = 2**32 - 2
# Upper bounds sized for a board: each is memory or time the daemon holds per client or ask.
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_CLIENT_QUEUE = 65536
MAX_TURNS = 10000
MAX_MEMORY_SESSIONS = 100000
MAX_UNNAMED_KEEP = 1000000
MAX_CLIENTS = 4096
MAX_SHUTDOWN_GRACE = 3600.0
MAX_DELTA_INTERVAL_MS = 1000
MAX_ANNOUNCE_CHARS = 65536

_ROOT_KEYS = ("default_provider", "daemon", "sessions", "providers", "devices", "mcp",
              "wyoming", "mqtt", "voice", "timers")
_MCP_STDIO = ("argv", "env", "cwd")
_MCP_HTTP = ("url", "headers", "token_env", "token_file")
_MCP_KEYS = (*_MCP_STDIO, *_MCP_HTTP, "start", "allow", "deny", "timeout", "start_timeout",
             "max_result_bytes", "max_message_bytes", "max_concurrent", "restart_max_delay")
MCP_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")  # the prefix of its tools' names
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TIMERS_KEYS = ("enabled", "max_timers", "ring_limit_seconds", "ring_interval_seconds",
                "timezone", "chime")
_MQTT_KEYS = ("broker", "port", "unix", "tls", "username", "password_file", "client_id",
              "board", "prefix", "keepalive", "reconnect_min", "reconnect_max", "max_payload",
              "max_asks", "deltas", "discovery", "discovery_prefix", "sessions")
_MQTT_TLS_KEYS = ("ca_file", "cert_file", "key_file")
TOPIC_LEVEL = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a prefix: one topic level, no wildcard
_WYOMING_KEYS = ("listen", "allow", "allow_loopback", "max_connections",
                 "max_connections_per_peer", "reserved_connections", "idle_timeout",
                 "event_timeout", "queue_bytes", "socket_mode", "socket_group", "languages")
_VOICE_KEYS = ("source", "alsa_device", "program", "address", "rate", "width", "channels",
               "restart_max_delay", "wake", "asr", "asr_name", "asr_language",
               "connect_timeout", "answer_timeout", "session", "provider", "start_seconds",
               "silence_seconds", "max_seconds", "min_seconds", "threshold", "follow_up",
               "follow_up_seconds", "error_text", "speech_tail", "barge_in",
               "barge_in_threshold", "wake_server", "arbitration_window", "wake_sound")
_WAKE_KEYS = ("model", "session", "provider", "language", "server")
MAX_WAKE_NAME = 100   # a wake server's name for a wake word
_DAEMON_KEYS = ("socket", "socket_mode", "socket_group", "allow_users", "allow_groups",
                "state_directory", "max_line_bytes", "client_queue", "shutdown_grace",
                "delta_interval_ms",
                "max_clients", "max_clients_per_user", "max_announce_chars",
                "log_level")
_SESSION_KEYS = ("system_prompt", "max_turns", "max_bytes", "max_tool_steps", "max_tool_calls",
                 "max_tool_arguments", "max_answer_bytes", "max_resumes", "memory_sessions",
                 "memory_bytes", "unnamed_keep", "unnamed_max_age")
# Given only when set, so their defaults stay Provider's own.
_PROVIDER_OPTIONAL = {"connect_timeout": float, "read_timeout": float,
                      "total_timeout": float, "max_tokens": int, "num_ctx": int,
                      "thinking_budget": int, "cache": str, "cache_breakpoints": list,
                      "resume": str, "prefill": bool}
# Ollama's options of more than one TOML type: Provider checks them.
_PROVIDER_ANY = ("keep_alive", "think", "format")
_DEVICE_COMMON = ("type", "events", "queue", "overflow", "block_timeout", "restart_max_delay",
                  "sentence_max_chars", "first_sentence_chars", "tools")
_TOOL_KEYS = ("name", "description", "parameters", "timeout")
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what every provider accepts
_PROVIDER_KEYS = ("protocol", "base_url", "model", "api_key_env", "api_key_file",
                  "retries", "headers", "fallback", "cooldown", "max_cooldown",
                  "retry_without_tools", "ca_file",
                  *_PROVIDER_OPTIONAL, *_PROVIDER_ANY)
MAX_COOLDOWN = 86400.0  # a day: a longer wait is a disabled provider, which has its own state


def load(path: str, environ: Mapping[str, str] = os.environ) -> Config:
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as error:
        raise ConfigError(path, f"cannot read: {error.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(path, "not UTF-8 text") from None
    return parse(text, path, environ)


def parse(text: str, path: str, environ: Mapping[str, str] = os.environ) -> Config:
    """The config in text; path names it in messages and anchors relative key files."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        problem, line = syntax_error(str(error), text)
        raise ConfigError(path, problem, line=line) from None
    root = Table(Source(path, text), (), document, _ROOT_KEYS)
    daemon = _daemon(root.table("daemon", _DAEMON_KEYS), environ)
    sessions = _sessions(root.table("sessions", _SESSION_KEYS))
    warnings: list[str] = []
    providers = _providers(root.table("providers"), environ, os.path.dirname(path), warnings)
    tables = _devices(root.table("devices"))
    devices = {name: spec for name, spec in tables.items() if issubclass(spec.cls, Device)}
    return Config(path=path, daemon=daemon, sessions=sessions,
                  providers=MappingProxyType(providers),
                  default_provider=_default_provider(root, providers),
                  devices=MappingProxyType(devices),
                  tool_providers=MappingProxyType({name: spec for name, spec in tables.items()
                                                   if name not in devices}),
                  mcp=MappingProxyType(_mcp(root.table("mcp"), environ, os.path.dirname(path),
                                            warnings)),
                  wyoming=_wyoming(root.table("wyoming", _WYOMING_KEYS)),
                  mqtt=_mqtt(root.table("mqtt", _MQTT_KEYS), environ, os.path.dirname(path),
                             warnings),
                  voice=_voice(root.table("voice", _VOICE_KEYS), os.path.dirname(path),
                               providers),
                  timers=_timers(root.table("timers", _TIMERS_KEYS), os.path.dirname(path)),
                  warnings=tuple(warnings))


def default_config_text(base_url: str = "http://127.0.0.1:11434/v1",
                        model: str = "llama3.2") -> str:
    """A commented config with one keyless OpenAI-compatible provider
    (Ollama's defaults); the commented keys show the built-in values."""
    return f"""\
# homeagent daemon configuration. Commented keys show their defaults;
# the configuration reference describes every key.

# default_provider = "local"   # needed once there is more than one provider

[daemon]
# socket = "/run/homeagent/agent.sock"   # not used when systemd passes the socket
# socket_mode = 0o660
# socket_group = ""       # group name or gid; "" keeps the daemon's group
# allow_users = []        # user names or uids let in by peer credentials
# allow_groups = []       # group names or gids let in by peer credentials
# state_directory = ""    # "" is $STATE_DIRECTORY, else /var/lib/homeagent
# max_line_bytes = 65536
# client_queue = 256
# max_clients = 64        # connections open at once; fewer if the descriptors allow fewer
# max_clients_per_user = 16
# shutdown_grace = 10.0
# max_announce_chars = 2000   # longest text `announce` (homeagent say) speaks
# delta_interval_ms = 16  # streamed pieces go to a client at most this often
# log_level = "info"

[sessions]
# system_prompt = "You are a helpful assistant in a home."
# max_turns = 50
# max_bytes = 262144
# max_tool_steps = 8      # model requests per ask when tools are called
# max_tool_calls = 8      # tool calls run of one model response; the rest get error results
# max_tool_arguments = 65536  # bytes of one call's arguments; a longer call is not run
# max_answer_bytes = 1048576  # of one ask's text and reasoning; past it the stream is closed
# max_resumes = 2         # times one ask's answer goes on after its stream broke mid-answer
# memory_sessions = 16    # histories held in memory (most recently used); others read from disk
# memory_bytes = 1048576  # of those histories' files together
# unnamed_keep = 64       # sessions the daemon named itself kept on disk; the oldest removed
# unnamed_max_age = 604800.0  # seconds an unnamed session is kept after its last answer; 0: no limit

[providers.local]
protocol = "openai-chat"
base_url = {json.dumps(base_url)}
model = {json.dumps(model)}
# api_key_env = "OPENAI_API_KEY"   # or api_key_file = "openai.key"; local servers need neither
# connect_timeout = 10.0
# read_timeout = 60.0
# total_timeout = 300.0
# retries = 3
# fallback = []           # providers to hand an ask to, in order, when this one fails
# cooldown = 30.0         # seconds a failed provider is passed over; doubles per failure
# max_cooldown = 1800.0
# retry_without_tools = false   # a model that refuses tools is asked again without them
# resume = "fallback"     # an answer broken mid-stream goes on: "fallback", "same" or "off"
# prefill = false         # the server continues a final assistant message (llama.cpp, vLLM)
"""


def _daemon(table: Table, environ: Mapping[str, str]) -> DaemonConfig:
    socket = _absolute(table, "socket", table.get("socket", str, "/run/homeagent/agent.sock"))
    if len(os.fsencode(socket)) > MAX_SOCKET_PATH:
        raise table.error("socket", f"longer than {MAX_SOCKET_PATH} bytes, "
                                    "the limit of a Unix socket path")
    mode = _socket_mode(table)
    group = table.get("socket_group", str, "") or None
    log_level = table.get("log_level", str, "info")
    if log_level not in LOG_LEVELS:
        raise table.error("log_level", f"must be one of {', '.join(LOG_LEVELS)}, "
                                       f"not {log_level!r}")
    return DaemonConfig(
        socket=socket,
        socket_mode=mode,
        socket_group=group,
        socket_gid=None if group is None else _lookup(table, "socket_group", group, "group"),
        allow_users=_ids(table, "allow_users", "user"),
        allow_groups=_ids(table, "allow_groups", "group"),
        state_directory=_state_directory(table, environ),
        max_line_bytes=table.integer("max_line_bytes", 65536, 1024, MAX_LINE_BYTES),
        client_queue=table.integer("client_queue", 256, 16, MAX_CLIENT_QUEUE),
        shutdown_grace=table.number("shutdown_grace", 10.0, 0, MAX_SHUTDOWN_GRACE),
        log_level=log_level,
        max_clients=table.integer("max_clients", 64, 1, MAX_CLIENTS),
        max_clients_per_user=table.integer("max_clients_per_user", 16, 1, MAX_CLIENTS),
        max_announce_chars=table.integer("max_announce_chars", 2000, 1, MAX_ANNOUNCE_CHARS),
        delta_interval_ms=table.integer("delta_interval_ms", 16, 0,
                                             MAX_DELTA_INTERVAL_MS))


def _socket_mode(table: Table) -> int:
    mode = table.get("socket_mode", int, 0o660)
    if not 0 <= mode <= 0o777:
        # 660 for 0o660 is the likely slip: show the number as written.
        raise table.error("socket_mode", f"must be between 0o000 and 0o777 "
                                         f"(octal is written 0o660), got {mode}")
    return mode


def _sessions(table: Table) -> SessionConfig:
    return SessionConfig(
        system_prompt=table.get("system_prompt", str,
                                "You are a helpful assistant in a home.") or None,
        max_turns=table.integer("max_turns", 50, 2, MAX_TURNS),
        max_bytes=table.integer("max_bytes", 262144, 4096),
        max_tool_steps=table.integer("max_tool_steps", 8, 1, 64),
        max_tool_calls=table.integer("max_tool_calls", 8, 1, 64),
        max_tool_arguments=table.integer("max_tool_arguments", 65536, 1024, 1 << 20),
        max_answer_bytes=table.integer("max_answer_bytes", 1 << 20, 4096, 64 << 20),
        max_resumes=table.integer("max_resumes", 2, 0, 16),
        memory_sessions=table.integer("memory_sessions", 16, 1, MAX_MEMORY_SESSIONS),
        memory_bytes=table.integer("memory_bytes", 1 << 20, 4096, 1 << 30),
        unnamed_keep=table.integer("unnamed_keep", 64, 1, MAX_UNNAMED_KEEP),
        unnamed_max_age=table.number("unnamed_max_age", 7 * 86400.0, 0, 10 * 365 * 86400.0))


def _sound(table: Table, key: str, config_dir: str):
    """The WAV file key names (relative: to the config's directory), read
    now into a replies.Sound; None when the key is absent."""
    path = table.get(key, str, None)
    if path is None:
        return None
    from agent.core.sound import read_sound

    path = os.path.join(config_dir, path)
    try:
        return read_sound(path)
    except ValueError as error:
        raise table.error(key, f"{path}: {error}") from None


def _timers(table: Table, config_dir: str) -> TimersConfig:
    timezone = table.get("timezone", str, "")
    try:
        zone_named(timezone)
    except ValueError as error:
        raise table.error("timezone", str(error)) from None
    limit = table.number("ring_limit_seconds", 60.0, 1.0, MAX_RING_SECONDS)
    return TimersConfig(enabled=table.get("enabled", bool, True),
                        max_timers=table.integer("max_timers", MAX_TIMERS, 1, 256),
                        ring_limit_seconds=limit,
                        ring_interval_seconds=table.number("ring_interval_seconds",
                                                           min(5.0, limit), 1.0, limit),
                        timezone=timezone, chime=_sound(table, "chime", config_dir))


def _wyoming(table: Table) -> WyomingConfig:
    listen = table.get("listen", str, "")
    try:
        address = wyoming.parse_address(listen) if listen else None
    except ValueError as error:
        raise table.error("listen", str(error)) from None
    allow = []
    for index, value in enumerate(table.get("allow", list, [])):
        try:
            allow.append(_ipv4_unmapped(ipaddress.ip_network(value, strict=False)))
        except (TypeError, ValueError):
            raise table.error("allow", f"item {index + 1}: an address or network such as "
                                       f"\"192.168.1.20\" or \"192.168.1.0/24\", not "
                                       f"{value!r}") from None
    allow_loopback = table.get("allow_loopback", bool, False)
    if address is not None and address[0] == "tcp" and not (allow or allow_loopback):
        raise table.error("listen", "a TCP listener lets in only the peers of wyoming.allow, "
                                    "and this host's with allow_loopback = true (any user on "
                                    "it); Home Assistant on this host: listen on "
                                    "\"unix:PATH\"")
    languages = table.get("languages", list, ["en"])
    if not languages or not all(isinstance(x, str) and x for x in languages):
        raise table.error("languages", "a non-empty array of language codes such as \"en\"")
    mode = _socket_mode(table)
    group = table.get("socket_group", str, "")
    most = table.integer("max_connections", 8, 1, 256)
    return WyomingConfig(listen=address, allow=tuple(allow), allow_loopback=allow_loopback,
                         max_connections=most,
                         max_connections_per_peer=table.integer("max_connections_per_peer",
                                                                4, 1, 256),
                         reserved_connections=table.integer("reserved_connections", 2, 0,
                                                            most - 1),
                         idle_timeout=table.positive("idle_timeout", 60.0),
                         event_timeout=table.positive("event_timeout", 10.0),
                         queue_bytes=table.integer("queue_bytes", 1 << 20, 65536, 64 << 20),
                         socket_mode=mode,
                         socket_gid=_lookup(table, "socket_group", group, "group")
                         if group else None,
                         languages=tuple(languages))


def _ipv4_unmapped(network):
    """An IPv4-mapped IPv6 network (::ffff:192.168.1.5) as the IPv4 network it
    names: a peer's address is compared unmapped, so the mapped form never
    matched."""
    mapped = network.network_address.ipv4_mapped if network.version == 6 else None
    if mapped is None or network.prefixlen < 96:
        return network
    return ipaddress.ip_network(f"{mapped}/{network.prefixlen - 96}")


def _voice(table: Table, config_dir: str, providers: Mapping[str, Any]) -> VoiceConfig:
    """[voice]: off when the table is absent. Nothing of the voice extra is
    imported here: the wake word models are checked by name or file."""
    if not table.values:
        return VoiceConfig()
    from agent.session.store import check_session_id
    from agent.voice.audio import Format
    from agent.voice.config import BUILTIN, MAX_ARBITRATION_WINDOW, SourceConfig, WakeWord
    from agent.voice.endpoint import Limits

    def session_of(reader, key: str, default):
        value = reader.get(key, str, default)
        if value is not None:
            try:
                check_session_id(value)
            except ValueError as error:
                raise reader.error(key, str(error)) from None
        return value

    def provider_of(reader, key: str):
        value = reader.get(key, str, None)
        if value is not None and value not in providers:
            raise reader.error(key, f"no provider named {value!r} (providers: "
                                    f"{', '.join(providers) or 'none'})")
        return value

    kind = table.choice("source", ("arecord", "program", "wyoming"), "arecord")
    fmt = Format(table.integer("rate", 16000, 1000, 192000),
                 table.choice("width", (1, 2, 4), 2), table.integer("channels", 1, 1, 32))
    argv: tuple[str, ...] = ()
    address = None
    if kind == "program":
        argv = _mic_program(table, table.get("program", list))
    elif kind == "wyoming":
        address = _address(table, "address", table.get("address", str))
    elif shutil.which("arecord") is None:
        raise table.error("source", "arecord is not installed (alsa-utils); or set source "
                                    "to \"program\" or \"wyoming\"")
    source = SourceConfig(kind=kind, alsa_device=table.get("alsa_device", str, "default"),
                          argv=argv, address=address, format=fmt,
                          restart_max_delay=table.number("restart_max_delay", 30.0, 0.5, 3600))
    wake_list = table.get("wake", list)
    if not wake_list:
        raise table.error("wake", "at least one wake word: a model name ("
                                  f"{', '.join(BUILTIN)}) or a table {{ model = ..., "
                                  "session = ..., provider = ..., language = ..., "
                                  "server = ... }}")
    wake_server = table.get("wake_server", str, "")
    wake_server = _address(table, "wake_server", wake_server) if wake_server else None
    wake = []
    for index, item in enumerate(wake_list):
        if isinstance(item, str):
            item = {"model": item}
        if not isinstance(item, dict):
            raise table.error("wake", f"item {index + 1}: a model name or a table")
        reader = Table(table.source, (*table.key, "wake"), item, _WAKE_KEYS)
        model = reader.get("model", str)
        server = reader.get("server", bool, False)
        if server:
            if wake_server is None:
                raise reader.error("server", "the wake server's wake word needs [voice] "
                                             "wake_server, the server's address")
            if not 0 < len(model) <= MAX_WAKE_NAME or not model.isprintable():
                raise reader.error("model", f"the wake server's name for the wake word: "
                                            f"1 to {MAX_WAKE_NAME} printable characters")
            if any(other.server and other.model == model for other in wake):
                raise reader.error("model", f"the wake server's {model!r} is named twice")
        elif model not in BUILTIN:
            if not model.endswith(".json"):
                raise reader.error("model", f"{model!r}: one of {', '.join(BUILTIN)} or the "
                                            "path of a microWakeWord model's .json file (or "
                                            "server = true: the wake server's name)")
            model = os.path.join(config_dir, model)
            if not os.path.isfile(model):
                raise reader.error("model", f"{model}: no such file")
        wake.append(WakeWord(model, session_of(reader, "session", None),
                             provider_of(reader, "provider"),
                             reader.get("language", str, "") or None, server))
    if wake_server is not None and not any(word.server for word in wake):
        raise table.error("wake_server", "no wake word is the server's: name one "
                                         "{ model = \"NAME\", server = true }")
    limits = Limits(start_seconds=table.number("start_seconds", 5.0, 0.5, 60),
                    silence_seconds=table.number("silence_seconds", 0.8, 0.1, 10),
                    max_seconds=table.number("max_seconds", 15.0, 1, 120),
                    min_seconds=table.number("min_seconds", 0.3, 0, 10),
                    threshold=table.number("threshold", 0.5, 0.01, 0.99))
    error_text = table.get("error_text", str, "I could not hear that.")
    wake_sound = _sound(table, "wake_sound", config_dir)
    return VoiceConfig(
        enabled=True, source=source, wake=tuple(wake), wake_server=wake_server,
        asr=_address(table, "asr", table.get("asr", str)),
        asr_name=table.get("asr_name", str, "") or None,
        asr_language=table.get("asr_language", str, "") or None,
        connect_timeout=table.number("connect_timeout", 5.0, 0.1, 120),
        answer_timeout=table.number("answer_timeout", 15.0, 0.1, 600),
        session=session_of(table, "session", "voice"), provider=provider_of(table, "provider"),
        limits=limits, follow_up=table.choice("follow_up", ("question", "always", "never"),
                                              "question"),
        follow_up_seconds=table.number("follow_up_seconds", 5.0, 0.5, 60),
        error_text=error_text, speech_tail=table.number("speech_tail", 0.5, 0, 10),
        barge_in=table.get("barge_in", bool, True),
        barge_in_threshold=table.number("barge_in_threshold", 0.9, 0.01, 0.999),
        arbitration_window=table.number("arbitration_window", 0.15, 0,
                                        MAX_ARBITRATION_WINDOW),
        wake_sound=wake_sound)


def _address(table: Table, key: str, value: str) -> tuple[str, str, int]:
    try:
        return wyoming.parse_address(value)
    except ValueError as error:
        raise table.error(key, str(error)) from None


def _mic_program(table: Table, argv: list) -> tuple[str, ...]:
    """A microphone program's argv: a name on PATH or an absolute path, never
    a shell; {rate}, {width} and {channels} its only placeholders."""
    argv = _program(table, "program", argv)
    values = {"rate": 0, "width": 0, "channels": 0}
    for index, arg in enumerate(argv[1:], 1):
        try:
            arg.format_map(values)
        except (KeyError, ValueError, IndexError, AttributeError) as error:
            raise table.error("program", f"argument {index} {arg!r}: the placeholders are "
                                         f"{{rate}}, {{width}} and {{channels}} ({error})") \
                from None
    return argv


def _mqtt(table: Table, environ: Mapping[str, str], config_dir: str,
          warnings: list[str]) -> MqttConfig:
    from agent.mqtt.topics import BOARD_NAME, board_name
    from agent.session.store import SESSION_ID

    broker = table.get("broker", str, "") or None
    unix = table.get("unix", str, "") or None
    if broker and unix:
        raise table.error("unix", "set broker (and port) or unix, not both")
    if unix is not None:
        _absolute(table, "unix", unix)
    tls = None
    if "tls" in table.values:
        tls_table = table.table("tls", _MQTT_TLS_KEYS)
        files = {key: tls_table.get(key, str, "") or None for key in _MQTT_TLS_KEYS}
        for key, value in files.items():
            if value is not None and not os.path.isabs(value):
                files[key] = os.path.join(config_dir, value)
        if files["ca_file"] is None:
            raise tls_table.error("ca_file", "the CA that signed the broker's certificate")
        if (files["cert_file"] is None) != (files["key_file"] is None):
            raise tls_table.error("key_file", "a client certificate needs cert_file and key_file")
        tls = MqttTls(**files)
    board = table.get("board", str, "") or board_name(socket.gethostname())
    if not BOARD_NAME.fullmatch(board):
        raise table.error("board", "a board name is 1 to 64 of a-z, 0-9, '_' and '-'")
    prefixes = {key: table.get(key, str, default) for key, default
                in (("prefix", "homeagent"), ("discovery_prefix", "homeassistant"))}
    for key, value in prefixes.items():
        if not TOPIC_LEVEL.fullmatch(value):
            raise table.error(key, "one topic level of 1 to 64 letters, digits, '_' and '-'")
    client_id = table.get("client_id", str, f"homeagent-{board}")
    if not 0 < len(client_id.encode()) <= 128:
        raise table.error("client_id", "1 to 128 bytes")
    password_file = table.get("password_file", str, None)
    password = None if password_file is None else \
        _secret_file(table, "password_file", password_file, environ, config_dir, warnings)
    username = table.get("username", str, "") or None
    if password is not None and username is None:
        raise table.error("password_file", "a password needs a username")
    reconnect_min = table.number("reconnect_min", 1.0, 0.01, 3600)
    sessions = table.get("sessions", list, [])
    if not all(isinstance(x, str) and SESSION_ID.fullmatch(x) for x in sessions):
        raise table.error("sessions", "an array of session names (letters, digits, '.', "
                                      "'_', '-'; at most 64) an MQTT ask may name as they are")
    return MqttConfig(
        broker=broker, port=table.integer("port", 8883 if tls else 1883, 1, 65535), unix=unix,
        tls=tls, username=username, password=password, board=board, client_id=client_id,
        keepalive=table.integer("keepalive", 60, 5, 3600),
        reconnect_min=reconnect_min,
        reconnect_max=table.number("reconnect_max", max(60.0, reconnect_min), reconnect_min,
                                   3600),
        max_payload=table.integer("max_payload", 16 * 1024, 256, 1 << 20),
        max_asks=table.integer("max_asks", 4, 1, 64),
        deltas=table.get("deltas", bool, False), discovery=table.get("discovery", bool, True),
        sessions=tuple(sessions), **prefixes)


def _devices(table: Table) -> dict[str, DeviceSpec]:
    """[devices.NAME]: the common keys here, the rest checked by the device
    type's own from_settings; tool names are unique across devices. A
    `homeassistant` table is a tool provider, not a device."""
    if not table.values:
        return {}
    from agent.tools.homeassistant import HomeAssistantTools

    types = {**device_types(), HomeAssistantTools.kind: HomeAssistantTools}
    devices: dict[str, DeviceSpec] = {}
    tool_names: set[str] = set()
    for name in table.values:
        if not PROVIDER_NAME.fullmatch(name):
            raise table.error(name, "a device name is 1 to 64 letters, digits, '_', '.' or '-'")
        device = table.table(name)
        kind = device.get("type", str)
        cls = types.get(kind)
        if cls is None:
            raise device.error("type", f"unknown device type {kind!r} (known: "
                               f"{', '.join(sorted(types))})")
        events = device.get("events", list, None)
        if events is not None and not all(e in EVENT_TYPES for e in events):
            raise device.error("events", f"events are among {', '.join(sorted(EVENT_TYPES))}")
        overflow = device.get("overflow", str, "coalesce")
        if overflow not in {o.value for o in Overflow}:
            raise device.error("overflow", "one of " + ", ".join(o.value for o in Overflow))
        tools = tuple(_tool(device, index, value, tool_names)
                      for index, value in enumerate(device.get("tools", list, [])))
        common = Common(
            name=name, events=frozenset(cls.DEFAULT_EVENTS if events is None else events),
            queue=device.integer("queue", 64, 1, 65536), overflow=Overflow(overflow),
            block_timeout=device.number("block_timeout", 2.0, 0),
            restart_max_delay=device.number("restart_max_delay", 30.0, 0.1),
            sentence_max_chars=device.integer("sentence_max_chars", 200, 16, 65536),
            first_sentence_chars=device.integer("first_sentence_chars", 0, 0, 65536),
            tools=tools)
        settings = {k: v for k, v in device.values.items() if k not in _DEVICE_COMMON}
        try:
            built = cls.from_settings(common, settings)
        except SettingError as error:
            raise device.source.error((*device.key, *error.key.split(".")),
                                      error.problem) from None
        for tool in built.own_tools():
            if tool.name in tool_names:
                raise device.error("type", f"its own tool {tool.name} is another device's too "
                                   "(tool names are unique)")
            tool_names.add(tool.name)
        common = dataclasses.replace(common, tools=common.tools + built.own_tools())
        devices[name] = DeviceSpec(common, cls, MappingProxyType(settings), built.secrets())
    return devices


def _tool(device: Table, index: int, value: Any, seen: set[str]) -> ToolSpec:
    from agent.tools.schema import SchemaError, check_schema

    if not isinstance(value, dict):
        raise device.error("tools", f"tools[{index}] must be a table")
    tool = Table(device.source, (*device.key, "tools"), value, _TOOL_KEYS)
    name = tool.get("name", str)
    if not TOOL_NAME.fullmatch(name):
        raise tool.error("name", "a tool name is 1 to 64 letters, digits, '_' or '-'")
    if name in seen:
        raise tool.error("name", f"another device already has a tool named {name!r}")
    seen.add(name)
    parameters = tool.get("parameters", dict, {"type": "object", "properties": {}})
    try:
        check_schema(parameters)
    except SchemaError as error:
        raise tool.error("parameters", str(error)) from None
    return ToolSpec(name, tool.get("description", str), parameters,
                    tool.positive("timeout", 10.0))


def _providers(table: Table, environ: Mapping[str, str], config_dir: str,
               warnings: list[str]) -> dict[str, ProviderEntry]:
    if not table.values:
        raise table.error(None, "at least one provider is required")
    for name in table.values:
        if not PROVIDER_NAME.fullmatch(name):
            raise table.error(name, "a provider name is 1 to 64 letters, digits, '_', '.' or '-'")
    providers = {name: _provider(table.table(name, _PROVIDER_KEYS), environ, config_dir,
                                 warnings)
                 for name in table.values}
    _check_fallbacks(table, providers)
    return providers


def _check_fallbacks(table: Table, providers: Mapping[str, ProviderEntry]) -> None:
    """Each fallback names another configured provider, and following them never comes back."""
    fallbacks = {name: entry.fallback for name, entry in providers.items()}
    for name, entry in providers.items():
        where = table.table(name)
        for other in entry.fallback:
            if other == name:
                raise where.error("fallback", f"{name!r} names itself; a fallback is another "
                                              "provider")
            if other not in providers:
                raise where.error("fallback", f"no provider named {other!r} (configured: "
                                              f"{', '.join(providers)})")
        if len(set(entry.fallback)) != len(entry.fallback):
            raise where.error("fallback", "names a provider more than once")
        cycle = fallback_cycle(name, fallbacks)
        if cycle is not None:
            raise where.error("fallback", "the fallbacks go round in a cycle: "
                                          + " -> ".join(cycle))


def _provider(table: Table, environ: Mapping[str, str], config_dir: str,
              warnings: list[str]) -> ProviderEntry:
    name = table.key[-1]
    settings = {key: table.get(key, str) for key in ("protocol", "base_url", "model")}
    if not settings["model"]:
        raise table.error("model", "must not be empty")
    settings.update({key: table.get(key, kind) for key, kind in _PROVIDER_OPTIONAL.items()
                     if key in table.values})
    settings.update({key: table.values[key] for key in _PROVIDER_ANY if key in table.values})
    settings.update(headers=_headers(table),
                    api_key=_api_key(table, environ, config_dir, warnings))
    if "ca_file" in table.values:
        settings["ca_file"] = _ca_file(table, config_dir)
    try:
        provider = Provider(name=name, **settings)
    except ValueError as error:
        # Provider's problem starts with the field it is about: point at that key.
        problem = str(error).removeprefix(f"provider {name!r}: ")
        field = problem.split(" ", 1)[0]
        raise table.error(field if field in settings else None, problem) from None
    fallback = table.get("fallback", list, [])
    if not all(isinstance(other, str) for other in fallback):
        raise table.error("fallback", "expected an array of provider names")
    cooldown = table.number("cooldown", 30.0, 0.001, MAX_COOLDOWN)
    max_cooldown = table.number("max_cooldown", max(1800.0, cooldown), 0.001, MAX_COOLDOWN)
    if max_cooldown < cooldown:
        raise table.error("max_cooldown", f"must be at least cooldown ({cooldown:g}), "
                                          f"got {max_cooldown:g}")
    return ProviderEntry(provider, table.integer("retries", 3, 0, 10), tuple(fallback),
                         Policy(cooldown, max_cooldown),
                         table.get("retry_without_tools", bool, False))


def _ca_file(table: Table, config_dir: str) -> str:
    """The absolute path of the provider's CA file, once it has shown to
    hold PEM certificates (the daemon loads it at the first https request)."""
    import ssl  # only for a config that names a CA file

    path = os.path.join(config_dir, table.get("ca_file", str))
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except FileNotFoundError:
        raise table.error("ca_file", f"CA file not found: {path}") from None
    except ssl.SSLError as error:
        raise table.error("ca_file", f"{path} holds no PEM certificate that loads "
                                     f"({error.reason or error})") from None
    except OSError as error:
        raise table.error("ca_file", f"cannot read {path}: {error.strerror}") from None
    return os.path.abspath(path)


def _headers(table: Table) -> dict[str, str]:
    """Names and values a request can carry: a CR or LF would end the header
    (httpx refuses it, failing every ask), other bytes break it."""
    headers = table.table("headers")
    for name in headers.values:
        value = headers.get(name, str)
        if not HEADER_NAME.fullmatch(name):
            raise headers.error(name, "a header name is letters, digits and !#$%&'*+-.^_`|~")
        if not HEADER_VALUE.fullmatch(value):
            raise headers.error(name, "a header value is printable ASCII, spaces inside only "
                                      "(no CR, LF or other control character)")
        if name.lower() in SECRET_HEADERS:
            # "SCHEME CREDENTIAL" or the credential alone
            _check_secret(headers, name, value.rpartition(" ")[2], "the header")
    return dict(headers.values)


def _api_key(table: Table, environ: Mapping[str, str], config_dir: str,
             warnings: list[str], keys: tuple[str, str] = ("api_key_env", "api_key_file")) -> str:
    """The key named by api_key_env or api_key_file (or the keys given), or
    "" for none. Messages name the variable or the file, never what is in it."""
    env_key, file_key = keys
    variable = table.get(env_key, str, None)
    file_name = table.get(file_key, str, None)
    if variable is not None and file_name is not None:
        raise table.error(file_key, f"set {env_key} or {file_key}, not both")
    if variable is not None:
        if variable not in environ:
            raise table.error(env_key, f"environment variable {variable} is not set")
        return _secret(table, env_key, environ[variable],
                       f"environment variable {variable}")
    if file_name is None:
        return ""
    return _secret_file(table, file_key, file_name, environ, config_dir, warnings)


def _secret_file(table: Table, key: str, file_name: str, environ: Mapping[str, str],
                 config_dir: str, warnings: list[str]) -> str:
    """The secret in the file key names (a systemd credential first); the
    messages name the file, never what is in it."""
    candidates = [os.path.join(config_dir, file_name)]
    # A relative name may be a systemd credential, which wins: LoadCredential=
    # of a file keeps its name; of a directory (the shipped unit loads
    # credentials/) names each file ID_FILE, so credentials/openai.key
    # arrives as credentials_openai.key.
    if not os.path.isabs(file_name) and "CREDENTIALS_DIRECTORY" in environ:
        candidates.insert(0, os.path.join(environ["CREDENTIALS_DIRECTORY"],
                                          file_name.replace("/", "_")))
    for candidate in candidates:
        try:
            with open(candidate, encoding="utf-8") as file:
                secret = _secret(table, key, file.read(), f"key file {candidate}")
                mode = os.fstat(file.fileno()).st_mode
        except FileNotFoundError:
            continue
        except OSError as error:
            problem = error.strerror
        except UnicodeDecodeError:
            problem = "not UTF-8 text"
        else:
            if mode & 0o077:
                warnings.append(str(table.error(
                    key, f"key file {candidate} is readable by group or others "
                    f"(mode 0o{mode & 0o777:03o}); chmod 600 it")))
            return secret
        raise table.error(key, f"cannot read {candidate}: {problem}")
    raise table.error(key, f"key file not found: {' nor '.join(candidates)}")


def _secret(table: Table, key: str, raw: str, source: str) -> str:
    """raw without surrounding whitespace (a key file's final newline)."""
    if not raw.strip():
        raise table.error(key, f"{source} is empty")
    return _check_secret(table, key, raw.strip(), source)


def _check_secret(table: Table, key: str, secret: str, source: str) -> str:
    """secret, if a header can carry it and the masker can hide it; the
    message says what is wrong, never what the secret is."""
    if not SECRET.fullmatch(secret):
        raise table.error(key, f"{source} holds whitespace, a control character or a "
                               "non-ASCII character in the key; a key is one token of "
                               "printable ASCII")
    if len(secret) < MIN_SECRET_CHARS:
        raise table.error(key, f"{source} holds a key of {len(secret)} characters; at least "
                               f"{MIN_SECRET_CHARS} are needed to mask it in replies and logs")
    return secret


def _mcp(table: Table, environ: Mapping[str, str], config_dir: str,
         warnings: list[str]) -> dict[str, McpConfig]:
    """[mcp.NAME]: a stdio server (argv, env, cwd) or a streamable-HTTP one
    (url, headers, token_env or token_file), and the bounds of its calls."""
    servers = {}
    for name in table.values:
        if not MCP_NAME.fullmatch(name):
            raise table.error(name, "an MCP server's name is 1 to 32 letters, digits, '_' "
                                    "or '-' (its tools are named NAME_TOOL)")
        server = table.table(name, _MCP_KEYS)
        stdio = "argv" in server.values
        if stdio == ("url" in server.values):
            raise server.error(None, "set argv (a program speaking MCP on stdio) or url (a "
                                     "streamable-HTTP endpoint), one of them")
        for key in _MCP_HTTP if stdio else _MCP_STDIO:
            if key in server.values:
                raise server.error(key, f"a {'stdio' if stdio else 'streamable-HTTP'} server "
                                        f"takes no {key}")
        if stdio:
            where = dict(argv=_program(server, "argv", server.get("argv", list)),
                         env=MappingProxyType(_environment(server.table("env"))),
                         cwd=_directory(server, "cwd", server.get("cwd", str, None)))
        else:
            where = dict(url=_endpoint(server, server.get("url", str)),
                         headers=MappingProxyType(_headers(server)),
                         token=_api_key(server, environ, config_dir, warnings,
                                        ("token_env", "token_file")) or None)
        timeout = server.number("timeout", 30.0, 0.1, 3600)
        servers[name] = McpConfig(
            name=name, **where, start=server.choice("start", ("lazy", "start"), "lazy"),
            allow=_globs(server, "allow"), deny=_globs(server, "deny"), timeout=timeout,
            start_timeout=server.number("start_timeout", 10.0, 0.1, 600),
            max_result_bytes=server.integer("max_result_bytes", 16 * 1024, 256, 1 << 20),
            max_message_bytes=server.integer("max_message_bytes", 2 << 20, 4096, 64 << 20),
            max_concurrent=server.integer("max_concurrent", 4, 1, 64),
            restart_max_delay=server.number("restart_max_delay", 60.0, 1, 3600))
    return servers


def _program(table: Table, key: str, argv: list) -> tuple[str, ...]:
    """A program's argv, never a shell: a name on PATH or an absolute path."""
    if not argv or not all(isinstance(a, str) and a and "\0" not in a for a in argv):
        raise table.error(key, "a non-empty array of strings: the program and its arguments")
    program = argv[0]
    if "/" in program and not os.path.isabs(program):
        raise table.error(key, f"program {program!r}: a name on PATH or an absolute path")
    path = shutil.which(program)
    if path is None:
        raise table.error(key, f"program {program!r} not found or not executable")
    return (path, *argv[1:])


def _environment(table: Table) -> dict[str, str]:
    for name in table.values:
        value = table.get(name, str)
        if not ENV_NAME.fullmatch(name):
            raise table.error(name, "an environment variable's name is letters, digits and "
                                    "'_', not starting with a digit")
        if "\0" in value:
            raise table.error(name, "a value cannot hold a NUL character")
    return dict(table.values)


def _directory(table: Table, key: str, path: str | None) -> str | None:
    if path is not None and not os.path.isdir(_absolute(table, key, path)):
        raise table.error(key, f"{path}: no such directory")
    return path


def _endpoint(table: Table, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment \
            or parts.username or parts.password:
        raise table.error("url", "an http:// or https:// URL with a host, without user:password@ "
                                 "(give a token with token_file) or a #fragment")
    return url


def _globs(table: Table, key: str) -> tuple[str, ...]:
    globs = table.get(key, list, [])
    if not all(isinstance(glob, str) and glob for glob in globs):
        raise table.error(key, "an array of tool names or globs such as \"get_*\"")
    return tuple(globs)


def _default_provider(root: Table, providers: Mapping[str, ProviderEntry]) -> str:
    configured = ", ".join(providers)
    if len(providers) == 1:
        default = root.get("default_provider", str, next(iter(providers)))
    else:
        default = root.get("default_provider", str, None)
        if default is None:
            raise root.error("default_provider", "required with more than one provider "
                                                 f"(configured: {configured})")
    if default not in providers:
        raise root.error("default_provider",
                         f"no provider named {default!r} (configured: {configured})")
    return default


def _state_directory(table: Table, environ: Mapping[str, str]) -> str:
    configured = table.get("state_directory", str, "")
    if configured:
        return _absolute(table, "state_directory", configured)
    # systemd's StateDirectory= may list several, colon-separated; ours is the first.
    return environ.get("STATE_DIRECTORY", "").split(":")[0] or DEFAULT_STATE_DIRECTORY


def _absolute(table: Table, key: str, path: str) -> str:
    """path, which must not depend on the daemon's working directory."""
    if not os.path.isabs(path):
        raise table.error(key, "must be an absolute path")
    return path


def _ids(table: Table, key: str, kind: str) -> tuple[int, ...]:
    """User or group ids from names and numeric ids."""
    ids = []
    for item in table.get(key, list, []):
        if isinstance(item, str):
            ids.append(_lookup(table, key, item, kind))
        elif not is_toml(item, int):
            raise table.error(key, f"expected {kind} names or ids, got {describe(item)}")
        else:
            ids.append(_id(table, key, item, kind))
    return tuple(ids)


def _id(table: Table, key: str, number: int, kind: str) -> int:
    if not 0 <= number <= MAX_ID:
        raise table.error(key, f"{kind} ids are between 0 and {MAX_ID}, got {number}")
    return number


def _lookup(table: Table, key: str, name: str, kind: str) -> int:
    if name.isascii() and name.isdigit():
        return _id(table, key, int(name), kind)
    try:
        return pwd.getpwnam(name).pw_uid if kind == "user" else grp.getgrnam(name).gr_gid
    except KeyError:
        raise table.error(key, f"unknown {kind} {name!r}") from None
