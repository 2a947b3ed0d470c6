"""A public method of the engine that one of its parts answers, written once:
``approve = delegate("_turns", TurnCalls.approve)``.

The part's method is the one place its signature, checks and docstring are
written. Read on an engine, the attribute is the part's bound method itself,
kept on the engine from the first read on, so a call runs no
forwarding frame and type checkers see the part's parameters. Read on the
class, it is the descriptor, which ``help()`` and ``inspect.signature`` read
as the part's function (its ``__wrapped__``). An engine that hands a call to
another part (a Temporal engine's turn calls) is made with a different part,
not a different method.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

__all__ = ["Delegate", "delegate"]

P = ParamSpec("P")
R = TypeVar("R")


class Delegate(Generic[P, R]):
    """The descriptor :func:`delegate` makes (see the module)."""

    def __init__(self, part: str, method: Callable[Concatenate[Any, P], R]) -> None:
        functools.update_wrapper(self, method)
        self.part = part
        self.name: str = method.__name__

    def __set_name__(self, owner: type[Any], name: str) -> None:
        if name != self.name:  # one name for one call, on the engine and on its part
            raise TypeError(f"{owner.__name__}.{name} delegates to a method named {self.name}")
        self.__module__ = owner.__module__
        self.__qualname__ = f"{owner.__qualname__}.{name}"

    @overload
    def __get__(self, engine: None, owner: type[Any] | None = None) -> Self: ...

    @overload
    def __get__(self, engine: object, owner: type[Any] | None = None) -> Callable[P, R]: ...

    def __get__(self, engine: object, owner: type[Any] | None = None) -> Any:
        if engine is None:
            return self
        method = getattr(getattr(engine, self.part), self.name)
        # kept on the engine: the next read finds it there, and this runs no more
        # (an engine's parts are made with it and stay)
        setattr(engine, self.name, method)
        return method

    def __call__(self, engine: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        """``Engine.approve(engine, ...)``, as a plain method is called."""
        method: Callable[P, R] = getattr(getattr(engine, self.part), self.name)
        return method(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<delegate {self.__qualname__} to {self.part}.{self.name}>"


def delegate(part: str, method: Callable[Concatenate[Any, P], R]) -> Delegate[P, R]:
    """The engine's method of ``method``'s name, answered by its part in the
    attribute ``part`` (see the module)."""
    return Delegate(part, method)
