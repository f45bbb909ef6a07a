"""The voice door: the board hears. Its trio shell around the sans-IO
pieces (audio.py, endpoint.py, asr.py), the models (wake.py) and the wake
server (wake_server.py, whose failures are the status's last_error too).

One loop, one state at a time, in `status` as `voice`:
- idle: the microphone's frames go to the wake word detector. While the
  board speaks (the hub's `speaking`, given by the daemon) and for
  `speech_tail` seconds after, the board's own voice is in them: with
  barge_in, the detector hears on but a model must reach
  barge_in_threshold (above its own cutoff); without, it is fed nothing
  and reset after.
- (wake_sound) the wake word won: the sound is played on this board's
  speech devices (Center.play) and heard out, its echo dropped, before
  listening; a follow-up has none.
- listening: from the wake word on, every frame streams to the Wyoming ASR
  server as it comes, while the VAD's endpointer (endpoint.py) decides
  when the utterance ended. Nothing heard in time: back to idle. The
  whole of it is bounded (start + longest utterance + the ASR's own
  bounds), so a microphone that dies mid-sentence costs no hang.
- thinking: the transcript is asked through the center as a VOICE door
  ask, on the wake word's session (or [voice] session) and provider; the
  answer is spoken by the speech devices, as every answer is.
- speaking: until the speech devices are quiet (bounded by
  max_speaking_seconds) and speech_tail after (the answer's echo). An
  answer that ends with a question (or every answer, with follow_up =
  "always") is followed by listening again, without the wake word, for
  follow_up_seconds.
Barge-in (barge_in = true): while thinking and speaking the detector
hears on (the raised threshold while the board speaks), and in idle over
any speech. A wake word then stops everything (Center.stop(StopAsks(who)),
as a door's stop-all): a session's stop silences only the speech of asks
still streaming, and an answer's stream mostly ends long before its speech
does; and any speech left playing would be heard as the question. The
door listens for the new question at once. The board's own speech never reaches the
ASR: listening begins only once the stop has silenced it, and the wake
word itself is never sent.
An ASR failure (asr.AsrError: unreachable, stalled, error, closed,
garbage) is logged and said briefly on the speech devices (error_text),
or only logged when no speech device takes it.

One board answers per house: every wake word heard (in idle, or over the
board's speech as a barge-in, whose stop comes first: every board that
heard it goes quiet) is claimed through the center, and a board that
loses to another (agent/mqtt/claims.py: the highest probability) goes
back to idle without listening. A follow-up, heard without a wake word,
is not claimed: the board that answered listens on alone.

Without barge-in, frames the microphone gives while the board thinks or
speaks are dropped as they come (not buffered: they hold the board's own
speech); a change of state drops what was buffered, but into listening;
frames the loop cannot take fast enough are dropped and counted
(dropped_frames, in 10 ms frames).

The microphone's frames travel as blocks: each read's whole 10 ms frames
in one piece, through a channel bounded in bytes (source.buffer_seconds):
an idle door's cost above the wake word's own work is per turn of the
scheduler, and a frame each was a turn each. The detector and the VAD
still see every 10 ms frame, so a wake word is placed to the frame and the
rest of its block is the question's start.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import trio

from agent.core import replies
from agent.core.commands import Announce, Ask, Door, Refused, StopAsks
from agent.voice.asr import AsrError, transcribe
from agent.voice.audio import FRAME_BYTES, Frames
from agent.voice.config import VoiceConfig, WakeWord
from agent.voice.endpoint import FRAME_SECONDS, Endpointer, Verdict
from agent.voice.source import Supervisor
from agent.voice.wake import Detectors, Vad
from agent.voice.wake_server import WakeError

log = logging.getLogger("homeagent.voice")

SPEAKING_POLL = 0.05
# past the endpointer's own limits: a microphone that stops giving frames
LISTEN_GRACE = 2.0
WAKE_SOUND_GRACE = 3.0  # past its length: a sink's start, and a speaker's own buffer


class VoiceService:
    def __init__(self, center, config: VoiceConfig,
                 speaking: Callable[[], bool] = lambda: False) -> None:
        self.center = center
        self.config = config
        self.speaking = speaking
        capacity = max(16, int(config.source.buffer_seconds / FRAME_SECONDS))
        self.detector = Detectors(config, capacity, self._wake_failed)
        self.vad = Vad()
        # audio waiting for the loop, in bytes: blocks are whole frames, so
        # the channel never holds more blocks than frames fit the bound
        self._room = capacity * FRAME_BYTES
        self._buffered = 0
        self._send, self._receive = trio.open_memory_channel(capacity)
        self._frames = Frames()
        self._rest = b""   # the frames after the wake word in its block: the question's start
        # False while thinking and speaking without barge-in: frames are dropped as they come
        self._taking = True
        self._barged: WakeWord | None = None   # heard over the answer: ask what it says next
        self.source = Supervisor(config.source, self._deliver)
        self.state = "starting"
        self.since = time.monotonic()
        self.counts = {"wakes": 0, "follow_ups": 0, "asks": 0, "nothing_heard": 0,
                       "asr_errors": 0, "dropped_frames": 0, "barge_ins": 0,
                       "frames_over_speech": 0, "lost_to_another_board": 0}
        self.last_error: str | None = None
        self.last_transcript: str | None = None

    # ---- the microphone's side ----

    def _deliver(self, pcm: bytes) -> None:
        block = self._frames.feed(pcm)
        if not block or not self._taking:
            return
        room = self._room - self._buffered   # whole frames, as every block is
        if len(block) > room:
            self.counts["dropped_frames"] += (len(block) - room) // FRAME_BYTES
            block = block[:room]
            if not block:
                return
        self._buffered += len(block)
        self._send.send_nowait(block)

    def _set(self, state: str) -> None:
        if state != self.state:
            log.debug("voice: %s", state)
            self.state, self.since = state, time.monotonic()
            self.center.notice(replies.VoiceState(state))  # the socket, MQTT, the boards
        self._taking = self.config.barge_in or state in ("idle", "listening")
        if state != "listening":
            self._rest = b""
            while True:  # what was buffered is stale now
                try:
                    self._receive.receive_nowait()
                except trio.WouldBlock:
                    break
            self._buffered = 0

    # ---- the loop ----

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.source.run)
            nursery.start_soon(self.detector.run)
            names = ", ".join(wake.name for wake in self.config.wake)
            log.info("voice: listening for %s on the %s microphone", names,
                     self.config.source.kind)
            task_status.started()
            wake = None
            follow_up = False
            while True:
                if self._barged is not None:
                    wake, self._barged = self._barged, None
                elif not follow_up:
                    wake = await self.wait_for_wake()
                if not follow_up and not await self._claimed(wake):
                    continue
                follow_up = await self.hear(wake, follow_up)

    async def wait_for_wake(self) -> WakeWord:
        self._set("idle")
        wake, over_speech = await self._detect()
        if over_speech:
            await self._barge_in(wake)
        return wake

    async def _detect(self) -> tuple[WakeWord, bool]:
        """The next wake word; whether it was heard over the board's speech."""
        config = self.config
        self.detector.reset()
        tail_until = None   # the board spoke: its speech until then
        async for block in self._receive:
            self._buffered -= len(block)
            now = trio.current_time()
            if self.speaking():
                tail_until = now + config.speech_tail
            elif tail_until is not None and now >= tail_until:
                tail_until = None
                if not config.barge_in:
                    self.detector.reset()   # it heard nothing of it
            over_speech = tail_until is not None
            if over_speech:
                if not config.barge_in:
                    continue
                self.counts["frames_over_speech"] += len(block) // FRAME_BYTES
            cutoff = config.barge_in_threshold if over_speech else None
            heard = None
            for at in range(0, len(block), FRAME_BYTES):
                heard = self.detector.feed(block[at:at + FRAME_BYTES], cutoff)
                if heard is not None:
                    self._rest = block[at + FRAME_BYTES:]
                    break
            if heard is not None:
                wake = config.wake[heard]
                self.counts["wakes"] += 1
                log.info("voice: heard %s%s", wake.name,
                         " over the board's speech" if over_speech else "")
                return wake, over_speech
        raise RuntimeError("the microphone's channel closed")  # never: the service holds it

    async def _claimed(self, wake: WakeWord) -> bool:
        """Whether this board answers the wake word just heard, not another
        board that heard it too."""
        window = self.config.arbitration_window
        if not window or await self.center.claim_utterance(wake.name, self.detector.probability,
                                                           window):
            return True
        self.counts["lost_to_another_board"] += 1
        log.info("voice: %s is answered by another board", wake.name)
        return False

    async def _wake_sound(self, sound: replies.Sound) -> None:
        """The wake sound on the speech devices, heard out before listening:
        until they are quiet and speech_tail after (its echo), the
        microphone's frames are dropped as they come, never sent to the ASR."""
        self._taking = False  # listening sets it again
        try:
            await self.center.play(sound)
        except Refused as refused:
            log.info("voice: the wake sound not played: %s", refused)
            return
        with trio.move_on_after(sound.seconds + WAKE_SOUND_GRACE):
            while self.speaking():
                await trio.sleep(SPEAKING_POLL)
        await trio.sleep(self.config.speech_tail)

    async def _barge_in(self, wake: WakeWord) -> None:
        """Stop every ask and silence the speech devices (the module says why)."""
        self.counts["barge_ins"] += 1
        with trio.CancelScope(shield=True):   # bounded: the center's STOP_WAIT
            stopped = await self.center.stop(StopAsks(f"voice {wake.name}"))
        log.info("voice: barge-in by %s: %s", wake.name,
                 "nothing to stop" if stopped is None else
                 f"{len(stopped.asks)} asks stopped, {', '.join(stopped.devices) or 'no device'} "
                 "silenced")

    async def hear(self, wake: WakeWord, follow_up: bool) -> bool:
        """One utterance, from listening to the answer spoken; whether to
        listen again without the wake word."""
        config = self.config
        if not follow_up and config.wake_sound is not None:
            await self._wake_sound(config.wake_sound)
        self._set("listening")
        if follow_up:
            self.counts["follow_ups"] += 1
        self.vad.reset()
        endpointer = Endpointer(config.limits,
                                config.follow_up_seconds if follow_up else None)
        limits = config.limits
        most = int((max(limits.start_seconds, config.follow_up_seconds) + limits.max_seconds)
                   / FRAME_SECONDS) + 16
        to_asr, from_door = trio.open_memory_channel(most)
        outcome: dict = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._transcribe, from_door, outcome, wake.language)
            verdict = await self._listen(endpointer, to_asr)
            if verdict is Verdict.NOTHING:
                nursery.cancel_scope.cancel()
            await to_asr.aclose()
            self._set("thinking")
        if verdict is Verdict.NOTHING:
            self.counts["nothing_heard"] += 1
            log.info("voice: nothing heard")
            return False
        error = outcome.get("error")
        if error is not None:
            await self._failed(error)
            return False
        text = outcome["text"].strip()
        self.last_transcript = text
        if not text:
            self.counts["nothing_heard"] += 1
            log.info("voice: the transcript is empty")
            return False
        answer = await self._answer(wake, text)
        if self._barged is not None or answer is None or config.follow_up == "never":
            return False
        return config.follow_up == "always" or answer.rstrip().endswith("?")

    async def _answer(self, wake: WakeWord, text: str) -> str | None:
        """Ask, and wait while the answer is spoken; with barge-in, a wake
        word heard meanwhile stops both (self._barged says it was)."""
        async with trio.open_nursery() as nursery:
            if self.config.barge_in:
                async def watch() -> None:
                    barged, _ = await self._detect()
                    self._barged = barged
                    await self._barge_in(barged)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(watch)
            answer = await self._ask(wake, text)
            self._set("speaking")
            with trio.move_on_after(self.config.max_speaking_seconds):
                while self.speaking():
                    await trio.sleep(SPEAKING_POLL)
            # the answer's echo, still coming in: never the follow-up's start
            await trio.sleep(self.config.speech_tail)
            nursery.cancel_scope.cancel()
        return None if self._barged is not None else answer

    def _session(self, wake: WakeWord) -> str:
        return wake.session or self.config.session

    async def _listen(self, endpointer: Endpointer, to_asr) -> Verdict:
        limits = self.config.limits
        verdict = Verdict.LISTENING
        bound = max(limits.start_seconds, self.config.follow_up_seconds) + limits.max_seconds
        with trio.move_on_after(bound + LISTEN_GRACE):
            block, self._rest = self._rest, b""
            while True:
                for at in range(0, len(block), FRAME_BYTES):
                    verdict = endpointer.feed(self.vad.probability(block[at:at + FRAME_BYTES]))
                    if verdict is not Verdict.LISTENING:
                        block = block[:at + FRAME_BYTES]   # the rest is past the utterance
                        break
                try:
                    if block:
                        to_asr.send_nowait(block)
                except trio.WouldBlock:
                    self.counts["dropped_frames"] += len(block) // FRAME_BYTES
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return Verdict.ENDED  # the ASR side ended: its outcome says why
                if verdict is not Verdict.LISTENING:
                    return verdict
                block = await self._receive.receive()
                self._buffered -= len(block)
        # the microphone gave too few frames: what was heard is the utterance
        return Verdict.ENDED if endpointer.speaking else Verdict.NOTHING

    async def _transcribe(self, audio, outcome: dict, language: str | None) -> None:
        config = self.config
        try:
            outcome["text"] = await transcribe(
                config.asr, audio, connect_timeout=config.connect_timeout,
                answer_timeout=config.answer_timeout, name=config.asr_name,
                language=language or config.asr_language)
        except AsrError as error:
            outcome["error"] = error
        finally:
            await audio.aclose()

    def _wake_failed(self, error: WakeError) -> None:
        """The wake server failed (it logged why): its words are not heard until it is back."""
        self.last_error = str(error)

    async def _failed(self, error: AsrError) -> None:
        self.counts["asr_errors"] += 1
        self.last_error = str(error)
        log.warning("voice: speech-to-text failed: %s", error)
        try:
            await self.center.announce(Announce(self.config.error_text))
        except Refused as refused:
            log.info("voice: %s not said: %s", error.failure.value, refused)

    async def _ask(self, wake: WakeWord, text: str) -> str | None:
        """The answer's text, None when the ask failed."""
        config = self.config
        session = self._session(wake)
        origin = self.center.origin(Door.VOICE, wake.name, session)
        self.counts["asks"] += 1
        said: list[str] = []
        failed: list[str] = []

        async def on_reply(reply: replies.Reply) -> None:
            if isinstance(reply, replies.Delta):
                said.append(reply.text)
            elif isinstance(reply, replies.Error):
                failed.append(f"{reply.code}: {reply.message}")

        log.info("voice: asking %r on session %s", text, session)
        await self.center.ask(Ask(origin, text, wake.provider or config.provider,
                                  who=f"voice {wake.name}"), on_reply)
        if failed:
            self.last_error = failed[-1]
            return None
        return "".join(said)

    def status(self) -> dict:
        return {"state": self.state, "seconds_in_state": round(time.monotonic() - self.since, 3),
                "wake_words": [wake.name for wake in self.config.wake],
                "source": self.source.status(), "wake_server": self.detector.status(),
                **self.counts,
                "last_transcript": self.last_transcript, "last_error": self.last_error}
