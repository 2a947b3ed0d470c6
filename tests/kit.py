"""The one way the engine suites make a deterministic engine.

``make_engine(answers)`` is an :class:`~turnfsm.Engine` on a
:class:`~turnfsm.testing.ScriptedLLM` of those answers (or the ``llm`` given),
a :class:`~turnfsm.testing.FakeClock` and sequential ids, with whatever other
``Engine`` arguments are passed; it returns the engine, the LLM and the clock.
A suite that always wants the same tools binds them once::

    make_engine = functools.partial(kit.make_engine, tools=[book, lookup])

``wait_ready(url)`` is the one way a test waits for a server it started: it
returns when ``/readyz`` answers 200, whatever the machine's load.

``first_by_default(cases, ids)`` are the cases of a parametrized sweep whose
cases are long (each starts ``turnfsm`` again, or is a seed of a random
sweep): the first runs in the README's test command, the others only with
``-m sweep`` (CI's step of its own).

``skip_without(name)`` skips a test module when an optional dependency is
not installed, without importing it as ``pytest.importorskip`` would: the
server's stack is a second of CPU, which every xdist worker would pay at
collection whether or not it runs a test that needs it.

``examples(n)`` is how many examples a property test draws: a fifth of ``n``
(at least ten) in the README's test command, where each property shows it
holds on a sample, and all ``n`` with ``TURNFSM_EXAMPLES=full``, which CI sets
in a step of its own for the hypothesis tests (``-m hypothesis``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from turnfsm import Engine
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

__all__ = [
    "READY_WITHIN",
    "SWEEP",
    "Made",
    "examples",
    "first_by_default",
    "make_engine",
    "skip_without",
    "wait_ready",
]

READY_WITHIN = 300.0
"""Seconds a server may take to get ready before a test gives up: a bound
against a server that never comes up, not a measure of how fast it starts."""


def skip_without(name: str, reason: str | None = None) -> None:
    """Skip the calling module (at its top level) when ``name`` cannot be
    found; found, it is imported only where a test uses it."""
    if importlib.util.find_spec(name) is None:
        pytest.skip(reason or f"could not import {name!r}", allow_module_level=True)


FULL_EXAMPLES = os.environ.get("TURNFSM_EXAMPLES") == "full"


def examples(full: int) -> int:
    """``full`` under ``TURNFSM_EXAMPLES=full``, else a fifth of it (at least ten)."""
    return full if FULL_EXAMPLES else min(full, max(10, full // 5))


SWEEP = pytest.mark.sweep


def first_by_default(cases: Iterable[Any], ids: Iterable[str]) -> list[Any]:
    """The first case by default, every case with ``-m sweep``; a tuple is
    the values of several argument names."""
    return [
        pytest.param(
            *(case if isinstance(case, tuple) else (case,)),
            id=name,
            marks=() if n == 0 else SWEEP,
        )
        for n, (case, name) in enumerate(zip(cases, ids, strict=True))
    ]


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


def wait_ready(
    url: str,
    *,
    process: subprocess.Popen[Any] | None = None,
    log: Path | Callable[[], str] | None = None,
    path: str = "/readyz",
    within: float = READY_WITHIN,
) -> None:
    """Return once ``url + path`` answers 200: the server is up and ready.

    A refused connection is tried again a moment later; a server that accepts
    the connection is given all the time left to answer, so a loaded machine
    makes this slower, never wrong. ``process`` (the server's, when the test
    started one) must stay alive meanwhile; ``log`` (a file, or a function
    giving text) is shown when it dies or the server never gets ready."""

    def said() -> str:
        if log is None:
            return ""
        return log() if callable(log) else log.read_text(errors="replace")

    last = "no answer"
    # one client for every try, as each new client (httpx.get makes one) loads
    # the system's CA certificates again, which cost more CPU than the server's
    # start while a loaded machine keeps the test polling; the bound starts once
    # it is made, so a short one still gets a try on a loaded machine
    with httpx.Client() as client:
        deadline = time.monotonic() + within
        while True:
            if process is not None and process.poll() is not None:
                raise AssertionError(f"the server exited ({process.returncode}):\n{said()}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{url}{path} not ready in {within:g} s ({last}):\n{said()}")
            try:
                answer = client.get(url + path, timeout=left)
            except httpx.TransportError as exc:
                last = repr(exc)
            else:
                if answer.status_code == 200:
                    return
                last = f"{answer.status_code} {answer.text[:200]}"
            time.sleep(0.05)
