"""The ``decide`` effect (ProcessingLLMResponse): a text answer ends the turn
(a typed one once it validates: ``_typed``);
tool calls are decided by policy (``tools_decided``) or left to a human
(``needs_approval``). A question to the user always waits for the human. A
turn stopped by the iteration limit stores a notice saying so, in the commit
that ends the turn."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..events import MessageCompleted, QuestionAsked, ToolApprovalRequested
from ..model import (
    NOTICE_KEY,
    ApprovalStatus,
    InternalMessage,
    MessageMetadata,
    MessageNode,
    Role,
    TextPart,
    ToolCallRequest,
)
from ..states import Trigger
from ..tools import ToolOutcome, ToolRegistry
from . import _history, _steps
from ._approval import policy_decisions, questions_of
from ._client_view import client_decisions, is_client_call
from ._history import Decisions
from ._host import Host
from ._runtime import Runtime
from ._turn import StopReason
from ._typed import check_answer

__all__ = [
    "LIMIT_NOTICE",
    "Decision",
    "decide",
    "decide_answer",
    "limit_notice",
    "mark_started",
    "validates",
]

# The members every decision reads, as module constants: on Python 3.11 reading
# a member off its enum class goes through ``EnumType.__getattr__``'s slow
# lookup, and every answer of every turn is decided here.
_TURN_COMPLETE = Trigger.TURN_COMPLETE
_TOOLS_DECIDED = Trigger.TOOLS_DECIDED
_NEEDS_APPROVAL = Trigger.NEEDS_APPROVAL
_COMPLETED = StopReason.COMPLETED
_MAX_ITERATIONS = StopReason.MAX_ITERATIONS
_AWAITING_APPROVAL = StopReason.AWAITING_APPROVAL
_APPROVED = ApprovalStatus.APPROVED
_PENDING = ApprovalStatus.PENDING

_NO_TOOLS = ToolRegistry(())
"""What :func:`decide` gives :func:`decide_answer` for an answer without calls."""

LIMIT_NOTICE = "max_iterations"
"""``metadata.extra["notice"]`` of the notice a turn stopped by the iteration limit stores."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What an answer means: the edge to take and what goes with it."""

    trigger: Trigger
    """``turn_complete``, ``needs_approval`` or ``tools_decided``."""
    stop_reason: StopReason | None
    """How the turn stops (None: it goes on, to the tools)."""
    decisions: Decisions
    """Approval decisions to record on the answer's calls (per call id)."""
    results: tuple[ToolOutcome, ...] = ()
    """One result per call, in order, when the calls will not run (the
    answer was cut, or the iteration limit was reached); else empty."""


class _OpenDecision:
    """Decision's slots, without its frozen ``__setattr__`` (see :func:`_decision`)."""

    __slots__ = ("decisions", "results", "stop_reason", "trigger")
    trigger: Trigger
    stop_reason: StopReason | None
    decisions: Decisions
    results: tuple[ToolOutcome, ...]


_new = object.__new__


def _decision(trigger: Trigger, stop_reason: StopReason | None, decisions: Decisions) -> Decision:
    """``Decision(trigger, stop_reason, decisions)``, the same record, made with
    plain slot writes as ``storage._base.step_log`` makes its records: every
    answer is decided, and a frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__`` (``tests/test_open_records.py`` holds the
    two to the same record)."""
    d = _new(_OpenDecision)
    d.trigger = trigger
    d.stop_reason = stop_reason
    d.decisions = decisions
    d.results = ()
    # laid out as a Decision (the same slots), it becomes one
    d.__class__ = Decision  # type: ignore[assignment]
    return d  # type: ignore[return-value]


def decide_answer(
    calls: Sequence[ToolCallRequest],
    outcome: str | None,
    iteration: int,
    max_iterations: int,
    offered: ToolRegistry,
    client: Decisions | None = None,
) -> Decision:
    """ProcessingLLMResponse, as a pure function: ``calls`` are the answer's open
    calls, ``outcome`` how it ended when not normally (``length``,
    ``refusal``, ...), ``iteration`` the LLM calls made for this user message,
    ``offered`` the tools the context's mode offers with their approval.

    No calls: ``turn_complete`` (stop reason: the outcome, else ``completed``).
    An answer that did not end normally: its calls never run (denied by the
    system, each with a result saying why), ``turn_complete``. The last
    allowed LLM call: likewise, with ``max_iterations``. Else the policy
    decides (:func:`~turnfsm.engine._approval.policy_decisions`):
    ``needs_approval`` when some call is left for a human, else
    ``tools_decided``. ``client`` are the decisions that hand calls of
    client tools to the client (:func:`~turnfsm.engine._client_tools.client_decisions`):
    when every open call is one, ``client_calls``; else the others are
    decided, and the client's wait until they have run.
    """
    if not calls:
        stop = StopReason(outcome) if outcome else _COMPLETED
        return _decision(_TURN_COMPLETE, stop, {})
    if outcome is not None:  # an answer that did not end normally: its calls never run
        text = (
            f"not executed: the answer did not end normally ({outcome}); the call may be incomplete"
        )
        return Decision(
            Trigger.TURN_COMPLETE,
            StopReason(outcome),
            {c.id: (ApprovalStatus.DENIED, "system", outcome) for c in calls},
            tuple(ToolOutcome(False, {"error": text, "status": outcome}) for _ in calls),
        )
    if iteration >= max_iterations:
        text = (
            f"not executed: the limit of {max_iterations} LLM calls for one "
            "user message was reached"
        )
        return Decision(
            Trigger.TURN_COMPLETE,
            StopReason.MAX_ITERATIONS,
            {c.id: (ApprovalStatus.DENIED, "system", "max_iterations") for c in calls},
            tuple(ToolOutcome(False, {"error": text, "status": "max_iterations"}) for _ in calls),
        )
    if client:
        if all(c.id in client for c in calls):
            return Decision(Trigger.CLIENT_CALLS, StopReason.CLIENT_TOOLS, dict(client))
        calls = [c for c in calls if c.id not in client]
    # the mode's view: its approval overrides; a tool it does not offer is unknown
    decisions, needs_human = policy_decisions(calls, offered)
    if client:
        decisions.update(client)
    if needs_human:
        return _decision(_NEEDS_APPROVAL, _AWAITING_APPROVAL, decisions)
    return _decision(_TOOLS_DECIDED, None, decisions)


def _answer(rt: Runtime) -> tuple[list[ToolCallRequest], MessageNode | None]:
    """The answer's open calls, and the answer itself: the one just received,
    or after a resume the stored one (None: no answer)."""
    ctx = rt.ctx
    node = rt.answer
    if node is None or node.id not in ctx.message_pool:  # resumed: the stored answer
        batch = ctx.last_tool_batch()
        node = batch[0] if batch else None
    if node is None:
        calls: list[ToolCallRequest] = []
    elif (
        node is rt.answer
        and ctx.message_pool[node.id] is node
        and ctx.active_branch.message_ids[-1] == node.id
    ):
        # the answer just received is the newest message: its calls are the
        # open ones (what open_tool_calls finds, without scanning for it)
        return list(node.message.tool_calls or ()), node
    else:
        calls = ctx.open_tool_calls()
    if calls:
        return calls, node
    answer = rt.answer
    if answer is None:  # resumed: the newest message is the stored answer
        ids = ctx.active_branch.message_ids
        answer = ctx.message_pool[ids[-1]] if ids else None
    return calls, answer


def validates(rt: Runtime) -> bool:
    """Whether :func:`decide` will run the application's validator on the
    answer (a turn with an output type, an answer without calls that ended
    normally): the drive loop commits the answer first."""
    if rt.ctx.progress.output is None:
        return False
    calls, answer = _answer(rt)
    return not calls and (answer is None or answer.message.outcome is None)


def decide(d: Host, rt: Runtime) -> None:
    """ProcessingLLMResponse: find the answer (the one just received, or after a
    resume the stored one), let :func:`decide_answer` say what it means, and
    take its edge. A plain call: nothing here waits."""
    ctx = rt.ctx
    node = rt.answer
    if (
        node is not None
        and ctx.message_pool.get(node.id) is node
        and ctx.branches[ctx.active_branch_name].message_ids[-1] == node.id
    ):  # the answer just received, the newest message (``_answer``'s first case)
        calls = list(node.message.tool_calls or ())
    else:
        calls, node = _answer(rt)
    rt.answer = None
    outcome = node.message.outcome if node is not None else None
    if not calls:
        output = ctx.progress.output
        if output is not None and outcome is None and check_answer(d, rt, node, output):
            return  # output_invalid or output_failed was taken
    s = d.settings
    decision = decide_answer(
        calls,
        outcome,
        ctx.progress.iteration,
        s.max_iterations,
        # an answer without calls is decided without the tools or the client's
        s.offered(ctx) if calls else _NO_TOOLS,
        client_decisions(calls, ctx) if calls else None,
    )
    decided = calls  # the open calls as they are after the decisions
    if decision.decisions:
        decided = _history.set_decisions(rt, decision.decisions)
    if decision.results:
        _steps.add_results(rt, calls, decision.results)
    if decision.stop_reason is _MAX_ITERATIONS and s.limit_notice:
        message = limit_notice(s.max_iterations, len(calls), d.now(), ctx.progress.iteration)
        node = _history.append(rt, message, s.ids())
        _steps.later(rt, MessageCompleted, message_id=node.id, message=message)
    trigger = decision.trigger
    if trigger is _TOOLS_DECIDED:
        mark_started(rt, decided)
        _steps.fire(rt, trigger)
        return
    rt.stop_reason = decision.stop_reason
    _steps.fire(rt, trigger)
    if trigger is _NEEDS_APPROVAL:
        pending: list[ToolCallRequest] = []  # a loop: no call of its own
        for c in decided:
            if c.approval_status is _PENDING:
                pending.append(c)
        _announce(d, rt, pending)
    _steps.end_turn(rt)


def limit_notice(
    max_iterations: int, not_run: int, now: datetime, iteration: int
) -> InternalMessage:
    """The notice of a turn stopped by the iteration limit: an assistant
    message marked as a notice (``metadata.extra[NOTICE_KEY]``) saying why,
    and that the last answer's ``not_run`` tool calls were not run. Stored
    after their results, it is what the model reads of the stop on the next
    turn (in the assistant's voice, no instruction), and what a reader of the
    history, the web view and the exports see."""
    calls = "tool call was" if not_run == 1 else f"{not_run} tool calls were"
    text = (
        f"Stopped: the limit of {max_iterations} LLM calls for one user message was "
        f"reached; the last answer's {calls} not run. Send a message to go on."
    )
    return InternalMessage(
        role=Role.ASSISTANT,
        content=[TextPart(text=text)],
        metadata=MessageMetadata(
            created_at=now,
            iteration=iteration,
            extra={NOTICE_KEY: LIMIT_NOTICE, "max_iterations": max_iterations},
        ),
    )


def _announce(d: Host, rt: Runtime, pending: list[ToolCallRequest]) -> None:
    """What waits for the human: the ``pending`` calls to approve or deny
    (one ``ToolApprovalRequested``, when there are some), then each question
    (a ``QuestionAsked``)."""
    questions = questions_of(d.settings.tools, pending)
    if not rt.subscribers:  # their seqs only (see ``_steps.later``)
        # each question is one of the pending calls: the others are approvals
        # ``_steps.unheard`` in place, without its frame
        rt.seq += len(questions) + (1 if len(pending) > len(questions) else 0)
        return
    asked = {q.call_id for q in questions}
    approvals = [c for c in pending if c.id not in asked]
    if approvals:
        _steps.later(rt, ToolApprovalRequested, calls=approvals)
    for q in questions:
        _steps.later(
            rt,
            QuestionAsked,
            call_id=q.call_id,
            tool_name=q.tool_name,
            question=q.question,
            choices=list(q.choices),
        )


def mark_started(rt: Runtime, open_calls: Sequence[ToolCallRequest]) -> None:
    """Record the approved calls of ``open_calls`` (the newest batch's calls
    without a result, as they are now) as started, in the commit that enters
    ExecutingTools: the attempt is durable before any tool runs. (A crash
    between that commit and the run sends non-idempotent calls to a human,
    which is the safe side.)"""
    ctx = rt.ctx
    ids: list[str] = []  # a loop, not a comprehension: no call of its own
    for c in open_calls:
        if c.approval_status is _APPROVED and not is_client_call(c):
            ids.append(c.id)
    ctx.progress = _history.started(ctx.progress, tuple(ids))
