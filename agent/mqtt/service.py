"""The board on the house's MQTT broker, the MQTT door: the trio shell
around the sans-IO pieces beside it (codec, topics, messages, discovery).
docs/mqtt.md. Its asks, announces and stops are the center's commands
(agent/core/center.py) like any door's; it is also a listener of the
center (the board's state follows every ask) and the Boards the center
announces on.

run() connects (TCP, TLS or a Unix socket), with a persistent session
(clean session off) so that the QoS 1 asks published while the board was
away are delivered when it is back, a last will `offline` retained on the
availability topic, `online` retained once connected, the discovery
configs and the state. A lost or refused connection is logged, counted
and named in status (masked), and tried again after a backoff that
doubles from mqtt.reconnect_min to mqtt.reconnect_max.

The broker is as untrusted as a socket client: it reaches ask, announce
and stop only, every payload is checked by messages.parse (a refusal goes
to the error topic and the log), at most mqtt.max_asks of its asks run at
once, and outgoing messages wait in a bounded queue (QUEUE): what does not
fit while the broker is away is dropped and counted. Refusals wait in a
queue of their own (ERROR_QUEUE), taken only when no answer waits, limited
per topic (messages.ErrorLimit) and logged throttled: a flood of bad
payloads never displaces an answer. Asks run in the service's own nursery,
so an answer under way when the connection drops goes on and its messages
go out after the reconnect, as far as the queue holds them.

The session's state (packet ids, the in-flight window and its resend, the
keepalive, the inbound QoS 1 and 2) is session.py's sans-IO Session; this
shell moves bytes between it and the stream and does what it says.

One board answers per house: claim() publishes the voice door's claim of
an utterance on the house's claim topic and waits the window for the
others' (the rule is claims.py's Arbiter). Claims are QoS 0, sent at once
beside the queue (a claim late by a queue of answers is worthless) and
never kept for a later connection; a bad one is counted and logged,
throttled, never answered on the error topic (a flood would reach every
board's).
"""

from __future__ import annotations

import itertools
import logging
import secrets
import ssl
from collections import deque

import trio

from agent.core import replies
from agent.core.center import Center
from agent.core.commands import Announce, Ask, Door, Origin, Refused, StopAsks
from agent.core.edge import outgoing
from agent.core.throttled import Throttled
from agent.mqtt import claims, codec, messages
from agent.mqtt.config import MqttConfig
from agent.mqtt.discovery import discovery_messages
from agent.mqtt.session import Connected, Deliver, Lost, Send, Session, SubscriptionRefused
from agent.mqtt.topics import Topics

log = logging.getLogger("homeagent.mqtt")

QUEUE = 1024               # outgoing messages waiting for the broker
ERROR_QUEUE = 64           # refusals waiting, after every answer
CONNECT_TIMEOUT = 10.0     # seconds for the connection and its CONNACK
READ = 65536
PACKET_SLACK = 1024        # a packet's header and topic beyond max_payload
MAX_BOARDS = 256           # other boards' availability kept


class MqttService:
    def __init__(self, center: Center, config: MqttConfig, version: str,
                 speech=None) -> None:
        self.center = center
        self.speech = speech  # the device hub, whose speaking the state follows
        self.config = config
        self.version = version
        self.topics = Topics(config.prefix, config.board)
        self.connected = False
        self.connects = 0
        self.reconnects = 0
        self.last_error: str | None = None
        self.received = 0
        self.sent = 0
        self.bad_payloads = 0
        self.dropped = 0         # answers, state... not queued: the queue was full
        self.errors_dropped = 0  # refusals not queued: their queue was full
        self.asks = 0          # in flight
        self.requests = 0      # announces and stops in flight
        self.state = "idle"
        self._thinking: set[int] = set()  # Origin keys of the daemon's asks running (any door)
        self._failed = False         # the last ask that ended failed
        self._published_state = self._state_payload()
        self.voice: str | None = None  # the voice door's state, once it said one
        if speech:
            speech.watch_speech(self._state_changed)
        self._ids = itertools.count(1)
        wanted = self.topics.subscriptions()
        if config.discovery:
            wanted.append((f"{config.discovery_prefix}/status", 1))
        self.session = Session(
            codec.connect(config.client_id, config.keepalive, clean_session=False,
                          username=config.username, password=config.password,
                          will=codec.Will(self.topics.availability, b"offline")),
            wanted, keepalive=config.keepalive, max_packet=config.max_payload + PACKET_SLACK)
        # (topic, payload, retain) waiting for the broker: answers first
        self._answers: deque[tuple[str, bytes, bool]] = deque()
        self._errors: deque[tuple[str, bytes, bool]] = deque()
        self._queued = trio.lowlevel.ParkingLot()
        self._acked = trio.lowlevel.ParkingLot()
        self._error_limit = messages.ErrorLimit()
        self._refusal_log: dict[str, Throttled] = {}
        self._active: dict[int, tuple[str, str, float]] = {}  # key -> id, session, started
        self.names = messages.SessionNames(config.sessions)
        self._nursery: trio.Nursery | None = None
        self.boards: dict[str, bool] = {}  # board -> online, from their availability
        self._elsewhere: dict[int, messages.SpokenElsewhere] = {}  # of asks with speak_on
        self.arbiter = claims.Arbiter(config.board)
        self.claim_counts = {"sent": 0, "won": 0, "lost": 0, "received": 0, "refused": 0}
        self.hearing: set[str] = set()   # boards whose voice state is retained: they hear
        self._claims_in = trio.lowlevel.ParkingLot()   # claim() waits here for others'
        self._claim_log = Throttled(log)
        # the connection's nursery and stream, while connected: a claim is sent on it
        self._link: tuple[trio.Nursery, _Serialised] | None = None
        self._next_timer: bytes | None = None  # retained payload; None: no timers here
        self._next_timer_at: bytes | None = None  # the last timer's time (the sensor's state)

    @property
    def where(self) -> str:
        config = self.config
        if config.unix:
            return f"unix:{config.unix}"
        return f"{'mqtts' if config.tls else 'mqtt'}://{config.broker}:{config.port}"

    def status(self) -> dict:
        return outgoing({
            "broker": self.where, "board": self.config.board, "connected": self.connected,
            "connects": self.connects, "reconnects": self.reconnects,
            "last_error": self.last_error, "messages_in": self.received,
            "messages_out": self.sent, "bad_payloads": self.bad_payloads,
            "dropped": self.dropped, "errors_dropped": self.errors_dropped,
            "errors_suppressed": self._error_limit.suppressed_total,
            "duplicates": self.session.duplicates,
            "in_flight": len(self.session.in_flight), "asks": self.asks,
            "active": self._active_asks(trio.current_time()), "state": self.state,
            "boards_online": sorted(b for b, online in self.boards.items() if online),
            "boards_hearing": sorted(b for b in self.hearing if self.boards.get(b)),
            "claims": {**self.claim_counts, "kept": len(self.arbiter.kept)}})

    # ---- the connection ----

    async def run(self) -> None:
        config = self.config
        backoff = config.reconnect_min
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            while True:
                try:
                    await self._connection()
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                        trio.TooSlowError, ssl.SSLError, codec.ProtocolError,
                        ConnectionLost) as error:
                    self.last_error = _describe(error)
                    if self.connected:
                        backoff = config.reconnect_min
                    log.warning("mqtt %s: %s; next try in %g s", self.where,
                                outgoing(self.last_error), backoff)
                except Exception as error:  # a bug costs the connection, never the daemon
                    self.last_error = f"internal error: {type(error).__name__}"
                    log.exception("mqtt %s: the connection failed inside the daemon; next "
                                  "try in %g s", self.where, backoff)
                finally:
                    self.connected = False
                await trio.sleep(backoff)
                self.reconnects += 1
                backoff = min(backoff * 2, config.reconnect_max)

    async def _open(self) -> trio.abc.Stream:
        config = self.config
        if config.unix:
            return await trio.open_unix_socket(config.unix)
        stream = await trio.open_tcp_stream(config.broker, config.port)
        if config.tls is None:
            return stream
        context = ssl.create_default_context(cafile=config.tls.ca_file)
        if config.tls.cert_file:
            context.load_cert_chain(config.tls.cert_file, config.tls.key_file)
        tls = trio.SSLStream(stream, context, server_hostname=config.broker)
        await tls.do_handshake()
        return tls

    async def _connection(self) -> None:
        session = self.session
        with trio.fail_after(CONNECT_TIMEOUT):
            stream = await self._open()
        async with stream:
            stream = _Serialised(stream)
            try:
                with trio.fail_after(CONNECT_TIMEOUT):
                    await stream.send_all(session.open(trio.current_time()))
                    while not session.connected:
                        await self._receive(stream)
                await self._connected(stream)
            finally:
                session.closed()

    async def _connected(self, stream: "_Serialised") -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write, stream)
                nursery.start_soon(self._keepalive, stream)
                self._link = nursery, stream
                while True:
                    await self._receive(stream)
        except BaseException as exc:
            self._link = None
            problem = _failure(exc)
            if problem is not None:
                raise problem from None
            # cancelled: the daemon stops; the board says so, then leaves
            with trio.move_on_after(1, shield=True):
                try:
                    await stream.send_all(self.session.publish(
                        self.topics.availability, b"offline", retain=True, again=False)
                        + codec.disconnect())
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
            raise

    async def _receive(self, stream: "_Serialised") -> None:
        data = await stream.receive_some(READ)
        await self._do(self.session.receive(data, trio.current_time()), stream)
        self._acked.unpark_all()

    async def _do(self, actions: list, stream: "_Serialised") -> None:
        """What the session says, in its order."""
        for action in actions:
            if isinstance(action, Send):
                await stream.send_all(action.data)
            elif isinstance(action, Deliver):
                self.received += 1
                self._command(action.packet)
            elif isinstance(action, Connected):
                await self._online(stream, action.session_present)
            elif isinstance(action, SubscriptionRefused):
                log.warning("mqtt: the broker refused a subscription: %s", action.return_codes)
            elif isinstance(action, Lost):
                raise ConnectionLost(action.reason)

    async def _online(self, stream: "_Serialised", session_present: bool) -> None:
        """Connected, what was in flight sent again: the board is online, its
        state and discovery configs (sent anew at every connect)."""
        topics = self.topics
        head = [(topics.availability, b"online"), (topics.state, self._state_payload()),
                *self._voice_state(), *self._discovery()]
        if self._next_timer_at is not None:
            head.append((topics.next_timer_at, self._next_timer_at))
        if self._next_timer is not None:
            head.append((topics.next_timer, self._next_timer))
        await stream.send_all(b"".join(
            self.session.publish(topic, payload, retain=True, again=False)
            for topic, payload in head))
        self.connected, self.last_error = True, None
        self.connects += 1
        log.info("mqtt: connected to %s as board %s (session %s)", self.where,
                 self.config.board, "resumed" if session_present else "new")

    async def _keepalive(self, stream: "_Serialised") -> None:
        while True:
            await trio.sleep_until(self.session.deadline())
            await self._do(self.session.tick(trio.current_time()), stream)

    async def _write(self, stream: "_Serialised") -> None:
        session = self.session
        while True:
            while not session.room:
                await self._acked.park()
            while not (self._answers or self._errors):
                await self._queued.park()
            packets = []
            for _ in range(session.room):
                queue = self._answers or self._errors
                if not queue:
                    break
                # in flight before it is sent: a drop during send_all loses nothing
                topic, payload, retain = queue.popleft()
                packets.append(session.publish(topic, payload, retain=retain))
            await stream.send_all(b"".join(packets))
            self.sent += len(packets)

    def publish(self, topic: str, payload: dict, *, retain: bool = False) -> None:
        """Queue a message; never waits (a full queue drops it, counted)."""
        self._queue(topic, messages.encode(payload), retain)

    def _queue(self, topic: str, payload: bytes, retain: bool = False, *,
               error: bool = False) -> None:
        queue, size = (self._errors, ERROR_QUEUE) if error else (self._answers, QUEUE)
        if len(queue) >= size:
            if error:
                self.errors_dropped += 1
            else:
                self.dropped += 1
            return
        queue.append((topic, payload, retain))
        self._queued.unpark_all()

    def _discovery(self) -> list[tuple[str, bytes]]:
        return discovery_messages(self.config, self.version,
                                  timers=self._next_timer is not None,
                                  voice=self.voice is not None) \
            if self.config.discovery else []

    def show_next_timer(self, timer: dict | None) -> None:
        """The soonest timer (agent/tools/timers), retained; its fields, or
        every one null when none is set. Its time alone on next_timer/at,
        Home Assistant's timestamp sensor's state: that topic never says
        null, which the sensor would log as an invalid state; with no timer
        the sensor is unavailable instead (discovery.py)."""
        shown = timer or dict.fromkeys(("id", "kind", "label", "at", "due", "board"))
        if timer is not None:   # before the fields, which make the sensor available
            self._next_timer_at = timer["at"].encode()
            self._queue(self.topics.next_timer_at, self._next_timer_at, retain=True)
        self._next_timer = messages.encode(shown)
        self._queue(self.topics.next_timer, self._next_timer, retain=True)

    def _voice_state(self) -> list[tuple[str, bytes]]:
        return [] if self.voice is None else [
            (self.topics.voice, messages.encode({"state": self.voice}))]

    # ---- what comes in ----

    def _command(self, packet) -> None:
        topics, config = self.topics, self.config
        topic = packet.topic
        if topic is None:  # an oversized PUBLISH whose topic is not UTF-8
            self.refuse(None, messages.Refusal(messages.PayloadError.TOO_LARGE, (
                f"{packet.size} bytes, more than mqtt.max_payload ({config.max_payload}), "
                "on a topic that is not UTF-8")))
            return
        board = topics.board_of_availability(topic)
        if board is not None:
            if isinstance(packet, codec.Publish) and (board in self.boards
                                                      or len(self.boards) < MAX_BOARDS):
                self.boards[board] = packet.payload == b"online"
            return
        board = topics.board_of_voice(topic)
        if board is not None:   # a board with a voice state hears: a claim waits for it
            if isinstance(packet, codec.Publish):
                if packet.payload and (board in self.hearing or len(self.hearing) < MAX_BOARDS):
                    self.hearing.add(board)
                elif not packet.payload:
                    self.hearing.discard(board)
            return
        if topic == f"{config.discovery_prefix}/status":
            if isinstance(packet, codec.Publish) and packet.payload == b"online":
                log.info("mqtt: Home Assistant is online: discovery configs again")
                self._queue_discovery()
            return
        if topic == topics.house_claim:
            self._claim_received(packet)
            return
        kinds = {topics.ask: "ask", topics.house_ask: "ask", topics.announce: "announce",
                 topics.stop: "stop"}
        kind = kinds.get(topic)
        if kind is None:
            return  # a topic we did not subscribe to (a broker's own choice)
        if packet.retain:
            command = messages.Refusal(messages.PayloadError.RETAINED,
                                       f"{kind}: a retained message would run again at every "
                                       "connect; publish it without retain")
        elif isinstance(packet, codec.Oversized):
            command = messages.Refusal(messages.PayloadError.TOO_LARGE,
                                       f"{kind}: {packet.size} bytes, more than "
                                       f"mqtt.max_payload ({config.max_payload})")
        else:
            command = messages.parse(kind, packet.payload, config.max_payload)
        if isinstance(command, messages.Ask) and self.asks >= config.max_asks:
            command = messages.Refusal(messages.PayloadError.TOO_MANY_ASKS,
                                       f"{self.asks} asks from the broker are running "
                                       f"(mqtt.max_asks {config.max_asks})")
        elif isinstance(command, (messages.Announce, messages.Stop)) \
                and self.requests >= config.max_asks:
            command = messages.Refusal(messages.PayloadError.TOO_MANY_ASKS,
                                       f"{self.requests} announces and stops from the broker "
                                       f"are waiting (mqtt.max_asks {config.max_asks})")
        session = getattr(command, "session", None)
        if session is not None and self.names.stored(session) is None:
            command = messages.Refusal(messages.PayloadError.BAD_FIELD, (
                f"{kind}: session is 1 to 59 of A-Z, a-z, 0-9, '.', '_' and '-', "
                "beginning with a letter or digit"))
        if isinstance(command, messages.Ask) and command.speak_on is not None:
            try:
                self.check_board(command.speak_on)
            except Refused as refusal:
                command = messages.Refusal(refusal.code, str(refusal))
        if isinstance(command, messages.Refusal):
            self.refuse(topic, command)
        elif isinstance(command, messages.Ask):
            self.asks += 1
            self._nursery.start_soon(self._ask, command)
        else:
            self.requests += 1
            self._nursery.start_soon(self._request, command)

    def refuse(self, topic: str | None, refusal: messages.Refusal) -> None:
        """A refusal: a log line and a message on the error topic, both
        limited per topic (a flood costs a line and a message per interval,
        with the count of those left out), never in an answer's way."""
        self.bad_payloads += 1
        throttled = self._refusal_log.get(topic)
        if throttled is None:
            throttled = self._refusal_log[topic] = Throttled(log)
        throttled.note("mqtt: %s: %s: %s", topic, refusal.code.value, outgoing(refusal.message))
        suppressed = self._error_limit.allow(topic, trio.current_time())
        if suppressed is not None:
            self._queue(self.topics.error, messages.encode(
                messages.error_message(topic, refusal, suppressed)), error=True)

    def _state_payload(self) -> bytes:
        return messages.encode({"state": self.state, "asks": len(self._thinking)})

    def _queue_discovery(self) -> None:
        for topic, payload in self._discovery():
            self._queue(topic, payload, retain=True)

    def notice(self, reply: replies.Reply) -> None:
        """A reply of no ask: the voice door's state goes to its own retained
        topic (its sensor's config with the first); a device's is not the board's.
        Away from the broker nothing is queued: the connect publishes both."""
        if not isinstance(reply, replies.VoiceState):
            return
        first = self.voice is None
        self.voice = reply.state
        if not self.session.connected:
            return
        if first:
            self._queue_discovery()
        for topic, payload in self._voice_state():
            self._queue(topic, payload, retain=True)

    async def deliver(self, reply: replies.Reply, origin: Origin) -> None:
        """A reply of any of the daemon's asks (the center gives them all):
        the board's state follows them, and an ask with speak_on is spoken there."""
        if origin.speak_on is not None:
            self.speak(reply, origin)
        key = origin.key
        if isinstance(reply, replies.Started):
            self._thinking.add(key)
        elif isinstance(reply, (replies.Done, replies.Error)):
            self._thinking.discard(key)
            self._failed = isinstance(reply, replies.Error)
        else:
            return
        self._state_changed()

    def _state_changed(self) -> None:
        # Speaking first: a board whose answer is still streaming is heard
        # saying its first sentences. Read now, not from the hub's last
        # notice: at an answer's done its last sentence has just been queued.
        speaking = bool(self.speech) and self.speech.speaking
        self.state = "speaking" if speaking else "thinking" if self._thinking \
            else "error" if self._failed else "idle"
        payload = self._state_payload()
        if payload != self._published_state:
            self._published_state = payload
            self._queue(self.topics.state, payload, retain=True)

    # ---- the operations ----

    async def _ask(self, ask: messages.Ask) -> None:
        ask_id = ask.id or f"mqtt-{next(self._ids)}"
        name = ask.session or secrets.token_hex(8)
        session = self.names.stored(name)
        out = messages.AskMessages(self.topics, ask_id, name, deltas=self.config.deltas,
                                   names=self.names)
        origin = self.center.origin(Door.MQTT, ask_id, session, speak_on=ask.speak_on)
        self._active[origin.key] = (ask_id, session, trio.current_time())

        async def on_reply(reply: replies.Reply) -> None:
            for topic, payload in out.on(reply):
                self.publish(topic, payload)

        try:
            await self.center.ask(Ask(origin, ask.text, who=f"mqtt ask {ask_id}"), on_reply)
        finally:
            self.asks -= 1
            del self._active[origin.key]

    def _active_asks(self, now: float) -> list[dict]:
        """The broker's asks in flight, as the socket door's `active` lists its own."""
        return [{"id": ask_id, "session": session, "seconds": round(now - started, 3)}
                for ask_id, session, started in self._active.values()]

    async def _request(self, command: messages.Announce | messages.Stop) -> None:
        try:
            if isinstance(command, messages.Announce):
                await self._announce(command)
            else:
                await self._stop(command)
        finally:
            self.requests -= 1

    async def _announce(self, announce: messages.Announce) -> None:
        try:
            if not self.speech:
                raise Refused(replies.ErrorCode.NO_SPEECH_DEVICE, "this daemon has no devices")
            spoken_on = await self.center.announce(Announce(announce.text, announce.device))
            log.info("mqtt: announcement on %s", ", ".join(spoken_on))
        except Refused as refusal:
            self.refuse(self.topics.announce, messages.Refusal(refusal.code, str(refusal)))

    async def _stop(self, stop: messages.Stop) -> None:
        session = None if stop.session is None else self.names.stored(stop.session)
        reply = await self.center.stop(StopAsks("mqtt", session))
        if reply is None:
            self.refuse(self.topics.stop, messages.Refusal(
                replies.ErrorCode.NOTHING_TO_STOP, "nothing is running"))


    # ---- the other boards ----

    def _claim_received(self, packet) -> None:
        try:
            if packet.retain:
                raise claims.BadClaim("retained: a claim is for the moment it is heard")
            if isinstance(packet, codec.Oversized):
                raise claims.BadClaim(f"{packet.size} bytes")
            claim = self.arbiter.receive(packet.payload, trio.current_time())
        except claims.BadClaim as error:
            self.claim_counts["refused"] += 1
            self._claim_log.note("mqtt: %s: not a claim: %s", self.topics.house_claim,
                                 outgoing(str(error)))
            return
        if claim is not None:
            self.claim_counts["received"] += 1
            self._claims_in.unpark_all()

    async def claim(self, wake: str, probability: float, window: float) -> bool:
        """Whether this board answers the utterance it heard: the boards that
        heard it too agree on one (claims.py). True at once when no other
        board that hears (one with a retained voice state) is online, or the
        broker cannot be reached now."""
        link = self._link
        if link is None:
            log.info("mqtt: %s answered here without a claim: not connected to the broker "
                     "%s (%s)", wake, self.where, outgoing(self.last_error or "connecting"))
            return True
        if not any(up and board in self.hearing for board, up in self.boards.items()
                   if board != self.config.board):
            return True   # no other board that hears is online
        nursery, stream = link
        own = self.arbiter.claim(wake, probability, window, trio.current_time())
        nursery.start_soon(stream.send_all, codec.publish(self.topics.house_claim, own.payload()))
        self.claim_counts["sent"] += 1
        while isinstance(verdict := self.arbiter.decide(trio.current_time()), claims.Wait):
            with trio.move_on_at(verdict.until):
                await self._claims_in.park()
        if isinstance(verdict, claims.Lost):
            self.claim_counts["lost"] += 1
            log.info("mqtt: %s (%.3f) is answered by board %s (%.3f)", wake, own.probability,
                     verdict.winner.board, verdict.winner.probability)
            return False
        self.claim_counts["won"] += 1
        log.info("mqtt: %s (%.3f) is answered here", wake, own.probability)
        return True

    def check_board(self, board: str) -> None:
        """Refused unless board can be reached now."""
        if not self.connected:
            raise Refused(replies.ErrorCode.BROKER_UNAVAILABLE, f"board {board!r}: not "
                                f"connected to the broker {self.where} ({self.last_error})")
        if board != self.config.board and not self.boards.get(board):
            online = ", ".join(sorted(b for b, up in self.boards.items() if up)) or "none"
            raise Refused(replies.ErrorCode.UNKNOWN_BOARD, f"board {board!r} is not "
                                f"online on the broker (online: {online})")

    def announce_on(self, board: str, text: str, device: str | None = None) -> list[str]:
        """Publish an announce to board (text masked by the center); Refused
        if it cannot go."""
        self.check_board(board)
        payload = {"text": text, **({"device": device} if device is not None else {})}
        if len(messages.encode(payload)) > self.config.max_payload:
            raise Refused(replies.ErrorCode.TEXT_TOO_LONG, "the announce is longer "
                                f"than mqtt.max_payload ({self.config.max_payload} bytes)")
        self.publish(self.topics.of(board, "announce"), payload)
        return [f"board:{board}"]

    def speak(self, reply: replies.Reply, origin: Origin) -> None:
        """A reply of an ask with speak_on: its sentences as announces there."""
        key = origin.key
        elsewhere = self._elsewhere.get(key)
        if elsewhere is None:
            elsewhere = self._elsewhere[key] = messages.SpokenElsewhere(self.topics,
                                                                        origin.speak_on)
        for topic, payload in elsewhere.on(reply):
            self.publish(topic, payload)
        if isinstance(reply, (replies.Done, replies.Error)):
            del self._elsewhere[key]


class _Serialised:
    """A stream whose writers (the queue, acknowledgements, pings) take turns."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self._turn = trio.Lock()

    async def send_all(self, data: bytes) -> None:
        async with self._turn:
            await self._stream.send_all(data)

    async def receive_some(self, size: int) -> bytes:
        return await self._stream.receive_some(size)


class ConnectionLost(Exception):
    """The broker went away or refused us: the message says how."""


def _failure(exc: BaseException) -> BaseException | None:
    """The first failure in exc (a nursery's group), None if it is only cancellation."""
    if isinstance(exc, BaseExceptionGroup):
        return next(filter(None, map(_failure, exc.exceptions)), None)
    return None if isinstance(exc, trio.Cancelled) else exc


def _describe(error: BaseException) -> str:
    if isinstance(error, trio.TooSlowError):
        return f"no answer within {CONNECT_TIMEOUT:g} s"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__
