"""[mcp.NAME] tables: read into McpConfig, every mistake a ConfigError
naming the key, the token masked and never in a message."""

import sys

import pytest

from agent.service.config import parse
from agent.settings.reader import ConfigError

BASE = '[providers.p]\nprotocol = "openai-chat"\nbase_url = "http://127.0.0.1:1/v1"\n' \
       'model = "m"\n'
TOKEN = "mcp-token-0123456789"


def config(table: str, environ=None):
    return parse(BASE + table, "/etc/homeagent/config.toml", environ or {})


def test_a_stdio_and_an_http_server_are_read():
    loaded = config(f'[mcp.files]\nargv = ["{sys.executable}", "-m", "server"]\n'
                    'env = { ROOT = "/srv" }\nallow = ["read_*"]\nstart = "start"\n'
                    '[mcp.home]\nurl = "http://ha.local:8123/api/mcp"\ntoken_env = "HA"\n'
                    'timeout = 5\n', {"HA": TOKEN})
    files, home = loaded.mcp["files"], loaded.mcp["home"]
    assert files.transport == "stdio" and files.argv[1:] == ("-m", "server")
    assert dict(files.env) == {"ROOT": "/srv"} and files.allow == ("read_*",)
    assert home.transport == "http" and home.token == TOKEN and home.timeout == 5
    assert home.start == "lazy" and TOKEN in loaded.secrets()


@pytest.mark.parametrize("table, key, problem", [
    ('[mcp.x]\nmax_concurrent = 2\n', "mcp.x", "set argv"),
    ('[mcp.x]\nargv = ["true"]\nurl = "http://h/mcp"\n', "mcp.x", "one of them"),
    ('[mcp.x]\nargv = ["true"]\ntoken_env = "T"\n', "mcp.x.token_env", "takes no token_env"),
    ('[mcp.x]\nargv = ["no-such-program-here"]\n', "mcp.x.argv", "not found"),
    ('[mcp.x]\nargv = ["true"]\nstart = "now"\n', "mcp.x.start", "one of lazy, start"),
    ('[mcp.x]\nargv = ["true"]\ncwd = "relative"\n', "mcp.x.cwd", "absolute"),
    ('[mcp.x]\nargv = ["true"]\nenv = { "A B" = "1" }\n', 'mcp.x.env."A B"', "name"),
    ('[mcp.x]\nurl = "ftp://h/mcp"\n', "mcp.x.url", "http://"),
    ('[mcp.x]\nurl = "http://h/mcp"\ntoken_env = "MISSING"\n', "mcp.x.token_env", "not set"),
    ('[mcp."a.b"]\nargv = ["true"]\n', 'mcp."a.b"', "1 to 32"),
    ('[mcp.x]\nargv = ["true"]\ndeny = [1]\n', "mcp.x.deny", "globs"),
    ('[mcp.x]\nargv = ["true"]\ntimeout = 0\n', "mcp.x.timeout", "between"),
    ('[mcp.x]\nargv = ["true"]\ncommand = "sh -c x"\n', "mcp.x.command", "unknown key"),
])
def test_a_mistake_is_named(table, key, problem):
    with pytest.raises(ConfigError) as error:
        config(table)
    assert error.value.key == key and problem in error.value.problem, error.value


def test_a_token_too_short_is_refused_without_showing_it():
    with pytest.raises(ConfigError) as error:
        config('[mcp.x]\nurl = "http://h/mcp"\ntoken_env = "T"\n', {"T": "abc"})
    assert error.value.key == "mcp.x.token_env" and "abc" not in str(error.value)
