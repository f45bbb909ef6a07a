"""Model text as a program's options (issue 11, item 6), for real:
`homeagent serve` and the mock model as processes, a command device whose
program writes each of its arguments to a log, as espeak-ng would read them.
The mock's x-mock-answer header makes the answer `-f/etc/passwd.` (which
made espeak-ng read that file aloud), its x-mock-tool-call header a tool
call with the argument `--version`.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager

from conftest import timeout
from daemon_harness import Daemon, command_device
from helpers import of_type

SAFE = "Hello there, nothing to read."
ANSWER = f"-f/etc/passwd. {SAFE}"
SCHEMA = {"type": "object", "properties": {"word": {"type": "string"}},
          "required": ["word"], "additionalProperties": False}


@contextmanager
def printing_daemon(directory, mock_url: str, argv: list[str]):
    """A daemon whose speech device runs the argv printer per sentence and as
    its tool `say`: yields (daemon, the log of arguments), stops it at the end."""
    log = directory / "argv.log"
    program = directory / "print-argv"
    program.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" >> '{log}'\necho said\n")
    program.chmod(0o755)
    call = {"name": "say", "arguments": '{"word": "--version"}'}
    tool = {"name": "say", "description": "Say a word", "parameters": SCHEMA,
            "timeout": timeout(10)}
    device = command_device("speech", {"say": [str(program), "{word}"]}, [tool],
                            first_sentence_chars=1, argv=[str(program), *argv])
    providers = {"answer": {"headers": {"x-mock-answer": json.dumps(ANSWER)}},
                 "tool": {"headers": {"x-mock-tool-call": json.dumps(call)}}}
    daemon = Daemon(directory, mock_url, providers=providers, extra=device).start()
    try:
        yield daemon, log
    finally:
        assert daemon.stop() == 0, daemon.log()


def ask(daemon: Daemon, provider: str) -> list[dict]:
    with daemon.client() as client:
        return list(client.request("ask", prompt="read it", provider=provider))


def speech_status(daemon: Daemon) -> dict:
    with daemon.client() as client:
        [device] = client.call("status")["devices"]
    return device


def wait_texts(daemon: Daemon, texts: int) -> dict:
    """Poll (bounded) until the device ran or refused that many texts; its status."""
    deadline = time.monotonic() + timeout(10)
    while True:
        status = speech_status(daemon)
        if status["runs"] + status["refused"] >= texts:
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


def test_a_sentence_that_is_an_option_is_skipped(tmp_path, mock):
    with printing_daemon(tmp_path, mock.url, ["-v", "en", "{text}"]) as (daemon, log):
        replies = ask(daemon, "answer")
        assert replies[-1]["type"] == "done" and replies[-1]["text"] == ANSWER
        status = wait_texts(daemon, 2)
        assert log.read_text().splitlines() == ["-v", "en", SAFE]
        assert (status["runs"], status["refused"]) == (1, 1)
        assert "a text was skipped, nothing was run: the value of {text}, " \
               "'-f/etc/passwd.', starts with '-'" in daemon.log()


def test_after_the_templates_double_dash_the_sentence_is_an_argument(tmp_path, mock):
    with printing_daemon(tmp_path, mock.url, ["-v", "en", "--", "{text}"]) as (daemon, log):
        ask(daemon, "answer")
        assert wait_texts(daemon, 2)["refused"] == 0
        assert log.read_text().splitlines() == ["-v", "en", "--", "-f/etc/passwd.",
                                                "-v", "en", "--", SAFE]


def test_a_tool_argument_that_is_an_option_is_an_error_result(tmp_path, mock):
    with printing_daemon(tmp_path, mock.url, ["-v", "en", "--", "{text}"]) as (daemon, log):
        replies = ask(daemon, "tool")
        [result] = of_type(replies, "tool_result")
        assert result["is_error"] is True
        assert result["content"].startswith(
            "nothing was run: the value of {word}, '--version', starts with '-'")
        assert replies[-1]["type"] == "done"
        # The tool's program would have logged the word alone on a line. The
        # speech device logs its runs too (-v en -- sentence), and the answer
        # that follows the refusal quotes '--version' inside a sentence, spoken
        # or not yet when this reads the log: only a whole line counts.
        assert "--version" not in (log.read_text().splitlines() if log.exists() else [])
