"""The one way the engine suites make a deterministic engine.

``make_engine(answers)`` is an :class:`~turnfsm.Engine` on a
:class:`~turnfsm.testing.ScriptedLLM` of those answers (or the ``llm`` given),
a :class:`~turnfsm.testing.FakeClock` and sequential ids, with whatever other
``Engine`` arguments are passed; it returns the engine, the LLM and the clock.
A suite that always wants the same tools binds them once::

    make_engine = functools.partial(kit.make_engine, tools=[book, lookup])
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from turnfsm import Engine
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

__all__ = ["Made", "make_engine"]


class Made(NamedTuple):
    engine: Engine
    llm: Any
    clock: FakeClock


def make_engine(
    answers: Any = None,
    *,
    llm: Any = None,
    tools: Iterable[Any] = (),
    clock: FakeClock | None = None,
    **kwargs: Any,
) -> Made:
    if llm is None:
        llm = ScriptedLLM([] if answers is None else answers)
    clock = clock or FakeClock()
    engine = Engine(llm=llm, tools=tools, clock=clock, ids=SequentialIds(), **kwargs)
    return Made(engine, llm, clock)
