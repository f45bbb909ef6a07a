"""How the CLI shows replies on a terminal: the streamed answer, status,
sessions and history. Plain functions of the replies, so they are tested
without a daemon."""

from __future__ import annotations

import json
from typing import Any, TextIO

DIM, RESET = "\x1b[2m", "\x1b[0m"


class AskPrinter:
    """Streams an ask's replies: answer text to stdout as it arrives;
    reasoning, tool calls, warnings and errors to stderr. exit_code is 0
    after done, 1 after an error."""

    def __init__(self, out: TextIO, err: TextIO, reasoning: str = "dim",
                 as_json: bool = False) -> None:
        self.out, self.err = out, err
        self.reasoning = reasoning
        self.as_json = as_json
        self.exit_code = 1
        self._in_reasoning = False
        self._dim = reasoning == "dim" and err.isatty()
        # One screen for both streams (a terminal, or the demo's one stream):
        # a side line (reasoning, tool call, warning) first ends the answer's
        # line. Separate destinations keep stdout exactly the answer.
        self._one_screen = out is err or (out.isatty() and err.isatty())
        self._answer_open = False  # answer text written since its last newline
        self._line_broken = False  # ...and that line was ended for a side line

    def show(self, reply: dict[str, Any]) -> None:
        if self.as_json:
            if reply.get("type") == "reasoning" and self.reasoning == "hide":
                return
            self.out.write(json.dumps(reply, ensure_ascii=False) + "\n")
            self.out.flush()
            if reply.get("type") == "done":
                self.exit_code = 0
            return
        kind = reply.get("type")
        if kind == "reasoning":
            if self.reasoning != "hide":
                if not self._in_reasoning:
                    self._side_line()
                    self.err.write(DIM if self._dim else "[reasoning] ")
                self.err.write(reply["text"])
                self.err.flush()
                self._in_reasoning = True
            return
        self._end_reasoning()
        if kind in ("delta", "refusal"):
            self.out.write(reply["text"])
            self.out.flush()
            self._answer_open = not reply["text"].endswith("\n")
            self._line_broken = False
            return
        if kind in ("tool_call", "tool_result", "warning", "failover"):
            self._side_line()
        if kind == "failover":
            goes_on = ("answers" if reply.get("resumed_at") is None else
                       f"goes on from character {reply['resumed_at']}")
            self.err.write(f"homeagent: {reply.get('failed')} failed ({reply.get('message')}); "
                           f"{reply.get('provider')} ({reply.get('model')}) {goes_on}\n")
        if kind == "tool_call":
            arguments = reply["arguments"]
            if not isinstance(arguments, str):  # a string did not parse: shown as it came
                arguments = json.dumps(arguments, ensure_ascii=False)
            self.err.write(f"[tool call {reply['name']}({arguments})]\n")
        elif kind == "tool_result":
            self.err.write(f"[tool result {reply.get('name')}: {reply.get('content')}]\n")
        elif kind == "warning":
            detail = f": {reply['detail']}" if reply.get("detail") else ""
            self.err.write(f"[warning {reply['code']}{detail}]\n")
        elif kind == "done":
            if not self._line_broken:
                self.out.write("\n")
            self.out.flush()
            for line in done_notes(reply):
                self.err.write(f"homeagent: {line}\n")
            self.exit_code = 0
        elif kind in ("error", "shutdown"):
            self.out.flush()
            message = reply.get("message") or reply.get("reason")
            self.err.write(f"\nhomeagent: {reply.get('code', kind)}: {message}\n")

    def _side_line(self) -> None:
        if self._one_screen and self._answer_open:
            self.out.write("\n")
            self.out.flush()
            self._answer_open, self._line_broken = False, True

    def close(self) -> None:
        """The replies stopped (connection lost): leave the terminal undimmed."""
        self._end_reasoning()

    def _end_reasoning(self) -> None:
        if self._in_reasoning:
            self.err.write((RESET if self._dim else "") + "\n")
            self.err.flush()
            self._in_reasoning = False


# What was wrong with a dropped event, by done's dropped_events reason:
# "1 event was ...", "2 events were ...".
_DROP_REASONS = {
    "bad_json": "not valid JSON",
    "not_object": "not a JSON object",
    "event_too_large": "larger than the stream buffer",
    "delta_elided": "a delta longer than the stream buffer, its text not kept",
    "name_too_long": "dropped for an over-long event name",
    "output_too_large": "too large to decode",
}


def done_notes(reply: dict[str, Any]) -> list[str]:
    """Plain lines for what a done reply says went wrong: events lost from
    the answer, an exchange the disk did not keep."""
    notes = []
    dropped = reply.get("dropped_events") or {}
    if dropped:
        notes.append("part of the answer was lost: " + ", ".join(
            f"{count} {'event was' if count == 1 else 'events were'} "
            f"{_DROP_REASONS.get(code, f'dropped ({code})')}" for code, count in dropped.items()))
    if reply.get("finish_reason") == "stopped" and reply.get("kept") is not False:
        notes.append("stopped: the answer was cut off here, and is kept as far as it came")
    if reply.get("kept") is False:
        error = reply.get("error") or {}  # its message says it was not kept, and why
        notes.append(f"{error.get('code')}: {error.get('message')}")
    return notes


def format_status(reply: dict[str, Any]) -> str:
    lines = [f"{reply.get('server')} (protocol {reply.get('protocol')}), pid {reply.get('pid')}, "
             f"up {reply.get('uptime', 0):.0f} s{', draining' if reply.get('draining') else ''}",
             f"socket:  {reply.get('socket')}",
             f"config:  {reply.get('config')}"]
    for provider in reply.get("providers", []):
        mark = " (default)" if provider.get("default") else ""
        lines.append(f"provider {provider['name']}{mark}: {provider['protocol']} "
                     f"{provider['model']} at {provider['base_url']}")
        if "state" in provider:
            lines.append("  " + _health_line(provider))
    for device in reply.get("devices", []):
        lines.append(f"device {device.get('name')}: {device.get('state')}")
    for server in reply.get("mcp") or []:
        lines.append(_mcp_line(server))
    for hidden in reply.get("tools_shadowed") or []:
        lines.append(f"tool {hidden.get('tool')} of {hidden.get('provider')} is not offered: "
                     f"{hidden.get('by')} has one of that name")
    mqtt = reply.get("mqtt")
    if mqtt:
        link = "connected" if mqtt.get("connected") else \
            f"not connected ({mqtt.get('last_error') or 'connecting'})"
        lines.append(f"mqtt {mqtt.get('broker')} as board {mqtt.get('board')}: {link}, "
                     f"{mqtt.get('reconnects')} reconnects, {mqtt.get('messages_in')} in, "
                     f"{mqtt.get('messages_out')} out, {mqtt.get('bad_payloads')} bad payloads")
    lines.append(f"clients: {reply.get('clients')}, asks in flight: {len(reply.get('active', []))}")
    counters = reply.get("counters", {})
    if counters:
        lines.append("counters: " + ", ".join(f"{k} {v}" for k, v in counters.items()))
    return "\n".join(lines)


def _mcp_line(server: dict[str, Any]) -> str:
    """An MCP server in status: state, tools, calls, latency, last error."""
    latency = server.get("latency_ms") or {}
    line = (f"mcp {server.get('name')} ({server.get('transport')} {server.get('where')}): "
            f"{server.get('state')}, {len(server.get('tools') or [])} tools, "
            f"{server.get('calls')} calls ({server.get('failed')} failed, "
            f"{server.get('timeouts')} timed out), {server.get('restarts')} restarts, "
            f"latency mean {latency.get('mean', 0):g} ms, max {latency.get('max', 0):g} ms")
    if server.get("last_error"):
        line += f"\n  last error: {server['last_error']}"
    return line


def _health_line(provider: dict[str, Any]) -> str:
    """A provider's health in status: its state, counts, latency and last error."""
    state = provider["state"]
    if state == "cooling":
        state = f"cooling until {provider.get('until')} ({provider.get('retry_in')} s)"
    elif state == "retrying":
        state = "retrying: the next ask tries it"
    elif state == "disabled":
        state = f"disabled: {provider.get('disabled')}"
    parts = [state]
    if provider.get("fallback"):
        parts.append("fallback " + ", ".join(provider["fallback"]))
    counts = provider.get("counts") or {}
    if counts:
        parts.append(", ".join(f"{k} {v}" for k, v in counts.items()))
    latency = provider.get("first_delta") or {}
    if latency.get("samples"):
        parts.append(f"first delta p50 {latency['p50'] * 1000:.0f} ms, "
                     f"p99 {latency['p99'] * 1000:.0f} ms ({latency['samples']} answers)")
    tokens = provider.get("tokens") or {}
    if any(tokens.values()):
        parts.append(_tokens(tokens))
    line = "; ".join(parts)
    if provider.get("last_error"):
        line += f"\n  last error: {provider['last_error']}"
    return line


def _tokens(tokens: dict[str, int]) -> str:
    """A provider's tokens since the daemon started or its config changed,
    as it reported them: Anthropic counts the cached ones apart from
    input_tokens, the others within it (docs/caching.md)."""
    read, written = tokens.get("cache_read_tokens", 0), tokens.get("cache_write_tokens", 0)
    line = f"tokens in {tokens.get('input_tokens', 0)}, out {tokens.get('output_tokens', 0)}"
    if read or written:
        line += f", cache read {read}, written {written}"
    return line


def format_sessions(reply: dict[str, Any]) -> str:
    sessions = reply.get("sessions", [])
    if not sessions:
        return "no sessions"
    return "\n".join(f"{s['id']}: {s['turns']} turn{'' if s['turns'] == 1 else 's'}"
                     for s in sessions)


def format_timers(reply: dict[str, Any]) -> str:
    """A `timers` reply: one line a timer, the soonest first."""
    lines = []
    cancelled = reply.get("cancelled")
    if cancelled:
        lines.append(f"cancelled {cancelled['kind']} {cancelled['id']} ({cancelled['label']})")
    for timer in reply["timers"]:
        where = f" on board {timer['board']}" if timer["board"] else ""
        lines.append(f"{timer['id']}  {timer['kind']:8}  {timer['at']}  in "
                     f"{_remaining(timer['remaining'])}{where}  {timer['label']}")
    return "\n".join(lines) or "no timers"


def _remaining(seconds: float) -> str:
    minutes, second = divmod(round(seconds), 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours}:{minute:02}:{second:02}" if hours else f"{minute}:{second:02}"


def format_history(reply: dict[str, Any]) -> str:
    turns = reply.get("turns", [])
    if not turns:
        return f"session {reply.get('session')}: no history"
    lines = []
    for turn in turns:
        role = turn.get("role")
        if role == "user":
            lines.append(f"you:   {turn['text']}")
        elif role == "assistant":
            for call in turn.get("tool_calls", []):
                lines.append(f"tool:  {call['name']}({call['arguments']})")
            if turn.get("text"):
                lines.append(f"agent: {turn['text']}")
            lines += [f"       ({note})" for note in done_notes(turn)]  # a damaged answer
        else:
            failed = " (error)" if turn.get("is_error") else ""
            lines.append(f"  ->   {turn.get('name')}{failed}: {turn.get('content')}")
    return "\n".join(lines)
