"""The main job: `homeagent demo` starts the mock model server, a virtual
relay board on a pty and the daemon, asks over the socket and streams the
answers, one of them through a tool call to the board; and `homeagent decode`."""

import subprocess
import sys

from agent.mock_llm import scripts, wire
from conftest import timeout

# The demo starts its servers with sys.executable. Under qemu-user that is
# the aarch64 interpreter itself, which cannot be exec'd from inside the
# emulation: the command gets the wrapper the tests run under instead (on
# the host sys.executable is passed unchanged).
_MAIN = "import sys; sys.executable = sys.argv[1]; from agent.cli import main; " \
        "sys.exit(main(sys.argv[2:]))"


def homeagent(*args: str) -> list[str]:
    """argv of `homeagent ARGS` as a subprocess."""
    return [sys.executable, "-c", _MAIN, sys.executable, *args]


def test_demo_runs_the_daemon_against_the_mock_and_stops_both_cleanly():
    result = subprocess.run(homeagent("demo"), capture_output=True, text=True,
                            timeout=timeout(120))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "READY=1" in out
    # The default questions: reasoning then its answer, Chinese, German, a relay.
    assert f"[reasoning] {scripts.REASONING}\n{scripts.REASONED}\n" in out
    assert f"{scripts.CHINESE}\n" in out
    assert f"{scripts.GERMAN}\n" in out
    # The relay: the model's tool call reaches the virtual board over the pty,
    # the board's answer goes back to the model, which confirms it.
    assert "\n[tool call set_relay({\"channel\": 2, \"on\": true})]\n" in out
    assert "[relay board] CALL 1 RELAY 2 true -> OK 1 relay 2 is on" in out
    assert "[tool result set_relay: relay 2 is on]" in out
    assert f"{scripts.confirmation('relay 2 is on')}\n" in out
    # Sentences reached the board's display, the text before the call first.
    assert out.index("[relay board display] Switching channel 2 on.") < out.index(
        "[relay board] CALL 1")
    assert f"[relay board display] {scripts.GERMAN.split('. ')[0]}." in out
    # user, assistant (tool call), tool result, assistant: 4 turns for the relay
    assert "session 'demo' keeps 10 turns" in out
    assert "daemon stopped (exit status 0)" in out
    assert "mock-llm stopped (exit status 0)" in out


def test_demo_asks_a_given_question():
    result = subprocess.run(homeagent("demo", "Any emoji?"), capture_output=True, text=True,
                            timeout=timeout(120))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"> Any emoji?\n{scripts.EMOJI}\n" in result.stdout
    assert "session 'demo' keeps 2 turns" in result.stdout


def test_decode_command_reads_a_body_from_stdin():
    answer = scripts.Answer(scripts.GERMAN)
    body = b"".join(wire.ChatCompletions.stream(answer, wire.Turn(model="m", seed="demo", input_tokens=3)))
    result = subprocess.run([sys.executable, "-m", "agent.cli", "decode", "-", "--read-size", "7"],
                            input=body, capture_output=True, timeout=timeout(60))
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    assert out.count("TextDelta(") >= 2
    assert out.rstrip().endswith("StreamEnd(sentinel='[DONE]')")
