"""What a workflow gives the engine it holds besides its I/O: a clock,
ids, a logger and a backoff jitter that a replay gives again the same way
(docs/temporal.md, "The table inside the workflow")."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ..engine import RetryPolicy

__all__ = ["Clock", "Quiet", "deterministic", "new_id"]


class Clock:
    """The workflow's clock: replayed, never read from the machine.

    ``pinned``: a time the engine reads instead, while it takes a step whose
    event another activity has kept already with that time (the LLM
    activity's ``stream_started``): the step's commit then writes the very
    row the event log holds."""

    def __init__(self) -> None:
        self.pinned: float | None = None

    def time(self) -> float:
        if self.pinned is not None:
            return self.pinned
        return workflow.now().timestamp()

    async def sleep(self, seconds: float) -> None:
        timer = asyncio.ensure_future(workflow.sleep(seconds))  # a durable timer
        try:
            await asyncio.shield(timer)  # (shielded, as the workflow awaits its activities)
        except asyncio.CancelledError:
            timer.cancel()
            raise


def new_id() -> str:
    return workflow.uuid4().hex


class Quiet:
    """No logging from inside the workflow: its code runs again on every replay."""

    def bind(self, **_: Any) -> Quiet:
        return self

    def debug(self, *_: Any, **__: Any) -> None:
        return None

    info = warning = error = debug


def deterministic(policy: RetryPolicy) -> RetryPolicy:
    """The policy with its jitter drawn from ``workflow.random()``: tenacity's
    ``wait_random_exponential`` (the default) draws from the process's
    ``random``, which a replay would not draw again the same way."""
    wait = policy.wait
    if type(wait).__name__ != "wait_random_exponential":
        return policy
    exponential = type(wait).__mro__[1]  # tenacity's wait_exponential

    def jittered(state: Any) -> float:
        high = float(exponential.__call__(wait, state))
        return workflow.random().uniform(float(getattr(wait, "min", 0.0)), high)

    return dataclasses.replace(policy, wait=jittered)  # type: ignore[arg-type]
