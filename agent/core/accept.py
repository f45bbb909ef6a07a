"""The one accept loop of every listening door (the socket API, Wyoming).

As trio's serve_listeners: accept() failing for lack of a resource
(EMFILE, ENFILE, ENOBUFS, ENOMEM) is logged, throttled, and retried after
ACCEPT_RETRY, while the connection waits in the kernel's backlog; any other
failure ends the loop. Each accepted stream goes to the door's handler,
which decides at once whether to serve it (its caps, its access policy).
"""

from __future__ import annotations

import errno
import logging
import os
from typing import Callable

import trio

from agent.core.throttled import Throttled

ACCEPT_RETRY = 0.1  # seconds between accepts while the process is out of descriptors
ACCEPT_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


async def accept_loop(listener: trio.SocketListener, accepted: Callable[[trio.SocketStream], None],
                      log: logging.Logger) -> None:
    """Accept on listener until cancelled; accepted(stream) must not wait
    (it starts the connection's task, or refuses it)."""
    failures = Throttled(log, logging.ERROR)
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            if exc.errno not in ACCEPT_RESOURCE_ERRNOS:
                raise
            failures.note("accept failed: %s; retrying every %g s", os.strerror(exc.errno),
                          ACCEPT_RETRY)
            await trio.sleep(ACCEPT_RETRY)
            continue
        accepted(stream)
