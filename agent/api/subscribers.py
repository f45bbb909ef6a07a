"""The socket connections that sent `subscribe`: a listener of the center
(agent/core/center.py) that shows each of them every reply of every ask,
under its own id, with the ask it came from (`request`, the Origin's wire
form), and the notices: the devices' states and the voice door's.

Each reply is encoded once for all subscribers and readdressed to each; a
streamed piece goes through the connection's send_piece (it may be held
for the connection's delta interval), anything else through send. Neither
waits: a subscriber that does not read overflows its own connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from agent.api.wire import address_prefix, encode, readdress
from agent.core import replies
from agent.core.commands import Origin
from agent.core.edge import outgoing
from agent.core.replies import RequestId


@dataclass(frozen=True, slots=True, eq=False)
class Subscription:
    """A connection's `subscribe` in effect."""
    request_id: RequestId
    reasoning: bool                # reasoning replies too
    send: Callable[[bytes], None]  # the connection's queue; never waits
    send_piece: Callable[[bytes], None]  # the same for a streamed piece (it may be held)
    prefix: bytes = field(init=False)  # of its lines: address_prefix(request_id), masked

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix", address_prefix(outgoing(self.request_id)))


class Subscribers:
    def __init__(self) -> None:
        self._subscriptions: dict[Subscription, None] = {}  # in the order they came

    def subscribe(self, subscription: Subscription) -> None:
        self._subscriptions[subscription] = None

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.pop(subscription, None)

    async def deliver(self, reply: replies.Reply, origin: Origin) -> None:
        if self._subscriptions:
            self._send(reply, origin.request)

    def notice(self, reply: replies.Reply) -> None:
        """A reply of no ask (replies.Device, VoiceState, TimerRing): without `request`."""
        self._send(reply, None)

    def _send(self, reply: replies.Reply, request) -> None:
        if not self._subscriptions:
            return
        line = encode(reply, request=request)  # once for all, then addressed to each
        if isinstance(reply, replies.STREAMED):
            reasoning = isinstance(reply, replies.Reasoning)
            for subscription in self._subscriptions:
                if subscription.reasoning or not reasoning:
                    subscription.send_piece(readdress(line, subscription.prefix))
        else:
            for subscription in self._subscriptions:
                subscription.send(readdress(line, subscription.prefix))
