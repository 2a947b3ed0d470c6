"""What the engine uses when the application gives nothing: ids and a logger."""

from __future__ import annotations

import itertools
import logging
import sys
import uuid
from collections.abc import Callable
from typing import Any

import structlog

from ..errors import InvalidInput
from ._inputs import check_id

__all__ = ["Ids", "checked_id", "default_logger"]


class Ids:
    """Default ids: a random 64-bit prefix per engine and a counter (unique across
    engines and processes, and far cheaper than a uuid4 per message)."""

    __slots__ = ("_next", "_prefix")

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:16]
        self._next = itertools.count(1).__next__

    def __call__(self) -> str:
        return f"{self._prefix}-{self._next():x}"


def checked_id(ids: Callable[[], object]) -> str:
    """An id from the application's ``ids`` factory, held to the id rule
    (a context, message or system prompt id must load back from every store)."""
    value = ids()
    try:
        return check_id("ids", value)
    except InvalidInput as exc:
        raise InvalidInput("ids", f"the id factory returned {value!r}: {exc.reason}") from None


def default_logger(level: int | None = None) -> Any:
    """A structlog logger to stderr at ``level``, by default the level of the stdlib
    ``turnfsm`` logger (WARNING unless the application says otherwise). Pass
    ``logger=`` to the engine to use the application's own structlog configuration."""
    if level is None:
        level = logging.getLogger("turnfsm").getEffectiveLevel()
    return structlog.wrap_logger(
        structlog.PrintLogger(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(level),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event"]),
        ],
    )
