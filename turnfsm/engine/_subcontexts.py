"""What the engine's sub-context calls do once their arguments are checked.

``Engine.spawn``, ``finish``, ``approve``/``deny``/``answer`` on a parent and
the turns a parent returns go through here: spawning a child, finishing it
into its parent, routing decisions taken on a parent to the sub-task children
it waits for, and surfacing those children's pending calls on the parent's
``Turn``. The commits they make (change records, the summary message) are in
:mod:`._children`; the public methods and their argument checks in
:mod:`._engine`. See docs/architecture.md, "Sub-contexts".
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ..errors import ContextNotFound, InvalidInput, NotAtRest, SubContextError
from ..model import SUBTASK_RESUMED, ApprovalStatus, ChatContext, ContentPart, ToolCallRequest
from ..states import RESTING, State
from . import _calls, _children
from ._approval import questions_of
from ._children import Child, Finished, Summarizer
from ._inputs import check_text
from ._turn import Turn

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["after_children", "decide", "finish", "spawn", "surface", "surfaced_pending"]


async def decide(
    engine: Engine, context_id: str, ids: list[str], status: ApprovalStatus, reason: str | None
) -> Turn:
    """Decisions on pending calls: the context's own, and those of the
    sub-task children it waits for (routed to them first)."""
    d = engine._d
    routed = await _children.route_decisions(engine, context_id, ids)
    if routed is None:  # no child involved: the plain path (and its errors)
        decisions = dict.fromkeys(ids, (status, reason))
        return await surface(
            engine, await d.run(context_id, functools.partial(_calls.start_decide, d, decisions))
        )
    own, by_child, waiting = routed
    for child_id, child_ids in by_child.items():
        await decide(engine, child_id, child_ids, status, reason)
    return await after_children(engine, context_id, dict.fromkeys(own, (status, reason)), waiting)


async def after_children(
    engine: Engine,
    context_id: str,
    decisions: dict[str, tuple[ApprovalStatus, str | None]],
    waiting: dict[str, str],
) -> Turn:
    """After decisions went to a context's waiting children: its own
    ``decisions``, and each waiting call whose child no longer waits is
    approved to run again."""
    d = engine._d
    for call_id, child_id in waiting.items():
        child = await engine.get_context(child_id)
        if child.current_state != State.AWAITING_TOOL_APPROVAL:
            # the child no longer waits: the parent's call runs again
            decisions[call_id] = (ApprovalStatus.APPROVED, SUBTASK_RESUMED + child_id)
    start = (
        functools.partial(_calls.start_decide, d, decisions)
        if decisions
        else functools.partial(_children.start_still_waiting, d)
    )
    return await surface(engine, await d.run(context_id, start))


async def spawn(
    engine: Engine,
    parent: ChatContext,
    parts: list[ContentPart],
    system_prompt: str | None,
    model: str | None,
    mode: str | None,
    allowed: list[str] | None,
    title: str | None,
    *,
    announce: bool,
    subtask_call: str | None = None,
) -> Child:
    """Create the child of ``parent`` (arguments checked), record it on the
    parent when ``announce`` (the parent is at rest), and run its task."""
    d = engine._d
    parent_id = parent.id
    wider = parent.config.tools
    if allowed is None:
        allowed = None if wider is None else list(wider)
    elif wider is not None:
        for i, name in enumerate(allowed):
            if name not in wider:
                raise InvalidInput(f"tools[{i}]", f"the parent {parent_id!r} may not use {name!r}")
    config = parent.config
    child_id = await engine._create(
        system_prompt=system_prompt,
        model=config.model_id if model is None else model,
        mode=config.mode if mode is None else mode,
        parameters=config.parameters,
        user_prompt=None,
        agent_role=config.agent_role,
        workspace_path=config.workspace_path,
        parent_id=parent_id,
        context_id=None,
        title=title,
        tools=allowed,
        subtask_call=subtask_call,
    )
    detail: dict[str, Any] = {"child_id": child_id, "task": _task_text(parts)}
    if title is not None:
        detail["title"] = title
    try:
        if announce:
            await d.run(parent_id, functools.partial(_children.start_child_spawned, d, detail))
    except BaseException:
        # the parent refused (busy in another engine, moved meanwhile): the
        # child was never announced, so it goes
        with anyio.CancelScope(shield=True):
            await engine.store.delete(child_id)
        raise
    turn = await engine.send(child_id, parts)
    return Child(context_id=child_id, turn=turn)


async def surface(engine: Engine, turn: Turn) -> Turn:
    """A turn resting at AwaitingToolApproval lists, instead of the calls of
    its own that wait for a sub-task's child, that child's pending calls."""
    if turn.state is not State.AWAITING_TOOL_APPROVAL or not any(
        _children.waiting_child(c) for c in turn.pending_tool_calls
    ):
        return turn
    pending = await surfaced_pending(engine, turn.context_id)
    return dataclasses.replace(
        turn, pending_tool_calls=pending, questions=questions_of(engine.tools, pending)
    )


async def surfaced_pending(
    engine: Engine, context_id: str, seen: frozenset[str] = frozenset()
) -> tuple[ToolCallRequest, ...]:
    """The calls a human decides for a context: its own pending calls, and
    for each that waits for a sub-task's child, that child's (at any depth)."""
    ctx = await _children.peek(engine, context_id)
    if ctx.current_state != State.AWAITING_TOOL_APPROVAL:
        return ()
    out: list[ToolCallRequest] = []
    for call in ctx.pending_tool_calls():
        child_id = _children.waiting_child(call)
        if child_id is None or child_id in seen:
            out.append(call)
            continue
        try:
            below = await surfaced_pending(engine, child_id, seen | {context_id})
        except ContextNotFound:
            below = ()
        # a child that no longer waits (decided on its own, or gone): the
        # call itself is what is left to approve, and it runs again
        out.extend(below or (call,))
    return tuple(out)


async def finish(engine: Engine, child_id: str, chosen: Summarizer, keep: bool) -> Finished:
    """``Engine.finish`` once its arguments are checked (see there)."""
    d = engine._d
    d.refuse_if_busy(child_id)
    child = await engine.get_context(child_id)
    parent_id = child.parent_id
    if parent_id is None:
        raise SubContextError(child_id, "it is not a sub-context (it has no parent)")
    if child.config.archived:
        raise SubContextError(child_id, "it is already finished")
    state = State(child.current_state)
    if state is not State.IDLE:
        if state not in RESTING:
            raise NotAtRest(child_id, state, "finishing a sub-context")
        raise SubContextError(child_id, f"finish needs it at rest in Idle, not in {state}")
    live = [c.context_id for c in await engine.children(child_id) if not c.finished]
    if live:
        raise SubContextError(
            child_id, f"its own sub-contexts {live} are not finished: finish them first"
        )
    parent = await engine.get_context(parent_id)
    message_id = _children.find_summary(parent, child_id)
    if message_id is None:
        if parent.current_state != State.IDLE:
            raise SubContextError(
                parent_id,
                f"a sub-context's summary is added only in Idle, and it is in "
                f"{parent.current_state}",
            )
        d.refuse_if_busy(parent_id)
        text = await chosen.summarize(child, engine)
        if not isinstance(text, str):
            raise SubContextError(
                child_id, f"the summarizer returned {type(text).__name__}, not a text"
            )
        check_text("summary", text)
        if not text.strip():
            raise SubContextError(child_id, "the summarizer returned an empty summary")
        name = _children.summarizer_name(chosen)
        turn = await d.run(
            parent_id,
            functools.partial(_children.start_child_finished, d, child, text, name, keep),
        )
        refreshed = await engine.get_context(parent_id)
        message_id = _children.find_summary(refreshed, child_id)
        assert message_id is not None, turn
        parent = refreshed
    summary = parent.message_pool[message_id].message.text
    if keep:
        await d.run(child_id, functools.partial(_children.start_archive, d, parent_id, message_id))
    else:
        await engine.delete_context(child_id)
    return Finished(
        context_id=parent_id,
        child_id=child_id,
        message_id=message_id,
        summary=summary,
        kept=keep,
    )


def _task_text(parts: Sequence[ContentPart]) -> str:
    """The text of a task, for the parent's ``child_spawned`` record."""
    return "".join(getattr(p, "text", "") for p in parts)
