"""The approval policy applied to an answer's tool calls, as a pure function."""

from __future__ import annotations

from collections.abc import Sequence

from ..model import ApprovalStatus, ToolCallRequest
from ..tools import Approval, ToolRegistry

__all__ = ["policy_decisions"]


def policy_decisions(
    calls: Sequence[ToolCallRequest], tools: ToolRegistry
) -> tuple[dict[str, tuple[ApprovalStatus, str, str | None]], bool]:
    """The decisions the policy makes on the undecided ``calls``, and whether
    some call is left for a human.

    A call to a tool that is not registered is let through (by policy) to get
    its "unknown tool" result; a call whose arguments are unusable is let
    through by the system (``decided_by="system"``), not by the tool's policy,
    to get its "invalid arguments" result. Neither runs anything.
    """
    decisions: dict[str, tuple[ApprovalStatus, str, str | None]] = {}
    needs_human = False
    for c in calls:
        if c.approval_status is not ApprovalStatus.PENDING:
            continue
        tool = tools.get(c.tool_name)
        if tool is not None and c.raw_arguments is not None:
            # not the policy's call: it cannot run, and its result says why
            decisions[c.id] = (ApprovalStatus.APPROVED, "system", "invalid arguments")
            continue
        verdict = Approval.AUTO if tool is None else tool.decide(c)
        if verdict is Approval.AUTO:
            decisions[c.id] = (ApprovalStatus.APPROVED, "policy", None)
        elif verdict is Approval.DENY:
            decisions[c.id] = (ApprovalStatus.DENIED, "policy", "denied by policy")
        else:
            needs_human = True
    return decisions, needs_human
