"""Time, injected: the engine never reads the system clock directly."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Protocol, runtime_checkable

import anyio

__all__ = ["Clock", "FakeClock", "SequentialIds", "SystemClock", "from_timestamp"]

from_timestamp = datetime.fromtimestamp
"""``datetime.fromtimestamp``, read off its class once: the engine makes a
datetime of a clock reading several times a turn (``from_timestamp(t, UTC)``),
and every read of a classmethod off its class makes a new bound method."""


@runtime_checkable
class Clock(Protocol):
    def time(self) -> float:
        """Seconds since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock: ``time.time`` and ``anyio.sleep``."""

    time = staticmethod(time.time)
    """Seconds since the epoch: ``time.time`` itself (the engine reads the
    clock for every event and every streamed chunk; no Python frame each)."""

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class FakeClock:
    """A virtual clock: ``sleep`` advances time at once (after one checkpoint).

    ``sleeps`` records every requested delay, so a test can assert on backoff.
    """

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self.now = start
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await anyio.lowlevel.checkpoint()
        self.now += max(seconds, 0.0)

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SequentialIds:
    """Ids ``{prefix}1``, ``{prefix}2``, ... for reproducible histories."""

    def __init__(self, prefix: str = "id-") -> None:
        self.prefix = prefix
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count}"
