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
fit while the broker is away is dropped and counted. At most IN_FLIGHT of
them are unacknowledged; those of a dropped connection are sent again. Asks run in the
service's own nursery, so an answer under way when the connection drops
goes on and its messages go out after the reconnect, as far as the queue
holds them.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import ssl

import trio

from agent.core import replies
from agent.core.center import Center
from agent.core.commands import Announce, Ask, Door, Origin, Refused, StopAsks
from agent.core.edge import outgoing
from agent.mqtt import codec, messages
from agent.mqtt.config import MqttConfig
from agent.mqtt.discovery import discovery_messages
from agent.mqtt.topics import Topics

log = logging.getLogger("homeagent.mqtt")

QUEUE = 1024               # outgoing messages waiting for the broker
IN_FLIGHT = 32             # of ours sent and not yet acknowledged (PUBACK)
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
        self.dropped = 0
        self.asks = 0          # in flight
        self.requests = 0      # announces and stops in flight
        self.last_heard = 0.0  # trio time of the broker's last bytes
        self.state = "idle"
        self._thinking: set[int] = set()  # Origin keys of the daemon's asks running (any door)
        self._failed = False         # the last ask that ended failed
        self._published_state = self._state_payload()
        if speech:
            speech.watch_speech(self._state_changed)
        self._ids = itertools.count(1)
        self._packet_ids = itertools.cycle(range(1, 65536))
        self._send, self._outgoing = trio.open_memory_channel(QUEUE)
        # packet id -> (topic, payload, retain) of ours the broker has not
        # acknowledged, in the order sent: sent again (DUP) after a reconnect
        self._in_flight: dict[int, tuple[str, bytes, bool]] = {}
        self._acked = trio.lowlevel.ParkingLot()
        self._nursery: trio.Nursery | None = None
        self.boards: dict[str, bool] = {}  # board -> online, from their availability
        self._elsewhere: dict[int, messages.SpokenElsewhere] = {}  # of asks with speak_on

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
            "dropped": self.dropped, "in_flight": len(self._in_flight), "asks": self.asks,
            "state": self.state,
            "boards_online": sorted(b for b, online in self.boards.items() if online)})

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
        config, topics = self.config, self.topics
        decoder = codec.Decoder(config.max_payload + PACKET_SLACK)
        with trio.fail_after(CONNECT_TIMEOUT):
            stream = await self._open()
        async with stream:
            with trio.fail_after(CONNECT_TIMEOUT):
                await stream.send_all(codec.connect(
                    config.client_id, config.keepalive, clean_session=False,
                    username=config.username, password=config.password,
                    will=codec.Will(topics.availability, b"offline")))
                connack, pending = await _first(stream, decoder)
            if not isinstance(connack, codec.ConnAck):
                raise codec.ProtocolError(codec.Problem.UNEXPECTED, "no CONNACK first")
            if connack.return_code:
                raise ConnectionLost("connection refused: " + codec.REFUSALS.get(
                    connack.return_code, f"code {connack.return_code}"))
            wanted = [(topic, 1) for topic in topics.subscriptions()]
            if config.discovery:
                wanted.append((f"{config.discovery_prefix}/status", 1))
            # Ours unacknowledged when the last connection dropped go first,
            # so the state published after them is the current one.
            head = [codec.subscribe(self._packet_id(), wanted),
                    *(codec.publish(topic, payload, qos=1, retain=retain, packet_id=packet_id,
                                    dup=True)
                      for packet_id, (topic, payload, retain) in self._in_flight.items()),
                    self._packet(topics.availability, b"online", retain=True),
                    self._packet(topics.state, self._state_payload(), retain=True)]
            head += [self._packet(topic, payload, retain=True)
                     for topic, payload in self._discovery()]
            await stream.send_all(b"".join(head))
            self.connected, self.last_error = True, None
            self.connects += 1
            log.info("mqtt: connected to %s as board %s (session %s)", self.where,
                     config.board, "resumed" if connack.session_present else "new")
            self.last_heard = trio.current_time()
            stream = _Serialised(stream)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._write, stream)
                    nursery.start_soon(self._ping, stream)
                    for packet in pending:
                        await self._packet_in(packet, stream)
                    await self._read(stream, decoder)
            except BaseException as exc:
                problem = _failure(exc)
                if problem is not None:
                    raise problem from None
                # cancelled: the daemon stops; the board says so, then leaves
                with trio.move_on_after(1, shield=True):
                    try:
                        await stream.send_all(self._packet(topics.availability, b"offline",
                                                           retain=True) + codec.disconnect())
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass
                raise

    async def _read(self, stream, decoder: codec.Decoder) -> None:
        while True:
            data = await stream.receive_some(READ)
            if not data:
                raise ConnectionLost("the broker closed the connection")
            self.last_heard = trio.current_time()
            for packet in decoder.feed(data):
                await self._packet_in(packet, stream)

    async def _ping(self, stream) -> None:
        keepalive = self.config.keepalive
        while True:
            await trio.sleep(keepalive / 2)
            if trio.current_time() - self.last_heard > keepalive * 1.5:
                raise ConnectionLost(f"nothing from the broker for {keepalive * 1.5:g} s")
            await stream.send_all(codec.pingreq())

    async def _write(self, stream) -> None:
        while True:
            while len(self._in_flight) >= IN_FLIGHT:
                await self._acked.park()
            batch = [await self._outgoing.receive()]
            while len(self._in_flight) + len(batch) < IN_FLIGHT:
                try:
                    batch.append(self._outgoing.receive_nowait())
                except trio.WouldBlock:
                    break
            packets = []
            for message in batch:
                # in flight before it is sent: a drop during send_all loses nothing
                packet_id = self._packet_id()
                self._in_flight[packet_id] = message
                topic, payload, retain = message
                packets.append(codec.publish(topic, payload, qos=1, retain=retain,
                                             packet_id=packet_id))
            await stream.send_all(b"".join(packets))
            self.sent += len(batch)

    def _packet_id(self) -> int:
        while True:
            packet_id = next(self._packet_ids)
            if packet_id not in self._in_flight:
                return packet_id

    def _packet(self, topic: str, payload: bytes, *, retain: bool = False) -> bytes:
        """A message sent again at every connect (availability, state,
        discovery), so not kept in flight."""
        return codec.publish(topic, payload, qos=1, retain=retain, packet_id=self._packet_id())

    def publish(self, topic: str, payload: dict, *, retain: bool = False) -> None:
        """Queue a message; never waits (a full queue drops it, counted)."""
        self._queue(topic, messages.encode(payload), retain)

    def _queue(self, topic: str, payload: bytes, retain: bool = False) -> None:
        try:
            self._send.send_nowait((topic, payload, retain))
        except trio.WouldBlock:
            self.dropped += 1

    def _discovery(self) -> list[tuple[str, bytes]]:
        return discovery_messages(self.config, self.version) if self.config.discovery else []

    # ---- what comes in ----

    async def _packet_in(self, packet, stream) -> None:
        if isinstance(packet, (codec.Publish, codec.Oversized)):
            self.received += 1
            self._command(packet)
            if packet.qos and packet.packet_id is not None:
                await stream.send_all(codec.puback(packet.packet_id))
        elif isinstance(packet, codec.PubAck):
            if self._in_flight.pop(packet.packet_id, None) is not None:
                self._acked.unpark()
        elif isinstance(packet, codec.ConnAck):
            raise codec.ProtocolError(codec.Problem.UNEXPECTED, "a second CONNACK")
        elif isinstance(packet, codec.SubAck) and 0x80 in packet.return_codes:
            log.warning("mqtt: the broker refused a subscription: %s", packet.return_codes)

    def _command(self, packet) -> None:
        topics, config = self.topics, self.config
        topic = packet.topic
        board = topics.board_of_availability(topic)
        if board is not None:
            if isinstance(packet, codec.Publish) and (board in self.boards
                                                      or len(self.boards) < MAX_BOARDS):
                self.boards[board] = packet.payload == b"online"
            return
        if topic == f"{config.discovery_prefix}/status":
            if isinstance(packet, codec.Publish) and packet.payload == b"online":
                log.info("mqtt: Home Assistant is online: discovery configs again")
                for topic, payload in self._discovery():
                    self._queue(topic, payload, retain=True)
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

    def refuse(self, topic: str, refusal: messages.Refusal) -> None:
        self.bad_payloads += 1
        log.warning("mqtt: %s: %s: %s", topic, refusal.code.value,
                    outgoing(refusal.message))
        self.publish(self.topics.error, messages.error_message(topic, refusal))

    def _state_payload(self) -> bytes:
        return messages.encode({"state": self.state, "asks": len(self._thinking)})

    def notice(self, reply: replies.Reply) -> None:
        """A reply of no ask (a device's state): not the board's."""

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
        session = ask.session or "mqtt-" + secrets.token_hex(8)
        out = messages.AskMessages(self.topics, ask_id, session, deltas=self.config.deltas)
        origin = self.center.origin(Door.MQTT, ask_id, session, speak_on=ask.speak_on)

        async def on_reply(reply: replies.Reply) -> None:
            for topic, payload in out.on(reply):
                self.publish(topic, payload)

        try:
            await self.center.ask(Ask(origin, ask.text, who=f"mqtt ask {ask_id}"), on_reply)
        finally:
            self.asks -= 1

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
        reply = await self.center.stop(StopAsks("mqtt", stop.session))
        if reply is None:
            self.refuse(self.topics.stop, messages.Refusal(
                replies.ErrorCode.NOTHING_TO_STOP, "nothing is running"))


    # ---- the other boards ----

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


async def _first(stream, decoder: codec.Decoder) -> tuple:
    """The first packet from the broker, and any that came with it."""
    while True:
        data = await stream.receive_some(READ)
        if not data:
            raise ConnectionLost("the broker closed the connection before its CONNACK")
        packets = decoder.feed(data)
        if packets:
            return packets[0], packets[1:]


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
