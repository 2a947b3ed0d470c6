"""The cancel scope each call runs in (``Runtime.scope``: what a cancel
request cancels), made without asking anyio which library runs every time."""

from __future__ import annotations

from collections.abc import Callable

import anyio

__all__ = ["CallScopes"]


class CallScopes:
    """Makes ``anyio.CancelScope()`` for the calls of one engine. Under
    asyncio (a running asyncio loop: the test the tool threads and the
    SQLite store make too) the backend's class is made directly, once one
    call has shown which it is: the generic constructor asks sniffio for the
    library on every call, then initialises the scope twice (once in the
    backend's factory, once more as the generic class's instance). Under
    another library every scope is made the generic way."""

    __slots__ = ("known",)

    def __init__(self) -> None:
        self.known: tuple[type[anyio.CancelScope], Callable[[], object]] | None = None
        """asyncio's scope class and its running-loop probe, once a scope was
        made under asyncio."""

    def __call__(self) -> anyio.CancelScope:
        known = self.known
        if known is not None and known[1]() is not None:
            return known[0]()
        scope = anyio.CancelScope()
        if known is None and type(scope).__module__ == "anyio._backends._asyncio":
            import asyncio  # here: importing turnfsm leaves asyncio out

            self.known = (type(scope), asyncio._get_running_loop)
        return scope
