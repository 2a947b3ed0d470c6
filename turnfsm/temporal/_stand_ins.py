"""The stand-ins a workflow gives the engine it holds for its I/O: the
store (:class:`WorkflowStore`: loads and commits as activities, no leases)
and the LLM (:class:`WorkflowLLM`: the ``turnfsm.llm`` activity, its chunks
yielded as an adapter's stream). See docs/temporal.md, "The table inside the
workflow"."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, Protocol

from temporalio import workflow
from temporalio.common import RetryPolicy as ActivityRetry
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    import anyio
    import anyio.lowlevel

    from ..engine import Engine
    from ..model import ChatContext, LLMRequest, TextDelta, ThinkingDelta, ToolCallDelta
    from ..states import State
    from ..storage import Commit, ContextSummary, Lease
    from ..storage._base import TakesLeases
    from . import _codec
    from ._children import retrieved
    from ._config import WorkerConfig
    from ._host import Clock

__all__ = ["STORE_RETRY", "Hosting", "WorkflowLLM", "WorkflowStore", "activity"]

STORE_RETRY = ActivityRetry(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5)
)
_AWAITING_LLM = State.AWAITING_LLM_RESPONSE.value


class Hosting(Protocol):
    """What the stand-ins read of the workflow that holds them."""

    config: WorkerConfig
    clock: Clock
    engine: Engine

    def take_rows(self) -> list[Any]: ...

    def rows_of_commit(self, context_id: str) -> list[Any]: ...


def _raise_definite(err: ActivityError) -> None:
    """The engine's own error, when the activity failed with one."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.details:
        raise _codec.error_from(cause.details[0]) from None


async def activity(name: str, args: list[Any], **options: Any) -> Any:
    """Run an activity in a task of its own and await it shielded: a cancel of
    the caller (the engine's cancel scope, an anyio one) leaves at once and
    asks Temporal, once, to cancel the activity. (Awaited directly, the SDK
    holds the await until Temporal has settled the cancel, while anyio
    delivers the cancel again on every turn of the loop: the workflow would
    spin without yielding.)"""
    task = asyncio.ensure_future(workflow.execute_activity(name, args=args, **options))
    task.add_done_callback(retrieved)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        raise


class WorkflowStore(TakesLeases):
    """The store as the workflow's engine sees it: loads and commits are
    activities; leases are the workflow's own (it is the one owner)."""

    def __init__(self, wf: Hosting) -> None:
        self._wf = wf

    async def load(self, context_id: str) -> ChatContext:
        try:
            data = await activity(
                "turnfsm.load",
                args=[context_id, self._wf.take_rows()],
                start_to_close_timeout=self._wf.config.store_timeout,
                retry_policy=STORE_RETRY,
            )
        except ActivityError as err:
            _raise_definite(err)
            raise
        return _codec.context_from(data)

    async def commit(self, commit: Commit) -> None:
        commit = dataclasses.replace(
            commit, lease_token=None, lease_owner=None, take_lease=None, release_lease=False
        )
        try:
            await activity(
                "turnfsm.commit",
                args=[
                    _codec.commit_to(commit),
                    self._wf.take_rows(),
                    self._wf.rows_of_commit(commit.context_id),
                ],
                start_to_close_timeout=self._wf.config.store_timeout,
                retry_policy=STORE_RETRY,
            )
        except ActivityError as err:
            _raise_definite(err)
            raise

    async def _contexts(self, op: str, arg: Any) -> Any:
        try:
            return await activity(
                "turnfsm.contexts",
                args=[op, arg, self._wf.take_rows()],
                start_to_close_timeout=self._wf.config.store_timeout,
                retry_policy=STORE_RETRY,
            )
        except ActivityError as err:
            _raise_definite(err)
            raise

    async def create(self, context: ChatContext) -> None:
        """A sub-task's child (its turns run in this workflow, by this engine)."""
        await self._contexts("create", _codec.context_to(context))

    async def delete(self, context_id: str) -> None:
        await self._contexts("delete", context_id)

    async def list_contexts(self) -> list[ContextSummary]:
        from .. import records

        return [records.from_python(ContextSummary, s) for s in await self._contexts("list", None)]

    async def _take_lease(self, wanted: Lease, now: float, take_over: int | None) -> int:
        # token 1 every time: the engine then loads the context afresh for each
        # call (the store is the truth; REST calls may have changed it)
        return 1

    async def lease(self, context_id: str) -> Lease | None:
        return None

    async def release_lease(self, lease: Lease) -> None:
        return None

    async def renew_lease(self, lease: Lease, ttl: float, *, now: float) -> Lease:
        return dataclasses.replace(lease, expires_at=now + ttl)

    async def aclose(self) -> None:
        return None


class WorkflowLLM:
    """The LLM as the workflow's engine sees it: one ``turnfsm.llm`` activity
    per attempt, its chunks yielded as the adapter yielded them."""

    def __init__(self, wf: Hosting) -> None:
        self._wf = wf

    async def stream(self, request: LLMRequest) -> AsyncIterator[Any]:
        wf = self._wf
        rt = wf.engine._host_seam.runtime(request.context_id)
        # a turn's own call streams to the context's readers; a compaction's
        # or a sub-context's summary (the child at rest) is read by nobody
        streamed = (
            request.metadata.get("purpose") != "compaction"
            and rt is not None
            and rt.holder.state == _AWAITING_LLM
        )
        seq = rt.seq if rt is not None else 0
        message_id = (rt.partial_id or "") if rt is not None and streamed else ""
        task = asyncio.ensure_future(
            workflow.execute_activity(
                "turnfsm.llm",
                args=[_codec.request_to(request), seq, message_id, streamed, wf.take_rows()],
                start_to_close_timeout=wf.config.llm_timeout,
                heartbeat_timeout=wf.config.heartbeat_timeout,
                retry_policy=STORE_RETRY,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        )
        task.add_done_callback(retrieved)
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            # the turn is cancelled mid-call: the activity returns what had
            # arrived; the engine reads it (as the deltas it would have read by
            # now in-process) and then the cancel, keeping the partial text
            # (each await on the way is the engine's shielded commit)
            task.cancel()
            arrived: dict[str, Any] = {"chunks": []}
            # nothing came back (the activity failed): the cancel as it is
            with (
                anyio.CancelScope(shield=True),
                contextlib.suppress(ActivityError, asyncio.CancelledError),
            ):
                arrived = await asyncio.shield(task)
            started_at = arrived.get("started_at")
            for chunk in arrived["chunks"]:
                if started_at is not None:
                    async for first in self._first(chunk, started_at):
                        yield first
                    started_at = None
                    continue
                yield _codec.chunk_from(chunk)
            raise
        cancel_at = result["cancel_at"]
        # the stream_started step as the LLM activity kept it in the event log
        # (None: no delta was rung; and in histories older than it)
        started_at = result.get("started_at")
        for i, chunk in enumerate(result["chunks"]):
            if i == cancel_at:
                await _cancel(request)
            if started_at is not None:
                async for first in self._first(chunk, started_at):
                    yield first
                started_at = None
                continue
            yield _codec.chunk_from(chunk)
        if started_at is not None:  # kept by an attempt lost, and this one rang no delta
            async for first in self._first(None, started_at):
                yield first
        if cancel_at is not None and cancel_at >= len(result["chunks"]):
            await _cancel(request)
        if result["error"] is not None:
            raise _codec.error_from(result["error"])

    async def _first(self, chunk: Any, started_at: float) -> AsyncIterator[Any]:
        """``chunk`` (data, or None), read by the engine at the time
        ``started_at`` of the ``stream_started`` step the LLM activity kept in
        the event log: the engine's step then has that time, and its commit
        writes the row the log holds. A chunk that is no delta (an attempt
        lost after it rang, and this one answered at once or failed) comes
        after an empty text delta: the step the log holds is taken all the same."""
        clock = self._wf.clock
        first = _codec.chunk_from(chunk) if chunk is not None else None
        delta = first is not None and type(first) in (TextDelta, ThinkingDelta, ToolCallDelta)
        clock.pinned = started_at
        try:
            yield first if delta else TextDelta("")
        finally:
            clock.pinned = None
        if first is not None and not delta:
            yield first


async def _cancel(request: LLMRequest) -> None:
    """What the adapter did in the activity: ask for the turn's cancel, and
    give the engine the chance to act on it."""
    request.request_cancel()
    await anyio.lowlevel.checkpoint()
