r"""Logging to stderr, one line a record, for a terminal or for journald.

Under systemd stderr is a stream into journald (JOURNAL_STREAM names it), which
reads a leading "<N>" as the syslog priority and adds its own timestamp; on a
terminal a record carries its time and level in words instead.

journald cuts a stream into entries at every newline (and NUL), so a
multi-line message or traceback would become several entries, all but the
first without the logger's name and priority. Line breaks are therefore escaped, as the two characters \n
(\r, \0 likewise): a record stays one entry, and a traceback reads back with
`journalctl ... | sed 's/\\n/\n/g'`. Backslashes themselves are left as they
are, for readable paths; the escaping is for reading, not for parsing back.

Every record takes this way, the libraries' (trio, httpx, httpcore) as well
as ours: the handler sits on the root logger. So do Python's warnings and
whatever would otherwise print a traceback of its own on stderr (an
uncaught exception, in the main thread or another, an unraisable one in a
finalizer). Each line has the configured secrets masked (agent/masking.py).
Libraries log from warning up, everything with log_level "debug".
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import TextIO

from agent import masking

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR, "critical": logging.CRITICAL}
# syslog priorities, highest threshold first: a custom level takes the one below it
_PRIORITIES = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4),
               (logging.INFO, 6))
_DEBUG_PRIORITY = 7
_ESCAPES = str.maketrans({"\n": "\\n", "\r": "\\r", "\0": "\\0"})

_logger = logging.getLogger("homeagent")
_root = logging.getLogger()


class _OneLine(logging.Formatter):
    """Any record, exception and stack included, as one line."""

    def __init__(self, journal: bool) -> None:
        if journal:
            super().__init__("%(name)s: %(message)s")
        else:
            super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s",
                             datefmt="%Y-%m-%dT%H:%M:%S")
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        # message, arguments and traceback all: any may quote a request header
        line = masking.mask(super().format(record)).translate(_ESCAPES)
        if not self.journal:
            return line
        priority = next((p for level, p in _PRIORITIES if record.levelno >= level),
                        _DEBUG_PRIORITY)
        return f"<{priority}>{line}"


class _Handler(logging.StreamHandler):
    """Ours, so that setup() can find and replace it."""


def _journal(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Whether `stream` is the journald stream JOURNAL_STREAM ("dev:ino") names."""
    if environ.get("HOMEAGENT_LOG_PREFIX") == "1":
        return True
    expected = environ.get("JOURNAL_STREAM")
    if not expected:
        return False
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False  # not a file: a test's StringIO, a closed stream
    return expected == f"{st.st_dev}:{st.st_ino}"


def _level(name: str) -> int:
    try:
        return LEVELS[name.lower()]
    except KeyError:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {name!r}") from None


def setup(level: str = "info", stream: TextIO | None = None,
          environ: Mapping[str, str] = os.environ) -> None:
    """Send every record to `stream` (stderr), one line each; again replaces, never adds."""
    set_level(level)  # first: a bad level leaves the logging as it was
    stream = sys.stderr if stream is None else stream
    handler = _Handler(stream)
    handler.setFormatter(_OneLine(_journal(stream, environ)))
    for old in [h for h in _root.handlers if isinstance(h, _Handler)]:
        _root.removeHandler(old)
    _root.addHandler(handler)
    logging.captureWarnings(True)
    sys.excepthook = _uncaught
    threading.excepthook = _uncaught_in_thread
    sys.unraisablehook = _unraisable


def set_level(level: str) -> None:
    """Change the level of the "homeagent" loggers (the libraries' follow
    at debug only), e.g. on a config reload."""
    number = _level(level)
    _logger.setLevel(number)
    _root.setLevel(number if number == logging.DEBUG else max(number, logging.WARNING))


def _uncaught(kind, error, traceback) -> None:
    _logger.critical("uncaught exception", exc_info=(kind, error, traceback))


def _uncaught_in_thread(hook: threading.ExceptHookArgs) -> None:
    if hook.exc_type is not SystemExit:
        _logger.critical("uncaught exception in thread %s", getattr(hook.thread, "name", "?"),
                         exc_info=(hook.exc_type, hook.exc_value, hook.exc_traceback))


def _unraisable(hook) -> None:
    _logger.error("%s: %r", hook.err_msg or "Exception ignored in", hook.object,
                  exc_info=(hook.exc_type, hook.exc_value, hook.exc_traceback))
