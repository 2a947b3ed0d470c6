"""A one-shot flag for the server's per-call signals, made without anyio's
look-up of the running async library.

Every turn the server launches makes two such signals (a call's first step
and its end, ``_hub.py``); an ``anyio.Event`` asks which library runs (a
look-up through sniffio) each time one is made. A :class:`Flag` is a plain
object until someone waits on it, and then waits on an asyncio future when
asyncio runs (as under uvicorn), else on an ``anyio.Event`` (another async
library: trio).
"""

from __future__ import annotations

import asyncio

import anyio
import anyio.lowlevel

__all__ = ["Flag", "running_loop", "wake"]


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop; None under another async library."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def wake(waiter: asyncio.Future[None] | anyio.Event) -> None:
    """Wake what waits on ``waiter`` (a future already done or cancelled: nothing)."""
    if isinstance(waiter, anyio.Event):
        waiter.set()
    elif not waiter.done():
        waiter.set_result(None)


class Flag:
    """Set once, waited on by any number: ``anyio.Event``'s ``set``,
    ``is_set`` and ``wait`` (a wait on a set flag is a checkpoint, as
    anyio's is)."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None] | anyio.Event] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        waiters = self._waiters
        if waiters is not None:
            self._waiters = None
            for waiter in waiters:
                wake(waiter)

    async def wait(self) -> None:
        if self._set:
            await anyio.lowlevel.checkpoint()
            return
        loop = running_loop()
        waiter: asyncio.Future[None] | anyio.Event
        waiter = anyio.Event() if loop is None else loop.create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        if isinstance(waiter, anyio.Event):
            await waiter.wait()
        else:
            await waiter
