"""Smoke test of bench/voice_bench.py: `--quick --json` end to end (two
daemons with and without [voice], the two peer loops, the ASR server, the
espeak-ng TTS servers, the voice daemon woken and answering once) checked
for the output's shape; the peer loop and the bench's microphone alone on
a little audio; the callgrind round on two groups where valgrind is. No
figure is asserted."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys

import pytest

import bench_module
from test_voice_daemon import REAL_TIME
from voice_audio import needs_espeak, needs_voice

pytestmark = [needs_voice, needs_espeak,
              pytest.mark.skipif(importlib.util.find_spec("wyoming") is None,
                                 reason="the wyoming package (a test dependency) runs the "
                                        "TTS servers")]

vb = bench_module.load("voice_bench.py")


def test_the_peer_loop_takes_audio_to_its_end():
    pcm = vb.noise(0.5) + vb.silence(0.3)
    done = subprocess.run([sys.executable, vb.__file__, "--peer"], input=pcm,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert b"wakes 0" in done.stderr


def test_the_microphone_plays_silence_until_its_cue_then_the_clip(tmp_path):
    clip = vb.noise(0.1)
    wav, cue = str(tmp_path / "clip.wav"), str(tmp_path / "go")
    vb.write_wav(wav, clip)
    vb.go(cue, lead=0.0)
    step = 2 * vb.RATE * vb.MIC_MS // 1000
    mic = subprocess.Popen(vb.bench_mic(sys.executable, 4.0, vb.MIC_MS, cue, wav),
                           stdout=subprocess.PIPE)
    try:
        played = mic.stdout.read(step + 2 * len(clip))
    finally:
        mic.kill()
        mic.wait()
        mic.stdout.close()
    # one group of silence before it reads the cue, then the clip over and over
    assert played == bytes(step) + clip + clip


@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("callgrind_control") is None,
                    reason="valgrind (callgrind) is not installed")
@pytest.mark.not_emulated(reason="valgrind runs the host's binaries; the emulated python is "
                                 "an aarch64 one under qemu")
def test_the_callgrind_round_counts_every_listener(tmp_path):
    mock, url = vb.db.start_mock(sys.executable)
    try:
        counted = vb.instructions(sys.executable, str(tmp_path), url,
                                  str(tmp_path / "asr.sock"), groups=2)
    finally:
        vb.terminate(mock, vb.db.START_TIMEOUT)
    assert set(counted["instructions_per_s"]) == set(vb.CALLGRIND_NAMES)
    assert all(count > 0 for count in counted["instructions_per_s"].values())
    assert counted["audio_seconds"] == 2 * vb.GROUP_MS / 1000


# its voice daemon must hear "okay nabu" from a microphone in real time; the
# emulated figures are bench/README.md's, from a run on an unloaded machine
@REAL_TIME
def test_quick_run_has_every_figure(capsys):
    assert shutil.which("espeak-ng")
    assert vb.main(["--quick", "--json"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert "daemon / peer" in err and "sequential / voice" in err  # the table
    cost = result["listening"]
    assert set(cost["cpu_ms_per_s"]) == set(vb.COST_NAMES)
    for name in vb.COST_NAMES:
        assert len(cost["samples"][name]) == result["config"]["rounds"]
        assert cost["rss_mib"][name] > 0
    for key in ("median", "min", "max"):
        assert key in cost["daemon_over_peer"] and key in cost["daemon_over_peer_wake"]
    assert isinstance(cost["cost_met"], bool) and isinstance(cost["rss_met"], bool)
    assert isinstance(cost["same_work_met"], bool)
    assert result["instructions"] is None   # --quick has no callgrind round
    latency = result["latency"]
    (voice,) = latency["samples"]["voice"]
    (sequential,) = latency["samples"]["sequential"]
    assert voice["first_audio_ms"] > 0 and sequential["first_audio_ms"] > 0
    assert voice["from_speech_end_ms"] > voice["first_audio_ms"] > voice["asr_ms"] > 0
    assert sequential["answer_ms"] > sequential["first_sentence_ms"] > 0
    assert latency["sequential_over_voice"]["median"] > 0 and latency["within_bound"] in (0, 1)
    assert latency["sequential_over_voice_from_speech_end"]["median"] > 0
