"""Sub-contexts: a child context runs a sub-task and is summarised into its parent.

``spawn`` makes a child of a resting context (its ``parent_id`` set, its config
taken from the parent unless given), records ``child_spawned`` on the parent,
and sends the task as the child's first message. ``finish`` turns a child at
rest in ``Idle`` into one summary message on the parent's active branch
(``child_finished``), then deletes the child, or keeps it finished
(``archived``: it takes no more input). See docs/architecture.md,
"Sub-contexts".

Each step is its own commit on its own context: a process killed between two
of them leaves every context loadable and at rest, and calling the same
public method again completes the work (``finish`` notices a summary already
on the parent and does not add a second one).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import ContextNotFound, InvalidInput, LLMError, NotAtRest, SubContextError
from ..events import ToolApprovalRequested
from ..model import (
    SUBTASK_WAITING,
    SUMMARY_KEY,
    ApprovalStatus,
    ChatContext,
    InternalMessage,
    LLMRequest,
    LLMResponse,
    MessageMetadata,
    Role,
    TextPart,
    ToolCallRequest,
    clean_text,
    to_chat_messages,
)
from ..states import RESTING, Change, State, Trigger
from ..storage import Store
from ..tools import SubtaskSpec, ToolError, ToolOutcome
from . import _history
from ._runtime import Runtime
from ._turn import StopReason, Turn

if TYPE_CHECKING:
    from ._drive import Driver
    from ._engine import Engine

__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "Child",
    "ChildInfo",
    "ContextTree",
    "FinalAnswer",
    "Finished",
    "LLMSummarizer",
    "SubtaskRunner",
    "Summarizer",
    "SummaryFunction",
    "as_summarizer",
    "children_of",
    "context_tree",
    "delete_tree",
    "find_summary",
    "peek",
    "route_decisions",
    "start_archive",
    "start_child_finished",
    "start_child_spawned",
    "start_still_waiting",
    "summarizer_name",
    "wait_for_subtasks",
    "waiting_child",
]

DEFAULT_SUMMARY_PROMPT = (
    "The conversation above was a sub-task handed off by another conversation, "
    "which will read only your summary of it. Write that summary now: concise, "
    "in plain text, with the result or answer, the facts found and the decisions "
    "made that the other conversation needs, and anything left open or uncertain. "
    "Write only the summary, with no preamble."
)
"""What :class:`LLMSummarizer` asks the model, after the child's history."""


@dataclass(frozen=True, slots=True)
class Child:
    """What :meth:`Engine.spawn` returns: the new sub-context's id and the turn
    its task ran (the child is at rest: ``turn.state``)."""

    context_id: str
    turn: Turn


@dataclass(frozen=True, slots=True)
class Finished:
    """What :meth:`Engine.finish` returns: the parent's message that now stands
    for the child."""

    context_id: str
    """The parent's id."""
    child_id: str
    message_id: str
    """The summary message, on the parent's active branch."""
    summary: str
    kept: bool
    """The child was kept (finished, archived) rather than deleted."""


@dataclass(frozen=True, slots=True)
class ChildInfo:
    """One direct child, as :meth:`Engine.children` lists it."""

    context_id: str
    state: str
    """The child's stored state (a name of the table)."""
    title: str | None
    finished: bool
    """Finished and kept (``finish(keep=True)``): it takes no more input."""


# ---------------------------------------------------------------------- summarizers


@runtime_checkable
class Summarizer(Protocol):
    """Makes the one concise text that stands for a finished child in its parent."""

    async def summarize(self, child: ChatContext, engine: Engine) -> str: ...


class LLMSummarizer:
    """The default: the engine's LLM adapter is asked for a summary.

    The request is the child's active branch in chat format (its system prompt
    left out: it was the sub-task's instructions) followed by one ``user``
    message holding ``prompt`` (:data:`DEFAULT_SUMMARY_PROMPT` unless given);
    ``model`` defaults to the child's. The call is not a turn of any context: it
    takes no transition and is not retried; an :class:`~turnfsm.errors.LLMError`
    (any other exception of the adapter becomes one, kind ``adapter_error``)
    reaches the caller of ``finish``, and nothing is changed.
    """

    name = "llm"

    def __init__(self, prompt: str = DEFAULT_SUMMARY_PROMPT, *, model: str | None = None) -> None:
        self.prompt = prompt
        self.model = model

    async def summarize(self, child: ChatContext, engine: Engine) -> str:
        llm = engine.llm
        if llm is None:
            raise SubContextError(child.id, "the engine has no LLM adapter to summarise with")
        messages = [
            *to_chat_messages(n.message for n in child.history()),
            {"role": "user", "content": self.prompt},
        ]
        request = LLMRequest(
            context_id=child.id,
            model=self.model or child.config.model_id,
            messages=messages,
            parameters=dict(child.config.parameters),
        )
        response: object = None
        try:
            async for chunk in llm.stream(request):
                response = chunk
        except LLMError:
            raise
        except Exception as exc:  # the adapter's own bug: typed, as the engine does
            raise LLMError(
                f"the summary of context {child.id!r}: the adapter raised "
                f"{type(exc).__name__}: {exc}",
                kind="adapter_error",
            ) from exc
        if not isinstance(response, LLMResponse) or not isinstance(response.text, str):
            raise LLMError(
                f"the summary of context {child.id!r}: the adapter's last chunk was "
                f"{type(response).__name__}, not an LLMResponse with text",
                kind="invalid_answer",
            )
        return response.text


class FinalAnswer:
    """The child's final answer as it is: the text of the last assistant message
    of its active branch that was not cancelled."""

    name = "final_answer"

    async def summarize(self, child: ChatContext, engine: Engine) -> str:
        for node in reversed(child.history()):
            msg = node.message
            if msg.role is Role.ASSISTANT and not msg.metadata.cancelled and msg.text.strip():
                return msg.text
        raise SubContextError(child.id, "it has no final answer to stand for it")


class SummaryFunction:
    """A plain callable as a summarizer: ``fn(child)`` returns the text (sync or
    async)."""

    name = "function"

    def __init__(self, fn: Callable[[ChatContext], str | Awaitable[str]]) -> None:
        self.fn = fn

    async def summarize(self, child: ChatContext, engine: Engine) -> str:
        out = self.fn(child)
        if inspect.isawaitable(out):
            out = await out
        return out


def as_summarizer(where: str, value: object) -> Summarizer:
    """``None`` (the LLM summary), a :class:`Summarizer`, or a plain callable."""
    if value is None:
        return LLMSummarizer()
    if callable(getattr(value, "summarize", None)):
        return value  # type: ignore[return-value]
    if callable(value):
        return SummaryFunction(value)
    raise InvalidInput(
        where, f"must be a Summarizer, a callable taking the child, or None, not {value!r}"
    )


def summarizer_name(summarizer: Summarizer) -> str:
    name = getattr(summarizer, "name", None)
    return name if isinstance(name, str) else type(summarizer).__name__


# ---------------------------------------------------------------------- what is stored


def find_summary(parent: ChatContext, child_id: str) -> str | None:
    """The id of the parent's message that stands for ``child_id``, if there is one."""
    for node in parent.message_pool.values():
        link = node.message.metadata.extra.get(SUMMARY_KEY)
        if isinstance(link, dict) and link.get("child_id") == child_id:
            return node.id
    return None


async def children_of(store: Store, context_id: str) -> list[ChildInfo]:
    """The direct children of ``context_id`` in ``store``, oldest first."""
    out: list[ChildInfo] = []
    for summary in await store.list_contexts():
        if summary.parent_id != context_id:
            continue
        try:
            ctx = await store.load(summary.id)
        except ContextNotFound:  # deleted meanwhile
            continue
        out.append(
            ChildInfo(
                context_id=ctx.id,
                state=ctx.current_state,
                title=ctx.config.title,
                finished=ctx.config.archived,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class ContextTree:
    """A context and its descendants, as :func:`context_tree` reads them."""

    info: ChildInfo
    children: tuple[ContextTree, ...] = ()

    def to_json(self) -> dict[str, Any]:
        i = self.info
        return {
            "id": i.context_id,
            "state": i.state,
            "title": i.title,
            "finished": i.finished,
            "children": [c.to_json() for c in self.children],
        }


async def context_tree(store: Store, context_id: str) -> ContextTree:
    """``context_id`` and every descendant, children oldest first (one
    ``list_contexts`` and one load per context of the tree)."""
    kids: dict[str, list[str]] = {}
    for s in await store.list_contexts():
        if s.parent_id is not None:
            kids.setdefault(s.parent_id, []).append(s.id)

    async def build(cid: str, seen: frozenset[str]) -> ContextTree:
        ctx = await store.load(cid)
        info = ChildInfo(cid, ctx.current_state, ctx.config.title, ctx.config.archived)
        below = [k for k in kids.get(cid, ()) if k not in seen]  # a cycle is not followed
        return ContextTree(info, tuple([await build(k, seen | {k}) for k in below]))

    return await build(context_id, frozenset({context_id}))


async def delete_tree(store: Store, context_id: str, busy: Sequence[str] = ()) -> list[str]:
    """Delete a context and its finished (archived) descendants; returns the ids
    deleted, the context last.

    Refused (:class:`SubContextError`, nothing deleted) while the context has a
    descendant that is not finished: its work would be lost with it.
    """
    await store.load(context_id)  # ContextNotFound first
    summaries = await store.list_contexts()
    kids: dict[str, list[str]] = {}
    for s in summaries:
        if s.parent_id is not None:
            kids.setdefault(s.parent_id, []).append(s.id)
    order: list[str] = []
    todo = [context_id]
    while todo:
        cid = todo.pop()
        order.append(cid)
        todo.extend(kids.get(cid, ()))
    for cid in order[1:]:
        ctx = await store.load(cid)
        if not ctx.config.archived:
            raise SubContextError(
                context_id,
                f"it has a sub-context that is not finished ({cid!r}, in {ctx.current_state}): "
                "finish it first",
            )
    for cid in order:
        if cid in busy:
            raise SubContextError(cid, "a call is running on it")
    deleted = list(reversed(order))  # descendants first: no child outlives its parent
    for cid in deleted:
        await store.delete(cid)
    return deleted


# ---------------------------------------------------------------------- the calls' first steps


def _require_idle(rt: Runtime, what: str) -> None:
    state = State(rt.holder.state)
    if state is not State.IDLE:
        if state not in RESTING:
            raise NotAtRest(rt.ctx.id, state, what)
        raise SubContextError(rt.ctx.id, f"{what} needs it at rest in Idle, and it is in {state}")


async def start_child_spawned(d: Driver, detail: dict[str, Any], rt: Runtime) -> None:
    """On the parent: the ``child_spawned`` record (any resting state)."""
    state = State(rt.holder.state)
    if state not in RESTING:
        raise NotAtRest(rt.ctx.id, state, "sub-contexts")
    d.change(rt, Change.CHILD_SPAWNED, detail)


async def start_child_finished(
    d: Driver, child: ChatContext, summary: str, summarizer: str, keep: bool, rt: Runtime
) -> None:
    """On the parent: append the summary (one assistant message) with its
    ``child_finished`` record. Nothing when the summary is already there."""
    ctx = rt.ctx
    if find_summary(ctx, child.id) is not None:
        return
    _require_idle(rt, "a sub-context's summary")
    text, replaced = clean_text(summary)
    link: dict[str, Any] = {
        "child_id": child.id,
        "message_ids": list(child.active_branch.message_ids),
        "summarizer": summarizer,
    }
    if child.config.title is not None:
        link["title"] = child.config.title
    extra: dict[str, Any] = {SUMMARY_KEY: link}
    if replaced:
        extra["conversions"] = [f"$: {replaced} lone surrogate(s) replaced by U+FFFD"]
    node = _history.append(
        rt,
        InternalMessage(
            role=Role.ASSISTANT,
            content=[TextPart(text=text)],
            metadata=MessageMetadata(created_at=d.now(), extra=extra),
        ),
        d.ids(),
    )
    d.change(rt, Change.CHILD_FINISHED, {"child_id": child.id, "message_id": node.id, "kept": keep})


async def start_archive(d: Driver, parent_id: str, message_id: str | None, rt: Runtime) -> None:
    """On a finished child that is kept: mark it finished (``archived``)."""
    ctx = rt.ctx
    if ctx.config.archived:
        return
    _require_idle(rt, "finishing a sub-context")
    ctx.config = dataclasses.replace(ctx.config, archived=True)
    rt.config_changed = True
    d.change(rt, Change.ARCHIVED, {"parent_id": parent_id, "message_id": message_id})


# ---------------------------------------------------------------------- a sub-task as a tool


def waiting_child(call: ToolCallRequest) -> str | None:
    """The child a pending sub-task call waits for (None: not such a call)."""
    reason = call.reason
    if call.approval_status is not ApprovalStatus.PENDING or not reason:
        return None
    if not reason.startswith(SUBTASK_WAITING):
        return None
    return reason[len(SUBTASK_WAITING) :]


class SubtaskRunner:
    """Runs a sub-task tool's child for one engine (``tools.subtask``): spawn a
    child of the calling context (or continue the one this call already has),
    run the task, summarise it, delete or keep it; the summary is the call's
    result.

    The parent is in the middle of its own call (``ExecutingTools``), so nothing
    is recorded on it but the call and its result; the child is linked by its
    ``parent_id`` and ``config.subtask_call``. A child resting in
    ``AwaitingToolApproval`` is noted in :attr:`waiting` (read by the
    ``run_tools`` effect, which takes ``subtask_waits``). Any other failure (a
    child that does not rest in ``Idle``, a refused argument, a failed summary)
    is raised and becomes the call's error result.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.waiting: dict[str, dict[str, tuple[str, tuple[ToolCallRequest, ...]]]] = {}
        """Per parent id: call id -> (child id, the child's pending calls)."""

    def take_waiting(self, parent_id: str) -> dict[str, tuple[str, tuple[ToolCallRequest, ...]]]:
        return self.waiting.pop(parent_id, {})

    async def _existing(self, parent_id: str, call_id: str) -> ChatContext | None:
        for info in await children_of(self.engine.store, parent_id):
            if info.finished:
                continue
            ctx = await self.engine.get_context(info.context_id)
            if ctx.config.subtask_call == call_id:
                return ctx
        return None

    async def run_subtask(self, parent_id: str, call_id: str, task: str, spec: SubtaskSpec) -> str:
        from ._engine import _check_tools
        from ._inputs import check_content

        engine = self.engine
        d = engine._d
        chosen = as_summarizer("summarizer", spec.summarizer)
        existing = await self._existing(parent_id, call_id)
        if existing is not None:  # run again (approved, or after a crash): the same child
            cid = existing.id
            state = State(existing.current_state)
            turn = await engine.resume(cid) if state not in RESTING else None
            state = turn.state if turn is not None else state
            error = turn.error if turn is not None else existing.progress.last_error
        else:
            from . import _subcontexts  # (the module imports this one)

            parts = check_content("task", task)
            allowed = _check_tools("tools", spec.tools, engine.tools)
            rt = d.loaded.get(parent_id)
            parent = rt.ctx if rt is not None else await engine.get_context(parent_id)
            child = await _subcontexts.spawn(
                engine,
                parent,
                parts,
                spec.system_prompt,
                spec.model,
                None,
                allowed,
                spec.tool_name,
                announce=False,
                subtask_call=call_id,
            )
            cid = child.context_id
            state = child.turn.state
            error = child.turn.error
        if state is State.AWAITING_TOOL_APPROVAL:
            from . import _subcontexts  # (the module imports this one)

            pending = await _subcontexts.surfaced_pending(engine, cid)
            self.waiting.setdefault(parent_id, {})[call_id] = (cid, pending)
            raise ToolError(f"the sub-task (context {cid!r}) waits for a human's decision")
        if state is not State.IDLE:
            why = f": {error}" if error else ""
            raise ToolError(
                f"the sub-task (context {cid!r}) stopped in {state}{why}; "
                "the context is kept as it is"
            )
        ctx = await engine.get_context(cid)
        text = await chosen.summarize(ctx, engine)
        if not isinstance(text, str) or not text.strip():
            raise ToolError(f"the sub-task (context {cid!r}) gave no summary: {text!r}")
        if spec.keep:
            await d.run(cid, functools.partial(start_archive, d, parent_id, None))
        else:
            await engine.delete_context(cid)
        return text


async def peek(engine: Engine, context_id: str) -> ChatContext:
    """The context as last committed, to read only: the loaded working copy
    when no call runs on it (no copy made), else the stored one."""
    d = engine._d
    rt = d.loaded.get(context_id)
    if rt is not None and context_id not in d.busy:
        return rt.ctx
    return await engine.store.load(context_id)


async def route_decisions(
    engine: Engine, context_id: str, ids: Sequence[str]
) -> tuple[list[str], dict[str, list[str]], dict[str, str]] | None:
    """Split decisions on a context that waits for sub-task children: its own
    call ids, the ids of each child (the direct child they surface through),
    and its waiting calls (call id -> child id). None when no child is
    involved or an id is unknown (the plain path then decides, or refuses with
    its typed error, changing nothing)."""
    ctx = await peek(engine, context_id)
    if ctx.current_state != State.AWAITING_TOOL_APPROVAL:
        return None
    pending = ctx.pending_tool_calls()
    waiting = {c.id: child for c in pending if (child := waiting_child(c)) is not None}
    if not waiting:
        return None
    through: dict[str, str] = {}
    from . import _subcontexts  # (the module imports this one)

    for child in waiting.values():
        try:
            for c in await _subcontexts.surfaced_pending(engine, child, frozenset({context_id})):
                through[c.id] = child
        except ContextNotFound:
            continue
    own_ids = {c.id for c in pending}
    own: list[str] = []
    by_child: dict[str, list[str]] = {}
    for i in ids:
        if i in own_ids:
            own.append(i)
        elif i in through:
            by_child.setdefault(through[i], []).append(i)
        else:
            return None
    if not by_child:
        return None
    return own, by_child, waiting


async def start_still_waiting(d: Driver, rt: Runtime) -> None:
    """A context whose decisions all went to its children, which still wait."""
    rt.stop_reason = StopReason.AWAITING_APPROVAL


def wait_for_subtasks(
    d: Driver,
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
        d.add_results(rt, [c for c, _ in done], [o for _, o in done])
    _history.back_to_pending(
        rt, {cid: SUBTASK_WAITING + child for cid, (child, _) in waiting.items()}
    )
    rt.stop_reason = StopReason.AWAITING_APPROVAL
    d.fire(rt, Trigger.SUBTASK_WAITS)
    surfaced = [c for _, pending in waiting.values() for c in pending]
    d.later(rt, ToolApprovalRequested, calls=surfaced)
    d.end_turn(rt)
