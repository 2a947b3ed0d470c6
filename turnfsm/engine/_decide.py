"""The ``decide`` effect (ProcessingLLMResponse): a text answer ends the turn;
tool calls are decided by policy (``tools_decided``) or left to a human
(``needs_approval``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..events import ToolApprovalRequested
from ..model import ApprovalStatus
from ..states import Trigger
from ..tools import ToolOutcome
from . import _history
from ._allowed import usable_tools
from ._approval import policy_decisions
from ._runtime import Runtime
from ._turn import StopReason

if TYPE_CHECKING:
    from ._drive import Driver

__all__ = ["decide", "mark_started"]


async def decide(d: Driver, rt: Runtime) -> None:
    """ProcessingLLMResponse: text ends the turn; tool calls are decided by policy
    (see :func:`~turnfsm.engine._approval.policy_decisions`)."""
    ctx = rt.ctx
    node = rt.answer
    if node is None or node.id not in ctx.message_pool:  # resumed: the stored answer
        batch = ctx.last_tool_batch()
        node = batch[0] if batch else None
    calls = ctx.open_tool_calls() if node is not None else []
    rt.answer = None
    if not calls:
        rt.stop_reason = StopReason.COMPLETED
        d.fire(rt, Trigger.TURN_COMPLETE)
        d.end_turn(rt)
        return
    if ctx.progress.iteration >= d.max_iterations:
        _history.set_decisions(
            rt, {c.id: (ApprovalStatus.DENIED, "system", "max_iterations") for c in calls}
        )
        text = (
            f"not executed: the limit of {d.max_iterations} LLM calls for one "
            "user message was reached"
        )
        d.add_results(
            rt,
            calls,
            [ToolOutcome(False, {"error": text, "status": "max_iterations"}) for _ in calls],
        )
        rt.stop_reason = StopReason.MAX_ITERATIONS
        d.fire(rt, Trigger.TURN_COMPLETE)
        d.end_turn(rt)
        return
    decisions, needs_human = policy_decisions(calls, usable_tools(d.tools, ctx.config))
    if decisions:
        _history.set_decisions(rt, decisions)
    if needs_human:
        rt.stop_reason = StopReason.AWAITING_APPROVAL
        d.fire(rt, Trigger.NEEDS_APPROVAL)
        d.later(rt, ToolApprovalRequested, calls=ctx.pending_tool_calls())
        d.end_turn(rt)
        return
    mark_started(rt)
    d.fire(rt, Trigger.TOOLS_DECIDED)


def mark_started(rt: Runtime) -> None:
    """Record the approved calls as started, in the commit that enters
    ExecutingTools: the attempt is durable before any tool runs. (A crash
    between that commit and the run sends non-idempotent calls to a human,
    which is the safe side.)"""
    ctx = rt.ctx
    ids = tuple(c.id for c in ctx.open_tool_calls() if c.approval_status is ApprovalStatus.APPROVED)
    ctx.progress = ctx.progress.model_copy(update={"started_call_ids": ids})
