"""WyomingSpeech: the answer spoken through a Wyoming TTS server while it
streams, its audio played on the board.

A server that advertises `supports_synthesize_streaming` in its info gets
the answer's text as it arrives: `synthesize-start`, a `synthesize-chunk`
per delta, then the whole text in one `synthesize` (what the protocol asks
for older servers, which a streaming one ignores) and `synthesize-stop`; it
flushes audio at each sentence it sees. Any other server gets one
`synthesize` per sentence of the segmenter, sent as soon as the sentence is
complete: the server works on sentence n+1 while n plays.

One task reads the server's events and hands their audio to the sink
through a buffer bounded by `max_buffered_seconds` of audio: when it is
full, reading stops and TCP holds the server back. Reasoning is never
spoken (the device does not take `reasoning` events).

Settings (the device's own keys):
- address: "tcp://HOST:PORT" or "unix:PATH", the server.
- voice, speaker, language: sent as the synthesize event's voice.
- streaming: "auto" (default: as the server's info says), true or false.
- sink: "aplay" (default: ALSA's aplay on `alsa_device`) or "file" (raw PCM
  appended to `path`, for a pipe or a recorder).
- alsa_device: the ALSA device name for aplay (default "default").
- path: the file of the "file" sink.
- connect_timeout: seconds to connect and have the server's info (10).
- max_buffered_seconds: audio held ahead of the sink (30).

Stop (silence()): a stop that concerns what the device says kills the
player at once (aplay is sent SIGKILL, a file is closed), drops the audio
buffered for it and connects to the server anew, so that whatever the server
still sends for the old requests is never read; what other asks queue after
it is spoken as usual.

A connection the server closes, a framing error or a server that does not
answer `describe` raise out of run(): the hub reports the device failed and
connects again after its backoff; the answer still reaches every other
device, and what this device missed is counted as dropped.
"""

from __future__ import annotations

import logging
import math
import shutil
from dataclasses import dataclass
from typing import Any, Mapping

import trio

from agent import wyoming
from agent.devices.base import Common, Device, Event, Inbox, Prompt, SettingError, refuse_unknown
from agent.devices.hub import request_key
from agent.jsontypes import is_type

log = logging.getLogger("homeagent.devices")

_KEYS = frozenset({"address", "voice", "speaker", "language", "streaming", "sink",
                   "alsa_device", "path", "connect_timeout", "max_buffered_seconds"})
_READ = 65536
# sample width in bytes -> aplay's format name (Wyoming audio is little-endian PCM)
_APLAY_FORMATS = {1: "U8", 2: "S16_LE", 3: "S24_3LE", 4: "S32_LE"}


class TTSServerError(ConnectionError):
    """The server broke the protocol or the connection: the device restarts."""


@dataclass(frozen=True, slots=True)
class AudioFormat:
    rate: int
    width: int
    channels: int

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> AudioFormat:
        values = [data.get(name) for name in ("rate", "width", "channels")]
        if not all(is_type(v, int) and v > 0 for v in values) or values[1] not in _APLAY_FORMATS:
            raise TTSServerError(f"audio format not understood: {dict(data)}")
        return cls(*values)

    @property
    def bytes_per_second(self) -> int:
        return self.rate * self.width * self.channels


class _Audio:
    """The bounded buffer between the server reader and the sink player:
    (format, pcm) chunks and None at each audio-stop."""

    def __init__(self, max_seconds: float) -> None:
        self.max_seconds = max_seconds
        # bounded by the seconds of audio held, below, not by a count
        self.send, self.receive = trio.open_memory_channel(math.inf)
        self._held = 0.0
        self._room = trio.Condition()

    async def put(self, fmt: AudioFormat, pcm: bytes) -> None:
        seconds = len(pcm) / fmt.bytes_per_second
        async with self._room:
            while self._held and self._held + seconds > self.max_seconds:
                await self._room.wait()
            self._held += seconds
        await self.send.send((fmt, pcm, seconds))

    async def end(self) -> None:
        await self.send.send(None)

    async def played(self, seconds: float) -> None:
        async with self._room:
            self._held -= seconds
            self._room.notify_all()


class WyomingSpeech(Device):
    kind = "wyoming-tts"
    DEFAULT_EVENTS = frozenset({"sentence", "delta", "done", "error"})
    speaks = True

    def __init__(self, common: Common, address: tuple[str, str, int], *, voice: dict,
                 streaming: bool | None, sink: str, alsa_device: str, path: str | None,
                 connect_timeout: float, max_buffered_seconds: float) -> None:
        super().__init__(common)
        self.address, self.voice, self.streaming = address, voice, streaming
        self.sink, self.alsa_device, self.path = sink, alsa_device, path
        self.connect_timeout = connect_timeout
        self.max_buffered_seconds = max_buffered_seconds
        self.connected = False
        self.server_streams: bool | None = None  # from its info
        self.sentences = self.answers = 0       # synthesize requests sent, streamed answers
        self.audio_bytes = 0                     # PCM handed to the sink
        self.stops = 0                           # silence() calls that cut speech off
        self.audio_after_stop = 0                # PCM the sink took after the last of them
        # This connection's state, for silence(): the requests whose text it
        # carries (from their first event to their done or error), the
        # requests the server has still to answer, the player, the audio buffer.
        self._connection = trio.CancelScope()
        self._carried: set[tuple] = set()
        self._awaiting = 0
        self._streams = False
        self._player: _Sink | None = None
        self._audio: _Audio | None = None
        self._stopped = False  # since the last silence(), on this connection

    @classmethod
    def from_settings(cls, common: Common, settings: Mapping[str, Any]) -> WyomingSpeech:
        refuse_unknown(settings, _KEYS)
        if "address" not in settings:
            raise SettingError("address", 'required: "tcp://HOST:PORT" or "unix:PATH"')
        try:
            address = wyoming.parse_address(settings["address"])
        except ValueError as error:
            raise SettingError("address", str(error)) from None
        voice = {}
        for key in ("voice", "speaker", "language"):
            value = settings.get(key)
            if value is not None and not (isinstance(value, str) and value):
                raise SettingError(key, "must be a non-empty string")
            if value is not None:
                voice["name" if key == "voice" else key] = value
        streaming = settings.get("streaming", "auto")
        if streaming not in ("auto", True, False):
            raise SettingError("streaming", '"auto", true or false')
        sink = settings.get("sink", "aplay")
        if sink not in ("aplay", "file"):
            raise SettingError("sink", '"aplay" or "file"')
        path = settings.get("path")
        if sink == "file" and not (isinstance(path, str) and path.startswith("/")):
            raise SettingError("path", 'required by sink = "file": an absolute path')
        alsa_device = settings.get("alsa_device", "default")
        if not (isinstance(alsa_device, str) and alsa_device and not alsa_device.startswith("-")):
            raise SettingError("alsa_device", "an ALSA device name such as \"default\" or "
                                              "\"plughw:CARD=Headphones\"")
        numbers = {}
        for key, default in (("connect_timeout", 10.0), ("max_buffered_seconds", 30.0)):
            value = settings.get(key, default)
            if not is_type(value, (int, float)) or not value > 0:
                raise SettingError(key, "must be a positive number of seconds")
            numbers[key] = float(value)
        return cls(common, address, voice=voice,
                   streaming=None if streaming == "auto" else streaming, sink=sink,
                   alsa_device=alsa_device, path=path, **numbers)

    # ---- the connection ----

    async def _connect(self) -> trio.abc.Stream:
        family, host, port = self.address
        if family == "unix":
            return await trio.open_unix_socket(host)
        return await trio.open_tcp_stream(host, port)

    async def run(self, inbox: Inbox, prompt: Prompt,
                  task_status=trio.TASK_STATUS_IGNORED) -> None:
        if self.sink == "aplay" and shutil.which("aplay") is None:
            raise FileNotFoundError("aplay not found (Debian package alsa-utils)")
        while True:
            self._connection = trio.CancelScope()
            self._carried, self._awaiting, self._stopped = set(), 0, False
            with self._connection:
                await self._speak(_Noting(inbox, self._carried), task_status)
            # silence() ended the connection: a new one, with nothing of the old
            task_status = trio.TASK_STATUS_IGNORED

    async def _speak(self, inbox: "_Noting", task_status) -> None:
        with trio.fail_after(self.connect_timeout):
            stream = await self._connect()
        async with stream:
            reader = wyoming.Reader()
            await stream.send_all(wyoming.encode(wyoming.Event("describe")))
            with trio.fail_after(self.connect_timeout):
                info = await self._until(stream, reader, "info")
            self.server_streams = any(
                isinstance(p, dict) and p.get("supports_synthesize_streaming") is True
                for p in info.data.get("tts", []) if isinstance(info.data.get("tts"), list))
            streams = self.server_streams if self.streaming is None else self.streaming
            self._streams = streams
            self.connected = True
            log.info("device %s: connected to the TTS server (%s)", self.name,
                     "streaming" if streams else "a synthesize per sentence")
            try:
                audio = self._audio = _Audio(self.max_buffered_seconds)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read_audio, stream, reader, audio)
                    nursery.start_soon(self._play, audio)
                    task_status.started()
                    await self._send_text(stream, inbox, streams)
            finally:
                self.connected = False

    async def _until(self, stream, reader: wyoming.Reader, kind: str) -> wyoming.Event:
        while True:
            for event in await self._receive(stream, reader):
                if event.type == kind:
                    return event

    async def _receive(self, stream, reader: wyoming.Reader) -> list[wyoming.Event]:
        data = await stream.receive_some(_READ)
        items = reader.feed(data) if data else reader.close()
        for item in items:
            if type(item) is wyoming.FramingError:
                raise TTSServerError(f"the TTS server broke the Wyoming framing: "
                                     f"{item.problem.value}: {item.detail}")
        if not data:
            raise TTSServerError("the TTS server closed the connection")
        return items

    # ---- text out ----

    async def _send_text(self, stream, inbox: Inbox, streams: bool) -> None:
        voice = {"voice": self.voice} if self.voice else {}
        open_answers: dict[tuple, list[str]] = {}  # request -> its deltas so far
        async for event in inbox:
            key = tuple(sorted(event.request.items()))
            if streams and event.type == "delta" and event.text:
                if key not in open_answers:
                    open_answers[key] = []
                    await self._send(stream, "synthesize-start", voice)
                open_answers[key].append(event.text)
                await self._send(stream, "synthesize-chunk", {"text": event.text})
            elif streams and event.type in ("done", "error") and key in open_answers:
                text = "".join(open_answers.pop(key))
                await self._send(stream, "synthesize", {"text": text, **voice})
                await self._send(stream, "synthesize-stop", {})
                self.answers += 1
            elif not streams and event.type == "sentence" and event.text.strip():
                await self._send(stream, "synthesize", {"text": event.text, **voice})
                self.sentences += 1

    async def _send(self, stream, kind: str, data: dict) -> None:
        await stream.send_all(wyoming.encode(wyoming.Event(kind, data)))
        self._awaiting += kind == ("synthesize-start" if self._streams else "synthesize")

    # ---- audio in and out ----

    async def _read_audio(self, stream, reader: wyoming.Reader, audio: _Audio) -> None:
        fmt: AudioFormat | None = None
        while True:
            for event in await self._receive(stream, reader):
                if event.type == "audio-start":
                    fmt = AudioFormat.of(event.data)
                elif event.type == "audio-chunk" and event.payload:
                    chunk_fmt = AudioFormat.of(event.data) if "rate" in event.data else fmt
                    if chunk_fmt is None:
                        raise TTSServerError("audio-chunk before audio-start")
                    await audio.put(chunk_fmt, event.payload)
                elif event.type == "audio-stop":
                    await audio.end()
                if event.type == ("synthesize-stopped" if self._streams else "audio-stop"):
                    self._awaiting = max(0, self._awaiting - 1)
                elif event.type == "error":
                    log.warning("device %s: the TTS server reported: %s", self.name,
                                event.data.get("text", event.data))

    async def _play(self, audio: _Audio) -> None:
        try:
            async for item in audio.receive:
                if item is None:
                    await self._close_player()
                    continue
                fmt, pcm, seconds = item
                if self._player is not None and self._player.format != fmt:
                    await self._close_player()
                if self._player is None:
                    self._player = await self._open_sink(fmt)
                await self._player.write(pcm)
                self.audio_bytes += len(pcm)
                if self._stopped:
                    self.audio_after_stop += len(pcm)
                await audio.played(seconds)
        finally:
            with trio.CancelScope(shield=True):
                await self._close_player()

    async def _close_player(self) -> None:
        player, self._player = self._player, None
        if player is not None:
            await player.aclose()

    # ---- stop ----

    def _quiet(self) -> bool:
        """Nothing to play, nothing playing, nothing asked of the server."""
        queued = self._audio is not None and self._audio.receive.statistics().current_buffer_used
        return not (self._awaiting or self._player is not None or queued)

    def silence(self, requests: frozenset | None) -> bool:
        saying = self._carried if requests is None else requests & self._carried
        if not saying and (requests is not None or self._quiet()):
            return False
        if self._player is not None:
            self._player.kill()  # now: not at the end of what it has buffered
        self._connection.cancel()
        self._stopped = True
        self.stops += 1
        self.audio_after_stop = 0
        return True

    async def _open_sink(self, fmt: AudioFormat) -> _Sink:
        if self.sink == "file":
            return _FileSink(fmt, await trio.open_file(self.path, "ab"))
        argv = ["aplay", "-q", "-D", self.alsa_device, "-t", "raw",
                "-f", _APLAY_FORMATS[fmt.width], "-r", str(fmt.rate), "-c", str(fmt.channels)]
        process = await trio.lowlevel.open_process(argv, stdin=-1)
        return _AplaySink(fmt, process)

    def status(self) -> dict[str, Any]:
        family, host, port = self.address
        return {"address": f"tcp://{host}:{port}" if family == "tcp" else f"unix:{host}",
                "connected": self.connected, "server_streams": self.server_streams,
                "sentences": self.sentences, "answers": self.answers,
                "audio_bytes": self.audio_bytes, "stops": self.stops,
                "audio_after_stop": self.audio_after_stop}


class _Noting:
    """A device's inbox as _send_text reads it, noting the requests whose
    text the connection carries: from their first event until their done or
    error has been handled."""

    def __init__(self, inbox: Inbox, carried: set) -> None:
        self._inbox, self._carried = inbox, carried
        self._ended: tuple | None = None

    def __aiter__(self):
        return self

    async def __anext__(self) -> Event:
        self._carried.discard(self._ended)
        event = await self._inbox.get()
        key = request_key(event.request)
        self._carried.add(key)
        self._ended = key if event.type in ("done", "error") else None
        return event


class _Sink:
    format: AudioFormat

    async def write(self, pcm: bytes) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        """Stop playing at once, before aclose() (a stop); a file needs nothing."""


class _FileSink(_Sink):
    def __init__(self, fmt: AudioFormat, file) -> None:
        self.format, self._file = fmt, file

    async def write(self, pcm: bytes) -> None:
        await self._file.write(pcm)

    async def aclose(self) -> None:
        await self._file.aclose()


class _AplaySink(_Sink):
    """aplay reading raw PCM on stdin: its pipe paces the writes at playback
    speed, which is what keeps the buffer ahead of it bounded."""

    def __init__(self, fmt: AudioFormat, process: trio.Process) -> None:
        self.format, self._process = fmt, process
        self._killed = False

    async def write(self, pcm: bytes) -> None:
        await self._process.stdin.send_all(pcm)

    def kill(self) -> None:
        self._killed = True
        self._process.kill()

    async def aclose(self) -> None:
        await self._process.stdin.aclose()
        with trio.move_on_after(5):
            await self._process.wait()
        if self._process.returncode is None:
            self._process.kill()
            await self._process.wait()
        elif self._process.returncode != 0 and not self._killed:  # killed: by a stop
            log.warning("device: aplay exited with status %s", self._process.returncode)
