"""The part of the engine that changes what a context is: create one, fork
and switch branches, set branch prompts and config (:class:`ContextManager`).

These change a context's branches and config, not where its turn stands;
each is a committed change with its record and event (see
docs/architecture.md, "Context management"), or a new context. The turn's
own calls (send, approve, retry, cancel, resume, ...) are in ``_engine``,
sub-contexts in ``_subcontexts``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from ..errors import InvalidInput, SubContextError
from ..model import Branch, ChatConfig, ChatContext, FrontendOperatorAs, SystemPrompt
from . import _calls
from ._drive import Driver
from ._inputs import (
    UNSET,
    Unset,
    check_history_override,
    check_id,
    check_name,
    check_parameters,
    check_text,
    check_title,
    check_tools,
)
from ._turn import Turn

__all__ = ["ContextManager"]


class ContextManager:
    """Creates contexts and changes their branches and config for one engine:
    ``driver`` runs the calls, ``get_context`` is the engine's."""

    def __init__(
        self, driver: Driver, get_context: Callable[[str], Awaitable[ChatContext]]
    ) -> None:
        self.driver = driver
        self.get_context = get_context

    async def create_context(
        self,
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
        return await self.create(
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

    async def create(
        self,
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
        self.driver.settings.check_mode("mode", mode)
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
        allowed = check_tools("tools", tools, self.driver.settings.tools)
        if parent_id is not None:
            parent = await self.get_context(parent_id)
            if parent.config.archived:
                raise SubContextError(
                    parent_id, "it is a finished sub-context: it takes no new sub-contexts"
                )
        now = self.driver.now()
        prompt = (
            SystemPrompt(id=self.driver.settings.ids(), content=system_prompt)
            if system_prompt
            else None
        )
        ctx = ChatContext(
            id=context_id if context_id is not None else self.driver.settings.ids(),
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
        await self.driver.settings.store.create(ctx)
        return ctx.id

    async def fork(
        self,
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
        driver = self.driver
        return await driver.run(
            context_id, functools.partial(_calls.start_fork, driver, name, at, prompts)
        )

    async def switch_branch(self, context_id: str, name: str) -> Turn:
        """Make another branch active (a ``branch_switched`` change record)."""
        check_id("context_id", context_id)
        check_id("name", name)
        driver = self.driver
        return await driver.run(context_id, functools.partial(_calls.start_switch, driver, name))

    async def set_branch_prompts(
        self,
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
        driver = self.driver
        await driver.run(
            context_id, functools.partial(_calls.start_set_branch_prompts, driver, branch, prompts)
        )
        return await self.get_context(context_id)

    async def update_config(
        self,
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
            fields["mode"] = self.driver.settings.check_mode("mode", mode)
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
        budget = self.driver.settings.view_plan.budget
        wanted = fields.get("token_budget")
        if isinstance(wanted, int) and budget is not None and wanted <= budget.reserve_output:
            raise InvalidInput(
                "token_budget",
                f"must be above the engine budget's output reserve ({budget.reserve_output}), "
                f"not {wanted}",
            )
        out: list[ChatConfig] = []
        driver = self.driver
        await driver.run(
            context_id, functools.partial(_calls.start_update_config, driver, fields, out)
        )
        return out[0]


def _check_prompts(system_prompt: object, user_prompt: object) -> dict[str, str | Unset | None]:
    """The prompts given to ``fork`` / ``set_branch_prompts``, checked as texts."""
    prompts: dict[str, str | Unset | None] = {}
    for where, value in (("system_prompt", system_prompt), ("user_prompt", user_prompt)):
        if not isinstance(value, Unset):
            check_text(where, value, optional=True)
        prompts[where] = value  # type: ignore[assignment]
    return prompts
