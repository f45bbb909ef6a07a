"""Stream core: network reads in, typed events out (sans-IO).

The bytes of a streaming HTTP response go to StreamDecoder.feed(); the C core
(csrc/, bound in agent.stream._core) frames SSE (NDJSON for Ollama), scans
strict JSON and extracts the protocol's fields in one call per read.
"""

from agent.stream.decoder import DEFAULT_BUFFER_SIZE, StreamClosedError, StreamDecoder
from agent.stream.records import Protocol
from agent.stream.jsonscan import JSONError, loads, loads_flagged

__all__ = [
    "DEFAULT_BUFFER_SIZE",
    "JSONError",
    "Protocol",
    "StreamClosedError",
    "StreamDecoder",
    "loads",
    "loads_flagged",
]
