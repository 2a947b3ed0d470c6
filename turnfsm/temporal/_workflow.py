"""The workflow: one per context, the declared table inside it.

Each workflow holds an :class:`~turnfsm.Engine`, the very one that runs
turns in-process, made with a host of the workflow's own:

- its store (:class:`_WorkflowStore`) loads and commits through activities
  (``turnfsm.load``, ``turnfsm.commit``) and keeps no leases: the workflow is
  the context's one owner, and the version check fences any other writer;
- its LLM (:class:`_WorkflowLLM`) is the ``turnfsm.llm`` activity, whose
  chunks it yields to the engine as an adapter's stream;
- its tools (:class:`_ActivityTool`) run as ``turnfsm.tool`` activities, with
  Temporal's retries for an idempotent tool and one attempt for another;
- its clock is the workflow's (``workflow.now()``; a sleep is a durable
  timer, ``workflow.sleep``), its ids come from ``workflow.uuid4()``, and the
  backoff's jitter from ``workflow.random()``.

So every trigger is fired through the same ``transitions`` machine
(``TurnMachine``) by the same effects, and the steps committed are the ones an
in-process turn commits. The calls arrive as Updates (``send``, ``approve``,
...) and return the ``Turn`` when the context rests. Between calls the
workflow only waits: a context waiting for a human holds no worker.

A sub-task's child context has a workflow of its own, started by its
parent's as a child workflow: the parent's engine sends its calls on the
child there (the ``call`` signal) and waits for the ``reply`` signal
(:mod:`._children`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy as ActivityRetry
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    import anyio
    import anyio.lowlevel

    from ..engine import Engine, LLMSummarizer, RetryPolicy
    from ..engine._seam import StandIns, hosted
    from ..errors import ContextBusy, ContextNotFound, TurnFSMError
    from ..events import STREAMED_KINDS, Event
    from ..model import ChatContext, LLMRequest, TextDelta, ThinkingDelta, ToolCallDelta
    from ..model._detach import detached_fields
    from ..states import State
    from ..storage import Commit, ContextSummary, Lease
    from ..tools import QuestionTool, Tool, ToolOutcome, current_call
    from . import _codec
    from ._children import OPS, SUBTASK_PATCH, Children, WorkflowEngine, reply, retrieved
    from ._config import WORKFLOW_NAME, WorkerConfig, config_for
    from ._host import Clock, Quiet, deterministic, new_id

__all__ = ["SUBTASK_PATCH", "ContextWorkflow", "tool_retry"]

_STORE_RETRY = ActivityRetry(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5)
)
_NOT_DURABLE = STREAMED_KINDS | {"EventsMissed"}
_AWAITING_LLM = State.AWAITING_LLM_RESPONSE.value


class _Lost(BaseException):
    """A tool call's activity was lost (its worker died and no attempt is
    left): the call's outcome is unknown. A ``BaseException`` so that the tool
    run does not turn it into a failed result; the workflow resumes the
    context, as an engine resumes one after a crash (``outcome_unknown`` for
    a tool that is not idempotent)."""


def _lost(exc: BaseException) -> bool:
    if isinstance(exc, _Lost):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_lost(e) for e in exc.exceptions)
    return False


def _raise_definite(err: ActivityError) -> None:
    """The engine's own error, when the activity failed with one."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.details:
        raise _codec.error_from(cause.details[0]) from None


async def _activity(name: str, args: list[Any], **options: Any) -> Any:
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


class _WorkflowStore:
    """The store as the workflow's engine sees it: loads and commits are
    activities; leases are the workflow's own (it is the one owner)."""

    def __init__(self, wf: ContextWorkflow) -> None:
        self._wf = wf

    async def load(self, context_id: str) -> ChatContext:
        try:
            data = await _activity(
                "turnfsm.load",
                args=[context_id, self._wf.take_rows()],
                start_to_close_timeout=self._wf.config.store_timeout,
                retry_policy=_STORE_RETRY,
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
            await _activity(
                "turnfsm.commit",
                args=[
                    _codec.commit_to(commit),
                    self._wf.take_rows(),
                    self._wf.rows_of_commit(commit.context_id),
                ],
                start_to_close_timeout=self._wf.config.store_timeout,
                retry_policy=_STORE_RETRY,
            )
        except ActivityError as err:
            _raise_definite(err)
            raise

    async def _contexts(self, op: str, arg: Any) -> Any:
        try:
            return await _activity(
                "turnfsm.contexts",
                args=[op, arg, self._wf.take_rows()],
                start_to_close_timeout=self._wf.config.store_timeout,
                retry_policy=_STORE_RETRY,
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

    async def acquire_lease(
        self,
        context_id: str,
        owner: str,
        ttl: float,
        *,
        now: float,
        take_over: int | None = None,
    ) -> Lease:
        # token 1 every time: the engine then loads the context afresh for each
        # call (the store is the truth; REST calls may have changed it)
        return Lease(context_id, owner, 1, now + ttl)

    async def lease(self, context_id: str) -> Lease | None:
        return None

    async def release_lease(self, lease: Lease) -> None:
        return None

    async def renew_lease(self, lease: Lease, ttl: float, *, now: float) -> Lease:
        return dataclasses.replace(lease, expires_at=now + ttl)

    async def aclose(self) -> None:
        return None


class _WorkflowLLM:
    """The LLM as the workflow's engine sees it: one ``turnfsm.llm`` activity
    per attempt, its chunks yielded as the adapter yielded them."""

    def __init__(self, wf: ContextWorkflow) -> None:
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
                retry_policy=_STORE_RETRY,
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


def tool_retry(tool: Tool, config: WorkerConfig) -> ActivityRetry:
    """Temporal's retry policy for a call of ``tool``, from its own settings:
    an idempotent tool's call lost with its worker is attempted again (up to
    ``config.idempotent_attempts``); any other is attempted once, and a lost
    attempt is ``outcome_unknown``. (One function, so that a test can plant
    the bug of retrying every tool and see its checker catch it.)"""
    if tool.idempotent:
        return ActivityRetry(maximum_attempts=config.idempotent_attempts)
    return ActivityRetry(maximum_attempts=1)


async def _cancel(request: LLMRequest) -> None:
    """What the adapter did in the activity: ask for the turn's cancel, and
    give the engine the chance to act on it."""
    request.request_cancel()
    await anyio.lowlevel.checkpoint()


class _ActivityTool(Tool):
    """A tool of the worker's, run as a ``turnfsm.tool`` activity: its name,
    schema, approval and idempotence as declared; its run elsewhere."""

    __slots__ = ("_wf",)

    _wf: ContextWorkflow

    @classmethod
    def of(cls, tool: Tool, wf: ContextWorkflow) -> _ActivityTool:
        made = cls(
            name=tool.name,
            description=tool.description,
            parameters=tool.parameters,
            fn=None,
            bind=tool._bind,
            approval=tool.approval,
            idempotent=tool.idempotent,
            timeout=tool.timeout,
        )
        object.__setattr__(made, "_wf", wf)
        return made

    def with_approval(self, approval: Any) -> Tool:
        made = super().with_approval(approval)
        object.__setattr__(made, "_wf", self._wf)
        return made

    async def run(self, arguments: dict[str, Any]) -> ToolOutcome:
        wf = self._wf
        call = current_call()
        assert call is not None  # run_calls sets it
        cfg = wf.config
        timeout = (
            timedelta(seconds=self.timeout + 30) if self.timeout is not None else cfg.tool_timeout
        )
        retry = tool_retry(self, cfg)
        from .. import records

        try:
            success, result, notes = await _activity(
                "turnfsm.tool",
                args=[records.to_python(call), wf.take_rows()],
                start_to_close_timeout=timeout,
                heartbeat_timeout=cfg.heartbeat_timeout,
                retry_policy=retry,
            )
        except ActivityError:
            raise _Lost(call.id) from None
        return ToolOutcome(bool(success), result, tuple(notes))


def _in_workflow(tool: Tool) -> bool:
    """A tool that runs in the workflow itself: a question (never run; a
    human answers it) or a sub-task (``subtask()``: the engine's sub-task
    runner creates, reads, summarises and deletes the child here; the child's
    turns run in its own workflow, see :mod:`._children`)."""
    if isinstance(tool, QuestionTool):
        return True
    fn = tool.fn
    return (
        fn is not None
        and getattr(fn, "__module__", None) == "turnfsm.tools._subtask"
        and getattr(fn, "__qualname__", "") == "subtask.<locals>.run"
    )


def _tools(config: WorkerConfig, wf: ContextWorkflow) -> list[Tool]:
    return [t if _in_workflow(t) else _ActivityTool.of(t, wf) for t in config.tools]


@workflow.defn(name=WORKFLOW_NAME)
class ContextWorkflow:
    """One context's turns (see the module)."""

    @workflow.init
    def __init__(self, args: dict[str, Any]) -> None:
        self.context_id: str = args["context_id"]
        self.config = config_for(workflow.info().task_queue)
        self.rows: list[Any] = []
        self.sent: set[tuple[str, int]] = set()
        """Events written by their commit's activity (the engine's tap skips them)."""
        self.gone = False
        self.clock = Clock()
        self.calls = 0
        """Calls running (Updates, or a parent's ``call`` signals): one at a
        time, but for a cancel."""
        self.children = Children()
        """The sub-task children this run calls in their own workflows."""
        options = dict(self.config.engine_options)
        retry = options.pop("retry", None) or RetryPolicy()
        # the workflow is its context's one owner and runs on one thread:
        # no lease renewed, no thread started (``hosted``)
        stand_ins = StandIns(
            store=_WorkflowStore(self),  # type: ignore[arg-type]
            llm=_WorkflowLLM(self),
            tools=_tools(self.config, self),
            clock=self.clock,
            ids=new_id,
            logger=Quiet(),
        )
        self.engine = hosted(WorkflowEngine, stand_ins, retry=deterministic(retry), **options)
        self.engine.home = self.context_id
        self.engine.child_workflows = self.children
        self.engine.tap(self._on_event)

    def _on_event(self, ev: Event) -> None:
        if ev.kind in _NOT_DURABLE:  # a delta was rung by the LLM activity
            return
        if (ev.context_id, ev.seq) in self.sent:  # written by its commit's activity
            self.sent.discard((ev.context_id, ev.seq))
            return
        self.rows.append(_codec.event_row(ev))

    def rows_of_commit(self, context_id: str) -> list[Any]:
        """The durable events the engine sends once the commit it is making is
        stored: the commit activity writes them right after it (the engine
        makes them from its outbox, the same way, after the commit returns)."""
        rt = self.engine._host_seam.runtime(context_id)
        if rt is None:
            return []
        rows = []
        for kind, seq, at, fields in rt.outbox:
            ev = kind(context_id=context_id, seq=seq, timestamp=at, **detached_fields(fields))
            if ev.kind not in _NOT_DURABLE:
                rows.append(_codec.event_row(ev))
                self.sent.add((context_id, seq))
        return rows

    def take_rows(self) -> list[Any]:
        """The durable events that wait to be written (with the next activity)."""
        rows, self.rows = self.rows, []
        return rows

    def _continue(self) -> bool:
        info = workflow.info()
        return self.gone or (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self.config.history_limit
        )

    @workflow.run
    async def run(self, args: dict[str, Any]) -> None:
        await workflow.wait_condition(self._continue)
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self.rows:
            await self._flush()
        if self.gone:
            return
        workflow.continue_as_new(args)

    async def _flush(self) -> None:
        rows = self.take_rows()
        if rows:
            await _activity(
                "turnfsm.events",
                args=[rows],
                start_to_close_timeout=self.config.store_timeout,
                retry_policy=_STORE_RETRY,
            )

    def _refuse(self, exc: TurnFSMError, *details: str) -> ApplicationError:
        return ApplicationError(
            str(exc), _codec.error_to(exc), *details, type=type(exc).__name__, non_retryable=True
        )

    def _admit(self, _: dict[str, Any]) -> None:
        """The validator of every call but ``cancel``: the errors the engine
        would raise at once, raised before Temporal accepts the Update (so a
        caller told "accepted" is not refused afterwards): a context known to
        be gone, and a call while another runs. (Validators run on new
        Updates only, never on replay: they change no history.)"""
        if self.gone:
            raise self._refuse(ContextNotFound(self.context_id), _codec.NOT_ADMITTED)
        if self.calls:
            raise self._refuse(ContextBusy(self.context_id, "running"), _codec.NOT_ADMITTED)

    def _admit_cancel(self, _: dict[str, Any]) -> None:
        if self.gone:
            raise self._refuse(ContextNotFound(self.context_id), _codec.NOT_ADMITTED)

    async def _call(
        self,
        call: Callable[[Engine], Awaitable[Any]],
        encode: Callable[[Any], Any] = _codec.turn_to,
    ) -> Any:
        """Run one engine call; its result as data (``encode``: a Turn's by
        default), or the engine's error as the update's failure."""
        self.calls += 1
        try:
            return encode(await self._run_call(call))
        finally:
            self.calls -= 1

    async def _run_call(self, call: Callable[[Engine], Awaitable[Any]]) -> Any:
        try:
            try:
                turn = await call(self.engine)
            except BaseException as exc:
                if not _lost(exc):
                    raise
                # a tool's call was lost with its worker: resume, as after a crash
                turn = await self.engine.resume(self.context_id)
        except TurnFSMError as exc:
            if isinstance(exc, ContextNotFound) and exc.context_id == self.context_id:
                self.gone = True
            raise self._refuse(exc) from None
        except BaseException as exc:
            if not _lost(exc):
                raise
            raise ApplicationError(
                "a tool call was lost with its worker again after the resume",
                type="ToolLost",
                non_retryable=True,
            ) from None
        finally:
            if self.rows:
                await self._flush()
        return turn

    # ------------------------------------------------------------ sub-task children

    @workflow.signal(name="call")
    async def call(self, a: dict[str, Any]) -> None:
        """A call from a parent's workflow on this context (``op`` one of the
        Updates' names, with its ``args``), run as an Update runs; the result
        goes back to ``reply_to`` as the ``reply`` signal with ``token``."""
        out: dict[str, Any]
        op = a["op"]
        if self.gone:
            out = {"error": _codec.error_to(ContextNotFound(self.context_id))}
        elif self.calls and op != "cancel":
            out = {"error": _codec.error_to(ContextBusy(self.context_id, "running"))}
        else:
            run = OPS[op]
            try:
                out = {"turn": await self._call(lambda e: run(e, self.context_id, a["args"]))}
            except ApplicationError as err:
                error = err.details[0] if err.details else _codec.error_to(TurnFSMError(str(err)))
                out = {"error": error}
        await reply(a["reply_to"], a["token"], out)

    @workflow.signal(name="reply")
    def reply(self, a: dict[str, Any]) -> None:
        """A child's workflow answered a ``call`` (:meth:`Children.call`)."""
        self.children.replies[a["token"]] = a

    @workflow.signal(name="end")
    def end(self) -> None:
        """The context was deleted (a sub-task's child after its summary):
        the workflow ends once its handlers have."""
        self.gone = True

    # ------------------------------------------------------------ the calls

    @workflow.update(name="send")
    async def send(self, a: dict[str, Any]) -> Any:
        return await self._call(lambda e: OPS["send"](e, self.context_id, a))

    @send.validator
    def _send_admitted(self, a: dict[str, Any]) -> None:
        self._admit(a)

    @workflow.update(name="approve")
    async def approve(self, a: dict[str, Any]) -> Any:
        return await self._call(lambda e: OPS["approve"](e, self.context_id, a))

    @approve.validator
    def _approve_admitted(self, a: dict[str, Any]) -> None:
        self._admit(a)

    @workflow.update(name="deny")
    async def deny(self, a: dict[str, Any]) -> Any:
        return await self._call(lambda e: OPS["deny"](e, self.context_id, a))

    @deny.validator
    def _deny_admitted(self, a: dict[str, Any]) -> None:
        self._admit(a)

    @workflow.update(name="answer")
    async def answer(self, a: dict[str, Any]) -> Any:
        return await self._call(lambda e: OPS["answer"](e, self.context_id, a))

    @answer.validator
    def _answer_admitted(self, a: dict[str, Any]) -> None:
        self._admit(a)

    @workflow.update(name="cancel")
    async def cancel(self, a: dict[str, Any]) -> Any:
        return await self._call(lambda e: OPS["cancel"](e, self.context_id, a))

    @cancel.validator
    def _cancel_admitted(self, a: dict[str, Any]) -> None:
        self._admit_cancel(a)

    @workflow.update(name="retry")
    async def retry(self, a: dict[str, Any]) -> Any:
        return await self._call(lambda e: OPS["retry"](e, self.context_id, a))

    @retry.validator
    def _retry_admitted(self, a: dict[str, Any]) -> None:
        self._admit(a)

    @workflow.update(name="reset")
    async def reset(self, a: dict[str, Any]) -> Any:
        return await self._call(lambda e: OPS["reset"](e, self.context_id, a))

    @reset.validator
    def _reset_admitted(self, a: dict[str, Any]) -> None:
        self._admit(a)

    @workflow.update(name="request")
    async def request(self, a: dict[str, Any]) -> Any:
        return await self._call(lambda e: OPS["request"](e, self.context_id, a))

    @request.validator
    def _request_admitted(self, a: dict[str, Any]) -> None:
        self._admit(a)

    @workflow.update(name="resume")
    async def resume(self, a: dict[str, Any]) -> Any:
        return await self._call(lambda e: OPS["resume"](e, self.context_id, a))

    @resume.validator
    def _resume_admitted(self, a: dict[str, Any]) -> None:
        self._admit(a)

    @workflow.update(name="finish")
    async def finish(self, a: dict[str, Any]) -> Any:
        """``Engine.finish`` of this context's child ``child_id`` with the LLM
        summary (the workflow's LLM is the worker's): the summary is committed
        to this context, the child kept or deleted."""
        chosen = LLMSummarizer(a["prompt"], model=a["model"])
        return await self._call(
            lambda e: e.finish(a["child_id"], summarizer=chosen, keep=a["keep"]),
            _codec.finished_to,
        )

    @finish.validator
    def _finish_admitted(self, a: dict[str, Any]) -> None:
        self._admit(a)
