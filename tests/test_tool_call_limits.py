"""What a model's tool calls can make the daemon run (issue 11, items 2c and
4), for real: `homeagent serve` and the mock model as processes, the mock
answering with hundreds of calls in one response (its x-mock-tool-call
header with "count"), and a command device whose tool program records each
run and whether another run of it was still going.
"""

from __future__ import annotations

import json
import shlex

from agent.tools.timers.provider import TOOL_NAMES as TIMER_TOOLS  # on by default
from conftest import timeout
from daemon_harness import Daemon, command_device
from helpers import of_type

SCHEMA = {"type": "object", "properties": {"channel": {"type": "integer"}},
          "required": ["channel"], "additionalProperties": False}


def counting_daemon(directory, mock_url: str, calls: int, sessions: dict | None = None):
    """A daemon whose one provider answers with `calls` calls of set_relay,
    and whose relay tool logs "run" for each run and "overlap" for a run that
    started while another was going (mkdir is atomic: a lock the program can see)."""
    log, busy = directory / "runs.log", directory / "busy"
    program = directory / "relay.sh"
    program.write_text("#!/bin/sh\n"
                       f"mkdir {shlex.quote(str(busy))} 2>/dev/null "
                       f"|| echo overlap >> {shlex.quote(str(log))}\n"
                       f"echo run >> {shlex.quote(str(log))}\n"
                       "sleep 0.05\n"
                       f"rmdir {shlex.quote(str(busy))} 2>/dev/null\n"
                       'echo "relay $1"\n')
    program.chmod(0o755)
    call = {"name": "set_relay", "arguments": '{"channel": 2}', "count": calls}
    tool = {"name": "set_relay", "description": "Switch a relay", "parameters": SCHEMA,
            "timeout": timeout(10)}
    device = command_device("relay", {"set_relay": [str(program), "{channel}"]}, [tool],
                            argv=["true"], events=[])
    daemon = Daemon(directory, mock_url, sessions=sessions,
                    providers={"many": {"headers": {"x-mock-tool-call": json.dumps(call)}}},
                    extra=device)
    return daemon.start(), log


def ask_many(daemon: Daemon, session: str) -> list[dict]:
    with daemon.client(wait=timeout(60)) as client:
        return list(client.request("ask", prompt="switch them all", provider="many",
                                   session=session))


def test_300_calls_in_one_answer_run_at_most_max_tool_calls(tmp_path, mock):
    daemon, log = counting_daemon(tmp_path, mock.url, 300)
    try:
        replies = ask_many(daemon, "three-hundred")
        calls, results = of_type(replies, "tool_call"), of_type(replies, "tool_result")
        assert len(calls) == len(results) == 300
        assert [r["call_id"] for r in results] == [c["call_id"] for c in calls]
        ran = [r for r in results if not r["is_error"]]
        assert len(ran) == 8 and all(r["content"] == "relay 2" for r in ran)
        refused = [r for r in results if r["is_error"]]
        assert len(refused) == 292 and all(
            r["content"] == "not run: one answer may call at most 8 tools; ask for the rest "
                            "in the next answer" for r in refused)
        assert replies[-1]["type"] == "done" and replies[-1]["steps"] == 2
        assert log.read_text().splitlines() == ["run"] * 8
        with daemon.client() as client:  # still serving
            assert client.call("status")["tools"] == ["set_relay", *TIMER_TOOLS]
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_200_calls_to_a_command_device_run_one_at_a_time(tmp_path, mock):
    daemon, log = counting_daemon(tmp_path, mock.url, 200, sessions={"max_tool_calls": 64})
    try:
        replies = ask_many(daemon, "two-hundred")
        results = of_type(replies, "tool_result")
        assert len(results) == 200
        assert sum(not r["is_error"] for r in results) == 64
        assert replies[-1]["type"] == "done"
        # 64 runs, and not one started while another was going.
        assert log.read_text().splitlines() == ["run"] * 64
    finally:
        assert daemon.stop() == 0, daemon.log()
