"""The providers' prompt caches, simulated for the usage figures, sans-IO.

Asked for per request (x-mock-prompt-cache: on), so that without it the same
request still gets the same bytes. A token is 4 bytes here, as the mock's
input_tokens count them; no minimum length is needed for a hit.

- Automatic prefix caching (OpenAI, DeepSeek, vLLM, llama.cpp): a request
  reads from the cache the longest byte prefix its body shares with an
  earlier body to the same path. A body that puts its growing history
  last hits; one whose early bytes moved (keys reordered, a number written
  otherwise, tools in another order) does not.
- Anthropic: only up to a `cache_control` breakpoint. The tools, the system
  blocks and the message blocks are one sequence (that order, whatever the
  JSON's), each block compared without its cache_control; a breakpoint hits
  when the sequence up to it, or up to one of the LOOKBACK blocks before it,
  was a breakpoint of an earlier request. What lies between the hit and the
  last breakpoint is written.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict, deque
from dataclasses import dataclass

HEADER = "x-mock-prompt-cache"
BODIES_KEPT = 64     # per path: the automatic cache's earlier bodies
KEYS_KEPT = 4096     # Anthropic's breakpoint prefixes
LOOKBACK = 20        # blocks before a breakpoint where Anthropic looks for a hit
BYTES_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class Figures:
    read: int = 0     # tokens read from the cache
    written: int = 0  # tokens written to it (Anthropic only)


class PromptCache:
    def __init__(self) -> None:
        self._bodies: dict[str, deque[bytes]] = {}
        self._keys: OrderedDict[str, None] = OrderedDict()

    def automatic(self, path: str, body: bytes) -> Figures:
        earlier = self._bodies.setdefault(path, deque(maxlen=BODIES_KEPT))
        shared = max((_common_prefix(body, other) for other in earlier), default=0)
        earlier.append(body)
        return Figures(read=shared // BYTES_PER_TOKEN)

    def anthropic(self, request: dict) -> Figures:
        blocks = _anthropic_blocks(request)
        digest, ends, sizes = hashlib.sha256(), [], []
        size = 0
        for block, _ in blocks:
            digest.update(block)
            size += len(block)
            ends.append(digest.hexdigest())
            sizes.append(size)
        marked = [i for i, (_, mark) in enumerate(blocks) if mark]
        if not marked:
            return Figures()
        read = max((sizes[j] for i in marked for j in range(i, max(-1, i - LOOKBACK - 1), -1)
                    if ends[j] in self._keys), default=0)
        for i in marked:
            self._keys[ends[i]] = None
            self._keys.move_to_end(ends[i])
        while len(self._keys) > KEYS_KEPT:
            self._keys.popitem(last=False)
        written = max(0, sizes[marked[-1]] - read)
        return Figures(read // BYTES_PER_TOKEN, written // BYTES_PER_TOKEN)


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    low, high = 0, n  # the prefix of length low is shared; bisect on the rest
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _anthropic_blocks(request: dict) -> list[tuple[bytes, bool]]:
    """Each block of the prompt in Anthropic's order, canonical bytes
    without cache_control, and whether it carried a breakpoint."""
    out: list[tuple[bytes, bool]] = []

    def add(kind: str, block) -> None:
        marked = isinstance(block, dict) and "cache_control" in block
        if marked:
            block = {k: v for k, v in block.items() if k != "cache_control"}
        out.append((json.dumps([kind, block], sort_keys=True).encode(), marked))

    for tool in _list(request.get("tools")):
        add("tool", tool)
    system = request.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else _list(system):
        add("system", block)
    for message in _list(request.get("messages")):
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        for block in [{"type": "text", "text": content}] if isinstance(content, str) \
                else _list(content):
            add(str(role), block)
    return out


def _list(value) -> list:
    return value if isinstance(value, list) else []
