"""Per-token benchmark: CPU time per streamed token of the whole daemon
against the consumers one would otherwise write, in one run.

    python bench/token_bench.py [--tokens N] [--rounds N] [--quick] [--json] [--tls]

A token server on loopback (a subprocess of this script, plain sockets and
threads) answers every POST with one Chat Completions stream of N text
deltas of 4 characters, a finish chunk and [DONE], in chunked transfer
coding on a kept-alive connection, in two regimes:
  paced  one event per write, a pause after each (the usual case: the model
         is slower than the reader, so each network read holds one event);
  bulk   16 events per write, no pause (a reader that fell behind).

Consumers, each in its own process:
  daemon       `homeagent serve` (default settings but for the paths and the
               provider) forwarding the answer to one socket client; its CPU
               is read from outside with the process's CPU clock
               (clock_getcpuclockid), all threads, around the ask;
  daemon+10    the same with 10 subscribers connected, each reading every
               reply (`subscribe`); the daemon writes a subscriber at most
               once per delta_interval_ms (16 ms by default: about 14
               paced tokens a write here; --delta-interval-ms 0 makes
               it one write per reply, as a model slower than 60 tokens/s
               gets anyway); so is the asker;
  httpx        httpx.AsyncClient under trio, aiter_raw, an SSE line framer and
               msgspec decoding into typed Structs: a bare consume-only script;
  openai       the openai SDK's AsyncOpenAI, stream=True, under asyncio;
  raw-trio     trio's TCP stream, the request written by hand and
               receive_some until the body's last chunk: one wake-up per
               read, no parsing at all: the floor.
Every consumer is timed warm: a peer makes one untimed request first and
times the second on the same kept-alive connection, as the daemon's pooled
connection to the server is warm after the warm-up round. The peers time
themselves with time.process_time() around the request (all threads); the
daemon's figure is the daemon's CPU plus the asking client's (the bench's
thread that reads and parses its replies), as each peer's includes its own
parsing. Each checks that it got the whole text, and the daemon's client
checks the done reply.

With --tls the token server speaks TLS 1.3 with a certificate of a CA made
for the run (openssl); the daemon trusts it through the provider's
ca_file, the peers through an ssl context with that CA; raw-trio is then
trio's SSLStream, the floor over TLS. Rounds are interleaved (each round runs every
consumer once, in a shuffled order) so that drift hits all alike; the ratios
are taken per round and reported as median [min-max] over the rounds.
Absolute microseconds vary with the machine and its load; the ratios are
the figures.

With --json the table goes to stderr and one JSON document to stdout.
"""


import argparse
import ctypes
import json
import os
import random
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

try:
    import agent
except ImportError:  # not installed: run from the source tree
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import agent

from agent.api.client import Client, DaemonUnavailable  # noqa: E402

TOKEN = "tok "
BULK = 16           # events per write in the bulk regime
PACE = 0.001        # seconds after each write in the paced regime
SUBSCRIBERS = 10
START_TIMEOUT = 60.0
IO_TIMEOUT = 120.0
AGENT_ROOT = str(Path(agent.__file__).resolve().parent.parent)
CONSUMERS = ("daemon", "daemon+10", "httpx", "openai", "raw-trio")
REGIMES = ("paced", "bulk")


class BenchError(Exception):
    """The run cannot give honest figures: a check failed or a process died."""


# --------------------------------------------------------------------------
# The token server
# --------------------------------------------------------------------------

def chunk_event(content: str | None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    chunk = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000,
             "model": "bench-1", "system_fingerprint": "fp_bench",
             "choices": [{"index": 0, "delta": delta, "logprobs": None,
                          "finish_reason": finish}]}
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def stream_writes(regime: str, tokens: int) -> list[bytes]:
    """The body's writes (before chunked coding): one event each when
    paced, BULK events each in bulk."""
    events = [chunk_event(TOKEN) for _ in range(tokens)]
    events.append(chunk_event(None, "stop") + b"data: [DONE]\n\n")
    if regime == "paced":
        return events
    return [b"".join(events[i:i + BULK]) for i in range(0, len(events), BULK)]


def _serve_connection(conn: socket.socket, tls: ssl.SSLContext | None) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls is not None:
        try:
            conn = tls.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            conn.close()
            return
    buffered = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in buffered:
                data = conn.recv(65536)
                if not data:
                    return
                buffered += data
            head, _, buffered = buffered.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            length = next((int(v) for k, _, v in (line.partition(":") for line in lines[1:])
                           if k.strip().lower() == "content-length"), 0)
            while len(buffered) < length:
                buffered += conn.recv(65536)
            buffered = buffered[length:]
            # POST /<regime>/<tokens>/v1/chat/completions
            _, regime, tokens, *_ = lines[0].split()[1].split("/")
            writes = stream_writes(regime, int(tokens))
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")
            for write in writes:
                conn.sendall(b"%x\r\n%s\r\n" % (len(write), write))
                if regime == "paced":
                    time.sleep(PACE)
            conn.sendall(b"0\r\n\r\n")


def serve(port_file: str, certificates: str | None = None) -> None:
    tls = None
    if certificates is not None:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.minimum_version = ssl.TLSVersion.TLSv1_3
        tls.load_cert_chain(os.path.join(certificates, "server.pem"),
                            os.path.join(certificates, "server.key"))
    listener = socket.create_server(("127.0.0.1", 0))
    Path(port_file).write_text(str(listener.getsockname()[1]))
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve_connection, args=(conn, tls), daemon=True).start()


def make_certificates(directory: str) -> None:
    """A CA for this run (ca.pem) and the token server's certificate for
    127.0.0.1 signed by it (server.pem, server.key)."""
    def run(*argv: str) -> None:
        subprocess.run(["openssl", *argv], check=True, capture_output=True, cwd=directory)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-subj", "/CN=token bench CA", "-keyout", "ca.key", "-out", "ca.pem")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "server.key", "-out", "server.csr")
    Path(directory, "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "1", "-extfile", "san.ext", "-out", "server.pem")


def client_tls(ca_file: str | None) -> ssl.SSLContext | None:
    return None if ca_file is None else ssl.create_default_context(cafile=ca_file)


# --------------------------------------------------------------------------
# The consumers that are not the daemon (run as: token_bench.py consume KIND URL N)
# --------------------------------------------------------------------------

def consume_httpx(url: str, tokens: int, ca_file: str | None) -> tuple[float, str]:
    import httpx
    import msgspec
    import trio

    class Delta(msgspec.Struct, gc=False):
        content: str | None = None

    class Choice(msgspec.Struct, gc=False):
        delta: Delta
        finish_reason: str | None = None

    class Chunk(msgspec.Struct, gc=False):
        choices: list[Choice]

    decode = msgspec.json.Decoder(Chunk).decode

    async def ask(client: httpx.AsyncClient) -> tuple[float, str]:
        start = time.process_time()
        pieces: list[str] = []
        pending = b""
        body = {"model": "bench-1", "stream": True,
                "messages": [{"role": "user", "content": "go"}]}
        async with client.stream("POST", url + "/chat/completions", json=body) as response:
            async for read in response.aiter_raw():
                pending += read
                *events, pending = pending.split(b"\n\n")
                for event in events:
                    for line in event.split(b"\n"):
                        if line.startswith(b"data: ") and line != b"data: [DONE]":
                            for choice in decode(line[6:]).choices:
                                if choice.delta.content:
                                    pieces.append(choice.delta.content)
        return time.process_time() - start, "".join(pieces)

    async def main() -> tuple[float, str]:
        async with httpx.AsyncClient(verify=client_tls(ca_file) or True) as client:
            await ask(client)  # warm: the timed request reuses its connection
            return await ask(client)

    return trio.run(main)


def consume_openai(url: str, tokens: int, ca_file: str | None) -> tuple[float, str]:
    import asyncio

    import httpx
    import openai

    async def ask(client: openai.AsyncOpenAI) -> tuple[float, str]:
        start = time.process_time()
        pieces: list[str] = []
        stream = await client.chat.completions.create(
            model="bench-1", stream=True, messages=[{"role": "user", "content": "go"}])
        async for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
        return time.process_time() - start, "".join(pieces)

    async def main() -> tuple[float, str]:
        client = openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0,
                                    http_client=httpx.AsyncClient(
                                        verify=client_tls(ca_file) or True))
        await ask(client)  # warm: the timed request reuses its connection
        result = await ask(client)
        await client.close()
        return result

    return asyncio.run(main())


def consume_raw_trio(url: str, tokens: int, ca_file: str | None) -> tuple[float, str]:
    import trio

    host_port, _, path = url.partition("://")[2].partition("/")
    host, _, port = host_port.partition(":")

    async def ask(stream: trio.abc.Stream) -> tuple[float, str]:
        start = time.process_time()
        await stream.send_all(f"POST /{path}/chat/completions HTTP/1.1\r\nhost: {host_port}\r\n"
                              "content-length: 0\r\n\r\n".encode())
        tail = b""
        reads = 0
        while not tail.endswith(b"\r\n0\r\n\r\n"):
            data = await stream.receive_some(65536)
            if not data:
                raise BenchError("the token server closed the connection")
            reads += 1
            tail = (tail + data)[-16:]
        # No parsing here by design: the text check is the read count's.
        return time.process_time() - start, f"{reads} reads"

    async def main() -> tuple[float, str]:
        stream = await trio.open_tcp_stream(host, int(port))
        if ca_file is not None:
            stream = trio.SSLStream(stream, client_tls(ca_file), server_hostname=host,
                                    https_compatible=True)
        await ask(stream)  # warm: the timed request reuses its connection
        result = await ask(stream)
        await stream.aclose()
        return result

    return trio.run(main)


PEERS = {"httpx": consume_httpx, "openai": consume_openai, "raw-trio": consume_raw_trio}


def consume(kind: str, url: str, tokens: int, ca_file: str | None) -> None:
    spent, text = PEERS[kind](url, tokens, ca_file)
    print(json.dumps({"cpu": spent, "text": text}))


# --------------------------------------------------------------------------
# Processes and clocks
# --------------------------------------------------------------------------

def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [AGENT_ROOT, env.get("PYTHONPATH")]))
    for name in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "HOMEAGENT_SOCKET"):
        env.pop(name, None)
    return env


_librt = ctypes.CDLL(None, use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def process_cpu(pid: int) -> float:
    """Seconds of CPU another process has used, all its threads, exited
    ones included (its CPU-time clock, nanosecond resolution)."""
    clock = ctypes.c_int()
    if _librt.clock_getcpuclockid(pid, ctypes.byref(clock)) != 0:
        raise BenchError(f"no CPU clock for pid {pid}")
    spec = _Timespec()
    if _librt.clock_gettime(clock, ctypes.byref(spec)) != 0:
        raise BenchError(f"clock_gettime failed for pid {pid}: errno {ctypes.get_errno()}")
    return spec.tv_sec + spec.tv_nsec / 1e9


def start_server(python: str, directory: str,
                 tls: bool = False) -> tuple[subprocess.Popen, str]:
    """The token server; with tls, a CA and its certificate made in directory."""
    port_file = os.path.join(directory, "port")
    if tls:
        make_certificates(directory)
    process = subprocess.Popen([python, os.path.abspath(__file__), "serve", port_file,
                                *([directory] if tls else [])],
                               env=child_env(), stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT
    while not os.path.exists(port_file) or not Path(port_file).read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise BenchError("the token server did not start")
        time.sleep(0.02)
    scheme = "https" if tls else "http"
    return process, f"{scheme}://127.0.0.1:{Path(port_file).read_text()}"


def start_daemon(python: str, directory: str, server_url: str, tokens: int,
                 delta_interval_ms: int | None = None,
                 ca_file: str | None = None) -> tuple[subprocess.Popen, str]:
    socket_path = os.path.join(directory, "agent.sock")
    config = os.path.join(directory, "config.toml")
    providers = "".join(
        f'[providers.{regime}]\nprotocol = "openai-chat"\n'
        f'base_url = "{server_url}/{regime}/{tokens}/v1"\nmodel = "bench-1"\n'
        + ("" if ca_file is None else f"ca_file = {json.dumps(ca_file)}\n")
        for regime in REGIMES)
    Path(config).write_text(
        f'default_provider = "paced"\n[daemon]\nsocket = {json.dumps(socket_path)}\n'
        f'state_directory = {json.dumps(os.path.join(directory, "state"))}\n'
        + ("" if delta_interval_ms is None
           else f"delta_interval_ms = {delta_interval_ms}\n")
        + providers)
    log = open(os.path.join(directory, "daemon.log"), "ab")
    process = subprocess.Popen([python, "-m", "agent.cli", "serve", "--config", config],
                               stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                               env=child_env())
    log.close()
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise BenchError(f"the daemon exited ({process.returncode})")
        try:
            Client(socket_path, timeout=IO_TIMEOUT).close()
            return process, socket_path
        except (DaemonUnavailable, OSError):
            if time.monotonic() > deadline:
                process.kill()
                raise BenchError("the daemon did not start") from None
            time.sleep(0.05)


class Subscribers:
    """Connections subscribed to every reply, each read on its own thread
    and counting the deltas it saw (the replies are parsed, as a real
    subscriber would)."""

    def __init__(self, socket_path: str, count: int) -> None:
        self.socks = []
        self.deltas = [0] * count
        for index in range(count):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(IO_TIMEOUT)
            sock.connect(socket_path)
            lines = sock.makefile("rb")
            lines.readline()  # hello
            sock.sendall(b'{"id": 1, "op": "subscribe"}\n')
            if json.loads(lines.readline()).get("type") != "subscribed":
                raise BenchError("a subscriber was not subscribed")
            self.socks.append(sock)
            threading.Thread(target=self._read, args=(index, lines), daemon=True).start()

    def _read(self, index: int, lines) -> None:
        try:
            for line in lines:
                if json.loads(line).get("type") == "delta":
                    self.deltas[index] += 1
        except (OSError, ValueError):
            return  # closed at the end of its round

    def wait_for(self, deltas: int) -> None:
        deadline = time.monotonic() + IO_TIMEOUT
        while min(self.deltas) < deltas:
            if time.monotonic() > deadline:
                raise BenchError(f"subscribers saw {self.deltas} deltas, not {deltas} each")
            time.sleep(0.002)

    def close(self) -> None:
        for sock in self.socks:
            # shutdown first: the reader's file holds the descriptor open past close()
            sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def wait_idle(client: Client, clients: int) -> None:
    """Until the daemon has these clients and no ask: what a round left
    (closed subscribers, a commit) is not billed to the next one."""
    deadline = time.monotonic() + IO_TIMEOUT
    while True:
        status = client.call("status")
        if not status["active"] and status["clients"] == clients:
            return
        if time.monotonic() > deadline:
            raise BenchError(f"the daemon is not idle: {status}")
        time.sleep(0.01)


def daemon_round(pid: int, client: Client, socket_path: str, regime: str, tokens: int,
                 subscribers: int) -> float:
    """CPU seconds the daemon spent on one ask forwarded to this client and
    to `subscribers` subscribers, and this thread on reading and parsing the
    replies (the asking client's share); every delta is checked to have
    arrived."""
    listening = Subscribers(socket_path, subscribers) if subscribers else None
    try:
        wait_idle(client, 1 + subscribers)
        before = process_cpu(pid)
        client_before = time.thread_time()
        request_id = client.send("ask", prompt="go", provider=regime, session="bench")
        pieces = []
        done = None
        for reply in client.replies(request_id, "ask"):
            if reply.get("type") == "delta":
                pieces.append(reply["text"])
            elif reply.get("type") == "done":
                done = reply
            elif reply.get("type") in ("error", "shutdown"):
                raise BenchError(f"the daemon answered {reply}")
        client_spent = time.thread_time() - client_before
        if listening is not None:
            listening.wait_for(len(pieces))
        spent = process_cpu(pid) - before + client_spent
    finally:
        if listening is not None:
            listening.close()
    if "".join(pieces) != TOKEN * tokens or done is None or done["text"] != TOKEN * tokens:
        raise BenchError(f"the daemon's answer is not the {tokens} tokens sent")
    client.call("forget", session="bench")  # the next round sends the same request
    return spent


def peer_round(python: str, kind: str, url: str, tokens: int,
               ca_file: str | None = None) -> float:
    run = subprocess.run([python, os.path.abspath(__file__), "consume", kind, url, str(tokens),
                          *([ca_file] if ca_file else [])],
                         capture_output=True, text=True, env=child_env(), timeout=IO_TIMEOUT)
    if run.returncode != 0:
        raise BenchError(f"{kind} failed:\n{run.stderr[-3000:]}")
    result = json.loads(run.stdout)
    if kind == "raw-trio":
        # Paced, a reader that keeps up reads about once a write: the regime
        # is what it says. (Bulk writes may pile up into a few reads.)
        reads = int(result["text"].split()[0])
        # Said, not raised: a loaded or emulated machine may merge writes, and
        # a run that fails by chance would block CI; the figures then say so.
        if url.rsplit("/", 3)[1] == "paced" and reads < tokens // 2:
            print(f"token_bench: raw-trio read {reads} times for {tokens} paced writes: "
                  "the reader fell behind, this round is nearer bulk", file=sys.stderr)
    elif result["text"] != TOKEN * tokens:
        raise BenchError(f"{kind} did not get the {tokens} tokens sent")
    return result["cpu"]


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------

def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run(tokens: int = 2000, rounds: int = 7, warmup: int = 1,
        python: str = sys.executable, delta_interval_ms: int | None = None,
        tls: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="homeagent-token-bench-") as directory:
        server, server_url = start_server(python, directory, tls)
        ca_file = os.path.join(directory, "ca.pem") if tls else None
        daemon = None
        try:
            daemon, socket_path = start_daemon(python, directory, server_url, tokens,
                                               delta_interval_ms, ca_file)
            with Client(socket_path, timeout=IO_TIMEOUT) as client:
                chance = random.Random(16)
                per_token: dict[str, dict[str, list[float]]] = {
                    regime: {kind: [] for kind in CONSUMERS} for regime in REGIMES}
                for round_number in range(warmup + rounds):
                    for regime in REGIMES:
                        order = list(CONSUMERS)
                        chance.shuffle(order)
                        for kind in order:
                            if kind.startswith("daemon"):
                                spent = daemon_round(
                                    daemon.pid, client, socket_path, regime, tokens,
                                    SUBSCRIBERS if kind == "daemon+10" else 0)
                            else:
                                spent = peer_round(python, kind,
                                                   f"{server_url}/{regime}/{tokens}/v1", tokens,
                                                   ca_file)
                            if round_number >= warmup:
                                per_token[regime][kind].append(spent / tokens * 1e6)
        finally:
            if daemon is not None:
                daemon.terminate()
                daemon.wait(timeout=30)
            server.kill()
            server.wait()
    result: dict = {"tokens": tokens, "rounds": rounds, "python": sys.version.split()[0],
                    "machine": os.uname().machine, "regimes": {},
                    "delta_interval_ms": delta_interval_ms, "tls": tls}
    for regime in REGIMES:
        times = per_token[regime]
        daemon_us = times["daemon"]
        ratios = {peer: spread([d / p for d, p in zip(daemon_us, times[peer])])
                  for peer in ("httpx", "openai", "raw-trio")}
        extra = spread([(s - d) / SUBSCRIBERS / d
                        for s, d in zip(times["daemon+10"], daemon_us)])
        result["regimes"][regime] = {
            "us_per_token": {kind: spread(values) for kind, values in times.items()},
            "daemon_over": ratios, "per_extra_subscriber": extra}
    return result


def report(result: dict) -> str:
    interval = result.get("delta_interval_ms")
    lines = [f"{result['tokens']} tokens a stream over {'TLS' if result.get('tls') else 'plain HTTP'}, "
             f"{result['rounds']} interleaved rounds, "
             f"Python {result['python']} on {result['machine']}; the daemon's "
             f"delta_interval_ms {'default' if interval is None else interval}"]
    for regime, figures in result["regimes"].items():
        lines.append("")
        lines.append(f"{regime}: CPU per token, us (median [min-max])")
        for kind, values in figures["us_per_token"].items():
            lines.append(f"  {kind:<10} {values['median']:8.1f}  "
                         f"[{values['min']:.1f}-{values['max']:.1f}]")
        for peer, ratio in figures["daemon_over"].items():
            lines.append(f"  daemon / {peer:<9} {ratio['median']:.2f}x  "
                         f"[{ratio['min']:.2f}-{ratio['max']:.2f}]")
        extra = figures["per_extra_subscriber"]
        lines.append(f"  each extra subscriber: {100 * extra['median']:.1f} % of one client "
                     f"[{100 * extra['min']:.1f}-{100 * extra['max']:.1f}]")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        serve(*argv[1:3])
        return 0
    if argv[:1] == ["consume"]:
        consume(argv[1], argv[2], int(argv[3]), argv[4] if len(argv) > 4 else None)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="200 tokens, 2 rounds")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--delta-interval-ms", type=int, default=None,
                        help="the daemon's [daemon] delta_interval_ms (default: its own)")
    parser.add_argument("--tls", action="store_true",
                        help="TLS 1.3 to the token server, with a CA made for the run")
    args = parser.parse_args(argv)
    tokens, rounds = (200, 2) if args.quick else (args.tokens, args.rounds)
    try:
        result = run(tokens, rounds, delta_interval_ms=args.delta_interval_ms, tls=args.tls)
    except BenchError as exc:
        print(f"token_bench: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(report(result), file=sys.stderr)
        print(json.dumps(result))
    else:
        print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
