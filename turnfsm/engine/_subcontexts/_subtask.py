"""A sub-task tool's child (:func:`~turnfsm.tools.subtask`), run from inside
its parent's call: :class:`SubtaskRunner`, the drive loop's ``subtask_host``."""

from __future__ import annotations

import functools

from ...model import ChatContext, ToolCallRequest
from ...states import RESTING, State
from ...tools import SubtaskSpec, ToolError
from .._inputs import check_content, check_tools
from ._approvals import surfaced_pending
from ._lifecycle import SubContexts
from ._records import start_archive
from ._summarizers import as_summarizer, summarize
from ._tree import children_of

__all__ = ["SubtaskRunner"]


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

    def __init__(self, subcontexts: SubContexts) -> None:
        self.subcontexts = subcontexts
        self.waiting: dict[str, dict[str, tuple[str, tuple[ToolCallRequest, ...]]]] = {}
        """Per parent id: call id -> (child id, the child's pending calls)."""

    def take_waiting(self, parent_id: str) -> dict[str, tuple[str, tuple[ToolCallRequest, ...]]]:
        return self.waiting.pop(parent_id, {})

    async def _existing(self, parent_id: str, call_id: str) -> ChatContext | None:
        subs = self.subcontexts
        for info in await children_of(subs.driver.settings.store, parent_id):
            if info.finished:
                continue
            ctx = await subs.calls.get_context(info.context_id)
            if ctx.config.subtask_call == call_id:
                return ctx
        return None

    async def run_subtask(self, parent_id: str, call_id: str, task: str, spec: SubtaskSpec) -> str:
        subs = self.subcontexts
        driver, calls = subs.driver, subs.calls
        chosen = as_summarizer("summarizer", spec.summarizer)
        existing = await self._existing(parent_id, call_id)
        if existing is not None:  # run again (approved, or after a crash): the same child
            cid = existing.id
            state = State(existing.current_state)
            turn = await calls.resume(cid) if state not in RESTING else None
            state = turn.state if turn is not None else state
            error = turn.error if turn is not None else existing.progress.last_error
        else:
            parts = check_content("task", task)
            allowed = check_tools("tools", spec.tools, driver.settings.tools)
            rt = driver.loaded.get(parent_id)
            parent = rt.ctx if rt is not None else await calls.get_context(parent_id)
            child = await subs.spawn_child(
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
            pending = await surfaced_pending(driver, cid)
            self.waiting.setdefault(parent_id, {})[call_id] = (cid, pending)
            raise ToolError(f"the sub-task (context {cid!r}) waits for a human's decision")
        if state is not State.IDLE:
            why = f": {error}" if error else ""
            raise ToolError(
                f"the sub-task (context {cid!r}) stopped in {state}{why}; "
                "the context is kept as it is"
            )
        ctx = await calls.get_context(cid)
        text = await summarize(chosen, ctx, calls.engine, threads=driver.threads)
        if not isinstance(text, str) or not text.strip():
            raise ToolError(f"the sub-task (context {cid!r}) gave no summary: {text!r}")
        if spec.keep:
            await driver.run(cid, functools.partial(start_archive, driver, parent_id, None))
        else:
            await calls.delete_context(cid)
        return text
