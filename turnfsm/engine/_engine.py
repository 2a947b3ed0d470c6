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
from typing import Any, Literal, TypeVar

import anyio

from ..adapters.inbound import InboundMessage
from ..adapters.llm import LLM
from ..enhancers import Compaction, Enhancer, TokenBudget
from ..events import Event
from ..model import ChatConfig, ChatContext, ContentPart, FrontendOperatorAs, MessageNode, detached
from ..states import CHANGES, State, TurnMachine
from ..storage import StepLog, Store
from ..tools import Tool, Toolset
from . import _leases
from ._client_tools import ClientToolCalls, ClientToolsArg, check_client_tools
from ._clock import Clock
from ._drive import Driver
from ._engine_settings import EngineSettings
from ._ids import IdKind
from ._inputs import UNSET, Unset, check_id, check_toolsets
from ._leases import DEFAULT_LEASE_TTL
from ._listening import Listeners
from ._loaded import MAX_LOADED, MAX_LOADED_MESSAGES
from ._manage import ContextManager
from ._modes import Mode
from ._observing._observers import Observer
from ._observing._otel_spans import Tracing
from ._output import DEFAULT_OUTPUT_RETRIES
from ._pages import message_page
from ._recovery import Recovery
from ._retry import RetryPolicy
from ._seam import HostSeam
from ._settings import make_settings
from ._subcontexts._approvals import surface
from ._subcontexts._engine_calls import EngineCalls
from ._subcontexts._lifecycle import SubContexts
from ._subcontexts._subtask import SubtaskRunner
from ._subcontexts._summarizers import Summarizer
from ._subscribers import EngineSubscription, EventTap, Subscription
from ._toolsets import EngineToolsets
from ._turn import Child, ChildInfo, Finished, Turn
from ._turn_calls import TurnCalls
from ._typed import turn_output

__all__ = ["Engine"]


_F = TypeVar("_F", bound=Callable[..., Any])


def _doc_of(part: Callable[..., Any]) -> Callable[[_F], _F]:
    """A public method handed to one of the engine's parts says what the part's
    method says: the rules are written once, beside the code that keeps them."""

    def document(method: _F) -> _F:
        method.__doc__ = part.__doc__
        return method

    return document


class Engine(EngineSettings, ClientToolCalls):
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
        calls = EngineCalls(
            self,
            self.get_context,
            self.send,
            self.resume,
            self.approve,
            self.deny,
            self.answer,
            self.delete_context,
        )
        self._subcontexts = SubContexts(d, self._contexts, calls)
        self._turns = TurnCalls(d, self._contexts, self._subcontexts, calls)
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

    @_doc_of(ContextManager.create_context)
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
        return await self._contexts.create_context(
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
            frontend_operator_as=frontend_operator_as,
        )

    @_doc_of(ContextManager.fork)
    async def fork(
        self,
        context_id: str,
        name: str,
        at: int,
        *,
        system_prompt: str | Unset | None = UNSET,
        user_prompt: str | Unset | None = UNSET,
    ) -> Turn:
        return await self._contexts.fork(
            context_id, name, at, system_prompt=system_prompt, user_prompt=user_prompt
        )

    @_doc_of(ContextManager.switch_branch)
    async def switch_branch(self, context_id: str, name: str) -> Turn:
        return await self._contexts.switch_branch(context_id, name)

    @_doc_of(ContextManager.set_branch_prompts)
    async def set_branch_prompts(
        self,
        context_id: str,
        branch: str,
        *,
        system_prompt: str | Unset | None = UNSET,
        user_prompt: str | Unset | None = UNSET,
    ) -> ChatContext:
        return await self._contexts.set_branch_prompts(
            context_id, branch, system_prompt=system_prompt, user_prompt=user_prompt
        )

    @_doc_of(ContextManager.update_config)
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
        return await self._contexts.update_config(
            context_id,
            model=model,
            mode=mode,
            parameters=parameters,
            title=title,
            tool_history=tool_history,
            token_budget=token_budget,
            compaction=compaction,
        )

    # ------------------------------------------------------------------ sub-contexts

    @_doc_of(SubContexts.spawn)
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
        return await self._subcontexts.spawn(
            parent_id,
            task,
            system_prompt=system_prompt,
            model=model,
            mode=mode,
            tools=tools,
            title=title,
        )

    @_doc_of(SubContexts.finish)
    async def finish(
        self,
        child_id: str,
        *,
        summarizer: Summarizer | Callable[[ChatContext], Any] | None = None,
        keep: bool = False,
    ) -> Finished:
        return await self._subcontexts.finish(child_id, summarizer, keep)

    @_doc_of(SubContexts.children)
    async def children(self, context_id: str) -> list[ChildInfo]:
        return await self._subcontexts.children(context_id)

    @_doc_of(SubContexts.delete_context)
    async def delete_context(self, context_id: str) -> list[str]:
        return await self._subcontexts.delete_context(context_id)

    # ------------------------------------------------------------------ public calls

    async def send(
        self,
        context_id: str,
        content: str | Sequence[ContentPart],
        role: str = "user",
        *,
        message_id: str | None = None,
        context: Sequence[InboundMessage] | None = None,
        output_type: Any = UNSET,
        output_retries: int | None = None,
        client_tools: ClientToolsArg = None,
    ) -> Turn:
        """A user (or frontend operator) message; runs the turn until the context rests.

        At ``AwaitingToolApproval`` the pending calls are first closed with
        "superseded" results. ``message_id`` is the id the message gets (default:
        one from the engine's id factory, see :meth:`new_id`), so that a caller
        knows it before the turn rests; an id the context already holds is
        refused with :class:`InvalidInput`. ``context`` (the conversation as the
        client holds it) is matched as in :meth:`send_request`, but for its answers.
        ``output_type`` and ``output_retries`` replace the engine's for this turn
        (``output_type=None``: any text); :attr:`Turn.output` is the typed answer.
        ``client_tools`` are tools the caller runs (docs/client-tools.md).
        """
        # (run here, not handed to ``TurnCalls``: every await of a turn passes
        # through each coroutine between the caller and the drive loop)
        d = self._d
        settings = d.settings
        out = turn_output(settings.outputs, output_type, output_retries)
        client = check_client_tools("client_tools", client_tools, settings.tools)
        start = self._turns.start_send(context_id, content, role, message_id, context, out, client)
        turn = await d.run(context_id, start)
        if turn.state is State.AWAITING_TOOL_APPROVAL:  # it may wait for a sub-task's child
            return await surface(d, turn)
        return turn

    def new_id(self) -> str:
        """A fresh id from the engine's id factory (the ``ids`` it was made with):
        what its messages get; for a ``message_id`` chosen before a send."""
        return self._d.settings.ids()

    @_doc_of(TurnCalls.submit)
    async def submit(
        self,
        context_id: str,
        content: str | Sequence[ContentPart],
        role: str = "user",
        *,
        message_id: str | None = None,
        output_type: Any = UNSET,
        output_retries: int | None = None,
    ) -> str:
        return await self._turns.submit(
            context_id,
            content,
            role,
            message_id=message_id,
            output_type=output_type,
            output_retries=output_retries,
        )

    @_doc_of(TurnCalls.approve)
    async def approve(self, context_id: str, call_ids: str | Sequence[str]) -> Turn:
        return await self._turns.approve(context_id, call_ids)

    @_doc_of(TurnCalls.deny)
    async def deny(
        self, context_id: str, call_id: str | Sequence[str], reason: str | None = ""
    ) -> Turn:
        return await self._turns.deny(context_id, call_id, reason)

    @_doc_of(TurnCalls.answer)
    async def answer(self, context_id: str, call_id: str, text: str) -> Turn:
        return await self._turns.answer(context_id, call_id, text)

    @_doc_of(TurnCalls.retry)
    async def retry(self, context_id: str) -> Turn:
        return await self._turns.retry(context_id)

    @_doc_of(TurnCalls.reset)
    async def reset(self, context_id: str) -> Turn:
        return await self._turns.reset(context_id)

    @_doc_of(TurnCalls.cancel)
    async def cancel(self, context_id: str) -> Turn:
        return await self._turns.cancel(context_id)

    @_doc_of(TurnCalls.request_cancel)
    def request_cancel(self, context_id: str) -> None:
        return self._turns.request_cancel(context_id)

    @_doc_of(TurnCalls.resume)
    async def resume(self, context_id: str) -> Turn:
        return await self._turns.resume(context_id)

    @_doc_of(TurnCalls.recover)
    async def recover(self) -> Recovery:
        return await self._turns.recover()

    # ------------------------------------------------------------------ request bodies

    @_doc_of(TurnCalls.send_request)
    async def send_request(
        self,
        body: Any,
        context_id: str | None = None,
        *,
        output_type: Any = UNSET,
        output_retries: int | None = None,
    ) -> Turn:
        return await self._turns.send_request(
            body, context_id, output_type=output_type, output_retries=output_retries
        )

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

    @_doc_of(Listeners.subscribe)
    def subscribe(self, context_id: str) -> Subscription:
        return self._listeners.subscribe(context_id)

    @_doc_of(Listeners.subscribe_all)
    def subscribe_all(self, buffer: int | None = None) -> EngineSubscription:
        return self._listeners.subscribe_all(buffer)

    @_doc_of(Listeners.tap)
    def tap(self, fn: Callable[[Event], object]) -> EventTap:
        return self._listeners.tap(fn)

    @_doc_of(Listeners.observe)
    def observe(self, observer: Observer) -> Callable[[], None]:
        return self._listeners.observe(observer)

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
