"""Wake words heard by a Wyoming wake server (openWakeWord, microWakeWord,
snowboy, porcupine): WakeExchange is the client's protocol, sans-IO;
ServerDetector its trio shell, fed the microphone's frames as wake.Detector
is.

One connection per round of listening: `describe` (the server's `info`
says which wake words it has: one the board names and the server lacks is
logged), `detect` with the names of the board's wake words, `audio-start`,
then an `audio-chunk` for the frames as they come; the server answers
`detection` (the name of what it heard) whenever it hears one, and maybe
`not-detected`, which says nothing here. A reset (a wake word heard, or
audio the detector did not get) ends the connection that has had audio and
opens the next one, so a late detection of the old audio can never count
in the new round.

Every way it can fail is a WakeError with its Failure, as asr.py names
ASR failures: the server cannot be reached (UNREACHABLE), answers no
`describe` or takes no audio for its timeout (STALLED), says `error`
(SERVER_ERROR), closes (CLOSED), or writes what is not the protocol
(GARBAGE). The shell reports each and connects again after a backoff;
meanwhile the board hears no wake word of the server's and the frames are
dropped as they come. Frames wait for the server in a bounded channel:
those it cannot take in time are dropped and counted.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Callable, Sequence

import trio

from agent.voice.asr import ClientError, audio_chunk, audio_start, connect, said
from agent.wyoming import framing

log = logging.getLogger("homeagent.voice")

READ = 65536
# a wake server's info lists its models; it sends no audio
MAX_DATA = 256 * 1024
MAX_PAYLOAD = 4096
MIN_DELAY = 0.5
RESET_AFTER = 10.0   # a connection that lived this long was healthy: the backoff starts over
CHUNK_FRAMES = 10    # frames waiting for the server sent as one audio-chunk, at most


class Failure(enum.Enum):
    UNREACHABLE = "wake_unreachable"
    STALLED = "wake_stalled"
    SERVER_ERROR = "wake_error"
    CLOSED = "wake_closed"
    GARBAGE = "wake_garbage"


class WakeError(ClientError):
    """WakeError(failure: Failure, detail): the wake server failed."""


@dataclass(frozen=True, slots=True)
class Heard:
    """A `detection`: the server's name for it, and the index of the board's
    wake word of that name (None: the board has none)."""
    name: str | None
    index: int | None


@dataclass(frozen=True, slots=True)
class Offered:
    """The server's `info`: the names of its wake words."""
    names: tuple[str, ...]


class WakeExchange:
    """One connection's exchange, sans-IO: describe(), start() and audio()
    give the bytes to send; feed() takes the bytes read and returns what
    they say (Heard, Offered); closed() is the end of the connection."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._reader = framing.Reader(max_data=MAX_DATA, max_payload=MAX_PAYLOAD)
        self.audio_bytes = 0

    def describe(self) -> bytes:
        return framing.encode(framing.Event("describe"))

    def start(self) -> bytes:
        return framing.encode(framing.Event("detect", {"names": list(self.names)})) \
            + framing.encode(audio_start())

    def audio(self, pcm: bytes) -> bytes:
        chunk = audio_chunk(pcm, self.audio_bytes)
        self.audio_bytes += len(pcm)
        return chunk

    def feed(self, data: bytes) -> list[Heard | Offered]:
        out: list[Heard | Offered] = []
        for item in self._reader.feed(data):
            if isinstance(item, framing.FramingError):
                raise WakeError(Failure.GARBAGE, f"{item.problem.value}: {item.detail}")
            if item.type == "detection":
                out.append(self._heard(item))
            elif item.type == "info":
                out.append(Offered(_wake_names(item.data)))
            elif item.type == "error":
                raise WakeError(Failure.SERVER_ERROR, said(item))
        return out

    def closed(self) -> None:
        """The server closed the connection: always a WakeError."""
        for error in self._reader.close():
            raise WakeError(Failure.GARBAGE, f"{error.problem.value}: {error.detail}")
        raise WakeError(Failure.CLOSED, "the server closed the connection")

    def _heard(self, event: framing.Event) -> Heard:
        name = event.data.get("name")
        if name is None:
            # a server that does not name it: the one wake word it was asked for
            return Heard(None, 0 if len(self.names) == 1 else None)
        if not isinstance(name, str):
            raise WakeError(Failure.GARBAGE, f"a detection whose name is not a string: "
                                             f"{name!r:.80}")
        return Heard(name, self.names.index(name) if name in self.names else None)


def _wake_names(info: dict) -> tuple[str, ...]:
    """The names of the models of every wake program in an `info`; what is
    not of that shape is passed over (the server then offers none)."""
    names = []
    programs = info.get("wake")
    for program in programs if isinstance(programs, list) else ():
        models = program.get("models") if isinstance(program, dict) else None
        for model in models if isinstance(models, list) else ():
            if isinstance(model, dict) and isinstance(model.get("name"), str):
                names.append(model["name"])
    return tuple(names)


def _unreachable(detail: str) -> WakeError:
    return WakeError(Failure.UNREACHABLE, detail)


class _Link:
    """The connection of a round: the round it hears for, the scope that ends it."""

    def __init__(self, round_: int, names: Sequence[str]) -> None:
        self.round = round_
        self.exchange = WakeExchange(names)
        self.scope = trio.CancelScope()


class ServerDetector:
    """16 kHz 16-bit mono frames in (feed() never waits); the index of the
    wake word the server heard, or None. run() is the connection's task."""

    def __init__(self, address: tuple[str, str, int], names: Sequence[str], *,
                 connect_timeout: float, stall_timeout: float, max_delay: float,
                 capacity: int, on_failure: Callable[[WakeError], None] = lambda error: None
                 ) -> None:
        self.address = address
        self.names = tuple(names)
        self.connect_timeout = connect_timeout
        self.stall_timeout = stall_timeout
        self.max_delay = max_delay
        self.on_failure = on_failure
        self._frames_in, self._frames_out = trio.open_memory_channel(capacity)
        self._round = 0
        self._link: _Link | None = None
        self._heard: int | None = None
        self._down = False   # backing off after a failure: frames are dropped as they come
        self.state = "connecting"
        self.counts = {"connections": 0, "failures": 0, "detections": 0, "unmatched": 0,
                       "dropped_frames": 0}
        self.last_error: str | None = None
        self.missing: tuple[str, ...] = ()

    # ---- the voice service's side, as wake.Detector ----

    def feed(self, pcm: bytes) -> int | None:
        if not self._down:
            try:
                self._frames_in.send_nowait((self._round, pcm))
            except trio.WouldBlock:
                self.counts["dropped_frames"] += 1
        heard, self._heard = self._heard, None
        return heard

    def reset(self) -> None:
        """A new round: what the server hears of the audio before is not heard."""
        self._round += 1
        self._heard = None
        link = self._link
        if link is not None:
            if link.exchange.audio_bytes:
                link.scope.cancel()
            else:
                link.round = self._round

    # ---- the connection ----

    async def run(self) -> None:
        delay = MIN_DELAY
        since = trio.current_time()   # of connecting after the last failure
        while True:
            try:
                await self._connection()
                continue   # a reset ended the round: the next one's connection at once
            except WakeError as error:
                failure = error
            if trio.current_time() - since >= RESET_AFTER:
                delay = MIN_DELAY
            self._failed(failure, delay)
            await trio.sleep(delay)
            self._down = False
            delay = min(delay * 2, self.max_delay)
            since = trio.current_time()

    def _failed(self, error: WakeError, delay: float) -> None:
        self.state = "failed"
        self.counts["failures"] += 1
        self.last_error = str(error)
        self._down = True
        while True:   # what waited for the dead server is stale
            try:
                self._frames_out.receive_nowait()
            except trio.WouldBlock:
                break
        log.warning("voice: the wake server failed (%s); connecting again in %g s", error, delay)
        self.on_failure(error)

    async def _connection(self) -> None:
        self.state = "connecting"
        link = self._link = _Link(self._round, self.names)
        try:
            with link.scope:
                stream = await connect(self.address, self.connect_timeout, _unreachable)
                async with stream:
                    await self._send(stream, link.exchange.describe())
                    self._offered(await self._info(stream, link.exchange))
                    await self._send(stream, link.exchange.start())
                    self.state = "streaming"
                    self.counts["connections"] += 1
                    await self._stream(stream, link)
        finally:
            self._link = None

    async def _send(self, stream: trio.abc.Stream, data: bytes) -> None:
        try:
            with trio.fail_after(self.stall_timeout):
                await stream.send_all(data)
        except trio.TooSlowError:
            raise WakeError(Failure.STALLED, f"the server took no audio for "
                                             f"{self.stall_timeout:g} s") from None
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as error:
            raise WakeError(Failure.CLOSED, f"sending: {error}") from None

    async def _receive(self, stream: trio.abc.Stream, exchange: WakeExchange
                       ) -> list[Heard | Offered]:
        try:
            data = await stream.receive_some(READ)
        except (OSError, trio.BrokenResourceError) as error:
            raise WakeError(Failure.CLOSED, f"reading: {error}") from None
        if not data:
            exchange.closed()
        return exchange.feed(data)

    async def _info(self, stream: trio.abc.Stream, exchange: WakeExchange) -> Offered:
        with trio.move_on_after(self.connect_timeout):
            while True:
                for item in await self._receive(stream, exchange):
                    if isinstance(item, Offered):
                        return item
        raise WakeError(Failure.STALLED, f"no info within {self.connect_timeout:g} s of "
                                         "describe")

    def _offered(self, offered: Offered) -> None:
        missing = tuple(name for name in self.names if name not in offered.names)
        if missing and missing != self.missing:
            log.warning("voice: the wake server has no wake word %s (it has %s)",
                        ", ".join(map(repr, missing)),
                        ", ".join(map(repr, offered.names[:32])) or "none")
        self.missing = missing

    async def _stream(self, stream: trio.abc.Stream, link: _Link) -> None:
        """Frames to the server, detections from it, until a failure (raised)
        or a reset (the link's scope cancelled)."""
        failed: list[WakeError] = []
        async with trio.open_nursery() as nursery:
            async def read() -> None:
                try:
                    while True:
                        for item in await self._receive(stream, link.exchange):
                            if isinstance(item, Heard):
                                self._heard_one(item, link)
                except WakeError as error:
                    failed.append(error)
                    nursery.cancel_scope.cancel()

            nursery.start_soon(read)
            try:
                await self._send_frames(stream, link)
            except WakeError as error:
                failed.append(error)
            nursery.cancel_scope.cancel()
        if failed:
            raise failed[0]

    async def _send_frames(self, stream: trio.abc.Stream, link: _Link) -> None:
        async for round_, pcm in self._frames_out:
            batch = [pcm] if round_ == self._round else []
            while len(batch) < CHUNK_FRAMES:
                try:
                    round_, pcm = self._frames_out.receive_nowait()
                except trio.WouldBlock:
                    break
                if round_ == self._round:   # else fed before a reset: not to be heard
                    batch.append(pcm)
            if batch:
                await self._send(stream, link.exchange.audio(b"".join(batch)))

    def _heard_one(self, heard: Heard, link: _Link) -> None:
        self.counts["detections"] += 1
        if heard.index is None:
            self.counts["unmatched"] += 1
            log.info("voice: the wake server heard %r, which no wake word names", heard.name)
        elif link.round == self._round and self._heard is None:
            self._heard = heard.index

    def status(self) -> dict:
        kind, host, port = self.address
        return {"address": f"unix:{host}" if kind == "unix" else f"tcp://{host}:{port}",
                "state": self.state, **self.counts, "last_error": self.last_error,
                "missing": list(self.missing)}
