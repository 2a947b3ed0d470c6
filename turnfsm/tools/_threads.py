"""The threads sync tools run in: a daemon thread a call, bounded by a limiter
of their own per event loop.

A sync tool function (and a sync sub-task summarizer) runs in a thread of its
own (see :func:`~turnfsm.tools.tool`), started for the call and marked a
daemon: a call that is cancelled or times out stops waiting at once, and a
process that is stopping (``turnfsm serve`` on SIGTERM) exits without waiting
for a tool that still sleeps, as it would after a kill. The thread sees the
caller's context variables. The calls running at once are bounded by a
:class:`~anyio.CapacityLimiter` of their own, not by anyio's default limiter,
which the stores and the server's own work in threads share: tools that all
sleep at once cannot keep a commit or a page of the web view waiting.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

if TYPE_CHECKING:
    import asyncio

__all__ = ["DEFAULT_TOOL_THREADS", "run_in_tool_thread", "tool_threads"]

T = TypeVar("T")

DEFAULT_TOOL_THREADS = 40
"""How many sync tool calls run at once in one event loop, by default (as many
as anyio's default limiter lets threads run)."""

_LIMITER: RunVar[anyio.CapacityLimiter] = RunVar("turnfsm_tool_threads")


def tool_threads() -> anyio.CapacityLimiter:
    """The limiter of the threads sync tools run in, in the running event loop
    (made on first use, :data:`DEFAULT_TOOL_THREADS` tokens).

    A call that finds every token taken waits for one, cancellably; its
    ``timeout`` counts the wait. A call that is cancelled or times out gives its
    token back at once, while its thread runs on to its end. Change the bound in
    the loop that runs the engine: ``tool_threads().total_tokens = 100``.
    """
    try:
        return _LIMITER.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(DEFAULT_TOOL_THREADS)
        _LIMITER.set(limiter)
        return limiter


async def run_in_tool_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a daemon thread of its own, within :func:`tool_threads`.

    Cancelled, the caller stops waiting and gives its token back; the thread
    runs on, its outcome dropped, and does not hold the process open at exit
    (anyio's worker threads would: the interpreter joins them).
    """
    import asyncio  # here: importing turnfsm leaves asyncio out

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # another async library (trio): anyio's worker threads
        return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True, limiter=tool_threads())
    async with tool_threads():
        fut: asyncio.Future[T] = loop.create_future()
        context = contextvars.copy_context()

        def work() -> None:
            try:
                outcome: tuple[bool, object] = (True, context.run(fn))
            except BaseException as exc:  # handed to the waiting task, raised there
                outcome = (False, exc)
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                loop.call_soon_threadsafe(_settle, fut, outcome)

        threading.Thread(target=work, name="turnfsm tool", daemon=True).start()
        return await fut


def _settle(fut: asyncio.Future[Any], outcome: tuple[bool, object]) -> None:
    if fut.done():  # cancelled meanwhile: the outcome is dropped
        return
    ok, value = outcome
    if ok:
        fut.set_result(value)
    else:
        assert isinstance(value, BaseException)
        fut.set_exception(value)
