"""The ``decide`` effect (ProcessingLLMResponse): a text answer ends the turn;
tool calls are decided by policy (``tools_decided``) or left to a human
(``needs_approval``). A question to the user always waits for the human."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..events import QuestionAsked, ToolApprovalRequested
from ..model import ApprovalStatus
from ..states import Trigger
from ..tools import ToolOutcome
from . import _history
from ._approval import policy_decisions, questions_of
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
    answer = rt.answer
    rt.answer = None
    if not calls:
        if answer is None:  # resumed: the newest message is the stored answer
            ids = ctx.active_branch.message_ids
            answer = ctx.message_pool[ids[-1]] if ids else None
        outcome = answer.message.outcome if answer is not None else None
        rt.stop_reason = StopReason(outcome) if outcome else StopReason.COMPLETED
        d.fire(rt, Trigger.TURN_COMPLETE)
        d.end_turn(rt)
        return
    assert node is not None
    cut = node.message.outcome
    if cut is not None:  # an answer that did not end normally: its calls never run
        _history.set_decisions(rt, {c.id: (ApprovalStatus.DENIED, "system", cut) for c in calls})
        text = f"not executed: the answer did not end normally ({cut}); the call may be incomplete"
        d.add_results(
            rt, calls, [ToolOutcome(False, {"error": text, "status": cut}) for _ in calls]
        )
        rt.stop_reason = StopReason(cut)
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
    # the mode's view: its approval overrides; a tool it does not offer is unknown
    decisions, needs_human = policy_decisions(calls, d.offered(ctx))
    if decisions:
        _history.set_decisions(rt, decisions)
    if needs_human:
        rt.stop_reason = StopReason.AWAITING_APPROVAL
        d.fire(rt, Trigger.NEEDS_APPROVAL)
        _announce(d, rt)
        d.end_turn(rt)
        return
    mark_started(rt)
    d.fire(rt, Trigger.TOOLS_DECIDED)


def _announce(d: Driver, rt: Runtime) -> None:
    """What waits for the human: the calls to approve or deny (one
    ``ToolApprovalRequested``, when there are some), then each question (a
    ``QuestionAsked``)."""
    pending = rt.ctx.pending_tool_calls()
    questions = questions_of(d.tools, pending)
    asked = {q.call_id for q in questions}
    approvals = [c for c in pending if c.id not in asked]
    if approvals:
        d.later(rt, ToolApprovalRequested, calls=approvals)
    for q in questions:
        d.later(
            rt,
            QuestionAsked,
            call_id=q.call_id,
            tool_name=q.tool_name,
            question=q.question,
            choices=list(q.choices),
        )


def mark_started(rt: Runtime) -> None:
    """Record the approved calls as started, in the commit that enters
    ExecutingTools: the attempt is durable before any tool runs. (A crash
    between that commit and the run sends non-idempotent calls to a human,
    which is the safe side.)"""
    ctx = rt.ctx
    ids = tuple(c.id for c in ctx.open_tool_calls() if c.approval_status is ApprovalStatus.APPROVED)
    ctx.progress = dataclasses.replace(ctx.progress, started_call_ids=ids)
