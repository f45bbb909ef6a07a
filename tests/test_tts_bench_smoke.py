"""Smoke test of bench/tts_bench.py: its pipelining and sentence-end
arithmetic on made-up reads, and one round end to end (a real mock model,
three daemons, two espeak-ng Wyoming servers) checked for structure and
sanity; audio that is not what espeak-ng makes fails the run. No timing
is asserted."""

from __future__ import annotations

import json
import shutil

import pytest

import bench_module

tb = bench_module.load("tts_bench.py")


def test_the_sentence_ends_with_the_whitespace_after_it():
    deltas = [(1, "Hi the"), (2, "re."), (3, " Next"), (4, " one.")]
    assert tb.first_sentence_end(deltas, "Hi there.") == 3
    with pytest.raises(tb.BenchError):
        tb.first_sentence_end([(1, "Other.")], "Hi there.")


def test_pipelining_is_the_lead_of_each_sentence_over_the_playback():
    second = 1_000_000_000  # ns; 100 bytes a second below
    # sentence 0 (100 bytes: 1 s) at t=0, sentence 1 (50 bytes) at 0.3 s,
    # sentence 2 (50 bytes) at 2 s: 0.5 s after sentence 1 stopped playing
    reads = [(0, 60), (second // 10, 40), (3 * second // 10, 50), (2 * second, 50)]
    assert tb.pipelining(reads, [100, 50, 50], 100) == [700.0, -500.0]
    # two sentences in one read arrive together
    assert tb.pipelining([(0, 100), (second, 150)], [100, 50, 100], 100) == [0.0, 500.0]
    with pytest.raises(tb.BenchError):
        tb.pipelining([(0, 100)], [100, 50], 100)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")
def test_one_round_end_to_end(capsys):
    assert tb.main(["--rounds", "1", "--warmup", "0", "--json"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert "baseline / first audio" in err and "pipelining" in err  # the table
    assert set(result["paths"]) == set(tb.PATHS)
    for name in tb.PATHS:
        (sample,) = result["samples"][name]
        assert sample["first_audio_ms"] > 0 and sample["synthesis_ms"] > 0
        assert sample["answer_ms"] > sample["first_audio_ms"] or name == "baseline"
    for name in ("streaming", "sentence"):
        (sample,) = result["samples"][name]
        assert 0 < sample["first_sentence_ms"] < sample["first_audio_ms"]
        assert len(sample["leads_ms"]) == len(tb.SENTENCES) - 1
        assert result["paths"][name]["speedup"]["median"] > 0


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")
def test_audio_that_is_not_espeak_ngs_fails_the_run(monkeypatch, capsys):
    real = tb.tts_server.espeak_pcm

    def other(text):  # what the bench expects differs from what the servers make
        rate, width, channels, pcm = real(text)
        return rate, width, channels, pcm[:-2] + b"\x00\x01"

    monkeypatch.setattr(tb.tts_server, "espeak_pcm", other)
    assert tb.main(["--rounds", "1", "--warmup", "0"]) == 1
    assert "did not get the sentences' audio in order" in capsys.readouterr().err
