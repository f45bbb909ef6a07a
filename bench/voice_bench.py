"""Voice bench: what the voice door costs while it listens for its wake
word, against linux-voice-assistant's way (pymicro-wakeword + pymicro-vad
in a plain Python loop), and how soon an answer is heard after the end of
speech, against the sequential pipeline, in one run.

    python bench/voice_bench.py [--rounds N] [--callgrind-groups N]
                                [--asr-delay-ms N] [--quick] [--json]

Listening cost. Processes, all on this host, each fed by its own
microphone (`--mic`, a loop here) the same clip (2 s of noise, espeak-ng
saying a sentence without the wake word, 0.5 s of silence) in 20 ms writes
in real time; the microphones wait for one cue, so every listener hears the
same samples at the same instants:
  daemon     `homeagent serve` with [voice] (wake word okay_nabu, the
             "program" source): the voice door as the daemon runs it, the
             source's reads, the frames, the channel and the wake word
             detector (an idle door runs the VAD only once woken);
  peer       a plain loop written here (`--peer`, never that project's
             code), as linux-voice-assistant listens: read blocks of 1024
             samples (its default --audio-input-block-size; the read waits
             for a whole block), pymicro-wakeword's features on the block
             and its model on each feature, and pymicro-vad's process_10ms
             on each 10 ms: the issue's peer;
  peer-wake  the same loop without the VAD: the work an idle door does, so
             daemon / peer-wake compares the same work on the same audio;
  no-voice   `homeagent serve` without [voice]: its idle cost and RSS.
Each round is the clip once: every process's CPU time (its CPU-time clock,
all threads, ns; read from outside at the clip's start and end) per second
of audio; per round daemon / peer and daemon / peer-wake, the reading order
alternating. The microphones are not counted. Reported: each figure's
median [min-max] over the rounds, the ratios' (target: at most 1.2x), and
VmRSS after the rounds (target: at most 64 MiB with voice, and no change
expected without it).

Instructions (when valgrind is installed; not with --quick). The daemon,
peer and peer-wake again, each under callgrind with instrumentation off
until the count starts, their microphones slowed to CALLGRIND_PACE and
writing GROUP_MS (the peer's block) at a time, so each listener keeps up
and reads one group per read; counted from half a period before the clip's
first group to half a period after `--callgrind-groups` of them: the same
audio, whole cycles, and no noise from the machine's load. Each of the
daemon's reads then waits for its audio (in real time, most find it
waiting): an upper bound for the daemon.

Latency. `homeagent mock-llm` answers every ask with ANSWER (five
sentences) in 4-character deltas every 33 ms, as in tts_bench.py; two
espeak-ng Wyoming TTS servers (tests/wyoming_tts_server.py), one streaming
text, one not; an ASR server in this process (a thread) that records when
each utterance's audio-stop came and answers its transcript
`--asr-delay-ms` later. Per round, the order of the two paths alternating:
  voice       a `homeagent serve` with [voice] and a wyoming-tts device on
              the streaming server, its sink a FIFO read here: its
              microphone (tests/voice_mic.py, cued) says "okay nabu", then
              the question. Timed from the end of speech: the last sample
              of the question as the microphone gave it (the clip's end,
              its trailing silence trimmed; the time the microphone program
              marks it played), and from the audio-stop at the ASR server
              (the door's endpoint, `silence_seconds` later), to the first
              PCM byte at the sink;
  sequential  this process sends the question's audio and audio-stop to
              the same ASR server, waits for the whole transcript, asks the
              no-voice daemon and reads its whole answer, then sends one
              synthesize with it to the non-streaming server: from the
              audio-stop at the ASR server to the first audio-chunk.
Target, per round and on the medians: voice (from the audio-stop) no later
than the ASR's own time (audio-stop to transcript, as the server did it) +
the first sentence (from the ask to the delta completing it, on the
sequential path's ask of that round) + its synthesis (as the streaming
server timed espeak-ng) + 50 ms; and sequential / voice at least 3x.
The sink's audio must be espeak-ng's for the five sentences, else FAIL.

With --json the table goes to stderr and one JSON document to stdout.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import wave
from pathlib import Path

try:
    import agent
except ImportError:  # not installed: run from the source tree
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import agent

ROOT = Path(__file__).resolve().parent.parent
CHUNK = 320           # 10 ms of 16 kHz 16-bit mono
RATE = 16000
BLOCK = 1024          # samples: linux-voice-assistant's read
MIC_MS = 20           # the microphones' writes in the timed rounds, as tests/voice_mic.py's


# --------------------------------------------------------------------------
# The peer and the microphone: plain loops, started before the imports below
# --------------------------------------------------------------------------


def peer_loop(vad: bool) -> int:
    """linux-voice-assistant's listening loop: raw 16 kHz 16-bit mono on
    stdin read in blocks of BLOCK samples (its --audio-input-block-size,
    1024 by default; the read waits for a whole block), each block through
    the wake word's features and model, and (with vad) pymicro-vad on each
    10 ms of it, until the end."""
    from pymicro_wakeword import MicroWakeWord, MicroWakeWordFeatures, Model

    model = MicroWakeWord.from_builtin(Model("okay_nabu"))
    features = MicroWakeWordFeatures()
    voice = None
    if vad:
        from pymicro_vad import MicroVad
        voice = MicroVad()
    print("ready", file=sys.stderr, flush=True)
    wakes = 0
    rest = b""
    stdin = sys.stdin.buffer
    while True:
        block = stdin.read(BLOCK * 2)
        if len(block) < BLOCK * 2:
            break
        for feature in features.process_streaming(block):
            if model.process_streaming(feature):
                wakes += 1
        if voice is not None:   # 10 ms at a time: a block is 6.4 of them
            heard = rest + block
            whole = len(heard) - len(heard) % CHUNK
            for at in range(0, whole, CHUNK):
                voice.process_10ms(heard[at:at + CHUNK])
            rest = heard[whole:]
    print(f"wakes {wakes}", file=sys.stderr)
    return 0


def mic_loop(pace: float, group_ms: float, go_path: str, wav_path: str) -> int:
    """A microphone on stdout: group_ms of audio per write, at pace times
    real time. Silence until go_path holds a time (CLOCK_MONOTONIC ns);
    from then the WAV over and over, its group k written at that time + k
    periods: every microphone given the same go_path plays the same audio
    at the same instants, and a window of the clip's length holds it all."""
    with wave.open(wav_path) as reader:
        pcm = reader.readframes(reader.getnframes())
    step = int(RATE * group_ms / 1000) * 2
    period = group_ms / 1000 / pace
    pcm += pcm[:step]   # a group runs on across the clip's end
    start = None
    count = 0
    try:
        while start is None:
            os.write(1, bytes(step))
            time.sleep(period)
            try:
                with open(go_path) as f:
                    start = int(f.read()) / 1e9
            except (FileNotFoundError, ValueError):
                pass
        while True:
            time.sleep(max(0.0, start + count * period - time.monotonic()))
            at = count * step % (len(pcm) - step)
            os.write(1, pcm[at:at + step])
            count += 1
    except BrokenPipeError:
        return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--peer"]:
    sys.exit(peer_loop("--no-vad" not in sys.argv))
if __name__ == "__main__" and sys.argv[1:2] == ["--mic"]:
    sys.exit(mic_loop(float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]))


from agent.api.client import Client  # noqa: E402
from agent.demo import terminate  # noqa: E402
from agent.wyoming import framing as wyoming  # noqa: E402


def _load(name: str, path: Path):
    """A script of this tree as a module (bench/ and tests/ are no packages)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


tb = _load("homeagent_bench_tts_bench", ROOT / "bench" / "tts_bench.py")
db = tb.db
BenchError = db.BenchError
MIC = ROOT / "tests" / "voice_mic.py"

WAKE = "okay nabu"
QUESTION = "what is the weather going to be like this evening"
NOT_WAKE = "turn on the kitchen light and close the blinds in the living room"
SLACK_MS = 50.0
RATIO_TARGET = 3.0
COST_TARGET = 1.2
RSS_TARGET_MIB = 64.0
SILENCE_SECONDS = 0.6
IO_TIMEOUT = 60.0
COST_NAMES = ("daemon", "peer", "peer-wake", "no-voice")
CALLGRIND_NAMES = ("daemon", "peer", "peer-wake")
GROUP_MS = 64         # the callgrind round's microphone writes: the peer's block
CALLGRIND_PACE = 0.05


# --------------------------------------------------------------------------
# Audio
# --------------------------------------------------------------------------


def espeak(text: str) -> bytes:
    """16 kHz mono PCM of espeak-ng saying text, its trailing silence cut:
    the last sample is the end of speech."""
    rate, width, channels, pcm = tb.tts_server.espeak_pcm(text)
    from agent.voice.audio import Converter, Format
    pcm = Converter(Format(rate, width, channels)).convert(pcm)
    return trim(pcm)


def trim(pcm: bytes, level: int = 64) -> bytes:
    import numpy as np
    samples = np.frombuffer(pcm, dtype="<i2")
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > level)
    return pcm[:2 * (int(loud[-1]) + 1)] if len(loud) else pcm


def silence(seconds: float) -> bytes:
    return bytes(2 * int(RATE * seconds))


def noise(seconds: float, seed: int = 5) -> bytes:
    import numpy as np
    rng = np.random.default_rng(seed)
    return rng.normal(0, 2000, int(RATE * seconds)).astype("<i2").tobytes()


def write_wav(path: str, pcm: bytes) -> None:
    with wave.open(path, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(RATE)
        writer.writeframes(pcm)


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


def cpu_ns(pid: int) -> int:
    """CPU time of another process, all its threads (the dead ones too), in
    ns: its CPU-time clock, the id clock_getcpuclockid() would give (Linux:
    the pid's complement shifted by 3, CPUCLOCK_SCHED 2), which Python does
    not bind. /proc's utime + stime count 10 ms ticks: a window of 5 s of
    an idle listener is only a few of them."""
    return time.clock_gettime_ns(((~pid) << 3) | 2)


def rss_kib(pid: int) -> int:
    return db.proc_memory(pid)["rss"]


def mic_argv(python: str, files: list[str], cues: str | None = None) -> list[str]:
    return [python, str(MIC), *(["--cue", cues] if cues else []), *files]


def voice_table(mic: list[str], asr_sock: str, **settings) -> str:
    table = {"source": "program", "program": mic, "asr": f"unix:{asr_sock}",
             "wake": ["okay_nabu"], "silence_seconds": SILENCE_SECONDS, "follow_up": "never",
             "restart_max_delay": 1.0, **settings}
    return "[voice]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items())


def voice_status(client: Client) -> dict:
    return client.call("status")["voice"]


def wait_voice(client: Client, condition, what: str, timeout: float = IO_TIMEOUT) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = voice_status(client)
        if condition(status):
            return status
        if time.monotonic() > deadline:
            raise BenchError(f"{what}: {status}")
        time.sleep(0.02)


class AsrServer(threading.Thread):
    """A Wyoming ASR server on a Unix socket: per utterance, the time its
    audio-stop came (CLOCK_MONOTONIC ns) and the time the transcript went,
    `delay` seconds later."""

    def __init__(self, path: str, text: str, delay: float) -> None:
        super().__init__(daemon=True)
        self.path, self.text, self.delay = path, text, delay
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(path)
        self.listener.listen(8)
        self.lock = threading.Lock()
        self.utterances: list[dict] = []

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn: socket.socket) -> None:
        reader, audio = wyoming.Reader(), 0
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                for event in reader.feed(data):
                    if type(event) is wyoming.FramingError:
                        return
                    if event.type == "audio-chunk":
                        audio += len(event.payload)
                    elif event.type == "audio-stop":
                        stopped = time.monotonic_ns()
                        time.sleep(self.delay)
                        conn.sendall(wyoming.encode(wyoming.Event("transcript",
                                                                  {"text": self.text})))
                        with self.lock:
                            self.utterances.append({"stop_ns": stopped, "bytes": audio,
                                                    "answered_ns": time.monotonic_ns()})

    def count(self) -> int:
        with self.lock:
            return len(self.utterances)

    def wait(self, index: int, timeout: float = IO_TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if len(self.utterances) > index:
                    return self.utterances[index]
            if time.monotonic() > deadline:
                raise BenchError(f"the ASR server got no utterance {index}")
            time.sleep(0.005)

    def close(self) -> None:
        self.listener.close()


def transcribe(path: str, pcm: bytes) -> None:
    """The sequential path's speech-to-text: the whole utterance, then wait
    for the whole transcript."""
    fmt = {"rate": RATE, "width": 2, "channels": 1}
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(IO_TIMEOUT)
        sock.connect(path)
        out = [wyoming.Event("transcribe", {}), wyoming.Event("audio-start", fmt)]
        out += [wyoming.Event("audio-chunk", fmt, pcm[i:i + 2048])
                for i in range(0, len(pcm), 2048)]
        sock.sendall(b"".join(map(wyoming.encode, out)))
        sock.sendall(wyoming.encode(wyoming.Event("audio-stop", {})))
        reader = wyoming.Reader()
        while True:
            data = sock.recv(65536)
            if not data:
                raise BenchError("the ASR server closed before its transcript")
            if any(getattr(e, "type", None) == "transcript" for e in reader.feed(data)):
                return


# --------------------------------------------------------------------------
# Listening cost
# --------------------------------------------------------------------------


def listening_clip(directory: str) -> tuple[str, float]:
    clip = noise(2.0) + espeak(NOT_WAKE) + silence(0.5)
    path = os.path.join(directory, "listen.wav")
    if not os.path.exists(path):
        write_wav(path, clip)
    return path, len(clip) / (2 * RATE)


def bench_mic(python: str, pace: float, group_ms: float, go: str, wav: str) -> list[str]:
    return [python, str(Path(__file__).resolve()), "--mic", str(pace), str(group_ms), go, wav]


def go(path: str, lead: float = 2.0) -> float:
    """Start the microphones waiting on path `lead` seconds from now: that
    instant (time.monotonic())."""
    start = time.monotonic() + lead
    with open(path + ".tmp", "w") as f:
        f.write(str(int(start * 1e9)))
    os.replace(path + ".tmp", path)
    return start


def wait_until(instant: float) -> None:
    time.sleep(max(0.0, instant - time.monotonic()))


def start_listeners(python: str, directory: str, url: str, asr_sock: str, mic, names,
                    wrap: list[str] | None = None) -> tuple[dict, dict, list]:
    """The daemons and peers of `names`, each with its own microphone
    mic(name); with wrap, each runs under that command (valgrind). Their
    Popen objects, in start order, go to the list returned, for stopping."""
    wrap = wrap or []
    processes: list[subprocess.Popen] = []
    pids: dict[str, int] = {}
    clients: dict[str, Client] = {}
    try:
        for name in ("daemon", "no-voice"):
            if name not in names:
                continue
            where = os.path.join(directory, name)
            os.mkdir(where)
            extra = voice_table(mic(name), asr_sock) if name == "daemon" else ""
            config = tb.write_config(where, url, extra)
            sock = os.path.join(where, "agent.sock")
            interpreter = python
            if wrap:   # start_daemon runs `python -m ...`: a script that execs the wrapped one
                interpreter = os.path.join(where, "python")
                with open(interpreter, "w") as f:
                    f.write("#!/bin/sh\nexec " + " ".join(map(shlex.quote, [*wrap, python]))
                            + ' "$@"\n')
                os.chmod(interpreter, 0o755)
            process = db.start_daemon(interpreter, config, sock,
                                      os.path.join(where, "daemon.log"))
            processes.append(process)
            pids[name] = process.pid
            clients[name] = Client(sock, timeout=IO_TIMEOUT)
        if "daemon" in names:
            wait_voice(clients["daemon"], lambda s: s["state"] == "idle",
                       "the voice door waits for its wake word",
                       timeout=IO_TIMEOUT * (3 if wrap else 1))
        for name, flags in (("peer", []), ("peer-wake", ["--no-vad"])):
            if name not in names:
                continue
            feed = subprocess.Popen(mic(name), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                    env=db.child_env())
            peer = subprocess.Popen([*wrap, python, __file__, "--peer", *flags],
                                    stdin=feed.stdout, stderr=subprocess.PIPE,
                                    env=db.child_env())
            feed.stdout.close()
            processes += [feed, peer]
            pids[name] = peer.pid
            if peer.stderr.readline() != b"ready\n":   # its imports and model loaded
                raise BenchError(f"the {name} loop did not start")
    except BaseException:
        stop_all(processes, clients)
        raise
    return pids, clients, processes


def stop_all(processes: list, clients: dict) -> None:
    for client in clients.values():
        client.close()
    for process in reversed(processes):
        terminate(process, db.START_TIMEOUT)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def listening_cost(python: str, directory: str, url: str, asr_sock: str, rounds: int,
                   settle: float) -> dict:
    wav, clip_seconds = listening_clip(directory)
    cue = os.path.join(directory, "go")
    pids, clients, processes = start_listeners(
        python, directory, url, asr_sock, lambda name: bench_mic(python, 1.0, MIC_MS, cue, wav),
        COST_NAMES)
    try:
        start = go(cue, settle)   # every loop running in step with its microphone by then
        samples: dict[str, list[float]] = {name: [] for name in COST_NAMES}
        wait_until(start)
        before = {name: cpu_ns(pids[name]) for name in COST_NAMES}
        for index in range(rounds):
            # the clip once, the same samples heard by every listener at the same instants
            wait_until(start + (index + 1) * clip_seconds)
            order = COST_NAMES if index % 2 == 0 else COST_NAMES[::-1]
            after = {name: cpu_ns(pids[name]) for name in order}
            for name in COST_NAMES:
                samples[name].append((after[name] - before[name]) / 1e6 / clip_seconds)
            before = after
        status = voice_status(clients["daemon"])
        if status["wakes"] or status["state"] != "idle" or status["source"]["restarts"] \
                or status["dropped_frames"]:
            raise BenchError(f"the daemon's door did not stay idle: {status}")
        rss = {name: rss_kib(pids[name]) / 1024 for name in COST_NAMES}
    finally:
        stop_all(processes, clients)
    ratios = [d / p if p else float("inf") for d, p in zip(samples["daemon"], samples["peer"])]
    ratios_wake = [d / p if p else float("inf")
                   for d, p in zip(samples["daemon"], samples["peer-wake"])]
    return {"samples": samples, "cpu_ms_per_s": {n: spread(v) for n, v in samples.items()},
            "daemon_over_peer": spread(ratios), "daemon_over_peer_wake": spread(ratios_wake),
            "rss_mib": rss, "clip_seconds": clip_seconds,
            "cost_met": statistics.median(ratios) <= COST_TARGET,
            "same_work_met": statistics.median(ratios_wake) <= COST_TARGET,
            "rss_met": rss["daemon"] <= RSS_TARGET_MIB}


def callgrind_total(path: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise BenchError(f"no total in {path}")


def callgrind_control(command: str, pids: dict) -> None:
    """The command to every listener at once (each call takes a few 100 ms)."""
    calls = {name: subprocess.Popen(["callgrind_control", command, str(pid)],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for name, pid in pids.items()}
    for name, call in calls.items():
        out, _ = call.communicate(timeout=IO_TIMEOUT)
        if call.returncode:
            raise BenchError(f"callgrind_control {command} ({name}): {out!r}")


def instructions(python: str, directory: str, url: str, asr_sock: str, groups: int) -> dict:
    """One round of each listener under callgrind: instructions per second
    of audio, whatever the machine's load. The microphones write a group of
    GROUP_MS every GROUP_MS / CALLGRIND_PACE (slowed: under callgrind a
    listener is tens of times slower, and must keep up), the same groups at
    the same instants; the count runs from half a period before the clip's
    first group to half a period after group `groups`: whole cycles of
    reading and listening, nothing of the start-up (instrumentation is off
    until then)."""
    where = os.path.join(directory, "callgrind")
    os.mkdir(where)
    wav, _ = listening_clip(directory)
    cue = os.path.join(where, "go")
    wrap = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={where}/out.%p", f"--log-file={where}/valgrind.%p.log"]
    pids, clients, processes = start_listeners(
        python, where, url, asr_sock,
        lambda name: bench_mic(python, CALLGRIND_PACE, GROUP_MS, cue, wav),
        CALLGRIND_NAMES, wrap)
    period = GROUP_MS / 1000 / CALLGRIND_PACE
    try:
        start = go(cue, 2 * period)
        wait_until(start - period / 2)
        callgrind_control("--instr=on", pids)
        wait_until(start + (groups - 0.5) * period)
        callgrind_control("--dump", pids)
        dumps = {name: os.path.join(where, f"out.{pid}.1") for name, pid in pids.items()}
        deadline = time.monotonic() + IO_TIMEOUT
        while not all(os.path.exists(path) for path in dumps.values()):
            if time.monotonic() > deadline:
                raise BenchError("callgrind wrote no dump")
            time.sleep(0.1)
        audio = groups * GROUP_MS / 1000
        per_second = {name: callgrind_total(path) / audio for name, path in dumps.items()}
    finally:
        stop_all(processes, clients)
    return {"instructions_per_s": per_second, "audio_seconds": audio,
            "daemon_over_peer": per_second["daemon"] / per_second["peer"],
            "daemon_over_peer_wake": per_second["daemon"] / per_second["peer-wake"]}


# --------------------------------------------------------------------------
# Latency
# --------------------------------------------------------------------------


class Latency:
    def __init__(self, python: str, directory: str, url: str, asr: AsrServer,
                 rounds: int) -> None:
        self.python, self.directory, self.url, self.asr = python, directory, url, asr
        self.processes: list[subprocess.Popen] = []
        self.clients: dict[str, Client] = {}
        self.question = espeak(QUESTION)
        utterance = silence(0.3) + espeak(WAKE) + silence(0.5) + self.question
        self.utterance_path = os.path.join(directory, "wake-question.wav")
        write_wav(self.utterance_path, utterance)
        self.cues = os.path.join(directory, "cues")
        os.mkdir(self.cues)
        self.rounds = rounds
        self.pcm = {text: tb.tts_server.espeak_pcm(text)[3]
                    for text in [*tb.SENTENCES, tb.ANSWER]}

    def start(self) -> None:
        self.logs = {}
        socks = {}
        for name, streams in (("streaming", True), ("whole", False)):
            process, socks[name], self.logs[name] = tb.start_tts_server(
                self.python, self.directory, name, streams)
            self.processes.append(process)
        self.tts = tb.TTSConnection(socks["whole"])
        for name in ("voice", "sequential"):
            where = os.path.join(self.directory, name)
            os.mkdir(where)
            extra = ""
            if name == "voice":
                self.sink = tb.Sink(os.path.join(where, "audio.pcm"))
                self.sink.start()
                mic = mic_argv(self.python, [self.utterance_path] * self.rounds, self.cues)
                extra = voice_table(mic, self.asr.path) \
                    + tb.speech_device(socks["streaming"], os.path.join(where, "audio.pcm"))
            config = tb.write_config(where, self.url, extra)
            sock = os.path.join(where, "agent.sock")
            self.processes.append(db.start_daemon(self.python, config, sock,
                                                  os.path.join(where, "daemon.log")))
            self.clients[name] = Client(sock, timeout=IO_TIMEOUT)
        wait_voice(self.clients["voice"], lambda s: s["state"] == "idle",
                   "the voice door waits for its wake word")

    def stop(self) -> None:
        for client in self.clients.values():
            client.close()
        if hasattr(self, "tts"):
            self.tts.close()
        if hasattr(self, "sink"):
            self.sink.close()
        for process in reversed(self.processes):
            terminate(process, db.START_TIMEOUT)

    def voice_round(self, index: int) -> dict:
        client = self.clients["voice"]
        asked = voice_status(client)["asks"]
        heard = self.asr.count()
        timed_before = len(tb.logged(self.logs["streaming"] + ".times"))
        open(os.path.join(self.cues, str(index)), "w").close()
        expected = b"".join(self.pcm[s] for s in tb.SENTENCES)
        reads, data = self.sink.take(len(expected))
        if data != expected:
            raise BenchError(f"the voice daemon's sink did not get the sentences' audio "
                             f"({len(data)} bytes of {len(expected)})")
        utterance = self.asr.wait(heard)
        played = os.path.join(self.cues, f"played-{index}")
        # voice_mic marks the clip played as it writes its last chunk; the
        # file's time is CLOCK_REALTIME: brought to CLOCK_MONOTONIC here
        offset = time.time_ns() - time.monotonic_ns()
        speech_end = os.stat(played).st_mtime_ns - offset
        began, finished = tb.synthesis(self.logs["streaming"], timed_before, tb.SENTENCES[0])
        wait_voice(client, lambda s: s["state"] == "idle" and s["asks"] == asked + 1,
                   "the door back to its wake word")
        client.call("forget", session="voice")
        first = reads[0][0]
        return {"first_audio_ms": (first - utterance["stop_ns"]) / 1e6,
                "from_speech_end_ms": (first - speech_end) / 1e6,
                "endpoint_ms": (utterance["stop_ns"] - speech_end) / 1e6,
                "asr_ms": (utterance["answered_ns"] - utterance["stop_ns"]) / 1e6,
                "synthesis_ms": (finished - began) / 1e6}

    def sequential_round(self) -> dict:
        heard = self.asr.count()
        transcribe(self.asr.path, self.question)
        utterance = self.asr.wait(heard)
        asked = time.monotonic_ns()
        deltas, done = tb.stream_answer(self.clients["sequential"])
        complete = tb.first_sentence_end(deltas, tb.SENTENCES[0])
        first, pcm = self.tts.synthesize(tb.ANSWER)
        if pcm != self.pcm[tb.ANSWER]:
            raise BenchError("the sequential path's audio is not espeak-ng's for the answer")
        return {"first_audio_ms": (first - utterance["stop_ns"]) / 1e6,
                "asr_ms": (utterance["answered_ns"] - utterance["stop_ns"]) / 1e6,
                "first_sentence_ms": (complete - asked) / 1e6,
                "answer_ms": (done - asked) / 1e6}


def latency(python: str, directory: str, url: str, asr: AsrServer, rounds: int,
            warmup: int) -> dict:
    setup = Latency(python, directory, url, asr, warmup + rounds)
    samples = {"voice": [], "sequential": []}
    try:
        setup.start()
        for index in range(warmup + rounds):
            if index % 2:
                sequential = setup.sequential_round()
                voice = setup.voice_round(index)
            else:
                voice = setup.voice_round(index)
                sequential = setup.sequential_round()
            if index >= warmup:
                samples["voice"].append(voice)
                samples["sequential"].append(sequential)
    finally:
        setup.stop()
    voice, sequential = samples["voice"], samples["sequential"]
    bounds = [v["asr_ms"] + s["first_sentence_ms"] + v["synthesis_ms"] + SLACK_MS
              for v, s in zip(voice, sequential)]
    ratios = [s["first_audio_ms"] / v["first_audio_ms"] for v, s in zip(voice, sequential)]
    # from the end of speech: the sequential pipeline waits the same endpoint
    ratios_spoken = [(s["first_audio_ms"] + v["endpoint_ms"]) / v["from_speech_end_ms"]
                     for v, s in zip(voice, sequential)]
    figures = {path: {key: spread([r[key] for r in runs]) for key in runs[0]}
               for path, runs in samples.items()}
    return {"samples": samples, "figures": figures, "bound_ms": spread(bounds),
            "within_bound": sum(v["first_audio_ms"] <= b for v, b in zip(voice, bounds)),
            "sequential_over_voice": spread(ratios),
            "sequential_over_voice_from_speech_end": spread(ratios_spoken),
            "bound_met": figures["voice"]["first_audio_ms"]["median"]
            <= statistics.median(bounds),
            "ratio_met": statistics.median(ratios) >= RATIO_TARGET,
            "ratio_from_speech_end_met": statistics.median(ratios_spoken) >= RATIO_TARGET}


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run(rounds: int, latency_rounds: int, warmup: int, asr_delay_ms: int,
        settle: float, python: str | None = None, callgrind_groups: int = 0) -> dict:
    python = python or sys.executable
    try:
        import pymicro_vad  # noqa: F401
        import pymicro_wakeword  # noqa: F401
    except ImportError as error:
        raise BenchError(f"the voice extra is not installed ({error}): pip install .[voice]")
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="havoice-") as directory:
        mock, url = db.start_mock(python)
        asr = AsrServer(os.path.join(directory, "asr.sock"), QUESTION, asr_delay_ms / 1000)
        asr.start()
        try:
            cost = listening_cost(python, directory, url, asr.path, rounds, settle)
            counted = None
            if callgrind_groups and shutil.which("valgrind") and shutil.which("callgrind_control"):
                counted = instructions(python, directory, url, asr.path, callgrind_groups)
            delays = latency(python, directory, url, asr, latency_rounds, warmup)
        finally:
            asr.close()
            terminate(mock, db.START_TIMEOUT)
            if mock.stdout is not None:
                mock.stdout.close()
    return {"config": {"rounds": rounds, "latency_rounds": latency_rounds,
                       "warmup": warmup, "asr_delay_ms": asr_delay_ms,
                       "callgrind_groups": callgrind_groups,
                       "silence_seconds": SILENCE_SECONDS, "delay_ms": tb.DELAY_MS},
            "env": {"python": platform.python_version(), "machine": platform.machine(),
                    "cpus": os.cpu_count(), "loadavg_start": load_start,
                    "loadavg_end": os.getloadavg()},
            "listening": cost, "instructions": counted, "latency": delays}


def report(result: dict) -> str:
    env, c, cost, lat = result["env"], result["config"], result["listening"], result["latency"]

    def cell(s: dict, unit: str = "", digits: int = 1) -> str:
        return f"{s['median']:.{digits}f}{unit} [{s['min']:.{digits}f}-{s['max']:.{digits}f}]"

    def verdict(met: bool) -> str:
        return "PASS" if met else "MISS"

    lines = [
        f"homeagent voice bench: Python {env['python']} {env['machine']}, {env['cpus']} CPUs, "
        f"load average {env['loadavg_start'][0]:.2f} -> {env['loadavg_end'][0]:.2f}",
        "",
        f"listening cost: {c['rounds']} rounds of a {cost['clip_seconds']:.1f} s clip (noise "
        "and speech without the wake word, real time, every listener hearing the same "
        "samples at once), process CPU ms per second of audio, median [min-max]",
    ]
    for name in COST_NAMES:
        lines.append(f"  {name:<10}{cell(cost['cpu_ms_per_s'][name], ' ms/s'):>28}"
                     f"   RSS {cost['rss_mib'][name]:.1f} MiB")
    lines += [
        f"  daemon / peer (wake word + VAD)      {cell(cost['daemon_over_peer'], 'x', 2)}, "
        f"target <= {COST_TARGET:g}x: {verdict(cost['cost_met'])}",
        f"  daemon / peer-wake (the same work)   {cell(cost['daemon_over_peer_wake'], 'x', 2)}, "
        f"target <= {COST_TARGET:g}x: {verdict(cost['same_work_met'])}",
        f"  daemon RSS with [voice] {cost['rss_mib']['daemon']:.1f} MiB, target <= "
        f"{RSS_TARGET_MIB:g} MiB: {verdict(cost['rss_met'])}; without "
        f"{cost['rss_mib']['no-voice']:.1f} MiB",
        "",
    ]
    counted = result["instructions"]
    if counted is None:
        lines.append("instructions: no callgrind round (--quick, --callgrind-groups 0, or no "
                     "valgrind)")
    else:
        per = counted["instructions_per_s"]
        lines += [
            f"instructions (callgrind, {counted['audio_seconds']:.2f} s of audio in "
            f"{GROUP_MS} ms groups, each read waiting), per second of audio:",
            "  " + ", ".join(f"{name} {per[name] / 1e6:.2f} M" for name in CALLGRIND_NAMES),
            f"  daemon / peer {counted['daemon_over_peer']:.3f}x, daemon / peer-wake "
            f"{counted['daemon_over_peer_wake']:.3f}x",
        ]
    lines += [
        "",
        f"latency: {c['latency_rounds']} rounds (+{c['warmup']} warm-up), ASR answering "
        f"{c['asr_delay_ms']} ms after audio-stop, silence_seconds {c['silence_seconds']:g}; "
        "ms, median [min-max]",
    ]
    v, s = lat["figures"]["voice"], lat["figures"]["sequential"]
    lines += [
        f"  voice       first audio from audio-stop {cell(v['first_audio_ms'])}; from the end "
        f"of speech {cell(v['from_speech_end_ms'])} (endpoint {cell(v['endpoint_ms'])})",
        f"  sequential  first audio from audio-stop {cell(s['first_audio_ms'])}; answer done "
        f"{cell(s['answer_ms'])} after the ask",
        f"  ASR {cell(v['asr_ms'])}, first sentence {cell(s['first_sentence_ms'])}, its "
        f"synthesis {cell(v['synthesis_ms'])}",
        f"  bound (ASR + first sentence + synthesis + {SLACK_MS:g} ms) {cell(lat['bound_ms'])}: "
        f"{verdict(lat['bound_met'])}, within it in {lat['within_bound']} of "
        f"{c['latency_rounds']} rounds",
        f"  sequential / voice from audio-stop {cell(lat['sequential_over_voice'], 'x', 2)}, "
        f"target >= {RATIO_TARGET:g}x: {verdict(lat['ratio_met'])}",
        f"  from the end of speech (both waiting the endpoint) "
        f"{cell(lat['sequential_over_voice_from_speech_end'], 'x', 2)}: "
        f"{verdict(lat['ratio_from_speech_end_met'])}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12,
                        help="listening-cost rounds (the clip once each, 6.6 s)")
    parser.add_argument("--latency-rounds", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=1, help="latency rounds not counted")
    parser.add_argument("--asr-delay-ms", type=int, default=300)
    parser.add_argument("--quick", action="store_true",
                        help="2 rounds, 1 latency round, no callgrind: a smoke test")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter for the daemons and peers (default: this one)")
    parser.add_argument("--callgrind-groups", type=int, default=40,
                        help=f"the callgrind round's length, in groups of {GROUP_MS} ms of audio "
                             "(0: none; none either without valgrind)")
    parser.add_argument("--json", action="store_true", help="table to stderr, JSON to stdout")
    args = parser.parse_args(argv)
    settle = 3.0
    if args.quick:
        args.rounds, args.latency_rounds, args.warmup = 2, 1, 0
        args.callgrind_groups = 0
        settle = 2.0
    if args.rounds < 1 or args.latency_rounds < 1 or args.warmup < 0 \
            or args.callgrind_groups < 0:
        parser.error("--rounds and --latency-rounds at least 1, --warmup and "
                     "--callgrind-groups at least 0")
    return db.finish(lambda: run(args.rounds, args.latency_rounds, args.warmup,
                                 args.asr_delay_ms, settle, args.python, args.callgrind_groups),
                     report, args.json)


if __name__ == "__main__":
    sys.exit(main())
