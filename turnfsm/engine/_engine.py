"""The public class: :class:`Engine`. Each method checks its arguments, then
hands the call to the drive loop (``_drive``); what a call does first is in
``_calls``, the work of each state in one module per effect. The methods
that manage contexts (create, fork, branches, config, sub-contexts, delete)
are in ``_manage``, the settings in ``_settings``. See docs/architecture.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

import anyio

from ..adapters.inbound import InboundMessage, parse_request
from ..adapters.llm import LLM
from ..enhancers import (
    Compaction,
    Enhancer,
    TokenBudget,
)
from ..errors import (
    InvalidInput,
    StoreError,
)
from ..events import Event
from ..model import (
    ApprovalStatus,
    ChatContext,
    ClientTools,
    ContentPart,
    MessageNode,
    Role,
    TurnOutput,
    detached,
)
from ..states import CHANGES, State, TurnMachine
from ..storage import StepLog, Store, WorkQueue
from ..tools import Tool, Toolset, merge_tools
from . import _calls, _leases, _recovery, _requests, _subcontexts
from ._client_tools import ClientToolCalls, ClientToolsArg, check_client_tools
from ._clock import Clock
from ._drive import Driver, Start
from ._engine_settings import EngineSettings
from ._ids import IdKind
from ._inputs import (
    UNSET,
    check_call_ids,
    check_content,
    check_count,
    check_id,
    check_text,
    check_toolsets,
)
from ._leases import DEFAULT_LEASE_TTL
from ._loaded import MAX_LOADED, MAX_LOADED_MESSAGES
from ._manage import ContextManagement
from ._modes import Mode
from ._observe import Observer
from ._output import DEFAULT_OUTPUT_RETRIES
from ._pages import message_page
from ._recovery import Recovery
from ._retry import RetryPolicy
from ._seam import HostSeam
from ._settings import make_settings
from ._subscribers import EngineSubscription, EventTap, Sink, Subscription
from ._tracing import Tracing
from ._turn import Turn
from ._typed import turn_output

__all__ = ["Engine"]


_INPUT_ROLES = {"user": Role.USER, "frontend_operator": Role.FRONTEND_OPERATOR}


class Engine(ContextManagement, EngineSettings, ClientToolCalls):
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
    beyond either and load again from the store when called; the last used
    stays. What the defaults hold in memory is in ``docs/architecture.md``,
    "The loaded contexts' memory".
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

    What the LLM adapter answers is checked where it enters (the rules are in
    :mod:`turnfsm.engine._answer`): whatever it returns or raises, apart from
    cancellation, ends in a declared edge. An ``LLMError`` is the failure it
    says; any other exception, or an answer or chunk of the wrong type, fails
    the call permanently (kinds ``adapter_error`` / ``invalid_answer``; the
    ``Failed`` event and :attr:`Turn.error` say why, and :meth:`retry` works
    from there). Lone surrogates in model text become U+FFFD, tool arguments
    that cannot be stored are kept as text and answered with an error result,
    and tool call ids are made unique in the context (a repeated or missing id
    is renamed, the model's id kept as ``provider_id``); each such change is
    noted in the message's ``metadata.extra["conversions"]``.

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
        self._subscriber_buffer = subscriber_buffer
        self._toolsets = sets
        self._own_tools = tuple(settings.tools)
        self._d = d = Driver(settings)
        d.renews_leases = settings.leases
        d.threads = settings.threads
        d.subtask_host = _subcontexts.SubtaskRunner(self)
        # how workers and other hosts reach in
        self._host_seam = HostSeam(d, functools.partial(_subcontexts.surface, self))
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
        if self._toolsets:
            await self._start_toolsets()
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
        if self._toolsets:
            await self._close_toolsets()
        loaded = self._d.loaded
        for cid in list(loaded.runtimes):
            loaded.unload(cid)
        for subs in loaded.subscribers.values():
            for sub in subs:
                sub.end()
        for sub in loaded.everywhere:
            sub.end()
        loaded.subscribers.clear()
        loaded.everywhere.clear()
        await self._d.settings.store.aclose()

    # ------------------------------------------------------------------ toolsets
    # (started by ``async with``, closed by ``aclose``: docs/mcp.md)

    @property
    def toolsets(self) -> tuple[Toolset, ...]:
        """The toolsets the engine was given (their tools are in :attr:`tools`
        while the engine is entered)."""
        return self._toolsets

    async def _start_toolsets(self) -> None:
        started: list[Toolset] = []
        try:
            for toolset in self._toolsets:
                started.append(toolset)
                await toolset.start()
            self._use_tools(strict=True)
        except BaseException:
            for toolset in reversed(started):
                await toolset.aclose()
            raise
        for toolset in self._toolsets:
            toolset.on_change(self._toolsets_changed)

    def _toolsets_changed(self) -> None:
        self._use_tools(strict=False)

    def _use_tools(self, *, strict: bool) -> None:
        d = self._d
        tools = merge_tools(self._own_tools, self._toolsets, strict=strict)
        d.settings = d.settings.with_tools(tools)

    async def _close_toolsets(self) -> None:
        # each toolset shields its own stopping (a toolset may hold a task
        # group entered by this task, which no scope of ours may wrap)
        for toolset in reversed(self._toolsets):
            await toolset.aclose()
        d = self._d
        if len(d.settings.tools) != len(self._own_tools):  # a closed toolset offers nothing
            d.settings = d.settings.with_tools(self._own_tools)

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
        out = turn_output(self._d.settings.outputs, output_type, output_retries)
        client = check_client_tools("client_tools", client_tools, self._d.settings.tools)
        start = self._start_send(context_id, content, role, message_id, context, out, client)
        return await _subcontexts.surface(self, await self._d.run(context_id, start))

    def _start_send(
        self,
        context_id: str,
        content: str | Sequence[ContentPart],
        role: str,
        message_id: str | None,
        context: Sequence[InboundMessage] | None = None,
        output: TurnOutput | None = None,
        client: ClientTools | None = None,
    ) -> Start:
        """The checked arguments of :meth:`send` and :meth:`submit`, as the
        call's start."""
        check_id("context_id", context_id)
        if not isinstance(role, str) or role not in _INPUT_ROLES:
            raise InvalidInput("role", f"must be 'user' or 'frontend_operator', not {role!r}")
        parts = check_content("content", content)
        if message_id is not None:
            check_id("message_id", message_id)
        return _requests.send_start(
            self._d, parts, _INPUT_ROLES[role], message_id, context, output, client
        )

    def new_id(self) -> str:
        """A fresh id from the engine's id factory (the ``ids`` it was made with):
        what its messages get; for a ``message_id`` chosen before a send."""
        return self._d.settings.ids()

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
        """Hand a user (or frontend operator) message's turn to a worker: commit
        the message and the ``user_message`` transition (what :meth:`send`
        commits first, the checks included) and release the context's lease in
        that same commit, then return the message's id without running the turn.

        The context is then away from rest (``ProcessingUserMessage``) with its
        lease released: exactly what ``claim_expired`` hands out, so a
        :class:`~turnfsm.engine.Worker` (``turnfsm worker``) on the same store
        claims it and resumes it from there (see ``docs/workers.md``). On
        PostgreSQL the commit also notifies the workers (``NOTIFY turnfsm_work``).
        ``message_id``, ``output_type`` and ``output_retries`` as for :meth:`send`.
        A store that no worker can claim from (it has no ``claim_expired``: the
        memory and files stores) is refused with :class:`StoreError`.
        """
        out = turn_output(self._d.settings.outputs, output_type, output_retries)
        start = self._start_send(context_id, content, role, message_id, None, out)
        d = self._d
        if not isinstance(d.settings.store, WorkQueue):
            raise StoreError(
                f"{d.settings.store!r} cannot hand turns to workers (it has no claim_expired): "
                "use a SQLite or PostgreSQL store, or send() to run the turn here"
            )
        turn = await d.run(context_id, start, hand_off=True)
        return turn.message_ids[-1]

    async def approve(self, context_id: str, call_ids: str | Sequence[str]) -> Turn:
        """Approve pending tool calls; once none is pending, the approved calls run.

        The pending calls of a sub-task's child surface on its parent (see
        :func:`~turnfsm.tools.subtask`): approving them here decides them on
        the child, which goes on; once it no longer waits, the parent's call
        runs again and completes.
        """
        check_id("context_id", context_id)
        ids = check_call_ids("call_ids", call_ids)
        return await _subcontexts.decide(self, context_id, ids, ApprovalStatus.APPROVED, None)

    async def deny(
        self, context_id: str, call_id: str | Sequence[str], reason: str | None = ""
    ) -> Turn:
        """Deny pending tool calls: they are not run, and each result says it was
        denied (with ``reason``). ``call_id`` is one id or a list of them."""
        check_id("context_id", context_id)
        ids = check_call_ids("call_id", call_id)
        check_text("reason", reason, optional=True)
        return await _subcontexts.decide(
            self, context_id, ids, ApprovalStatus.DENIED, reason or None
        )

    async def answer(self, context_id: str, call_id: str, text: str) -> Turn:
        """Answer a question the model asked (a pending call to a question tool,
        listed in :attr:`Turn.questions`): ``text`` is stored as the call's result,
        the text the model sees. Once no call is pending, the turn goes on as after
        :meth:`approve`: the approved calls run, then the model is called again.

        ``text`` is a non-empty string. When the question has ``choices`` they are
        binding: ``text`` must be exactly one of them, else
        :class:`~turnfsm.errors.AnswerNotAChoice`. A call that is not a question
        raises :class:`~turnfsm.errors.NotAQuestion`; to decline a question, deny it.
        """
        check_id("context_id", context_id)
        check_text("call_id", call_id, empty=False)
        check_text("text", text, empty=False)
        d = self._d
        routed = await _subcontexts.route_decisions(self, context_id, [call_id])
        if routed is not None:  # a question of a sub-task's child, surfaced here
            _, by_child, waiting = routed
            for child_id in by_child:
                await self.answer(child_id, call_id, text)
            return await _subcontexts.after_children(self, context_id, {}, waiting)
        return await _subcontexts.surface(
            self, await d.run(context_id, functools.partial(_calls.start_answer, d, call_id, text))
        )

    async def retry(self, context_id: str) -> Turn:
        """Try the failed LLM call again (from ``PermanentFailure``)."""
        check_id("context_id", context_id)
        d = self._d
        return await d.run(context_id, functools.partial(_calls.start_retry, d))

    async def reset(self, context_id: str) -> Turn:
        """Abandon a failed turn (from ``PermanentFailure`` to ``Idle``)."""
        check_id("context_id", context_id)
        d = self._d
        return await d.run(context_id, functools.partial(_calls.start_reset, d))

    async def cancel(self, context_id: str) -> Turn:
        """Cancel the running turn, or the wait for approval.

        Partial text is kept and marked cancelled; open tool calls get
        "cancelled" results. When a call is running on the context, this waits
        for it to wind down and returns its turn.
        """
        check_id("context_id", context_id)
        d = self._d
        if context_id in d.busy:
            rt = d.loaded.get(context_id)
            if rt is not None and rt.done is not None:
                end = rt.done
                d.request_cancel(context_id)
                await end.wait()
                assert end.turn is not None
                return end.turn
        return await d.run(context_id, functools.partial(_calls.start_cancel, d))

    def request_cancel(self, context_id: str) -> None:
        """Ask the running call on the context to cancel; returns at once.

        Does nothing when no call is running.
        """
        check_id("context_id", context_id)
        self._d.request_cancel(context_id)

    async def resume(self, context_id: str) -> Turn:
        """Continue a context that a crash left in a non-resting state.

        :class:`~turnfsm.errors.ContextLeased` when another engine is running a
        call on it (its lease has not expired).
        """
        check_id("context_id", context_id)
        d = self._d
        return await _subcontexts.surface(
            self, await d.run(context_id, functools.partial(_calls.start_resume, d))
        )

    async def recover(self) -> Recovery:
        """Resume every context of the store that a crash left busy (in a
        non-resting state), each on its own: one that cannot be resumed does not
        stop the others.

        A context whose lease another engine holds (its call is running, or its
        process died less than a lease's time ago) is not taken: it is listed in
        ``skipped`` with the reason. A context whose stored state the table does
        not know, or whose resume raises a turnfsm error, is listed in ``failed``
        with that error. Reading the list of contexts itself can still raise.
        """
        return await _recovery.recover(self)

    # ------------------------------------------------------------------ request bodies

    async def send_request(
        self,
        body: Any,
        context_id: str | None = None,
        *,
        output_type: Any = UNSET,
        output_retries: int | None = None,
    ) -> Turn:
        """Answer a chat request body (the ``contextManagement`` body or the legacy
        ``messages`` body, parsed by :func:`~turnfsm.adapters.inbound.parse_request`;
        :class:`InvalidInput` names what is wrong with it; an unknown key is
        ignored and logged once). Without ``context_id``, a new context is made
        (``create_context(frontend_operator_as="assistant")``, as the formats
        show an operator). The body's conversation context is laid over the active
        branch (a client may resend its whole history): what the context does
        not hold yet is appended, then the current message, flagged current
        with the user's language and time zone, in the ``user_message`` step;
        then the turn runs, once. A body that disagrees with the branch is a
        :class:`~turnfsm.errors.HistoryConflict`, a current message whose
        ``messageId`` the context holds is :class:`InvalidInput` (answered
        once); nothing is stored then (docs/server.md, "Resent histories").
        The view marks the current message and states the user's locale
        (:class:`~turnfsm.enhancers.CurrentMessageMarker`, ``UserLocale``).
        ``output_type`` and ``output_retries`` as for :meth:`send`.
        """
        request = parse_request(body, log=self._d.settings.log)
        out = turn_output(self._d.settings.outputs, output_type, output_retries)
        if context_id is None:
            context_id = await self.create_context(frontend_operator_as="assistant")
        else:
            check_id("context_id", context_id)
        d = self._d
        start = functools.partial(_requests.start_request, d, request, output=out)
        return await d.run(context_id, start)

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

    def subscribe(self, context_id: str) -> Subscription:
        """Events of one context from now on (see :class:`Subscription`)."""
        check_id("context_id", context_id)
        subs = self._d.loaded.subscribers_of(context_id)
        sub = Subscription(context_id, self._subscriber_buffer, self._drop_subscriber)
        subs.append(sub)
        return sub

    def subscribe_all(self, buffer: int | None = None) -> EngineSubscription:
        """Events of every context from now on, in the order they go out (see
        :class:`EngineSubscription`; ``buffer``: events it may fall behind by,
        the engine's ``subscriber_buffer`` by default). One subscription for
        all contexts: a reader of everything (an event relay, say) keeps no
        per-context state in the engine."""
        if buffer is not None:
            check_count("buffer", buffer, minimum=1)
        loaded = self._d.loaded
        sub = EngineSubscription(buffer or self._subscriber_buffer, self._drop_everywhere)
        loaded.everywhere.append(sub)
        for subs in loaded.subscribers.values():
            subs.append(sub)
        return sub

    def tap(self, fn: Callable[[Event], object]) -> EventTap:
        """Call ``fn`` with every event of every context from now on, as it
        goes out, in the engine's task (see :class:`EventTap`): for a reader
        in this process that hands events on without waiting. ``fn`` must not
        block; what it raises is logged. ``close()`` the tap (or use it as a
        ``with`` block) to stop."""
        if not callable(fn):
            raise InvalidInput("fn", f"must be callable, not {fn!r}")
        loaded = self._d.loaded
        tap = EventTap(fn, self._drop_everywhere, self._d.settings.log)
        loaded.everywhere.append(tap)
        for subs in loaded.subscribers.values():
            subs.append(tap)
        return tap

    def observe(self, observer: Observer) -> Callable[[], None]:
        """Ask ``observer`` at the start of every call whether it watches it
        (``observer.begin(context_id, call)`` returns a
        :class:`~turnfsm.engine.Watch` or None; see docs/observability.md).
        Returns the function that removes it again."""
        if not callable(getattr(observer, "begin", None)):
            raise InvalidInput("observer", f"must have a begin() method, not {observer!r}")
        observers = self._d.observers
        observers.append(observer)

        def remove() -> None:
            if observer in observers:
                observers.remove(observer)

        return remove

    def _drop_subscriber(self, sub: Subscription) -> None:
        loaded = self._d.loaded
        subs = loaded.subscribers.get(sub.context_id)
        if subs is not None and sub in subs:
            subs.remove(sub)
            if not subs and sub.context_id not in loaded.runtimes:
                del loaded.subscribers[sub.context_id]

    def _drop_everywhere(self, sub: Sink) -> None:
        loaded = self._d.loaded
        if sub in loaded.everywhere:
            loaded.everywhere.remove(sub)
        for subs in loaded.subscribers.values():
            if sub in subs:
                subs.remove(sub)

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
