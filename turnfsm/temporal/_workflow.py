"""The workflow: one per context, the declared table inside it.

Each workflow holds an :class:`~turnfsm.Engine`, the very one that runs
turns in-process, made with a host of the workflow's own:

- its store (:class:`~._stand_ins.WorkflowStore`) loads and commits through
  activities (``turnfsm.load``, ``turnfsm.commit``) and keeps no leases: the
  workflow is the context's one owner, and the version check fences any other
  writer (so the engine renews none: ``leases=False``);
- its LLM (:class:`~._stand_ins.WorkflowLLM`) is the ``turnfsm.llm`` activity,
  whose chunks it yields to the engine as an adapter's stream;
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

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy as ActivityRetry
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from ..engine import Engine, LLMSummarizer, RetryPolicy
    from ..engine._seam import StandIns, hosted
    from ..errors import ContextBusy, ContextNotFound, TurnFSMError
    from ..events import STREAMED_KINDS, Event
    from ..model._detach import detached_fields
    from ..tools import QuestionTool, Tool, ToolOutcome, current_call
    from . import _codec
    from ._children import OPS, SUBTASK_PATCH, Children, WorkflowEngine, reply
    from ._config import WORKFLOW_NAME, WorkerConfig, config_for
    from ._host import Clock, Quiet, deterministic, new_id
    from ._stand_ins import STORE_RETRY, WorkflowLLM, WorkflowStore, activity

__all__ = ["SUBTASK_PATCH", "ContextWorkflow", "tool_retry"]

_NOT_DURABLE = STREAMED_KINDS | {"EventsMissed"}


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


def tool_retry(tool: Tool, config: WorkerConfig) -> ActivityRetry:
    """Temporal's retry policy for a call of ``tool``, from its own settings:
    an idempotent tool's call lost with its worker is attempted again (up to
    ``config.idempotent_attempts``); any other is attempted once, and a lost
    attempt is ``outcome_unknown``. (One function, so that a test can plant
    the bug of retrying every tool and see its checker catch it.)"""
    if tool.idempotent:
        return ActivityRetry(maximum_attempts=config.idempotent_attempts)
    return ActivityRetry(maximum_attempts=1)


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
            success, result, notes = await activity(
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


_ANYTIME = frozenset({"cancel"})
"""The calls admitted while another runs (a cancel is what stops that one)."""


def _op_update(op: str) -> Callable[..., Any]:
    """The Update ``op`` of :data:`OPS`: the engine's call on the workflow's
    context, admitted by ``_admit`` (or ``_admit_cancel`` for a call that
    may come while another runs)."""

    # ``self`` unannotated, as on a method: Temporal reads the others' types
    async def update(self, a: dict[str, Any]) -> Any:  # type: ignore[no-untyped-def]
        run = OPS[op]
        return await self._call(lambda e: run(e, self.context_id, a))

    def admitted(self, a: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
        if op in _ANYTIME:
            self._admit_cancel(a)
        else:
            self._admit(a)

    update.__name__ = update.__qualname__ = op
    admitted.__name__ = admitted.__qualname__ = f"_{op}_admitted"
    made = workflow.update(name=op)(update)
    made.validator(admitted)
    return made


def _op_updates(cls: type[Any]) -> type[Any]:
    """One Update (with its validator) per call of :data:`OPS`, set on the
    workflow class before Temporal reads its handlers."""
    for op in OPS:
        setattr(cls, op, _op_update(op))
    return cls


@workflow.defn(name=WORKFLOW_NAME)
@_op_updates
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
            store=WorkflowStore(self),  # type: ignore[arg-type]
            llm=WorkflowLLM(self),
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
            await activity(
                "turnfsm.events",
                args=[rows],
                start_to_close_timeout=self.config.store_timeout,
                retry_policy=STORE_RETRY,
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
    # (those of OPS are made by ``_op_updates``)

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
