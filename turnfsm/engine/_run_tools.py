"""The ``run_tools`` effect (ExecutingTools): run the approved calls and record
one result per call, in the order asked; then ``tools_done``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from ..events import ToolApprovalRequested
from ..model import SUBTASK_WAITING, ApprovalStatus, ToolCallRequest
from ..model._context import turn_progress
from ..states import Trigger
from ..tools import ToolOutcome, ToolRegistry, hosting, run_calls
from . import _history, _steps
from ._client_view import is_client_call
from ._host import Host
from ._observing import _observers
from ._runtime import Runtime
from ._turn import StopReason

__all__ = ["run_tools"]

# read once: on Python 3.11 each read of a member on its enum class goes
# through ``EnumType.__getattr__``'s hook
_APPROVED = ApprovalStatus.APPROVED
_TOOLS_DONE = Trigger.TOOLS_DONE


async def run_tools(d: Host, rt: Runtime) -> None:
    """ExecutingTools: run the approved calls; one result per call, in the order
    asked. Calls of the client's tools are not run: once the others have their
    results, they wait for the client (``client_calls``)."""
    ctx = rt.ctx
    # plain loops, not comprehensions: each of those is a call of its own
    # (Python 3.11), and every tool-loop turn runs them
    open_calls = ctx.open_tool_calls()
    calls: list[ToolCallRequest] = []  # the engine's, not the client's
    to_run: list[ToolCallRequest] = []
    started: list[str] = []
    for c in open_calls:
        if is_client_call(c):
            continue
        calls.append(c)
        if c.approval_status is _APPROVED:
            to_run.append(c)
            started.append(c.id)
    for_client = len(calls) != len(open_calls)
    ids = tuple(started)
    if ids != ctx.progress.started_call_ids:  # resumed: record the attempt first
        ctx.progress = dataclasses.replace(ctx.progress, started_call_ids=ids)
        await d.commit(rt)
    offered = d.settings.offered(ctx)
    refused: dict[str, ToolOutcome] = {}
    for c in to_run:
        if c.tool_name not in offered and c.tool_name in d.settings.tools:
            refused[c.id] = _not_offered(d, rt, offered, c)
    if refused:
        to_run = [c for c in to_run if c.id not in refused]
    ran: Iterator[ToolOutcome] = iter(())
    waiting = None
    # sub-task tools run their children through the host; a batch run where no
    # tool is one sets none (the context variable's set and reset, and no
    # context manager at all), and leaves no child waiting
    host = d.subtask_host if offered.hosts else None
    if to_run:
        watch = rt.watch
        if host is not None:
            with hosting(host, ctx.id):
                try:
                    ran = iter(
                        await run_calls(offered, to_run)
                        if watch is None
                        else await _observers.run_calls(rt, offered, to_run)
                    )
                finally:
                    # taken also when the batch is cancelled or fails: a wait
                    # left behind would be read by the context's next batch
                    waiting = host.take_waiting(ctx.id)
        elif watch is None:
            ran = iter(await run_calls(offered, to_run))
        else:
            ran = iter(await _observers.run_calls(rt, offered, to_run))
    outcomes: list[ToolOutcome] = []
    for c in calls:
        if c.id in refused:
            outcomes.append(refused[c.id])
        elif c.approval_status is _APPROVED:
            outcomes.append(next(ran))
        else:
            denied = {"error": f"denied: {c.reason}" if c.reason else "denied", "status": "denied"}
            outcomes.append(ToolOutcome(False, denied))
    if waiting:  # sub-task calls whose children wait for a human
        wait_for_subtasks(d, rt, calls, outcomes, waiting)
        return
    _steps.add_results(rt, calls, outcomes)
    if for_client:
        hand_to_client(d, rt)
        return
    p = ctx.progress
    ctx.progress = turn_progress(
        iteration=p.iteration + 1, attempt=1, output=p.output, client=p.client
    )
    _steps.fire(rt, _TOOLS_DONE)


def _not_offered(d: Host, rt: Runtime, offered: ToolRegistry, call: ToolCallRequest) -> ToolOutcome:
    """The result of a call to an engine's tool that the context's mode does
    not offer (other names get the "unknown tool" result of
    :func:`~turnfsm.tools.run_calls`): not run, and the model is told why."""
    available = ", ".join(offered.names) or "(none)"
    mode = rt.ctx.config.mode
    allowed = rt.ctx.config.tools
    if d.settings.mode(rt.ctx) is None:
        why = f"tool {call.tool_name!r} is not offered: mode {mode!r} is unknown to this engine"
    elif allowed is not None and call.tool_name not in allowed:
        why = f"tool {call.tool_name!r} is not among this context's tools"
    else:
        why = f"tool {call.tool_name!r} is not offered in mode {mode!r}"
    return ToolOutcome(
        False, {"error": f"{why}; available tools: {available}", "status": "not_offered"}
    )


def wait_for_subtasks(
    d: Host,
    rt: Runtime,
    calls: Sequence[ToolCallRequest],
    outcomes: Sequence[ToolOutcome],
    waiting: dict[str, tuple[str, tuple[ToolCallRequest, ...]]],
) -> None:
    """ExecutingTools, when sub-task calls wait for their children: the other
    calls get their results, the waiting ones are pending again (their reason
    names the child), and the context takes ``subtask_waits`` to
    AwaitingToolApproval, where the children's pending calls surface."""
    done = [(c, o) for c, o in zip(calls, outcomes, strict=True) if c.id not in waiting]
    if done:
        _steps.add_results(rt, [c for c, _ in done], [o for _, o in done])
    _history.back_to_pending(
        rt, {cid: SUBTASK_WAITING + child for cid, (child, _) in waiting.items()}
    )
    rt.stop_reason = StopReason.AWAITING_APPROVAL
    _steps.fire(rt, Trigger.SUBTASK_WAITS)
    surfaced = [c for _, pending in waiting.values() for c in pending]
    _steps.later(rt, ToolApprovalRequested, calls=surfaced)
    _steps.end_turn(rt)


def hand_to_client(d: Host, rt: Runtime) -> None:
    """ExecutingTools, once the engine's calls of the batch have their results:
    the calls of the client's tools wait for the client (``client_calls``)."""
    ctx = rt.ctx
    ctx.progress = _history.started(ctx.progress, ())
    rt.stop_reason = StopReason.CLIENT_TOOLS
    _steps.fire(rt, Trigger.CLIENT_CALLS)
    _steps.end_turn(rt)
