"""Time, injected: the engine never reads the system clock directly."""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

import anyio

__all__ = ["Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    def time(self) -> float:
        """Seconds since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock: ``time.time`` and ``anyio.sleep``."""

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)
