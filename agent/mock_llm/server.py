"""The trio shell of the mock server: sockets and HTTP/1.1 framing (h11)
around MockApp, which makes every decision.

One nursery (trio.serve_listeners'), one task per connection, several
requests per connection (keep-alive). Cancelling serve() closes every
connection.
"""

from __future__ import annotations

import itertools
import re
import signal
import subprocess
import sys
from functools import partial
from typing import Any

import h11
import trio

from agent.mock_llm.app import FAULTS, Ending, MockApp, Reply

RECEIVE_SIZE = 65536
MAX_BODY = 8 * 1024 * 1024
SERVER_HEADER = ("server", "homeagent-mock-llm")
REFUSE = "refuse"  # a fault of the instance only: no HTTP is spoken at all
# the line main() prints once it serves (or refuses) on its port
LISTENING = re.compile(r"mock-llm (?:listening|refusing connections) on (http://\S+)")

__all__ = ["FAULTS", "REFUSE", "main", "serve", "spawn"]


def spawn(python: str = sys.executable, *args: str, **popen: Any) -> tuple[subprocess.Popen, str]:
    """`homeagent mock-llm --port 0 ARGS` as a child process: the process and
    its base URL, read from the line it prints once listening. RuntimeError
    (the child stopped) when it does not start."""
    process = subprocess.Popen([python, "-m", "agent.cli", "mock-llm", "--port", "0", *args],
                               stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                               **popen)
    line = process.stdout.readline()
    match = LISTENING.search(line)
    if match is None:
        process.kill()
        process.wait()
        process.stdout.close()
        raise RuntimeError(f"mock-llm did not start (it said {line.strip()!r})")
    return process, match.group(1)


async def serve(host: str = "127.0.0.1", port: int = 0, *, app: MockApp | None = None,
                require_key: str | None = None,
                task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve until cancelled; `nursery.start(serve, ...)` returns the bound port."""
    app = app if app is not None else MockApp(require_key)
    if REFUSE in app.faults:
        await _refuse_all(host, port, task_status)
        return
    # A name such as "localhost" may give several listeners, each on its own
    # port when port is 0: serve the first only, so the printed address is all of it.
    first, *others = await trio.open_tcp_listeners(port, host=host)
    for extra in others:
        await extra.aclose()
    numbers = itertools.count(1)

    async def handler(stream: trio.SocketStream) -> None:
        await _connection(app, next(numbers), stream)

    task_status.started(first.socket.getsockname()[1])
    await trio.serve_listeners(handler, [first])


async def _refuse_all(host: str, port: int, task_status) -> None:
    """Hold the port bound and never listen on it: the kernel refuses every
    connection, as for a server that is down, and no other program can take
    the port meanwhile."""
    family = trio.socket.AF_INET6 if ":" in host else trio.socket.AF_INET
    with trio.socket.socket(family, trio.socket.SOCK_STREAM) as sock:
        await sock.bind((host, port))
        task_status.started(sock.getsockname()[1])
        await trio.sleep_forever()


async def _connection(app: MockApp, number: int, stream: trio.SocketStream) -> None:
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            request = await _read_request(conn, stream)
            if request is None:
                return
            head, body = request
            reply = app.handle(number, head.method.decode("ascii"), head.target.decode("ascii"),
                               [(n.decode("ascii"), v.decode("latin-1")) for n, v in head.headers],
                               body)
            if not await _send(conn, stream, reply) or conn.our_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError as error:
        await _refuse(conn, stream, error.error_status_hint, str(error))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client went away: nobody left to answer
    finally:
        await trio.aclose_forcefully(stream)


async def _read_request(conn: h11.Connection, stream: trio.SocketStream):
    """The next request's head and whole body, or None when the client closed."""
    head, body = None, bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(RECEIVE_SIZE))
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY:
                raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
        elif isinstance(event, h11.EndOfMessage):
            return head, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            return None


async def _send(conn: h11.Connection, stream: trio.SocketStream, reply: Reply) -> bool:
    """Send the reply; False when the connection must not be reused."""
    await stream.send_all(conn.send(h11.Response(status_code=reply.status,
                                                 headers=[*reply.headers, SERVER_HEADER])))
    for index, part in enumerate(reply.parts):
        if index and reply.delay:
            await trio.sleep(reply.delay)
        await stream.send_all(conn.send(h11.Data(data=part)))
    if reply.ending is Ending.DROP:
        return False
    if reply.ending is Ending.STALL:
        # Keep reading (and discarding) so the client's close is seen and the task ends.
        while await stream.receive_some(RECEIVE_SIZE):
            pass
        return False
    await stream.send_all(conn.send(h11.EndOfMessage()))
    return True


async def _refuse(conn: h11.Connection, stream: trio.SocketStream, status: int,
                  message: str) -> None:
    """Answer a request h11 could not parse, when a response can still start."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    body = message.encode()
    try:
        await stream.send_all(conn.send(h11.Response(status_code=status, headers=[
            ("content-type", "text/plain"), ("content-length", str(len(body))),
            ("connection", "close"), SERVER_HEADER])))
        await stream.send_all(conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.LocalProtocolError):
        pass


def main(host: str, port: int, require_key: str | None = None,
         faults: frozenset[str] = frozenset(), retry_after: float = 1.0) -> int:
    """Serve until SIGINT or SIGTERM, then exit 0."""
    trio.run(_run, host, port, MockApp(require_key, faults=faults, retry_after=retry_after))
    return 0


async def _run(host: str, port: int, app: MockApp) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(partial(serve, host, port, app=app))
            shown = f"[{host}]" if ":" in host else host
            doing = "refusing connections" if REFUSE in app.faults else "listening"
            print(f"mock-llm {doing} on http://{shown}:{bound}", flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break
