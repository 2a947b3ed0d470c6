"""The ``backoff`` effect (TransientFailure): wait out the retry delay, then
``retry``, or ``give_up`` once the attempts are exhausted.

When to back off is decided by pure functions of data: :func:`failure_edge`
(which failure edge an LLM error takes, and whether a retry will follow) and
:func:`after_backoff` (at the end of TransientFailure: ``retry`` after how
long, or ``give_up``). The effect only sleeps and applies what they say.
"""

from __future__ import annotations

import dataclasses

from ..states import Trigger
from . import _steps
from ._host import Host
from ._runtime import Runtime
from ._turn import StopReason

__all__ = ["after_backoff", "backoff", "failure_edge"]


def failure_edge(transient: bool, attempt: int, max_attempts: int) -> tuple[Trigger, bool]:
    """The edge a failed LLM attempt takes, and whether it will be retried:
    a permanent failure ends the turn; a transient one enters TransientFailure,
    to be retried while ``attempt`` (this one, from 1) is below ``max_attempts``."""
    if not transient:
        return Trigger.LLM_FAILED_PERMANENT, False
    return Trigger.LLM_FAILED_TRANSIENT, attempt < max_attempts


def after_backoff(
    attempt: int, max_attempts: int, retry_at: float | None, now: float
) -> tuple[Trigger, float]:
    """TransientFailure's way out: ``give_up`` when the attempts are exhausted
    (or no retry was planned), else ``retry`` after the seconds left until
    ``retry_at`` (0 when it has passed, after a resume say)."""
    if attempt >= max_attempts or retry_at is None:
        return Trigger.GIVE_UP, 0.0
    return Trigger.RETRY, max(retry_at - now, 0.0)


async def backoff(d: Host, rt: Runtime) -> None:
    """TransientFailure: wait out the delay and ``retry``, or ``give_up``."""
    ctx = rt.ctx
    p = ctx.progress
    s = d.settings
    trigger, wait = after_backoff(
        p.attempt, s.retry_policy.max_attempts, p.retry_at, s.clock.time()
    )
    if trigger is Trigger.GIVE_UP:
        rt.stop_reason = StopReason.FAILED
        ctx.progress = dataclasses.replace(p, retry_at=None)
        _steps.fire(rt, Trigger.GIVE_UP)
        _steps.failed(rt, p.last_error or "attempts exhausted", "")
        _steps.end_turn(rt)
        return
    if wait > 0:
        await s.clock.sleep(wait)
    ctx.progress = dataclasses.replace(p, attempt=p.attempt + 1, retry_at=None)
    _steps.fire(rt, Trigger.RETRY)
