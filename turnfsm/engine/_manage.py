"""Managing contexts: create them, fork and switch branches, set branch prompts
and config, run and finish sub-contexts, delete them (:class:`ContextManagement`,
a part of :class:`~turnfsm.Engine`).

These change what a context is (its branches, its config, its children), not
where its turn stands; each is a committed change with its record and
event (see docs/architecture.md, "Context management"), or a new context.
The turn's own calls (send, approve, retry, cancel, resume, ...) are in
``_engine``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal

from ..errors import InvalidInput, NotAtRest, SubContextError
from ..model import (
    Branch,
    ChatConfig,
    ChatContext,
    ContentPart,
    FrontendOperatorAs,
    SystemPrompt,
)
from ..states import RESTING, State
from . import _calls, _children, _subcontexts
from ._api import EngineAPI
from ._children import Summarizer
from ._inputs import (
    UNSET,
    Unset,
    check_content,
    check_history_override,
    check_id,
    check_name,
    check_parameters,
    check_text,
    check_title,
    check_tools,
)
from ._turn import Child, ChildInfo, Finished, Turn

__all__ = ["ContextManagement"]


class ContextManagement:
    """The engine's methods that manage contexts (see the module's docstring).
    Each runs on the engine (``self``: :class:`~turnfsm.engine._api.EngineAPI`)."""

    async def create_context(
        self: EngineAPI,
        *,
        system_prompt: str | None = None,
        model: str = "scripted",
        mode: str = "chat",
        parameters: dict[str, Any] | None = None,
        user_prompt: str | None = None,
        agent_role: str = "assistant",
        workspace_path: str | None = None,
        parent_id: str | None = None,
        context_id: str | None = None,
        title: str | None = None,
        tools: Sequence[str] | None = None,
        frontend_operator_as: FrontendOperatorAs | None = None,
    ) -> str:
        """Create and store a new context in ``Idle``; returns its id.

        Every argument is checked first (:class:`InvalidInput` names the one
        refused; nothing is stored): ``context_id`` and ``parent_id`` by the id
        rule (1 to 200 characters, no control character, no lone surrogate),
        texts for valid Unicode, ``parameters`` by the JSON payload rules of
        :mod:`turnfsm.model` (depth, size, string keys, finite numbers).
        ``parent_id`` must name a stored context
        (:class:`~turnfsm.errors.ContextNotFound`) that is not a finished
        sub-context (:class:`~turnfsm.errors.SubContextError`); :meth:`spawn`
        makes a child and runs its task in one call. ``tools`` is an allow-list
        of the engine's tool names (``None``: all of them; an unknown name is
        refused): the model is offered only those, and a call to another tool
        gets an error result and never runs. ``frontend_operator_as``
        (``"user"`` or ``"assistant"``; ``None``: ``"user"``, not stored) is
        the role the model sees a frontend operator's messages in
        (``ChatConfig.frontend_operator_as``).
        """
        return await self._create(
            system_prompt=system_prompt,
            model=model,
            mode=mode,
            parameters=parameters,
            user_prompt=user_prompt,
            agent_role=agent_role,
            workspace_path=workspace_path,
            parent_id=parent_id,
            context_id=context_id,
            title=title,
            tools=tools,
            subtask_call=None,
            frontend_operator_as=frontend_operator_as,
        )

    async def _create(
        self: EngineAPI,
        *,
        system_prompt: str | None,
        model: str,
        mode: str,
        parameters: dict[str, Any] | None,
        user_prompt: str | None,
        agent_role: str,
        workspace_path: str | None,
        parent_id: str | None,
        context_id: str | None,
        title: str | None,
        tools: Sequence[str] | None,
        subtask_call: str | None,
        history: ChatConfig | None = None,
        frontend_operator_as: FrontendOperatorAs | None = None,
    ) -> str:
        """Create a context (arguments checked here); ``history``: a config
        whose own history settings the new context takes (a sub-context takes
        its parent's)."""
        if frontend_operator_as not in (None, "assistant", "user"):
            raise InvalidInput(
                "frontend_operator_as",
                f"must be 'assistant', 'user' or None, not {frontend_operator_as!r}",
            )
        check_text("system_prompt", system_prompt, optional=True)
        check_name("model", model)
        self._d.settings.check_mode("mode", mode)
        params = check_parameters("parameters", parameters)
        check_text("user_prompt", user_prompt, optional=True)
        check_name("agent_role", agent_role)
        check_text("workspace_path", workspace_path, optional=True)
        if workspace_path is not None and "\x00" in workspace_path:
            raise InvalidInput("workspace_path", "holds a NUL character")
        if parent_id is not None:
            check_id("parent_id", parent_id)
        if context_id is not None:
            check_id("context_id", context_id)
        check_title("title", title)
        allowed = check_tools("tools", tools, self.tools)
        if parent_id is not None:
            parent = await self.get_context(parent_id)
            if parent.config.archived:
                raise SubContextError(
                    parent_id, "it is a finished sub-context: it takes no new sub-contexts"
                )
        now = self._d.now()
        prompt = (
            SystemPrompt(id=self._d.settings.ids(), content=system_prompt)
            if system_prompt
            else None
        )
        ctx = ChatContext(
            id=context_id if context_id is not None else self._d.settings.ids(),
            parent_id=parent_id,
            config=ChatConfig(
                model_id=model,
                mode=mode,
                parameters=params,
                system_prompt_id=prompt.id if prompt else None,
                agent_role=agent_role,
                workspace_path=workspace_path,
                title=title,
                tools=allowed,
                subtask_call=subtask_call,
                tool_history=None if history is None else history.tool_history,
                token_budget=None if history is None else history.token_budget,
                compaction=None if history is None else history.compaction,
                frontend_operator_as=frontend_operator_as,
            ),
            branches={"main": Branch(name="main", system_prompt=prompt, user_prompt=user_prompt)},
            created_at=now,
            updated_at=now,
        )
        await self.store.create(ctx)
        return ctx.id

    # ------------------------------------------------------------------ branches and config

    async def fork(
        self: EngineAPI,
        context_id: str,
        name: str,
        at: int,
        *,
        system_prompt: str | Unset | None = UNSET,
        user_prompt: str | Unset | None = UNSET,
    ) -> Turn:
        """A new branch with the active branch's messages up to index ``at``; made active.

        ``name`` follows the id rule; ``at`` is an ``int`` (-1 forks before the
        first message). The new branch keeps the source branch's prompts unless
        ``system_prompt`` / ``user_prompt`` are given (``None`` or ``""``: none),
        so two branches can run different prompts on the same history. The fork
        is a change record of the audit trail (``branch_forked``) with a
        ``ContextChanged`` event.
        """
        check_id("context_id", context_id)
        check_id("name", name)
        if isinstance(at, bool) or not isinstance(at, int):
            raise InvalidInput("at", f"must be an integer, not {type(at).__name__}")
        prompts = _check_prompts(system_prompt, user_prompt)
        d = self._d
        return await d.run(context_id, functools.partial(_calls.start_fork, d, name, at, prompts))

    async def switch_branch(self: EngineAPI, context_id: str, name: str) -> Turn:
        """Make another branch active (a ``branch_switched`` change record)."""
        check_id("context_id", context_id)
        check_id("name", name)
        d = self._d
        return await d.run(context_id, functools.partial(_calls.start_switch, d, name))

    async def set_branch_prompts(
        self: EngineAPI,
        context_id: str,
        branch: str,
        *,
        system_prompt: str | Unset | None = UNSET,
        user_prompt: str | Unset | None = UNSET,
    ) -> ChatContext:
        """Give a branch its own system prompt and/or user prompt (``None`` or
        ``""`` removes one; an argument left out keeps it).

        The next request on that branch uses them (the system prompt, then the
        user prompt, first in the request). Allowed at rest (``Idle``,
        ``AwaitingToolApproval``, ``PermanentFailure``); committed as a
        ``branch_prompts_set`` change record with a ``ContextChanged`` event.
        Returns the context as committed. :class:`~turnfsm.errors.BranchError`
        for an unknown branch.
        """
        check_id("context_id", context_id)
        check_id("branch", branch)
        prompts = _check_prompts(system_prompt, user_prompt)
        d = self._d
        await d.run(
            context_id, functools.partial(_calls.start_set_branch_prompts, d, branch, prompts)
        )
        return await self.get_context(context_id)

    async def update_config(
        self: EngineAPI,
        context_id: str,
        *,
        model: str | Unset = UNSET,
        mode: str | Unset = UNSET,
        parameters: dict[str, Any] | Unset = UNSET,
        title: str | Unset | None = UNSET,
        tool_history: int | Literal["off"] | Unset | None = UNSET,
        token_budget: int | Literal["off"] | Unset | None = UNSET,
        compaction: int | Literal["off"] | Unset | None = UNSET,
    ) -> ChatConfig:
        """Change the context's config: the fields given, the others kept.

        ``model`` and ``mode`` are names; ``parameters`` (the provider's request
        parameters: temperature, max_tokens, ...) replace the stored ones as a
        whole; ``title`` is one line (``None`` clears it).

        ``tool_history`` (calls shown in full, >= 0), ``token_budget`` (max
        input tokens, above the engine budget's output reserve) and
        ``compaction`` (the summary threshold in tokens, >= 2) are this
        context's own history settings, used on its turns instead of the
        engine's ``tool_history_rounds``, ``token_budget`` and ``compaction``:
        ``"off"`` turns the setting off for this context, ``None`` gives it the
        engine's again (see docs/token-budget.md). Allowed at rest
        (``Idle``, ``AwaitingToolApproval``, ``PermanentFailure``): the next LLM
        call uses the new config. Committed (the version grows) as a
        ``config_updated`` change record whose detail holds the fields that
        changed, with a ``ContextChanged`` event; a call that changes nothing
        commits nothing. Returns the config as it is now.
        """
        check_id("context_id", context_id)
        fields: dict[str, Any] = {}
        if not isinstance(model, Unset):
            fields["model_id"] = check_name("model", model)
        if not isinstance(mode, Unset):
            fields["mode"] = self._d.settings.check_mode("mode", mode)
        if not isinstance(parameters, Unset):
            fields["parameters"] = check_parameters("parameters", parameters)
        if not isinstance(title, Unset):
            fields["title"] = check_title("title", title)
        for where, value, minimum in (
            ("tool_history", tool_history, 0),
            ("token_budget", token_budget, 1),
            ("compaction", compaction, 2),
        ):
            if not isinstance(value, Unset):
                fields[where] = check_history_override(where, value, minimum=minimum)
        budget = self._d.settings.view_plan.budget
        wanted = fields.get("token_budget")
        if isinstance(wanted, int) and budget is not None and wanted <= budget.reserve_output:
            raise InvalidInput(
                "token_budget",
                f"must be above the engine budget's output reserve ({budget.reserve_output}), "
                f"not {wanted}",
            )
        out: list[ChatConfig] = []
        d = self._d
        await d.run(context_id, functools.partial(_calls.start_update_config, d, fields, out))
        return out[0]

    # ------------------------------------------------------------------ sub-contexts

    async def spawn(
        self: EngineAPI,
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
        check_id("parent_id", parent_id)
        parts = check_content("task", task)
        check_text("system_prompt", system_prompt, optional=True)
        if model is not None:
            check_name("model", model)
        if mode is not None:
            self._d.settings.check_mode("mode", mode)
        allowed = check_tools("tools", tools, self.tools)
        check_title("title", title)
        d = self._d
        d.refuse_if_busy(parent_id)
        parent = await self.get_context(parent_id)
        if parent.config.archived:
            raise SubContextError(
                parent_id, "it is a finished sub-context: it takes no new sub-contexts"
            )
        if State(parent.current_state) not in RESTING:
            raise NotAtRest(parent_id, parent.current_state, "sub-contexts")
        return await _subcontexts.spawn(
            self, parent, parts, system_prompt, model, mode, allowed, title, announce=True
        )

    async def finish(
        self: EngineAPI,
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
        chosen = _children.as_summarizer("summarizer", summarizer)
        return await _subcontexts.finish(self, child_id, chosen, keep)

    async def children(self: EngineAPI, context_id: str) -> list[ChildInfo]:
        """The direct sub-contexts of a context (id, stored state, title, finished),
        oldest first. :class:`~turnfsm.errors.ContextNotFound` for an unknown id."""
        check_id("context_id", context_id)
        await self.get_context(context_id)
        return await _children.children_of(self.store, context_id)

    async def delete_context(self: EngineAPI, context_id: str) -> list[str]:
        """Delete a context and its finished (kept) sub-contexts; returns the ids
        deleted, the context last.

        Refused with :class:`~turnfsm.errors.SubContextError` while it has a
        sub-context (at any depth) that is not finished: finish those first, so
        that no sub-task's work is lost unsummarised. A context on which a call
        is running is refused too (:class:`~turnfsm.errors.ContextBusy`).
        """
        check_id("context_id", context_id)
        d = self._d
        d.refuse_if_busy(context_id)
        deleted = await _children.delete_tree(self.store, context_id, busy=tuple(d.busy))
        for cid in deleted:
            d.loaded.unload(cid)
        return deleted


def _check_prompts(system_prompt: object, user_prompt: object) -> dict[str, str | Unset | None]:
    """The prompts given to ``fork`` / ``set_branch_prompts``, checked as texts."""
    prompts: dict[str, str | Unset | None] = {}
    for where, value in (("system_prompt", system_prompt), ("user_prompt", user_prompt)):
        if not isinstance(value, Unset):
            check_text(where, value, optional=True)
        prompts[where] = value  # type: ignore[assignment]
    return prompts
