"""How the CLI shows replies (agent/cli_render.py): an ask's replies, as the
daemon sends them, through AskPrinter in every reasoning mode on a pipe and
on a terminal and as JSON, with the exact stdout, stderr and exit code; and
format_status, format_sessions and format_history on sample replies."""

from __future__ import annotations

import io
import json

import pytest

from agent.cli_render import DIM, RESET, AskPrinter, format_history, format_sessions, format_status


class Terminal(io.StringIO):
    """A StringIO that says it is a terminal (dimming is for terminals only)."""

    def isatty(self) -> bool:
        return True


STARTED = {"id": 1, "type": "started", "session": "s-kitchen", "provider": "local",
           "model": "llama3.2"}
THINK_1 = {"id": 1, "type": "reasoning", "text": "The user asks "}
THINK_2 = {"id": 1, "type": "reasoning", "text": "about Zürich."}
THINK_3 = {"id": 1, "type": "reasoning", "text": "It is sunny."}
TOOL = {"id": 1, "type": "tool_call", "call_id": "call_1", "name": "weather",
        "arguments": {"city": "Zürich", "days": 1}}
DELTA_1 = {"id": 1, "type": "delta", "text": "It is sunny "}
DELTA_2 = {"id": 1, "type": "delta", "text": "in Zürich."}
WARNING = {"id": 1, "type": "warning", "code": "bad_json", "detail": "a chunk was not JSON"}
DONE = {"id": 1, "type": "done", "session": "s-kitchen", "finish_reason": "stop",
        "raw_finish_reason": "stop", "usage": {"input_tokens": 12, "output_tokens": 6},
        "text": "It is sunny in Zürich.", "attempts": 1}
HTTP_ERROR = {"id": 1, "type": "error", "code": "upstream_http",
              "message": "local: HTTP 502 Bad Gateway", "status": 502}
SHUTDOWN = {"type": "shutdown", "reason": "the daemon is stopping (SIGTERM)"}

# reasoning, a tool call, more reasoning, the answer with a warning in it
ANSWERED = [STARTED, THINK_1, THINK_2, TOOL, THINK_3, DELTA_1, WARNING, DELTA_2, DONE]
ANSWER = "It is sunny in Zürich.\n"
TOOL_LINE = '[tool call weather({"city": "Zürich", "days": 1})]\n'
WARNING_LINE = "[warning bad_json: a chunk was not JSON]\n"


def run(replies, reasoning="dim", as_json=False, tty=False):
    out, err = (Terminal(), Terminal()) if tty else (io.StringIO(), io.StringIO())
    printer = AskPrinter(out, err, reasoning, as_json)
    assert printer.exit_code == 1  # until a done
    for reply in replies:
        printer.show(reply)
    return out.getvalue(), err.getvalue(), printer.exit_code


PLAIN_REASONING = ("[reasoning] The user asks about Zürich.\n" + TOOL_LINE
                   + "[reasoning] It is sunny.\n" + WARNING_LINE)
DIM_REASONING = (f"{DIM}The user asks about Zürich.{RESET}\n" + TOOL_LINE
                 + f"{DIM}It is sunny.{RESET}\n" + WARNING_LINE)
NO_REASONING = TOOL_LINE + WARNING_LINE


@pytest.mark.parametrize(("reasoning", "tty", "err"), [
    ("dim", False, PLAIN_REASONING),  # a pipe gets no escape codes
    ("dim", True, DIM_REASONING),
    ("show", False, PLAIN_REASONING),
    ("show", True, PLAIN_REASONING),
    ("hide", False, NO_REASONING),
    ("hide", True, NO_REASONING),
])
def test_an_answered_ask(reasoning, tty, err):
    # On one terminal the warning's line first ends the answer's line; into a
    # pipe stdout stays exactly the answer.
    answer = "It is sunny \nin Zürich.\n" if tty else ANSWER
    assert run(ANSWERED, reasoning, tty=tty) == (answer, err, 0)


def test_one_stream_gets_side_lines_on_their_own_lines():
    stream = io.StringIO()
    printer = AskPrinter(stream, stream, "show")
    for reply in [STARTED, DELTA_1, TOOL, {**DELTA_2, "text": "Done."}, DONE]:
        printer.show(reply)
    assert stream.getvalue() == "It is sunny \n" + TOOL_LINE + "Done.\n"


def test_dim_escapes_only_when_stderr_is_a_terminal():
    # stdout a pipe, stderr a terminal: reasoning goes to stderr, so it is dimmed
    out, err = io.StringIO(), Terminal()
    printer = AskPrinter(out, err)
    for reply in [THINK_1, DELTA_1, DONE]:
        printer.show(reply)
    assert (out.getvalue(), err.getvalue()) == ("It is sunny \n", f"{DIM}The user asks {RESET}\n")
    # stdout a terminal, stderr a pipe: no escape codes
    out, err = Terminal(), io.StringIO()
    printer = AskPrinter(out, err)
    for reply in [THINK_1, DELTA_1, DONE]:
        printer.show(reply)
    assert err.getvalue() == "[reasoning] The user asks \n"


CUT_OFF = [STARTED, THINK_1, DELTA_1, HTTP_ERROR]


@pytest.mark.parametrize(("reasoning", "tty", "err"), [
    ("dim", False, "[reasoning] The user asks \n"),
    ("dim", True, f"{DIM}The user asks {RESET}\n"),
    ("show", True, "[reasoning] The user asks \n"),
    ("hide", True, ""),
])
def test_an_error_after_part_of_the_answer(reasoning, tty, err):
    assert run(CUT_OFF, reasoning, tty=tty) == (
        "It is sunny ", err + "\nhomeagent: upstream_http: local: HTTP 502 Bad Gateway\n", 1)


@pytest.mark.parametrize(("reasoning", "tty", "err"), [
    ("dim", True, f"{DIM}The user asks {RESET}\n"),
    ("show", False, "[reasoning] The user asks \n"),
    ("hide", False, ""),
])
def test_an_error_while_reasoning_ends_the_reasoning_first(reasoning, tty, err):
    cancelled = {"id": 1, "type": "error", "code": "cancelled",
                 "message": "cancelled by request 2"}
    assert run([STARTED, THINK_1, cancelled], reasoning, tty=tty) == (
        "", err + "\nhomeagent: cancelled: cancelled by request 2\n", 1)


def test_a_shutdown_names_its_reason():
    assert run([STARTED, DELTA_1, SHUTDOWN]) == (
        "It is sunny ", "\nhomeagent: shutdown: the daemon is stopping (SIGTERM)\n", 1)


def test_an_error_before_the_start():
    bad = {"id": 1, "type": "error", "code": "unknown_provider",
           "message": "no provider 'cloud'; known: local"}
    assert run([bad]) == ("", "\nhomeagent: unknown_provider: no provider 'cloud'; known: local\n",
                          1)


def test_no_final_reply_leaves_the_exit_code_at_1():
    out, err, code = run([STARTED, DELTA_1, DELTA_2])
    assert (out, err, code) == ("It is sunny in Zürich.", "", 1)


def test_a_done_without_text_still_ends_the_line():
    assert run([STARTED, DONE]) == ("\n", "", 0)


def test_a_refusal_is_part_of_the_answer():
    refusal = {"id": 1, "type": "refusal", "text": "I can't help with that."}
    assert run([STARTED, THINK_1, refusal, DONE], "show") == (
        "I can't help with that.\n", "[reasoning] The user asks \n", 0)


def test_tool_calls_and_results():
    raw_arguments = {"id": 1, "type": "tool_call", "call_id": "c2", "name": "lights",
                     "arguments": '{"room": "kitch', "error": "invalid_json"}
    result = {"id": 1, "type": "tool_result", "name": "weather", "content": "12 °C, sunny"}
    out, err, code = run([STARTED, TOOL, raw_arguments, result, DONE])
    assert (out, code) == ("\n", 0)
    # Arguments that did not parse are shown as the model sent them.
    assert err == (TOOL_LINE + '[tool call lights({"room": "kitch)]\n'
                   + "[tool result weather: 12 °C, sunny]\n")


@pytest.mark.parametrize("reasoning", ["dim", "show", "hide"])
@pytest.mark.parametrize("tty", [False, True])
def test_json_prints_every_reply_as_a_line(reasoning, tty):
    out, err, code = run(ANSWERED, reasoning, as_json=True, tty=tty)
    shown = [r for r in ANSWERED if reasoning != "hide" or r["type"] != "reasoning"]
    assert err == "" and code == 0
    assert out == "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in shown)
    assert "Zürich" in out  # not \u escaped
    assert [json.loads(line) for line in out.splitlines()] == shown
    assert len(shown) < len(ANSWERED) if reasoning == "hide" else shown == ANSWERED


@pytest.mark.parametrize("final", [HTTP_ERROR, SHUTDOWN])
def test_json_exit_code_after_an_error(final):
    out, err, code = run([STARTED, DELTA_1, final], as_json=True)
    assert (err, code) == ("", 1)
    assert [json.loads(line) for line in out.splitlines()] == [STARTED, DELTA_1, final]


# ---------------------------------------------------------------------------
# status, sessions, history
# ---------------------------------------------------------------------------

STATUS = {
    "id": 1, "type": "status", "server": "homeagent 0.1.0", "protocol": 1, "pid": 4242,
    "uptime": 3600.6, "config": "config.toml", "socket": "agent.sock",
    "default_provider": "local",
    "providers": [
        {"name": "local", "protocol": "openai-chat", "model": "llama3.2",
         "base_url": "http://127.0.0.1:11434/v1", "default": True, "key": False},
        {"name": "cloud", "protocol": "anthropic", "model": "claude-x",
         "base_url": "https://api.example.com", "default": False, "key": True},
    ],
    "devices": [],
    "clients": 2,
    "active": [{"client": 3, "id": 7, "session": "s-1", "provider": "local", "uid": 1000,
                "seconds": 1.5}],
    "counters": {"connections": 5, "requests": 9, "asks": 3, "answered": 2},
    "draining": False,
}


def test_format_status():
    assert format_status(STATUS) == "\n".join([
        "homeagent 0.1.0 (protocol 1), pid 4242, up 3601 s",
        "socket:  agent.sock",
        "config:  config.toml",
        "provider local (default): openai-chat llama3.2 at http://127.0.0.1:11434/v1",
        "provider cloud: anthropic claude-x at https://api.example.com",
        "clients: 2, asks in flight: 1",
        "counters: connections 5, requests 9, asks 3, answered 2",
    ])


def test_format_status_draining_with_devices():
    reply = {**STATUS, "draining": True, "uptime": 0.2, "providers": [], "active": [],
             "devices": [{"name": "zigbee", "state": "ok"}], "counters": {"asks": 0}}
    assert format_status(reply) == "\n".join([
        "homeagent 0.1.0 (protocol 1), pid 4242, up 0 s, draining",
        "socket:  agent.sock",
        "config:  config.toml",
        "device zigbee: ok",
        "clients: 2, asks in flight: 0",
        "counters: asks 0",
    ])


def test_format_sessions():
    reply = {"id": 1, "type": "sessions",
             "sessions": [{"id": "s-kitchen", "turns": 4}, {"id": "s-1f2e", "turns": 1}]}
    assert format_sessions(reply) == "s-kitchen: 4 turns\ns-1f2e: 1 turn"


@pytest.mark.parametrize("reply", [{"id": 1, "type": "sessions", "sessions": []},
                                   {"id": 1, "type": "sessions"}])
def test_format_no_sessions(reply):
    assert format_sessions(reply) == "no sessions"


def test_format_history():
    reply = {"id": 1, "type": "history", "session": "s-kitchen", "turns": [
        {"role": "user", "text": "Lights on in the kitchen?"},
        {"role": "assistant", "text": "", "reasoning": "a tool does it",
         "tool_calls": [{"id": "c1", "name": "lights", "arguments": '{"room": "kitchen"}'},
                        {"id": "c2", "name": "status", "arguments": "{}"}],
         "finish_reason": "tool_calls"},
        {"role": "tool", "call_id": "c1", "name": "lights", "content": "on", "is_error": False},
        {"role": "tool", "call_id": "c2", "name": "status", "content": "2 lamps",
         "is_error": False},
        {"role": "assistant", "text": "Done: the kitchen lights are on.",
         "finish_reason": "stop"},
        {"role": "user", "text": "Danke!"},
        {"role": "assistant", "text": "Gern geschehen.", "finish_reason": "stop"},
    ]}
    assert format_history(reply) == "\n".join([
        "you:   Lights on in the kitchen?",
        'tool:  lights({"room": "kitchen"})',
        "tool:  status({})",
        "  ->   lights: on",
        "  ->   status: 2 lamps",
        "agent: Done: the kitchen lights are on.",
        "you:   Danke!",
        "agent: Gern geschehen.",
    ])


def test_format_history_of_an_assistant_turn_with_text_and_a_tool_call():
    reply = {"session": "s", "turns": [
        {"role": "assistant", "text": "Let me look.",
         "tool_calls": [{"id": "c", "name": "weather", "arguments": "{}"}]}]}
    assert format_history(reply) == "tool:  weather({})\nagent: Let me look."


@pytest.mark.parametrize("reply", [{"id": 1, "type": "history", "session": "s-new", "turns": []},
                                   {"id": 1, "type": "history", "session": "s-new"}])
def test_format_empty_history(reply):
    assert format_history(reply) == "session s-new: no history"


def test_a_warning_without_detail_shows_its_code_only():
    _, err, _ = run([STARTED, {"id": 1, "type": "warning", "code": "after_end", "detail": None},
                     DONE])
    assert err == "[warning after_end]\n"


def test_close_undims_the_terminal_when_the_replies_stop_inside_reasoning():
    out, err = Terminal(), Terminal()
    printer = AskPrinter(out, err, "dim")
    printer.show(STARTED)
    printer.show(THINK_1)
    printer.close()
    assert err.getvalue() == f"{DIM}The user asks {RESET}\n"
    assert printer.exit_code == 1


def test_format_history_marks_a_failed_tool_result():
    reply = {"id": 1, "type": "history", "session": "s", "turns": [
        {"role": "tool", "call_id": "c1", "name": "relay", "content": "timeout", "is_error": True}]}
    assert format_history(reply) == "  ->   relay (error): timeout"


def test_format_status_without_counters_has_no_counters_line():
    reply = {**STATUS, "counters": {}}
    assert not any(line.startswith("counters") for line in format_status(reply).splitlines())


def test_a_damaged_or_unkept_answer_gets_plain_lines_after_it():
    damaged = {**DONE, "dropped_events": {"bad_json": 1, "event_too_large": 2}, "kept": False,
               "error": {"code": "storage_error",
                         "message": "session 's' was not written: No space left on device; "
                                    "the answer was not kept in the history"}}
    out, err, code = run([STARTED, DELTA_1, WARNING, DELTA_2, damaged])
    assert (out, code) == (ANSWER, 0)
    assert err == (WARNING_LINE + "homeagent: part of the answer was lost: 1 event was not "
                   "valid JSON, 2 events were larger than the stream buffer\n"
                   "homeagent: storage_error: session 's' was not written: No space left on "
                   "device; the answer was not kept in the history\n")


def test_history_marks_a_damaged_turn():
    shown = format_history({"session": "s", "turns": [
        {"role": "user", "text": "hello"},
        {"role": "assistant", "text": "The room", "dropped_events": {"bad_json": 1}}]})
    assert shown == ("you:   hello\nagent: The room\n"
                     "       (part of the answer was lost: 1 event was not valid JSON)")


def test_a_failover_is_a_side_line_and_the_answer_follows():
    failover = {"id": 1, "type": "failover", "failed": "cloud", "code": "upstream_http",
                "message": "cloud: HTTP 503: overloaded", "status": 503, "provider": "local",
                "model": "llama3.2"}
    out, err, code = run([STARTED, failover, DELTA_1, DELTA_2, DONE])
    assert (out, code) == (ANSWER, 0)
    assert err == ("homeagent: cloud failed (cloud: HTTP 503: overloaded); "
                   "local (llama3.2) answers\n")



def test_a_failover_mid_answer_says_where_the_answer_goes_on():
    failover = {"id": 1, "type": "failover", "failed": "cloud", "code": "upstream_stream",
                "message": "cloud: the stream broke", "status": None, "provider": "cloud",
                "model": "gpt", "resumed_at": 12}
    out, err, code = run([STARTED, DELTA_1, failover, DELTA_2, DONE])
    assert (out, code) == (ANSWER, 0)
    assert err.endswith("homeagent: cloud failed (cloud: the stream broke); "
                        "cloud (gpt) goes on from character 12\n"), err

def test_format_status_shows_each_providers_health():
    latency = {"samples": 40, "p50": 0.0123, "p99": 0.25}
    counts = {"answered": 40, "failed": 3, "failovers": 3, "skipped": 5}
    providers = [
        {**STATUS["providers"][1], "fallback": ["local"], "state": "cooling", "retry_in": 42.5,
         "until": "2026-12-01T12:30:00+00:00", "last_error": "cloud: HTTP 503: overloaded",
         "counts": counts, "first_delta": latency},
        {**STATUS["providers"][0], "fallback": [], "state": "healthy", "last_error": None,
         "counts": counts, "first_delta": {"samples": 0, "p50": None, "p99": None}},
        {**STATUS["providers"][0], "name": "gone", "state": "disabled",
         "disabled": "its key was refused; reload the config to try it again",
         "last_error": "gone: HTTP 401: invalid key ***", "counts": {}, "first_delta": {}},
        {**STATUS["providers"][0], "name": "back", "state": "retrying", "counts": {}},
    ]
    lines = format_status({**STATUS, "providers": providers}).splitlines()
    assert lines[3:12] == [
        "provider cloud: anthropic claude-x at https://api.example.com",
        "  cooling until 2026-12-01T12:30:00+00:00 (42.5 s); fallback local; answered 40, "
        "failed 3, failovers 3, skipped 5; first delta p50 12 ms, p99 250 ms (40 answers)",
        "  last error: cloud: HTTP 503: overloaded",
        "provider local (default): openai-chat llama3.2 at http://127.0.0.1:11434/v1",
        "  healthy; answered 40, failed 3, failovers 3, skipped 5",
        "provider gone (default): openai-chat llama3.2 at http://127.0.0.1:11434/v1",
        "  disabled: its key was refused; reload the config to try it again",
        "  last error: gone: HTTP 401: invalid key ***",
        "provider back (default): openai-chat llama3.2 at http://127.0.0.1:11434/v1",
    ]
    assert lines[12] == "  retrying: the next ask tries it"


def test_format_status_names_a_tool_hidden_by_another_providers():
    hidden = [{"tool": "calc_add", "provider": "mcp calc", "by": "device box"}]
    lines = format_status({**STATUS, "tools_shadowed": hidden}).splitlines()
    assert "tool calc_add of mcp calc is not offered: device box has one of that name" in lines


def test_format_status_shows_each_providers_tokens_and_cache():
    none = {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0,
            "cache_write_tokens": 0}
    providers = [
        {**STATUS["providers"][1], "state": "healthy", "counts": {"answered": 8},
         "tokens": {**none, "input_tokens": 2311, "output_tokens": 410,
                    "cache_read_tokens": 7473, "cache_write_tokens": 946}},
        {**STATUS["providers"][0], "state": "healthy", "counts": {"answered": 8},
         "tokens": {**none, "input_tokens": 8517, "output_tokens": 402}},
        {**STATUS["providers"][0], "name": "idle", "state": "healthy", "counts": {},
         "tokens": none},
    ]
    lines = format_status({**STATUS, "providers": providers}).splitlines()
    assert lines[3:9] == [
        "provider cloud: anthropic claude-x at https://api.example.com",
        "  healthy; answered 8; tokens in 2311, out 410, cache read 7473, written 946",
        "provider local (default): openai-chat llama3.2 at http://127.0.0.1:11434/v1",
        "  healthy; answered 8; tokens in 8517, out 402",
        "provider idle (default): openai-chat llama3.2 at http://127.0.0.1:11434/v1",
        "  healthy",
    ]
