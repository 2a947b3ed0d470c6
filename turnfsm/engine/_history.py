"""Edits of a loaded context's history, as plain functions.

Each edit changes the working copy and notes what the next commit stores
(``Runtime.appended`` / ``Runtime.replaced``); none of them emits events or
talks to the store. See docs/architecture.md, "Where each thing lives".
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..adapters.inbound import said
from ..model import (
    ApprovalStatus,
    ChatContext,
    InternalMessage,
    MessageMetadata,
    MessageNode,
    MessageType,
    Role,
    ToolCallRequest,
    ToolCallResult,
    TurnProgress,
    append_chat,
    to_chat_message,
)
from ..model._context import newest_tool_batch, turn_progress
from ..model._message import NO_CONTENT, extra_of
from ..tools import ToolOutcome
from ._runtime import Runtime

__all__ = [
    "RESPONSE_SUFFIX",
    "Decisions",
    "Result",
    "add_results",
    "answer_id",
    "append",
    "append_answer",
    "call_ids",
    "call_status",
    "close_open_calls",
    "find_call",
    "has_open_calls",
    "replace",
    "set_decisions",
]

Decisions = Mapping[str, tuple[ApprovalStatus, str, str | None]]
"""Per call id: (status, decided_by, reason)."""
Result = tuple[ToolCallRequest, ToolOutcome, MessageNode]
"""A call, its outcome and the result message appended for it."""


# read once: on Python 3.11 each read of a member on its enum class goes
# through ``EnumType.__getattr__``'s hook (an answer's id reads the roles
# back to the turn's message)
_USER = Role.USER
_OPERATOR = Role.FRONTEND_OPERATOR
_ASSISTANT = Role.ASSISTANT
_TOOL = Role.TOOL
_TOOL_RESULT = MessageType.TOOL_RESULT

_new = object.__new__
"""A record made on a turn's path is made as ``X.__init__(_new(X), ...)``:
see :data:`turnfsm.engine._answer._new`."""

_refcount = getattr(sys, "getrefcount", None)
"""None where the interpreter counts no references: then every change copies."""


def _chat_refs(rt: Any) -> int:
    """The references the interpreter counts to ``rt.chat``."""
    assert _refcount is not None
    return _refcount(rt.chat)  # type: ignore[no-any-return]


class _Alone:
    __slots__ = ("chat",)

    def __init__(self) -> None:
        self.chat: list[Any] = []


_ALONE = 0 if _refcount is None else _chat_refs(_Alone())
"""What :func:`_chat_refs` counts for a list only its holder holds, on this
interpreter (measured, not assumed: how many references the call itself adds
differs between versions)."""


def append(rt: Runtime, message: InternalMessage, node_id: str) -> MessageNode:
    """Append ``message`` to the active branch (and its chat-format copy)."""
    ctx = rt.ctx
    branch = ctx.branches[ctx.active_branch_name]  # ``active_branch``, without its frame
    ids = branch.message_ids
    node = _new(MessageNode)
    node.id = node_id
    node.message = message
    node.parent_id = ids[-1] if ids else None
    ctx.message_pool[node_id] = node
    ids.append(node_id)
    appended = rt.appended
    if appended:
        appended.append((branch.name, node))
    else:  # the first since the last commit (see Runtime)
        rt.appended = [(branch.name, node)]
    item = to_chat_message(message)
    if _refcount is None or _chat_refs(rt) > _ALONE:
        # a request still holds the list (an adapter or a subscriber kept it):
        # it must keep seeing the history it was sent, so the engine goes on
        # with a copy; when nothing else holds it, it grows in place and a turn
        # never copies the history
        rt.chat = list(rt.chat)
    chat = rt.chat
    if item["role"] == "tool" and chat and chat[-1].get("role") == "tool":
        append_chat(chat, item)  # a result after a result: may go before it
    else:
        chat.append(item)  # what append_chat does with it, without the call
    turn_nodes = rt.turn_nodes
    if turn_nodes:
        turn_nodes.append(node)
    else:
        rt.turn_nodes = [node]
    return node


RESPONSE_SUFFIX = "-response"
"""What a request's ``messageId`` is followed by in the id of its answer."""


def answer_id(ctx: ChatContext, message: InternalMessage) -> str | None:
    """The client id of ``message``, an answer about to be appended to the
    active branch: when the turn's message came in a request body with a
    ``messageId`` X (``metadata.extra["current"]`` and ``["message_id"]``),
    its answers that a body carries (:func:`~turnfsm.adapters.inbound.said`)
    are ``X-response``, then ``X-response-2``, ``X-response-3``, ... in order;
    None otherwise (and for what a body does not carry). Reads back from the
    branch's end to the turn's message only, and reads the texts only when
    that message has an id."""
    pool = ctx.message_pool
    ids = ctx.branches[ctx.active_branch_name].message_ids
    i = len(ids) - 1
    while i >= 0:  # back to the turn's message
        role = pool[ids[i]].message.role
        if role is _USER or role is _OPERATOR:
            break
        i -= 1
    if i < 0:
        return None
    extra = extra_of(pool[ids[i]].message.metadata)
    base = extra.get("message_id") if extra.get("current") is True else None
    if not isinstance(base, str) or said(message) is None:
        return None
    answers = 0
    for mid in ids[i + 1 :]:
        msg = pool[mid].message
        if msg.role is _ASSISTANT and said(msg) is not None:
            answers += 1
    if answers == 0:
        return base + RESPONSE_SUFFIX
    return f"{base}{RESPONSE_SUFFIX}-{answers + 1}"


def append_answer(rt: Runtime, message: InternalMessage, node_id: str) -> MessageNode:
    """:func:`append` for an answer of the turn: with its client id
    (:func:`answer_id`) in ``metadata.extra["message_id"]`` when it has one."""
    client_id = answer_id(rt.ctx, message)
    if client_id is not None:
        message.metadata.extra["message_id"] = client_id
    return append(rt, message, node_id)


def replace(rt: Runtime, node: MessageNode) -> None:
    """Put a changed version of a stored message in the pool."""
    rt.ctx.message_pool[node.id] = node
    if rt.replaced is None:
        rt.replaced = {node.id: node}
    else:
        rt.replaced[node.id] = node
    if rt.answer is not None and rt.answer.id == node.id:
        rt.answer = node


def back_to_pending(
    rt: Runtime, reasons: Mapping[str, str], *, outcome_unknown: bool = False
) -> None:
    """Put the newest batch's calls named in ``reasons`` back to Pending, each
    with its reason (a human decides them again), and forget that any call of
    the batch was started."""
    ctx = rt.ctx
    batch = ctx.last_tool_batch()
    assert batch is not None
    node = batch[0]
    assert node.message.tool_calls is not None
    update: dict[str, Any] = {"approval_status": ApprovalStatus.PENDING, "decided_by": None}
    if outcome_unknown:
        update["outcome_unknown"] = True
    calls = [
        dataclasses.replace(c, **update, reason=reasons[c.id]) if c.id in reasons else c
        for c in node.message.tool_calls
    ]
    replace(
        rt,
        dataclasses.replace(node, message=dataclasses.replace(node.message, tool_calls=calls)),
    )
    ctx.progress = dataclasses.replace(ctx.progress, started_call_ids=())


def set_decisions(
    rt: Runtime,
    decisions: Decisions,
    batch: tuple[MessageNode, list[str]] | None = None,
) -> list[ToolCallRequest]:
    """Record approval decisions on the newest tool batch (a replaced node);
    ``batch``: that batch (``newest_tool_batch``), when the caller just read it.

    Returns the batch's open calls (no result yet) as they are after the
    decisions, in the order asked: what the caller reads next (the calls
    still pending, the approved ones to start) without reading the history
    again."""
    if batch is None:
        ctx = rt.ctx
        # ``ctx.last_tool_batch()`` without its own frame (every decision takes it)
        batch = newest_tool_batch(
            ctx.message_pool, ctx.branches[ctx.active_branch_name].message_ids
        )
    assert batch is not None
    node, answered = batch
    message = node.message
    calls = message.tool_calls
    assert calls is not None
    # the stored message's list, made at its size (a list grown by appends
    # keeps room for four calls, with the history) and the decided calls put in
    new_calls = calls[:]
    open_calls = []
    for i, c in enumerate(calls):
        d = decisions.get(c.id)
        new = c if d is None else decided(c, *d)
        new_calls[i] = new
        if new.id not in answered:
            open_calls.append(new)
    new_node = _new(MessageNode)
    new_node.id = node.id
    new_node.message = with_calls(message, new_calls)
    new_node.parent_id = node.parent_id
    replace(rt, new_node)
    return open_calls


# The four copies below build each record once with every field, where
# ``dataclasses.replace`` reads the fields, builds a dict and calls the
# constructor (a decision on a one-call batch took three of them, and
# recording the started calls one more each tool-loop turn); each writes the
# slots of ``_new(cls)`` itself, as the records made here on a turn's path
# are (a class call would pack its keywords into a dict for ``__init__`` to
# take apart again, and even ``__init__`` called on its own matches each
# keyword by name in a frame of its own), but for the progress record, which
# ``turn_progress`` makes. A test
# (tests/engine/test_history_copies.py) holds them to ``dataclasses.replace``
# for every field of each class, so a field added later is not dropped.


def started(p: TurnProgress, ids: tuple[str, ...]) -> TurnProgress:
    """``dataclasses.replace(p, started_call_ids=ids)``."""
    return turn_progress(
        iteration=p.iteration,
        attempt=p.attempt,
        retry_at=p.retry_at,
        last_error=p.last_error,
        started_call_ids=ids,
        output=p.output,
        client=p.client,
    )


def decided(
    c: ToolCallRequest, status: ApprovalStatus, by: str | None, reason: str | None
) -> ToolCallRequest:
    """``c`` with a decision: ``dataclasses.replace(c, approval_status=status,
    decided_by=by, reason=reason)``."""
    copy = _new(ToolCallRequest)
    copy.id = c.id
    copy.tool_name = c.tool_name
    copy.arguments = c.arguments
    copy.approval_status = status
    copy.decided_by = by  # type: ignore[assignment]  # one of the three, by its callers
    copy.reason = reason
    copy.outcome_unknown = c.outcome_unknown
    copy.raw_arguments = c.raw_arguments
    copy.arguments_error = c.arguments_error
    copy.provider_id = c.provider_id
    return copy


def with_calls(m: InternalMessage, calls: list[ToolCallRequest]) -> InternalMessage:
    """``dataclasses.replace(m, tool_calls=calls)``."""
    copy = _new(InternalMessage)
    copy.role = m.role
    copy.content = m.content
    copy.tool_calls = calls
    copy.tool_result = m.tool_result
    copy.message_type = m.message_type
    copy.metadata = m.metadata
    copy.thinking = m.thinking
    copy.refusal = m.refusal
    copy.reasoning = m.reasoning
    copy.phase = m.phase
    return copy


def add_results(
    rt: Runtime,
    calls: Sequence[ToolCallRequest],
    outcomes: Sequence[ToolOutcome],
    now: datetime,
    new_id: Callable[[], str],
) -> list[Result]:
    """Append one tool result message per call, in the order given."""
    added: list[Result] = []
    for call, outcome in zip(calls, outcomes, strict=True):
        # written slot by slot, every field: see _answer._new
        # (tests/engine/test_answer_records.py holds them to the classes' own)
        result = _new(ToolCallResult)
        result.request_id = call.id
        result.result = outcome.result
        result.success = outcome.success
        metadata = _new(MessageMetadata)
        metadata.created_at = now
        metadata.model = metadata.usage = metadata.attempt = metadata.iteration = None
        metadata.finish_reason = None
        metadata.cancelled = False
        metadata._extra = _conversions(outcome) if outcome.notes else None  # type: ignore[misc]  # the slot behind ``extra``
        metadata.incomplete_reason = metadata.logprobs = metadata.provider_reason = None
        message = _new(InternalMessage)
        message.role = _TOOL
        message.content = NO_CONTENT
        message.tool_calls = None
        message.tool_result = result
        message.message_type = _TOOL_RESULT
        message.metadata = metadata
        message.thinking = message.refusal = message.reasoning = message.phase = None
        added.append((call, outcome, append(rt, message, new_id())))
    return added


def close_open_calls(
    rt: Runtime,
    why: str,
    error: Callable[[ToolCallRequest], str],
    now: datetime,
    new_id: Callable[[], str],
) -> list[Result]:
    """Give every open call of the newest batch a failed result: the undecided
    ones are first denied by the system (reason ``why``); each result says
    ``error(call)`` with status ``why``."""
    open_calls = rt.ctx.open_tool_calls()
    if not open_calls:
        return []
    undecided = {
        c.id: (ApprovalStatus.DENIED, "system", why)
        for c in open_calls
        if c.approval_status is ApprovalStatus.PENDING
    }
    if undecided:
        set_decisions(rt, undecided)
    outcomes = [ToolOutcome(False, {"error": error(c), "status": why}) for c in open_calls]
    return add_results(rt, open_calls, outcomes, now, new_id)


def _conversions(outcome: ToolOutcome) -> dict[str, Any]:
    """What was converted to store a tool's result (see the tools module docstring)."""
    return {"conversions": list(outcome.notes)}


# ---------------------------------------------------------------------- queries


def call_ids(rt: Runtime) -> dict[str, None]:
    """Every tool call id used in the context (all branches), as the keys of
    a dict (a few keys take a third of a set's memory); read-only."""
    if rt.call_ids is None:
        pool = rt.ctx.message_pool.values()
        rt.call_ids = {c.id: None for n in pool for c in n.message.tool_calls or ()}
    return rt.call_ids


def find_call(ctx: ChatContext, call_id: str) -> ToolCallRequest | None:
    for node in ctx.message_pool.values():
        for c in node.message.tool_calls or ():
            if c.id == call_id:
                return c
    return None


def call_status(ctx: ChatContext, call: ToolCallRequest) -> str:
    answered = any(
        n.message.tool_result is not None and n.message.tool_result.request_id == call.id
        for n in ctx.message_pool.values()
    )
    status = str(call.approval_status)
    return f"{status}, already answered" if answered else status


def has_open_calls(ctx: ChatContext, ids: Sequence[str]) -> bool:
    """Whether the history ``ids`` ends inside a tool batch some call of which has
    no result yet."""
    batch = ctx.last_tool_batch(ids)
    if batch is None:
        return False
    node, answered = batch
    return any(c.id not in answered for c in node.message.tool_calls or ())
