"""The part of the engine that runs sub-contexts: :class:`SubContexts`.

``Engine.spawn``, ``finish``, ``children`` and ``delete_context`` hand their
calls to it, and ``approve`` / ``deny`` on a parent too, so that decisions
reach the sub-task children it waits for. The commits each step makes are in
``_records``, the summarizers in ``_summarizers``, the tree in ``_tree``. See
docs/architecture.md, "Sub-contexts".
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from ...errors import InvalidInput, NotAtRest, SubContextError
from ...model import SUBTASK_RESUMED, ApprovalStatus, ChatContext, ContentPart, ToolCallRequest
from ...states import RESTING, State
from .. import _calls
from .._drive import Driver
from .._inputs import check_content, check_id, check_name, check_text, check_title, check_tools
from .._manage import ContextManager
from .._turn import Child, ChildInfo, Finished, Turn
from . import _records
from ._approvals import no_child_waits, route_decisions, surface, surfaced_pending
from ._engine_calls import EngineCalls
from ._summarizers import Summarizer, as_summarizer, summarize, summarizer_name
from ._tree import children_of, delete_tree

__all__ = ["SubContexts"]

Decisions = dict[str, tuple[ApprovalStatus, str | None]]


class SubContexts:
    """Spawns, finishes, lists and deletes one engine's sub-contexts, and
    routes the decisions taken on a parent to the children it waits for.

    ``driver`` runs the calls, ``contexts`` creates the children, ``calls``
    are the engine's own calls on a child or parent (see ``_engine_calls``).
    """

    def __init__(self, driver: Driver, contexts: ContextManager, calls: EngineCalls) -> None:
        self.driver = driver
        self.contexts = contexts
        self.calls = calls

    # ------------------------------------------------------------------ Engine's calls

    async def spawn(
        self,
        parent_id: str,
        task: str | Sequence[ContentPart],
        *,
        system_prompt: str | None = None,
        model: str | None = None,
        mode: str | None = None,
        tools: Sequence[str] | None = None,
        title: str | None = None,
    ) -> Child:
        """Run a sub-task in a new child context of ``parent_id``; returns the
        child's id and the turn its task ran (the child is then at rest).

        The parent must be stored (:class:`~turnfsm.errors.ContextNotFound`),
        at rest, not busy, and not a finished sub-context. The child gets
        ``system_prompt`` (none by default), and the parent's model, mode,
        parameters, agent role and workspace unless ``model`` / ``mode`` are
        given. ``tools`` is an allow-list of the engine's tool names; by
        default the child may use what the parent may, and a parent's list
        cannot be widened (:class:`InvalidInput`). The parent gets a
        ``child_spawned`` change record naming the child; ``task`` is then
        sent as the child's first user message and runs until the child rests.
        Bring the child back with :meth:`finish`.
        """
        driver = self.driver
        check_id("parent_id", parent_id)
        parts = check_content("task", task)
        check_text("system_prompt", system_prompt, optional=True)
        if model is not None:
            check_name("model", model)
        if mode is not None:
            driver.settings.check_mode("mode", mode)
        allowed = check_tools("tools", tools, driver.settings.tools)
        check_title("title", title)
        driver.refuse_if_busy(parent_id)
        parent = await self.calls.get_context(parent_id)
        if parent.config.archived:
            raise SubContextError(
                parent_id, "it is a finished sub-context: it takes no new sub-contexts"
            )
        if State(parent.current_state) not in RESTING:
            raise NotAtRest(parent_id, parent.current_state, "sub-contexts")
        return await self.spawn_child(
            parent, parts, system_prompt, model, mode, allowed, title, announce=True
        )

    async def finish(
        self,
        child_id: str,
        *,
        summarizer: Summarizer | Callable[[ChatContext], Any] | None = None,
        keep: bool = False,
    ) -> Finished:
        """Summarise a child into its parent, then delete the child (or, with
        ``keep=True``, keep it finished).

        The child must be a sub-context at rest in ``Idle`` with no unfinished
        sub-context of its own, and its parent at rest in ``Idle``
        (:class:`~turnfsm.errors.SubContextError` otherwise; nothing changes).
        ``summarizer`` makes the text: by default :class:`LLMSummarizer` (the
        engine's adapter, with a documented prompt); :class:`FinalAnswer` takes
        the child's last answer as it is; any other :class:`Summarizer`, or a
        plain callable ``fn(child) -> str`` (sync or async). The summary is
        appended to the parent's active branch as one assistant message whose
        ``metadata.extra["sub_context"]`` names the child and the child's
        message ids it stands for, committed with a ``child_finished`` change
        record. A kept child gets an ``archived`` record and refuses input.

        After a crash between those commits, calling ``finish`` again completes
        it without a second summary.
        """
        check_id("child_id", child_id)
        if not isinstance(keep, bool):
            raise InvalidInput("keep", f"must be a bool, not {type(keep).__name__}")
        chosen = as_summarizer("summarizer", summarizer)
        return await self.summarise(child_id, chosen, keep)

    async def children(self, context_id: str) -> list[ChildInfo]:
        """The direct sub-contexts of a context (id, stored state, title, finished),
        oldest first. :class:`~turnfsm.errors.ContextNotFound` for an unknown id."""
        check_id("context_id", context_id)
        await self.calls.get_context(context_id)
        return await children_of(self.driver.settings.store, context_id)

    async def delete_context(self, context_id: str) -> list[str]:
        """Delete a context and its finished (kept) sub-contexts; returns the ids
        deleted, the context last.

        Refused with :class:`~turnfsm.errors.SubContextError` while it has a
        sub-context (at any depth) that is not finished: finish those first, so
        that no sub-task's work is lost unsummarised. A context on which a call
        is running is refused too (:class:`~turnfsm.errors.ContextBusy`).
        """
        check_id("context_id", context_id)
        driver = self.driver
        driver.refuse_if_busy(context_id)
        store = driver.settings.store
        deleted = await delete_tree(store, context_id, busy=tuple(driver.busy))
        for cid in deleted:
            driver.loaded.unload(cid)
        await self.ended(context_id, deleted)
        return deleted

    async def ended(self, context_id: str, deleted: list[str]) -> None:
        """What follows the deletion of ``context_id`` and the contexts
        ``deleted`` with it: nothing here; an engine whose contexts run in
        workflows of their own ends them."""

    async def decide(
        self, context_id: str, ids: list[str], status: ApprovalStatus, reason: str | None
    ) -> Turn:
        """Decisions on pending calls: the context's own, and those of the
        sub-task children it waits for (routed to them first)."""
        driver = self.driver
        if no_child_waits(driver, context_id):
            routed = None
        else:
            routed = await route_decisions(driver, context_id, ids)
        if routed is None:  # no child involved: the plain path (and its errors)
            decisions = dict.fromkeys(ids, (status, reason))
            start = functools.partial(_calls.start_decide, driver, decisions)
            return await surface(driver, await driver.run(context_id, start))
        own, by_child, waiting = routed
        for child_id, child_ids in by_child.items():
            # through the engine's own calls on the child (they decide as here, at
            # any depth; a host whose children run elsewhere sends them there)
            if status is ApprovalStatus.APPROVED:
                await self.calls.approve(child_id, child_ids)
            else:
                await self.calls.deny(child_id, child_ids, reason)
        return await self.after_children(context_id, dict.fromkeys(own, (status, reason)), waiting)

    async def after_children(
        self, context_id: str, decisions: Decisions, waiting: dict[str, str]
    ) -> Turn:
        """After decisions went to a context's waiting children: its own
        ``decisions``, and each waiting call whose child no longer waits is
        approved to run again."""
        driver = self.driver
        for call_id, child_id in waiting.items():
            child = await self.calls.get_context(child_id)
            if child.current_state != State.AWAITING_TOOL_APPROVAL:
                # the child no longer waits: the parent's call runs again
                decisions[call_id] = (ApprovalStatus.APPROVED, SUBTASK_RESUMED + child_id)
        start = (
            functools.partial(_calls.start_decide, driver, decisions)
            if decisions
            else functools.partial(_records.start_still_waiting, driver)
        )
        return await surface(driver, await driver.run(context_id, start))

    async def surface(self, turn: Turn) -> Turn:
        """``turn``, with the pending calls of the sub-task children it waits
        for in place of its own waiting calls (see ``_approvals.surface``)."""
        return await surface(self.driver, turn)

    async def pending(self, context_id: str) -> tuple[ToolCallRequest, ...]:
        """The calls a human decides for a context: its own pending calls, and
        those of the sub-task children it waits for, at any depth."""
        return await surfaced_pending(self.driver, context_id)

    # ------------------------------------------------------------------ the steps

    async def spawn_child(
        self,
        parent: ChatContext,
        parts: list[ContentPart],
        system_prompt: str | None,
        model: str | None,
        mode: str | None,
        allowed: list[str] | None,
        title: str | None,
        *,
        announce: bool,
        subtask_call: str | None = None,
    ) -> Child:
        """Create the child of ``parent`` (arguments checked), record it on the
        parent when ``announce`` (the parent is at rest), and run its task."""
        driver = self.driver
        parent_id = parent.id
        wider = parent.config.tools
        if allowed is None:
            allowed = None if wider is None else list(wider)
        elif wider is not None:
            for i, name in enumerate(allowed):
                if name not in wider:
                    raise InvalidInput(
                        f"tools[{i}]", f"the parent {parent_id!r} may not use {name!r}"
                    )
        config = parent.config
        child_id = await self.contexts.create(
            system_prompt=system_prompt,
            model=config.model_id if model is None else model,
            mode=config.mode if mode is None else mode,
            parameters=config.parameters,
            user_prompt=None,
            agent_role=config.agent_role,
            workspace_path=config.workspace_path,
            parent_id=parent_id,
            context_id=None,
            title=title,
            tools=allowed,
            subtask_call=subtask_call,
            history=config,
        )
        detail: dict[str, Any] = {"child_id": child_id, "task": _task_text(parts)}
        if title is not None:
            detail["title"] = title
        try:
            if announce:
                start = functools.partial(_records.start_child_spawned, driver, detail)
                await driver.run(parent_id, start)
        except BaseException:
            # the parent refused (busy in another engine, moved meanwhile): the
            # child was never announced, so it goes
            with anyio.CancelScope(shield=True):
                await driver.settings.store.delete(child_id)
            raise
        turn = await self.calls.send(child_id, parts)
        return Child(context_id=child_id, turn=turn)

    async def summarise(self, child_id: str, chosen: Summarizer, keep: bool) -> Finished:
        """:meth:`finish` once its arguments are checked: here, with the
        engine's own adapter; an engine whose LLM is elsewhere (a Temporal
        client's) hands the summary that needs it there."""
        driver = self.driver
        calls = self.calls
        driver.refuse_if_busy(child_id)
        child = await calls.get_context(child_id)
        parent_id = child.parent_id
        if parent_id is None:
            raise SubContextError(child_id, "it is not a sub-context (it has no parent)")
        if child.config.archived:
            raise SubContextError(child_id, "it is already finished")
        state = State(child.current_state)
        if state is not State.IDLE:
            if state not in RESTING:
                raise NotAtRest(child_id, state, "finishing a sub-context")
            raise SubContextError(child_id, f"finish needs it at rest in Idle, not in {state}")
        live = [c.context_id for c in await self.children(child_id) if not c.finished]
        if live:
            raise SubContextError(
                child_id, f"its own sub-contexts {live} are not finished: finish them first"
            )
        parent = await calls.get_context(parent_id)
        message_id = _records.find_summary(parent, child_id)
        if message_id is None:
            if parent.current_state != State.IDLE:
                raise SubContextError(
                    parent_id,
                    f"a sub-context's summary is added only in Idle, and it is in "
                    f"{parent.current_state}",
                )
            driver.refuse_if_busy(parent_id)
            text = await summarize(chosen, child, calls.engine, threads=driver.threads)
            if not isinstance(text, str):
                raise SubContextError(
                    child_id, f"the summarizer returned {type(text).__name__}, not a text"
                )
            check_text("summary", text)
            if not text.strip():
                raise SubContextError(child_id, "the summarizer returned an empty summary")
            name = summarizer_name(chosen)
            start = functools.partial(
                _records.start_child_finished, driver, child, text, name, keep
            )
            turn = await driver.run(parent_id, start)
            refreshed = await calls.get_context(parent_id)
            message_id = _records.find_summary(refreshed, child_id)
            assert message_id is not None, turn
            parent = refreshed
        summary = parent.message_pool[message_id].message.text
        if keep:
            start = functools.partial(_records.start_archive, driver, parent_id, message_id)
            await driver.run(child_id, start)
        else:
            await calls.delete_context(child_id)
        return Finished(
            context_id=parent_id,
            child_id=child_id,
            message_id=message_id,
            summary=summary,
            kept=keep,
        )


def _task_text(parts: Sequence[ContentPart]) -> str:
    """The text of a task, for the parent's ``child_spawned`` record."""
    return "".join(getattr(p, "text", "") for p in parts)
