"""CommandDevice: runs a configured program for each sentence or each answer
(espeak-ng for speech, a notifier, ...) and offers programs as tools.

Arguments are passed as argv, never through a shell. In an argument,
`{text}` (the sentence, the whole answer, or an error's message) and
`{session}` are replaced, whole or inside a longer argument, and the text
stays one argument whatever it holds; `{{` and `}}` are literal braces. A
placeholder is a bare name: no conversion, format spec, index or attribute.

Settings (the device's own keys):
- argv: the program (a name on PATH or an absolute path, resolved when the
  config loads) and its arguments.
- per: "sentence" (default) runs at each `sentence` event, "answer" once at
  `done` with the whole answer. An `error` event runs the program with the
  error's message, so a failed ask is heard too; an empty text runs nothing.
- stdin: true also writes the text, with a newline, to the program's stdin.
- timeout: seconds a run may take (default 30); then the program's process
  group gets SIGTERM and, KILL_GRACE seconds later, SIGKILL.
- max_output: bytes kept of stdout (its head) and stderr (its tail) for
  reports and tool results (default 4096). Both are read as the program
  writes them and only those bytes are kept; a program that writes more than
  MAX_OUTPUT_BYTES in all (stdout and stderr) is killed (its process group
  gets SIGKILL): the run is reported as over the output cap, a tool call's
  result is a ToolError saying so.
- tool_argv: tool name -> argv, one for each of the device's tools; its
  placeholders are properties of the tool's parameters: a string goes in
  as it is, anything else as JSON (true, 3, 0.5). stdout, stripped, is the
  result; a non-zero exit or a timeout is a ToolError.
- allow_dash: placeholders whose value may start an argument with `-`.
- speech: true makes `{text}` the text cleaned for a voice
  (agent/text/speech.py: no markdown, URLs as their host, no emoji);
  false, the default, passes the model's text as it is: a command device is
  as often a notifier or a logger as a voice, and those may want it whole.
  With speech: code_placeholder (said for a code block), emoji ("drop" or
  "name") and speak_tool_calls (a `tool_call` event runs the program with
  the tool's name as words; the device must take tool_call events).

Model text never becomes a program's option: an argument that would start
with `-` from a placeholder's value (`{text}` = "-f/etc/passwd") is refused
(OptionRefused: the tool call gets an error result, the sentence is skipped
with a warning) unless it comes after a `--` argument of the template, or
the placeholder is in allow_dash. A template's own options (`-v`, or
`--voice={text}`, whose value cannot start an argument) are its own.

Runs are one at a time, in order (speech stays in order), tool runs
included: a device never has more than one process running, however many
calls the model makes at once (the unit's TasksMax counts them all). A run that fails
is logged and counted (status()), and the next event runs: one bad sentence
does not restart the device. A program that cannot be started at all
(gone, no longer executable) raises out of run(): the hub reports the
device failed and starts it again after a backoff, and run() then fails
until the program is back.

A command device is a speech device: `announce` runs its program for the
text as for an answer, and a stop that concerns the text it runs for ends
that run at once (SIGTERM to its process group, SIGKILL KILL_GRACE later).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from typing import Any, Mapping

import trio

from agent.core import replies
from agent.devices.base import (SPEECH_KEYS, Common, Device, Inbox, Prompt, SettingError, ToolError,
                                ToolSpec, refuse_unknown, refuse_notices, speech_options)
from agent.devices.templates import Argv, OptionRefused, parse_argv
from agent.jsontypes import is_type
from agent.text.speech import SpeechOptions, clean, tool_call_phrase

log = logging.getLogger("homeagent.devices")

KILL_GRACE = 1.0  # seconds from SIGTERM to SIGKILL
MAX_OUTPUT_BYTES = 64 * 1024 * 1024  # stdout and stderr of one run; past it: SIGKILL
_READ = 65536
_PLACEHOLDERS = frozenset({"text", "session"})
_KEYS = frozenset({"argv", "per", "stdin", "timeout", "max_output", "tool_argv",
                   "allow_dash"}) | SPEECH_KEYS
def _tool_argvs(tools: tuple[ToolSpec, ...], table: Any) -> dict[str, Argv]:
    if not isinstance(table, Mapping):
        raise SettingError("tool_argv", "must be a table: tool name = argv")
    specs = {tool.name: tool for tool in tools}
    for name in table:
        if name not in specs:
            raise SettingError(f"tool_argv.{name}", "this device has no such tool")
    argvs = {}
    for name, spec in specs.items():
        if name not in table:
            raise SettingError(f"tool_argv.{name}", "missing: each tool of this device "
                                                    "runs its own argv")
        argvs[name] = parse_argv(f"tool_argv.{name}", table[name],
                                  frozenset(spec.parameters.get("properties", {})))
    return argvs


def _allow_dash(names: Any, tools: tuple[ToolSpec, ...]) -> frozenset[str]:
    known = set(_PLACEHOLDERS).union(*(tool.parameters.get("properties", {}) for tool in tools))
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise SettingError("allow_dash", "must be a list of placeholder names")
    for name in names:
        if name not in known:
            raise SettingError("allow_dash", f"{name!r} is no placeholder of this device "
                                             f"(known: {', '.join(sorted(known))})")
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class _Run:
    exit: int | None  # None: killed at the timeout
    seconds: float
    stdout: str       # head
    stderr: str       # tail
    over_cap: bool = False  # killed for writing more than MAX_OUTPUT_BYTES


class _Output:
    """What a run wrote, read as it comes: the head of stdout and the tail
    of stderr, `keep` bytes of each, and the count of every byte."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.stdout, self.stderr = bytearray(), bytearray()
        self.total = 0

    def add(self, data: bytes, stdout: bool) -> bool:
        """Keep what is kept of data; False once the run is over the cap."""
        self.total += len(data)
        if stdout:
            self.stdout += data[:self.keep - len(self.stdout)]
        elif self.keep:
            self.stderr = (self.stderr + data)[-self.keep:]
        return self.total <= MAX_OUTPUT_BYTES


async def _drain(pipe: trio.abc.ReceiveStream, output: _Output, stdout: bool,
                 process: trio.Process) -> None:
    async with pipe:
        while data := await pipe.receive_some(_READ):
            if not output.add(data, stdout):
                _kill_group(process, signal.SIGKILL)
                return


async def _feed(pipe: trio.abc.SendStream, data: bytes) -> None:
    async with pipe:
        try:
            await pipe.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the program did not read its stdin: not an error of the run


def _kill_group(process: trio.Process, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:  # gone already
        pass


async def _run_program(argv: list[str], stdin: bytes, output: _Output) -> int:
    """argv run to its exit, its output read into `output` as it comes; on a
    cancellation (the timeout, a stop) its process group is terminated
    (_terminate) and waited for."""
    process = await trio.lowlevel.open_process(
        argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True)
    try:
        async with trio.open_nursery() as nursery:
            if stdin:
                nursery.start_soon(_feed, process.stdin, stdin)
            nursery.start_soon(_drain, process.stdout, output, True, process)
            nursery.start_soon(_drain, process.stderr, output, False, process)
            await process.wait()
        return process.returncode
    finally:
        if process.returncode is None:
            with trio.CancelScope(shield=True):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_terminate, process)
                    await process.wait()
                    nursery.cancel_scope.cancel()


def _exited(code: int) -> str:
    return f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"


async def _terminate(process: trio.Process) -> None:
    """A cancelled run's end. The program leads a process group of its own,
    so a shell's children get the signals too."""
    _kill_group(process, signal.SIGTERM)
    await trio.sleep(KILL_GRACE)  # cancelled as soon as it exits
    _kill_group(process, signal.SIGKILL)


class CommandDevice(Device):
    kind = "command"
    DEFAULT_EVENTS = frozenset({"sentence", "done", "error"})

    @property
    def speaks(self) -> bool:  # a notifier or a logger is no speech device
        return self.speech is not None

    def __init__(self, common: Common, argv: Argv, *, per: str, stdin: bool,
                 timeout: float, max_output: int, tools: Mapping[str, Argv],
                 allow_dash: frozenset[str] = frozenset(),
                 speech: SpeechOptions | None = None) -> None:
        super().__init__(common)
        self.speech = speech  # the hub cleans the sentences; the rest is cleaned here
        self.argv, self.per, self.stdin = argv, per, stdin
        self.timeout, self.max_output, self.tools = timeout, max_output, dict(tools)
        self.allow_dash = allow_dash
        self.runs = self.failures = self.timeouts = 0  # a timeout is not also a failure
        self.refused = 0  # sentences not run: a value would have been an option
        self.last_run: dict[str, Any] | None = None
        self._one_run = trio.Lock()  # FIFO: runs start in the order they were asked for
        self._speaking: tuple[int, trio.CancelScope] | None = None  # Origin key, its run
        self.stops = 0  # runs a stop ended

    @classmethod
    def from_settings(cls, common: Common, settings: Mapping[str, Any]) -> CommandDevice:
        refuse_unknown(settings, _KEYS)
        refuse_notices(common, cls.kind)
        if "argv" not in settings:
            raise SettingError("argv", "required: the program and its arguments")
        argv = parse_argv("argv", settings["argv"], _PLACEHOLDERS)
        per = settings.get("per", "sentence")
        if per not in ("sentence", "answer"):
            raise SettingError("per", f'"sentence" or "answer", not {per!r}')
        stdin = settings.get("stdin", False)
        if not isinstance(stdin, bool):
            raise SettingError("stdin", "must be true or false")
        timeout = settings.get("timeout", 30.0)
        if not is_type(timeout, (int, float)) or not timeout > 0:
            raise SettingError("timeout", "must be a positive number of seconds")
        max_output = settings.get("max_output", 4096)
        if not is_type(max_output, int) or max_output < 0:
            raise SettingError("max_output", "must be a whole number of bytes, 0 or more")
        tools = _tool_argvs(common.tools, settings.get("tool_argv", {}))
        return cls(common, argv, per=per, stdin=stdin, timeout=float(timeout),
                   max_output=max_output, tools=tools,
                   allow_dash=_allow_dash(settings.get("allow_dash", []), common.tools),
                   speech=speech_options(common, settings, default=False))

    async def run(self, inbox: Inbox, prompt: Prompt,
                  task_status=trio.TASK_STATUS_IGNORED) -> None:
        if shutil.which(self.argv.path) is None:
            raise FileNotFoundError(errno.ENOENT, "program not found or not executable",
                                    self.argv.path)
        task_status.started()
        trigger = replies.Sentence if self.per == "sentence" else replies.Done
        async for delivery in inbox:
            reply = delivery.reply
            if type(reply) is trigger:
                text = reply.text
                if self.speech and trigger is replies.Done:
                    text = clean(text, self.speech)
            elif type(reply) is replies.Error:
                text = reply.message
                if self.speech:
                    text = clean(text, self.speech)
            elif type(reply) is replies.ToolCall and self.speech and self.speech.speak_tool_calls:
                text = tool_call_phrase(reply.name)
            else:
                continue
            if text:
                with trio.CancelScope() as scope:
                    self._speaking = (delivery.origin.key, scope)
                    self.speech_changed()
                    try:
                        await self._run_for(text, delivery.origin.session or "")
                    finally:
                        self._speaking = None
                        self.speech_changed()

    @property
    def speaking(self) -> bool:
        return self.speaks and self._speaking is not None

    def silence(self, keys: frozenset[int] | None) -> bool:
        if self._speaking is None:
            return False
        key, scope = self._speaking
        if keys is not None and key not in keys:
            return False
        scope.cancel()  # _run_program signals the program's group
        self.stops += 1
        return True

    async def _run_for(self, text: str, session: str) -> None:
        try:
            argv = self.argv.render({"text": text, "session": session}, self.allow_dash)
        except OptionRefused as refusal:
            self.refused += 1
            log.warning("device %s: a text was skipped, %s", self.name, refusal)
            return
        try:
            run = await self._execute(self.argv.program, argv,
                                      (text + "\n").encode("utf-8", "replace")
                                      if self.stdin else b"")
        except OSError:
            self.failures += 1
            raise
        finally:
            self.runs += 1  # counted once done, with its outcome
        if run.exit is None:
            self.timeouts += 1
        elif run.exit != 0 or run.over_cap:
            self.failures += 1
        self.last_run = {"exit": run.exit, "timed_out": run.exit is None,
                         "over_output_cap": run.over_cap,
                         "seconds": round(run.seconds, 3), "stdout": run.stdout,
                         "stderr": run.stderr}

    async def _execute(self, program: str, argv: list[str], stdin: bytes) -> _Run:
        """Run argv to completion, to the timeout or to the output cap, and
        log how it went."""
        output = _Output(self.max_output)
        async with self._one_run:
            start = trio.current_time()
            with trio.move_on_after(self.timeout) as scope:
                code = await _run_program(argv, stdin, output)
            seconds = trio.current_time() - start
        if scope.cancelled_caught:
            log.warning("device %s: %s killed after %.2f s (timeout %g s)", self.name,
                        program, seconds, self.timeout)
            return _Run(None, seconds, "", "")
        over_cap = output.total > MAX_OUTPUT_BYTES
        run = _Run(code, seconds, output.stdout.decode("utf-8", "replace"),
                   output.stderr.decode("utf-8", "replace"), over_cap)
        if over_cap:
            log.warning("device %s: %s killed after %.2f s: it wrote more than %d bytes of "
                        "output (MAX_OUTPUT_BYTES)", self.name, program, seconds,
                        MAX_OUTPUT_BYTES)
        elif run.exit == 0:
            log.info("device %s: %s exited with status 0 in %.2f s", self.name, program,
                     seconds)
        else:
            log.warning("device %s: %s %s in %.2f s: %s", self.name, program,
                        _exited(run.exit), seconds, run.stderr.strip())
        return run

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        template = self.tools.get(name)
        if template is None:
            return await super().call_tool(name, arguments)
        argv = template.render(arguments, self.allow_dash)
        try:
            run = await self._execute(template.program, argv, b"")
        except OSError as error:
            raise ToolError(f"{name}: {template.program} could not be started: "
                            f"{error.strerror or error}") from None
        if run.exit is None:
            raise ToolError(f"{name}: {template.program} took longer than {self.timeout:g} s "
                            "and was killed")
        if run.over_cap:
            raise ToolError(f"{name}: {template.program} wrote more than {MAX_OUTPUT_BYTES} "
                            "bytes of output and was killed")
        if run.exit != 0:
            raise ToolError(f"{name}: {template.program} {_exited(run.exit)}: "
                            f"{run.stderr.strip() or 'no error output'}")
        return run.stdout.strip()

    def status(self) -> dict[str, Any]:
        return {"program": self.argv.program, "per": self.per, "runs": self.runs,
                "failures": self.failures, "timeouts": self.timeouts, "refused": self.refused,
                "stops": self.stops, "last_run": self.last_run}
