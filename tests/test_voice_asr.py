"""Speech-to-text: the sans-IO Transcription on scripted bytes, and its
shell against a real Wyoming ASR server (tests/wyoming_asr_server.py, on
the `wyoming` package's server classes) in its own process: the audio it
received, the transcript, and each failure named within its bound."""

from __future__ import annotations

import json

import pytest
import trio

import wyoming_asr_server
from agent.voice.asr import AsrError, Failure, Transcription, transcribe
from agent.wyoming.framing import Event, Reader, encode
from conftest import timeout
from helpers import spawn_listening

needs_wyoming = pytest.mark.skipif(
    __import__("importlib").util.find_spec("wyoming") is None,
    reason="the wyoming package is a test dependency")


def events(data: bytes) -> list[Event]:
    return Reader().feed(data)


def test_the_request_is_transcribe_then_audio():
    exchange = Transcription(name="tiny-int8", language="en")
    sent = events(exchange.start() + exchange.audio(b"\x01\x00" * 160)
                  + exchange.audio(b"\x02\x00" * 160) + exchange.stop())
    assert [e.type for e in sent] == ["transcribe", "audio-start", "audio-chunk",
                                      "audio-chunk", "audio-stop"]
    assert sent[0].data == {"name": "tiny-int8", "language": "en"}
    assert sent[1].data == {"rate": 16000, "width": 2, "channels": 1, "timestamp": 0}
    assert sent[3].data["timestamp"] == 10 and sent[3].payload == b"\x02\x00" * 160
    assert sent[4].data == {"timestamp": 20}
    assert Transcription().start().startswith(b'{"type":"transcribe"')


def test_a_transcript_cut_anywhere_is_the_answer():
    wire = encode(Event("info", {"asr": []})) + encode(Event("transcript", {"text": "hello"}))
    for cut in range(len(wire) + 1):
        exchange = Transcription()
        first = exchange.feed(wire[:cut])
        assert (first or exchange.feed(wire[cut:])) == "hello"


def test_a_streamed_transcript_ends_at_its_stop():
    exchange = Transcription()
    wire = b"".join(encode(Event(t, d)) for t, d in (
        ("transcript-start", {}), ("transcript-chunk", {"text": "turn on "}),
        ("transcript-chunk", {"text": "the light"}), ("transcript-stop", {})))
    assert exchange.feed(wire) == "turn on the light"


@pytest.mark.parametrize("wire,failure", [
    (encode(Event("error", {"text": "no model"})), Failure.SERVER_ERROR),
    (b"not json at all\n", Failure.GARBAGE),
    (encode(Event("transcript", {"text": 3})), Failure.GARBAGE),
])
def test_what_is_not_a_transcript_is_named(wire, failure):
    with pytest.raises(AsrError) as caught:
        Transcription().feed(wire)
    assert caught.value.failure is failure


def test_a_close_before_the_transcript_is_named():
    exchange = Transcription()
    exchange.feed(b'{"type":"transcript","data_length":40}\n{"te')
    with pytest.raises(AsrError) as caught:
        exchange.closed()
    assert caught.value.failure is Failure.GARBAGE
    with pytest.raises(AsrError) as caught:
        Transcription().closed()
    assert caught.value.failure is Failure.CLOSED


# ---- against the real server ----

@pytest.fixture
def asr_server(tmp_path):
    """start(*options) -> (address tuple, record dir); stopped at the end."""
    started = []

    def start(*options: str):
        sock = tmp_path / f"asr{len(started)}.sock"
        record = tmp_path / f"record{len(started)}"
        started.append(spawn_listening([wyoming_asr_server.__file__, f"unix://{sock}",
                                        "--record", str(record), *options], sock))
        return ("unix", str(sock), 0), record

    yield start
    for process in started:
        process.kill()
        process.wait()


async def send_audio(address, frames: list[bytes], **kwargs) -> str:
    send, receive = trio.open_memory_channel(len(frames) + 1)
    for frame in frames:
        send.send_nowait(frame)
    await send.aclose()
    with trio.fail_after(timeout(30)):  # never reached: transcribe bounds its own waits
        return await transcribe(address, receive, **{"connect_timeout": timeout(5),
                                                     "answer_timeout": timeout(5), **kwargs})


FRAMES = [bytes([i % 256, 0]) * 160 for i in range(50)]


@needs_wyoming
@pytest.mark.trio
@pytest.mark.parametrize("mode", ["plain", "streaming"])
async def test_the_server_gets_the_audio_and_answers(asr_server, mode):
    address, record = asr_server("--mode", mode, "--say", "turn on the light")
    text = await send_audio(address, FRAMES, language="en")
    assert text.strip() == "turn on the light"
    assert (record / "utterance-0.pcm").read_bytes() == b"".join(FRAMES)
    meta = json.loads((record / "utterance-0.json").read_text())
    assert meta == {"transcribe": {"language": "en"},
                    "format": {"rate": 16000, "width": 2, "channels": 1}}


@needs_wyoming
@pytest.mark.trio
@pytest.mark.parametrize("mode,failure", [("stall", Failure.STALLED),
                                          ("garbage", Failure.GARBAGE),
                                          ("error", Failure.SERVER_ERROR)])
async def test_a_server_that_fails_is_named(asr_server, mode, failure):
    address, _ = asr_server("--mode", mode)
    with pytest.raises(AsrError) as caught:
        await send_audio(address, FRAMES, answer_timeout=0.5)
    assert caught.value.failure is failure


@pytest.mark.trio
async def test_a_server_that_is_not_there_is_unreachable(tmp_path):
    with pytest.raises(AsrError) as caught:
        await send_audio(("unix", str(tmp_path / "nobody.sock"), 0), FRAMES)
    assert caught.value.failure is Failure.UNREACHABLE
    # a listener that never accepts: the connect is bounded too (TCP, a full backlog
    # is not portable); a port nobody listens on is refused at once
    with pytest.raises(AsrError) as caught:
        await send_audio(("tcp", "127.0.0.1", 9), FRAMES)
    assert caught.value.failure is Failure.UNREACHABLE
