"""A worker: the context workflows and their activities, polling one task queue."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import timedelta
from types import TracebackType
from typing import Any

import anyio
import anyio._backends._asyncio  # outside the sandbox: see PASSED_THROUGH
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from ..adapters.llm import LLM
from ..storage import Store, open_store
from ..storage._eventlog import open_event_log
from ..storage._logtypes import EventLog
from ..tools import Tool, ToolRegistry, Toolset, merge_tools
from . import _codec
from ._activities import Activities
from ._config import DEFAULT_TASK_QUEUE, REPLAY, WorkerConfig, register
from ._payloads import THRESHOLD, data_converter_for, payload_table, with_payloads
from ._workflow import ContextWorkflow

__all__ = ["PASSED_THROUGH", "TemporalWorker", "replayer", "sandbox"]

PASSED_THROUGH = (
    "turnfsm",
    "pydantic",
    "pydantic_core",
    "transitions",
    "anyio",
    "sniffio",
    "structlog",
    "tenacity",
    "jsonschema",
)
"""Modules the workflow sandbox takes from the worker's process instead of
importing them again for each workflow. The engine is deterministic given
its clock and ids, which the workflow supplies; anyio runs on the
workflow's event loop (its asyncio backend is imported above, outside the
sandbox, which would refuse its use of ``threading``). ``jsonschema`` is
imported by the engine only for the first output type given as a JSON Schema,
which may come after the workflow's first load: the sandbox refuses a module
of its own imported that late, so it is taken from the worker's process."""


def sandbox() -> SandboxedWorkflowRunner:
    """The workflow runner of a turnfsm worker (and of a replay of its histories)."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    )


def replayer(
    *,
    tools: Iterable[Tool] = (),
    store: Store | None = None,
    data_converter: DataConverter = DataConverter.default,
    **engine_options: Any,
) -> Replayer:
    """A ``Replayer`` of context workflows, whose engine is made with ``tools``
    and ``engine_options`` as a :class:`TemporalWorker`'s (the tools' names,
    schemas, approval and idempotence are what a replay decides by; their
    functions never run). ``await replayer(...).replay_workflow(history)``
    raises Temporal's ``NondeterminismError`` when today's code decides
    otherwise than the code that made ``history``.

    ``store``: the workers' store (open; the caller closes it), which holds
    the payloads a history refers to (docs/temporal.md, "Contexts of any
    size"); without it, a history holding such a reference fails to replay
    with ``PayloadNotFound``, which says so. ``data_converter``: the
    workers' clients' own (turnfsm's codec is chained after its codec)."""
    register(REPLAY, WorkerConfig(tools=tuple(tools), engine_options=dict(engine_options)))
    _codec.warm()
    table = payload_table(store) if store is not None else None
    return Replayer(
        workflows=[ContextWorkflow],
        workflow_runner=sandbox(),
        data_converter=data_converter_for(data_converter, table),
    )


class TemporalWorker:
    """Runs the context workflows and the activities of one task queue.

    ``store``: the store every worker and the server share (a SQLite file or
    a PostgreSQL URL); ``llm`` and ``tools``: what the turns call;
    ``toolsets``: more tools, started with the worker (MCP servers), run by
    its activities; their list as it is when a workflow is made is what that
    workflow offers;
    ``event_log``: where events go for the server's streams (the store's own
    by default, as ``turnfsm worker``'s relay writes them; None: nowhere).
    ``client`` is used through a copy whose payload codec keeps every payload
    over ``payload_threshold`` bytes in the store (after the client's own
    codec, if any; ``None``: none is moved, references are still read), as
    :class:`TemporalEngine` does (docs/temporal.md, "Contexts of any size").
    ``engine_options``: what ``Engine`` takes besides ``llm``, ``tools``,
    ``store``, ``clock`` and ``ids`` (``modes``, ``retry``, ``max_iterations``,
    ``tool_history_rounds``, ``compaction``, ``token_budget``, ``enhancers``).
    The workflow's engine is made with them, so they must be the same on
    every worker of a task queue.

    ``async with TemporalWorker(...):`` polls until the block ends;
    :meth:`run` polls until :meth:`shutdown` (or cancellation).
    """

    def __init__(
        self,
        client: Client,
        *,
        store: Store | str,
        llm: LLM | None,
        tools: Iterable[Tool] = (),
        task_queue: str = DEFAULT_TASK_QUEUE,
        toolsets: Iterable[Toolset] = (),
        event_log: EventLog | str | None = "store",
        identity: str | None = None,
        heartbeat_timeout: timedelta = timedelta(seconds=10),
        history_limit: int = 10_000,
        max_concurrent_activities: int = 100,
        graceful_shutdown_timeout: timedelta = timedelta(0),
        payload_threshold: int | None = THRESHOLD,
        **engine_options: Any,
    ) -> None:
        _codec.warm()
        self.store = open_store(store) if isinstance(store, str) else store
        client = with_payloads(client, self.store, payload_threshold)
        tools = tuple(tools)
        self._own_tools = tools
        self._toolsets = tuple(toolsets)
        self.config = WorkerConfig(
            tools=tools,
            engine_options=dict(engine_options),
            heartbeat_timeout=heartbeat_timeout,
            history_limit=history_limit,
        )
        self.task_queue = task_queue
        register(task_queue, self.config)
        self._event_log: EventLog | None = (
            open_event_log(self.store) if event_log == "store" else event_log  # type: ignore[assignment]
        )
        self.activities = Activities(
            store=self.store,
            llm=llm,
            tools=ToolRegistry(tools),
            event_log=self._event_log,
            heartbeat=max(heartbeat_timeout.total_seconds() / 4, 0.05),
        )
        options: dict[str, Any] = {}
        if identity is not None:
            options["identity"] = identity
        self._worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[ContextWorkflow],
            activities=self.activities.all(),
            workflow_runner=sandbox(),
            max_concurrent_activities=max_concurrent_activities,
            graceful_shutdown_timeout=graceful_shutdown_timeout,
            **options,
        )
        self._opened = False

    @property
    def worker(self) -> Worker:
        """The SDK's worker."""
        return self._worker

    async def _open(self) -> None:
        if self._opened:
            return
        self._opened = True
        if self._event_log is not None:
            await self._event_log.open()
        for toolset in self._toolsets:
            await toolset.start()
            toolset.on_change(self._tools_changed)
        if self._toolsets:
            self._set_tools(merge_tools(self._own_tools, self._toolsets, strict=True))

    def _tools_changed(self) -> None:
        self._set_tools(merge_tools(self._own_tools, self._toolsets, strict=False))

    def _set_tools(self, tools: list[Tool]) -> None:
        """The worker's tools, its own and its toolsets' as last listed: for the
        activities at once, for the workflows made from now on."""
        self.config = dataclasses.replace(self.config, tools=tuple(tools))
        register(self.task_queue, self.config)
        self.activities.tools = ToolRegistry(tools)

    async def _close(self) -> None:
        for toolset in reversed(self._toolsets):
            with anyio.CancelScope(shield=True):
                await toolset.aclose()

    async def run(self) -> None:
        """Poll until :meth:`shutdown` is called or the task is cancelled."""
        await self._open()
        try:
            await self._worker.run()
        finally:
            await self._close()

    async def shutdown(self) -> None:
        """Stop polling; running activities finish or are handed back to Temporal."""
        await self._worker.shutdown()

    async def __aenter__(self) -> TemporalWorker:
        await self._open()
        await self._worker.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self._worker.__aexit__(exc_type, exc, tb)
            finally:
                await self._close()
