"""The ``backoff`` effect (TransientFailure): wait out the retry delay, then
``retry``, or ``give_up`` once the attempts are exhausted."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..states import Trigger
from ._runtime import Runtime
from ._turn import StopReason

if TYPE_CHECKING:
    from ._drive import Driver

__all__ = ["backoff"]


async def backoff(d: Driver, rt: Runtime) -> None:
    """TransientFailure: wait out the delay and ``retry``, or ``give_up``."""
    ctx = rt.ctx
    p = ctx.progress
    if p.attempt >= d.retry_policy.max_attempts or p.retry_at is None:
        rt.stop_reason = StopReason.FAILED
        ctx.progress = dataclasses.replace(p, retry_at=None)
        d.fire(rt, Trigger.GIVE_UP)
        d.failed(rt, p.last_error or "attempts exhausted", "")
        d.end_turn(rt)
        return
    wait = p.retry_at - d.clock.time()
    if wait > 0:
        await d.clock.sleep(wait)
    ctx.progress = dataclasses.replace(p, attempt=p.attempt + 1, retry_at=None)
    d.fire(rt, Trigger.RETRY)
