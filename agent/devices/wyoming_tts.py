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
through a buffer bounded by `max_buffered_seconds` of audio and by
MAX_BUFFERED_BYTES: when it is full, reading stops and TCP holds the server
back. The server's audio format is what sizes a second of audio, so a format
no sink plays (a rate outside MIN_RATE..MAX_RATE, more than MAX_CHANNELS
channels, a width other than 1 to 4 bytes) is an AudioFormatError: the
device fails and restarts as for any other server fault. A server that owes
audio (a `synthesize` sent, or a streamed answer's `synthesize-stop`) and
sends no event for `audio_timeout` seconds is an AudioTimeout, the same way:
the device fails, stops speaking, and connects again after its backoff. Reasoning is never
spoken (the device does not take `reasoning` events). The text is cleaned
for speech (agent/text/speech.py): the hub cleans the sentences it
cuts for the device, and the deltas to a streaming server are cleaned here,
each answer by its own cleaner, so markdown split across deltas is still
recognised; a tool call is spoken only with speak_tool_calls.

Settings (the device's own keys):
- address: "tcp://HOST:PORT" or "unix:PATH", the server.
- voice, speaker, language: sent as the synthesize event's voice.
- streaming: "auto" (default: as the server's info says), true or false.
- sink: where the audio goes:
  "aplay" (default): ALSA's aplay plays it on `alsa_device`;
  "file": raw PCM appended to `path`, for a pipe or a recorder;
  "program": raw PCM on the stdin of `sink_program`, an argv checked as the
  command device's (a name on PATH or an absolute path, never a shell) whose
  arguments may hold `{rate}`, `{width}` and `{channels}`;
  "wyoming": a Wyoming snd server at `sink_address` (a network speaker: what
  wyoming-satellite's snd service speaks) gets audio-start, audio-chunks and
  audio-stop, and is waited for its `played` (bounded: see _WyomingSink).
  Each utterance (audio-start to audio-stop) opens the sink anew. Every sink
  holds back the writer (a pipe, a socket), so what waits for it is only the
  bounded buffer below. A sink that cannot be opened or written (the program
  exited, the speaker is gone) raises SinkError out of run(): the device is
  restarted by the hub.
- alsa_device: the ALSA device name for aplay (default "default").
- path: the file of the "file" sink.
- sink_program: the argv of the "program" sink.
- sink_address: "tcp://HOST:PORT" or "unix:PATH", the "wyoming" sink's server.
- connect_timeout: seconds to connect and have the server's info (10).
- max_buffered_seconds: audio held ahead of the sink (30).
- audio_timeout: seconds a server that owes audio may send nothing (30).
- speech: true (default) cleans the text for a voice; false sends it as the
  model wrote it. With it: code_placeholder (said for a code block, nothing
  by default), emoji ("drop", default, or "name") and speak_tool_calls (the
  tool's name is said at each `tool_call` event; needs "tool_call" in
  events).

A Sound (the voice door's wake sound, through the center's play()) goes
to the sink as an utterance of its own, in its own format, without the
server.

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
import subprocess
from dataclasses import dataclass
from typing import Any, Mapping

import trio

from agent.core import replies
from agent.core.deliveries import Delivery
from agent.devices.base import (SPEECH_KEYS, Common, Device, Inbox, Prompt,
                                SettingError, refuse_unknown, refuse_notices, speech_options)
from agent.devices.templates import Argv, parse_argv
from agent.text.speech import SpeechCleaner, SpeechOptions, tool_call_phrase
from agent.wyoming import framing as wyoming
from agent.jsontypes import is_type

log = logging.getLogger("homeagent.devices")

_KEYS = frozenset({"address", "voice", "speaker", "language", "streaming", "sink",
                   "alsa_device", "path", "sink_program", "sink_address", "connect_timeout",
                   "max_buffered_seconds", "audio_timeout"}) | SPEECH_KEYS
_SINKS = ("aplay", "file", "program", "wyoming")
_FORMAT_NAMES = frozenset({"rate", "width", "channels"})  # the program sink's placeholders
_READ = 65536
MAX_BUFFERED_BYTES = 8 * 1024 * 1024  # audio held ahead of the sink, whatever its seconds
# the formats a sink plays: what a TTS server claims beyond them is refused
MIN_RATE, MAX_RATE, MAX_CHANNELS = 4000, 192000, 8
PLAYED_GRACE = 2.0  # seconds a Wyoming speaker may take past an utterance's length to play it
# sample width in bytes -> aplay's format name (Wyoming audio is little-endian PCM)
_APLAY_FORMATS = {1: "U8", 2: "S16_LE", 3: "S24_3LE", 4: "S32_LE"}


class TTSServerError(ConnectionError):
    """The server broke the protocol or the connection: the device restarts."""


class AudioFormatError(TTSServerError):
    """The server claimed an audio format no sink plays."""


class AudioTimeout(TTSServerError):
    """The server owed audio and sent nothing for audio_timeout seconds."""


class SinkError(ConnectionError):
    """The audio sink could not be opened or stopped taking audio: the device
    restarts."""


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
        rate, width, channels = values
        if not (MIN_RATE <= rate <= MAX_RATE and channels <= MAX_CHANNELS):
            raise AudioFormatError(
                f"the TTS server claimed an audio format no sink plays: rate {rate}, width "
                f"{width}, channels {channels} (a sink plays {MIN_RATE} to {MAX_RATE} Hz, 1 to "
                f"{MAX_CHANNELS} channels)")
        return cls(rate, width, channels)

    @property
    def bytes_per_second(self) -> int:
        return self.rate * self.width * self.channels


class _StreamedAnswer:
    """An answer streamed to the server: its deltas cleaned for speech (or
    not, with speech = false) and what was sent of them."""

    def __init__(self, speech: SpeechOptions | None) -> None:
        self._cleaner = SpeechCleaner(speech) if speech is not None else None
        self.started = False
        self.sent: list[str] = []

    def feed(self, text: str) -> str:
        return self._cleaner.feed(text) if self._cleaner else text

    def close(self) -> str:
        """What the cleaner held back; it then starts afresh."""
        return self._cleaner.close() if self._cleaner else ""


class _Audio:
    """The bounded buffer between the server reader and the sink player:
    (format, pcm) chunks and None at each audio-stop; it holds at most
    max_seconds of audio and MAX_BUFFERED_BYTES (one chunk more when it is
    empty: a chunk is bounded by the framing's payload limit)."""

    def __init__(self, max_seconds: float) -> None:
        self.max_seconds = max_seconds
        # bounded by the seconds and bytes of audio held, below, not by a count
        self.send, self.receive = trio.open_memory_channel(math.inf)
        self._held = 0.0
        self._held_bytes = 0
        self._room = trio.Condition()

    async def put(self, fmt: AudioFormat, pcm: bytes) -> None:
        seconds = len(pcm) / fmt.bytes_per_second
        async with self._room:
            while self._held_bytes and (self._held + seconds > self.max_seconds or
                                        self._held_bytes + len(pcm) > MAX_BUFFERED_BYTES):
                await self._room.wait()
            self._held += seconds
            self._held_bytes += len(pcm)
        await self.send.send((fmt, pcm, seconds))

    async def end(self) -> None:
        await self.send.send(None)

    def sound(self, fmt: AudioFormat, pcm: bytes) -> None:
        """A whole sound (bounded when the config loaded), as one utterance,
        without waiting for room: queued before the taker yields, so that
        the device is never seen quiet between taking it and playing it."""
        self._held += len(pcm) / fmt.bytes_per_second
        self._held_bytes += len(pcm)
        self.send.send_nowait((fmt, pcm, len(pcm) / fmt.bytes_per_second))
        self.send.send_nowait(None)

    async def played(self, seconds: float, size: int) -> None:
        async with self._room:
            self._held -= seconds
            self._held_bytes -= size
            self._room.notify_all()


class WyomingSpeech(Device):
    kind = "wyoming-tts"
    DEFAULT_EVENTS = frozenset({"sentence", "delta", "done", "error"})
    speaks = True
    plays_audio = True

    def __init__(self, common: Common, address: tuple[str, str, int], *, voice: dict,
                 streaming: bool | None, sink: str, alsa_device: str, path: str | None,
                 connect_timeout: float, max_buffered_seconds: float,
                 audio_timeout: float = 30.0, speech: SpeechOptions | None = SpeechOptions(),
                 sink_program: Argv | None = None,
                 sink_address: tuple[str, str, int] | None = None) -> None:
        super().__init__(common)
        self.sink_program, self.sink_address = sink_program, sink_address
        self.speech = speech  # the hub cleans the sentences, _send_text the deltas
        self.address, self.voice, self.streaming = address, voice, streaming
        self.sink, self.alsa_device, self.path = sink, alsa_device, path
        self.connect_timeout = connect_timeout
        self.max_buffered_seconds = max_buffered_seconds
        self.audio_timeout = audio_timeout
        self.connected = False
        self.server_streams: bool | None = None  # from its info
        self.sentences = self.answers = 0       # synthesize requests sent, streamed answers
        self.sounds = 0                          # Sounds played (the wake sound)
        self.audio_bytes = 0                     # PCM handed to the sink
        self.stops = 0                           # silence() calls that cut speech off
        self.audio_after_stop = 0                # PCM the sink took after the last of them
        # This connection's state, for silence(): the requests whose text it
        # carries (from their first event to their done or error), the
        # requests the server has still to answer, the player, the audio buffer.
        self._connection = trio.CancelScope()
        self._carried: set[int] = set()  # Origin keys
        self._awaiting = 0
        self._owed = 0  # of those, the requests whose text the server has whole
        self._receiving = trio.CancelScope()  # the reader's wait for the server's next event
        self._streams = False
        self._player: _Sink | None = None
        self._audio: _Audio | None = None
        self._stopped = False  # since the last silence(), on this connection

    @classmethod
    def from_settings(cls, common: Common, settings: Mapping[str, Any]) -> WyomingSpeech:
        refuse_unknown(settings, _KEYS)
        refuse_notices(common, cls.kind)
        if "address" not in settings:
            raise SettingError("address", 'required: "tcp://HOST:PORT" or "unix:PATH"')
        address = _address("address", settings["address"])
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
        if sink not in _SINKS:
            raise SettingError("sink", ", ".join(f'"{name}"' for name in _SINKS[:-1])
                               + f' or "{_SINKS[-1]}"')
        for key, needed_by in (("sink_program", "program"), ("sink_address", "wyoming"),
                               ("path", "file")):
            if key in settings and sink != needed_by:
                raise SettingError(key, f'only with sink = "{needed_by}"')
        if sink == "program" and "sink_program" not in settings:
            raise SettingError("sink_program", 'required by sink = "program": the program '
                                               "and its arguments")
        if sink == "wyoming" and "sink_address" not in settings:
            raise SettingError("sink_address", 'required by sink = "wyoming": "tcp://HOST:PORT" '
                                               'or "unix:PATH"')
        sink_program = (parse_argv("sink_program", settings["sink_program"], _FORMAT_NAMES)
                        if sink == "program" else None)
        sink_address = (_address("sink_address", settings["sink_address"])
                        if sink == "wyoming" else None)
        path = settings.get("path")
        if sink == "file" and not (isinstance(path, str) and path.startswith("/")):
            raise SettingError("path", 'required by sink = "file": an absolute path')
        alsa_device = settings.get("alsa_device", "default")
        if not (isinstance(alsa_device, str) and alsa_device and not alsa_device.startswith("-")):
            raise SettingError("alsa_device", "an ALSA device name such as \"default\" or "
                                              "\"plughw:CARD=Headphones\"")
        numbers = {}
        for key, default in (("connect_timeout", 10.0), ("max_buffered_seconds", 30.0),
                             ("audio_timeout", 30.0)):
            value = settings.get(key, default)
            if not is_type(value, (int, float)) or not value > 0:
                raise SettingError(key, "must be a positive number of seconds")
            numbers[key] = float(value)
        return cls(common, address, voice=voice,
                   streaming=None if streaming == "auto" else streaming, sink=sink,
                   alsa_device=alsa_device, path=path,
                   speech=speech_options(common, settings, default=True),
                   sink_program=sink_program, sink_address=sink_address, **numbers)

    # ---- the connection ----

    async def _connect(self) -> trio.abc.Stream:
        return await _open_stream(self.address)

    async def run(self, inbox: Inbox, prompt: Prompt,
                  task_status=trio.TASK_STATUS_IGNORED) -> None:
        if self.sink == "aplay" and shutil.which("aplay") is None:
            raise FileNotFoundError("aplay not found (Debian package alsa-utils)")
        while True:
            self._connection = trio.CancelScope()
            self._carried, self._awaiting, self._owed, self._stopped = set(), 0, 0, False
            self.speech_changed()
            with self._connection:
                await self._speak(_Noting(inbox, self._carried), task_status)
            # silence() ended the connection: a new one, with nothing of the old
            task_status = trio.TASK_STATUS_IGNORED

    async def _speak(self, inbox: "_Noting", task_status) -> None:
        # A timeout is named here: TooSlowError says nothing in the status.
        with trio.move_on_after(self.connect_timeout) as connecting:
            stream = await self._connect()
        if connecting.cancelled_caught:
            raise TTSServerError(f"no connection to the TTS server within "
                                 f"{self.connect_timeout:g} s (connect_timeout)")
        async with stream:
            reader = wyoming.Reader()
            await stream.send_all(wyoming.encode(wyoming.Event("describe")))
            with trio.move_on_after(self.connect_timeout) as describing:
                info = await self._until(stream, reader, "info")
            if describing.cancelled_caught:
                raise TTSServerError(f"the TTS server did not answer describe within "
                                     f"{self.connect_timeout:g} s (connect_timeout)")
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
                self.speech_changed()

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
        open_answers: dict[int, _StreamedAnswer] = {}
        async for delivery in inbox:
            key, reply = delivery.origin.key, delivery.reply
            kind = type(reply)
            if kind is replies.Sound:
                self._audio.sound(AudioFormat(reply.rate, reply.width, reply.channels),
                                  reply.pcm)
                self.sounds += 1
            elif kind is replies.ToolCall:
                if not (self.speech and self.speech.speak_tool_calls):
                    continue
                phrase = tool_call_phrase(reply.name)
                if streams:
                    answer = open_answers.setdefault(key, _StreamedAnswer(self.speech))
                    await self._stream(stream, answer, answer.close() + f"\n{phrase}\n", voice)
                elif phrase:
                    await self._send(stream, "synthesize", {"text": phrase, **voice})
            elif streams and kind is replies.Delta and reply.text:
                answer = open_answers.setdefault(key, _StreamedAnswer(self.speech))
                await self._stream(stream, answer, answer.feed(reply.text), voice)
            elif streams and kind in replies.ENDS_ASK and key in open_answers:
                answer = open_answers.pop(key)
                await self._stream(stream, answer, answer.close(), voice)
                if answer.started:
                    await self._send(stream, "synthesize", {"text": "".join(answer.sent),
                                                            **voice})
                    await self._send(stream, "synthesize-stop", {})
                    self.answers += 1
            elif not streams and kind is replies.Sentence and reply.text.strip():
                await self._send(stream, "synthesize", {"text": reply.text, **voice})
                self.sentences += 1

    async def _stream(self, stream, answer: _StreamedAnswer, text: str, voice: dict) -> None:
        """A chunk of a streamed answer; its synthesize-start comes with the
        first text there is to say."""
        if not text:
            return
        if not answer.started:
            await self._send(stream, "synthesize-start", voice)
            answer.started = True
        answer.sent.append(text)
        await self._send(stream, "synthesize-chunk", {"text": text})

    async def _send(self, stream, kind: str, data: dict) -> None:
        # Counted before it is sent: the sentence just taken from the inbox
        # is being said from here on (`speaking` has no gap).
        if kind == ("synthesize-start" if self._streams else "synthesize"):
            self._awaiting += 1
            self.speech_changed()
        if kind == ("synthesize-stop" if self._streams else "synthesize"):
            self._owed += 1  # from now on the server has all it needs to answer
            if self._owed == 1:
                self._receiving.deadline = trio.current_time() + self.audio_timeout
        await stream.send_all(wyoming.encode(wyoming.Event(kind, data)))

    # ---- audio in and out ----

    async def _next_events(self, stream, reader: wyoming.Reader) -> list[wyoming.Event]:
        """The server's next events; AudioTimeout if it owes audio and sends
        nothing for audio_timeout seconds (_send starts the clock when a
        request becomes owed while this waits)."""
        owed = trio.current_time() + self.audio_timeout if self._owed else math.inf
        with trio.CancelScope(deadline=owed) as self._receiving:
            return await self._receive(stream, reader)
        raise AudioTimeout(f"the TTS server sent nothing for {self.audio_timeout:g} s while "
                           "a synthesis was awaited (audio_timeout)")

    async def _read_audio(self, stream, reader: wyoming.Reader, audio: _Audio) -> None:
        fmt: AudioFormat | None = None
        while True:
            for event in await self._next_events(stream, reader):
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
                    self._owed = max(0, self._owed - 1)
                    self.speech_changed()
                elif event.type == "error":
                    log.warning("device %s: the TTS server reported: %s", self.name,
                                event.data.get("text", event.data))

    async def _play(self, audio: _Audio) -> None:
        try:
            async for item in audio.receive:
                if item is None:
                    await self._close_player()
                    self.speech_changed()
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
                await audio.played(seconds, len(pcm))
        finally:
            with trio.CancelScope(shield=True):
                await self._close_player()

    async def _close_player(self) -> None:
        # The player stays set until it is closed: a sink program still
        # plays what its pipe holds after its stdin closes (so `speaking`
        # holds, and a stop kills it), and a Wyoming sink is waited for.
        if self._player is not None:
            try:
                await self._player.aclose()
            finally:
                self._player = None

    # ---- stop ----

    @property
    def speaking(self) -> bool:
        return self.connected and not self._quiet()

    def _quiet(self) -> bool:
        """Nothing to play, nothing playing, nothing asked of the server."""
        queued = self._audio is not None and self._audio.receive.statistics().current_buffer_used
        return not (self._awaiting or self._player is not None or queued)

    def silence(self, keys: frozenset[int] | None) -> bool:
        saying = self._carried if keys is None else keys & self._carried
        if not saying and (keys is not None or self._quiet()):
            return False
        if self._player is not None:
            self._player.kill()  # now: not at the end of what it has buffered
        self._connection.cancel()
        self.speech_changed()
        self._stopped = True
        self.stops += 1
        self.audio_after_stop = 0
        return True

    async def _open_sink(self, fmt: AudioFormat) -> _Sink:
        if self.sink == "file":
            return _FileSink(fmt, await trio.open_file(self.path, "ab"))
        if self.sink == "wyoming":
            return await _WyomingSink.open(fmt, self.sink_address, self.connect_timeout)
        if self.sink == "program":
            argv = self.sink_program.render({"rate": fmt.rate, "width": fmt.width,
                                             "channels": fmt.channels}, frozenset())
        else:
            argv = ["aplay", "-q", "-D", self.alsa_device, "-t", "raw", "-f",
                    _APLAY_FORMATS[fmt.width], "-r", str(fmt.rate), "-c", str(fmt.channels)]
        return await _ProcessSink.open(fmt, argv)

    def status(self) -> dict[str, Any]:
        return {"address": _address_text(self.address),
                "connected": self.connected, "server_streams": self.server_streams,
                "sentences": self.sentences, "answers": self.answers, "sounds": self.sounds,
                "audio_bytes": self.audio_bytes, "stops": self.stops,
                "audio_after_stop": self.audio_after_stop}


_ENDS_CARRY = (*replies.ENDS_ASK, replies.Sound)


class _Noting:
    """A device's inbox as _send_text reads it, noting the asks whose text
    the connection carries: from their first delivery until their done or
    error has been handled."""

    def __init__(self, inbox: Inbox, carried: set) -> None:
        self._inbox, self._carried = inbox, carried
        self._ended: int | None = None

    def __aiter__(self):
        return self

    async def __anext__(self) -> Delivery:
        self._carried.discard(self._ended)
        delivery = await self._inbox.get()
        key = delivery.origin.key
        self._carried.add(key)
        # a sound is whole in its one delivery
        self._ended = key if isinstance(delivery.reply, _ENDS_CARRY) else None
        return delivery


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


class _ProcessSink(_Sink):
    """A program reading raw PCM on stdin (aplay, or the "program" sink's):
    its pipe paces the writes at playback speed, which is what keeps the
    buffer ahead of it bounded."""

    def __init__(self, fmt: AudioFormat, process: trio.Process, program: str) -> None:
        self.format, self._process, self._program = fmt, process, program
        self._killed = False

    @classmethod
    async def open(cls, fmt: AudioFormat, argv: list[str]) -> _ProcessSink:
        program = argv[0].rpartition("/")[2]
        try:
            process = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE,
                                                       stdout=subprocess.DEVNULL)
        except OSError as error:
            raise SinkError(f"the audio program {program} could not be started: "
                            f"{error.strerror or error}") from None
        return cls(fmt, process, program)

    async def write(self, pcm: bytes) -> None:
        try:
            await self._process.stdin.send_all(pcm)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            with trio.CancelScope(shield=True):
                with trio.move_on_after(1):
                    await self._process.wait()
            raise SinkError(f"the audio program {self._program} stopped reading (exit status "
                            f"{self._process.returncode})") from None

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
            log.warning("device: %s exited with status %s", self._program,
                        self._process.returncode)


class _WyomingSink(_Sink):
    """A Wyoming snd server: audio-start, audio-chunks, audio-stop on a
    connection of its own; TCP holds the writes back when the speaker is
    behind. After audio-stop the server's `played` is waited for, so that one
    utterance ends before the next one's connection starts playing; at most
    as long as the utterance lasts plus PLAYED_GRACE (the writes were held
    back to the speaker's pace, so little of it can still be ahead), and a
    server that sends no `played` (older ones) is not an error."""

    def __init__(self, fmt: AudioFormat, stream: trio.abc.Stream) -> None:
        self.format, self._stream = fmt, stream
        self._seconds = 0.0    # of audio sent
        self._broken = False   # a send failed: nothing more goes

    @classmethod
    async def open(cls, fmt: AudioFormat, address: tuple[str, str, int],
                   timeout: float) -> _WyomingSink:
        try:
            with trio.fail_after(timeout):
                stream = await _open_stream(address)
        except (OSError, trio.TooSlowError) as error:
            raise SinkError(f"the Wyoming speaker at {_address_text(address)} could not be "
                            f"reached: {error}") from None
        sink = cls(fmt, stream)
        try:
            await sink._send(wyoming.Event("audio-start", sink._format()))
        except SinkError:
            await stream.aclose()
            raise
        return sink

    def _format(self) -> dict:
        return {"rate": self.format.rate, "width": self.format.width,
                "channels": self.format.channels}

    async def _send(self, event: wyoming.Event) -> None:
        try:
            await self._stream.send_all(wyoming.encode(event))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            self._broken = True
            raise SinkError(f"the Wyoming speaker closed the connection: {error}") from None

    async def write(self, pcm: bytes) -> None:
        await self._send(wyoming.Event("audio-chunk", self._format(), pcm))
        self._seconds += len(pcm) / self.format.bytes_per_second

    def kill(self) -> None:
        # A stop: the speaker's connection closed now, what it holds unsent
        # dropped; aclose() then only closes.
        self._broken = True
        self._stream.socket.close()

    async def aclose(self) -> None:
        if self._broken:
            await self._stream.aclose()
            return
        try:
            await self._send(wyoming.Event("audio-stop"))
            with trio.move_on_after(self._seconds + PLAYED_GRACE):
                await self._played()
        except SinkError as error:
            log.warning("device: %s", error)
        finally:
            await self._stream.aclose()

    async def _played(self) -> None:
        """Until the server's `played`, or it closes or breaks the framing."""
        reader = wyoming.Reader()
        while True:
            try:
                data = await self._stream.receive_some(_READ)
            except (trio.BrokenResourceError, OSError):
                return
            for item in reader.feed(data) if data else reader.close():
                if type(item) is wyoming.FramingError or item.type == "played":
                    return
            if not data:
                return


async def _open_stream(address: tuple[str, str, int]) -> trio.abc.Stream:
    family, host, port = address
    if family == "unix":
        return await trio.open_unix_socket(host)
    return await trio.open_tcp_stream(host, port)


def _address(key: str, value: Any) -> tuple[str, str, int]:
    try:
        return wyoming.parse_address(value)
    except ValueError as error:
        raise SettingError(key, str(error)) from None


def _address_text(address: tuple[str, str, int]) -> str:
    family, host, port = address
    return f"tcp://{host}:{port}" if family == "tcp" else f"unix:{host}"
