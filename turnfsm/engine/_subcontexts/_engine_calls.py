"""The engine's own public calls that sub-context work makes on a child or
its parent (:class:`EngineCalls`), handed in by the engine when it is made.

They go through the engine's methods, not around them, so that an engine
whose children run elsewhere (a Temporal workflow's, whose turn calls send a
child's calls to the child's workflow) has its way with every one of them.
Each is read from the engine when it is called: the engine makes its parts
after this, and its methods are theirs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from ...model import ChatContext, ContentPart
from .._turn import Turn

__all__ = ["EngineCalls"]

_C = TypeVar("_C")


class _OfEngine(Generic[_C]):
    """The engine's method of the same name, read when it is called."""

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    def __get__(self, calls: EngineCalls, owner: type[Any] | None = None) -> _C:
        method: _C = getattr(calls.engine, self.name)
        return method


class EngineCalls:
    """The calls of one :class:`~turnfsm.Engine` (see the module's docstring)."""

    __slots__ = ("engine",)

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        """The engine itself: what a summarizer is given."""

    get_context: _OfEngine[Callable[[str], Awaitable[ChatContext]]] = _OfEngine()
    send: _OfEngine[Callable[[str, Sequence[ContentPart]], Awaitable[Turn]]] = _OfEngine()
    resume: _OfEngine[Callable[[str], Awaitable[Turn]]] = _OfEngine()
    approve: _OfEngine[Callable[[str, Sequence[str]], Awaitable[Turn]]] = _OfEngine()
    deny: _OfEngine[Callable[[str, Sequence[str], str | None], Awaitable[Turn]]] = _OfEngine()
    answer: _OfEngine[Callable[[str, str, str], Awaitable[Turn]]] = _OfEngine()
    delete_context: _OfEngine[Callable[[str], Awaitable[list[str]]]] = _OfEngine()
