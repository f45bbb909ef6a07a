"""Instructions the C stream core executes per read, counted by callgrind.

    python bench/core_instructions.py [--cc gcc]

The bench streams of stream_bench.py (Chat Completions, 392 events) and
ollama_bench.py (Ollama /api/chat, 303 lines), each in its two regimes (4 KiB
reads; one event or line per read), are written as files of reads and fed
through ha_stream_feed_packed by core_drive.c, built from this tree's csrc/
with -O2 -flto as the extension is. valgrind --tool=callgrind counts the
instructions inside ha_stream_feed_packed only: the C work of the calls,
without the cffi call or anything in Python. Instruction counts do not move
with the machine's load, so two trees compare in one run each; they are not
nanoseconds (callgrind models no cache or branch cost).
"""

from __future__ import annotations

import argparse
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSRC = HERE.parent / "csrc"
sys.path.insert(0, str(HERE))

import decoder_bench as db  # noqa: E402  (sets up agent.stream from the tree if needed)
import ollama_bench as ob  # noqa: E402
import stream_bench as sb  # noqa: E402

from agent.stream.records import Protocol  # noqa: E402

SOURCES = ("sse.c", "ndjson.c", "json.c", "record.c", "extract.c", "openai_chat.c",
           "anthropic.c", "openai_responses.c", "ollama.c")


def streams() -> list[tuple[str, Protocol, list[bytes]]]:
    cfg = db.configure(False)
    events, _ = sb.make_stream(cfg["seed"], cfg["text_chunks"], cfg["reasoning_chunks"],
                               cfg["tool_arg_chars"])
    ocfg = ob.configure(False)
    lines, _ = ob.make_stream(ocfg["seed"], ocfg["text_chunks"], ocfg["thinking_chunks"],
                              ocfg["tool_arg_chars"])
    oreads = ob.make_reads(lines)
    return [("ollama, 4 KiB reads", Protocol.OLLAMA, oreads["4k"]),
            ("ollama, one line per read", Protocol.OLLAMA, oreads["line"]),
            ("chat, 4 KiB reads", Protocol.OPENAI_CHAT, sb.reads_4k(events)),
            ("chat, one event per read", Protocol.OPENAI_CHAT, sb.reads_per_event(events))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cc", default="gcc")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        drive = Path(tmp) / "core_drive"
        subprocess.run([args.cc, "-std=c11", "-O2", "-flto", f"-I{CSRC}", "-o", str(drive),
                        str(HERE / "core_drive.c"), *(str(CSRC / s) for s in SOURCES)],
                       check=True)
        print(f"{'stream':28} {'reads':>6} {'instructions':>14} {'per read':>10} {'per byte':>9}")
        for name, proto, reads in streams():
            path = Path(tmp) / "reads.bin"
            path.write_bytes(b"".join(struct.pack("<I", len(r)) + r for r in reads))
            out = Path(tmp) / "callgrind.out"
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                            "--toggle-collect=ha_stream_feed_packed", str(drive),
                            str(int(proto)), str(path)],
                           check=True, capture_output=True)
            totals = re.search(r"^summary:\s*(\d+)", out.read_text(), re.M)
            ir = int(totals.group(1))
            size = sum(map(len, reads))
            print(f"{name:28} {len(reads):6} {ir:14,} {ir // len(reads):10,} {ir / size:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
