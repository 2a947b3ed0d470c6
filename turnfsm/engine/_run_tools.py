"""The ``run_tools`` effect (ExecutingTools): run the approved calls and record
one result per call, in the order asked; then ``tools_done``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import nullcontext
from typing import TYPE_CHECKING

from ..model import ApprovalStatus, ToolCallRequest, TurnProgress
from ..states import Trigger
from ..tools import ToolOutcome, ToolRegistry, hosting, run_calls
from ._children import wait_for_subtasks
from ._runtime import Runtime

if TYPE_CHECKING:
    from ._drive import Driver

__all__ = ["run_tools"]


async def run_tools(d: Driver, rt: Runtime) -> None:
    """ExecutingTools: run the approved calls; one result per call, in the order asked."""
    ctx = rt.ctx
    calls = ctx.open_tool_calls()
    to_run = [c for c in calls if c.approval_status is ApprovalStatus.APPROVED]
    ids = tuple(c.id for c in to_run)
    if ids != ctx.progress.started_call_ids:  # resumed: record the attempt first
        ctx.progress = dataclasses.replace(ctx.progress, started_call_ids=ids)
        await d.commit(rt)
    offered = d.offered(ctx)
    refused = {
        c.id: _not_offered(d, rt, offered, c)
        for c in to_run
        if c.tool_name not in offered and c.tool_name in d.tools
    }
    if refused:
        to_run = [c for c in to_run if c.id not in refused]
    ran: Iterator[ToolOutcome] = iter(())
    if to_run:
        host = d.subtask_host  # sub-task tools run their children through it
        with hosting(host, ctx.id) if host is not None else nullcontext():
            ran = iter(await run_calls(offered, to_run))
    outcomes = [
        refused[c.id]
        if c.id in refused
        else next(ran)
        if c.approval_status is ApprovalStatus.APPROVED
        else ToolOutcome(
            False,
            {
                "error": f"denied: {c.reason}" if c.reason else "denied",
                "status": "denied",
            },
        )
        for c in calls
    ]
    waiting = d.subtask_host.take_waiting(ctx.id) if d.subtask_host is not None else {}
    if waiting:  # sub-task calls whose children wait for a human
        wait_for_subtasks(d, rt, calls, outcomes, waiting)
        return
    d.add_results(rt, calls, outcomes)
    ctx.progress = TurnProgress(iteration=ctx.progress.iteration + 1, attempt=1)
    d.fire(rt, Trigger.TOOLS_DONE)


def _not_offered(
    d: Driver, rt: Runtime, offered: ToolRegistry, call: ToolCallRequest
) -> ToolOutcome:
    """The result of a call to an engine's tool that the context's mode does
    not offer (other names get the "unknown tool" result of
    :func:`~turnfsm.tools.run_calls`): not run, and the model is told why."""
    available = ", ".join(offered.names) or "(none)"
    mode = rt.ctx.config.mode
    allowed = rt.ctx.config.tools
    if d.mode(rt.ctx) is None:
        why = f"tool {call.tool_name!r} is not offered: mode {mode!r} is unknown to this engine"
    elif allowed is not None and call.tool_name not in allowed:
        why = f"tool {call.tool_name!r} is not among this context's tools"
    else:
        why = f"tool {call.tool_name!r} is not offered in mode {mode!r}"
    return ToolOutcome(
        False, {"error": f"{why}; available tools: {available}", "status": "not_offered"}
    )
