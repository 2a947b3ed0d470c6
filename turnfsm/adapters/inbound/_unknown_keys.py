"""The keys of a request body that its format does not know: named, logged
once, and dropped.

A client of the request formats may send keys the formats do not define (a
legacy message's ``id``, a top-level ``"stream": true``): they are ignored, as
the formats' own schema objects ignore them. So that an operator can still see
what clients send, each such key path is logged once per request format per
process (:class:`UnknownKeys`), by its shape: ``messages[].id`` stands for the
``id`` of every legacy message. The set of paths already logged is bounded;
past its bound one more line says that new paths are no longer logged.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

__all__ = ["MAX_REMEMBERED", "UNKNOWN_KEYS", "UnknownKeys", "key_path"]

MAX_REMEMBERED = 1024
"""How many (key path, format) pairs a process remembers as logged."""

_MAX_KEY = 120
"""Characters of a key shown in a path (a longer one is cut, with ``...``)."""

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*\Z")


def key_path(parent: str, key: str) -> str:
    """The JSON path of ``key`` under ``parent`` (``""``: the top level): a
    plain key as ``parent.key``, any other as ``parent["..."]``, cut to
    :data:`_MAX_KEY` characters."""
    shown = key if len(key) <= _MAX_KEY else key[:_MAX_KEY] + "..."
    if _PLAIN_KEY.match(shown):
        return f"{parent}.{shown}" if parent else shown
    return f"{parent}[{json.dumps(shown, ensure_ascii=True)}]"


class UnknownKeys:
    """Which unknown key paths were logged, per request format: each (path,
    format) pair once, at most ``limit`` of them remembered."""

    __slots__ = ("_full", "_lock", "_seen", "limit")

    def __init__(self, limit: int = MAX_REMEMBERED) -> None:
        self.limit = limit
        self._seen: set[tuple[str, str]] = set()
        self._full = False
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._seen)

    def report(self, log: Any, request_format: str, paths: list[str]) -> None:
        """Log each of ``paths`` (key paths by shape) not logged before for
        ``request_format``: one ``request_body_unknown_key`` line each (INFO),
        and once the bound is reached, one ``request_body_unknown_keys_unlogged``
        line (WARNING)."""
        fresh: list[str] = []
        full_now = False
        with self._lock:
            for path in paths:
                pair = (path, request_format)
                if pair in self._seen:
                    continue
                if len(self._seen) >= self.limit:
                    full_now = not self._full
                    self._full = True
                    break
                self._seen.add(pair)
                fresh.append(path)
        for path in fresh:
            log.info(
                "request_body_unknown_key",
                format=request_format,
                key=path,
                action="ignored (logged once per key and format)",
            )
        if full_now:
            log.warning(
                "request_body_unknown_keys_unlogged",
                remembered=self.limit,
                action="new unknown keys are ignored without a log line from now on",
            )

    def clear(self) -> None:
        """Forget what was logged (tests)."""
        with self._lock:
            self._seen.clear()
            self._full = False


UNKNOWN_KEYS = UnknownKeys()
"""The process's record of the unknown keys logged."""
