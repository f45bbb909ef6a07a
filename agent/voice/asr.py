"""Speech-to-text through a Wyoming ASR server: Transcription is the
client's protocol, sans-IO; transcribe() is its trio shell.

One connection per utterance: `transcribe` (the model's name and the
language, when configured), `audio-start`, an `audio-chunk` per piece of
audio as it is spoken, `audio-stop`; the server answers `transcript`, and a
newer one first streams `transcript-start`, `transcript-chunk`s and
`transcript-stop`: the utterance is its text at whichever of `transcript`
and `transcript-stop` comes first. Everything else the server may say
(`info`, unknown events) is passed over.

Every way it can fail is an AsrError with its Failure: the server cannot
be reached (UNREACHABLE), does not answer within the time after the audio
ended (STALLED), says `error` (SERVER_ERROR), closes before its answer
(CLOSED), or writes what is not the protocol (GARBAGE). The shell bounds
every wait: connecting, each write, and the answer.
"""

from __future__ import annotations

import enum
import math
from typing import Callable

import trio

from agent.voice.audio import TARGET
from agent.wyoming import framing

READ = 65536
# a transcript is text: far below the framing's default, which allows a voice list
MAX_DATA = 256 * 1024


class Failure(enum.Enum):
    UNREACHABLE = "asr_unreachable"
    STALLED = "asr_stalled"
    SERVER_ERROR = "asr_error"
    CLOSED = "asr_closed"
    GARBAGE = "asr_garbage"


class ClientError(Exception):
    """A Wyoming client's failure: ClientError(failure, detail), what went
    wrong, named by an enum member, and the detail."""

    @property
    def failure(self) -> enum.Enum:
        return self.args[0]

    @property
    def detail(self) -> str:
        return self.args[1]

    def __str__(self) -> str:
        return f"{self.failure.value}: {self.detail}"


class AsrError(ClientError):
    """AsrError(failure: Failure, detail): speech-to-text failed."""


_AUDIO = {"rate": TARGET.rate, "width": TARGET.width, "channels": TARGET.channels}


def audio_start() -> framing.Event:
    return framing.Event("audio-start", {**_AUDIO, "timestamp": 0})


def audio_chunk(pcm: bytes, sent: int) -> bytes:
    """An audio-chunk of 16 kHz mono, stamped with the time of the `sent`
    bytes of audio before it (its audio-start's: 0)."""
    timestamp = sent * 1000 // TARGET.bytes_per_second
    return framing.encode(framing.Event("audio-chunk", {**_AUDIO, "timestamp": timestamp}, pcm))


class Transcription:
    """One utterance's exchange, sans-IO: start(), audio() and stop() give
    the bytes to send; feed() takes the bytes read and returns the text once
    it is known (None before); closed() is the end of the connection."""

    def __init__(self, name: str | None = None, language: str | None = None) -> None:
        self._reader = framing.Reader(max_data=MAX_DATA, max_payload=MAX_DATA)
        self._transcribe = {k: v for k, v in (("name", name), ("language", language)) if v}
        self.chunks: list[str] = []   # streamed so far
        self.text: str | None = None
        self.audio_bytes = 0

    def start(self) -> bytes:
        return framing.encode(framing.Event("transcribe", self._transcribe)) \
            + framing.encode(audio_start())

    def audio(self, pcm: bytes) -> bytes:
        chunk = audio_chunk(pcm, self.audio_bytes)
        self.audio_bytes += len(pcm)
        return chunk

    def stop(self) -> bytes:
        timestamp = self.audio_bytes * 1000 // TARGET.bytes_per_second
        return framing.encode(framing.Event("audio-stop", {"timestamp": timestamp}))

    def feed(self, data: bytes) -> str | None:
        if self.text is not None:
            return self.text
        for item in self._reader.feed(data):
            if isinstance(item, framing.FramingError):
                raise AsrError(Failure.GARBAGE, f"{item.problem.value}: {item.detail}")
            text = self._event(item)
            if text is not None:
                self.text = text
                return text
        return None

    def closed(self) -> None:
        """The server closed the connection: raises AsrError unless it answered."""
        if self.text is not None:
            return
        for error in self._reader.close():
            raise AsrError(Failure.GARBAGE, f"{error.problem.value}: {error.detail}")
        raise AsrError(Failure.CLOSED, "the server closed the connection before its "
                                       "transcript")

    def _event(self, event: framing.Event) -> str | None:
        if event.type == "transcript":
            return _text(event, "transcript")
        if event.type == "transcript-start":
            self.chunks.clear()
        elif event.type == "transcript-chunk":
            self.chunks.append(_text(event, "transcript-chunk"))
        elif event.type == "transcript-stop":
            return "".join(self.chunks)
        elif event.type == "error":
            raise AsrError(Failure.SERVER_ERROR, said(event))
        return None


def said(error: framing.Event) -> str:
    """What a server's `error` event says."""
    text = error.data.get("text")
    return text if isinstance(text, str) and text else f"the server said error: {dict(error.data)}"


def _text(event: framing.Event, kind: str) -> str:
    text = event.data.get("text")
    if not isinstance(text, str):
        raise AsrError(Failure.GARBAGE, f"{kind} without a text string: {dict(event.data)}")
    return text


def _unreachable(detail: str) -> AsrError:
    return AsrError(Failure.UNREACHABLE, detail)


async def connect(address: tuple[str, str, int], timeout: float,
                  unreachable: Callable[[str], Exception] = _unreachable) -> trio.abc.Stream:
    """A connection to a Wyoming server within `timeout`, or the exception
    unreachable(why) makes: the wake server's client names its own."""
    kind, host, port = address
    try:
        with trio.fail_after(timeout):
            if kind == "unix":
                return await trio.open_unix_socket(host)
            return await trio.open_tcp_stream(host, port)
    except trio.TooSlowError:
        raise unreachable(f"no connection within {timeout:g} s") from None
    except OSError as error:
        raise unreachable(error.strerror or str(error)) from None


async def transcribe(address: tuple[str, str, int], audio: trio.abc.ReceiveChannel,
                     *, connect_timeout: float, answer_timeout: float,
                     name: str | None = None, language: str | None = None,
                     on_connected=None) -> str:
    """The text of the utterance whose 16 kHz mono frames come on `audio`,
    sent as they come; the channel's end is the utterance's. Raises AsrError."""
    exchange = Transcription(name, language)
    stream = await connect(address, connect_timeout)
    if on_connected is not None:
        on_connected()
    failed: list[AsrError] = []
    async with stream:
        async with trio.open_nursery() as nursery:
            reading = trio.CancelScope()

            async def send(data: bytes) -> None:
                # a server that stops reading holds the write: bounded as its answer is
                with trio.fail_after(answer_timeout):
                    await stream.send_all(data)

            async def sender() -> None:
                try:
                    async with audio:  # closed however this ends: the door sees it
                        await send(exchange.start())
                        async for pcm in audio:
                            await send(exchange.audio(pcm))
                    await send(exchange.stop())
                except trio.TooSlowError:
                    failed.append(AsrError(Failure.STALLED, "the server took no audio for "
                                                            f"{answer_timeout:g} s"))
                    reading.cancel()
                    return
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as error:
                    failed.append(AsrError(Failure.CLOSED, f"sending audio: {error}"))
                    reading.cancel()
                    return
                reading.deadline = trio.current_time() + answer_timeout

            nursery.start_soon(sender)
            text = None
            with reading:
                reading.deadline = math.inf
                try:
                    while text is None:
                        data = await stream.receive_some(READ)
                        if not data:
                            exchange.closed()
                        text = exchange.feed(data)
                except (OSError, trio.BrokenResourceError) as error:
                    failed.append(AsrError(Failure.CLOSED, f"reading: {error}"))
                except AsrError as error:
                    failed.append(error)
            nursery.cancel_scope.cancel()
    if failed:
        raise failed[0]
    if text is None:
        raise AsrError(Failure.STALLED, f"no transcript within {answer_timeout:g} s of the "
                                        "end of the audio")
    return text
