"""The public class: :class:`Engine`. Each method checks its arguments, then
hands the call to the drive loop (``_drive``); what a call does first is in
``_calls``, the work of each state in one module per effect. See
docs/architecture.md for the map.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import anyio

from ..adapters.inbound import parse_request
from ..adapters.llm import LLM
from ..enhancers import (
    Compaction,
    CurrentMessageMarker,
    Enhancer,
    SystemPromptEnhancer,
    TokenBudget,
    ToolCallHistory,
    ToolDefinitionsEnhancer,
    UserLocale,
)
from ..errors import (
    BranchError,
    ContextBusy,
    ContextLeased,
    InvalidInput,
    NotAtRest,
    StoreError,
    SubContextError,
    TurnFSMError,
)
from ..events import Event
from ..model import (
    ApprovalStatus,
    Branch,
    ChatConfig,
    ChatContext,
    ContentPart,
    MessageNode,
    Role,
    SystemPrompt,
)
from ..states import CHANGES, RESTING, State, TurnMachine
from ..storage import MemoryStore, StepLog, Store, WorkQueue
from ..tools import Tool, ToolRegistry
from . import _calls, _children, _leases, _requests, _subcontexts
from ._children import Child, ChildInfo, Finished, Summarizer
from ._clock import Clock, SystemClock
from ._defaults import Ids, checked_id, default_logger
from ._drive import Driver, Start
from ._inputs import (
    UNSET,
    Unset,
    check_call_ids,
    check_content,
    check_count,
    check_id,
    check_name,
    check_parameters,
    check_text,
    check_title,
)
from ._leases import DEFAULT_LEASE_TTL, HOST
from ._modes import Mode, Modes
from ._recovery import Recovery
from ._retry import RetryPolicy
from ._subscribers import EngineSubscription, EventTap, Sink, Subscription
from ._turn import Turn

__all__ = ["Engine"]

_INPUT_ROLES = {"user": Role.USER, "frontend_operator": Role.FRONTEND_OPERATOR}


class Engine:
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
    the turn's next call, stored once as a message and reused). ``clock`` and
    ``ids`` are injected so that tests and replays are deterministic. At most
    ``max_loaded`` contexts are held in memory; the least recently used resting
    ones are unloaded beyond that and load again from the store when called.

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
    this engine's name on its leases (``host:pid:random``).
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
        clock: Clock | None = None,
        ids: Callable[[], str] | None = None,
        tool_history_rounds: int | None = None,
        subscriber_buffer: int = 1024,
        max_loaded: int = 4096,
        logger: Any = None,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        modes: Iterable[Mode] = (),
        token_budget: TokenBudget | None = None,
        compaction: Compaction | None = None,
    ) -> None:
        check_count("max_iterations", max_iterations, minimum=1)
        check_count("max_loaded", max_loaded, minimum=1)
        check_count("subscriber_buffer", subscriber_buffer, minimum=1)
        check_count("tool_history_rounds", tool_history_rounds, minimum=0, optional=True)
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
            raise InvalidInput(
                "retry", f"must be a RetryPolicy or None, not {type(retry).__name__}"
            )
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
        if ids is not None and not callable(ids):
            raise InvalidInput("ids", f"must be a callable returning ids, not {ids!r}")
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
        builtin += [
            SystemPromptEnhancer(mode=known_modes.instructions),
            ToolDefinitionsEnhancer(per_context=known_modes.definitions),
            UserLocale(),
            CurrentMessageMarker(),
        ]
        last: tuple[Enhancer, ...] = (token_budget,) if token_budget is not None else ()
        self._subscriber_buffer = subscriber_buffer
        self._d = d = Driver(
            llm=llm,
            tools=registry,
            store=store if store is not None else MemoryStore(),
            enhancers=(*builtin, *enhancers, *last),
            builtin_count=len(builtin),
            modes=known_modes,
            retry_policy=retry or RetryPolicy(),
            max_iterations=max_iterations,
            clock=clock or SystemClock(),
            ids=Ids() if ids is None else functools.partial(checked_id, ids),
            log=logger if logger is not None else default_logger(),
            max_loaded=max_loaded,
            lease_ttl=float(lease_ttl),
            owner=f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
        )
        d.subtask_host = _children.SubtaskRunner(self)
        self._d.view_plan.budget = token_budget
        self._d.view_plan.compaction = compaction
        self._d.view_plan.shrink = history.shrink if history is not None else None

    # ------------------------------------------------------------------ settings

    @property
    def llm(self) -> LLM | None:
        return self._d.llm

    @llm.setter
    def llm(self, llm: LLM | None) -> None:
        self._d.llm = llm

    @property
    def tools(self) -> ToolRegistry:
        return self._d.tools

    @property
    def modes(self) -> tuple[Mode, ...]:
        """The engine's modes (``chat`` first unless it was given one)."""
        return tuple(self._d.modes)

    @property
    def store(self) -> Store:
        return self._d.store

    @property
    def retry_policy(self) -> RetryPolicy:
        return self._d.retry_policy

    @property
    def max_iterations(self) -> int:
        return self._d.max_iterations

    @property
    def clock(self) -> Clock:
        return self._d.clock

    @property
    def enhancers(self) -> tuple[Enhancer, ...]:
        return self._d.enhancers

    @property
    def max_loaded(self) -> int:
        return self._d.max_loaded

    @property
    def lease_ttl(self) -> float:
        return self._d.lease_ttl

    @property
    def owner(self) -> str:
        """This engine's name on the leases it takes (one per Engine object)."""
        return self._d.owner

    @property
    def _machine(self) -> TurnMachine:
        return self._d.machine

    @property
    def loaded_contexts(self) -> list[str]:
        """The ids of the contexts held in memory, least recently used first."""
        return list(self._d.loaded.runtimes)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Engine:
        d = self._d
        if d.beats is None:
            # one heartbeat task for every call of this engine while it is entered
            # (an engine used without ``async with`` starts one per call instead)
            beats = anyio.create_task_group()
            await beats.__aenter__()
            beats.start_soon(_leases.heartbeat_all, d)
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
        """Detach every context, end every subscription, close the store."""
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
        await self._d.store.aclose()

    # ------------------------------------------------------------------ contexts

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
        gets an error result and never runs.
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
        )

    async def _create(
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
    ) -> str:
        check_text("system_prompt", system_prompt, optional=True)
        check_name("model", model)
        self._d.check_mode("mode", mode)
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
        allowed = _check_tools("tools", tools, self.tools)
        if parent_id is not None:
            parent = await self.get_context(parent_id)
            if parent.config.archived:
                raise SubContextError(
                    parent_id, "it is a finished sub-context: it takes no new sub-contexts"
                )
        now = self._d.now()
        prompt = SystemPrompt(id=self._d.ids(), content=system_prompt) if system_prompt else None
        ctx = ChatContext(
            id=context_id if context_id is not None else self._d.ids(),
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
            ),
            branches={"main": Branch(name="main", system_prompt=prompt, user_prompt=user_prompt)},
            created_at=now,
            updated_at=now,
        )
        await self.store.create(ctx)
        return ctx.id

    async def get_context(self, context_id: str) -> ChatContext:
        """A copy of the context as last committed."""
        check_id("context_id", context_id)
        rt = self._d.loaded.get(context_id)
        if rt is not None and context_id not in self._d.busy:
            return rt.ctx.model_copy(deep=True)
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
    ) -> Turn:
        """A user (or frontend operator) message; runs the turn until the context rests.

        At ``AwaitingToolApproval`` the pending calls are first closed with
        "superseded" results. ``message_id`` is the id the message gets (default:
        one from the engine's id factory, see :meth:`new_id`), so that a caller
        knows it before the turn rests; an id the context already holds is
        refused with :class:`InvalidInput`.
        """
        start = self._start_send(context_id, content, role, message_id)
        return await _subcontexts.surface(self, await self._d.run(context_id, start))

    def _start_send(
        self,
        context_id: str,
        content: str | Sequence[ContentPart],
        role: str,
        message_id: str | None,
    ) -> Start:
        """The checked arguments of :meth:`send` and :meth:`submit`, as the
        call's start."""
        check_id("context_id", context_id)
        if not isinstance(role, str) or role not in _INPUT_ROLES:
            raise InvalidInput("role", f"must be 'user' or 'frontend_operator', not {role!r}")
        parts = check_content("content", content)
        if message_id is not None:
            check_id("message_id", message_id)
        return functools.partial(_calls.start_send, self._d, parts, _INPUT_ROLES[role], message_id)

    def new_id(self) -> str:
        """A fresh id from the engine's id factory (the ``ids`` it was made with):
        what its messages get; for a ``message_id`` chosen before a send."""
        return self._d.ids()

    async def submit(
        self,
        context_id: str,
        content: str | Sequence[ContentPart],
        role: str = "user",
        *,
        message_id: str | None = None,
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
        ``message_id`` names the message, as for :meth:`send`.
        A store that no worker can claim from (it has no ``claim_expired``: the
        memory and files stores) is refused with :class:`StoreError`.
        """
        start = self._start_send(context_id, content, role, message_id)
        d = self._d
        if not isinstance(d.store, WorkQueue):
            raise StoreError(
                f"{d.store!r} cannot hand turns to workers (it has no claim_expired): "
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
        routed = await _children.route_decisions(self, context_id, [call_id])
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
                done = rt.done
                d.request_cancel(context_id)
                await done.wait()
                assert rt.last_turn is not None
                return rt.last_turn
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
        resumed: dict[str, Turn] = {}
        skipped: dict[str, str] = {}
        failed: dict[str, TurnFSMError] = {}
        busy = self._d.busy
        # A store that claims work (PostgreSQL: ``claim_expired``) hands each
        # context away from rest to one of the engines recovering at once; the
        # others skip it. Contexts it does not hand out are resumed only when
        # their holder is a dead process of this host (taken over at once).
        claimed: set[str] | None = None
        if isinstance(self.store, WorkQueue):
            d = self._d
            leases = await self.store.claim_expired(
                d.owner, d.lease_ttl, now=d.clock.time(), limit=None
            )
            claimed = {lease.context_id for lease in leases}
        for summary in await self.store.list_contexts():
            cid = summary.id
            try:
                state = State(summary.state)
            except ValueError:
                failed[cid] = StoreError(
                    f"context {cid!r}: its stored state {summary.state!r} is not a state "
                    "of the table; it was left as it is"
                )
                continue
            if state in RESTING:
                continue
            if cid in busy:
                skipped[cid] = f"a call of this engine ({self.owner}) is running on it"
                continue
            if claimed is not None and cid not in claimed:
                held = await self.store.lease(cid)
                if held is None:
                    continue  # another engine claimed it and has brought it to rest
                if held.owner != self.owner and not _leases.owner_gone(held.owner):
                    until = datetime.fromtimestamp(held.expires_at, UTC).isoformat()
                    skipped[cid] = f"leased by {held.owner} until {until}"
                    continue
            try:
                resumed[cid] = await self.resume(cid)
            except ContextLeased as exc:
                until = datetime.fromtimestamp(exc.expires_at, UTC).isoformat()
                skipped[cid] = f"leased by {exc.owner} until {until}"
            except ContextBusy:
                skipped[cid] = f"a call of this engine ({self.owner}) is running on it"
            except TurnFSMError as exc:
                failed[cid] = exc
        return Recovery(resumed=resumed, skipped=skipped, failed=failed)

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
        d = self._d
        return await d.run(context_id, functools.partial(_calls.start_fork, d, name, at, prompts))

    async def switch_branch(self, context_id: str, name: str) -> Turn:
        """Make another branch active (a ``branch_switched`` change record)."""
        check_id("context_id", context_id)
        check_id("name", name)
        d = self._d
        return await d.run(context_id, functools.partial(_calls.start_switch, d, name))

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
        d = self._d
        await d.run(
            context_id, functools.partial(_calls.start_set_branch_prompts, d, branch, prompts)
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
    ) -> ChatConfig:
        """Change the context's config: the fields given, the others kept.

        ``model`` and ``mode`` are names; ``parameters`` (the provider's request
        parameters: temperature, max_tokens, ...) replace the stored ones as a
        whole; ``title`` is one line (``None`` clears it). Allowed at rest
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
            fields["mode"] = self._d.check_mode("mode", mode)
        if not isinstance(parameters, Unset):
            fields["parameters"] = check_parameters("parameters", parameters)
        if not isinstance(title, Unset):
            fields["title"] = check_title("title", title)
        out: list[ChatConfig] = []
        d = self._d
        await d.run(context_id, functools.partial(_calls.start_update_config, d, fields, out))
        return out[0]

    # ------------------------------------------------------------------ sub-contexts

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
        check_id("parent_id", parent_id)
        parts = check_content("task", task)
        check_text("system_prompt", system_prompt, optional=True)
        if model is not None:
            check_name("model", model)
        if mode is not None:
            self._d.check_mode("mode", mode)
        allowed = _check_tools("tools", tools, self.tools)
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
        chosen = _children.as_summarizer("summarizer", summarizer)
        return await _subcontexts.finish(self, child_id, chosen, keep)

    async def children(self, context_id: str) -> list[ChildInfo]:
        """The direct sub-contexts of a context (id, stored state, title, finished),
        oldest first. :class:`~turnfsm.errors.ContextNotFound` for an unknown id."""
        check_id("context_id", context_id)
        await self.get_context(context_id)
        return await _children.children_of(self.store, context_id)

    async def delete_context(self, context_id: str) -> list[str]:
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

    # ------------------------------------------------------------------ request bodies

    async def send_request(self, body: Any, context_id: str | None = None) -> Turn:
        """Answer a chat request body (the ``contextManagement`` body or the legacy
        ``messages`` body, parsed by :func:`~turnfsm.adapters.inbound.parse_request`;
        :class:`InvalidInput` names what is wrong with it).

        With no ``context_id``, a new context is made (``create_context()``
        defaults); with one, the body is added to that context. Its
        conversation context messages that the context does not hold yet are
        appended (a message with a ``messageId`` is known by it; the others by
        matching, in order, what the branch said), then the current message,
        flagged current with the user's language and time zone, all in the
        ``user_message`` step; then the turn runs, once, as after :meth:`send`.
        A current message whose ``messageId`` the context already holds is
        refused (:class:`InvalidInput`): a request is answered once. The view
        marks the current message (``[CURRENT MESSAGE FROM USER]: ...``) and
        states the language and time zone (the built-in enhancers
        :class:`~turnfsm.enhancers.CurrentMessageMarker` and
        :class:`~turnfsm.enhancers.UserLocale`).
        """
        request = parse_request(body)
        if context_id is None:
            context_id = await self.create_context()
        else:
            check_id("context_id", context_id)
        d = self._d
        return await d.run(context_id, functools.partial(_requests.start_request, d, request))

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
        check_id("context_id", context_id)
        if branch is not None:
            check_id("branch", branch)
        check_count("offset", offset, minimum=0)
        check_count("limit", limit, minimum=0, optional=True)
        rt = self._d.loaded.get(context_id)
        if rt is not None and context_id not in self._d.busy:
            ctx = rt.ctx
        else:
            ctx = await self.store.load(context_id)
        name = branch if branch is not None else ctx.active_branch_name
        found = ctx.branches.get(name)
        if found is None:
            raise BranchError(f"context {context_id!r} has no branch {name!r}")
        end = None if limit is None else offset + limit
        pool = ctx.message_pool
        return [pool[mid] for mid in found.message_ids[offset:end]]

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
        tap = EventTap(fn, self._drop_everywhere)
        loaded.everywhere.append(tap)
        for subs in loaded.subscribers.values():
            subs.append(tap)
        return tap

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


def _check_tools(where: str, tools: object, registry: ToolRegistry) -> list[str] | None:
    """An allow-list of tool names: ``None``, or names of ``registry`` (each once)."""
    if tools is None:
        return None
    if isinstance(tools, str | bytes) or not isinstance(tools, Sequence):
        raise InvalidInput(where, f"must be a list of tool names or None, not {tools!r}")
    out: list[str] = []
    for i, name in enumerate(tools):
        if not isinstance(name, str):
            raise InvalidInput(f"{where}[{i}]", f"must be a tool name, not {name!r}")
        if name not in registry:
            known = ", ".join(registry.names) or "(none)"
            raise InvalidInput(
                f"{where}[{i}]", f"the engine has no tool named {name!r} (its tools: {known})"
            )
        if name not in out:
            out.append(name)
    return out


def _check_prompts(system_prompt: object, user_prompt: object) -> dict[str, str | Unset | None]:
    """The prompts given to ``fork`` / ``set_branch_prompts``, checked as texts."""
    prompts: dict[str, str | Unset | None] = {}
    for where, value in (("system_prompt", system_prompt), ("user_prompt", user_prompt)):
        if not isinstance(value, Unset):
            check_text(where, value, optional=True)
        prompts[where] = value  # type: ignore[assignment]
    return prompts
