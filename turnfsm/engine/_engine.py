"""The driver: runs the work each state declares, one context's events at a time.

How a call works: the public method validates its input against the stored
context (changing nothing when it is refused), takes the trigger the table
declares, commits, and then drives the context: while the state just entered
declares an effect (``STATE_EFFECTS``), the effect runs (enhancers, LLM,
policy, tools, backoff) and ends by taking exactly one trigger and
committing it. When a resting state is reached the call returns a
:class:`Turn`.

Every committed step is durable in the store before its events are emitted.
A store error propagates to the caller and the loaded copy of the context is
dropped, so the next call starts again from the last committed state.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import socket
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal

import anyio
import structlog

from ..enhancers import Enhancer, SystemPromptEnhancer, ToolDefinitionsEnhancer, ToolHistoryTrimmer
from ..errors import (
    BranchError,
    ContextBusy,
    ContextLeased,
    EnhancerError,
    IllegalTransition,
    InvalidInput,
    LeaseLost,
    LLMError,
    PermanentLLMError,
    StoreError,
    ToolCallNotPending,
    TurnFSMError,
    UnknownToolCall,
)
from ..events import (
    ContentDelta,
    Event,
    Failed,
    MessageCompleted,
    Retrying,
    StateChanged,
    ToolApprovalRequested,
    ToolCallsRequested,
    ToolResult,
    TurnCompleted,
)
from ..model import (
    ApprovalStatus,
    Branch,
    ChatConfig,
    ChatContext,
    ContentPart,
    InternalMessage,
    LLMRequest,
    LLMResponse,
    MessageMetadata,
    MessageNode,
    MessageType,
    Role,
    SystemPrompt,
    TextDelta,
    TextPart,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallRequest,
    ToolCallResult,
    TurnProgress,
    clean_text,
    to_chat_message,
    to_chat_messages,
)
from ..states import (
    RESTING,
    STATE_EFFECTS,
    ContextHolder,
    Effect,
    State,
    Trigger,
    TurnMachine,
    next_state,
)
from ..storage import Commit, Lease, MemoryStore, StepLog, Store
from ..tools import Approval, Tool, ToolOutcome, ToolRegistry, run_calls
from ._answer import (
    adapter_failure,
    build_answer,
    close_stream,
    delta_text,
    invalid_answer,
    open_stream,
    storable_error,
)
from ._clock import Clock, SystemClock
from ._inputs import (
    check_call_ids,
    check_content,
    check_count,
    check_id,
    check_name,
    check_parameters,
    check_text,
)
from ._recovery import Recovery
from ._retry import RetryPolicy
from ._subscribers import Subscription
from ._turn import StopReason, Turn

__all__ = ["Engine"]

S = State
T = Trigger

_CANCELLABLE = frozenset(State) - {S.IDLE, S.PERMANENT_FAILURE}
_WAITS = frozenset({Effect.CALL_LLM, Effect.RUN_TOOLS, Effect.BACKOFF})
"""Effects that wait on the outside world (the LLM, tools, the clock). What was
taken before them is committed first; the steps between two waits (a user
message and its prepared request; an answer and the policy's decision on its
calls) share one commit, and each keeps its own audit step."""
_INPUT_ROLES = {"user": Role.USER, "frontend_operator": Role.FRONTEND_OPERATOR}
_HOST = socket.gethostname()

DEFAULT_LEASE_TTL = 30.0
"""Seconds a call's lease on its context lasts without a heartbeat."""


def _owner_gone(owner: str) -> bool:
    """Whether a lease owner (``host:pid:random``) is a process of this host that no
    longer exists: its lease can be taken over before it expires. Anything else
    (another host, a live pid, a name of another form) waits for the expiry."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or sys.platform == "win32":
        return False
    host, pid_text, _ = parts
    if host != _HOST or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _commit_nowait(store: Store) -> Callable[[Commit], None] | None:
    """A store's synchronous commit, when it has one that stands for its
    ``commit`` (both defined by the same class: a subclass that overrides
    ``commit`` is always called through it)."""
    fn: Callable[[Commit], None] | None = getattr(store, "commit_nowait", None)
    if fn is None:
        return None
    mro = type(store).__mro__
    owner = next((k for k in mro if "commit" in vars(k)), None)
    owner_nowait = next((k for k in mro if "commit_nowait" in vars(k)), None)
    return fn if owner is owner_nowait else None


class _Ids:
    """Default ids: a random 64-bit prefix per engine and a counter (unique across
    engines and processes, and far cheaper than a uuid4 per message)."""

    __slots__ = ("_next", "_prefix")

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:16]
        self._next = itertools.count(1).__next__

    def __call__(self) -> str:
        return f"{self._prefix}-{self._next():x}"


def _checked_id(ids: Callable[[], object]) -> str:
    """An id from the application's ``ids`` factory, held to the id rule
    (a context, message or system prompt id must load back from every store)."""
    value = ids()
    try:
        return check_id("ids", value)
    except InvalidInput as exc:
        raise InvalidInput("ids", f"the id factory returned {value!r}: {exc.reason}") from None


def _default_logger(level: int | None = None) -> Any:
    """A structlog logger to stderr at ``level``, by default the level of the stdlib
    ``turnfsm`` logger (WARNING unless the application says otherwise). Pass
    ``logger=`` to the engine to use the application's own structlog configuration."""
    if level is None:
        level = logging.getLogger("turnfsm").getEffectiveLevel()
    return structlog.wrap_logger(
        structlog.PrintLogger(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(level),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event"]),
        ],
    )


@dataclass(eq=False)
class _Runtime:
    """A loaded context: the working copy and what the engine keeps beside it."""

    ctx: ChatContext
    holder: ContextHolder
    chat: list[dict[str, Any]]
    """The active branch in chat format, kept in step with ``ctx``."""
    subscribers: list[Subscription]
    log: Any
    request_cancel: Callable[[], None] = lambda: None
    seq: int = 0
    """The last seq reserved."""
    sent_seq: int = 0
    """The last seq that went out (stored, or a ContentDelta sent between commits)."""
    scope: anyio.CancelScope | None = None
    cancel_requested: bool = False
    done: anyio.Event | None = None
    last_turn: Turn | None = None
    # changes not yet committed
    appended: list[tuple[str, MessageNode]] = field(default_factory=list)
    replaced: dict[str, MessageNode] = field(default_factory=dict)
    branches: list[Branch] = field(default_factory=list)
    active_changed: bool = False
    # the running call
    turn_states: list[State] = field(default_factory=list)
    turn_nodes: list[MessageNode] = field(default_factory=list)
    stop_reason: StopReason | None = None
    request: LLMRequest | None = None
    answer: MessageNode | None = None
    partial: list[str] = field(default_factory=list)
    partial_id: str | None = None
    outbox: list[tuple[Callable[..., Event], int, float, dict[str, Any]]] = field(
        default_factory=list
    )
    """Events waiting for the next commit: (kind, seq, timestamp, fields)."""
    call_ids: set[str] | None = None
    """Every tool call id in the context, built on first need and kept up to
    date as answers are appended, so that making an answer's ids unique does
    not scan the history on every call."""
    lease: Lease | None = None
    """The lease of the running call (after it returns: the last one it held)."""


class Engine:
    """Drives conversations through the declared state machine.

    ::

        async with Engine(llm=ScriptedLLM([...]), tools=[get_weather]) as engine:
            cid = await engine.create_context(system_prompt="You are helpful.")
            turn = await engine.send(cid, "What's the weather in London?")

    ``enhancers`` run after the built-in ones (system prompt, tool definitions,
    and history trimming when ``tool_history_rounds`` is set). ``clock`` and
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
        llm: Any = None,
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
    ) -> None:
        check_count("max_iterations", max_iterations, minimum=1)
        check_count("max_loaded", max_loaded, minimum=1)
        check_count("subscriber_buffer", subscriber_buffer, minimum=1)
        check_count("tool_history_rounds", tool_history_rounds, minimum=0, optional=True)
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
        self.lease_ttl = float(lease_ttl)
        self.owner = f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        """This engine's name on the leases it takes (one per Engine object)."""
        self.max_loaded = max_loaded
        self.llm = llm
        self.tools = ToolRegistry(tools)
        if isinstance(store, str):
            from ..storage import open_store

            store = open_store(store)
        self.store: Store = store if store is not None else MemoryStore()
        self._commit_nowait = _commit_nowait(self.store)
        self.retry_policy = retry or RetryPolicy()
        self.max_iterations = max_iterations
        self.clock: Clock = clock or SystemClock()
        self._ids = _Ids() if ids is None else functools.partial(_checked_id, ids)
        builtin: list[Enhancer] = [
            SystemPromptEnhancer(),
            ToolDefinitionsEnhancer(self.tools.definitions),
        ]
        if tool_history_rounds is not None:
            builtin.append(ToolHistoryTrimmer(tool_history_rounds))
        self.enhancers: tuple[Enhancer, ...] = (*builtin, *enhancers)
        self._builtin_count = len(builtin)
        self._subscriber_buffer = subscriber_buffer
        self._log = logger if logger is not None else _default_logger()
        self._machine = TurnMachine()
        self._runtimes: dict[str, _Runtime] = {}
        self._subscribers: dict[str, list[Subscription]] = {}
        self._busy: set[str] = set()
        self._seq_marks: dict[str, int] = {}
        self._beats: anyio.abc.TaskGroup | None = None
        self._effects: dict[Effect, Callable[[_Runtime], Awaitable[None]]] = {
            Effect.PREPARE: self._prepare,
            Effect.CALL_LLM: self._call_llm,
            Effect.DECIDE: self._decide,
            Effect.RUN_TOOLS: self._run_tools,
            Effect.BACKOFF: self._backoff,
        }

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Engine:
        if self._beats is None:
            # one heartbeat task for every call of this engine while it is entered
            # (an engine used without ``async with`` starts one per call instead)
            beats = anyio.create_task_group()
            await beats.__aenter__()
            beats.start_soon(self._heartbeat_all)
            self._beats = beats
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        beats, self._beats = self._beats, None
        if beats is not None:
            beats.cancel_scope.cancel()
            await beats.__aexit__(None, None, None)  # the body's error stays its own
        await self.aclose()

    async def aclose(self) -> None:
        """Detach every context, end every subscription, close the store."""
        for cid in list(self._runtimes):
            self._unload(cid)
        for subs in self._subscribers.values():
            for sub in subs:
                sub.end()
        self._subscribers.clear()
        await self.store.aclose()

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock.time(), UTC)

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
    ) -> str:
        """Create and store a new context in ``Idle``; returns its id.

        Every argument is checked first (:class:`InvalidInput` names the one
        refused; nothing is stored): ``context_id`` and ``parent_id`` by the id
        rule (1 to 200 characters, no control character, no lone surrogate),
        texts for valid Unicode, ``parameters`` by the JSON payload rules of
        :mod:`turnfsm.model` (depth, size, string keys, finite numbers).
        """
        check_text("system_prompt", system_prompt, optional=True)
        check_name("model", model)
        check_name("mode", mode)
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
        now = self._now()
        prompt = SystemPrompt(id=self._ids(), content=system_prompt) if system_prompt else None
        ctx = ChatContext(
            id=context_id if context_id is not None else self._ids(),
            parent_id=parent_id,
            config=ChatConfig(
                model_id=model,
                mode=mode,
                parameters=params,
                system_prompt_id=prompt.id if prompt else None,
                agent_role=agent_role,
                workspace_path=workspace_path,
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
        rt = self._runtimes.get(context_id)
        if rt is not None and context_id not in self._busy:
            return rt.ctx.model_copy(deep=True)
        return await self.store.load(context_id)

    def _attach(self, ctx: ChatContext) -> _Runtime:
        holder = ContextHolder(ctx.id)
        self._machine.attach(holder, State(ctx.current_state))
        rt = _Runtime(
            ctx=ctx,
            holder=holder,
            chat=to_chat_messages(n.message for n in ctx.history()),
            subscribers=self._subscribers.setdefault(ctx.id, []),
            log=self._log.bind(context_id=ctx.id),
            # after a failed commit the stored seq may lag what subscribers saw
            seq=max(ctx.event_seq, self._seq_marks.pop(ctx.id, 0)),
        )
        rt.sent_seq = rt.seq
        rt.request_cancel = functools.partial(self.request_cancel, ctx.id)
        self._runtimes[ctx.id] = rt
        return rt

    def _unload(self, context_id: str) -> None:
        rt = self._runtimes.pop(context_id, None)
        if rt is not None:
            self._machine.detach(rt.holder)
            if rt.sent_seq > rt.ctx.event_seq:  # seqs seen but not stored: never reuse them
                self._seq_marks[context_id] = rt.sent_seq

    async def unload(self, context_id: str) -> None:
        """Drop the loaded copy of a resting context (it stays in the store)."""
        check_id("context_id", context_id)
        if context_id in self._busy:
            rt = self._runtimes.get(context_id)
            raise ContextBusy(context_id, rt.holder.state if rt else "loading")
        self._unload(context_id)

    async def _enter(self, context_id: str) -> _Runtime:
        """Mark the context busy and return it loaded; raise ContextBusy if it is busy."""
        if context_id in self._busy:
            rt = self._runtimes.get(context_id)
            raise ContextBusy(context_id, rt.holder.state if rt else "loading")
        self._busy.add(context_id)
        lease: Lease | None = None
        try:
            lease = await self._acquire(context_id)
            rt = self._runtimes.pop(context_id, None)
            if rt is not None and (rt.lease is None or rt.lease.token + 1 != lease.token):
                # another owner held the context since this engine's last call
                # on it: what is loaded may be stale
                self._unload(context_id)
                rt = None
            if rt is None:
                rt = self._attach(await self.store.load(context_id))
            else:
                self._runtimes[context_id] = rt  # most recently used last
        except BaseException:
            if lease is not None:
                await self._release(lease)
            self._busy.discard(context_id)
            raise
        rt.lease = lease
        rt.turn_states = []
        rt.turn_nodes = []
        rt.stop_reason = None
        rt.cancel_requested = False
        rt.done = anyio.Event()
        return rt

    def _leave(self, rt: _Runtime) -> None:
        self._busy.discard(rt.ctx.id)
        rt.scope = None
        if rt.done is not None:
            rt.done.set()
        if len(self._runtimes) > self.max_loaded:
            self._evict()

    def _evict(self) -> None:
        """Unload the least recently used resting contexts beyond ``max_loaded``
        (they stay in the store and load again on their next call)."""
        excess = len(self._runtimes) - self.max_loaded
        for cid in [c for c in self._runtimes if c not in self._busy][:excess]:
            self._unload(cid)

    @property
    def loaded_contexts(self) -> list[str]:
        """The ids of the contexts held in memory, least recently used first."""
        return list(self._runtimes)

    # ------------------------------------------------------------------ public calls

    async def send(
        self,
        context_id: str,
        content: str | Sequence[ContentPart],
        role: str = "user",
    ) -> Turn:
        """A user (or frontend operator) message; runs the turn until the context rests.

        At ``AwaitingToolApproval`` the pending calls are first closed with
        "superseded" results.
        """
        check_id("context_id", context_id)
        if not isinstance(role, str) or role not in _INPUT_ROLES:
            raise InvalidInput("role", f"must be 'user' or 'frontend_operator', not {role!r}")
        parts = _content_parts(content)
        rt = await self._enter(context_id)
        return await self._call(rt, functools.partial(self._start_send, parts, _INPUT_ROLES[role]))

    async def _start_send(self, parts: list[ContentPart], role: Role, rt: _Runtime) -> None:
        state = self._require(rt, T.USER_MESSAGE)
        if state is S.AWAITING_TOOL_APPROVAL:
            self._close_open_calls(rt, "superseded", "superseded by a new user message")
        now = self._now()
        self._append(
            rt, InternalMessage(role=role, content=parts, metadata=MessageMetadata(created_at=now))
        )
        rt.ctx.progress = TurnProgress(iteration=1, attempt=1)
        self._fire(rt, T.USER_MESSAGE)

    async def approve(self, context_id: str, call_ids: str | Sequence[str]) -> Turn:
        """Approve pending tool calls; once none is pending, the approved calls run."""
        check_id("context_id", context_id)
        ids = check_call_ids("call_ids", call_ids)
        decisions = dict.fromkeys(ids, (ApprovalStatus.APPROVED, None))
        rt = await self._enter(context_id)
        return await self._call(rt, functools.partial(self._start_decide, decisions))

    async def deny(
        self, context_id: str, call_id: str | Sequence[str], reason: str | None = ""
    ) -> Turn:
        """Deny pending tool calls: they are not run, and each result says it was
        denied (with ``reason``). ``call_id`` is one id or a list of them."""
        check_id("context_id", context_id)
        ids = check_call_ids("call_id", call_id)
        check_text("reason", reason, optional=True)
        decisions = dict.fromkeys(ids, (ApprovalStatus.DENIED, reason or None))
        rt = await self._enter(context_id)
        return await self._call(rt, functools.partial(self._start_decide, decisions))

    async def _start_decide(
        self, decisions: Mapping[str, tuple[ApprovalStatus, str | None]], rt: _Runtime
    ) -> None:
        ctx = rt.ctx
        pending = {c.id: c for c in ctx.pending_tool_calls()}
        for cid in decisions:
            if cid not in pending:
                found = _find_call(ctx, cid)
                if found is None:
                    raise UnknownToolCall(ctx.id, cid)
                raise ToolCallNotPending(ctx.id, cid, _call_status(ctx, found))
        state = State(rt.holder.state)
        if state is not S.AWAITING_TOOL_APPROVAL:  # pending calls exist only there
            raise IllegalTransition(state, T.APPROVALS_RESOLVED, context_id=ctx.id)
        self._set_decisions(
            rt,
            {cid: (status, "human", reason) for cid, (status, reason) in decisions.items()},
        )
        if ctx.pending_tool_calls():
            rt.stop_reason = StopReason.AWAITING_APPROVAL
            return
        self._mark_started(rt)
        self._fire(rt, T.APPROVALS_RESOLVED)

    async def retry(self, context_id: str) -> Turn:
        """Try the failed LLM call again (from ``PermanentFailure``)."""
        check_id("context_id", context_id)
        rt = await self._enter(context_id)
        return await self._call(rt, self._start_retry)

    async def _start_retry(self, rt: _Runtime) -> None:
        # the table also has retry from TransientFailure: that one is the engine's own
        if State(rt.holder.state) is not S.PERMANENT_FAILURE:
            raise IllegalTransition(rt.holder.state, T.RETRY, context_id=rt.ctx.id)
        p = rt.ctx.progress
        rt.ctx.progress = TurnProgress(iteration=max(p.iteration, 1), attempt=1)
        self._fire(rt, T.RETRY)

    async def reset(self, context_id: str) -> Turn:
        """Abandon a failed turn (from ``PermanentFailure`` to ``Idle``)."""
        check_id("context_id", context_id)
        rt = await self._enter(context_id)
        return await self._call(rt, self._start_reset)

    async def _start_reset(self, rt: _Runtime) -> None:
        self._require(rt, T.RESET)
        rt.ctx.progress = TurnProgress()
        rt.stop_reason = StopReason.RESET
        self._fire(rt, T.RESET)

    async def cancel(self, context_id: str) -> Turn:
        """Cancel the running turn, or the wait for approval.

        Partial text is kept and marked cancelled; open tool calls get
        "cancelled" results. When a call is running on the context, this waits
        for it to wind down and returns its turn.
        """
        check_id("context_id", context_id)
        if context_id in self._busy:
            rt = self._runtimes.get(context_id)
            if rt is not None and rt.done is not None:
                done = rt.done
                self.request_cancel(context_id)
                await done.wait()
                assert rt.last_turn is not None
                return rt.last_turn
        rt = await self._enter(context_id)
        return await self._call(rt, self._start_cancel)

    async def _start_cancel(self, rt: _Runtime) -> None:
        self._require(rt, T.CANCEL)
        await self._cancel_in_place(rt)

    def request_cancel(self, context_id: str) -> None:
        """Ask the running call on the context to cancel; returns at once.

        Does nothing when no call is running.
        """
        check_id("context_id", context_id)
        rt = self._runtimes.get(context_id)
        if rt is None or context_id not in self._busy:
            return
        rt.cancel_requested = True
        if rt.scope is not None:
            rt.scope.cancel()

    async def resume(self, context_id: str) -> Turn:
        """Continue a context that a crash left in a non-resting state.

        :class:`~turnfsm.errors.ContextLeased` when another engine is running a
        call on it (its lease has not expired).
        """
        check_id("context_id", context_id)
        rt = await self._enter(context_id)
        return await self._call(rt, self._start_resume)

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
            if cid in self._busy:
                skipped[cid] = f"a call of this engine ({self.owner}) is running on it"
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

    # ------------------------------------------------------------------ leases

    async def _acquire(self, context_id: str) -> Lease:
        """Take the context's lease for this engine; ContextLeased when another
        live owner holds it. A lease whose owner is a dead process of this host
        is taken over at once (after a crash and restart, say)."""
        store = self.store
        now = self.clock.time()
        lease = await store.acquire_lease(context_id, self.owner, self.lease_ttl, now=now)
        if lease is not None:
            return lease
        held = await store.lease(context_id)
        if held is not None and _owner_gone(held.owner):
            lease = await store.acquire_lease(
                context_id, self.owner, self.lease_ttl, now=now, take_over=held.token
            )
            if lease is not None:
                rt_log = self._log.bind(context_id=context_id)
                rt_log.warning("lease_taken_over", dead_owner=held.owner, token=lease.token)
                return lease
            held = await store.lease(context_id)
        if held is None:  # released in between: try once more
            lease = await store.acquire_lease(context_id, self.owner, self.lease_ttl, now=now)
            if lease is not None:
                return lease
            held = await store.lease(context_id)
        raise ContextLeased(
            context_id,
            held.owner if held is not None else "another engine",
            held.expires_at if held is not None else now,
        )

    async def _release(self, lease: Lease) -> None:
        """Give the lease up, shielded from cancellation; a store error is logged
        (the lease then ends at its expiry), never raised over the call's outcome."""
        with anyio.CancelScope(shield=True):
            try:
                await self.store.release_lease(lease)
            except StoreError as exc:
                self._log.warning(
                    "lease_release_failed", context_id=lease.context_id, error=str(exc)
                )

    async def _renew(self, rt: _Runtime) -> bool:
        """Renew the running call's lease; False once it is lost (the next commit
        is then refused with LeaseLost). Never raises."""
        lease = rt.lease
        if lease is None:
            return False
        try:
            renewed = await self.store.renew_lease(lease, self.lease_ttl, now=self.clock.time())
        except LeaseLost as exc:
            if rt.lease is lease and rt.ctx.id in self._busy:  # not just released
                rt.log.warning("lease_lost", token=lease.token, current=exc.current)
            return False
        except Exception as exc:  # a store's failure; the next beat tries again
            rt.log.warning("lease_renew_failed", error=str(exc))
            return True
        if rt.lease is lease:  # the call may have returned meanwhile
            rt.lease = renewed
        return True

    async def _heartbeat(self, rt: _Runtime) -> None:
        """Renew one call's lease every third of its ttl, in real time
        (``anyio.sleep``: the engine's clock may be a test's, which only moves
        when told), until the lease is lost or the call returns."""
        interval = self.lease_ttl / 3
        while True:
            await anyio.sleep(interval)
            if not await self._renew(rt):
                return

    async def _heartbeat_all(self) -> None:
        """The entered engine's heartbeat: every third of the ttl, renew the lease
        of every call running then."""
        interval = self.lease_ttl / 3
        while True:
            await anyio.sleep(interval)
            for cid in list(self._busy):
                rt = self._runtimes.get(cid)
                if rt is not None and rt.lease is not None:
                    await self._renew(rt)

    async def _drive(self, rt: _Runtime) -> None:
        """Run the effects until the context rests, the lease renewed meanwhile:
        by the entered engine's heartbeat, or else by a task of this call's own
        (an error of the effects then leaves its task group as itself, not
        wrapped in an ExceptionGroup)."""
        if self._beats is not None:
            await self._effects_until_rest(rt)
            return
        error: BaseException | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._heartbeat, rt)
            try:
                await self._effects_until_rest(rt)
            except BaseException as exc:
                error = exc
            finally:
                tg.cancel_scope.cancel()
        if error is not None:
            try:
                raise error
            finally:
                error = None

    async def _effects_until_rest(self, rt: _Runtime) -> None:
        effect = rt.holder.effect
        while effect is not None:
            if effect in _WAITS and self._dirty(rt):
                # durable before the engine waits on the outside world
                await self._commit(rt)
            await self._effects[effect](rt)
            effect = rt.holder.effect

    async def _start_resume(self, rt: _Runtime) -> None:
        state = State(rt.holder.state)
        if state in RESTING:
            return
        if (
            state is S.EXECUTING_TOOLS
            and rt.ctx.progress.started_call_ids
            and await self._unknown_outcomes(rt)
        ):
            return
        if state is S.STREAMING_LLM_RESPONSE:
            err = "the stream was interrupted (the process stopped)"
            rt.ctx.progress = rt.ctx.progress.model_copy(update={"last_error": err})
            await self._fail_llm(rt, LLMError(err, kind="interrupted"), transient=True)
            return
        effect = STATE_EFFECTS.get(state)
        rt.holder.effect = effect

    async def _unknown_outcomes(self, rt: _Runtime) -> bool:
        """After a crash in ExecutingTools: started calls of tools that are not
        idempotent go back to a human (``outcome_unknown``)."""
        ctx = rt.ctx
        started = set(ctx.progress.started_call_ids)
        unknown: list[str] = []
        for c in ctx.open_tool_calls():
            tool = self.tools.get(c.tool_name)
            if c.id in started and tool is not None and not tool.idempotent:
                unknown.append(c.id)
        if not unknown:
            return False
        batch = ctx.last_tool_batch()
        assert batch is not None
        node = batch[0]
        assert node.message.tool_calls is not None
        calls = [
            c.model_copy(
                update={
                    "approval_status": ApprovalStatus.PENDING,
                    "decided_by": None,
                    "reason": "outcome unknown: it was started before the process stopped",
                    "outcome_unknown": True,
                }
            )
            if c.id in unknown
            else c
            for c in node.message.tool_calls
        ]
        message = node.message.model_copy(update={"tool_calls": calls})
        self._replace(rt, node.model_copy(update={"message": message}))
        ctx.progress = ctx.progress.model_copy(update={"started_call_ids": ()})
        rt.stop_reason = StopReason.AWAITING_APPROVAL
        self._fire(rt, T.OUTCOME_UNKNOWN)
        return True

    async def fork(self, context_id: str, name: str, at: int) -> Turn:
        """A new branch with the active branch's messages up to index ``at``; made active.

        ``name`` follows the id rule; ``at`` is an ``int`` (-1 forks before the
        first message).
        """
        check_id("context_id", context_id)
        check_id("name", name)
        if isinstance(at, bool) or not isinstance(at, int):
            raise InvalidInput("at", f"must be an integer, not {type(at).__name__}")
        rt = await self._enter(context_id)
        return await self._call(rt, functools.partial(self._start_fork, name, at))

    async def _start_fork(self, name: str, at: int, rt: _Runtime) -> None:
        ctx = rt.ctx
        self._require_branchable(rt)
        if not name or name in ctx.branches:
            raise BranchError(f"context {ctx.id!r} already has a branch named {name!r}")
        source = ctx.active_branch
        if not -1 <= at < len(source.message_ids):
            raise BranchError(
                f"cannot fork branch {source.name!r} after index {at}: it has "
                f"{len(source.message_ids)} messages"
            )
        ids = source.message_ids[: at + 1]
        if _has_open_calls(ctx, ids):
            raise BranchError(
                f"cannot fork after index {at}: the tool calls there have no results yet"
            )
        branch = Branch(
            name=name,
            message_ids=list(ids),
            parent_message_id=ids[-1] if ids else None,
            forked_from=source.name,
            system_prompt=source.system_prompt,
            user_prompt=source.user_prompt,
        )
        ctx.branches[name] = branch
        rt.branches.append(branch.model_copy(deep=True))
        self._activate(rt, name)
        rt.stop_reason = StopReason.BRANCH

    async def switch_branch(self, context_id: str, name: str) -> Turn:
        """Make another branch active."""
        check_id("context_id", context_id)
        check_id("name", name)
        rt = await self._enter(context_id)
        return await self._call(rt, functools.partial(self._start_switch, name))

    async def _start_switch(self, name: str, rt: _Runtime) -> None:
        self._require_branchable(rt)
        if name not in rt.ctx.branches:
            raise BranchError(f"context {rt.ctx.id!r} has no branch named {name!r}")
        self._activate(rt, name)
        rt.stop_reason = StopReason.BRANCH

    def _require_branchable(self, rt: _Runtime) -> None:
        state = State(rt.holder.state)
        if state not in (S.IDLE, S.PERMANENT_FAILURE):
            raise BranchError(
                f"context {rt.ctx.id!r} is in {state}: branches change only in Idle or "
                "PermanentFailure (decide the pending tool calls first)"
            )

    def _activate(self, rt: _Runtime, name: str) -> None:
        rt.ctx.active_branch_name = name
        rt.active_changed = True
        rt.chat = to_chat_messages(n.message for n in rt.ctx.history())

    def subscribe(self, context_id: str) -> Subscription:
        """Events of one context from now on (see :class:`Subscription`)."""
        check_id("context_id", context_id)
        subs = self._subscribers.setdefault(context_id, [])
        sub = Subscription(context_id, self._subscriber_buffer, self._drop_subscriber)
        subs.append(sub)
        return sub

    def _drop_subscriber(self, sub: Subscription) -> None:
        subs = self._subscribers.get(sub.context_id)
        if subs is not None and sub in subs:
            subs.remove(sub)

    async def steps(self, context_id: str) -> list[StepLog]:
        """Every committed transition of the context (the audit trail)."""
        check_id("context_id", context_id)
        return await self.store.steps(context_id)

    async def trace(self, context_id: str) -> list[State]:
        """The states the context entered, from its initial ``Idle``."""
        check_id("context_id", context_id)
        steps = await self.store.steps(context_id)
        return [S.IDLE, *(State(s.to_state) for s in steps)]

    # ------------------------------------------------------------------ the drive loop

    async def _call(self, rt: _Runtime, start: Callable[[_Runtime], Awaitable[None]]) -> Turn:
        """Run ``start`` (validation, first trigger) then the effects until rest.

        On any error, a context with uncommitted changes or stopped mid-turn is
        unloaded, so that the next call starts from the last committed state.
        """
        try:
            with anyio.CancelScope() as scope:
                rt.scope = scope
                if rt.cancel_requested:
                    scope.cancel()
                await start(rt)
                if rt.holder.effect is not None:
                    await self._drive(rt)
                if self._dirty(rt):  # ... and before the call returns
                    await self._commit(rt)
            rt.scope = None
            if rt.cancel_requested and State(rt.holder.state) in _CANCELLABLE:
                with anyio.CancelScope(shield=True):
                    await self._cancel_in_place(rt)
        except BaseException:
            if self._dirty(rt) or State(rt.holder.state) not in RESTING:
                self._unload(rt.ctx.id)
            raise
        finally:
            rt.last_turn = self._turn(rt)
            if rt.lease is not None:
                await self._release(rt.lease)
            self._leave(rt)
        return rt.last_turn

    def _turn(self, rt: _Runtime) -> Turn:
        ctx = rt.ctx
        state = State(rt.holder.state)
        pending = tuple(ctx.pending_tool_calls()) if state is S.AWAITING_TOOL_APPROVAL else ()
        return Turn(
            context_id=ctx.id,
            state=state,
            stop_reason=rt.stop_reason,
            states=tuple(rt.turn_states),
            # the pool holds the latest version of each (decisions replace nodes)
            messages=tuple(ctx.message_pool[n.id].message for n in rt.turn_nodes),
            message_ids=tuple(n.id for n in rt.turn_nodes),
            pending_tool_calls=pending,
            error=ctx.progress.last_error if state is S.PERMANENT_FAILURE else None,
        )

    def _require(self, rt: _Runtime, trigger: Trigger) -> State:
        state = State(rt.holder.state)
        if next_state(state, trigger) is None:
            raise IllegalTransition(state, trigger, context_id=rt.ctx.id)
        return state

    @staticmethod
    def _dirty(rt: _Runtime) -> bool:
        """Changes not yet committed."""
        return bool(
            rt.holder.steps or rt.appended or rt.replaced or rt.branches or rt.active_changed
        )

    async def _step(self, rt: _Runtime, trigger: Trigger) -> State:
        """Take ``trigger`` and commit it at once (then its events go out)."""
        dest = self._fire(rt, trigger)
        await self._commit(rt)
        return dest

    def _fire(self, rt: _Runtime, trigger: Trigger) -> State:
        """Take ``trigger`` on the machine; its StateChanged waits for the commit."""
        holder = rt.holder
        source = holder.state
        dest = self._machine.fire(holder, trigger)
        rt.turn_states.append(dest)
        rt.ctx.__dict__["current_state"] = dest  # see _commit on plain field writes
        rt.log.debug(
            "transition",
            from_state=source,
            trigger=trigger,
            to_state=dest,
            attempt=rt.ctx.progress.attempt,
        )
        self._later(rt, StateChanged, from_state=source, to_state=dest, trigger=trigger)
        return dest

    def _later(self, rt: _Runtime, kind: Callable[..., Event], **fields: Any) -> None:
        """Give the next ``seq`` to an event that goes out after the next commit.

        The seq is reserved now (and stored by that commit) even when nobody
        listens, so seqs have no gaps and are never reused after a reload.
        """
        rt.seq += 1
        if rt.subscribers:
            rt.outbox.append((kind, rt.seq, self.clock.time(), fields))

    async def _commit(self, rt: _Runtime) -> None:
        ctx = rt.ctx
        holder = rt.holder
        now = self._now()
        version = ctx.version + 1
        steps = [StepLog(version, a, t, b, now) for (a, t, b) in holder.steps]
        appended = rt.appended
        replaced = list(rt.replaced.values())
        if replaced and appended:
            # a message added and then changed (decided) in this same commit is
            # stored once, as it is now
            new = {node.id: i for i, (_, node) in enumerate(appended)}
            for node in [n for n in replaced if n.id in new]:
                i = new[node.id]
                appended[i] = (appended[i][0], node)
            replaced = [n for n in replaced if n.id not in new]
        commit = Commit(
            context_id=ctx.id,
            expected_version=ctx.version,
            version=version,
            state=holder.state,
            updated_at=now,
            progress=ctx.progress,
            event_seq=rt.seq,
            steps=steps,
            appended=appended,
            replaced=replaced,
            branches=rt.branches,
            active_branch=ctx.active_branch_name if rt.active_changed else None,
            lease_token=rt.lease.token if rt.lease is not None else None,
        )
        if self._commit_nowait is not None:  # a store that never waits needs no shield
            self._commit_nowait(commit)
        else:
            with anyio.CancelScope(shield=True):
                await self.store.commit(commit)
        holder.steps.clear()
        rt.appended = []
        rt.replaced = {}
        rt.branches = []
        rt.active_changed = False
        # Plain field writes on the engine's own working copy: these models do no
        # validation on assignment, and pydantic's __setattr__ bookkeeping costs
        # about a microsecond per field on the hot path (four per step).
        fields = ctx.__dict__
        fields["version"] = version
        fields["updated_at"] = now
        fields["event_seq"] = rt.sent_seq = commit.event_seq
        if rt.outbox:
            outbox = rt.outbox
            rt.outbox = []
            cid = ctx.id
            for kind, seq, at, fields in outbox:
                self._publish(rt, kind(context_id=cid, seq=seq, timestamp=at, **fields))

    def _publish(self, rt: _Runtime, event: Event) -> None:
        for sub in rt.subscribers:
            sub.offer(event)

    def _end_turn(self, rt: _Runtime) -> None:
        self._later(rt, TurnCompleted, stop_reason=str(rt.stop_reason), state=rt.holder.state)

    # ------------------------------------------------------------------ history

    def _append(
        self, rt: _Runtime, message: InternalMessage, node_id: str | None = None
    ) -> MessageNode:
        ctx = rt.ctx
        branch = ctx.active_branch
        ids = branch.message_ids
        node = MessageNode(
            id=node_id or self._ids(), message=message, parent_id=ids[-1] if ids else None
        )
        ctx.message_pool[node.id] = node
        ids.append(node.id)
        rt.appended.append((branch.name, node))
        rt.chat.append(to_chat_message(message))
        rt.turn_nodes.append(node)
        return node

    def _replace(self, rt: _Runtime, node: MessageNode) -> None:
        rt.ctx.message_pool[node.id] = node
        rt.replaced[node.id] = node
        if rt.answer is not None and rt.answer.id == node.id:
            rt.answer = node

    def _set_decisions(
        self, rt: _Runtime, decisions: Mapping[str, tuple[ApprovalStatus, str, str | None]]
    ) -> None:
        """Record approval decisions on the newest tool batch (a replaced node)."""
        batch = rt.ctx.last_tool_batch()
        assert batch is not None
        node = batch[0]
        calls = node.message.tool_calls
        assert calls is not None
        new_calls = []
        for c in calls:
            d = decisions.get(c.id)
            if d is None:
                new_calls.append(c)
            else:
                status, by, reason = d
                new_calls.append(
                    c.model_copy(
                        update={"approval_status": status, "decided_by": by, "reason": reason}
                    )
                )
        message = node.message.model_copy(update={"tool_calls": new_calls})
        self._replace(rt, node.model_copy(update={"message": message}))

    def _add_results(
        self, rt: _Runtime, calls: Sequence[ToolCallRequest], outcomes: Sequence[ToolOutcome]
    ) -> None:
        now = self._now()
        for call, outcome in zip(calls, outcomes, strict=True):
            node = self._append(
                rt,
                InternalMessage(
                    role=Role.TOOL,
                    tool_result=ToolCallResult(
                        request_id=call.id, result=outcome.result, success=outcome.success
                    ),
                    message_type=MessageType.TOOL_RESULT,
                    metadata=MessageMetadata(created_at=now, extra=_conversions(outcome))
                    if outcome.notes
                    else MessageMetadata(created_at=now),
                ),
            )
            self._later(
                rt,
                ToolResult,
                call_id=call.id,
                tool_name=call.tool_name,
                success=outcome.success,
                result=outcome.result,
                message_id=node.id,
            )

    def _close_open_calls(self, rt: _Runtime, why: str, text: str) -> None:
        """Give every open call of the newest batch a failed result saying ``text``."""
        open_calls = rt.ctx.open_tool_calls()
        if not open_calls:
            return
        undecided = {
            c.id: (ApprovalStatus.DENIED, "system", why)
            for c in open_calls
            if c.approval_status is ApprovalStatus.PENDING
        }
        if undecided:
            self._set_decisions(rt, undecided)
        self._add_results(
            rt,
            open_calls,
            [ToolOutcome(False, {"error": text, "status": why}) for _ in open_calls],
        )

    # ------------------------------------------------------------------ effects

    def _build_request(self, rt: _Runtime) -> LLMRequest:
        ctx = rt.ctx
        p = ctx.progress
        request = LLMRequest(
            context_id=ctx.id,
            model=ctx.config.model_id,
            messages=rt.chat,
            parameters=ctx.config.parameters,
            attempt=p.attempt,
            iteration=p.iteration,
            request_cancel=rt.request_cancel,
        )
        copied = False
        for i, enhancer in enumerate(self.enhancers):
            if not copied and i == self._builtin_count:
                # the built-in enhancers never change the list they are given; from
                # here on, the request must own its list (the engine keeps appending
                # to rt.chat, and an adapter may keep the request)
                if request.messages is rt.chat:
                    request.messages = list(rt.chat)
                copied = True
            try:
                request = enhancer.enhance(request, ctx)
            except Exception as exc:
                raise EnhancerError(type(enhancer).__name__, exc) from exc
        if request.messages is rt.chat:
            request.messages = list(rt.chat)
        return request

    async def _prepare(self, rt: _Runtime) -> None:
        """ProcessingUserMessage: run the enhancers; ``prompt_ready`` or ``prepare_failed``."""
        try:
            rt.request = self._build_request(rt)
        except EnhancerError as exc:
            rt.ctx.progress = rt.ctx.progress.model_copy(update={"last_error": str(exc)})
            rt.stop_reason = StopReason.FAILED
            rt.log.warning("prepare_failed", error=str(exc))
            self._fire(rt, T.PREPARE_FAILED)
            self._failed(rt, str(exc), "")
            self._end_turn(rt)
            return
        self._fire(rt, T.PROMPT_READY)

    async def _call_llm(self, rt: _Runtime) -> None:
        """AwaitingLLMResponse: one attempt; the answer, or a failure.

        Whatever the adapter returns or raises ends in a declared trigger (see
        :mod:`turnfsm.engine._answer` for the rules); only cancellation and other
        ``BaseException`` propagate. Only the adapter's own code runs under the
        ``except`` clauses: an error of the store still propagates.
        """
        request = rt.request
        rt.request = None
        if request is None:
            try:
                request = self._build_request(rt)
            except EnhancerError as exc:
                await self._fail_llm(rt, PermanentLLMError(str(exc)), transient=False)
                return
        progress = rt.ctx.progress
        message_id = self._ids()
        partial: list[str] = []
        rt.partial = partial
        rt.partial_id = message_id
        thinking: list[str] = []
        thinking_fixed = 0
        streaming = False
        response: object = None
        failure: LLMError | None = None
        index = 0
        try:
            chunks = open_stream(self.llm.stream(request))
        except Exception as exc:
            await self._fail_llm(rt, adapter_failure(exc))
            return
        try:
            next_chunk = chunks.__anext__
            while True:
                try:
                    chunk = await next_chunk()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    failure = adapter_failure(exc, "".join(partial))
                    break
                kind = type(chunk)
                if kind is LLMResponse:
                    response = chunk
                    break
                if kind is TextDelta:
                    channel: Literal["text", "thinking"] | None = "text"
                elif kind is ThinkingDelta:
                    channel = "thinking"
                elif kind is ToolCallDelta:
                    channel = None
                elif isinstance(chunk, LLMResponse):
                    response = chunk
                    break
                elif isinstance(chunk, TextDelta):
                    channel = "text"
                elif isinstance(chunk, ThinkingDelta):
                    channel = "thinking"
                elif isinstance(chunk, ToolCallDelta):
                    channel = None
                else:
                    failure = invalid_answer(
                        f"the stream yielded a {type(chunk).__name__}, not a TextDelta, "
                        "ThinkingDelta, ToolCallDelta or LLMResponse",
                        "".join(partial),
                    )
                    break
                if channel is not None:
                    try:
                        text, fixed = delta_text(chunk, kind.__name__)
                    except LLMError as exc:
                        exc.partial_text = "".join(partial)
                        failure = exc
                        break
                if not streaming:
                    streaming = True
                    await self._step(rt, T.STREAM_STARTED)
                if channel is None:
                    continue
                if channel == "text":
                    partial.append(text)
                else:
                    thinking.append(text)
                    thinking_fixed += fixed
                rt.seq += 1
                rt.sent_seq = rt.seq
                if rt.subscribers:
                    self._publish(
                        rt,
                        ContentDelta(
                            context_id=rt.ctx.id,
                            seq=rt.seq,
                            timestamp=self.clock.time(),
                            message_id=message_id,
                            delta=text,
                            index=index,
                            attempt=progress.attempt,
                            channel=channel,
                        ),
                    )
                index += 1
        except BaseException:
            await close_stream(chunks)
            raise
        closed = await close_stream(chunks)
        if failure is None and closed is not None:
            failure = adapter_failure(closed, "".join(partial))
        if failure is None and response is None:
            failure = invalid_answer("the stream ended without a response", "".join(partial))
        message: InternalMessage | None = None
        calls: list[ToolCallRequest] = []
        if failure is None:
            try:
                message, calls = build_answer(
                    response,
                    taken_ids=functools.partial(_call_ids, rt),
                    streamed_thinking="".join(thinking) if thinking else None,
                    thinking_fixed=thinking_fixed,
                    created_at=self._now(),
                    model=request.model,
                    attempt=progress.attempt,
                    iteration=progress.iteration,
                )
            except LLMError as exc:
                failure = exc
            except Exception as exc:  # an answer object whose attributes raise
                failure = invalid_answer(f"reading it raised {type(exc).__name__}: {exc}")
        rt.partial = []
        if failure is not None or message is None:
            if failure is None:  # pragma: no cover - build_answer returns a message
                failure = invalid_answer("no message")
            if not failure.partial_text and partial:
                failure.partial_text = "".join(partial)
            await self._fail_llm(rt, failure)
            return
        node = self._append(rt, message, message_id)
        if calls and rt.call_ids is not None:
            rt.call_ids.update(c.id for c in calls)
        rt.answer = node
        self._fire(rt, T.STREAM_ENDED if streaming else T.RESPONSE_RECEIVED)
        self._later(rt, MessageCompleted, message_id=node.id, message=message)
        if calls:
            self._later(rt, ToolCallsRequested, message_id=node.id, calls=calls)

    async def _fail_llm(
        self, rt: _Runtime, exc: LLMError, *, transient: bool | None = None
    ) -> None:
        """Take the failure edge for ``exc``: transient (``retryable``, unless
        ``transient`` says otherwise) or permanent."""
        storable_error(exc)
        if transient is None:
            transient = exc.retryable is True
        ctx = rt.ctx
        try:
            error = exc.describe()
            if not isinstance(error, str):
                raise TypeError("describe() did not return a str")
        except Exception:  # an adapter's subclass overrode it
            error = f"{type(exc).__name__}: {exc.message}"
        error = clean_text(error)[0]
        rt.log.warning("llm_failed", error=error, transient=transient, attempt=ctx.progress.attempt)
        if not transient:
            ctx.progress = ctx.progress.model_copy(update={"last_error": error})
            rt.stop_reason = StopReason.FAILED
            self._fire(rt, T.LLM_FAILED_PERMANENT)
            self._failed(rt, error, exc.partial_text)
            self._end_turn(rt)
            return
        attempt = ctx.progress.attempt
        will_retry = attempt < self.retry_policy.max_attempts
        delay = self.retry_policy.delay(attempt, exc) if will_retry else 0.0
        ctx.progress = ctx.progress.model_copy(
            update={
                "last_error": error,
                "retry_at": self.clock.time() + delay if will_retry else None,
            }
        )
        self._fire(rt, T.LLM_FAILED_TRANSIENT)
        if will_retry:
            self._later(
                rt,
                Retrying,
                attempt=attempt,
                delay=delay,
                error=error,
                partial_text=exc.partial_text,
            )

    def _failed(self, rt: _Runtime, error: str, partial_text: str) -> None:
        self._later(rt, Failed, error=error, state=rt.holder.state, partial_text=partial_text)

    async def _backoff(self, rt: _Runtime) -> None:
        """TransientFailure: wait out the delay and ``retry``, or ``give_up``."""
        ctx = rt.ctx
        p = ctx.progress
        if p.attempt >= self.retry_policy.max_attempts or p.retry_at is None:
            rt.stop_reason = StopReason.FAILED
            ctx.progress = p.model_copy(update={"retry_at": None})
            self._fire(rt, T.GIVE_UP)
            self._failed(rt, p.last_error or "attempts exhausted", "")
            self._end_turn(rt)
            return
        wait = p.retry_at - self.clock.time()
        if wait > 0:
            await self.clock.sleep(wait)
        ctx.progress = p.model_copy(update={"attempt": p.attempt + 1, "retry_at": None})
        self._fire(rt, T.RETRY)

    async def _decide(self, rt: _Runtime) -> None:
        """ProcessingLLMResponse: text ends the turn; tool calls are decided by policy.

        A call to a tool that is not registered is let through (by policy) to
        get its "unknown tool" result; a call whose arguments are unusable is
        let through by the system (``decided_by="system"``), not by the tool's
        policy, to get its "invalid arguments" result. Neither runs anything.
        """
        ctx = rt.ctx
        node = rt.answer
        if node is None or node.id not in ctx.message_pool:  # resumed: the stored answer
            batch = ctx.last_tool_batch()
            node = batch[0] if batch else None
        calls = ctx.open_tool_calls() if node is not None else []
        rt.answer = None
        if not calls:
            rt.stop_reason = StopReason.COMPLETED
            self._fire(rt, T.TURN_COMPLETE)
            self._end_turn(rt)
            return
        if ctx.progress.iteration >= self.max_iterations:
            self._set_decisions(
                rt, {c.id: (ApprovalStatus.DENIED, "system", "max_iterations") for c in calls}
            )
            text = (
                f"not executed: the limit of {self.max_iterations} LLM calls for one "
                "user message was reached"
            )
            self._add_results(
                rt,
                calls,
                [ToolOutcome(False, {"error": text, "status": "max_iterations"}) for _ in calls],
            )
            rt.stop_reason = StopReason.MAX_ITERATIONS
            self._fire(rt, T.TURN_COMPLETE)
            self._end_turn(rt)
            return
        decisions: dict[str, tuple[ApprovalStatus, str, str | None]] = {}
        needs_human = False
        for c in calls:
            if c.approval_status is not ApprovalStatus.PENDING:
                continue
            tool = self.tools.get(c.tool_name)
            if tool is not None and c.raw_arguments is not None:
                # not the policy's call: it cannot run, and its result says why
                decisions[c.id] = (ApprovalStatus.APPROVED, "system", "invalid arguments")
                continue
            verdict = Approval.AUTO if tool is None else tool.decide(c)
            if verdict is Approval.AUTO:
                decisions[c.id] = (ApprovalStatus.APPROVED, "policy", None)
            elif verdict is Approval.DENY:
                decisions[c.id] = (ApprovalStatus.DENIED, "policy", "denied by policy")
            else:
                needs_human = True
        if decisions:
            self._set_decisions(rt, decisions)
        if needs_human:
            rt.stop_reason = StopReason.AWAITING_APPROVAL
            self._fire(rt, T.NEEDS_APPROVAL)
            self._later(rt, ToolApprovalRequested, calls=ctx.pending_tool_calls())
            self._end_turn(rt)
            return
        self._mark_started(rt)
        self._fire(rt, T.TOOLS_DECIDED)

    def _mark_started(self, rt: _Runtime) -> None:
        """Record the approved calls as started, in the commit that enters
        ExecutingTools: the attempt is durable before any tool runs. (A crash
        between that commit and the run sends non-idempotent calls to a human,
        which is the safe side.)"""
        ctx = rt.ctx
        ids = tuple(
            c.id for c in ctx.open_tool_calls() if c.approval_status is ApprovalStatus.APPROVED
        )
        ctx.progress = ctx.progress.model_copy(update={"started_call_ids": ids})

    async def _run_tools(self, rt: _Runtime) -> None:
        """ExecutingTools: run the approved calls; one result per call, in the order asked."""
        ctx = rt.ctx
        calls = ctx.open_tool_calls()
        to_run = [c for c in calls if c.approval_status is ApprovalStatus.APPROVED]
        ids = tuple(c.id for c in to_run)
        if ids != ctx.progress.started_call_ids:  # resumed: record the attempt first
            ctx.progress = ctx.progress.model_copy(update={"started_call_ids": ids})
            await self._commit(rt)
        ran = iter(await run_calls(self.tools, to_run)) if to_run else iter(())
        outcomes = [
            next(ran)
            if c.approval_status is ApprovalStatus.APPROVED
            else ToolOutcome(
                False,
                {
                    "error": f"denied: {c.reason}" if c.reason else "denied",
                    "status": "denied",
                },
            )
            for c in calls
        ]
        self._add_results(rt, calls, outcomes)
        ctx.progress = TurnProgress(iteration=ctx.progress.iteration + 1, attempt=1)
        self._fire(rt, T.TOOLS_DONE)

    async def _cancel_in_place(self, rt: _Runtime) -> None:
        """Take ``cancel``: keep partial text (marked), close open calls, go Idle."""
        ctx = rt.ctx
        if rt.partial:
            self._append(
                rt,
                InternalMessage(
                    role=Role.ASSISTANT,
                    content=[TextPart(text="".join(rt.partial))],
                    metadata=MessageMetadata(
                        created_at=self._now(),
                        attempt=ctx.progress.attempt,
                        iteration=ctx.progress.iteration,
                        cancelled=True,
                        finish_reason="cancelled",
                    ),
                ),
                rt.partial_id,
            )
            rt.partial = []
        started = set(ctx.progress.started_call_ids)
        open_calls = ctx.open_tool_calls()
        if open_calls:
            undecided = {
                c.id: (ApprovalStatus.DENIED, "system", "cancelled")
                for c in open_calls
                if c.approval_status is ApprovalStatus.PENDING
            }
            if undecided:
                self._set_decisions(rt, undecided)
            self._add_results(
                rt,
                open_calls,
                [
                    ToolOutcome(
                        False,
                        {
                            "error": "cancelled while running; the outcome is unknown"
                            if c.id in started
                            else "cancelled before it ran",
                            "status": "cancelled",
                        },
                    )
                    for c in open_calls
                ],
            )
        ctx.progress = TurnProgress()
        rt.request = None
        rt.answer = None
        rt.stop_reason = StopReason.CANCELLED
        self._fire(rt, T.CANCEL)
        self._end_turn(rt)
        await self._commit(rt)


# ---------------------------------------------------------------------- helpers


def _content_parts(content: str | Sequence[ContentPart]) -> list[ContentPart]:
    return check_content("content", content)


def _conversions(outcome: ToolOutcome) -> dict[str, Any]:
    """What was converted to store a tool's result (see the tools module docstring)."""
    return {"conversions": list(outcome.notes)}


def _call_ids(rt: _Runtime) -> set[str]:
    """Every tool call id used in the context (all branches); read-only."""
    if rt.call_ids is None:
        pool = rt.ctx.message_pool.values()
        rt.call_ids = {c.id for n in pool for c in n.message.tool_calls or ()}
    return rt.call_ids


def _find_call(ctx: ChatContext, call_id: str) -> ToolCallRequest | None:
    for node in ctx.message_pool.values():
        for c in node.message.tool_calls or ():
            if c.id == call_id:
                return c
    return None


def _call_status(ctx: ChatContext, call: ToolCallRequest) -> str:
    answered = any(
        n.message.tool_result is not None and n.message.tool_result.request_id == call.id
        for n in ctx.message_pool.values()
    )
    status = str(call.approval_status)
    return f"{status}, already answered" if answered else status


def _has_open_calls(ctx: ChatContext, ids: Sequence[str]) -> bool:
    """Whether the history ``ids`` ends inside a tool batch some call of which has
    no result yet."""
    batch = ctx.last_tool_batch(ids)
    if batch is None:
        return False
    node, answered = batch
    return any(c.id not in answered for c in node.message.tool_calls or ())
