"""The daemon's config loader on real files: defaults, every key's checks
with the exact line in the message, key sources, and that no API key ever
shows in a message or a repr."""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
from dataclasses import fields

import pytest

from agent.service.config import (
    DEFAULT_STATE_DIRECTORY,
    Config,
    ConfigError,
    default_config_text,
    load,
    parse,
)
from agent.service.config_schema import DaemonConfig, SessionConfig

SECRET = "sk-test-7f3a9c-DO-NOT-LEAK"
LOCAL = """\
[providers.local]
protocol = "openai-chat"
base_url = "http://127.0.0.1:11434/v1"
model = "llama3.2"
"""
# Every line number below is a line of this document.
DOCUMENT = """\
default_provider = "a"

[daemon]
socket = "/run/homeagent/agent.sock"
socket_mode = 0o660
client_queue = 256

[sessions]
max_turns = 50

[providers.a]
protocol = "openai-chat"
base_url = "http://127.0.0.1:8080/v1"
model = "m"
read_timeout = 60

[providers."b.c"]
protocol = "anthropic"
base_url = "https://api.anthropic.com/v1"
model = "claude"
max_tokens = 1024
headers = { x-extra = "1" }
"""


def write(directory, text: str, name: str = "config.toml") -> str:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def load_text(directory, text: str, environ: dict[str, str] | None = None) -> Config:
    return load(write(directory, text), environ or {})


def load_error(directory, text: str, environ: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_text(directory, text, environ)
    return caught.value


def with_line(number: int, replacement: str) -> str:
    """DOCUMENT with one line replaced (by several when it holds newlines)."""
    lines = DOCUMENT.splitlines()
    lines[number - 1] = replacement
    return "\n".join(lines) + "\n"


def test_defaults(tmp_path):
    config = load_text(tmp_path, LOCAL)
    assert config.daemon == DaemonConfig(
        socket="/run/homeagent/agent.sock", socket_mode=0o660, socket_group=None,
        socket_gid=None, allow_users=(), allow_groups=(),
        state_directory=DEFAULT_STATE_DIRECTORY, max_line_bytes=65536, client_queue=256,
        shutdown_grace=10.0, log_level="info")
    assert config.sessions == SessionConfig(
        system_prompt="You are a helpful assistant in a home.", max_turns=50, max_bytes=262144)
    entry = config.providers["local"]
    assert entry.retries == 3
    assert (entry.provider.api_key, entry.provider.connect_timeout, entry.provider.read_timeout,
            entry.provider.total_timeout, entry.provider.max_tokens, entry.provider.headers) \
        == ("", 10.0, 60.0, 300.0, None, {})


def test_every_key_set(tmp_path):
    config = load_text(tmp_path, """\
[daemon]
socket = "/run/ha/a.sock"
socket_mode = 0o600
socket_group = "0"
allow_users = [0, 1000]
allow_groups = [0]
state_directory = "/srv/ha"
max_line_bytes = 1024
client_queue = 16
shutdown_grace = 0
log_level = "debug"

[sessions]
system_prompt = ""
max_turns = 2
max_bytes = 4096
memory_sessions = 1
memory_bytes = 4096
unnamed_keep = 1
unnamed_max_age = 0

[providers.local]
protocol = "anthropic"
base_url = "https://api.anthropic.com/v1"
model = "claude"
connect_timeout = 1
read_timeout = 2.5
total_timeout = 30
max_tokens = 2048
retries = 0
headers = { "anthropic-beta" = "tools" }
""")
    assert config.daemon == DaemonConfig(
        socket="/run/ha/a.sock", socket_mode=0o600, socket_group="0", socket_gid=0,
        allow_users=(0, 1000), allow_groups=(0,), state_directory="/srv/ha",
        max_line_bytes=1024, client_queue=16, shutdown_grace=0.0, log_level="debug")
    assert config.sessions == SessionConfig(system_prompt=None, max_turns=2, max_bytes=4096,
                                            memory_sessions=1, memory_bytes=4096,
                                            unnamed_keep=1, unnamed_max_age=0.0)
    entry = config.providers["local"]
    assert entry.retries == 0
    assert (entry.provider.connect_timeout, entry.provider.read_timeout,
            entry.provider.total_timeout, entry.provider.max_tokens, entry.provider.headers) \
        == (1.0, 2.5, 30.0, 2048, {"anthropic-beta": "tools"})
    assert isinstance(entry.provider.connect_timeout, float)


def test_document_is_valid(tmp_path):
    config = load_text(tmp_path, DOCUMENT)
    assert list(config.providers) == ["a", "b.c"]
    assert config.default_provider == "a"


@pytest.mark.parametrize("number, replacement, line, key, problem", [
    # daemon
    (4, 'socket = "agent.sock"', 4, "daemon.socket", "must be an absolute path"),
    (4, 'socket = ""', 4, "daemon.socket", "must be an absolute path"),
    (4, f'socket = "/{"s" * 107}"', 4, "daemon.socket",
     "longer than 107 bytes, the limit of a Unix socket path"),
    (5, "socket_mode = 660", 5, "daemon.socket_mode",
     "must be between 0o000 and 0o777 (octal is written 0o660), got 660"),
    (5, 'socket_mode = "0660"', 5, "daemon.socket_mode", "expected an integer, got a string"),
    (5, 'socket_group = "no-such-group-ha"', 5, "daemon.socket_group",
     "unknown group 'no-such-group-ha'"),
    (5, "socket_group = 0", 5, "daemon.socket_group", "expected a string, got an integer"),
    (5, 'allow_users = ["no-such-user-ha"]', 5, "daemon.allow_users",
     "unknown user 'no-such-user-ha'"),
    (5, "allow_users = [1.5]", 5, "daemon.allow_users",
     "expected user names or ids, got a float"),
    (5, 'allow_users = "root"', 5, "daemon.allow_users", "expected an array, got a string"),
    (5, "allow_groups = [true]", 5, "daemon.allow_groups",
     "expected group names or ids, got a boolean"),
    (5, 'allow_groups = ["no-such-group-ha"]', 5, "daemon.allow_groups",
     "unknown group 'no-such-group-ha'"),
    (5, 'state_directory = "var/lib/ha"', 5, "daemon.state_directory",
     "must be an absolute path"),
    (6, "max_line_bytes = 1023", 6, "daemon.max_line_bytes",
     "must be between 1024 and 16777216, got 1023"),
    (6, 'client_queue = "256"', 6, "daemon.client_queue", "expected an integer, got a string"),
    (6, "client_queue = 15", 6, "daemon.client_queue", "must be between 16 and 65536, got 15"),
    (6, "shutdown_grace = -0.5", 6, "daemon.shutdown_grace",
     "must be between 0 and 3600.0, got -0.5"),
    (6, "shutdown_grace = true", 6, "daemon.shutdown_grace", "expected a number, got a boolean"),
    (6, "shutdown_grace = nan", 6, "daemon.shutdown_grace",
     "expected a finite number, got nan"),
    (6, 'log_level = "verbose"', 6, "daemon.log_level",
     "must be one of debug, info, warning, error, not 'verbose'"),
    # sessions
    (9, "max_turns = 1", 9, "sessions.max_turns", "must be between 2 and 10000, got 1"),
    (9, "max_bytes = 4095", 9, "sessions.max_bytes", "must be at least 4096, got 4095"),
    (9, "system_prompt = 3", 9, "sessions.system_prompt", "expected a string, got an integer"),
    (9, "memory_sessions = 0", 9, "sessions.memory_sessions",
     "must be between 1 and 100000, got 0"),
    (9, "memory_bytes = 4095", 9, "sessions.memory_bytes",
     "must be between 4096 and 1073741824, got 4095"),
    (9, "unnamed_keep = 0", 9, "sessions.unnamed_keep", "must be between 1 and 1000000, got 0"),
    (9, "unnamed_max_age = -1", 9, "sessions.unnamed_max_age",
     "must be between 0 and 315360000.0, got -1.0"),
    # providers: the field Provider itself rejects is the key named
    (12, 'protocol = "grpc"', 12, "providers.a.protocol",
     "protocol must be one of openai-chat, anthropic, openai-responses, ollama, not 'grpc'"),
    (13, 'base_url = "ftp://host/v1"', 13, "providers.a.base_url",
     "base_url must start with http:// or https://"),
    (15, "read_timeout = 0", 15, "providers.a.read_timeout", "read_timeout must be positive"),
    (15, "connect_timeout = -1", 15, "providers.a.connect_timeout",
     "connect_timeout must be positive"),
    (15, 'total_timeout = "300"', 15, "providers.a.total_timeout",
     "expected a number, got a string"),
    (15, "retries = 11", 15, "providers.a.retries", "must be between 0 and 10, got 11"),
    (15, "thinking_budget = 2048", 15, "providers.a.thinking_budget",
     "thinking_budget is an option of protocol \"anthropic\" only, not 'openai-chat'"),
    (15, "retries = -1", 15, "providers.a.retries", "must be between 0 and 10, got -1"),
    (15, "headers = []", 15, "providers.a.headers", "expected a table, got an array"),
    (14, 'model = ""', 14, "providers.a.model", "must not be empty"),
    (14, "", 11, "providers.a.model", "required key is missing"),
    (12, "", 11, "providers.a.protocol", "required key is missing"),
    (15, 'api_key_env = "K"\napi_key_file = "k"', 16, "providers.a.api_key_file",
     "set api_key_env or api_key_file, not both"),
    (21, "max_tokens = 0", 21, 'providers."b.c".max_tokens', "max_tokens must be positive"),
    (21, "max_tokens = 1.5", 21, 'providers."b.c".max_tokens',
     "expected an integer, got a float"),
    # an inline table's entry is found at the line of the table
    (22, "headers = { x-extra = 1 }", 22, 'providers."b.c".headers.x-extra',
     "expected a string, got an integer"),
    (22, 'headers = { x-extra = "1\\r\\nx-injected: 1" }', 22, 'providers."b.c".headers.x-extra',
     "a header value is printable ASCII, spaces inside only (no CR, LF or other control "
     "character)"),
    (22, 'headers = { x-extra = "caf\u00e9" }', 22, 'providers."b.c".headers.x-extra',
     "a header value is printable ASCII, spaces inside only (no CR, LF or other control "
     "character)"),
    (22, 'headers = { "x extra" = "1" }', 22, 'providers."b.c".headers."x extra"',
     "a header name is letters, digits and !#$%&'*+-.^_`|~"),
    (22, 'headers = { "x-extra:" = "1" }', 22, 'providers."b.c".headers."x-extra:"',
     "a header name is letters, digits and !#$%&'*+-.^_`|~"),
    (22, 'headers = { authorization = "Bearer short" }', 22,
     'providers."b.c".headers.authorization',
     "the header holds a key of 5 characters; at least 8 are needed to mask it in replies "
     "and logs"),
    (17, '[providers."b c"]', 17, 'providers."b c"',
     "a provider name is 1 to 64 letters, digits, '_', '.' or '-'"),
    (17, "[providers.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb]", 17,
     "providers.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
     "a provider name is 1 to 64 letters, digits, '_', '.' or '-'"),
    # default_provider
    (1, 'default_provider = "zzz"', 1, "default_provider",
     "no provider named 'zzz' (configured: a, b.c)"),
    (1, "default_provider = 1", 1, "default_provider", "expected a string, got an integer"),
    # syntax errors: tomllib's position becomes the line
    (6, "client_queue = ", 6, None, "Invalid value"),
    (6, "socket_mode = 0o644", 6, None, "Cannot overwrite a value"),
    (17, "[providers.a]", 17, None, "Cannot declare ('providers', 'a') twice"),
])
def test_bad_value_names_key_and_line(tmp_path, number, replacement, line, key, problem):
    path = write(tmp_path, with_line(number, replacement))
    with pytest.raises(ConfigError) as caught:
        load(path, {})
    error = caught.value
    assert (error.path, error.line, error.key, error.problem) == (path, line, key, problem)
    assert str(error) == (f"{path}:{line}: {key}: {problem}" if key
                          else f"{path}:{line}: {problem}")


# chown() reads (uid_t)-1, 4294967295, as "leave it": no id may be that or beyond.
@pytest.mark.parametrize("setting, key, kind, number", [
    ("allow_users = [-1]", "allow_users", "user", -1),
    ("allow_groups = [4294967295]", "allow_groups", "group", 4294967295),
    ('socket_group = "4294967296"', "socket_group", "group", 4294967296)])
def test_an_id_beyond_uid_t_is_refused(tmp_path, setting, key, kind, number):
    error = load_error(tmp_path, with_line(5, setting))
    assert (error.line, error.key, error.problem) == (
        5, f"daemon.{key}", f"{kind} ids are between 0 and 4294967294, got {number}")


@pytest.mark.parametrize("line, key, low, high", [
    (6, "daemon.max_line_bytes", 1024, 16777216), (6, "daemon.client_queue", 16, 65536),
    (6, "daemon.shutdown_grace", 0, 3600.0), (9, "sessions.max_turns", 2, 10000),
    (9, "sessions.memory_sessions", 1, 100000), (9, "sessions.memory_bytes", 4096, 1 << 30),
    (9, "sessions.unnamed_keep", 1, 1000000)])
def test_what_a_client_or_peer_makes_the_daemon_hold_has_an_upper_bound(tmp_path, line, key,
                                                                         low, high):
    name = key.split(".")[1]
    load_text(tmp_path, with_line(line, f"{name} = {high}"))
    error = load_error(tmp_path, with_line(line, f"{name} = {high * 2}"))
    assert (error.line, error.key, error.problem) == (
        line, key, f"must be between {low} and {high}, got {high * 2}")


@pytest.mark.parametrize("url, problem", [
    ("http:///v1", "has no host"),
    ("http://:8080/v1", "has no host"),
    ("http://host /v1", "must not hold spaces or control characters"),
    ("http://host/v1\n", "must not hold spaces or control characters"),
    ("http://host:65536/v1", "has a port that is not a number from 1 to 65535"),
    ("http://host:0/v1", "has a port that is not a number from 1 to 65535"),
    ("http://host:http/v1", "has a port that is not a number from 1 to 65535"),
    ("http://host/v1?key=1",
     "must not have a query or a fragment: the request path is appended to it"),
    ("http://user:pw@host/v1", "must not hold a user or password (user:password@); give the "
     "key with api_key_env or api_key_file"),
])
def test_a_base_url_that_would_fail_later_is_refused(tmp_path, url, problem):
    error = load_error(tmp_path, with_line(13, f"base_url = {json.dumps(url)}"))
    assert (error.line, error.key, error.problem) == (13, "providers.a.base_url",
                                                      f"base_url {problem}")


@pytest.mark.parametrize("number, replacement, key, what", [
    (6, "client_qeue = 256", "daemon.client_qeue", "key"),
    (15, f'api_key = "{SECRET}"', "providers.a.api_key", "key"),
    (7, "[deamon]", "deamon", "table"),
    (1, 'default_providr = "a"', "default_providr", "key"),
    (7, "[daemon.extra]", "daemon.extra", "table"),
])
def test_unknown_key_or_table(tmp_path, number, replacement, key, what):
    error = load_error(tmp_path, with_line(number, replacement))
    assert (error.line, error.key) == (number, key)
    assert error.problem.startswith(f"unknown {what} (known: ")
    assert SECRET not in str(error)


def test_syntax_error_at_end_of_document(tmp_path):
    error = load_error(tmp_path, LOCAL + 'headers = """\nunclosed\n')
    assert (error.line, error.key, error.problem) == (6, None, "Unterminated string")


def test_missing_default_provider_has_no_line(tmp_path):
    path = write(tmp_path, with_line(1, ""))
    with pytest.raises(ConfigError) as caught:
        load(path, {})
    assert str(caught.value) == (f"{path}: default_provider: required with more than one "
                                 "provider (configured: a, b.c)")


@pytest.mark.parametrize("text, problem", [
    ("", "at least one provider is required"),
    ("[providers]\n", "at least one provider is required"),
    ("providers = 1\n", "expected a table, got an integer"),
])
def test_no_providers(tmp_path, text, problem):
    error = load_error(tmp_path, text)
    assert (error.key, error.problem) == ("providers", problem)


def test_single_provider_is_the_default(tmp_path):
    assert load_text(tmp_path, LOCAL).default_provider == "local"


def test_single_provider_default_must_name_it(tmp_path):
    error = load_error(tmp_path, 'default_provider = "other"\n' + LOCAL)
    assert (error.line, error.problem) == (1, "no provider named 'other' (configured: local)")


def test_unreadable_config(tmp_path):
    missing = str(tmp_path / "absent.toml")
    with pytest.raises(ConfigError) as caught:
        load(missing, {})
    assert str(caught.value) == f"{missing}: cannot read: No such file or directory"
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"a = '\xff'\n")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load(str(binary), {})


# ---- where the line comes from ----

def test_line_skips_multiline_strings(tmp_path):
    error = load_error(tmp_path, '''\
[sessions]
system_prompt = """
You run a house.
[daemon]
max_turns = 1
"""
max_turns = 1
''' + LOCAL)
    assert (error.key, error.line) == ("sessions.max_turns", 7)


@pytest.mark.parametrize("text, key, line", [
    ("daemon = 3\n", "daemon", 1),
    # a dotted key is not followed: its table's header is the line
    ("[sessions]\nlimits.max_turns = 1\n", "sessions.limits", 1),
    # nor is an inline table: the line that opens it
    ("sessions = { max_turns = 1 }\n", "sessions.max_turns", 1),
    ("sessions.max_turns = 1\n", "sessions.max_turns", None),
    ("[providers.'x y']\n", 'providers."x y"', 1),
])
def test_line_of_other_forms(tmp_path, text, key, line):
    error = load_error(tmp_path, text + LOCAL)
    assert (error.key, error.line) == (key, line)


# ---- API keys ----

def test_key_from_environment(tmp_path):
    config = load_text(tmp_path, LOCAL + 'api_key_env = "HA_KEY"\n', {"HA_KEY": f" {SECRET}\n"})
    assert config.providers["local"].provider.api_key == SECRET


@pytest.mark.parametrize("credentials, in_credentials, expected", [
    (True, True, "from-credentials"),
    (True, False, "from-beside"),
    (False, True, "from-beside"),
])
def test_bare_key_file_prefers_credentials(tmp_path, monkeypatch, credentials, in_credentials,
                                           expected):
    path = write(tmp_path / "etc", LOCAL + 'api_key_file = "openai.key"\n')
    write(tmp_path / "etc", "from-beside\n", "openai.key")
    if in_credentials:
        write(tmp_path / "credentials", "from-credentials\n", "openai.key")
    environ = {"CREDENTIALS_DIRECTORY": str(tmp_path / "credentials")} if credentials else {}
    monkeypatch.chdir(tmp_path)  # the working directory plays no part
    assert load(path, environ).providers["local"].provider.api_key == expected


def test_key_file_path_is_relative_to_config(tmp_path, monkeypatch):
    path = write(tmp_path / "etc", LOCAL + 'api_key_file = "keys/openai.key"\n')
    write(tmp_path / "etc" / "keys", f"\n  {SECRET}  \n", "openai.key")
    # Not systemd's name for it (keys_openai.key), nor a path inside the
    # credentials directory: the file beside the config.
    write(tmp_path / "credentials" / "keys", "wrong", "openai.key")
    monkeypatch.chdir(tmp_path)
    config = load(path, {"CREDENTIALS_DIRECTORY": str(tmp_path / "credentials")})
    assert config.providers["local"].provider.api_key == SECRET


def test_a_path_is_found_under_systemds_name_for_a_directory_credential(tmp_path):
    # LoadCredential=credentials:/etc/homeagent/credentials gives each file
    # the name credentials_FILE; by hand, the same line reads the file itself.
    path = write(tmp_path / "etc", LOCAL + 'api_key_file = "credentials/openai.key"\n')
    write(tmp_path / "etc" / "credentials", "from-by-hand\n", "openai.key")
    write(tmp_path / "run", "from-systemd\n", "credentials_openai.key")
    under_systemd = load(path, {"CREDENTIALS_DIRECTORY": str(tmp_path / "run")})
    assert under_systemd.providers["local"].provider.api_key == "from-systemd"
    assert load(path, {}).providers["local"].provider.api_key == "from-by-hand"


@pytest.mark.parametrize("lines, environ, files, problem", [
    ('api_key_env = "HA_KEY"', {}, {}, "environment variable HA_KEY is not set"),
    ('api_key_env = "HA_KEY"', {"HA_KEY": " \n"}, {}, "environment variable HA_KEY is empty"),
    ('api_key_file = "absent.key"', {}, {}, "key file not found: {dir}/absent.key"),
    ('api_key_file = "absent.key"', {"CREDENTIALS_DIRECTORY": "{dir}/creds"}, {},
     "key file not found: {dir}/creds/absent.key nor {dir}/absent.key"),
    ('api_key_file = "empty.key"', {}, {"empty.key": " \n"}, "key file {dir}/empty.key is empty"),
    # a key a header cannot carry, or the masker cannot hide
    ('api_key_env = "HA_KEY"', {"HA_KEY": SECRET[:9] + "\n" + SECRET[9:]}, {},
     "environment variable HA_KEY holds whitespace, a control character or a non-ASCII "
     "character in the key; a key is one token of printable ASCII"),
    ('api_key_file = "spaced.key"', {}, {"spaced.key": f"{SECRET[:9]} {SECRET[9:]}\n"},
     "key file {dir}/spaced.key holds whitespace, a control character or a non-ASCII "
     "character in the key; a key is one token of printable ASCII"),
    ('api_key_file = "nul.key"', {}, {"nul.key": f"{SECRET}\0"},
     "key file {dir}/nul.key holds whitespace, a control character or a non-ASCII "
     "character in the key; a key is one token of printable ASCII"),
    ('api_key_env = "HA_KEY"', {"HA_KEY": SECRET[:7]}, {},
     "environment variable HA_KEY holds a key of 7 characters; at least 8 are needed to "
     "mask it in replies and logs"),
    ('api_key_file = "binary.key"', {}, {"binary.key": b"\xff" + SECRET.encode()},
     "cannot read {dir}/binary.key: not UTF-8 text"),
    ('api_key_file = "dir.key"', {}, {"dir.key/x": SECRET}, "cannot read {dir}/dir.key: "
     "Is a directory"),
    # a key that was read must not leak through a later error either
    ('api_key_file = "good.key"\nretries = 99', {}, {"good.key": SECRET},
     "must be between 0 and 10, got 99"),
    ('api_key_env = "HA_KEY"\nread_timeout = 0', {"HA_KEY": SECRET}, {},
     "read_timeout must be positive"),
])
def test_key_errors_never_show_the_key(tmp_path, lines, environ, files, problem):
    directory = str(tmp_path)
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    environ = {name: value.format(dir=directory) for name, value in environ.items()}
    error = load_error(tmp_path, LOCAL + lines + "\n", environ)
    assert error.problem == problem.format(dir=directory)
    assert SECRET not in str(error) and SECRET not in repr(error)


def test_config_repr_hides_the_key(tmp_path):
    write(tmp_path, SECRET, "openai.key")
    config = load_text(tmp_path, LOCAL + f"""\
api_key_file = "openai.key"
headers = {{ authorization = "Bearer {SECRET}", x-trace = "on" }}
""")
    assert config.providers["local"].provider.api_key == SECRET
    assert SECRET not in repr(config) and SECRET not in str(config)
    assert "x-trace" in repr(config)


# ---- users, groups, state directory ----

def test_current_user_and_group_by_name_and_id(tmp_path):
    uid, gid = os.getuid(), os.getgid()
    user, group = pwd.getpwuid(uid).pw_name, grp.getgrgid(gid).gr_name
    daemon = load_text(tmp_path, f"""\
[daemon]
socket_group = "{group}"
allow_users = ["{user}", {uid}]
allow_groups = ["{group}", {gid}]
""" + LOCAL).daemon
    assert (daemon.socket_group, daemon.socket_gid) == (group, gid)
    assert (daemon.allow_users, daemon.allow_groups) == ((uid, uid), (gid, gid))


@pytest.mark.parametrize("configured, environ, expected", [
    ("", {}, DEFAULT_STATE_DIRECTORY),
    ("", {"STATE_DIRECTORY": "/var/lib/ha"}, "/var/lib/ha"),
    ("", {"STATE_DIRECTORY": "/var/lib/ha:/var/lib/other"}, "/var/lib/ha"),
    ("/srv/ha", {"STATE_DIRECTORY": "/var/lib/ha"}, "/srv/ha"),
])
def test_state_directory(tmp_path, configured, environ, expected):
    config = load_text(tmp_path, f'[daemon]\nstate_directory = "{configured}"\n' + LOCAL,
                       environ)
    assert config.daemon.state_directory == expected


# ---- the installed config ----

@pytest.mark.parametrize("arguments", [
    {},
    {"base_url": "http://127.0.0.1:8080/v1", "model": 'a "quoted" \\ model'},
])
def test_default_config_text_round_trips(arguments):
    config = parse(default_config_text(**arguments), "/etc/homeagent/config.toml", {})
    provider = config.providers[config.default_provider].provider
    assert (provider.protocol, provider.api_key) == ("openai-chat", "")
    assert (provider.base_url, provider.model) == (
        arguments.get("base_url", "http://127.0.0.1:11434/v1"),
        arguments.get("model", "llama3.2"))


def test_default_config_comments_show_the_defaults():
    """Uncommenting every commented key changes nothing: the comments tell the truth."""
    text = default_config_text()
    commented = set(re.findall(r"^# ([a-z_]+) = ", text, flags=re.M))
    documented = {f.name for f in fields(DaemonConfig) + fields(SessionConfig)}
    assert documented - commented == {"socket_gid"}  # resolved, not a key
    uncommented = re.sub(r"^# (?=[a-z_]+ = )", "", text, flags=re.M)
    uncommented = uncommented.replace('api_key_env = "OPENAI_API_KEY"', "")
    assert parse(uncommented, "config.toml", {}) == parse(text, "config.toml", {})


@pytest.mark.parametrize("mode, warned", [(0o600, False), (0o400, False), (0o640, True),
                                          (0o604, True)])
def test_a_key_file_others_can_read_is_warned_about(tmp_path, mode, warned):
    write(tmp_path, SECRET, "openai.key")
    os.chmod(tmp_path / "openai.key", mode)
    config = load_text(tmp_path, LOCAL + 'api_key_file = "openai.key"\n')
    path = tmp_path / "config.toml"
    expected = (f"{path}:5: providers.local.api_key_file: key file {tmp_path}/openai.key is "
                f"readable by group or others (mode 0o{mode:03o}); chmod 600 it")
    assert config.warnings == ((expected,) if warned else ())


def _three(a: str = "", b: str = "", c: str = "") -> str:
    """Three providers a, b and c; each one's extra lines follow its model (from line 6, 11, 16)."""
    blocks = []
    for name, extra in (("a", a), ("b", b), ("c", c)):
        blocks.append(f'[providers.{name}]\nprotocol = "openai-chat"\n'
                      f'base_url = "http://127.0.0.1:8080/v1"\nmodel = "m"\n{extra}\n')
    return 'default_provider = "a"\n' + "".join(blocks)


def test_fallbacks_and_cooldowns(tmp_path):
    config = load_text(tmp_path, _three(a='fallback = ["b", "c"]',
                                        b="cooldown = 5\nmax_cooldown = 60"))
    a, b, c = (config.providers[n] for n in "abc")
    assert (a.fallback, a.policy.cooldown, a.policy.max_cooldown) == (("b", "c"), 30.0, 1800.0)
    assert (b.fallback, b.policy.cooldown, b.policy.max_cooldown) == ((), 5.0, 60.0)
    assert load_text(tmp_path, _three(a="cooldown = 3600")).providers["a"].policy.max_cooldown \
        == 3600.0  # the maximum follows a cooldown longer than its default
    assert (a.retry_without_tools, load_text(tmp_path, _three(
        b="retry_without_tools = true")).providers["b"].retry_without_tools) == (False, True)
    error = load_error(tmp_path, _three(c="retry_without_tools = 1"))
    assert (error.line, error.key, error.problem) == (
        16, "providers.c.retry_without_tools", "expected a boolean, got an integer")


@pytest.mark.parametrize("a, b, line, key, problem", [
    ('fallback = ["z"]', "", 6, "providers.a.fallback",
     "no provider named 'z' (configured: a, b, c)"),
    ('fallback = ["a"]', "", 6, "providers.a.fallback", "'a' names itself; a fallback is "
     "another provider"),
    ('fallback = ["b", "b"]', "", 6, "providers.a.fallback", "names a provider more than once"),
    ('fallback = ["b"]', 'fallback = ["c", "a"]', 6, "providers.a.fallback",
     "the fallbacks go round in a cycle: a -> b -> a"),
    ("", 'fallback = ["c"]\n', 11, "providers.b.fallback", None),
    ('fallback = "b"', "", 6, "providers.a.fallback", "expected an array, got a string"),
    ("fallback = [1]", "", 6, "providers.a.fallback", "expected an array of provider names"),
    ("cooldown = 0", "", 6, "providers.a.cooldown", "must be between 0.001 and 86400.0, got 0.0"),
    ("cooldown = 60\nmax_cooldown = 30", "", 7, "providers.a.max_cooldown",
     "must be at least cooldown (60), got 30"),
])
def test_bad_fallbacks_name_key_and_line(tmp_path, a, b, line, key, problem):
    text = _three(a=a, b=b, c='fallback = ["b"]' if problem is None else "")
    error = load_error(tmp_path, text)
    assert (error.line, error.key) == (line, key)
    assert error.problem == (problem or "the fallbacks go round in a cycle: b -> c -> b")


SPEAKER = '''
[devices.voice]
type = "wyoming-tts"
address = "tcp://127.0.0.1:10200"
sink = "wyoming"
sink_address = "tcp://127.0.0.1:10601"
code_placeholder = "Code."
emoji = "name"
'''


def test_speech_and_sink_settings_of_a_speech_device(tmp_path):
    device = load_text(tmp_path, DOCUMENT + SPEAKER).devices["voice"].build()
    assert (device.speech.code_placeholder, device.speech.emoji_names) == ("Code.", True)
    assert device.sink_address == ("tcp", "127.0.0.1", 10601)
    error = load_error(tmp_path, DOCUMENT + SPEAKER.replace('"name"', '"say"'))
    assert str(error).endswith('devices.voice.emoji: "drop" or "name"')
