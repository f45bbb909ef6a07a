"""The main job: `homeagent demo` starts the mock model server and the
daemon, asks over the socket and streams the answers; and `homeagent decode`."""

import subprocess
import sys

from agent.mock_llm import scripts, wire
from conftest import timeout


def test_demo_runs_the_daemon_against_the_mock_and_stops_both_cleanly():
    result = subprocess.run([sys.executable, "-m", "agent.cli", "demo"], capture_output=True,
                            text=True, timeout=timeout(120))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "READY=1" in out
    # The three default questions: reasoning then its answer, Chinese, German.
    assert f"[reasoning] {scripts.REASONING}\n{scripts.REASONED}\n" in out
    assert f"{scripts.CHINESE}\n" in out
    assert f"{scripts.GERMAN}\n" in out
    assert "session 'demo' keeps 6 turns" in out
    assert "daemon stopped (exit status 0)" in out
    assert "mock-llm stopped (exit status 0)" in out


def test_demo_asks_a_given_question():
    result = subprocess.run([sys.executable, "-m", "agent.cli", "demo", "Any emoji?"],
                            capture_output=True, text=True, timeout=timeout(120))
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
