"""The cancel scope around each call, made as anyio makes it, without the
backend lookup anyio repeats for every scope.

``anyio.CancelScope()`` asks sniffio which event loop runs (a Python frame
each for anyio's and sniffio's ``current_async_library``), looks the backend
up, has it make its own scope class's instance, and then, as that is an
instance of a subclass, the class call runs its ``__init__`` a second time.
A call of the engine makes one scope. When sniffio would answer asyncio
(its thread-local name, else its context variable, is ``"asyncio"`` or
unset) on the loop whose scope class is known, the scope is made by that
class directly: the same object anyio would make. Anywhere else (trio,
another loop, another library named by sniffio) it is made by
``anyio.CancelScope()``, which then teaches the class for that loop.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import anyio

__all__ = ["call_scope"]

try:
    import sniffio
except ImportError:  # pragma: no cover - anyio runs without it, and then asks only for a loop
    _thread_local: Any = None
    _library_var: Any = None
else:
    _thread_local = sniffio.thread_local
    _library_var = sniffio.current_async_library_cvar

_ASYNCIO_SCOPES = "anyio._backends._asyncio"
"""The module of anyio's asyncio scope class."""

_known: tuple[Callable[[], object], Callable[[], Any]] | None = None
"""(a weak reference to the loop, the scope class anyio made there), set at
once as one tuple so that another thread reads one or the other whole."""


def _no_loop() -> object:
    return None


_running_loop: Callable[[], object] = _no_loop
"""asyncio's ``_get_running_loop`` once anyio made an asyncio scope (asyncio
is loaded then: importing turnfsm leaves it out)."""


def _named() -> str | None:
    """The library sniffio names before it looks for asyncio's task, if any."""
    if _thread_local is None:
        return None
    name: str | None = _thread_local.name
    return _library_var.get() if name is None else name


def call_scope() -> anyio.CancelScope:
    """``anyio.CancelScope()`` (see the module's docstring)."""
    loop = _running_loop()
    known = _known
    if known is not None and loop is not None and known[0]() is loop:
        # ``_named`` written out: this runs for every call
        name = None if _thread_local is None else _thread_local.name
        if name is None and _library_var is not None:
            name = _library_var.get()
        if name is None or name == "asyncio":
            scope: anyio.CancelScope = known[1]()
            return scope
    scope = anyio.CancelScope()
    _learn(scope)
    return scope


def _learn(scope: anyio.CancelScope) -> None:
    """Keep ``scope``'s class for the running loop when anyio made an asyncio
    scope there."""
    global _known, _running_loop
    kind = type(scope)
    if kind.__module__ != _ASYNCIO_SCOPES or _named() not in (None, "asyncio"):
        return
    from asyncio.events import _get_running_loop

    _running_loop = _get_running_loop
    loop = _get_running_loop()
    if loop is not None:
        _known = (weakref.ref(loop), kind)
