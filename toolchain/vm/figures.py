"""Figures inside the guest, run by checks.py with the installed venv's
python: the time to the first answer text through the daemon's socket
against reading the mock model server directly, in the same run.

    python figures.py SOCKET MOCK_BASE_URL KEY
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import httpx

from agent.api.client import Client

ROUNDS = 10
PROMPT = "hello"


def through_socket(path: str) -> list[float]:
    times = []
    with Client(path, timeout=120) as client:
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            request_id = client.send("ask", prompt=PROMPT)
            first = None
            for reply in client.replies(request_id, "ask"):
                if reply["type"] == "delta" and first is None:
                    first = time.perf_counter() - t0
            times.append(first)
    return times


def direct(base_url: str, key: str) -> list[float]:
    times = []
    body = {"model": "mock", "stream": True,
            "messages": [{"role": "user", "content": PROMPT}]}
    with httpx.Client(timeout=120, headers={"authorization": f"Bearer {key}"}) as client:
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            first = None
            with client.stream("POST", f"{base_url}/chat/completions", json=body) as response:
                for line in response.iter_lines():
                    if first is None and line.startswith("data: {") and _text(line[6:]):
                        first = time.perf_counter() - t0
            times.append(first)
    return times


def _text(data: str) -> str:
    """A Chat Completions chunk's answer text ("" for the role-only first one)."""
    choices = json.loads(data).get("choices") or [{}]
    return (choices[0].get("delta") or {}).get("content") or ""


def main() -> int:
    path, base_url, key = sys.argv[1:4]
    sock, raw = through_socket(path), direct(base_url, key)
    ms = lambda values: f"median {statistics.median(values) * 1000:.0f} ms " \
                        f"(min {min(values) * 1000:.0f}, max {max(values) * 1000:.0f})"
    print(f"first delta, {ROUNDS} asks each: through the socket {ms(sock)}; "
          f"the mock read directly {ms(raw)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
