"""The client side: :class:`TemporalEngine`, an engine whose turns run on Temporal."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from ..adapters.inbound import parse_request
from ..engine import Engine, Finished, LLMSummarizer, Recovery, Summarizer, Turn
from ..engine._inputs import UNSET, check_id
from ..engine._subcontexts._lifecycle import SubContexts
from ..errors import ContextBusy, InvalidInput, SubContextError, TemporalUnavailable, TurnFSMError
from ..states import RESTING
from ..storage import Store
from . import _codec, _faults
from ._config import DEFAULT_TASK_QUEUE, workflow_id
from ._faults import PATIENCE, bounded
from ._payloads import THRESHOLD, with_payloads
from ._turns import Runner, WorkflowTurns, no_output_type
from ._updates import WorkflowUpdates

__all__ = ["PATIENCE", "TemporalEngine"]


class ClientTurns(WorkflowTurns):
    """The turn calls of a :class:`TemporalEngine` (its part, see
    :mod:`._turns`): every one runs in its context's workflow, as an Update;
    a request body too, and :meth:`recover` resumes through them."""

    @property
    def updates(self) -> WorkflowUpdates:
        """The engine's Updates on its contexts' workflows."""
        engine: TemporalEngine = self.calls.engine
        return engine._updates

    def _runner(self, context_id: str, op: str) -> Runner:
        return self.updates.turn  # every turn call runs in the context's workflow

    async def send_request(
        self,
        body: Any,
        context_id: str | None = None,
        *,
        output_type: Any = UNSET,
        output_retries: int | None = None,
    ) -> Turn:
        """:meth:`Engine.send_request`, its turn on Temporal: the body is checked
        here (``InvalidInput``), a context made when none is named, and the
        workflow's engine lays it over the branch and runs the turn."""
        no_output_type(output_type, output_retries)
        parse_request(body)
        if context_id is None:  # as Engine.send_request makes it
            context_id = await self.contexts.create_context(frontend_operator_as="assistant")
        else:
            check_id("context_id", context_id)
        return await self.updates.turn(context_id, "request", {"body": body})

    async def recover(self) -> Recovery:
        """:meth:`Engine.recover` on Temporal: each context away from rest is
        resumed by its workflow (``resume``). One whose workflow is running a
        call (it goes on by itself, on any worker) is skipped as busy."""
        resumed: dict[str, Turn] = {}
        skipped: dict[str, str] = {}
        failed: dict[str, TurnFSMError] = {}
        for summary in await self.driver.settings.store.list_contexts():
            if summary.state in RESTING:
                continue
            try:
                resumed[summary.id] = await self.calls.resume(summary.id)
            except ContextBusy as exc:
                skipped[summary.id] = str(exc)
            except TurnFSMError as exc:
                failed[summary.id] = exc
        return Recovery(resumed=resumed, skipped=skipped, failed=failed)

    async def submit(self, *args: Any, **kwargs: Any) -> str:
        """Not on Temporal: :meth:`send` hands the turn to a worker already."""
        raise InvalidInput("submit", "turns on Temporal are handed to workers by send()")

    async def submit_results(self, *args: Any, **kwargs: Any) -> Turn:
        """Not on Temporal: a turn on Temporal takes no client tools (see :meth:`send`)."""
        raise InvalidInput("submit_results", "turns on Temporal do not take client tools")


class ClientSubContexts(SubContexts):
    """The sub-context calls of a :class:`TemporalEngine` (its part): the
    LLM summary is made in the parent's workflow, and a context deleted
    ends its workflow."""

    async def summarise(self, child_id: str, chosen: Summarizer, keep: bool) -> Finished:
        """:meth:`Engine.finish`. The LLM summary (the default, or an
        :class:`LLMSummarizer`) needs the workers' LLM: the call goes to the
        parent's workflow, which summarises and commits there. Any other
        summarizer runs here, as on the in-process engine."""
        if type(chosen) is not LLMSummarizer:
            return await super().summarise(child_id, chosen, keep)
        parent_id = (await self.calls.get_context(child_id)).parent_id
        if parent_id is None:
            raise SubContextError(child_id, "it is not a sub-context (it has no parent)")
        args = {"child_id": child_id, "keep": keep, "prompt": chosen.prompt, "model": chosen.model}
        engine: TemporalEngine = self.calls.engine
        try:
            data = await engine._updates.call(parent_id, "finish", args)
        finally:
            engine._host_seam.unload(child_id)
        return _codec.finished_from(data)

    async def ended(self, context_id: str, deleted: list[str]) -> None:
        """:meth:`Engine.delete_context`, then the workflow of each context
        deleted ends (the ``end`` signal). One that never started, or has
        ended, needs nothing; one that Temporal cannot be told of now ends at
        its next call, which finds its context gone."""
        engine: TemporalEngine = self.calls.engine
        for cid in deleted:
            handle = engine._client.get_workflow_handle(workflow_id(cid))
            # none to end (NOT_FOUND), or Temporal not answering: ends at its next call
            with contextlib.suppress(RPCError, TemporalUnavailable):
                signal = handle.signal("end", rpc_timeout=timedelta(seconds=_faults.RPC_TIMEOUT))
                await bounded(signal, _faults.RPC_TIMEOUT + _faults.GRACE, accepted=None)


class TemporalEngine(Engine):
    """An :class:`~turnfsm.Engine` whose turns run as Temporal workflows.

    The turn calls (:meth:`send`, :meth:`approve`, :meth:`deny`,
    :meth:`answer`, :meth:`cancel`, :meth:`retry`, :meth:`reset`,
    :meth:`resume`) check their arguments here (its part :class:`ClientTurns`),
    then go to the context's
    workflow (``workflow_id(context_id)``, started on first use) as an
    Update (its runner, :class:`~._updates.WorkflowUpdates`), which returns
    the :class:`Turn` once the context rests, or raises the engine's own
    error (``ContextBusy``, ``ContextNotFound``, ``IllegalTransition``, ...).
    :meth:`finish` with the LLM summary and :meth:`delete_context` reach the
    workflows too (its part :class:`ClientSubContexts`). Everything else
    (creating contexts, reads, branches, config, the audit) is the inherited
    engine's, on the same store, which stays the read model. This engine runs
    no turn itself: it has no LLM, and the tools, modes and options that shape
    a turn are the workers' (:class:`~turnfsm.temporal.TemporalWorker`).

    ``client`` is used through a copy whose payload codec keeps every payload
    over ``payload_threshold`` bytes in the store (after the client's own
    codec, if it has one; ``None``: none is moved, references are still
    read): see docs/temporal.md, "Contexts of any size".
    """

    _turn_calls = ClientTurns
    _subcontext_calls = ClientSubContexts

    def __init__(
        self,
        client: Client,
        *,
        store: Store | str,
        task_queue: str = DEFAULT_TASK_QUEUE,
        payload_threshold: int | None = THRESHOLD,
        **engine_options: Any,
    ) -> None:
        super().__init__(llm=None, store=store, **engine_options)
        self._client = with_payloads(client, self.store, payload_threshold)
        self._task_queue = task_queue
        self._updates = WorkflowUpdates(
            self._client, self.store, task_queue, self._host_seam.unload
        )

    @classmethod
    async def connect(
        cls,
        address: str,
        *,
        store: Store | str,
        namespace: str = "default",
        task_queue: str = DEFAULT_TASK_QUEUE,
        payload_threshold: int | None = THRESHOLD,
        **engine_options: Any,
    ) -> TemporalEngine:
        """Connect to the Temporal frontend at ``address`` (``host:port``):
        ``TemporalUnavailable`` when it cannot be reached, or does not answer
        within :data:`~turnfsm.temporal._faults.CONNECT_WITHIN` seconds."""
        connecting = Client.connect(address, namespace=namespace)
        client = await bounded(connecting, _faults.CONNECT_WITHIN, accepted=False, at=address)
        return cls(
            client,
            store=store,
            task_queue=task_queue,
            payload_threshold=payload_threshold,
            **engine_options,
        )

    @property
    def client(self) -> Client:
        """The client the Updates go through (the one given, with turnfsm's
        payload codec for this engine's store)."""
        return self._client

    @property
    def task_queue(self) -> str:
        return self._task_queue
