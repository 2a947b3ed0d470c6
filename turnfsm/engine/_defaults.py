"""What the engine uses when the application gives nothing: a logger, the
lease's time to live, and the host name in a lease owner's name (the ids are
``_ids.py``'s); and the check of the application's ids."""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Callable
from typing import Any

from ..errors import InvalidInput
from ._inputs import check_id

__all__ = ["DEFAULT_LEASE_TTL", "HOST", "checked_id", "default_logger"]

HOST = socket.gethostname()

DEFAULT_LEASE_TTL = 30.0
"""Seconds a call's lease on its context lasts without a heartbeat."""


def checked_id(ids: Callable[[], object]) -> str:
    """An id from the application's ``ids`` factory, held to the id rule
    (a context, message or system prompt id must load back from every store)."""
    value = ids()
    try:
        return check_id("ids", value)
    except InvalidInput as exc:
        raise InvalidInput("ids", f"the id factory returned {value!r}: {exc.reason}") from None


_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


def default_logger(level: int | None = None) -> Any:
    """A structlog logger to stderr at ``level``, by default the level of the stdlib
    ``turnfsm`` logger (WARNING unless the application says otherwise). Pass
    ``logger=`` to the engine to use the application's own structlog configuration.

    structlog itself is imported when the first message at that level is
    logged: a call that logs nothing does not pay for its import."""
    if level is None:
        level = logging.getLogger("turnfsm").getEffectiveLevel()
    return _LazyLogger(level, sys.stderr, {})


def _structlog_logger(level: int, file: Any) -> Any:
    import structlog

    return structlog.wrap_logger(
        structlog.PrintLogger(file),
        wrapper_class=structlog.make_filtering_bound_logger(level),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            # an exception logged with exc_info (a failing tap, a tool's crash)
            # shows its traceback, not "exc_info=True"
            structlog.processors.format_exc_info,
            structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event"]),
        ],
    )


_new_logger = object.__new__


class _LazyLogger:
    """Stands for the filtering structlog logger of :func:`default_logger`: the
    same methods and output, the structlog logger built on the first message
    that passes the level."""

    __slots__ = ("_context", "_file", "_level", "debug")

    def __init__(self, level: int, file: Any, context: dict[str, Any]) -> None:
        self._level = level
        self._file = file
        # the bound values as one flat tuple (key, value, key, value...): a
        # logger is bound per loaded context, and one tuple is smaller than a
        # dict or a tuple of pairs
        self._context = tuple([x for pair in context.items() for x in pair])
        # the engine logs a debug line per transition: below the level it is
        # one call that does nothing
        self.debug: Callable[..., Any] = self._debug if level <= logging.DEBUG else ignore

    def bind(self, **values: Any) -> _LazyLogger:
        flat = self._context
        keys = flat[::2]
        for key in values:
            if key in keys:  # a value bound again replaces the old one, in its place
                return _LazyLogger(self._level, self._file, {**self._values(), **values})
        # new keys only (the engine binds a context's id once per loaded
        # context): the bound values are the old ones with these after them
        new = _new_logger(_LazyLogger)
        new._level = self._level
        new._file = self._file
        new._context = flat + tuple([x for pair in values.items() for x in pair])
        new.debug = self.debug if self.debug is ignore else new._debug
        return new

    def new(self, **values: Any) -> _LazyLogger:
        return _LazyLogger(self._level, self._file, dict(values))

    def _values(self) -> dict[str, Any]:
        flat = self._context
        return dict(zip(flat[::2], flat[1::2], strict=True))

    def _real(self) -> Any:
        return _structlog_logger(self._level, self._file).bind(**self._values())

    def _debug(self, event: Any = None, *args: Any, **kw: Any) -> Any:
        return self._real().debug(event, *args, **kw)

    def info(self, event: Any = None, *args: Any, **kw: Any) -> Any:
        if self._level <= logging.INFO:
            return self._real().info(event, *args, **kw)
        return None

    def warning(self, event: Any = None, *args: Any, **kw: Any) -> Any:
        if self._level <= logging.WARNING:
            return self._real().warning(event, *args, **kw)
        return None

    def error(self, event: Any = None, *args: Any, **kw: Any) -> Any:
        if self._level <= logging.ERROR:
            return self._real().error(event, *args, **kw)
        return None

    def __getattr__(self, name: str) -> Any:
        level = _LEVELS.get(name)
        if level is not None and level < self._level:
            return ignore
        return getattr(self._real(), name)


def ignore(*args: Any, **kw: Any) -> None:
    return None
