"""The engine's default ids: UUIDv7 (RFC 9562), or the older compact ids.

A UUIDv7 starts with the Unix time in milliseconds, so ids sort by when they
were made; :func:`uuid7` makes them in their canonical form
(``0192e4c3-7a5b-7000-8000-3f2a9c1d4e5b``). It follows RFC 9562's method 1
(a fixed-length dedicated counter): after the 48-bit timestamp and the
version come a 26-bit counter (the 12 bits of ``rand_a`` and the first 14 of
``rand_b``) and, after the variant, 48 bits drawn from ``os.urandom`` once
per process (again in a forked child). The counter restarts at 0 on each new
millisecond and counts up within one; a clock that steps back, or a counter
that runs out (2**26 ids in one millisecond), holds the timestamp at the last
one used plus what the counter needs, so every id one process makes is
greater than the one before (RFC 9562, section 6.2), whichever engine or
thread asked for it. Ids of two processes differ in their random 48 bits.
They are unique and ordered, not secret: the ids of one process tell each
other's random part.

:class:`CompactIds` are the ids of earlier versions, ``<16 hex digits>-<n>``
(a random prefix per engine and a counter in hex): shorter, and what stores
written by them hold. ``Engine(ids="compact")`` keeps them; ``turnfsm``'s
commands take ``--ids compact``.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Literal

__all__ = ["ID_KINDS", "CompactIds", "IdKind", "Uuid7", "id_factory", "uuid7"]

IdKind = Literal["uuid7", "compact"]
ID_KINDS: tuple[IdKind, ...] = ("uuid7", "compact")
"""The names ``Engine(ids=...)`` and ``--ids`` take; the first is the default."""

_COUNTER_BITS = 26
_COUNTER_MAX = (1 << _COUNTER_BITS) - 1
_LOW_BITS = 14  # the counter's bits after the variant
_LOW_MASK = (1 << _LOW_BITS) - 1


class Uuid7:
    """A UUIDv7 generator (see the module's docstring); :func:`uuid7` is the
    one every engine of a process shares.

    It runs for every message, so an id costs a lock, a clock read and one
    string built: the first id of a millisecond in one piece from the first
    group (which changes every 65 seconds) and two table lookups; a later one
    in the same millisecond as the text up to the counter's low 14 bits (made
    by the second id of the millisecond, and again when those bits wrap) and
    the text after it, kept for the first 256 counts; the random end once per
    process."""

    __slots__ = (
        "_counter",
        "_edge",
        "_first",
        "_head",
        "_last",
        "_lock",
        "_tail",
        "_tails",
        "_top",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = -1
        self._edge = 0
        self._counter = 0
        self._head = ""
        self._tail = ""
        self._tails: tuple[str, ...] = ()
        self._top = -1
        self._first = ""
        self.reseed()

    def reseed(self) -> None:
        """New random bits and a new lock: in a forked child, so that its ids
        are not its parent's."""
        self._lock = threading.Lock()
        tail = self._tail = "-" + os.urandom(6).hex()
        # the fourth and fifth groups of the counts 0 to 255 (the variant, the
        # counter's bits 8 to 13 at 0): a millisecond rarely makes more ids,
        # and each of these is then one concatenation
        self._tails = tuple(f"{_VARIANT_HEX[0]}{low}{tail}" for low in _HEX)

    def __call__(self) -> str:
        lock = self._lock
        lock.acquire()
        try:
            ns = _time_ns()
            # ``_edge`` is the next millisecond's start on the same clock
            # (``_time_ns``): the ids after a millisecond's first are told by a
            # comparison, without dividing the clock's large integer
            if ns >= self._edge:  # a new millisecond
                ms = ns // 1_000_000
                self._last = ms
                self._edge = ms * 1_000_000 + 1_000_000
                self._counter = 0
                self._head = ""  # made by the millisecond's second id, if any
                if ms >> 16 != self._top:
                    self._top = ms >> 16
                    self._first = _head(ms, 0)[:9]
                # one string built (an f-string joins its parts at once, where
                # each ``+`` makes a string of its own)
                mid = _HEX[(ms >> 8) & 0xFF]
                return f"{self._first}{mid}{_HEX[ms & 0xFF]}-7000-{self._tails[0]}"
            # the same millisecond, or a clock that stepped back
            count = self._counter + 1
            if count > _COUNTER_MAX:
                ms = self._last = self._last + 1
                self._edge = ms * 1_000_000 + 1_000_000
                count = 0
                self._head = _head(ms, 0)
            elif not count & _LOW_MASK:  # the low bits wrapped: rand_a counts on
                self._head = _head(self._last, count)
            self._counter = count
            head = self._head
            if not head:  # the millisecond's second id (rand_a still 0)
                ms = self._last
                head = self._head = f"{self._first}{_HEX[(ms >> 8) & 0xFF]}{_HEX[ms & 0xFF]}-7000-"
            if count < 256:
                return head + self._tails[count]
            return head + _VARIANT_HEX[(count >> 8) & 0x3F] + _HEX[count & 0xFF] + self._tail
        finally:
            lock.release()


_time_ns = time.time_ns
_HEX = [f"{i:02x}" for i in range(256)]
_VARIANT_HEX = [f"{0x80 | i:02x}" for i in range(64)]
"""The first byte of the fourth group: the variant bits (``10``), then the
counter's bits 8 to 13."""


def _head(ms: int, count: int) -> str:
    """An id's text up to its fourth group: the timestamp, the version and
    the counter's high bits (``rand_a``)."""
    # printf-style: a third cheaper than the f-string (measured), once a millisecond
    return "%08x-%04x-7%03x-" % (ms >> 16, ms & 0xFFFF, count >> _LOW_BITS)  # noqa: UP031


uuid7 = Uuid7()
"""The process's UUIDv7 generator: ``uuid7()`` is a new id."""
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=uuid7.reseed)


class CompactIds:
    """Compact ids: a random 64-bit prefix per engine and a counter (unique
    across engines and processes; ordered within one engine only)."""

    __slots__ = ("_next", "_prefix")

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:16]
        self._next = itertools.count(1).__next__

    def __call__(self) -> str:
        return f"{self._prefix}-{self._next():x}"


def id_factory(kind: IdKind) -> Callable[[], str]:
    """The id factory a kind names: :data:`uuid7` or a new :class:`CompactIds`."""
    if kind == "uuid7":
        return uuid7
    return CompactIds()
