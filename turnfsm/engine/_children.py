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

from ..errors import InvalidInput, LLMError, NotAtRest, SubContextError
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
from ..states import RESTING, Change, State
from ..storage import ChildSummaries, ContextSummary, Store
from ..tools._threads import run_in_tool_thread
from . import _history, _steps
from ._host import Host
from ._runtime import Runtime
from ._turn import Child, ChildInfo, Finished, StopReason

if TYPE_CHECKING:
    from ._api import EngineAPI

__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "Child",
    "ChildInfo",
    "ContextTree",
    "FinalAnswer",
    "Finished",
    "LLMSummarizer",
    "Summarizer",
    "SummaryFunction",
    "as_summarizer",
    "children_of",
    "context_tree",
    "delete_tree",
    "find_summary",
    "start_archive",
    "start_child_finished",
    "start_child_spawned",
    "start_still_waiting",
    "summarizer_name",
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


# ---------------------------------------------------------------------- summarizers


@runtime_checkable
class Summarizer(Protocol):
    """Makes the one concise text that stands for a finished child in its parent."""

    async def summarize(self, child: ChatContext, engine: EngineAPI) -> str: ...


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

    async def summarize(self, child: ChatContext, engine: EngineAPI) -> str:
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

    async def summarize(self, child: ChatContext, engine: EngineAPI) -> str:
        for node in reversed(child.history()):
            msg = node.message
            if msg.role is Role.ASSISTANT and not msg.metadata.cancelled and msg.text.strip():
                return msg.text
        raise SubContextError(child.id, "it has no final answer to stand for it")


class SummaryFunction:
    """A plain callable as a summarizer: ``fn(child)`` returns the text (sync or
    async).

    An async function is awaited; a sync one runs in a worker thread, as a sync
    tool does (:func:`~turnfsm.tools.tool_threads` bounds them), so that one
    that calls a model or reads files holds up nothing else of the event loop.
    Cancelled, the caller stops waiting and the thread runs on to its end. In
    a Temporal workflow (a sub-task's summary) a sync one is called in the
    workflow, which runs deterministically on its one thread."""

    name = "function"

    def __init__(self, fn: Callable[[ChatContext], str | Awaitable[str]]) -> None:
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004
        )

    async def summarize(self, child: ChatContext, engine: EngineAPI) -> str:
        if self.is_async or not engine._d.threads:
            out = self.fn(child)
        else:
            out = await run_in_tool_thread(functools.partial(self.fn, child))
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


def _info(summary: ContextSummary) -> ChildInfo:
    return ChildInfo(summary.id, summary.state, summary.title, summary.archived)


async def children_of(store: Store, context_id: str) -> list[ChildInfo]:
    """The direct children of ``context_id`` in ``store``, oldest first, from
    their summaries (the store's ``list_children``, else ``list_contexts``):
    no child is loaded."""
    if isinstance(store, ChildSummaries):
        found = await store.list_children(context_id)
    else:
        found = [s for s in await store.list_contexts() if s.parent_id == context_id]
    return [_info(s) for s in found]


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
    """``context_id`` and every descendant, children oldest first, from one
    ``list_contexts`` (the summaries): no context of the tree is loaded, unless
    ``context_id`` has no summary (then its load says why:
    :class:`ContextNotFound`, or the damage)."""
    summaries = await store.list_contexts()
    by_id = {s.id: s for s in summaries}
    kids: dict[str, list[str]] = {}
    for s in summaries:
        if s.parent_id is not None:
            kids.setdefault(s.parent_id, []).append(s.id)
    root = by_id.get(context_id)
    if root is None:
        ctx = await store.load(context_id)
        root_info = ChildInfo(ctx.id, ctx.current_state, ctx.config.title, ctx.config.archived)
    else:
        root_info = _info(root)

    def build(info: ChildInfo, seen: frozenset[str]) -> ContextTree:
        below = [k for k in kids.get(info.context_id, ()) if k not in seen]  # no cycles
        return ContextTree(info, tuple(build(_info(by_id[k]), seen | {k}) for k in below))

    return build(root_info, frozenset({context_id}))


async def delete_tree(store: Store, context_id: str, busy: Sequence[str] = ()) -> list[str]:
    """Delete a context and its finished (archived) descendants; returns the ids
    deleted, the context last.

    Refused (:class:`SubContextError`, nothing deleted) while the context has a
    descendant that is not finished: its work would be lost with it.
    """
    await store.load(context_id)  # ContextNotFound first
    summaries = await store.list_contexts()
    by_id = {s.id: s for s in summaries}
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
    for cid in order[1:]:  # from the summaries: no descendant is loaded
        summary = by_id[cid]
        if not summary.archived:
            raise SubContextError(
                context_id,
                f"it has a sub-context that is not finished ({cid!r}, in {summary.state}): "
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


async def start_child_spawned(d: Host, detail: dict[str, Any], rt: Runtime) -> None:
    """On the parent: the ``child_spawned`` record (any resting state)."""
    state = State(rt.holder.state)
    if state not in RESTING:
        raise NotAtRest(rt.ctx.id, state, "sub-contexts")
    _steps.change(rt, Change.CHILD_SPAWNED, detail)


async def start_child_finished(
    d: Host, child: ChatContext, summary: str, summarizer: str, keep: bool, rt: Runtime
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
        d.settings.ids(),
    )
    _steps.change(
        rt, Change.CHILD_FINISHED, {"child_id": child.id, "message_id": node.id, "kept": keep}
    )


async def start_archive(d: Host, parent_id: str, message_id: str | None, rt: Runtime) -> None:
    """On a finished child that is kept: mark it finished (``archived``)."""
    ctx = rt.ctx
    if ctx.config.archived:
        return
    _require_idle(rt, "finishing a sub-context")
    ctx.config = dataclasses.replace(ctx.config, archived=True)
    rt.config_changed = True
    _steps.change(rt, Change.ARCHIVED, {"parent_id": parent_id, "message_id": message_id})


# ---------------------------------------------------------------------- a sub-task as a tool


def waiting_child(call: ToolCallRequest) -> str | None:
    """The child a pending sub-task call waits for (None: not such a call)."""
    reason = call.reason
    if call.approval_status is not ApprovalStatus.PENDING or not reason:
        return None
    if not reason.startswith(SUBTASK_WAITING):
        return None
    return reason[len(SUBTASK_WAITING) :]


async def start_still_waiting(d: Host, rt: Runtime) -> None:
    """A context whose decisions all went to its children, which still wait."""
    rt.stop_reason = StopReason.AWAITING_APPROVAL
