"""The client side: :class:`TemporalEngine`, an engine whose turns run on Temporal."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
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
from temporalio.service import RPCError

from ..adapters.inbound import InboundMessage, parse_request
from ..engine import Engine, Finished, LLMSummarizer, Recovery, Summarizer, Turn
from ..engine._accepted import ON_ACCEPTED
from ..engine._inputs import UNSET, check_call_ids, check_content, check_id, check_text
from ..engine._subcontexts._summarizers import as_summarizer
from ..errors import (
    ContextBusy,
    InvalidInput,
    SubContextError,
    TemporalUnavailable,
    TurnFSMError,
)
from ..model import ChatContext, ContentPart
from ..states import RESTING, State
from ..storage import Store
from ..storage._base import ContextHeads
from . import _codec, _faults
from ._config import DEFAULT_TASK_QUEUE, WORKFLOW_NAME, workflow_id
from ._faults import PATIENCE, WorkflowNotReady, bounded, result_of
from ._payloads import THRESHOLD, with_payloads

__all__ = ["PATIENCE", "TemporalEngine"]

_ROLES = ("user", "frontend_operator")

_LOOK_FIRST = 0.02
"""Seconds before the first look at the store once a call was accepted."""
_LOOK_MAX = 0.25
"""The longest wait between two looks (the wait doubles up to it)."""

SETTLING = 1.5
"""Seconds a call refused as busy while the store shows the context at rest
is made again before it is ``ContextBusy`` (see ``_call_workflow``)."""
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


def _no_output_type(output_type: object, output_retries: object) -> None:
    """A call's own output type is not carried to the workflow (yet): refused
    at the call rather than dropped."""
    if output_type is not UNSET or output_retries is not None:
        raise InvalidInput(
            "output_type", "a call's own output type does not run on Temporal: use Engine"
        )


class TemporalEngine(Engine):
    """An :class:`~turnfsm.Engine` whose turns run as Temporal workflows.

    The turn calls (:meth:`send`, :meth:`approve`, :meth:`deny`,
    :meth:`answer`, :meth:`cancel`, :meth:`retry`, :meth:`reset`,
    :meth:`resume`) check their arguments here, then go to the context's
    workflow (``workflow_id(context_id)``, started on first use) as an
    Update, which returns the :class:`Turn` once the context rests, or raises
    the engine's own error (``ContextBusy``, ``ContextNotFound``,
    ``IllegalTransition``, ...). Everything else (creating contexts, reads,
    branches, config, the audit) is the inherited engine's, on the same store,
    which stays the read model. This engine runs no turn itself: it has no
    LLM, and the tools, modes and options that shape a turn are the workers'
    (:class:`~turnfsm.temporal.TemporalWorker`).

    ``client`` is used through a copy whose payload codec keeps every payload
    over ``payload_threshold`` bytes in the store (after the client's own
    codec, if it has one; ``None``: none is moved, references are still
    read): see docs/temporal.md, "Contexts of any size".
    """

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

    async def _head(self, context_id: str) -> tuple[str, int] | None:
        """The context's state and version as last committed (one row where
        the store reads heads); None when the store cannot say."""
        store = self.store
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

    async def _update(self, context_id: str, name: str, args: dict[str, Any]) -> Turn:
        return _codec.turn_from(await self._call_workflow(context_id, name, args))

    async def _call_workflow(self, context_id: str, name: str, args: dict[str, Any]) -> Any:
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
        self._d.loaded.unload(context_id)  # the workflow changes it: read it from the store
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
            self._d.loaded.unload(context_id)
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

    # ------------------------------------------------------------ the turn calls

    async def send(
        self,
        context_id: str,
        content: str | Sequence[ContentPart],
        role: str = "user",
        *,
        message_id: str | None = None,
        context: Any = None,
        output_type: Any = UNSET,
        output_retries: int | None = None,
        client_tools: Any = None,
    ) -> Turn:
        _no_output_type(output_type, output_retries)
        check_id("context_id", context_id)
        if client_tools:
            raise InvalidInput("client_tools", "turns on Temporal do not take client tools")
        if not isinstance(role, str) or role not in _ROLES:
            raise InvalidInput("role", f"must be 'user' or 'frontend_operator', not {role!r}")
        check_content("content", content)
        if message_id is not None:
            check_id("message_id", message_id)
        args: dict[str, Any] = {
            "content": _codec.parts_to(content if isinstance(content, str) else list(content)),
            "role": role,
            "message_id": message_id,
        }
        if context:  # the conversation a client resent: laid over the branch in the workflow
            for i, m in enumerate(context):
                if not isinstance(m, InboundMessage):
                    raise InvalidInput(f"context[{i}]", "must be an InboundMessage")
            args["context"] = _codec.inbound_to(list(context))
        return await self._update(context_id, "send", args)

    async def approve(self, context_id: str, call_ids: str | Sequence[str]) -> Turn:
        check_id("context_id", context_id)
        ids = check_call_ids("call_ids", call_ids)
        return await self._update(context_id, "approve", {"call_ids": ids})

    async def deny(
        self, context_id: str, call_id: str | Sequence[str], reason: str | None = ""
    ) -> Turn:
        check_id("context_id", context_id)
        ids = check_call_ids("call_id", call_id)
        check_text("reason", reason, optional=True)
        return await self._update(context_id, "deny", {"call_ids": ids, "reason": reason})

    async def answer(self, context_id: str, call_id: str, text: str) -> Turn:
        check_id("context_id", context_id)
        check_text("call_id", call_id, empty=False)
        check_text("text", text, empty=False)
        return await self._update(context_id, "answer", {"call_id": call_id, "text": text})

    async def cancel(self, context_id: str) -> Turn:
        check_id("context_id", context_id)
        return await self._update(context_id, "cancel", {})

    async def retry(self, context_id: str) -> Turn:
        check_id("context_id", context_id)
        return await self._update(context_id, "retry", {})

    async def reset(self, context_id: str) -> Turn:
        check_id("context_id", context_id)
        return await self._update(context_id, "reset", {})

    async def resume(self, context_id: str) -> Turn:
        check_id("context_id", context_id)
        return await self._update(context_id, "resume", {})

    async def finish(
        self,
        child_id: str,
        *,
        summarizer: Summarizer | Callable[[ChatContext], Any] | None = None,
        keep: bool = False,
    ) -> Finished:
        """:meth:`Engine.finish`. The LLM summary (the default, or an
        :class:`LLMSummarizer`) needs the workers' LLM: the call goes to the
        parent's workflow, which summarises and commits there. Any other
        summarizer runs here, as on the in-process engine."""
        check_id("child_id", child_id)
        if not isinstance(keep, bool):
            raise InvalidInput("keep", f"must be a bool, not {type(keep).__name__}")
        chosen = as_summarizer("summarizer", summarizer)
        if type(chosen) is not LLMSummarizer:
            return await super().finish(child_id, summarizer=chosen, keep=keep)
        parent_id = (await self.get_context(child_id)).parent_id
        if parent_id is None:
            raise SubContextError(child_id, "it is not a sub-context (it has no parent)")
        args = {"child_id": child_id, "keep": keep, "prompt": chosen.prompt, "model": chosen.model}
        try:
            data = await self._call_workflow(parent_id, "finish", args)
        finally:
            self._d.loaded.unload(child_id)
        return _codec.finished_from(data)

    async def delete_context(self, context_id: str) -> list[str]:
        """:meth:`Engine.delete_context`, then the workflow of each context
        deleted ends (the ``end`` signal). One that never started, or has
        ended, needs nothing; one that Temporal cannot be told of now ends at
        its next call, which finds its context gone."""
        deleted = await super().delete_context(context_id)
        for cid in deleted:
            handle = self._client.get_workflow_handle(workflow_id(cid))
            # none to end (NOT_FOUND), or Temporal not answering: ends at its next call
            with contextlib.suppress(RPCError, TemporalUnavailable):
                signal = handle.signal("end", rpc_timeout=timedelta(seconds=_faults.RPC_TIMEOUT))
                await bounded(signal, _faults.RPC_TIMEOUT + _faults.GRACE, accepted=None)
        return deleted

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
        _no_output_type(output_type, output_retries)
        parse_request(body)
        if context_id is None:  # as Engine.send_request makes it
            context_id = await self.create_context(frontend_operator_as="assistant")
        else:
            check_id("context_id", context_id)
        return await self._update(context_id, "request", {"body": body})

    async def recover(self) -> Recovery:
        """:meth:`Engine.recover` on Temporal: each context away from rest is
        resumed by its workflow (``resume``). One whose workflow is running a
        call (it goes on by itself, on any worker) is skipped as busy."""
        resumed: dict[str, Turn] = {}
        skipped: dict[str, str] = {}
        failed: dict[str, TurnFSMError] = {}
        for summary in await self.store.list_contexts():
            if summary.state in RESTING:
                continue
            try:
                resumed[summary.id] = await self.resume(summary.id)
            except ContextBusy as exc:
                skipped[summary.id] = str(exc)
            except TurnFSMError as exc:
                failed[summary.id] = exc
        return Recovery(resumed=resumed, skipped=skipped, failed=failed)

    async def submit(
        self,
        context_id: str,
        content: str | Sequence[ContentPart],
        role: str = "user",
        *,
        message_id: str | None = None,
        output_type: Any = UNSET,
        output_retries: int | None = None,
    ) -> str:
        """Not on Temporal: :meth:`send` hands the turn to a worker already."""
        raise InvalidInput("submit", "turns on Temporal are handed to workers by send()")

    async def submit_results(
        self,
        context_id: str,
        results: Mapping[str, Any],
        *,
        context: Any = None,
        client_tools: Any = None,
    ) -> Turn:
        """Not on Temporal: a turn on Temporal takes no client tools (see :meth:`send`)."""
        raise InvalidInput("submit_results", "turns on Temporal do not take client tools")
