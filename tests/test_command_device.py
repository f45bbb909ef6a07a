"""CommandDevice (agent/devices/command.py) with real programs: the text
reaches them as one literal argument or on stdin, failures and timeouts are
reported without stopping the device, a vanished program does stop it, and
tools map their arguments into argv.

Waits poll the device's counters under fail_after, scaled by timeout().
"""

from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import asynccontextmanager

import pytest
import trio

from agent.devices import command
from agent.devices.base import Common, Delivery, Inbox, Overflow, SettingError, ToolError, ToolSpec
from agent.devices.command import CommandDevice
from conftest import timeout
from helpers import asked, delivery, until

REQUEST = asked(1, "kitchen", 1, "a1")

ECHO = ToolSpec("echo", "prints its arguments", {"type": "object", "properties": {
    "word": {"type": "string"}, "count": {"type": "integer"}, "flag": {"type": "boolean"},
    "ratio": {"type": "number"}}})
FAIL = ToolSpec("fail", "fails", {"type": "object", "properties": {}})
SLOW = ToolSpec("slow", "sleeps", {"type": "object", "properties": {"seconds": {"type": "number"}}})
TOOL_ARGV = {"echo": ["printf", "%s|%s|%s|%s\n", "{word}", "{count}", "{flag}", "{ratio}"],
             "fail": ["sh", "-c", "echo oops >&2; exit 3"],
             "slow": ["sleep", "{seconds}"]}


def make(tools: tuple[ToolSpec, ...] = (), **settings) -> CommandDevice:
    return CommandDevice.from_settings(
        Common("speaker", CommandDevice.DEFAULT_EVENTS, tools=tools), settings)


def event(kind: str, **data) -> Delivery:
    return delivery(kind, REQUEST, **data)


async def no_prompt(text: str) -> None:
    raise AssertionError("a command device never prompts")


@asynccontextmanager
async def running(device: CommandDevice):
    """The device's run() in a task, cancelled at the end; yields its inbox."""
    inbox = Inbox(64, Overflow.BLOCK)  # BLOCK: no sentence is coalesced
    async with trio.open_nursery() as nursery:
        await nursery.start(device.run, inbox, no_prompt)
        yield inbox
        nursery.cancel_scope.cancel()


async def feed(device: CommandDevice, *events: Delivery, runs: int) -> None:
    async with running(device) as inbox:
        for e in events:
            await inbox.put(e)
        await until(lambda: device.runs >= runs)
    assert device.runs == runs


@pytest.mark.trio
async def test_cat_on_stdin_echoes_each_sentence():
    device = make(argv=["cat"], stdin=True)
    await feed(device, event("sentence", text="Hello there."),
               event("sentence", text="How are you?"), runs=2)
    status = device.status()
    assert status["program"] == "cat" and status["per"] == "sentence"
    assert (status["runs"], status["failures"], status["timeouts"]) == (2, 0, 0)
    last = status["last_run"]
    assert (last["exit"], last["timed_out"], last["stdout"], last["stderr"]) == \
        (0, False, "How are you?\n", "")
    assert last["seconds"] >= 0


@pytest.mark.trio
async def test_sentences_run_one_at_a_time_in_order(tmp_path):
    out = tmp_path / "out"
    device = make(argv=["sh", "-c", 'printf "%s\\n" "$1" >> "$2"', "sh", "{text}", str(out)])
    sentences = [f"Sentence {i}." for i in range(6)]
    await feed(device, *(event("sentence", text=s) for s in sentences), runs=6)
    assert out.read_text().splitlines() == sentences


LITERAL = [
    "it's \"quoted\"; echo $(touch pwned) `touch pwned2` | cat > pwned3 & $HOME *",
    "line one\nline two\n",
    "-n {session} {{text}} %s \\n",
    "  spaces around  ",
    "Grüße, 你好 👨\u200d👩\u200d👧",
]


@pytest.mark.trio
@pytest.mark.parametrize("text", LITERAL)
async def test_text_is_one_literal_argument(text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # printf reads no option after its format: "-n ..." may start an argument.
    device = make(argv=["printf", "%s", "{text}"], allow_dash=["text"])
    await feed(device, event("sentence", text=text), runs=1)
    assert device.last_run["stdout"] == text
    assert list(tmp_path.iterdir()) == []  # no shell ran anything


def argv_printer(tmp_path):
    """A program that writes each of its arguments on a line of a log: (path, log)."""
    log = tmp_path / "argv.log"
    program = tmp_path / "print-argv"
    program.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" >> '{log}'\n")
    program.chmod(0o755)
    return str(program), log


@pytest.mark.trio
async def test_a_text_that_would_be_an_option_is_skipped(tmp_path):
    program, log = argv_printer(tmp_path)
    device = make(argv=[program, "-v", "en", "{text}"])
    await feed(device, event("sentence", text="-f/etc/passwd"),
               event("sentence", text="--version"), event("sentence", text="Fine."), runs=1)
    assert log.read_text().splitlines() == ["-v", "en", "Fine."]
    assert (device.status()["refused"], device.failures) == (2, 0)


@pytest.mark.trio
@pytest.mark.parametrize("argv,settings,expected", [
    (["--", "{text}"], {}, ["--", "-f/etc/passwd"]),          # after the template's --
    (["{text}"], {"allow_dash": ["text"]}, ["-f/etc/passwd"]),  # the device allows it
    (["--say={text}"], {}, ["--say=-f/etc/passwd"]),          # the template's own option
    (["x{text}"], {}, ["x-f/etc/passwd"]),
])
async def test_where_a_leading_dash_may_go(tmp_path, argv, settings, expected):
    program, log = argv_printer(tmp_path)
    device = make(argv=[program, *argv], **settings)
    await feed(device, event("sentence", text="-f/etc/passwd"), runs=1)
    assert log.read_text().splitlines() == expected


@pytest.mark.trio
async def test_a_tool_argument_that_would_be_an_option_is_refused(tmp_path):
    program, log = argv_printer(tmp_path)
    device = make(tools=(ECHO,), argv=["true"],
                  tool_argv={"echo": [program, "{word}", "{count}"]})
    with pytest.raises(command.OptionRefused) as refused:
        await device.call_tool("echo", {"word": "--version", "count": 1})
    assert str(refused.value) == ("nothing was run: the value of {word}, '--version', starts "
                                  f"with '-' and {program} would read it as an option")
    with pytest.raises(command.OptionRefused):
        await device.call_tool("echo", {"word": "ok", "count": -1})  # JSON values too
    assert not log.exists()
    assert await device.call_tool("echo", {"word": "ok", "count": 2}) == ""
    assert log.read_text().splitlines() == ["ok", "2"]


def test_allow_dash_names_placeholders_of_the_device():
    with pytest.raises(SettingError) as error:
        make(argv=["true"], allow_dash=["txt"])
    assert error.value.key == "allow_dash" and "'txt' is no placeholder" in str(error.value)
    assert make(tools=(ECHO,), argv=["true"], tool_argv={"echo": ["true"]},
                allow_dash=["word", "text"]).allow_dash == {"word", "text"}


@pytest.mark.trio
async def test_placeholders_inside_arguments_and_literal_braces():
    device = make(argv=["printf", "%s", "say:{text}|{session}|{{lit}}"])
    await feed(device, event("sentence", text="hi there"), runs=1)
    assert device.last_run["stdout"] == "say:hi there|kitchen|{lit}"


@pytest.mark.trio
async def test_nul_and_lone_surrogate_do_not_fail_the_run():
    device = make(argv=["printf", "%s", "{text}"])
    await feed(device, event("sentence", text="a\0b\ud800c"), runs=1)
    assert (device.last_run["stdout"], device.failures) == ("ab?c", 0)


@pytest.mark.trio
async def test_per_answer_runs_once_with_the_whole_answer():
    device = make(argv=["printf", "%s", "{text}"], per="answer")
    await feed(device, event("sentence", text="One."), event("sentence", text="Two."),
               event("done", finish_reason="stop", text="One. Two."), runs=1)
    assert device.last_run["stdout"] == "One. Two."


@pytest.mark.trio
async def test_with_speech_the_answer_and_an_error_are_cleaned_for_a_voice():
    device = make(argv=["printf", "%s", "{text}"], per="answer", speech=True,
                  code_placeholder="Some code.")
    await feed(device, event("done", finish_reason="stop",
                             text="**Yes**: see https://example.com/x\n```\nls\n```\n🎉"),
               runs=1)
    assert device.last_run["stdout"] == "Yes: see example.com\nSome code.\n\n"
    await feed(device, event("error", code="provider", message="`https://up.example/v1` failed"),
               runs=2)
    assert device.last_run["stdout"] == "up.example failed"


@pytest.mark.trio
async def test_an_error_runs_with_its_message_and_empty_text_runs_nothing():
    device = make(argv=["printf", "%s", "{text}"])
    await feed(device, event("sentence", text=""), event("done", finish_reason="stop", text="x"),
               event("error", code="provider", message="The model is unreachable."), runs=1)
    assert device.last_run["stdout"] == "The model is unreachable."


@pytest.mark.trio
async def test_timeout_kills_reports_and_the_next_event_runs():
    device = make(argv=["sleep", "{text}"], timeout=timeout(0.5))
    await feed(device, event("sentence", text="30"), event("sentence", text="0"), runs=2)
    assert (device.timeouts, device.failures, device.last_run["exit"]) == (1, 0, 0)


@pytest.mark.trio
async def test_a_program_ignoring_sigterm_gets_sigkill_after_the_grace():
    device = make(argv=["sh", "-c", "trap '' TERM; exec sleep 30"], timeout=timeout(0.3))
    await feed(device, event("sentence", text="x"), runs=1)
    assert device.last_run["timed_out"]
    assert device.last_run["seconds"] >= command.KILL_GRACE


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie its new parent has not reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.trio
async def test_the_timeout_kills_the_programs_children_too(tmp_path):
    pid_file = tmp_path / "pid"
    device = make(argv=["sh", "-c", 'sleep 30 & echo $! > "$1"; wait', "sh", "{text}"],
                  timeout=timeout(0.3))
    await feed(device, event("sentence", text=str(pid_file)), runs=1)
    assert device.timeouts == 1
    await until(lambda: gone(int(pid_file.read_text())))


@pytest.mark.trio
async def test_failures_are_counted_and_the_device_goes_on():
    device = make(argv=["false"])
    await feed(device, event("sentence", text="a"), event("sentence", text="b"), runs=2)
    assert (device.failures, device.timeouts, device.last_run["exit"]) == (2, 0, 1)


@pytest.mark.trio
async def test_cancellation_kills_the_running_program(tmp_path):
    pid_file = tmp_path / "pid"
    device = make(argv=["sh", "-c", 'echo $$ > "$1"; exec sleep 30', "sh", "{text}"])
    async with running(device) as inbox:
        await inbox.put(event("sentence", text=str(pid_file)))
        await until(lambda: pid_file.exists() and pid_file.read_text().endswith("\n"))
        cancelled_at = trio.current_time()
    # run_process waits for the program to exit: it was killed, not waited out
    assert trio.current_time() - cancelled_at < timeout(3)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


class _UnlinkOnStart:
    """A task_status that removes the program right after run() checked it."""

    def __init__(self, path) -> None:
        self.path = path

    def started(self, value=None) -> None:
        self.path.unlink()


@pytest.mark.trio
async def test_a_vanished_program_fails_the_device(tmp_path):
    program = tmp_path / "prog"
    program.symlink_to(shutil.which("true"))
    device = make(argv=[str(program)])
    inbox = Inbox(4, Overflow.BLOCK)
    await inbox.put(event("sentence", text="hello"))
    with pytest.raises(FileNotFoundError):
        await device.run(inbox, no_prompt, task_status=_UnlinkOnStart(program))
    assert (device.runs, device.failures) == (1, 1)
    with pytest.raises(FileNotFoundError):  # and it fails at start until it is back
        await device.run(inbox, no_prompt)


@pytest.mark.trio
async def test_tool_argv_renders_arguments_and_returns_stdout():
    device = make((ECHO, FAIL, SLOW), argv=["true"], tool_argv=TOOL_ARGV)
    result = await device.call_tool("echo", {"word": "a b; $(x)", "count": 3, "flag": True,
                                             "ratio": 0.5})
    assert result == "a b; $(x)|3|true|0.5"


@pytest.mark.trio
async def test_tool_failures_are_tool_errors():
    device = make((ECHO, FAIL, SLOW), argv=["true"], tool_argv=TOOL_ARGV, timeout=timeout(0.3))
    with pytest.raises(ToolError, match="exited with status 3: oops$"):
        await device.call_tool("fail", {})
    with pytest.raises(ToolError, match="killed"):
        await device.call_tool("slow", {"seconds": 30})
    with pytest.raises(ToolError, match="needs 'seconds', which was not given"):
        await device.call_tool("slow", {})
    with pytest.raises(ToolError, match="no tool 'nope'"):
        await device.call_tool("nope", {})
    assert device.runs == 0  # tools are not the device's runs


@pytest.mark.trio
@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
async def test_espeak_ng_writes_wav_to_stdout():
    device = make(argv=["espeak-ng", "--stdout", "--", "{text}"], max_output=64)
    await feed(device, event("sentence", text="Hello."), runs=1)
    assert device.last_run["exit"] == 0
    assert device.last_run["stdout"].startswith("RIFF")


BAD_SETTINGS = [
    ({}, "argv"),
    ({"argv": []}, "argv"),
    ({"argv": "cat"}, "argv"),
    ({"argv": ["cat", 3]}, "argv"),
    ({"argv": ["no-such-program-here"]}, "argv"),
    ({"argv": ["bin/cat"]}, "argv"),
    ({"argv": ["{text}"]}, "argv"),
    ({"argv": ["cat", "{nope}"]}, "argv"),
    ({"argv": ["cat", "{text!r}"]}, "argv"),
    ({"argv": ["cat", "{text:>9}"]}, "argv"),
    ({"argv": ["cat", "{text[0]}"]}, "argv"),
    ({"argv": ["cat", "{}"]}, "argv"),
    ({"argv": ["cat", "{text"]}, "argv"),
    ({"argv": ["cat", "}"]}, "argv"),
    ({"argv": ["cat"], "per": "word"}, "per"),
    ({"argv": ["cat"], "stdin": "yes"}, "stdin"),
    ({"argv": ["cat"], "timeout": 0}, "timeout"),
    ({"argv": ["cat"], "timeout": True}, "timeout"),
    ({"argv": ["cat"], "timeout": "5"}, "timeout"),
    ({"argv": ["cat"], "max_output": -1}, "max_output"),
    ({"argv": ["cat"], "max_output": 1.5}, "max_output"),
    ({"argv": ["cat"], "colour": "red"}, "colour"),
    ({"argv": ["cat"], "tool_argv": TOOL_ARGV, "speech": "yes"}, "speech"),
    ({"argv": ["cat"], "tool_argv": TOOL_ARGV, "emoji": "name"}, "emoji"),  # only with speech = true
    ({"argv": ["cat"], "tool_argv": TOOL_ARGV, "speech": True, "emoji": "say"}, "emoji"),
    ({"argv": ["cat"], "tool_argv": TOOL_ARGV, "speech": True, "code_placeholder": "a\nb"}, "code_placeholder"),
    ({"argv": ["cat"], "tool_argv": TOOL_ARGV, "speech": True, "code_placeholder": "x" * 201}, "code_placeholder"),
    ({"argv": ["cat"], "tool_argv": TOOL_ARGV, "speech": True, "speak_tool_calls": 1}, "speak_tool_calls"),
    ({"argv": ["cat"], "tool_argv": TOOL_ARGV, "speech": True, "speak_tool_calls": True}, "speak_tool_calls"),
    ({"argv": ["cat"], "tool_argv": ["echo"]}, "tool_argv"),
    ({"argv": ["cat"], "tool_argv": {**TOOL_ARGV, "other": ["true"]}}, "tool_argv.other"),
    ({"argv": ["cat"], "tool_argv": {"echo": TOOL_ARGV["echo"], "fail": ["false"]}},
     "tool_argv.slow"),
    ({"argv": ["cat"], "tool_argv": {**TOOL_ARGV, "slow": ["sleep", "{text}"]}},
     "tool_argv.slow"),
    ({"argv": ["cat"], "tool_argv": {**TOOL_ARGV, "fail": ["no-such-program-here"]}},
     "tool_argv.fail"),
]


@pytest.mark.parametrize("settings, key", BAD_SETTINGS)
def test_bad_settings_name_their_key(settings, key):
    with pytest.raises(SettingError) as caught:
        make((ECHO, FAIL, SLOW), **settings)
    assert caught.value.key == key



# ---- a program's output is read as it comes, and capped ----

FLOOD = 300_000_000  # bytes of output: held whole, they made a 622 MB peak
# stdout's first bytes, then a flood, stderr's last bytes, as `sh -c` writes them
FLOODER = ["sh", "-c", f"printf head; head -c {FLOOD} /dev/zero; printf 'err:%s' tail >&2"]
FLOOD_TOOL = ToolSpec("flood", "writes without end", {"type": "object", "properties": {}})


@pytest.mark.trio
async def test_output_is_kept_head_and_tail_while_it_is_read():
    """What is kept is stdout's head and stderr's tail, read as they come."""
    device = make(argv=["sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a; "
                                    "printf %s {text}; head -c 100000 /dev/zero >&2; "
                                    "printf end >&2"], max_output=8)
    await feed(device, event("sentence", text="x"), runs=1)
    assert device.last_run["stdout"] == "aaaaaaaa"
    assert device.last_run["stderr"] == "\0\0\0\0\0end"
    assert device.last_run["over_output_cap"] is False and device.failures == 0


@pytest.mark.trio
async def test_a_tool_program_writing_without_end_is_killed_at_the_cap():
    device = make((FLOOD_TOOL,), argv=["true"], tool_argv={"flood": FLOODER},
                  timeout=timeout(60))
    with pytest.raises(ToolError, match=f"^flood: sh wrote more than {command.MAX_OUTPUT_BYTES} "
                                        "bytes of output and was killed$"):
        await device.call_tool("flood", {})


@pytest.mark.trio
async def test_a_speech_program_writing_without_end_is_killed_and_reported():
    device = make(argv=FLOODER, timeout=timeout(60))
    await feed(device, event("sentence", text="Hello."), runs=1)
    assert device.failures == 1 and device.timeouts == 0
    assert device.last_run["over_output_cap"] is True
    assert device.last_run["stdout"] == "head" + "\0" * 4092
    assert device.last_run["exit"] == -9  # SIGKILL, before its stderr's tail was written


def test_a_daemon_whose_programs_flood_their_output_stays_under_memory_high(tmp_path, mock):
    """A real `homeagent serve`: the model calls a tool whose program writes
    300 MB, and the answer's speech program writes 300 MB too. Both are
    killed at MAX_OUTPUT_BYTES; the daemon's peak RSS stays under the unit's
    MemoryHigh."""
    from daemon_harness import MEMORY_HIGH_MIB, Daemon, command_device

    call = json.dumps({"name": "flood", "arguments": "{}"})
    device = command_device("speaker", {"flood": FLOODER},
                            [{"name": "flood", "description": "floods",
                              "parameters": {"type": "object", "properties": {}}}],
                            argv=FLOODER, per="answer", timeout=60)
    daemon = Daemon(tmp_path, mock.url, providers={"mock": {"headers": {
        "x-mock-tool-call": call}}}, extra=device).start()
    try:
        with daemon.client() as client:
            replies = list(client.request("ask", prompt="flood", session="flood"))

        def speaker() -> dict:
            with daemon.client() as client:
                [status] = client.call("status")["devices"]
            return status

        end = time.monotonic() + timeout(60)
        while speaker()["runs"] < 1:  # the answer's speech program ran
            assert time.monotonic() < end, speaker()
            time.sleep(0.05)
        assert daemon.peak_rss_mib("two programs writing 300 MB each") < MEMORY_HIGH_MIB
        assert replies[-1]["type"] == "done", replies
        [result] = [r for r in replies if r["type"] == "tool_result"]
        assert result["is_error"] is True
        assert result["content"] == (f"flood: sh wrote more than {command.MAX_OUTPUT_BYTES} "
                                     "bytes of output and was killed")
        assert speaker()["failures"] == 1 and speaker()["last_run"]["over_output_cap"]
    finally:
        assert daemon.stop() == 0, daemon.log()
