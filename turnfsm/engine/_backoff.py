"""The ``backoff`` effect (TransientFailure): wait out the retry delay, then
``retry``, or ``give_up`` once the attempts are exhausted."""

from __future__ import annotations

from ..states import Trigger
from ._host import Host
from ._runtime import Runtime
from ._turn import StopReason

__all__ = ["backoff"]


async def backoff(d: Host, rt: Runtime) -> None:
    """TransientFailure: wait out the delay and ``retry``, or ``give_up``."""
    ctx = rt.ctx
    p = ctx.progress
    if p.attempt >= d.settings.retry_policy.max_attempts or p.retry_at is None:
        rt.stop_reason = StopReason.FAILED
        ctx.progress = p.model_copy(update={"retry_at": None})
        d.fire(rt, Trigger.GIVE_UP)
        d.failed(rt, p.last_error or "attempts exhausted", "")
        d.end_turn(rt)
        return
    wait = p.retry_at - d.settings.clock.time()
    if wait > 0:
        await d.settings.clock.sleep(wait)
    ctx.progress = p.model_copy(update={"attempt": p.attempt + 1, "retry_at": None})
    d.fire(rt, Trigger.RETRY)
