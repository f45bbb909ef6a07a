"""The configured secrets, masked out of every string that leaves the daemon.

The secrets are the API keys and the credentials in provider headers
(authorization, x-api-key...). They leave only in requests upstream, yet
come back: a model server quotes a wrong key in its error event or in a
stream field, an exception quotes the request header it could not send.
So every reply (agent/core/edge.py, the masking edge) and every log record
(agent/service/log.py) passes through the masker of the running config,
which the daemon installs at start and again on each reload.

A secret is masked in each form it comes back in: as sent, URL-quoted, and
JSON-escaped (an error message quoting a JSON body). The config refuses
secrets too short to mask without defacing ordinary text, and secrets with
control characters or whitespace, which no header can carry.

This module loads re, json and urllib only: replies.py, which the blocking
client imports, uses it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

MASK = "***"
MIN_SECRET_CHARS = 8


class Masker:
    """Replaces each of the secrets, in every form, with MASK."""

    __slots__ = ("_pattern",)

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms = {form for secret in secrets if secret for form in _forms(secret)}
        # Longest first: a form that holds another one is masked whole.
        alternatives = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, alternatives))) if forms else None

    def mask(self, text: str) -> str:
        return text if self._pattern is None else self._pattern.sub(MASK, text)


def _forms(secret: str) -> set[str]:
    return {secret, quote(secret, safe=""), quote_plus(secret, safe=""),
            json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}


_active = Masker()


def install(masker: Masker) -> None:
    """Make masker the one mask() applies: the daemon's, from its config."""
    global _active
    _active = masker


def mask(text: str) -> str:
    """text with the installed secrets masked."""
    return _active.mask(text)
