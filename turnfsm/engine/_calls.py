"""What each public call does first, once its context is loaded: the checks
that need the context, then the call's trigger. The drive loop runs the rest."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC
from typing import Any

from ..errors import (
    AnswerNotAChoice,
    BranchError,
    IllegalTransition,
    InvalidInput,
    LLMError,
    NotAQuestion,
    NotAtRest,
    SubContextError,
    ToolCallNotPending,
    UnknownToolCall,
)
from ..model import (
    ApprovalStatus,
    Branch,
    ClientTools,
    ContentPart,
    InternalMessage,
    MessageMetadata,
    MessageType,
    Role,
    SystemPrompt,
    TextPart,
    ToolCallRequest,
    TurnOutput,
    TurnProgress,
    detached,
    to_chat_messages,
)
from ..model._context import newest_tool_batch, open_calls, turn_progress
from ..states import RESTING, STATE_EFFECTS, Change, State, Trigger
from ..tools import QuestionTool, ToolOutcome
from . import _history, _steps
from ._approval import checked_decisions
from ._call_llm import fail_llm
from ._clock import from_timestamp
from ._decide import mark_started
from ._host import Host
from ._inputs import UNSET, Unset
from ._runtime import Runtime, require
from ._turn import StopReason

__all__ = [
    "cancel_in_place",
    "start_answer",
    "start_cancel",
    "start_decide",
    "start_fork",
    "start_reset",
    "start_resume",
    "start_retry",
    "start_send",
    "start_set_branch_prompts",
    "start_switch",
    "start_update_config",
]

S = State
T = Trigger
_new = object.__new__
# read once for start_send (every turn): on Python 3.11 each read of a member
# on its enum class goes through ``EnumType.__getattr__``'s hook
_USER_MESSAGE = T.USER_MESSAGE
_AWAITING_TOOL_APPROVAL = S.AWAITING_TOOL_APPROVAL
# and for start_decide (every approval or denial)
_APPROVALS_RESOLVED = T.APPROVALS_RESOLVED
_PENDING = ApprovalStatus.PENDING
_TEXT = MessageType.TEXT


def start_send(
    d: Host,
    parts: list[ContentPart],
    role: Role,
    message_id: str | None,
    rt: Runtime,
    *,
    output: TurnOutput | None = None,
    client: ClientTools | None = None,
) -> None:
    if rt.ctx.config.archived:
        raise SubContextError(rt.ctx.id, "it is a finished sub-context: it takes no more input")
    state = require(rt, _USER_MESSAGE)
    if message_id is not None and message_id in rt.ctx.message_pool:
        raise InvalidInput(
            "message_id", f"context {rt.ctx.id!r} already has a message {message_id!r}"
        )
    if state is _AWAITING_TOOL_APPROVAL:
        _steps.close_open_calls(rt, "superseded", lambda _: "superseded by a new user message")
    # written slot by slot, every field: see _answer._new
    # (tests/engine/test_answer_records.py holds them to the classes' own)
    metadata = _new(MessageMetadata)
    metadata.created_at = from_timestamp(d.settings.clock.time(), UTC)  # ``d.now()``, no frame
    metadata.model = metadata.usage = metadata.attempt = metadata.iteration = None
    metadata.finish_reason = None
    metadata.cancelled = False
    metadata._extra = None  # type: ignore[misc]  # the slot behind ``extra``
    metadata.incomplete_reason = metadata.logprobs = metadata.provider_reason = None
    message = _new(InternalMessage)
    message.role = role
    message.content = parts
    message.tool_calls = message.tool_result = None
    message.message_type = _TEXT
    message.metadata = metadata
    message.thinking = message.refusal = message.reasoning = message.phase = None
    _history.append(rt, message, d.settings.ids() if message_id is None else message_id)
    rt.ctx.progress = turn_progress(iteration=1, attempt=1, output=output, client=client)
    _steps.fire(rt, _USER_MESSAGE)


def start_decide(
    d: Host, decisions: Mapping[str, tuple[ApprovalStatus, str | None]], rt: Runtime
) -> None:
    ctx = rt.ctx
    # the newest batch read once, for the pending calls here and for
    # ``set_decisions`` (``ctx.pending_tool_calls()`` would read it again);
    # loops rather than comprehensions here and in ``_resolved``: every
    # decision takes them, and before Python 3.12 each comprehension is a
    # call of its own
    batch = newest_tool_batch(ctx.message_pool, ctx.branches[ctx.active_branch_name].message_ids)
    pending: dict[str, ToolCallRequest] = {}
    for c in open_calls(batch):
        if c.approval_status is _PENDING:
            pending[c.id] = c
    for cid in decisions:
        if cid not in pending:
            found = _history.find_call(ctx, cid)
            if found is None:
                raise UnknownToolCall(ctx.id, cid)
            raise ToolCallNotPending(ctx.id, cid, _history.call_status(ctx, found))
    decisions = checked_decisions(ctx.id, d.settings.tools, pending, decisions)  # questions
    state = rt.holder.current()
    if state is not _AWAITING_TOOL_APPROVAL:  # pending calls exist only there
        raise IllegalTransition(state, _APPROVALS_RESOLVED, context_id=ctx.id)
    human: dict[str, tuple[ApprovalStatus, str, str | None]] = {}
    for cid, (status, reason) in decisions.items():
        human[cid] = (status, "human", reason)
    _resolved(d, rt, _history.set_decisions(rt, human, batch))


async def start_answer(d: Host, call_id: str, text: str, rt: Runtime) -> None:
    """Answer a pending question: ``text`` becomes its result (``success=True``);
    once no call is pending, the turn goes on as after :func:`start_decide`."""
    ctx = rt.ctx
    pending = {c.id: c for c in ctx.pending_tool_calls()}
    call = pending.get(call_id) or _history.find_call(ctx, call_id)
    if call is None:
        raise UnknownToolCall(ctx.id, call_id)
    tool = d.settings.tools.get(call.tool_name)
    if not isinstance(tool, QuestionTool):
        raise NotAQuestion(ctx.id, call_id, call.tool_name)
    if call_id not in pending:
        raise ToolCallNotPending(ctx.id, call_id, _history.call_status(ctx, call))
    state = rt.holder.current()
    if state is not S.AWAITING_TOOL_APPROVAL:  # pending calls exist only there
        raise IllegalTransition(state, T.APPROVALS_RESOLVED, context_id=ctx.id)
    asked = tool.ask(call)
    choices = asked.choices if asked is not None else ()
    if choices and text not in choices:
        raise AnswerNotAChoice(ctx.id, call_id, text, choices)
    still_open = _history.set_decisions(
        rt, {call_id: (ApprovalStatus.APPROVED, "human", "answered")}
    )
    _steps.add_results(rt, [call], [ToolOutcome.of(True, text)])
    _resolved(d, rt, [c for c in still_open if c.id != call_id])  # answered now


def _resolved(d: Host, rt: Runtime, open_calls: list[ToolCallRequest]) -> None:
    """After decisions on the newest batch, whose calls without a result are
    now ``open_calls``: wait for the human while some is still pending, else
    go on to run the approved ones."""
    for c in open_calls:
        if c.approval_status is _PENDING:
            rt.stop_reason = StopReason.AWAITING_APPROVAL
            return
    mark_started(rt, open_calls)
    _steps.fire(rt, _APPROVALS_RESOLVED)


async def start_retry(d: Host, rt: Runtime) -> None:
    # the table also has retry from TransientFailure: that one is the engine's own
    if rt.holder.current() is not S.PERMANENT_FAILURE:
        raise IllegalTransition(rt.holder.state, T.RETRY, context_id=rt.ctx.id)
    p = rt.ctx.progress
    out = p.output  # a typed turn asks again with all its output retries
    rt.ctx.progress = TurnProgress(
        iteration=max(p.iteration, 1),
        attempt=1,
        output=out if out is None or not out.invalid else dataclasses.replace(out, invalid=0),
        client=p.client,
    )
    _steps.fire(rt, T.RETRY)


async def start_reset(d: Host, rt: Runtime) -> None:
    require(rt, T.RESET)
    rt.ctx.progress = TurnProgress()
    rt.stop_reason = StopReason.RESET
    _steps.fire(rt, T.RESET)


async def start_cancel(d: Host, rt: Runtime) -> None:
    require(rt, T.CANCEL)
    await cancel_in_place(d, rt)


async def start_resume(d: Host, rt: Runtime) -> None:
    state = rt.holder.current()
    if state in RESTING:
        return
    if state is S.EXECUTING_TOOLS and rt.ctx.progress.started_call_ids and _unknown_outcomes(d, rt):
        return
    if state is S.STREAMING_LLM_RESPONSE:
        err = "the stream was interrupted (the process stopped)"
        rt.ctx.progress = dataclasses.replace(rt.ctx.progress, last_error=err)
        await fail_llm(d, rt, LLMError(err, kind="interrupted"), transient=True)
        return
    rt.holder.effect = STATE_EFFECTS.get(state)


def _unknown_outcomes(d: Host, rt: Runtime) -> bool:
    """After a crash in ExecutingTools: started calls of tools that are not
    idempotent go back to a human (``outcome_unknown``)."""
    ctx = rt.ctx
    started = set(ctx.progress.started_call_ids)
    unknown: list[str] = []
    for c in ctx.open_tool_calls():
        tool = d.settings.tools.get(c.tool_name)
        if c.id in started and tool is not None and not tool.idempotent:
            unknown.append(c.id)
    if not unknown:
        return False
    why = "outcome unknown: it was started before the process stopped"
    _history.back_to_pending(rt, dict.fromkeys(unknown, why), outcome_unknown=True)
    rt.stop_reason = StopReason.AWAITING_APPROVAL
    _steps.fire(rt, T.OUTCOME_UNKNOWN)
    return True


async def start_fork(
    d: Host,
    name: str,
    at: int,
    prompts: Mapping[str, str | Unset | None],
    rt: Runtime,
) -> None:
    ctx = rt.ctx
    _require_branchable(rt)
    if not name or name in ctx.branches:
        raise BranchError(f"context {ctx.id!r} already has a branch named {name!r}")
    source = ctx.active_branch
    if not -1 <= at < len(source.message_ids):
        raise BranchError(
            f"cannot fork branch {source.name!r} after index {at}: it has "
            f"{len(source.message_ids)} messages"
        )
    ids = source.message_ids[: at + 1]
    if _history.has_open_calls(ctx, ids):
        raise BranchError(f"cannot fork after index {at}: the tool calls there have no results yet")
    branch = Branch(
        name=name,
        message_ids=list(ids),
        parent_message_id=ids[-1] if ids else None,
        forked_from=source.name,
        system_prompt=source.system_prompt,
        user_prompt=source.user_prompt,
    )
    detail: dict[str, Any] = {"branch": name, "at": at, "forked_from": source.name}
    detail.update(_set_prompts(d, branch, prompts))
    ctx.branches[name] = branch
    rt.branches = [
        *rt.branches,
        dataclasses.replace(branch, message_ids=list(branch.message_ids)),
    ]
    _activate(rt, name)
    rt.stop_reason = StopReason.BRANCH
    _steps.change(rt, Change.BRANCH_FORKED, detail)


async def start_switch(d: Host, name: str, rt: Runtime) -> None:
    _require_branchable(rt)
    if name not in rt.ctx.branches:
        raise BranchError(f"context {rt.ctx.id!r} has no branch named {name!r}")
    previous = rt.ctx.active_branch_name
    rt.stop_reason = StopReason.BRANCH
    if name == previous:
        return
    _activate(rt, name)
    _steps.change(rt, Change.BRANCH_SWITCHED, {"branch": name, "previous": previous})


async def start_set_branch_prompts(
    d: Host, name: str, prompts: Mapping[str, str | Unset | None], rt: Runtime
) -> None:
    ctx = rt.ctx
    _require_resting(rt, "branch prompts")
    if name not in ctx.branches:
        raise BranchError(f"context {ctx.id!r} has no branch named {name!r}")
    branch = ctx.branches[name]
    branch = dataclasses.replace(branch, message_ids=list(branch.message_ids))
    changed = _set_prompts(d, branch, prompts)
    if not changed:
        return
    ctx.branches[name] = branch
    rt.branches = [
        *rt.branches,
        dataclasses.replace(branch, message_ids=list(branch.message_ids)),
    ]
    _steps.change(rt, Change.BRANCH_PROMPTS_SET, {"branch": name, **changed})


def _set_prompts(
    d: Host, branch: Branch, prompts: Mapping[str, str | Unset | None]
) -> dict[str, str | None]:
    """Give ``branch`` the prompts in ``prompts`` that are set and differ from
    its own; returns those (the change record's detail)."""
    changed: dict[str, str | None] = {}
    system = prompts.get("system_prompt", UNSET)
    if not isinstance(system, Unset):
        current = branch.system_prompt.content if branch.system_prompt else None
        if (system or None) != current:
            branch.system_prompt = (
                SystemPrompt(id=d.settings.ids(), content=system) if system else None
            )
            changed["system_prompt"] = system or None
    user = prompts.get("user_prompt", UNSET)
    if not isinstance(user, Unset) and (user or None) != branch.user_prompt:
        branch.user_prompt = user or None
        changed["user_prompt"] = user or None
    return changed


async def start_update_config(
    d: Host, fields: Mapping[str, Any], out: list[Any], rt: Runtime
) -> None:
    """Change the config's ``fields`` (already checked); ``out`` receives the
    config as it is after the call."""
    ctx = rt.ctx
    _require_resting(rt, "the config")
    config = ctx.config
    changed = {k: v for k, v in fields.items() if getattr(config, k) != v}
    if changed:
        ctx.config = config = dataclasses.replace(detached(config), **changed)
        rt.config_changed = True
        _steps.change(rt, Change.CONFIG_UPDATED, dict(changed))
    out.append(detached(config))


def _require_resting(rt: Runtime, what: str) -> None:
    state = rt.holder.current()
    if state not in RESTING:
        raise NotAtRest(rt.ctx.id, state, what)


def _require_branchable(rt: Runtime) -> None:
    state = rt.holder.current()
    if state not in (S.IDLE, S.PERMANENT_FAILURE):
        raise BranchError(
            f"context {rt.ctx.id!r} is in {state}: branches change only in Idle or "
            "PermanentFailure (decide the pending tool calls first)"
        )


def _activate(rt: Runtime, name: str) -> None:
    rt.ctx.active_branch_name = name
    rt.active_changed = True
    rt.chat = to_chat_messages(n.message for n in rt.ctx.history())


async def cancel_in_place(d: Host, rt: Runtime) -> None:
    """Take ``cancel``: keep partial text (marked), close open calls, go Idle."""
    ctx = rt.ctx
    if rt.partial:
        assert rt.partial_id is not None
        _history.append_answer(
            rt,
            InternalMessage(
                role=Role.ASSISTANT,
                content=[TextPart(text="".join(rt.partial))],
                metadata=MessageMetadata(
                    created_at=d.now(),
                    attempt=ctx.progress.attempt,
                    iteration=ctx.progress.iteration,
                    cancelled=True,
                    finish_reason="cancelled",
                ),
            ),
            rt.partial_id,
        )
        rt.partial = ()
    started = set(ctx.progress.started_call_ids)
    _steps.close_open_calls(
        rt,
        "cancelled",
        lambda c: (
            "cancelled while running; the outcome is unknown"
            if c.id in started
            else "cancelled before it ran"
        ),
    )
    ctx.progress = TurnProgress()
    rt.request = None
    rt.answer = None
    rt.stop_reason = StopReason.CANCELLED
    _steps.fire(rt, T.CANCEL)
    _steps.end_turn(rt)
    await d.commit(rt)
