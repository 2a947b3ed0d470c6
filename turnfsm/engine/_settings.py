"""The engine's settings, checked and made once: :class:`Settings`.

``Engine.__init__`` hands its arguments to :func:`make_settings`, which checks
each of them (:class:`InvalidInput` names the one refused), builds the
built-in enhancers and the tool registry, and returns one frozen
:class:`Settings`. The drive loop, the effects and the lease code read their
settings from it; nothing else holds a copy. Changing a setting that may
change (``Engine.llm``) replaces the object as a whole.

What follows from the settings alone, with no I/O (the tools a context is
offered, the mode in force, the type of an answer), is a method here.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..adapters.llm import LLM
from ..enhancers import (
    Compaction,
    Enhancer,
    SystemPromptEnhancer,
    TokenBudget,
    ToolCallHistory,
    ToolDefinitionsEnhancer,
)
from ..enhancers._current import CurrentMessage
from ..errors import InvalidInput
from ..model import ChatConfig, ChatContext, HistoryOverride, MessageType
from ..storage import MemoryStore, Store
from ..tools import Tool, ToolRegistry
from ._client_view import with_client_tools
from ._clock import Clock, SystemClock, from_timestamp
from ._defaults import HOST, checked_id, default_logger
from ._ids import ID_KINDS, IdKind, id_factory
from ._inputs import check_count, check_name
from ._loaded import MAX_LOADED_MESSAGES
from ._modes import Mode, Modes
from ._output import DEFAULT_OUTPUT_RETRIES, Outputs
from ._output import output_type as _output_type
from ._retry import RetryPolicy, default_retry

__all__ = ["Settings", "View", "ViewPlan", "make_settings"]


@dataclass(frozen=True, slots=True)
class ViewPlan:
    """What the engine does to the history before the enhancers see it.

    ``budget``: the engine's token budget (:class:`TokenBudget`, run last as an
    enhancer); before the enhancers run, its :meth:`~TokenBudget.window` cuts the
    turns it would drop anyway, counting each message at its ``shrink`` form
    (what the tool history enhancer may make of it), so that preparing a
    request costs the same however long the history is.
    """

    budget: TokenBudget | None = None
    compaction: Compaction | None = None
    """The engine's compaction: its summary replaces what it covers before the
    enhancers run (and ``_prepare.compact`` makes the summaries)."""
    shrink: Callable[[dict[str, Any]], dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class View:
    """What a context's requests are built with: the enhancers (the built-in
    ones first, ``builtin_count`` of them, then the caller's, then the token
    budget) and the view plan. The engine's own unless the context's config
    overrides a history setting (see :meth:`Settings.view`)."""

    enhancers: tuple[Enhancer, ...]
    builtin_count: int
    plan: ViewPlan


_HistoryKey = tuple[HistoryOverride, HistoryOverride, HistoryOverride]
_MAX_VIEWS = 64

# The type of a text answer, read on every answer, as module constants: on
# Python 3.11 reading a member off its enum class goes through
# ``EnumType.__getattr__``'s slow lookup.
_TEXT = MessageType.TEXT


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything an engine was made with, checked (see :func:`make_settings`)."""

    llm: LLM | None
    tools: ToolRegistry
    store: Store
    enhancers: tuple[Enhancer, ...]
    """The built-in enhancers first (``builtin_count`` of them), then the
    caller's, then the token budget."""
    builtin_count: int
    modes: Modes
    retry: RetryPolicy | None
    """The policy the engine was made with; ``None`` for the default (see
    :attr:`retry_policy`)."""
    max_iterations: int
    limit_notice: bool
    """Whether a turn stopped by ``max_iterations`` stores a notice saying so."""
    clock: Clock
    ids: Callable[[], str]
    log: Any
    max_loaded: int
    max_loaded_messages: int
    lease_ttl: float
    owner: str
    """This engine's name on its leases (``host:pid:random``)."""
    subscriber_buffer: int
    view_plan: ViewPlan
    plain: View
    """The engine's own enhancers and view plan (a context with no history
    settings of its own)."""
    leases: bool = True
    """Renew a running call's lease while it runs (``Engine(leases=False)``:
    a host whose store gives each context one owner by construction)."""
    threads: bool = True
    """Run an application's sync summarizer in a worker thread
    (``Engine(threads=False)``: a host that runs the engine on one thread,
    deterministically)."""
    outputs: Outputs = field(default_factory=Outputs, compare=False, repr=False)
    """The default output type and those the calls gave (see ``_output``)."""
    views: dict[_HistoryKey, View] = field(default_factory=dict, compare=False, repr=False)
    """The views made for the history overrides seen so far (see :meth:`view`);
    made again with the enhancers they come from (``with_tools``)."""

    def view(self, config: ChatConfig) -> View:
        """The enhancers and view plan for a context with this config: the
        engine's own, with the context's ``tool_history``, ``token_budget`` and
        ``compaction`` in place of the engine's where it sets them (``"off"``:
        none). A context's budget keeps the engine budget's counter,
        calibration and output reserve (the reserve only when it is below the
        budget); its compaction keeps the engine's prompt, counter and summary
        input limit. Made once per combination, and kept: the enhancers keep
        their per-message caches across turns."""
        tool_history, token_budget, compaction = (
            config.tool_history,
            config.token_budget,
            config.compaction,
        )
        if tool_history is None and token_budget is None and compaction is None:
            return self.plain  # no settings of its own: the usual case
        key = (tool_history, token_budget, compaction)
        found = self.views.get(key)
        if found is None:
            if len(self.views) >= _MAX_VIEWS:
                self.views.clear()
            found = self.views[key] = self._make_view(key)
        return found

    def _make_view(self, key: _HistoryKey) -> View:
        tool_history, token_budget, compaction = key
        plan = self.view_plan
        builtin = self.enhancers[: self.builtin_count]
        own = builtin[0] if builtin and isinstance(builtin[0], ToolCallHistory) else None
        history = own
        if tool_history == "off":
            history = None
        elif tool_history is not None:
            history = ToolCallHistory(tool_history)
        base_budget = plan.budget
        callers = self.enhancers[
            self.builtin_count : len(self.enhancers) - (base_budget is not None)
        ]
        budget = base_budget
        if token_budget == "off":
            budget = None
        elif token_budget is not None:
            budget = (
                TokenBudget(token_budget)
                if base_budget is None
                else TokenBudget(
                    token_budget,
                    reserve_output=base_budget.reserve_output
                    if base_budget.reserve_output < token_budget
                    else 0,
                    counter=base_budget.counter,
                    calibrate=base_budget.calibrate,
                )
            )
        comp = plan.compaction
        if compaction == "off":
            comp = None
        elif compaction is not None:
            comp = (
                Compaction(compaction)
                if plan.compaction is None
                else Compaction(
                    compaction,
                    prompt=plan.compaction.prompt,
                    max_summary_input=plan.compaction.max_summary_input,
                    counter=plan.compaction.counter,
                )
            )
        first = [history] if history is not None else []
        rest = builtin[1:] if own is not None else builtin
        return View(
            enhancers=(*first, *rest, *callers, *((budget,) if budget is not None else ())),
            builtin_count=len(first) + len(rest),
            plan=ViewPlan(
                budget=budget,
                compaction=comp,
                shrink=history.shrink if history is not None else None,
            ),
        )

    def now(self) -> datetime:
        return from_timestamp(self.clock.time(), UTC)

    @property
    def retry_policy(self) -> RetryPolicy:
        """The policy the engine was made with, or the default, which is made
        on first use (:func:`~turnfsm.engine._retry.default_retry`)."""
        retry = self.retry
        return retry if retry is not None else default_retry()

    def check_mode(self, where: str, mode: object) -> str:
        """A mode name given to a public call: one of the engine's modes
        (:class:`InvalidInput` lists them)."""
        return self.modes.check(where, check_name(where, mode))

    def mode(self, ctx: ChatContext) -> Mode | None:
        """The mode in force for ``ctx``; None when the engine does not know the
        stored name (see :class:`~turnfsm.engine._modes.UnknownMode`)."""
        return self.modes.get(ctx.config.mode)

    def answer_type(self, ctx: ChatContext) -> MessageType:
        """The type of a text answer in the context's mode (``Text`` when unknown)."""
        mode = self.modes.get(ctx.config.mode)
        return _TEXT if mode is None else mode.answer_type

    def offered(self, ctx: ChatContext) -> ToolRegistry:
        """The tools the model is offered for ``ctx``, with their approval as
        the mode says, narrowed to the context's own allow-list
        (``config.tools``): the one view the tool definitions, the approval
        policy and the tool runs use. A context whose mode is unknown is
        offered none."""
        config = ctx.config
        return self.modes.offered(config.mode, config.tools)

    def with_tools(self, tools: Iterable[Tool]) -> Settings:
        """These settings with another set of tools (a toolset's list changed):
        the registry, the modes' views of it and the built-in enhancers that
        read the modes are made again; the rest is kept as it is."""
        registry = ToolRegistry(tools)
        modes = Modes(self.modes, registry)
        builtin = list(self.enhancers[: self.builtin_count])
        history = [e for e in builtin if isinstance(e, ToolCallHistory)]
        builtin = [*history, *_mode_enhancers(modes)]
        enhancers = (*builtin, *self.enhancers[self.builtin_count :])
        return dataclasses.replace(
            self,
            tools=registry,
            modes=modes,
            enhancers=enhancers,
            builtin_count=len(builtin),
            plain=View(enhancers, len(builtin), self.view_plan),
            views={},
        )


def _mode_enhancers(modes: Modes) -> list[Enhancer]:
    """The built-in enhancers after the tool history, the first two read the modes."""
    return [
        SystemPromptEnhancer(mode=modes.instructions),
        ToolDefinitionsEnhancer(per_context=with_client_tools(modes.definitions)),
        # UserLocale then CurrentMessageMarker, looking back for the turn's
        # current message once for the two
        CurrentMessage(),
    ]


def make_settings(
    *,
    llm: LLM | None,
    tools: Iterable[Tool],
    store: Store | str | None,
    enhancers: Sequence[Enhancer],
    retry: RetryPolicy | None,
    max_iterations: int,
    clock: Clock | None,
    limit_notice: bool = True,
    ids: Callable[[], str] | IdKind | None,
    tool_history_rounds: int | None,
    subscriber_buffer: int,
    max_loaded: int,
    logger: Any,
    max_loaded_messages: int = MAX_LOADED_MESSAGES,
    lease_ttl: float,
    modes: Iterable[Mode],
    token_budget: TokenBudget | None,
    compaction: Compaction | None,
    output_type: object = None,
    output_retries: int = DEFAULT_OUTPUT_RETRIES,
    leases: bool = True,
    threads: bool = True,
) -> Settings:
    """Check ``Engine``'s arguments (the same names) and make its settings."""
    for name, flag in (("leases", leases), ("threads", threads)):
        if not isinstance(flag, bool):
            raise InvalidInput(name, f"must be True or False, not {flag!r}")
    check_count("max_iterations", max_iterations, minimum=1)
    if not isinstance(limit_notice, bool):
        raise InvalidInput("limit_notice", f"must be True or False, not {limit_notice!r}")
    check_count("max_loaded", max_loaded, minimum=1)
    check_count("max_loaded_messages", max_loaded_messages, minimum=1)
    check_count("subscriber_buffer", subscriber_buffer, minimum=1)
    check_count("tool_history_rounds", tool_history_rounds, minimum=0, optional=True)
    check_count("output_retries", output_retries, minimum=0)
    outputs = Outputs(retries=output_retries)
    if output_type is not None:
        outputs.default = outputs.remember(_output_type(output_type))
    if token_budget is not None and not isinstance(token_budget, TokenBudget):
        raise InvalidInput(
            "token_budget",
            f"must be a TokenBudget or None, not {type(token_budget).__name__}",
        )
    if compaction is not None and not isinstance(compaction, Compaction):
        raise InvalidInput(
            "compaction", f"must be a Compaction or None, not {type(compaction).__name__}"
        )
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise InvalidInput("retry", f"must be a RetryPolicy or None, not {type(retry).__name__}")
    if store is not None and not isinstance(store, str) and not hasattr(store, "commit"):
        raise InvalidInput(
            "store", f"must be a Store, a store URL or None, not {type(store).__name__}"
        )
    if isinstance(enhancers, str | bytes) or not isinstance(enhancers, Iterable):
        raise InvalidInput("enhancers", "must be a sequence of enhancers")
    enhancers = tuple(enhancers)
    for i, enhancer in enumerate(enhancers):
        if not callable(getattr(enhancer, "enhance", None)):
            raise InvalidInput(
                f"enhancers[{i}]", f"not an enhancer (no enhance method): {enhancer!r}"
            )
    if clock is not None and not (
        callable(getattr(clock, "time", None)) and callable(getattr(clock, "sleep", None))
    ):
        raise InvalidInput("clock", f"must have time() and sleep(), not {clock!r}")
    if ids is not None and not callable(ids) and ids not in ID_KINDS:
        kinds = ", ".join(repr(k) for k in ID_KINDS)
        raise InvalidInput(
            "ids", f"must be one of {kinds} or a callable returning ids, not {ids!r}"
        )
    if isinstance(lease_ttl, bool) or not isinstance(lease_ttl, int | float):
        raise InvalidInput("lease_ttl", f"must be a number of seconds, not {lease_ttl!r}")
    if not lease_ttl > 0 or lease_ttl == float("inf"):
        raise InvalidInput("lease_ttl", f"must be > 0 seconds, not {lease_ttl!r}")
    registry = ToolRegistry(tools)
    known_modes = Modes(modes, registry)
    if isinstance(store, str):
        from ..storage import open_store

        store = open_store(store)
    builtin: list[Enhancer] = []
    history = None
    if tool_history_rounds is not None:
        history = ToolCallHistory(tool_history_rounds)
        builtin.append(history)
    builtin += _mode_enhancers(known_modes)
    last: tuple[Enhancer, ...] = (token_budget,) if token_budget is not None else ()
    chain = (*builtin, *enhancers, *last)
    plan = ViewPlan(
        budget=token_budget,
        compaction=compaction,
        shrink=history.shrink if history is not None else None,
    )
    return Settings(
        llm=llm,
        tools=registry,
        store=store if store is not None else MemoryStore(),
        enhancers=chain,
        builtin_count=len(builtin),
        modes=known_modes,
        retry=retry,
        max_iterations=max_iterations,
        limit_notice=limit_notice,
        clock=clock or SystemClock(),
        ids=_ids(ids),
        log=logger if logger is not None else default_logger(),
        max_loaded=max_loaded,
        max_loaded_messages=max_loaded_messages,
        lease_ttl=float(lease_ttl),
        owner=f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
        subscriber_buffer=subscriber_buffer,
        view_plan=plan,
        plain=View(chain, len(builtin), plan),
        leases=leases,
        threads=threads,
        outputs=outputs,
    )


def _ids(ids: Callable[[], str] | IdKind | None) -> Callable[[], str]:
    """The engine's id factory: UUIDv7 by default, the kind named, or the
    application's factory, each of whose ids is checked."""
    if ids is None:
        return id_factory("uuid7")
    if isinstance(ids, str):
        return id_factory(ids)
    return functools.partial(checked_id, ids)
