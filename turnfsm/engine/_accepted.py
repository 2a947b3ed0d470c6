"""A call handed to another host says when that host accepted it.

An engine that runs its turns elsewhere (``turnfsm.temporal.TemporalEngine``:
a Temporal Update) calls :func:`accepted` once the other host has taken the
call, long before the turn rests. Whoever runs the call and answers before the
turn ends (``turnfsm serve``'s ``202``) sets :data:`ON_ACCEPTED` for the
task that makes the call. An in-process engine never calls it: its first step
says the same.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

__all__ = ["ON_ACCEPTED", "accepted"]

ON_ACCEPTED: ContextVar[Callable[[], None] | None] = ContextVar("turnfsm_on_accepted", default=None)
"""What to call once the call the current task makes has been accepted."""


def accepted() -> None:
    """The call the current task makes was accepted by the host that runs it."""
    hook = ON_ACCEPTED.get()
    if hook is not None:
        hook()
