"""The drive loop: a call's first trigger, then the effects until the context
rests; every trigger fired through the machine, every step committed, events
sent after their commit.

How a call works: the public method validates its input against the stored
context (changing nothing when it is refused), takes the trigger the table
declares, commits, and then drives the context: while the state just entered
declares an effect (``STATE_EFFECTS``), the effect runs (enhancers, LLM,
policy, tools, backoff) and ends by taking exactly one trigger and
committing it. When a resting state is reached the call returns a
:class:`Turn`.

This module keeps the call's lifecycle and the effect loop; the steps a call
takes are plain functions in ``_steps``, and the lease it runs under is a
``_lease.CallLease``.

Every committed step is durable in the store before its events are emitted.
A store error propagates to the caller and the loaded copy of the context is
dropped, so the next call starts again from the last committed state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import anyio

from ..model import ApprovalStatus, ToolCallRequest, detached
from ..states import RESTING, Effect, State, Trigger, TurnMachine
from ..storage import Lease, LeasesInCommits
from . import (
    _backoff,
    _call_llm,
    _calls,
    _decide,
    _leases,
    _prepare,
    _run_tools,
)
from ._approval import questions_of
from ._client_view import is_client_call
from ._clock import from_timestamp
from ._host import Host, SubtaskRunnerHost
from ._lease import CallLease, StaleCopy, commit_at_once
from ._loaded import Loaded
from ._observing import _observers as _observe
from ._observing import _otel_spans as _tracing
from ._runtime import CLAIM, RELEASED, Runtime, dirty
from ._scope import call_scope
from ._settings import Settings
from ._steps import build_commit, commit_nowait_of, commit_recorded_of, committed, fire, publish
from ._subscribers import yield_to_readers
from ._turn import Question, Turn, new_turn

__all__ = ["Driver"]

S = State
# members read once here: on Python 3.11 each read of a member on its enum
# class goes through ``EnumType.__getattr__``'s hook
_DECIDE = Effect.DECIDE
_CALL_LLM = Effect.CALL_LLM
_AWAITING_TOOL_APPROVAL = S.AWAITING_TOOL_APPROVAL
_PERMANENT_FAILURE = S.PERMANENT_FAILURE
_PENDING = ApprovalStatus.PENDING

_new = object.__new__

CANCELLABLE = frozenset(State) - {S.IDLE, S.PERMANENT_FAILURE}
_WAITS = frozenset({Effect.CALL_LLM, Effect.RUN_TOOLS, Effect.BACKOFF})
"""Effects that wait on the outside world (the LLM, tools, the clock). What was
taken before them is committed first; the steps between two waits (a user
message and its prepared request; an answer and the policy's decision on its
calls) share one commit, and each keeps its own audit step."""
_HAND_BACK_BEFORE = frozenset({Effect.CALL_LLM, Effect.BACKOFF})
"""Where a call asked to hand back (``Runtime.hand_back``) stops: before a wait
that the next owner starts afresh. Not before ``run_tools``: the calls about
to run are recorded as started by then, and a tool that is not idempotent,
started and not run, would come back as ``outcome_unknown``."""

Start = Callable[[Runtime], Awaitable[None] | None]
"""What a public call does first: check against the loaded context, take its trigger."""


class Driver:
    """What the engine is made of (its settings, the loaded contexts, the
    machine) and the loop that drives one call: the engine's own
    :class:`~turnfsm.engine._host.Host`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        """The engine's settings (replaced as a whole when one changes)."""
        store = settings.store
        self.commit_nowait = commit_nowait_of(store)
        self.commit_recorded = commit_recorded_of(store)
        self.leases_in_commits = (
            isinstance(store, LeasesInCommits) and store.leases_in_commits is True
        )
        """The store takes and releases a lease with a commit (``Commit.take_lease``,
        ``Commit.release_lease``)."""
        self.machine = TurnMachine()
        self.loaded = Loaded(self.machine, settings.log, self.request_cancel)
        self._held = CallLease(settings, self.loaded, self.leases_in_commits)
        self.beats: anyio.abc.TaskGroup | None = None
        self.renews_leases = settings.leases
        """Renew a running call's lease while its effects run (``Engine(leases=)``).
        A host whose engine is the context's one owner by construction (a
        durable workflow) turns it off: no heartbeat task, no timer."""
        self.threads = settings.threads
        """Run an application's sync summarizer in a worker thread
        (``Engine(threads=)``). A host that runs the engine deterministically
        on one thread (a durable workflow) turns it off: the summarizer is
        called there, as it is."""
        self.subtask_host: SubtaskRunnerHost | None = None
        """Runs the sub-task tools' children (the engine sets it)."""
        self.effects: dict[Effect, Callable[[Host, Runtime], Awaitable[None]]] = {
            Effect.PREPARE: _prepare.prepare,
            Effect.CALL_LLM: _call_llm.call_llm,
            Effect.RUN_TOOLS: _run_tools.run_tools,
            Effect.BACKOFF: _backoff.backoff,
        }
        """The effects that wait; ``decide`` (ProcessingLLMResponse) is a plain
        call of the loop."""
        self.observers: list[_observe.Observer] = []
        """What ``Engine.observe`` added: asked at the start of every call."""
        self.tracing = _tracing.Tracing()
        """OpenTelemetry: the provider (None: the process's) and the content opt-in."""

    @property
    def busy(self) -> set[str]:
        """The contexts a call runs on now (held by the loaded contexts)."""
        return self.loaded.busy

    def now(self) -> datetime:
        return from_timestamp(self.settings.clock.time(), UTC)

    def request_hand_back(self, context_id: str) -> bool:
        """Ask the running call on the context to stop before its next wait (see
        ``Runtime.hand_back``); False when no call runs on it."""
        rt = self.loaded.get(context_id)
        if rt is None or context_id not in self.loaded.busy:
            return False
        rt.hand_back = True
        return True

    def request_cancel(self, context_id: str) -> None:
        """Ask the running call on the context to cancel (nothing when none runs)."""
        rt = self.loaded.get(context_id)
        if rt is None or context_id not in self.loaded.busy:
            return
        rt.cancel_requested = True
        if rt.scope is not None:
            rt.scope.cancel()

    def refuse_if_busy(self, context_id: str) -> None:
        self.loaded.refuse_if_busy(context_id)

    # ------------------------------------------------------------------ a call

    def run(
        self,
        context_id: str,
        start: Start,
        *,
        lease: Lease | None = None,
        hand_off: bool = False,
    ) -> Coroutine[Any, Any, Turn]:
        """Load the context for a call (busy, leased), then run it (a plain
        function returning the call's coroutine, so that an unwatched call
        awaits the call itself, with no wrapper around it).

        ``lease``: a lease this engine already holds on the context (claimed
        with ``claim_expired``): the call runs under it, on a freshly loaded
        copy, and its commits carry its fencing token. ``hand_off``: the call
        commits what ``start`` did and releases the lease in that same commit,
        without running the effects (see :meth:`Engine.submit`).

        A context this engine ran the last call on, and still holds loaded,
        takes its lease with the call's first commit (see
        :class:`~turnfsm.engine._lease.CallLease`): until that commit nothing
        leaves the engine. When the loaded copy turns out to be stale, the
        call is run again from the start on a freshly loaded copy under a
        lease of its own; another owner's live lease raises ContextLeased.
        """
        if self.observers or _tracing.maybe(self.tracing):
            watch = _observe.begin(
                self.tracing, self.observers, self, context_id, start, hand_off, lease is not None
            )
            if watch is not None:
                return self._watched(context_id, start, lease, hand_off, watch)
        return self._run(context_id, start, lease, hand_off, None)

    async def _watched(
        self,
        context_id: str,
        start: Start,
        lease: Lease | None,
        hand_off: bool,
        watch: _observe.Watches,
    ) -> Turn:
        try:
            turn = await self._run(context_id, start, lease, hand_off, watch)
        except BaseException as exc:
            watch.ended(context_id, None, exc)
            raise
        watch.ended(context_id, turn, None)
        return turn

    async def _run(
        self,
        context_id: str,
        start: Start,
        lease: Lease | None,
        hand_off: bool,
        watch: _observe.Watches | None,
    ) -> Turn:
        held = self._held  # the calls share one (it keeps nothing of a call) ...
        if held.settings is not self.settings:  # ... but new settings' calls
            held = self._held = CallLease(self.settings, self.loaded, self.leases_in_commits)
        if lease is not None:
            rt = await held.enter_claimed(context_id, lease)
            return await self._call(rt, held, start, hand_off, watch)
        try:
            rt = held.enter_loaded(context_id) or await held.enter(context_id)
            return await self._call(rt, held, start, hand_off, watch)
        except StaleCopy:
            self.loaded.unload(context_id)
        return await self._call(await held.enter(context_id), held, start, hand_off, watch)

    def _leave(self, rt: Runtime, turn: Turn) -> None:
        loaded, settings = self.loaded, self.settings
        loaded.busy.discard(rt.ctx.id)
        rt.scope = None
        rt.running = False
        end = rt.done  # made by a cancel that waits, maybe after ``turn`` was
        if end is not None:
            rt.done = None
            end.turn = turn
            end.set()
        count = len(rt.ctx.message_pool)  # with what the call added (Loaded.recount)
        loaded.messages += count - rt.held
        rt.held = count
        if (
            len(loaded.runtimes) > settings.max_loaded
            or loaded.messages > settings.max_loaded_messages
        ):
            loaded.evict(settings.max_loaded, settings.max_loaded_messages)

    async def _call(
        self,
        rt: Runtime,
        held: CallLease,
        start: Start,
        hand_off: bool = False,
        watch: _observe.Watches | None = None,
    ) -> Turn:
        """Run ``start`` (validation, first trigger) then the effects until rest.

        On any error, a context with uncommitted changes or stopped mid-turn is
        unloaded, so that the next call starts from the last committed state.
        ``hand_off``: commit what ``start`` did, releasing the lease in that
        commit, and run no effect; the context is then unloaded (whoever claims
        it next changes it).
        """
        if watch is not None:
            rt.watch = watch
            watch.entered(rt)
        try:
            with call_scope() as scope:
                rt.scope = scope
                if rt.cancel_requested:
                    scope.cancel()
                try:
                    if (started := start(rt)) is not None:  # a plain function's: none
                        await started
                except Exception:
                    if rt.lease_status is CLAIM:  # was the loaded copy current?
                        await held.confirm_claim(rt)
                    raise
                if hand_off:
                    rt.hand_back = True
                    if watch is not None:
                        watch.handing_off(rt)
                elif rt.holder.effect is not None:
                    await self._drive(rt)
                if dirty(rt):  # ... and before the call returns
                    # the call's last commit: at rest, or handed back, it also ends
                    # the lease (unless a cancel is pending, whose commit comes after)
                    last = (
                        rt.holder.current() in RESTING or rt.hand_back
                    ) and not rt.cancel_requested
                    if not commit_at_once(self, rt, last):
                        await self.commit(rt, release=last)
            rt.scope = None
            if rt.lease_status is CLAIM:  # nothing committed: was the loaded copy current?
                await held.confirm_claim(rt)
            if rt.cancel_requested and rt.holder.current() in CANCELLABLE:
                with anyio.CancelScope(shield=True):
                    if await held.hold_again(rt):
                        await _calls.cancel_in_place(self, rt)
        except BaseException:
            if dirty(rt) or rt.holder.current() not in RESTING:
                self.loaded.unload(rt.ctx.id)
            raise
        finally:
            turn = self._turn(rt)
            if rt.hand_back and rt.holder.current() not in RESTING:
                self.loaded.unload(rt.ctx.id)  # the next owner changes it
            release = held.let_go(rt)
            if release is not None:
                await _leases.release(self.settings, release)
            rt.watch = None
            self._leave(rt, turn)
        return turn

    def _turn(self, rt: Runtime) -> Turn:
        ctx = rt.ctx
        state = rt.holder.current()
        pending: tuple[ToolCallRequest, ...] = ()
        questions: tuple[Question, ...] = ()
        client: tuple[ToolCallRequest, ...] = ()
        if state is _AWAITING_TOOL_APPROVAL:
            # the open calls read once, in one loop: the pending ones and the
            # client's, each copied as found (not through ``detached`` of a tuple)
            waiting: list[ToolCallRequest] = []
            copies: list[ToolCallRequest] = []
            clients: list[ToolCallRequest] = []
            for c in ctx.open_tool_calls():
                if c.approval_status is _PENDING:
                    waiting.append(c)
                    copies.append(detached(c))
                elif is_client_call(c):
                    clients.append(detached(c))
            questions = questions_of(self.settings.tools, waiting)
            pending = tuple(copies)
            client = tuple(clients)
        # the pool holds the latest version of each message (decisions replace
        # nodes); the turn copies them when the caller first reads them
        pool = ctx.message_pool
        ids = []
        records = []
        for node in rt.turn_nodes:
            ids.append(node.id)
            records.append(pool[node.id].message)
        states = tuple(rt.turn_states)
        # read once: a context at rest keeps nothing of its last call (the
        # nodes a decision replaced would stay alive with them)
        rt.turn_nodes = ()
        rt.turn_states = ()
        return new_turn(
            context_id=ctx.id,
            state=state,
            stop_reason=rt.stop_reason,
            states=states,
            records=tuple(records),
            message_ids=tuple(ids),
            pending_tool_calls=pending,
            error=ctx.progress.last_error if state is _PERMANENT_FAILURE else None,
            questions=questions,
            output=rt.output,
            output_error=rt.output_error,
            client_tool_calls=client,
        )

    async def _drive(self, rt: Runtime) -> None:
        """Run the effects until the context rests, the lease renewed meanwhile:
        by the entered engine's heartbeat, or else by a task of this call's own
        (an error of the effects then leaves its task group as itself, not
        wrapped in an ExceptionGroup)."""
        if self.beats is not None or not self.renews_leases:
            await self._effects_until_rest(rt)
            return
        error: BaseException | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(_leases.heartbeat, self.settings, rt)
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

    async def _effects_until_rest(self, rt: Runtime) -> None:
        effects = self.effects
        effect = rt.holder.effect
        while effect is not None:
            if effect is _DECIDE:
                if rt.ctx.progress.output is not None and dirty(rt) and _decide.validates(rt):
                    # the answer that was paid for is durable before the
                    # application's validator runs (whatever that does)
                    await self.commit(rt)
                _decide.decide(self, rt)
            else:
                if effect in _WAITS:
                    if rt.hand_back and effect in _HAND_BACK_BEFORE:
                        return  # handed back: the call's last commit releases the lease
                    # durable before the engine waits on the outside world
                    if dirty(rt) and not commit_at_once(self, rt, False):
                        await self.commit(rt)
                watch = rt.watch
                # only the LLM attempt has hooks around it: the other effects
                # of a watched call run as they are, without a wrapper's frame
                if watch is not None and watch.llm and effect is _CALL_LLM:
                    await _observe.run_effect(self, rt, effect, effects[effect])
                else:
                    await effects[effect](self, rt)
            effect = rt.holder.effect

    # ------------------------------------------------------------------ I/O

    async def step(self, rt: Runtime, trigger: Trigger) -> State:
        """Take ``trigger`` and commit it at once (then its events go out)."""
        dest = fire(rt, trigger)
        await self.commit(rt)
        return dest

    async def commit(self, rt: Runtime, *, release: bool = False) -> None:
        """Commit what changed since the last commit, then send its events.
        ``release``: this is the call's last commit, and the store ends the
        call's lease with it (when the store can: ``leases_in_commits``)."""
        status = rt.lease_status
        recorded = self.commit_recorded
        commit = build_commit(
            rt,
            release and self.leases_in_commits and rt.lease is not None and status is not RELEASED,
            recorded is not None,
        )
        try:
            if recorded is not None:  # in memory too, and given the steps as they are
                recorded(commit, rt.holder.steps, rt.changes)
            elif self.commit_nowait is not None:  # a store that never waits needs no shield
                self.commit_nowait(commit)
            else:
                with anyio.CancelScope(shield=True):
                    await self.settings.store.commit(commit)
        except BaseException as exc:
            if status is CLAIM:
                CallLease.commit_failed(rt, exc)
            raise
        for event in committed(rt, commit):
            if publish(rt, event):
                await yield_to_readers()
