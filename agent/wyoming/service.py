"""The Wyoming conversation service: Home Assistant (or any Wyoming client)
hands the daemon what was said, and gets the answer back as it streams.

Home Assistant's Wyoming integration can use an external "handle" service
as its conversation agent. This is one: it answers `describe` with an
`info` that offers a handle program with `supports_handled_streaming`, and
each `transcript` becomes an ask, published to subscribers and devices like
any other (the speech devices speak it too). The replies go back as
`handled-start`, a `handled-chunk` per delta, `handled-stop` and the final
`handled` with the whole text; a failed ask as `not-handled` with the reason
(after `handled-stop` if chunks had gone). `ping` gets `pong`.

Sessions: a transcript's `context.conversation_id` names its session, so a
conversation Home Assistant continues keeps its history; the id is the
peer's text, so the session is named by its hash (`wyoming-<16 hex>`),
never by the text itself. A transcript without one gets a fresh session.

Access: the listener is loopback TCP unless configured otherwise, and a
peer whose address is neither loopback nor in `wyoming.allow` is closed at
once (a Unix socket is guarded by its file mode). At most
`wyoming.max_connections` peers at a time; each one's outgoing events wait
in a queue of QUEUE events: a peer that stops reading while that fills is
dropped rather than let it hold up the answer for the other receivers. A
peer that breaks the framing is closed with the reason logged.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import os
import secrets
import stat
from typing import Any

import trio

from agent.core import replies
from agent.core.accept import accept_loop
from agent.core.center import Center
from agent.core.commands import Ask, Door
from agent.core.edge import outgoing
from agent.wyoming import framing as wyoming
from agent.wyoming.config import WyomingConfig

log = logging.getLogger("homeagent.wyoming")

QUEUE = 256            # events waiting for one peer
DRAIN = 5.0            # seconds a closing peer's queued events may take
READ = 65536
PROGRAM = "homeagent"


class ListenError(Exception):
    """wyoming.listen cannot be listened on: the daemon does not start."""


def session_for(context: Any) -> str:
    conversation = context.get("conversation_id") if isinstance(context, dict) else None
    if isinstance(conversation, str) and conversation:
        return "wyoming-" + hashlib.sha256(conversation.encode("utf-8", "replace")).hexdigest()[:16]
    return "wyoming-" + secrets.token_hex(8)


class ConversationService:
    def __init__(self, center: Center, config: WyomingConfig, version: str) -> None:
        self.center = center
        self.config = config
        self.version = version
        self.connections = 0
        self.refused = 0   # peers closed at once: not allowed, or too many
        self.transcripts = 0

    @property
    def where(self) -> str:
        family, host, port = self.config.listen
        return f"tcp://{host}:{port}" if family == "tcp" else f"unix:{host}"

    def status(self) -> dict:
        return {"listen": self.where, "connections": self.connections,
                "refused": self.refused, "transcripts": self.transcripts}

    def info(self) -> wyoming.Event:
        attribution = {"name": "homeagent", "url": ""}
        return wyoming.Event("info", {"handle": [{
            "name": PROGRAM, "attribution": attribution, "installed": True,
            "description": "homeagent, the LLM agent daemon", "version": self.version,
            "supports_handled_streaming": True,
            "models": [{"name": PROGRAM, "attribution": attribution, "installed": True,
                        "description": None, "version": self.version,
                        "languages": list(self.config.languages)}]}]})

    async def listen(self) -> list:
        """The listeners of wyoming.listen; raises ListenError naming it."""
        family, host, port = self.config.listen
        where = self.where
        try:
            if family == "tcp":
                listeners = await trio.open_tcp_listeners(port, host=host)
            else:
                listeners = [await _unix_listener(host)]
        except OSError as error:
            raise ListenError(f"wyoming.listen {where}: {error.strerror or error}") from None
        log.info("wyoming conversation service on %s", where)
        return listeners

    async def serve(self, listeners: list) -> None:
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(self._accept, listener, nursery)

    async def _accept(self, listener, nursery: trio.Nursery) -> None:
        def accepted(stream) -> None:
            peer = _peer_address(stream)
            if not self._allowed(peer):
                self.refused += 1
                log.warning("wyoming: %s refused: not loopback nor in wyoming.allow", peer)
                stream.socket.close()
            elif self.connections >= self.config.max_connections:
                self.refused += 1
                log.warning("wyoming: %s refused: %d connections already "
                            "(wyoming.max_connections)", peer, self.connections)
                stream.socket.close()
            else:
                self.connections += 1
                nursery.start_soon(self._connection, stream, peer)

        async with listener:
            await accept_loop(listener, accepted, log)

    def _allowed(self, peer: str | None) -> bool:
        if peer is None:  # a Unix socket: its file mode decides
            return True
        address = ipaddress.ip_address(peer.split("%")[0])
        if getattr(address, "ipv4_mapped", None):
            address = address.ipv4_mapped
        return address.is_loopback or any(address in net for net in self.config.allow)

    async def _connection(self, stream, peer: str | None) -> None:
        connection = _Peer(f"wyoming peer {peer or 'on the unix socket'}")
        try:
            async with stream, trio.open_nursery() as nursery:
                connection.scope = nursery.cancel_scope
                nursery.start_soon(connection.write, stream)
                await self._read(stream, connection)
                # what was queued before the end still goes out, for a while
                connection.close()
                nursery.cancel_scope.deadline = trio.current_time() + DRAIN
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            log.info("%s: connection lost: %s", connection.who, error)
        finally:
            self.connections -= 1

    async def _read(self, stream, peer: _Peer) -> None:
        reader = wyoming.Reader()
        while True:
            data = await stream.receive_some(READ)
            for item in reader.feed(data) if data else reader.close():
                if type(item) is wyoming.FramingError:
                    log.warning("%s: closed: %s: %s", peer.who, item.problem.value, item.detail)
                    return
                await self._event(item, peer)
            if not data:
                return

    async def _event(self, event: wyoming.Event, peer: _Peer) -> None:
        if event.type == "describe":
            peer.queue(self.info())
        elif event.type == "ping":
            text = event.data.get("text")
            peer.queue(wyoming.Event("pong", {"text": outgoing(text)} if isinstance(text, str)
                                     else {}))
        elif event.type == "transcript":
            await self._transcript(event.data, peer)

    async def _transcript(self, data: dict, peer: _Peer) -> None:
        text, context = data.get("text"), data.get("context")
        echo = {"context": outgoing(context)} if isinstance(context, dict) else {}
        if not (isinstance(text, str) and text.strip()):
            peer.queue(wyoming.Event("not-handled", {"text": "empty transcript", **echo}))
            return
        self.transcripts += 1
        streamed = False

        async def on_reply(reply: replies.Reply) -> None:
            nonlocal streamed
            if isinstance(reply, replies.Delta):
                if not streamed:
                    streamed = True
                    peer.queue(wyoming.Event("handled-start", echo))
                peer.queue(wyoming.Event("handled-chunk", {"text": reply.text}))
                # The writer's turn: the deltas of one upstream read come
                # without a checkpoint, and hundreds of them would fill the
                # queue of a peer that reads as fast as it can.
                await trio.lowlevel.checkpoint()
            elif isinstance(reply, (replies.Done, replies.Error)):
                if streamed:
                    peer.queue(wyoming.Event("handled-stop"))
                if isinstance(reply, replies.Done):
                    peer.queue(wyoming.Event("handled", {"text": reply.text, **echo}))
                else:
                    peer.queue(wyoming.Event("not-handled", {
                        "text": f"{reply.code.value}: {reply.message}", **echo}))

        origin = self.center.origin(Door.WYOMING, peer.who, session_for(context))
        await self.center.ask(Ask(origin, text, who=peer.who), on_reply)


class _Peer:
    """One connection's outgoing events: a bounded queue and the task that
    writes it. A peer that lets QUEUE events pile up is closed (its ask is
    cancelled, as when a socket client goes away): queue() never waits, so
    it never holds up the answer for the other receivers."""

    def __init__(self, who: str) -> None:
        self.who = who
        self.scope: trio.CancelScope | None = None
        self._send, self._receive = trio.open_memory_channel(QUEUE)

    def queue(self, event: wyoming.Event) -> None:
        if self.scope.cancel_called:
            return  # closed: the replies until the ask sees its cancellation go nowhere
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:
            log.warning("%s: closed: it did not read %d events", self.who, QUEUE)
            self.scope.cancel()

    def close(self) -> None:
        self._send.close()

    async def write(self, stream) -> None:
        async for event in self._receive:
            # What waits goes out in one write: a Unix socket holds a few
            # hundred small writes but a thousand events in one.
            data = [wyoming.encode(event)]
            while True:
                try:
                    data.append(wyoming.encode(self._receive.receive_nowait()))
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            await stream.send_all(b"".join(data))


def _peer_address(stream) -> str | None:
    sock = getattr(stream, "socket", None)
    if sock is None or sock.family == trio.socket.AF_UNIX:
        return None
    return sock.getpeername()[0]


async def _unix_listener(path: str) -> trio.SocketListener:
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)  # a socket left by an earlier daemon
    except FileNotFoundError:
        pass
    sock = trio.socket.socket(trio.socket.AF_UNIX)
    await sock.bind(path)
    os.chmod(path, 0o660)
    sock.listen(16)
    return trio.SocketListener(sock)
