"""Speech bench: the time to first audio of an answer spoken while it
streams, against the baseline that waits for the whole answer and then
synthesizes it, on the same espeak-ng Wyoming TTS server, in one run.

    python bench/tts_bench.py [--rounds N] [--warmup N] [--json]

Processes, all on this host: `homeagent mock-llm`, answering every ask
with ANSWER (five sentences) cut into 4-character deltas, one every
DELAY_MS = 33 ms (about 30 tokens/s at about 4 characters a token, the
mean of English text for OpenAI's tokenizers); two espeak-ng Wyoming TTS
servers (tests/wyoming_tts_server.py, built on the `wyoming` package's
server classes), one advertising streaming text and one not; three
`homeagent serve`:
  streaming  a wyoming-tts device on the streaming server: every delta goes
             out as a synthesize-chunk; the server speaks each sentence as
             soon as it is complete;
  sentence   a wyoming-tts device on the other server: one synthesize per
             sentence of the daemon's segmenter, sent when it is complete;
  baseline   no device: the bench reads the whole answer from it, then
             sends one synthesize with the whole text to the non-streaming
             server on a connection kept open.
Each device's sink is the "file" sink on a FIFO the bench reads (its first
PCM byte is the moment the device handed audio to the sink); the
baseline's sink is the bench itself, the first audio-chunk it reads.

Each round runs the three paths once each, the order rotating, on a
fresh session (forgotten after the round, outside the clock), and measures
on the client of the ask, all on CLOCK_MONOTONIC (one clock for every
process of the host):
  first audio      from the first delta read to the first PCM byte at the
                   sink;
  first sentence   from the first delta to the delta that completes the
                   first sentence, its stop and the whitespace after it
                   (the earliest a segmenter can know it is over);
  synthesis        of the first sentence in that answer, as its server
                   timed espeak-ng (its --times file; espeak-ng makes a
                   sentence whole before its first chunk); the baseline's:
                   of the whole answer;
  to server        from the first sentence complete (the baseline: done) to
                   espeak-ng's start: the daemon, the device and the
                   server's reading;
  to sink          from espeak-ng's end to the first PCM byte at the sink:
                   the server's chunks, the device's reading, the sink;
  pipelining       the audio at the sink played back at its real rate from
                   its first byte: how long before sentence n would finish
                   playing sentence n+1's first byte was there (its lead;
                   negative: a gap in the speech).
The audio at every sink is checked against what espeak-ng makes for the
sentences (the servers log what they spoke), else FAIL.

Targets, checked on the medians and per round: first audio no later than
first sentence + synthesis + 30 ms, and baseline / first audio >= 3.
Ratios are per round (the paths of one round run close together), shown
with their median and interquartile range.

With --json the table goes to stderr and one JSON document to stdout.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import select
import socket
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

from agent.wyoming import framing as wyoming  # noqa: E402
from agent.api.client import Client  # noqa: E402
from agent.demo import terminate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path):
    """A script of this tree as a module (bench/ and tests/ are no packages)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


db = _load("homeagent_bench_daemon_bench", ROOT / "bench" / "daemon_bench.py")
tts_server = _load("homeagent_bench_wyoming_tts_server", ROOT / "tests" / "wyoming_tts_server.py")
BenchError = db.BenchError

SENTENCES = ["The kitchen lights are on and the oven is heating.",
             "The living room is at twenty one degrees.",
             "The front door is locked and the porch light is off.",
             "Rain is expected after six this evening.",
             "Shall I close the bedroom windows before it starts?"]
ANSWER = " ".join(SENTENCES)
PROMPT = "Give me the evening report."
DELAY_MS = 33
SLACK_MS = 30.0         # the first-audio target's allowance
RATIO_TARGET = 3.0
PATHS = ("streaming", "sentence", "baseline")
IO_TIMEOUT = 60.0


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------


def spread(values: list[float]) -> dict:
    """Median, quartiles, min and max (quartiles by statistics' inclusive method)."""
    if len(values) > 1:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    else:
        q1 = q3 = values[0]
    return {"median": statistics.median(values), "q1": q1, "q3": q3,
            "min": min(values), "max": max(values)}


def first_sentence_end(deltas: list[tuple[int, str]], sentence: str) -> int:
    """The time of the delta after which the text holds `sentence` and the
    whitespace after it."""
    text = ""
    for at, piece in deltas:
        text += piece
        if len(text) > len(sentence) and text.startswith(sentence) \
                and text[len(sentence)].isspace():
            return at
    raise BenchError(f"the answer does not start with {sentence!r}: {text!r}")


def pipelining(reads: list[tuple[int, int]], lengths: list[int],
               bytes_per_second: int) -> list[float]:
    """Per sentence after the first: ms by which its first byte was at the
    sink before the sentence before it would finish playing, the audio
    played at its real rate from its first byte (negative: a gap)."""
    arrivals, offset, index = [], 0, 0
    starts = [sum(lengths[:k]) for k in range(len(lengths))]
    for at, size in reads:
        while index < len(starts) and starts[index] < offset + size:
            arrivals.append(at)
            index += 1
        offset += size
    if len(arrivals) != len(lengths):
        raise BenchError(f"the sink got {offset} bytes, fewer than the sentences' {sum(lengths)}")
    leads, playing_until = [], arrivals[0]
    for k, length in enumerate(lengths):
        start = max(arrivals[k], playing_until)
        if k:
            leads.append((playing_until - arrivals[k]) / 1e6)
        playing_until = start + length * 1e9 / bytes_per_second
    return leads


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


class Sink(threading.Thread):
    """Reads a FIFO as fast as bytes come, noting when each read came
    (CLOCK_MONOTONIC ns, as every time here). Opened read-write so that a writer closing it (the
    file sink closes at each audio-stop) never makes it an end of file."""

    def __init__(self, path: str) -> None:
        super().__init__(daemon=True)
        os.mkfifo(path)
        self.fd = os.open(path, os.O_RDWR)
        self.lock = threading.Lock()
        self.reads: list[tuple[int, int]] = []
        self.data = bytearray()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            if select.select([self.fd], [], [], 0.05)[0]:
                chunk = os.read(self.fd, 1 << 16)
                with self.lock:
                    self.reads.append((time.monotonic_ns(), len(chunk)))
                    self.data += chunk

    def take(self, size: int, timeout: float = IO_TIMEOUT) -> tuple[list, bytes]:
        """Wait for `size` bytes; the reads and bytes so far, then forget them."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if len(self.data) >= size:
                    reads, data = self.reads, bytes(self.data)
                    self.reads, self.data = [], bytearray()
                    return reads, data
            if time.monotonic() > deadline:
                raise BenchError(f"the sink got {len(self.data)} of {size} bytes "
                                 f"in {timeout:g} s")
            time.sleep(0.01)

    def close(self) -> None:
        self.stopping.set()
        self.join()
        os.close(self.fd)


class TTSConnection:
    """A blocking Wyoming connection to a TTS server (agent.wyoming's framing)."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(IO_TIMEOUT)
        self.sock.connect(path)
        self.reader = wyoming.Reader()
        self.pending: list = []

    def send(self, kind: str, data: dict) -> None:
        self.sock.sendall(wyoming.encode(wyoming.Event(kind, data)))

    def next(self) -> wyoming.Event:
        while not self.pending:
            data = self.sock.recv(1 << 16)
            if not data:
                raise BenchError("the TTS server closed the connection")
            self.pending = self.reader.feed(data)
        item = self.pending.pop(0)
        if type(item) is wyoming.FramingError:
            raise BenchError(f"the TTS server broke the framing: {item.problem.value}")
        return item

    def synthesize(self, text: str) -> tuple[int, bytes]:
        """(the time of the first audio-chunk, the whole PCM)."""
        self.send("synthesize", {"text": text})
        first, pcm = None, bytearray()
        while (event := self.next()).type != "audio-stop":
            if event.type == "audio-chunk" and event.payload:
                first = first or time.monotonic_ns()
                pcm += event.payload
        if first is None:
            raise BenchError(f"no audio for {text!r}")
        return first, bytes(pcm)

    def close(self) -> None:
        self.sock.close()


def start_tts_server(python: str, directory: str, name: str, streaming: bool):
    sock, log = os.path.join(directory, f"{name}.sock"), os.path.join(directory, f"{name}.log")
    process = subprocess.Popen([python, tts_server.__file__, f"unix://{sock}", "--log", log,
                                "--times", log + ".times", *(["--streaming"] if streaming else [])],
                               stdin=subprocess.DEVNULL, env=db.child_env())
    deadline = time.monotonic() + db.START_TIMEOUT
    while True:
        with socket.socket(socket.AF_UNIX) as probe:
            if probe.connect_ex(sock) == 0:
                return process, sock, log
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise BenchError(f"the {name} TTS server did not start ({process.poll()})")
        time.sleep(0.05)


def write_config(directory: str, mock_url: str, device: str) -> str:
    headers = {"x-mock-answer": json.dumps(ANSWER), "x-mock-delay-ms": str(DELAY_MS)}
    text = (f'default_provider = "mock"\n'
            f'[daemon]\nsocket = {json.dumps(os.path.join(directory, "agent.sock"))}\n'
            f'state_directory = {json.dumps(os.path.join(directory, "state"))}\n'
            f'[providers.mock]\nprotocol = "openai-chat"\n'
            f'base_url = {json.dumps(mock_url + "/v1")}\nmodel = "mock-small"\n'
            "headers = { " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}"
                                       for k, v in headers.items()) + " }\n"
            + device)
    path = os.path.join(directory, "config.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def speech_device(server_sock: str, fifo: str) -> str:
    return ('[devices.speech]\ntype = "wyoming-tts"\n'
            f'address = {json.dumps("unix:" + server_sock)}\n'
            f'sink = "file"\npath = {json.dumps(fifo)}\n')


def logged(log: str) -> list:
    """The lines of a TTS server's log (texts) or times file (objects)."""
    if not os.path.exists(log):
        return []
    with open(log, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def synthesis(log: str, since: int, text: str) -> tuple[int, int]:
    """When espeak-ng started and finished `text`, its first time after line `since`."""
    for entry in logged(log + ".times")[since:]:
        if entry["text"] == text:
            return entry["started_ns"], entry["finished_ns"]
    raise BenchError(f"the server did not time {text!r}")


# --------------------------------------------------------------------------
# One round of each path
# --------------------------------------------------------------------------


def stream_answer(client: Client) -> tuple[list[tuple[int, str]], int]:
    """Ask; every delta with the time it was read, and the time of done."""
    deltas = []
    for reply in client.request("ask", prompt=PROMPT, session="bench-tts"):
        if reply["type"] == "delta":
            deltas.append((time.monotonic_ns(), reply["text"]))
        elif reply["type"] == "done":
            done = time.monotonic_ns()
        elif reply["type"] in ("error", "shutdown"):
            raise BenchError(f"the daemon answered {reply}")
    client.call("forget", session="bench-tts")
    if "".join(text for _, text in deltas) != ANSWER:
        raise BenchError(f"the answer was {''.join(t for _, t in deltas)!r}")
    return deltas, done


class Setup:
    """The processes of a run and what the checks need."""

    def __init__(self, python: str, directory: str) -> None:
        self.processes: list[subprocess.Popen] = []
        self.sinks: dict[str, Sink] = {}
        self.clients: dict[str, Client] = {}
        self.tts: dict[str, TTSConnection] = {}
        self.python, self.directory = python, directory
        self.pcm = {text: tts_server.espeak_pcm(text) for text in [*SENTENCES, ANSWER]}
        self.rate, self.width, self.channels, _ = self.pcm[ANSWER]

    def start(self) -> None:
        mock, url = db.start_mock(self.python)
        self.processes.append(mock)
        self.logs = {}
        for name, streams in (("streaming", True), ("sentence", False)):
            process, sock, self.logs[name] = start_tts_server(self.python, self.directory,
                                                              name, streams)
            self.processes.append(process)
            self.tts[name] = TTSConnection(sock)
        for name in PATHS:
            directory = os.path.join(self.directory, name)
            os.mkdir(directory)
            device = ""
            if name != "baseline":
                self.sinks[name] = Sink(os.path.join(directory, "audio.pcm"))
                self.sinks[name].start()
                device = speech_device(self.tts[name].sock.getpeername(),
                                       os.path.join(directory, "audio.pcm"))
            config = write_config(directory, url, device)
            socket_path = os.path.join(directory, "agent.sock")
            self.processes.append(db.start_daemon(self.python, config, socket_path,
                                                  os.path.join(directory, "daemon.log")))
            self.clients[name] = Client(socket_path, timeout=IO_TIMEOUT)
            if device:
                self.wait_connected(name)

    def wait_connected(self, name: str) -> None:
        deadline = time.monotonic() + IO_TIMEOUT
        while True:
            [status] = self.clients[name].call("status")["devices"]
            if status["state"] == "running" and status["connected"]:
                return
            if time.monotonic() > deadline:
                raise BenchError(f"the {name} device did not connect: {status}")
            time.sleep(0.05)

    def stop(self) -> None:
        for client in self.clients.values():
            client.close()
        for connection in self.tts.values():
            connection.close()
        for sink in self.sinks.values():
            sink.close()
        for process in reversed(self.processes):
            terminate(process, db.START_TIMEOUT)
            if process.stdout is not None:
                process.stdout.close()

    def device_round(self, name: str) -> dict:
        spoken_before = len(logged(self.logs[name]))
        timed_before = len(logged(self.logs[name] + ".times"))
        deltas, done = stream_answer(self.clients[name])
        expected = b"".join(self.pcm[s][3] for s in SENTENCES)
        reads, data = self.sinks[name].take(len(expected))
        spoken = logged(self.logs[name])[spoken_before:]
        if spoken != SENTENCES or data != expected:
            raise BenchError(f"the {name} device's sink did not get the sentences' audio in "
                             f"order (the server spoke {spoken!r}; {len(data)} bytes)")
        start, complete = deltas[0][0], first_sentence_end(deltas, SENTENCES[0])
        began, finished = synthesis(self.logs[name], timed_before, SENTENCES[0])
        leads = pipelining(reads, [len(self.pcm[s][3]) for s in SENTENCES],
                           self.rate * self.width * self.channels)
        return {"first_audio_ms": (reads[0][0] - start) / 1e6,
                "first_sentence_ms": (complete - start) / 1e6,
                "answer_ms": (done - start) / 1e6,
                "synthesis_ms": (finished - began) / 1e6,
                "to_server_ms": (began - complete) / 1e6,
                "to_sink_ms": (reads[0][0] - finished) / 1e6, "leads_ms": leads}

    def baseline_round(self) -> dict:
        timed_before = len(logged(self.logs["sentence"] + ".times"))
        deltas, done = stream_answer(self.clients["baseline"])
        first, pcm = self.tts["sentence"].synthesize(ANSWER)
        began, finished = synthesis(self.logs["sentence"], timed_before, ANSWER)
        if pcm != self.pcm[ANSWER][3]:
            raise BenchError("the baseline's audio is not espeak-ng's for the answer")
        start = deltas[0][0]
        return {"first_audio_ms": (first - start) / 1e6, "answer_ms": (done - start) / 1e6,
                "synthesis_ms": (finished - began) / 1e6,
                "to_server_ms": (began - done) / 1e6, "to_sink_ms": (first - finished) / 1e6}


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------


def run(rounds: int = 10, warmup: int = 1, python: str | None = None) -> dict:
    python = python or sys.executable
    load_start = os.getloadavg()
    samples: dict[str, list[dict]] = {name: [] for name in PATHS}
    with tempfile.TemporaryDirectory(prefix="hatts-") as directory:
        setup = Setup(python, directory)
        try:
            setup.start()
            for index in range(warmup + rounds):
                shift = index % len(PATHS)
                round_ = {}
                for name in PATHS[shift:] + PATHS[:shift]:
                    round_[name] = setup.baseline_round() if name == "baseline" \
                        else setup.device_round(name)
                if index >= warmup:
                    for name in PATHS:
                        samples[name].append(round_[name])
        finally:
            setup.stop()
    return summarize(samples, {"rounds": rounds, "warmup": warmup, "delay_ms": DELAY_MS,
                               "delta_chars": 4, "sentences": SENTENCES},
                     {"python": platform.python_version(), "machine": platform.machine(),
                      "cpus": os.cpu_count(), "loadavg_start": load_start,
                      "loadavg_end": os.getloadavg()})


def summarize(samples: dict[str, list[dict]], config: dict, env: dict) -> dict:
    baseline = samples["baseline"]
    result = {"config": config, "env": env, "samples": samples, "paths": {}}
    for name in PATHS:
        runs = samples[name]
        figures = {key: spread([r[key] for r in runs])
                   for key in ("first_audio_ms", "answer_ms", "synthesis_ms", "to_server_ms",
                               "to_sink_ms")}
        if name != "baseline":
            bounds = [r["first_sentence_ms"] + r["synthesis_ms"] + SLACK_MS for r in runs]
            figures["first_sentence_ms"] = spread([r["first_sentence_ms"] for r in runs])
            figures["bound_ms"] = spread(bounds)
            figures["within_bound"] = sum(r["first_audio_ms"] <= b for r, b in zip(runs, bounds))
            figures["speedup"] = spread([b["first_audio_ms"] / r["first_audio_ms"]
                                         for r, b in zip(runs, baseline)])
            figures["min_lead_ms"] = spread([min(r["leads_ms"]) for r in runs])
            figures["gaps"] = sum(lead < 0 for r in runs for lead in r["leads_ms"])
            figures["bound_met"] = figures["first_audio_ms"]["median"] \
                <= figures["bound_ms"]["median"]
            figures["speedup_met"] = figures["speedup"]["median"] >= RATIO_TARGET
        result["paths"][name] = figures
    return result


def report(result: dict) -> str:
    env, c, paths = result["env"], result["config"], result["paths"]
    n = c["rounds"]

    def cell(s: dict, unit: str = "ms") -> str:
        return f"{s['median']:.1f} {unit} [{s['q1']:.1f}-{s['q3']:.1f}]"

    lines = [
        f"homeagent speech bench: Python {env['python']} {env['machine']}, {env['cpus']} CPUs, "
        f"load average {env['loadavg_start'][0]:.2f} -> {env['loadavg_end'][0]:.2f}",
        f"five sentences ({len(ANSWER)} characters) in {c['delta_chars']}-character deltas "
        f"every {c['delay_ms']} ms; {n} interleaved rounds (+{c['warmup']} warm-up); "
        "median [interquartile range], ms from the first delta",
        "",
        f"  {'path':<10}{'first audio':>25}{'answer done':>27}{'to server':>22}"
        f"{'synthesis':>22}{'to sink':>22}",
    ]
    for name in PATHS:
        p = paths[name]
        lines.append(f"  {name:<10}{cell(p['first_audio_ms']):>25}{cell(p['answer_ms']):>27}"
                     f"{cell(p['to_server_ms']):>22}{cell(p['synthesis_ms']):>22}"
                     f"{cell(p['to_sink_ms']):>22}")
    lines += ["", "  synthesis: of the first sentence (baseline: of the whole answer); "
              "to server: from it complete (baseline: from done)", ""]
    for name in ("streaming", "sentence"):
        p = paths[name]
        lines += [
            f"  {name}: first sentence complete at {cell(p['first_sentence_ms'])}; bound "
            f"(+ synthesis + {SLACK_MS:g} ms) {cell(p['bound_ms'])}: "
            f"{'PASS' if p['bound_met'] else 'MISS'}, first audio within it in "
            f"{p['within_bound']} of {n} rounds",
            f"  {'':{len(name)}}  baseline / first audio {cell(p['speedup'], 'x')}, "
            f"target {RATIO_TARGET:g}x: {'PASS' if p['speedup_met'] else 'MISS'}",
            f"  {'':{len(name)}}  pipelining: sentence n+1 at the sink {cell(p['min_lead_ms'])} "
            f"(the least of a round) before n finished playing; gaps: {p['gaps']}",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds")
    parser.add_argument("--warmup", type=int, default=1, help="rounds not timed")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter for the daemons and servers (default: this one)")
    parser.add_argument("--json", action="store_true", help="table to stderr, JSON to stdout")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0:
        parser.error("--rounds must be at least 1 and --warmup not negative")
    return db.finish(lambda: run(args.rounds, args.warmup, args.python), report, args.json)


if __name__ == "__main__":
    sys.exit(main())
