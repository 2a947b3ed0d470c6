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
from typing import Any

import anyio

from ..errors import ContextNotFound, InvalidInput, NotAtRest, SubContextError
from ..model import SUBTASK_RESUMED, ApprovalStatus, ChatContext, ContentPart, ToolCallRequest
from ..states import RESTING, State
from ..tools import SubtaskSpec, ToolError
from . import _calls, _children
from ._api import EngineAPI
from ._approval import questions_of
from ._children import Child, Finished, Summarizer
from ._inputs import check_content, check_text, check_tools
from ._turn import Turn

__all__ = [
    "SubtaskRunner",
    "after_children",
    "decide",
    "finish",
    "peek",
    "route_decisions",
    "spawn",
    "surface",
    "surfaced_pending",
]


async def decide(
    engine: EngineAPI, context_id: str, ids: list[str], status: ApprovalStatus, reason: str | None
) -> Turn:
    """Decisions on pending calls: the context's own, and those of the
    sub-task children it waits for (routed to them first)."""
    d = engine._d
    routed = await route_decisions(engine, context_id, ids)
    if routed is None:  # no child involved: the plain path (and its errors)
        decisions = dict.fromkeys(ids, (status, reason))
        return await surface(
            engine, await d.run(context_id, functools.partial(_calls.start_decide, d, decisions))
        )
    own, by_child, waiting = routed
    for child_id, child_ids in by_child.items():
        # through the engine's own calls on the child (they decide as here, at
        # any depth; a host whose children run elsewhere sends them there)
        if status is ApprovalStatus.APPROVED:
            await engine.approve(child_id, child_ids)
        else:
            await engine.deny(child_id, child_ids, reason)
    return await after_children(engine, context_id, dict.fromkeys(own, (status, reason)), waiting)


async def after_children(
    engine: EngineAPI,
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
    engine: EngineAPI,
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
        history=config,
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


async def surface(engine: EngineAPI, turn: Turn) -> Turn:
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
    engine: EngineAPI, context_id: str, seen: frozenset[str] = frozenset()
) -> tuple[ToolCallRequest, ...]:
    """The calls a human decides for a context: its own pending calls, and
    for each that waits for a sub-task's child, that child's (at any depth)."""
    ctx = await peek(engine, context_id)
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


async def finish(engine: EngineAPI, child_id: str, chosen: Summarizer, keep: bool) -> Finished:
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


# ---------------------------------------------------------------------- a sub-task as a tool


class SubtaskRunner:
    """Runs a sub-task tool's child for one engine (``tools.subtask``): spawn a
    child of the calling context (or continue the one this call already has),
    run the task, summarise it, delete or keep it; the summary is the call's
    result.

    The parent is in the middle of its own call (``ExecutingTools``), so nothing
    is recorded on it but the call and its result; the child is linked by its
    ``parent_id`` and ``config.subtask_call``. A child resting in
    ``AwaitingToolApproval`` is noted in :attr:`waiting` (read by the
    ``run_tools`` effect, which takes ``subtask_waits``). Any other failure (a
    child that does not rest in ``Idle``, a refused argument, a failed summary)
    is raised and becomes the call's error result.
    """

    def __init__(self, engine: EngineAPI) -> None:
        self.engine = engine
        self.waiting: dict[str, dict[str, tuple[str, tuple[ToolCallRequest, ...]]]] = {}
        """Per parent id: call id -> (child id, the child's pending calls)."""

    def take_waiting(self, parent_id: str) -> dict[str, tuple[str, tuple[ToolCallRequest, ...]]]:
        return self.waiting.pop(parent_id, {})

    async def _existing(self, parent_id: str, call_id: str) -> ChatContext | None:
        for info in await _children.children_of(self.engine.store, parent_id):
            if info.finished:
                continue
            ctx = await self.engine.get_context(info.context_id)
            if ctx.config.subtask_call == call_id:
                return ctx
        return None

    async def run_subtask(self, parent_id: str, call_id: str, task: str, spec: SubtaskSpec) -> str:
        engine = self.engine
        d = engine._d
        chosen = _children.as_summarizer("summarizer", spec.summarizer)
        existing = await self._existing(parent_id, call_id)
        if existing is not None:  # run again (approved, or after a crash): the same child
            cid = existing.id
            state = State(existing.current_state)
            turn = await engine.resume(cid) if state not in RESTING else None
            state = turn.state if turn is not None else state
            error = turn.error if turn is not None else existing.progress.last_error
        else:
            parts = check_content("task", task)
            allowed = check_tools("tools", spec.tools, engine.tools)
            rt = d.loaded.get(parent_id)
            parent = rt.ctx if rt is not None else await engine.get_context(parent_id)
            child = await spawn(
                engine,
                parent,
                parts,
                spec.system_prompt,
                spec.model,
                None,
                allowed,
                spec.tool_name,
                announce=False,
                subtask_call=call_id,
            )
            cid = child.context_id
            state = child.turn.state
            error = child.turn.error
        if state is State.AWAITING_TOOL_APPROVAL:
            pending = await surfaced_pending(engine, cid)
            self.waiting.setdefault(parent_id, {})[call_id] = (cid, pending)
            raise ToolError(f"the sub-task (context {cid!r}) waits for a human's decision")
        if state is not State.IDLE:
            why = f": {error}" if error else ""
            raise ToolError(
                f"the sub-task (context {cid!r}) stopped in {state}{why}; "
                "the context is kept as it is"
            )
        ctx = await engine.get_context(cid)
        text = await chosen.summarize(ctx, engine)
        if not isinstance(text, str) or not text.strip():
            raise ToolError(f"the sub-task (context {cid!r}) gave no summary: {text!r}")
        if spec.keep:
            await d.run(cid, functools.partial(_children.start_archive, d, parent_id, None))
        else:
            await engine.delete_context(cid)
        return text


async def peek(engine: EngineAPI, context_id: str) -> ChatContext:
    """The context as last committed, to read only: the loaded working copy
    when no call runs on it (no copy made), else the stored one."""
    d = engine._d
    rt = d.loaded.get(context_id)
    if rt is not None and context_id not in d.busy:
        return rt.ctx
    return await engine.store.load(context_id)


async def route_decisions(
    engine: EngineAPI, context_id: str, ids: Sequence[str]
) -> tuple[list[str], dict[str, list[str]], dict[str, str]] | None:
    """Split decisions on a context that waits for sub-task children: its own
    call ids, the ids of each child (the direct child they surface through),
    and its waiting calls (call id -> child id). None when no child is
    involved or an id is unknown (the plain path then decides, or refuses with
    its typed error, changing nothing)."""
    ctx = await peek(engine, context_id)
    if ctx.current_state != State.AWAITING_TOOL_APPROVAL:
        return None
    pending = ctx.pending_tool_calls()
    waiting = {c.id: child for c in pending if (child := _children.waiting_child(c)) is not None}
    if not waiting:
        return None
    through: dict[str, str] = {}
    for child in waiting.values():
        try:
            for c in await surfaced_pending(engine, child, frozenset({context_id})):
                through[c.id] = child
        except ContextNotFound:
            continue
    own_ids = {c.id for c in pending}
    own: list[str] = []
    by_child: dict[str, list[str]] = {}
    for i in ids:
        if i in own_ids:
            own.append(i)
        elif i in through:
            by_child.setdefault(through[i], []).append(i)
        else:
            return None
    if not by_child:
        return None
    return own, by_child, waiting
