"""The public class: :class:`Engine`. Each method checks its arguments, then
hands the call to the drive loop (``_drive``); what a call does first is in
``_calls``, the work of each state in one module per effect. The engine holds
the objects that do the rest, and its methods hand their calls to them: what
changes a context's branches and config to a ``ContextManager`` (``_manage``),
sub-contexts to ``SubContexts`` (``_subcontexts``); the settings are in
``_settings``. See docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, ClassVar

import anyio

from ..adapters.llm import LLM
from ..enhancers import Compaction, Enhancer, TokenBudget
from ..model import ChatContext, MessageNode, detached
from ..states import CHANGES, State, TurnMachine
from ..storage import StepLog, Store
from ..tools import Tool, Toolset
from . import _leases
from ._clock import Clock
from ._delegate import delegate
from ._drive import Driver
from ._engine_settings import EngineSettings
from ._ids import IdKind
from ._inputs import check_id, check_toolsets
from ._leases import DEFAULT_LEASE_TTL
from ._listening import Listeners
from ._loaded import MAX_LOADED, MAX_LOADED_MESSAGES
from ._manage import ContextManager
from ._modes import Mode
from ._observing._otel_spans import Tracing
from ._output import DEFAULT_OUTPUT_RETRIES
from ._pages import message_page
from ._retry import RetryPolicy
from ._seam import HostSeam
from ._settings import make_settings
from ._subcontexts._engine_calls import EngineCalls
from ._subcontexts._lifecycle import SubContexts
from ._subcontexts._subtask import SubtaskRunner
from ._toolsets import EngineToolsets
from ._turn_calls import TurnCalls

__all__ = ["Engine"]


class Engine(EngineSettings):
    """Drives conversations through the declared state machine.

    ::

        async with Engine(llm=ScriptedLLM([...]), tools=[get_weather]) as engine:
            cid = await engine.create_context(system_prompt="You are helpful.")
            turn = await engine.send(cid, "What's the weather in London?")

    ``enhancers`` run after the built-in ones: the tool history when
    ``tool_history_rounds`` is set (:class:`~turnfsm.enhancers.ToolCallHistory`:
    the last that many tool calls in full, older ones by name only), the
    system prompt and the tool definitions. ``token_budget``
    (:class:`~turnfsm.enhancers.TokenBudget`) runs after every other enhancer.
    ``compaction`` (:class:`~turnfsm.enhancers.Compaction`) replaces older
    history in the view by a summary the LLM makes (a call of its own, before
    the turn's next call, stored once as a message and reused). At
    ``max_iterations`` LLM calls for one user message the turn stops, and with
    ``limit_notice`` an assistant message marked as a notice says so. Ids are UUIDv7
    (``ids="uuid7"``, time-ordered), or ``ids="compact"`` (earlier versions'); ``clock``
    and an ``ids`` callable are injected so that tests and replays are deterministic. At most
    ``max_loaded`` contexts, holding at most ``max_loaded_messages`` messages in
    all, are held in memory; the least recently used resting ones are unloaded
    beyond either and load again from the store when called. The defaults
    bound the memory the loaded contexts take, long texts aside (see
    ``docs/architecture.md``, "The loaded contexts' memory"); the last used stays.
    ``toolsets`` (:class:`~turnfsm.tools.Toolset`, such as the MCP servers of
    :mod:`turnfsm.tools.mcp`) start when the engine is entered (``async with``)
    and stop when it closes; while it is entered their tools join ``tools``,
    and a change of a toolset's list is offered from the next request on
    (docs/mcp.md).

    Every public method checks its arguments before it loads or stores
    anything, and refuses a malformed one with :class:`InvalidInput` whose
    ``where`` names it (``content[0].text``, ``parameters.a.b``). Context ids
    and branch names are ``str`` of 1 to 200 characters with no control
    character and no lone surrogate (the ids the engine makes, and those an
    ``ids`` factory returns, are held to the same rule); texts must be valid
    Unicode; counts are ``int`` (not ``bool``). What a tool returns is stored
    by the conversion rules of :mod:`turnfsm.tools`.

    What the LLM adapter answers is checked where it enters
    (:mod:`turnfsm.engine._answer` has the rules): whatever it returns or
    raises, apart from cancellation, ends in a declared edge; an answer it
    cannot store as given is converted, and each conversion is noted in the
    message's ``metadata.extra["conversions"]``.

    One owner per running call: a call takes its context's lease in the store
    (for ``lease_ttl`` seconds, 30 by default, on ``clock``), a heartbeat renews
    it every ``lease_ttl / 3`` seconds of real time while the call runs, and the
    call releases it when it returns. A call on a context whose lease another
    engine holds raises :class:`~turnfsm.errors.ContextLeased`; ``owner`` is
    this engine's name on its leases (``host:pid:random``). A host that owns each
    context by construction and runs the engine on one thread, deterministically
    (a durable workflow), sets ``leases=False`` (no lease renewed: no heartbeat)
    and ``threads=False`` (a sync summarizer is called in the engine's thread).

    Calls are traced with OpenTelemetry when the process has set a tracer
    provider, or with ``tracer_provider`` when one is given (see
    docs/observability.md); with neither, nothing is traced.

    ``output_type`` (a pydantic model, a dataclass, a type pydantic validates,
    or a JSON Schema dict) is what every turn's final answer must be, unless
    a call gives its own; an answer that does not match is sent back with its
    errors up to ``output_retries`` times (docs/structured-output.md).
    """

    _turn_calls: ClassVar[type[TurnCalls]] = TurnCalls
    """The part that runs the turn calls; an engine that runs them elsewhere
    (a Temporal one) is made with its own, and restates none of its methods."""
    _subcontext_calls: ClassVar[type[SubContexts]] = SubContexts
    """The part that spawns, finishes and deletes sub-contexts (likewise)."""

    def __init__(
        self,
        llm: LLM | None = None,
        tools: Iterable[Tool] = (),
        store: Store | str | None = None,
        enhancers: Sequence[Enhancer] = (),
        retry: RetryPolicy | None = None,
        max_iterations: int = 20,
        *,
        limit_notice: bool = True,
        clock: Clock | None = None,
        ids: Callable[[], str] | IdKind | None = None,
        tool_history_rounds: int | None = None,
        subscriber_buffer: int = 1024,
        max_loaded: int = MAX_LOADED,
        max_loaded_messages: int = MAX_LOADED_MESSAGES,
        logger: Any = None,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        modes: Iterable[Mode] = (),
        token_budget: TokenBudget | None = None,
        compaction: Compaction | None = None,
        tracer_provider: Any = None,
        toolsets: Iterable[Toolset] = (),
        output_type: Any = None,
        output_retries: int = DEFAULT_OUTPUT_RETRIES,
        leases: bool = True,
        threads: bool = True,
    ) -> None:
        sets = check_toolsets(toolsets)
        settings = make_settings(
            llm=llm,
            tools=tools,
            store=store,
            enhancers=enhancers,
            retry=retry,
            max_iterations=max_iterations,
            limit_notice=limit_notice,
            clock=clock,
            ids=ids,
            tool_history_rounds=tool_history_rounds,
            subscriber_buffer=subscriber_buffer,
            max_loaded=max_loaded,
            max_loaded_messages=max_loaded_messages,
            logger=logger,
            lease_ttl=lease_ttl,
            modes=modes,
            token_budget=token_budget,
            compaction=compaction,
            output_type=output_type,
            output_retries=output_retries,
            leases=leases,
            threads=threads,
        )
        self._d = d = Driver(settings)
        self._toolsets = EngineToolsets(d, sets)
        self._listeners = Listeners(d, subscriber_buffer)
        self._contexts = ContextManager(d, self.get_context)
        calls = EngineCalls(self)
        self._subcontexts = self._subcontext_calls(d, self._contexts, calls)
        self._turns = self._turn_calls(d, self._contexts, self._subcontexts, calls)
        d.subtask_host = SubtaskRunner(self._subcontexts)
        # how workers and other hosts reach in
        self._host_seam = HostSeam(d, self._subcontexts.surface)
        if tracer_provider is not None:
            d.tracing = Tracing(tracer_provider)

    @property
    def _machine(self) -> TurnMachine:
        return self._d.machine

    @property
    def loaded_contexts(self) -> list[str]:
        """The ids of the contexts held in memory, least recently used first."""
        return list(self._d.loaded.runtimes)

    @property
    def loaded_messages(self) -> int:
        """The messages of the loaded contexts, as ``max_loaded_messages`` counts them."""
        return self._d.loaded.messages

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Engine:
        d = self._d
        if self._toolsets.toolsets:
            await self._toolsets.start()
        if d.beats is None and d.renews_leases:
            # one heartbeat task for every call of this engine while it is entered
            # (an engine used without ``async with`` starts one per call instead)
            beats = anyio.create_task_group()
            await beats.__aenter__()
            beats.start_soon(_leases.heartbeat_all, d.settings, d.busy, d.loaded)
            d.beats = beats
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        d = self._d
        beats, d.beats = d.beats, None
        if beats is not None:
            beats.cancel_scope.cancel()
            await beats.__aexit__(None, None, None)  # the body's error stays its own
        await self.aclose()

    async def aclose(self) -> None:
        """Detach every context, end every subscription, stop the toolsets, close
        the store."""
        if self._toolsets.toolsets:
            await self._toolsets.close()
        loaded = self._d.loaded
        for cid in list(loaded.runtimes):
            loaded.unload(cid)
        self._listeners.end_all()
        await self._d.settings.store.aclose()

    # ------------------------------------------------------------------ toolsets
    # (started by ``async with``, closed by ``aclose``: docs/mcp.md)

    @property
    def toolsets(self) -> tuple[Toolset, ...]:
        """The toolsets the engine was given (their tools are in :attr:`tools`
        while the engine is entered)."""
        return self._toolsets.toolsets

    # ------------------------------------------------------------------ contexts

    async def get_context(self, context_id: str) -> ChatContext:
        """A copy of the context as last committed."""
        check_id("context_id", context_id)
        rt = self._d.loaded.get(context_id)
        if rt is not None and context_id not in self._d.busy:
            return detached(rt.ctx)
        return await self.store.load(context_id)

    async def unload(self, context_id: str) -> None:
        """Drop the loaded copy of a resting context (it stays in the store)."""
        check_id("context_id", context_id)
        self._d.refuse_if_busy(context_id)
        self._d.loaded.unload(context_id)

    # ------------------------------------------------------------------ managing contexts

    create_context = delegate("_contexts", ContextManager.create_context)
    fork = delegate("_contexts", ContextManager.fork)
    switch_branch = delegate("_contexts", ContextManager.switch_branch)
    set_branch_prompts = delegate("_contexts", ContextManager.set_branch_prompts)
    update_config = delegate("_contexts", ContextManager.update_config)

    # ------------------------------------------------------------------ sub-contexts

    spawn = delegate("_subcontexts", SubContexts.spawn)
    finish = delegate("_subcontexts", SubContexts.finish)
    children = delegate("_subcontexts", SubContexts.children)
    delete_context = delegate("_subcontexts", SubContexts.delete_context)

    # ------------------------------------------------------------------ public calls

    send = delegate("_turns", TurnCalls.send)

    def new_id(self) -> str:
        """A fresh id from the engine's id factory (the ``ids`` it was made with):
        what its messages get; for a ``message_id`` chosen before a send."""
        return self._d.settings.ids()

    submit = delegate("_turns", TurnCalls.submit)
    approve = delegate("_turns", TurnCalls.approve)
    deny = delegate("_turns", TurnCalls.deny)
    answer = delegate("_turns", TurnCalls.answer)
    retry = delegate("_turns", TurnCalls.retry)
    reset = delegate("_turns", TurnCalls.reset)
    cancel = delegate("_turns", TurnCalls.cancel)
    request_cancel = delegate("_turns", TurnCalls.request_cancel)
    resume = delegate("_turns", TurnCalls.resume)
    recover = delegate("_turns", TurnCalls.recover)

    # ------------------------------------------------------------------ request bodies

    send_request = delegate("_turns", TurnCalls.send_request)
    submit_results = delegate("_turns", TurnCalls.submit_results)

    # ------------------------------------------------------------------ reading messages

    async def messages(
        self,
        context_id: str,
        *,
        branch: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> list[MessageNode]:
        """A page of a branch's messages (the active branch by default), oldest
        first: from index ``offset`` (0 or more), at most ``limit`` of them (all
        the rest when ``None``), as last committed. An offset past the end gives
        an empty page; :class:`~turnfsm.errors.BranchError` for an unknown branch.
        """
        return (await self.message_page(context_id, branch=branch, offset=offset, limit=limit))[1]

    async def message_page(
        self,
        context_id: str,
        *,
        branch: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> tuple[str, list[MessageNode]]:
        """:meth:`messages` and the branch's name; a :class:`~turnfsm.storage.MessagePages`
        store reads an unloaded context's page alone."""
        return await message_page(self._d, self.store, context_id, branch, offset, limit)

    # ------------------------------------------------------------------ events and audit

    subscribe = delegate("_listeners", Listeners.subscribe)
    subscribe_all = delegate("_listeners", Listeners.subscribe_all)
    tap = delegate("_listeners", Listeners.tap)
    observe = delegate("_listeners", Listeners.observe)

    async def steps(self, context_id: str) -> list[StepLog]:
        """The audit trail: every committed transition of the context, and the
        change records between them (``detail`` set; see :class:`~turnfsm.states.Change`)."""
        check_id("context_id", context_id)
        return await self.store.steps(context_id)

    async def trace(self, context_id: str) -> list[State]:
        """The states the context entered, from its initial ``Idle``."""
        check_id("context_id", context_id)
        steps = await self.store.steps(context_id)
        return [State.IDLE, *(State(s.to_state) for s in steps if s.trigger not in CHANGES)]
