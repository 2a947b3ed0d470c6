"""The cancel scope of a call is the one ``anyio.CancelScope()`` makes: the
same class, the same settings, and it cancels what runs under it; made by its
class directly only on the asyncio loop anyio made one on, and by anyio
wherever sniffio names another library."""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest
import sniffio

from turnfsm.engine import _scope
from turnfsm.engine._scope import call_scope

pytestmark = pytest.mark.anyio


def _fields(scope: anyio.CancelScope) -> tuple[Any, ...]:
    return (type(scope), scope.deadline, scope.shield, scope.cancel_called, scope.cancelled_caught)


async def test_a_call_scope_is_what_anyio_makes_and_cancels() -> None:
    first = call_scope()  # taught the class here, if no earlier test did
    fresh = anyio.CancelScope()
    assert _fields(first) == _fields(fresh)
    assert (fresh.deadline, fresh.shield, fresh.cancel_called) == (math.inf, False, False)
    second = call_scope()
    assert second is not first and _fields(second) == _fields(fresh)
    with second as scope:
        scope.cancel()
        await anyio.sleep(10)
    assert scope.cancelled_caught


async def test_the_class_is_made_directly_once_known(monkeypatch: pytest.MonkeyPatch) -> None:
    call_scope()
    made: list[anyio.CancelScope] = []

    def counted() -> anyio.CancelScope:
        scope = anyio.CancelScope.__new__(anyio.CancelScope)
        made.append(scope)
        return scope

    monkeypatch.setattr(_scope.anyio, "CancelScope", counted)
    scope = call_scope()
    assert made == [] and type(scope).__module__ == "anyio._backends._asyncio"


async def test_a_library_sniffio_names_goes_through_anyio(monkeypatch: pytest.MonkeyPatch) -> None:
    call_scope()
    made: list[object] = []
    monkeypatch.setattr(_scope.anyio, "CancelScope", lambda: made.append("anyio") or "anyio's")
    token = sniffio.current_async_library_cvar.set("another")
    try:
        assert call_scope() == "anyio's"
    finally:
        sniffio.current_async_library_cvar.reset(token)
    assert made == ["anyio"]
    sniffio.thread_local.name = "another"
    try:
        assert call_scope() == "anyio's"
    finally:
        sniffio.thread_local.name = None
    assert made == ["anyio", "anyio"]


def test_another_loop_is_taught_again() -> None:
    kinds: list[type] = []

    async def one() -> None:
        kinds.append(type(call_scope()))
        assert _scope._known is not None
        kinds.append(type(call_scope()))

    anyio.run(one)
    first_loop = _scope._known
    anyio.run(one)
    assert _scope._known is not first_loop  # the second loop's, learnt through anyio
    assert len(set(kinds)) == 1
