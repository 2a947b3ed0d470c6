"""The ``prepare`` effect (ProcessingUserMessage): run the enhancers and build
the request; ``prompt_ready``, or ``prepare_failed`` when an enhancer raises."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..enhancers import TokenBudget
from ..errors import EnhancerError
from ..model import LLMRequest
from ..states import Trigger
from ._runtime import Runtime
from ._turn import StopReason

if TYPE_CHECKING:
    from ._drive import Driver

__all__ = ["ViewPlan", "build_request", "prepare"]


@dataclass(slots=True)
class ViewPlan:
    """What the engine does to the history before the enhancers see it.

    ``budget``: the engine's token budget (:class:`TokenBudget`, run last as an
    enhancer); before the enhancers run, its :meth:`~TokenBudget.window` cuts the
    turns it would drop anyway, counting each message at its ``shrink`` form
    (what the tool history enhancer may make of it), so that preparing a
    request costs the same however long the history is.
    """

    budget: TokenBudget | None = None
    shrink: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def build_request(d: Driver, rt: Runtime) -> LLMRequest:
    """The request for the next LLM call: the history in chat format, passed
    through every enhancer (EnhancerError when one raises, or
    :class:`~turnfsm.engine._modes.UnknownMode` when the engine does not know
    the context's mode)."""
    ctx = rt.ctx
    d.modes.require(ctx)
    p = ctx.progress
    messages = rt.chat
    plan = d.view_plan
    start = 0
    if plan.budget is not None:
        try:
            start = plan.budget.window(messages, ctx, plan.shrink)
        except Exception as exc:
            raise EnhancerError(type(plan.budget).__name__, exc) from exc
        if start:
            messages = messages[start:]
    request = LLMRequest(
        context_id=ctx.id,
        model=ctx.config.model_id,
        messages=messages,
        parameters=ctx.config.parameters,
        attempt=p.attempt,
        iteration=p.iteration,
        request_cancel=rt.request_cancel,
    )
    if start:
        request.metadata["token_budget"] = {"dropped_messages": start}
    copied = False
    for i, enhancer in enumerate(d.enhancers):
        if not copied and i == d.builtin_count:
            # the built-in enhancers never change the list they are given; from
            # here on, the request must own its list (the engine keeps appending
            # to rt.chat, and an adapter may keep the request)
            if request.messages is rt.chat:
                request.messages = list(rt.chat)
            copied = True
        try:
            request = enhancer.enhance(request, ctx)
        except Exception as exc:
            raise EnhancerError(type(enhancer).__name__, exc) from exc
    if request.messages is rt.chat:
        request.messages = list(rt.chat)
    return request


async def prepare(d: Driver, rt: Runtime) -> None:
    """ProcessingUserMessage: run the enhancers; ``prompt_ready`` or ``prepare_failed``."""
    try:
        rt.request = build_request(d, rt)
    except EnhancerError as exc:
        rt.ctx.progress = rt.ctx.progress.model_copy(update={"last_error": str(exc)})
        rt.stop_reason = StopReason.FAILED
        rt.log.warning("prepare_failed", error=str(exc))
        d.fire(rt, Trigger.PREPARE_FAILED)
        d.failed(rt, str(exc), "")
        d.end_turn(rt)
        return
    d.fire(rt, Trigger.PROMPT_READY)
