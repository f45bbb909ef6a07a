"""The compiled C core. There is no pure-Python fallback on the production
path: without the extension, importing the stream core fails and says how to
build it."""

try:
    from agent.stream._core import ffi, lib
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "homeagent's C stream core (agent.stream._core) is not built. "
        "Build it with `pip install -e .` (or `pip install .`) from the source "
        "tree; that needs a C compiler and the Python headers "
        "(Debian: apt-get install gcc python3-dev)."
    ) from exc

__all__ = ["ffi", "lib"]
