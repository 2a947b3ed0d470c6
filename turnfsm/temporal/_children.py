"""A workflow's sub-task children: each runs its turns in a workflow of its
own, a child workflow of its parent's.

The parent's workflow holds a :class:`WorkflowEngine`: its calls on another
context than the workflow's own are those of the engine's sub-task runner
(the child's task sent, the child resumed, the decisions taken on the parent
routed to it), and :class:`Children` sends them to that context's workflow
as the ``call`` signal and waits, holding no worker, for the ``reply``
signal: the child's Turn or the engine's error. A child deleted after its
summary gets the ``end`` signal. See docs/temporal.md, "Sub-tasks: child
workflows".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import FailureError, WorkflowAlreadyStartedError
from temporalio.workflow import ChildWorkflowCancellationType, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    import anyio

    from ..engine import Engine, Turn
    from ..engine._subcontexts._lifecycle import SubContexts
    from ..errors import SubContextError
    from . import _codec
    from ._config import WORKFLOW_NAME, workflow_id
    from ._turns import Runner, WorkflowTurns

__all__ = [
    "OPS",
    "SUBTASK_PATCH",
    "ChildSubContexts",
    "ChildTurns",
    "Children",
    "WorkflowEngine",
    "reply",
    "retrieved",
]

SUBTASK_PATCH = "turnfsm-subtask-child-workflows"
"""The ``workflow.patched`` name of sub-tasks as child workflows: a
workflow's calls on a sub-task's child go to the child's own workflow. A
history made before it (the child's turns run by the parent's workflow)
replays on the old path."""

Op = Callable[[Engine, str, dict[str, Any]], Awaitable[Turn]]

OPS: dict[str, Op] = {
    "send": lambda e, cid, a: e.send(
        cid,
        _codec.parts_from(a["content"]),
        a["role"],
        message_id=a["message_id"],
        context=_codec.inbound_from(a.get("context")),
    ),
    "approve": lambda e, cid, a: e.approve(cid, a["call_ids"]),
    "deny": lambda e, cid, a: e.deny(cid, a["call_ids"], a["reason"]),
    "answer": lambda e, cid, a: e.answer(cid, a["call_id"], a["text"]),
    "cancel": lambda e, cid, a: e.cancel(cid),
    "retry": lambda e, cid, a: e.retry(cid),
    "reset": lambda e, cid, a: e.reset(cid),
    "request": lambda e, cid, a: e.send_request(a["body"], cid),
    "resume": lambda e, cid, a: e.resume(cid),
}
"""The calls a workflow runs on its context, by name: its Updates, and the
``call`` signal a parent's workflow sends a sub-task's child."""


def retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # no "never retrieved" log for an abandoned one


async def _settled(aw: Awaitable[Any]) -> Any:
    """Await a short Temporal command (a child's start, a signal) to its end,
    a cancel of the caller notwithstanding: it is not taken back half-way
    (a cancelled start would ask Temporal to cancel the child)."""
    task = asyncio.ensure_future(aw)
    task.add_done_callback(retrieved)
    with anyio.CancelScope(shield=True):
        return await asyncio.shield(task)


async def _until(done: Callable[[], bool]) -> None:
    """``workflow.wait_condition`` in a task of its own, awaited shielded (as
    the workflow awaits its activities): a cancel leaves at once."""
    task = asyncio.ensure_future(workflow.wait_condition(done))
    task.add_done_callback(retrieved)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        raise


class Children:
    """The child workflows one run of a workflow calls, and their replies."""

    def __init__(self) -> None:
        self.replies: dict[str, dict[str, Any]] = {}
        """What the children's workflows answered, by call token."""
        self.handles: dict[str, Any] = {}
        """Handles on the child workflows this run has called, by context id."""

    async def _handle(self, child_id: str, *, again: bool = False) -> Any:
        """A handle on the workflow of ``child_id``: started as this
        workflow's child (the same workflow type and task queue; it outlives
        this run, which continues as new between calls: ``ABANDON``), or,
        running already, an external handle on it."""
        handle = None if again else self.handles.get(child_id)
        if handle is not None:
            return handle
        wid = workflow_id(child_id)
        try:
            handle = await _settled(
                workflow.start_child_workflow(
                    WORKFLOW_NAME,
                    {"context_id": child_id},
                    id=wid,
                    task_queue=workflow.info().task_queue,
                    parent_close_policy=ParentClosePolicy.ABANDON,
                    cancellation_type=ChildWorkflowCancellationType.ABANDON,
                )
            )
            handle.add_done_callback(retrieved)  # its end: nobody waits for it
        except WorkflowAlreadyStartedError:
            handle = workflow.get_external_workflow_handle(wid)
        self.handles[child_id] = handle
        return handle

    async def _send(self, child_id: str, message: dict[str, Any]) -> Any:
        """Send ``message`` as the ``call`` signal to the child's workflow
        (started again once should the one known have ended); its handle."""
        handle = await self._handle(child_id)
        try:
            await _settled(handle.signal("call", message))
        except FailureError:  # that run ended: a fresh start, once
            handle = await self._handle(child_id, again=True)
            await _settled(handle.signal("call", message))
        return handle

    async def call(self, child_id: str, op: str, args: dict[str, Any]) -> Turn:
        """Run ``op`` on a sub-task's child in the child's workflow: the
        ``call`` signal, then wait (holding no worker) for its ``reply``, the
        child's Turn or the engine's error. A cancel of this workflow's call
        meanwhile is sent on to the child, whose call ends with it."""
        token = workflow.uuid4().hex
        message = {"op": op, "args": args, "token": token, "reply_to": workflow.info().workflow_id}
        try:
            handle = await self._send(child_id, message)
        except FailureError as err:
            raise SubContextError(child_id, f"its workflow cannot be reached ({err})") from None
        try:
            await _until(lambda: token in self.replies)
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=True):
                await self._cancel(handle, token)
            raise
        data = self.replies.pop(token)
        if "error" in data:
            raise _codec.error_from(data["error"])
        return _codec.turn_from(data["turn"])

    async def _cancel(self, handle: Any, token: str) -> None:
        """The child's running call (``token``) cancelled, and both replies
        taken (the cancelled call's and the cancel's)."""
        if token in self.replies:  # it had ended: nothing to cancel
            self.replies.pop(token)
            return
        cancel = workflow.uuid4().hex
        message = {"op": "cancel", "args": {}, "token": cancel}
        message["reply_to"] = workflow.info().workflow_id
        try:
            await _settled(handle.signal("call", message))
        except FailureError:  # its workflow is gone: nothing runs there
            return
        await _settled(workflow.wait_condition(lambda: {token, cancel} <= self.replies.keys()))
        self.replies.pop(token)
        self.replies.pop(cancel)

    async def end(self, child_id: str) -> None:
        """A sub-task's child deleted: its workflow ends (``end``); one that
        is not running (never started, or ended) needs nothing."""
        handle = self.handles.pop(child_id, None)
        if handle is None:
            handle = workflow.get_external_workflow_handle(workflow_id(child_id))
        with contextlib.suppress(FailureError):
            await _settled(handle.signal("end"))


async def reply(to: str, token: str, out: dict[str, Any]) -> None:
    """The child's side: the result of a parent's ``call`` (``{"turn": ...}``
    or ``{"error": ...}``) sent back to the workflow ``to``, as the ``reply``
    signal with the call's ``token``."""
    with contextlib.suppress(FailureError):  # the parent's workflow is gone
        await workflow.get_external_workflow_handle(to).signal("reply", {"token": token, **out})


_CHILD_OPS = frozenset({"send", "resume", "approve", "deny", "answer"})
"""The calls a sub-task's runner makes on a child."""


class ChildTurns(WorkflowTurns):
    """The turn calls of a :class:`WorkflowEngine` (its part): a sub-task's
    call on a context other than the workflow's own runs in that context's
    workflow; every other runs here."""

    def _runner(self, context_id: str, op: str) -> Runner | None:
        engine: WorkflowEngine = self.calls.engine
        if op in _CHILD_OPS and engine.elsewhere(context_id):
            return engine.on_child
        return None


class ChildSubContexts(SubContexts):
    """The sub-context calls of a :class:`WorkflowEngine` (its part): a
    child deleted after its summary ends its workflow."""

    async def ended(self, context_id: str, deleted: list[str]) -> None:
        engine: WorkflowEngine = self.calls.engine
        if engine.elsewhere(context_id):
            for cid in deleted:
                await engine.child_workflows.end(cid)


class WorkflowEngine(Engine):
    """The workflow's engine. Its calls on another context than the
    workflow's own (``home``) are those of a sub-task (``SubtaskRunner``:
    the child's task sent, the child resumed, decisions routed to it): they
    go to that context's workflow, a child workflow (:class:`Children`), so
    the child's turns run, and wait, there (its part :class:`ChildTurns`).
    Deleting a child after its summary ends its workflow
    (:class:`ChildSubContexts`)."""

    _turn_calls = ChildTurns
    _subcontext_calls = ChildSubContexts
    home: str
    child_workflows: Children

    def elsewhere(self, context_id: str) -> bool:
        """Whether calls on the context run in a workflow of their own."""
        # (patched() only here: a workflow without sub-tasks records no marker)
        return context_id != self.home and workflow.patched(SUBTASK_PATCH)

    async def on_child(self, child_id: str, op: str, args: dict[str, Any]) -> Turn:
        """Run ``op`` on a sub-task's child in the child's workflow."""
        seam = self._host_seam
        seam.unload(child_id)  # its workflow changes it: read it from the store
        try:
            return await self.child_workflows.call(child_id, op, args)
        finally:
            seam.unload(child_id)
