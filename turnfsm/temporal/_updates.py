"""How the client's engine runs a call on a context's workflow: as an Update
(update-with-start), made again while the context settles or its workflow is
not ready, within a deadline (docs/temporal.md, "When Temporal does not
answer"). :class:`WorkflowUpdates` is :class:`~._client.TemporalEngine`'s
runner (:data:`~._turns.Runner`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import anyio
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError

from ..engine import Turn
from ..engine._accepted import ON_ACCEPTED
from ..errors import ContextBusy, TurnFSMError
from ..states import RESTING, State
from ..storage import Store
from ..storage._base import ContextHeads
from . import _codec, _faults
from ._config import WORKFLOW_NAME, workflow_id
from ._faults import WorkflowNotReady, bounded, result_of

__all__ = ["SETTLING", "WorkflowUpdates"]

_LOOK_FIRST = 0.02
"""Seconds before the first look at the store once a call was accepted."""
_LOOK_MAX = 0.25
"""The longest wait between two looks (the wait doubles up to it)."""

SETTLING = 1.5
"""Seconds a call refused as busy while the store shows the context at rest
is made again before it is ``ContextBusy`` (see :meth:`WorkflowUpdates.call`)."""
_SETTLE_PAUSES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.72)


_NOT_READY_FIRST = 0.1
"""Seconds before a call refused as ``WorkflowNotReady`` is made again (the
wait doubles, up to :data:`_NOT_READY_MAX`, within ``ACCEPT_WITHIN``)."""
_NOT_READY_MAX = 2.0


class _Settling(Exception):
    """Refused as busy by the workflow while the store shows rest: again."""


async def _taken(start: WithStartWorkflowOperation[Any, Any]) -> None:
    """Read the outcome of an update-with-start's start operation. The SDK
    keeps a failed start's error in a future of the operation: one never
    read is logged with a traceback when it is collected ("Future exception
    was never retrieved"). Once the call is over the future is done, and
    awaiting it does not wait; its error may be the cancel the SDK was given
    (our deadline), kept there, not this task's."""
    with anyio.move_on_after(0), contextlib.suppress(Exception, anyio.get_cancelled_exc_class()):
        await start.workflow_handle()


class WorkflowUpdates:
    """The calls of one client on the contexts' workflows, on one task queue;
    ``store`` is the read model it watches, ``unload`` drops the engine's
    loaded copy of a context whose workflow changes it."""

    def __init__(
        self, client: Client, store: Store, task_queue: str, unload: Callable[[str], None]
    ) -> None:
        self._client = client
        self._store = store
        self._task_queue = task_queue
        self._unload = unload

    async def _head(self, context_id: str) -> tuple[str, int] | None:
        """The context's state and version as last committed (one row where
        the store reads heads); None when the store cannot say."""
        store = self._store
        try:
            if isinstance(store, ContextHeads):
                return await store.head(context_id)
            ctx = await store.load(context_id)
        except TurnFSMError:
            return None
        return ctx.current_state, ctx.version

    async def _version(self, context_id: str) -> int | None:
        """The context's version as last committed (None: no such context)."""
        head = await self._head(context_id)
        return None if head is None else head[1]

    async def _until_moved(self, context_id: str, version: int | None) -> None:
        """Until the store holds a commit of the context past ``version``."""
        delay = _LOOK_FIRST
        while True:
            await anyio.sleep(delay)
            now = await self._version(context_id)
            if now is not None and (version is None or now > version):
                return
            delay = min(delay * 2, _LOOK_MAX)

    async def turn(self, context_id: str, name: str, args: dict[str, Any]) -> Turn:
        """The Update ``name`` on the context's workflow: its Turn (a :data:`~._turns.Runner`)."""
        return _codec.turn_from(await self.call(context_id, name, args))

    async def call(self, context_id: str, name: str, args: dict[str, Any]) -> Any:
        """The Update ``name`` on the context's workflow (started on first
        use): its result as data, or the engine's error raised here.

        The store shows a context at rest a moment before its workflow has
        ended the call that put it there (the last commit is in; the
        workflow has yet to hear of it). A call the workflow refuses as busy
        while the store shows the context at rest is made again, a few
        times over :data:`SETTLING` seconds, before it is ``ContextBusy``.
        One the server refuses because the workflow's last task failed
        (``WorkflowNotReady``) is made again too, less and less often.

        The Update is accepted (or refused) within :data:`~turnfsm.temporal._faults.ACCEPT_WITHIN`
        seconds, those tries included, or the call is ``TemporalUnavailable``
        (docs/temporal.md, "When Temporal does not answer")."""
        deadline = anyio.current_time() + _faults.ACCEPT_WITHIN
        settle = list(_SETTLE_PAUSES)
        wait = _NOT_READY_FIRST
        while True:
            try:
                settling = bool(settle)
                return await self._call_once(context_id, name, args, deadline, settling=settling)
            except _Settling:
                pause = settle.pop(0)
                if anyio.current_time() + pause >= deadline:
                    settle.clear()  # no time left to settle: the last try says busy
                    continue
            except WorkflowNotReady:  # its last workflow task failed: Temporal retries it
                pause, wait = wait, min(wait * 2, _NOT_READY_MAX)
                if anyio.current_time() + pause >= deadline:
                    raise
            await anyio.sleep(pause)

    async def _resting(self, context_id: str) -> bool:
        """Whether the store shows the context at rest (False: it cannot say)."""
        head = await self._head(context_id)
        return head is not None and State(head[0]) in RESTING

    async def _call_once(
        self,
        context_id: str,
        name: str,
        args: dict[str, Any],
        deadline: float,
        *,
        settling: bool,
    ) -> Any:
        self._unload(context_id)  # the workflow changes it: read it from the store
        # a caller that answers before the turn rests (serve's 202) is told
        # once the call is under way: its first step is in the store, as the
        # other hosts tell it (refused or failed before that: its error)
        announce = ON_ACCEPTED.get()
        before = await self._version(context_id) if announce is not None else None
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            WORKFLOW_NAME,
            {"context_id": context_id},
            id=workflow_id(context_id),
            task_queue=self._task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        left = max(deadline - anyio.current_time(), 0.1)
        try:
            # the workflow validates the call (a busy or missing context is
            # refused here, with the engine's error) and accepts it; the SDK
            # sends the Update again until it is accepted, so the deadline
            # is ours (the request's own makes the server answer before it)
            handle = await bounded(
                self._client.start_update_with_start_workflow(
                    name,
                    args,
                    start_workflow_operation=start,
                    wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                    rpc_timeout=timedelta(seconds=left),
                ),
                left + _faults.GRACE,
                accepted=None,
            )
            # accepted, or refused by a validator: a refusal's outcome came with
            # the handle, and result() raises it without asking the server, so
            # a server that cannot be reached from here on had accepted the call
            if announce is None:
                data = await result_of(self._client, handle)
            else:
                data = await self._announced(context_id, handle, before, announce)
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.details:
                refused = _codec.error_from(cause.details[0])
                at_the_door = list(cause.details[1:]) == [_codec.NOT_ADMITTED]
                if (
                    settling
                    and at_the_door
                    and isinstance(refused, ContextBusy)
                    and await self._resting(context_id)
                ):
                    raise _Settling from None
                raise refused from None
            raise
        finally:
            await _taken(start)
            self._unload(context_id)
        return data

    async def _announced(
        self, context_id: str, handle: Any, before: int | None, announce: Any
    ) -> Any:
        """The Update's result; ``announce()`` meanwhile, once the store holds
        the call's first step, or :data:`~turnfsm.temporal._faults.FIRST_STEP_WITHIN` seconds after
        the call was accepted (not if the call ends, or fails, before)."""
        result: Any = None
        failed: BaseException | None = None
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                with anyio.move_on_after(_faults.FIRST_STEP_WITHIN):
                    try:
                        await self._until_moved(context_id, before)
                    except Exception:  # the store cannot say: accepted, all the same
                        await anyio.sleep_forever()
                announce()

            tg.start_soon(watch)
            try:
                result = await result_of(self._client, handle)
            except BaseException as exc:  # raised as itself, not in a group
                failed = exc
            finally:
                tg.cancel_scope.cancel()
        if failed is not None:
            raise failed
        return result
