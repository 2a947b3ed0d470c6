"""The worker threads sync tools run in: a limiter of their own per event loop.

A sync tool function runs in one of anyio's worker threads (see
:func:`~turnfsm.tools.tool`). Those threads are bounded by a
:class:`~anyio.CapacityLimiter` of their own, not by anyio's default limiter,
which the stores and the server's own work in threads share: tools that all
sleep at once cannot keep a commit or a page of the web view waiting.
"""

from __future__ import annotations

import anyio
from anyio.lowlevel import RunVar

__all__ = ["DEFAULT_TOOL_THREADS", "tool_threads"]

DEFAULT_TOOL_THREADS = 40
"""How many sync tool calls run at once in one event loop, by default (as many
as anyio's default limiter lets threads run)."""

_LIMITER: RunVar[anyio.CapacityLimiter] = RunVar("turnfsm_tool_threads")


def tool_threads() -> anyio.CapacityLimiter:
    """The limiter of the worker threads sync tools run in, in the running event
    loop (made on first use, :data:`DEFAULT_TOOL_THREADS` tokens).

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
