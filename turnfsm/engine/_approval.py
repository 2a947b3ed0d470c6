"""The approval policy applied to an answer's tool calls, and what makes a call a
question to the user, as pure functions."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from ..errors import QuestionNeedsAnswer
from ..model import ApprovalStatus, InternalMessage, MessageType, ToolCallRequest
from ..tools import Approval, AskedQuestion, QuestionTool, ToolRegistry
from ._turn import Question

__all__ = [
    "DECLINED",
    "as_question",
    "asked",
    "checked_decisions",
    "policy_decisions",
    "questions_of",
]

# The statuses and verdict every policy decision reads, as module constants: on
# Python 3.11 reading a member off its enum class goes through
# ``EnumType.__getattr__``'s slow lookup.
_PENDING = ApprovalStatus.PENDING
_APPROVED = ApprovalStatus.APPROVED
_AUTO = Approval.AUTO

DECLINED = "the user declined to answer"
"""The reason of a question denied without one (its result says it)."""


def policy_decisions(
    calls: Sequence[ToolCallRequest], tools: ToolRegistry
) -> tuple[dict[str, tuple[ApprovalStatus, str, str | None]], bool]:
    """The decisions the policy makes on the undecided ``calls``, and whether
    some call is left for a human.

    A call to a tool that is not registered is let through (by policy) to get
    its "unknown tool" result; a call whose arguments are unusable is let
    through by the system (``decided_by="system"``), not by the tool's policy,
    to get its "invalid arguments" result. Neither runs anything. A question
    (a call to a question tool whose arguments are a valid question) always
    waits for the human, whatever the tool's policy.
    """
    decisions: dict[str, tuple[ApprovalStatus, str, str | None]] = {}
    needs_human = False
    for c in calls:
        if c.approval_status is not _PENDING:
            continue
        tool = tools.get(c.tool_name)
        if tool is not None and c.raw_arguments is not None:
            # not the policy's call: it cannot run, and its result says why
            decisions[c.id] = (ApprovalStatus.APPROVED, "system", "invalid arguments")
            continue
        if isinstance(tool, QuestionTool):
            if tool.ask(c) is None:
                decisions[c.id] = (ApprovalStatus.APPROVED, "system", "invalid arguments")
            else:
                needs_human = True
            continue
        verdict = _AUTO if tool is None else tool.decide(c)
        if verdict is _AUTO:
            decisions[c.id] = (_APPROVED, "policy", None)
        elif verdict is Approval.DENY:
            decisions[c.id] = (ApprovalStatus.DENIED, "policy", "denied by policy")
        else:
            needs_human = True
    return decisions, needs_human


# ---------------------------------------------------------------------- questions


def asked(tools: ToolRegistry, call: ToolCallRequest) -> AskedQuestion | None:
    """The question ``call`` asks: ``None`` unless it calls a question tool of
    ``tools`` with valid arguments."""
    tool = tools.get(call.tool_name)
    return tool.ask(call) if isinstance(tool, QuestionTool) else None


def questions_of(tools: ToolRegistry, calls: Sequence[ToolCallRequest]) -> tuple[Question, ...]:
    """The questions among ``calls``, in order."""
    if not tools.asks:  # no question tool: every rest for a human asks this
        return ()
    out: list[Question] = []
    for c in calls:
        q = asked(tools, c)
        if q is not None:
            out.append(Question(c.id, c.tool_name, q.question, q.choices))
    return tuple(out)


def as_question(message: InternalMessage, tools: ToolRegistry) -> InternalMessage:
    """``message`` with type ``Question`` when every call it makes is a question
    (a mix of questions and other calls stays ``ToolCall``)."""
    calls = message.tool_calls
    if not calls:
        return message
    for c in calls:
        if asked(tools, c) is None:
            return message
    return dataclasses.replace(message, message_type=MessageType.QUESTION)


def checked_decisions(
    context_id: str,
    tools: ToolRegistry,
    pending: Mapping[str, ToolCallRequest],
    decisions: Mapping[str, tuple[ApprovalStatus, str | None]],
) -> dict[str, tuple[ApprovalStatus, str | None]]:
    """A human's ``decisions`` on ``pending`` calls, checked for questions: approving
    one raises :class:`~turnfsm.errors.QuestionNeedsAnswer` (nothing is changed);
    denying one without a reason gives it the reason :data:`DECLINED`."""
    if not tools.asks:  # no question tool: the decisions stand as they are
        return dict(decisions)
    out = dict(decisions)
    for cid, (status, reason) in decisions.items():
        call = pending[cid]
        if not isinstance(tools.get(call.tool_name), QuestionTool):
            continue
        if status is ApprovalStatus.APPROVED:
            raise QuestionNeedsAnswer(context_id, cid)
        if reason is None:
            out[cid] = (status, DECLINED)
    return out
