"""Decisions on a parent that waits for sub-task children, and the calls a
human decides for it.

A parent whose sub-task call waits for its child (the child rests in
``AwaitingToolApproval``) shows, on its ``Turn``, the child's pending calls
instead of its own waiting call (:func:`surface`, at any depth); a decision
taken on the parent for such a call is routed to the child it surfaces
through (:func:`route_decisions`). What is decided then is in
``_lifecycle`` (``SubContexts.decide``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ...errors import ContextNotFound
from ...model import ChatContext, ToolCallRequest
from ...states import State
from .._approval import questions_of
from .._drive import Driver
from .._turn import Turn
from ._records import waiting_child

__all__ = ["no_child_waits", "peek", "route_decisions", "surface", "surfaced_pending"]

# read once: every rest for a human and every decision compare with it, and
# on Python 3.11 a member read off its enum class goes through
# ``EnumType.__getattr__``'s hook
_AWAITING_TOOL_APPROVAL = State.AWAITING_TOOL_APPROVAL


async def peek(driver: Driver, context_id: str) -> ChatContext:
    """The context as last committed, to read only: the loaded working copy
    when no call runs on it (no copy made), else the stored one."""
    rt = driver.loaded.get(context_id)
    if rt is not None and context_id not in driver.busy:
        return rt.ctx
    return await driver.settings.store.load(context_id)


async def surface(driver: Driver, turn: Turn) -> Turn:
    """A turn resting at AwaitingToolApproval lists, instead of the calls of
    its own that wait for a sub-task's child, that child's pending calls."""
    if turn.state is not _AWAITING_TOOL_APPROVAL:
        return turn
    # a loop rather than ``any`` over a generator: every rest for a human
    # asks it, and before Python 3.12 the generator is a call of its own
    for c in turn.pending_tool_calls:
        if waiting_child(c) is not None:
            break
    else:
        return turn
    pending = await surfaced_pending(driver, turn.context_id)
    return dataclasses.replace(
        turn, pending_tool_calls=pending, questions=questions_of(driver.settings.tools, pending)
    )


async def surfaced_pending(
    driver: Driver, context_id: str, seen: frozenset[str] = frozenset()
) -> tuple[ToolCallRequest, ...]:
    """The calls a human decides for a context: its own pending calls, and
    for each that waits for a sub-task's child, that child's (at any depth)."""
    ctx = await peek(driver, context_id)
    if ctx.current_state != _AWAITING_TOOL_APPROVAL:
        return ()
    out: list[ToolCallRequest] = []
    for call in ctx.pending_tool_calls():
        child_id = waiting_child(call)
        if child_id is None or child_id in seen:
            out.append(call)
            continue
        try:
            below = await surfaced_pending(driver, child_id, seen | {context_id})
        except ContextNotFound:
            below = ()
        # a child that no longer waits (decided on its own, or gone): the
        # call itself is what is left to approve, and it runs again
        out.extend(below or (call,))
    return tuple(out)


def no_child_waits(driver: Driver, context_id: str) -> bool:
    """The context is loaded, no call runs on it, and none of its pending
    calls waits for a sub-task's child: :func:`route_decisions` would give
    None, read here on the loaded copy without an await (every decision on
    a context this engine ran asks it first). False: ask
    :func:`route_decisions`."""
    loaded = driver.loaded
    rt = loaded.runtimes.get(context_id)
    if rt is None or context_id in loaded.busy:
        return False
    # a loop rather than ``all`` over a generator: every decision asks it (see ``surface``)
    for c in rt.ctx.open_tool_calls():
        if waiting_child(c) is not None:
            break
    else:
        return True
    return False


async def route_decisions(
    driver: Driver, context_id: str, ids: Sequence[str]
) -> tuple[list[str], dict[str, list[str]], dict[str, str]] | None:
    """Split decisions on a context that waits for sub-task children: its own
    call ids, the ids of each child (the direct child they surface through),
    and its waiting calls (call id -> child id). None when no child is
    involved or an id is unknown (the plain path then decides, or refuses with
    its typed error, changing nothing)."""
    ctx = await peek(driver, context_id)
    if ctx.current_state != _AWAITING_TOOL_APPROVAL:
        return None
    pending = ctx.pending_tool_calls()
    waiting: dict[str, str] = {}
    for c in pending:  # a loop: every decision asks it (see ``surface``)
        child = waiting_child(c)
        if child is not None:
            waiting[c.id] = child
    if not waiting:
        return None
    through: dict[str, str] = {}
    for child in waiting.values():
        try:
            for c in await surfaced_pending(driver, child, frozenset({context_id})):
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
