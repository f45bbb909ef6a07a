"""The compiled C core: the cffi module, and the hand-written binding of its
per-read call (csrc/pyfeed.c). There is no pure-Python fallback on the
production path: without the extensions, importing the stream core fails and
says how to build them."""

try:
    from agent.stream._core import ffi, lib
    from agent.stream._feed import Feed
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "homeagent's C stream core (agent.stream._core, agent.stream._feed) is not built. "
        "Build it with `pip install -e .` (or `pip install .`) from the source "
        "tree; that needs a C compiler and the Python headers "
        "(Debian: apt-get install gcc python3-dev)."
    ) from exc

__all__ = ["Feed", "ffi", "lib"]
