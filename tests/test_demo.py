"""The main job until the daemon lands: `homeagent demo`, and `homeagent decode`."""

import subprocess
import sys

from agent import demo
from agent.stream import Protocol, StreamDecoder
from agent.stream import events as ev

EXPECTED_ANSWER = "".join(demo._ANSWER)


def _text(events):
    return "".join(e.text for e in events if isinstance(e, ev.TextDelta))


def test_demo_command_prints_the_decoded_answer():
    result = subprocess.run([sys.executable, "-m", "agent.cli", "demo"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"answer:    {EXPECTED_ANSWER}" in result.stdout
    assert ('tool call 0: read_sensor({"room": "living room"}) -> parsed {\'room\': \'living room\'}'
            in result.stdout)
    assert "finish:    stop (raw 'stop')" in result.stdout
    assert "problem" not in result.stdout


def test_demo_stream_decodes_the_same_at_every_split_point():
    body = demo.sample_stream()
    for cut in range(len(body) + 1):
        decoder = StreamDecoder(Protocol.OPENAI_CHAT)
        events = decoder.feed(body[:cut]) + decoder.feed(body[cut:]) + decoder.close()
        assert _text(events) == EXPECTED_ANSWER, cut
        assert events[-1] == ev.StreamEnd("[DONE]"), cut


def test_decode_command_reads_a_body_from_stdin():
    body = demo.sample_stream()
    result = subprocess.run([sys.executable, "-m", "agent.cli", "decode", "-", "--read-size", "7"],
                            input=body, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    assert "ToolCallStart(index=0, tool_index=0, call_id='call_demo_1', name='read_sensor'" in out
    assert out.rstrip().endswith("StreamEnd(sentinel='[DONE]')")
