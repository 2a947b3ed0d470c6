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

Every committed step is durable in the store before its events are emitted.
A store error propagates to the caller and the loaded copy of the context is
dropped, so the next call starts again from the last committed state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import anyio

from ..errors import ContextBusy, InvalidInput, LeaseLost
from ..events import ContextChanged, Event, Failed, StateChanged, ToolResult, TurnCompleted
from ..model import ToolCallRequest, detached
from ..model._detach import detached_fields
from ..states import RESTING, Change, Effect, State, Trigger, TurnMachine
from ..storage import Commit, CommitsWithoutWaiting, Lease, LeasesInCommits, StepLog, Store
from ..tools import ToolOutcome
from . import (
    _backoff,
    _call_llm,
    _calls,
    _decide,
    _history,
    _leases,
    _prepare,
    _run_tools,
)
from ._approval import questions_of
from ._client_view import client_calls
from ._defaults import ignore
from ._history import Result
from ._host import Host, SubtaskRunnerHost
from ._loaded import Loaded
from ._observing import _observers as _observe
from ._observing import _otel_spans as _tracing
from ._runtime import CLAIM, HELD, RELEASED, CallEnd, Runtime, dirty
from ._settings import Settings
from ._subscribers import yield_to_readers
from ._turn import Question, Turn, uncopied

__all__ = ["Driver"]

S = State
T = Trigger

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

Start = Callable[[Runtime], Awaitable[None]]
"""What a public call does first: check against the loaded context, take its trigger."""


class _StaleCopy(Exception):
    """The call's loaded copy may be stale (another owner ran on the context
    since this engine's last call): :meth:`Driver.run` runs it again."""


def _commit_nowait(store: Store) -> Callable[[Commit], None] | None:
    """The store's commit as a plain call, when it declares one
    (:class:`~turnfsm.storage.CommitsWithoutWaiting`)."""
    if isinstance(store, CommitsWithoutWaiting):
        return store.commit_nowait
    return None


class Driver:
    """What the engine is made of (its settings, the loaded contexts, the
    machine) and the loop that drives one call: the engine's own
    :class:`~turnfsm.engine._host.Host`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        """The engine's settings (replaced as a whole when one changes)."""
        store = settings.store
        self.commit_nowait = _commit_nowait(store)
        self.leases_in_commits = (
            isinstance(store, LeasesInCommits) and store.leases_in_commits is True
        )
        """The store takes and releases a lease with a commit (``Commit.take_lease``,
        ``Commit.release_lease``)."""
        self.machine = TurnMachine()
        self.loaded = Loaded(self.machine, settings.log, self.request_cancel)
        self.busy: set[str] = set()
        self.beats: anyio.abc.TaskGroup | None = None
        self.renews_leases = True
        """Renew a running call's lease while its effects run. A host whose
        store keeps no leases (a durable workflow, whose engine is the
        context's one owner by construction) turns it off: no heartbeat task,
        no timer."""
        self.threads = True
        """Run an application's sync summarizer in a worker thread. A host that
        runs the engine deterministically on one thread (a durable workflow)
        turns it off: the summarizer is called there, as it is."""
        self.subtask_host: SubtaskRunnerHost | None = None
        """Runs the sub-task tools' children (the engine sets it)."""
        self.effects: dict[Effect, Callable[[Host, Runtime], Awaitable[None]]] = {
            Effect.PREPARE: _prepare.prepare,
            Effect.CALL_LLM: _call_llm.call_llm,
            Effect.DECIDE: _decide.decide,
            Effect.RUN_TOOLS: _run_tools.run_tools,
            Effect.BACKOFF: _backoff.backoff,
        }
        self.observers: list[_observe.Observer] = []
        """What ``Engine.observe`` added: asked at the start of every call."""
        self.tracing = _tracing.Tracing()
        """OpenTelemetry: the provider (None: the process's) and the content opt-in."""

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.settings.clock.time(), UTC)

    def request_hand_back(self, context_id: str) -> bool:
        """Ask the running call on the context to stop before its next wait (see
        ``Runtime.hand_back``); False when no call runs on it."""
        rt = self.loaded.get(context_id)
        if rt is None or context_id not in self.busy:
            return False
        rt.hand_back = True
        return True

    def request_cancel(self, context_id: str) -> None:
        """Ask the running call on the context to cancel (nothing when none runs)."""
        rt = self.loaded.get(context_id)
        if rt is None or context_id not in self.busy:
            return
        rt.cancel_requested = True
        if rt.scope is not None:
            rt.scope.cancel()

    def refuse_if_busy(self, context_id: str) -> None:
        if context_id in self.busy:
            rt = self.loaded.get(context_id)
            raise ContextBusy(context_id, rt.holder.state if rt else "loading")

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
        function returning the call's coroutine: an unwatched call has no
        frame more than it needs).

        ``lease``: a lease this engine already holds on the context (claimed
        with ``claim_expired``): the call runs under it, on a freshly loaded
        copy, and its commits carry its fencing token. ``hand_off``: the call
        commits what ``start`` did and releases the lease in that same commit,
        without running the effects (see :meth:`Engine.submit`).

        A context this engine ran the last call on, and still holds loaded,
        takes its lease with the call's first commit (``Commit.take_lease``,
        on a store with ``leases_in_commits``): the lease with the next token,
        granted only while the store still has this engine's last token, so
        only while no other owner ran on the context since, and thus only
        while the loaded copy is current. Until that commit nothing leaves the
        engine: what runs before it (the call's checks, its first trigger,
        the enhancers) works on the loaded copy alone. When the store refuses
        the lease, or the call ends (or fails) before committing anything and
        the lease then taken shows that another owner ran meanwhile, the call
        is run again from the start on a freshly loaded copy under a lease
        of its own; another owner's live lease raises ContextLeased as before.
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
        if lease is not None:
            rt = await self._enter_claimed(context_id, lease)
            return await self._call(rt, start, hand_off, watch)
        try:
            rt = await self._enter(context_id, claim=True)
            return await self._call(rt, start, hand_off, watch)
        except _StaleCopy:
            self.loaded.unload(context_id)
        return await self._call(await self._enter(context_id), start, hand_off, watch)

    async def _enter_claimed(self, context_id: str, lease: Lease) -> Runtime:
        """Mark the context busy and load it afresh under ``lease`` (this
        engine's, claimed from the store): whatever copy was loaded before the
        claim may be stale. The lease is released if the load fails."""
        if lease.owner != self.settings.owner or lease.context_id != context_id:
            raise InvalidInput(
                "lease", f"is {lease.owner}'s lease on {lease.context_id!r}, not this engine's"
            )
        try:
            self.refuse_if_busy(context_id)
        except ContextBusy:
            await _leases.release(self.settings, lease)
            raise
        self.busy.add(context_id)
        try:
            self.loaded.unload(context_id)
            rt = self.loaded.attach(await self.settings.store.load(context_id))
        except BaseException:
            await _leases.release(self.settings, lease)
            self.busy.discard(context_id)
            raise
        rt.lease = lease
        rt.lease_status = HELD
        return self._begin(rt)

    async def _enter(self, context_id: str, *, claim: bool = False) -> Runtime:
        """Mark the context busy and return it loaded; raise ContextBusy if it is busy.

        ``claim``: when the context is still loaded from this engine's last
        call on it, its lease is left to the call's first commit (see
        :meth:`run`)."""
        self.refuse_if_busy(context_id)
        self.busy.add(context_id)
        lease: Lease | None = None
        loaded = self.loaded
        rt = loaded.get(context_id) if claim and self.leases_in_commits else None
        if rt is not None and rt.lease is not None and rt.lease_status is not HELD:
            loaded.put(loaded.take(context_id) or rt)  # most recently used last
            last = rt.lease
            s = self.settings
            rt.lease = Lease(
                context_id,
                s.owner,
                last.token + 1,
                s.clock.time() + s.lease_ttl,
            )
            rt.lease_status = CLAIM
            return self._begin(rt)
        try:
            lease = await _leases.acquire(self.settings, context_id)
            rt = loaded.take(context_id)
            if rt is not None and (rt.lease is None or rt.lease.token + 1 != lease.token):
                # another owner held the context since this engine's last call
                # on it: what is loaded may be stale
                loaded.put(rt)
                loaded.unload(context_id)
                rt = None
            if rt is None:
                rt = loaded.attach(await self.settings.store.load(context_id))
            else:
                loaded.put(rt)  # most recently used last
        except BaseException:
            if lease is not None:
                await _leases.release(self.settings, lease)
            self.busy.discard(context_id)
            raise
        rt.lease = lease
        rt.lease_status = HELD
        return self._begin(rt)

    @staticmethod
    def _begin(rt: Runtime) -> Runtime:
        """Reset what a call keeps on its runtime."""
        rt.turn_states = []
        rt.turn_nodes = []
        rt.stop_reason = None
        rt.output = rt.output_error = None
        rt.cancel_requested = False
        rt.hand_back = False
        rt.done = CallEnd()
        return rt

    def _leave(self, rt: Runtime) -> None:
        self.busy.discard(rt.ctx.id)
        rt.scope = None
        end = rt.done
        if end is not None:
            rt.done = None
            end.set()
        loaded, settings = self.loaded, self.settings
        loaded.recount(rt)
        if (
            len(loaded.runtimes) > settings.max_loaded
            or loaded.messages > settings.max_loaded_messages
        ):
            loaded.evict(settings.max_loaded, self.busy, settings.max_loaded_messages)

    async def _call(
        self,
        rt: Runtime,
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
            with anyio.CancelScope() as scope:
                rt.scope = scope
                if rt.cancel_requested:
                    scope.cancel()
                try:
                    await start(rt)
                except Exception:
                    if rt.lease_status is CLAIM:  # was the loaded copy current? (see run)
                        await self._confirm_claim(rt)
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
                    await self.commit(rt, release=last)
            rt.scope = None
            if rt.lease_status is CLAIM:  # nothing committed: was the loaded copy current?
                await self._confirm_claim(rt)
            if rt.cancel_requested and rt.holder.current() in CANCELLABLE:
                with anyio.CancelScope(shield=True):
                    if await self._hold_again(rt):
                        await _calls.cancel_in_place(self, rt)
        except BaseException:
            if dirty(rt) or rt.holder.current() not in RESTING:
                self.loaded.unload(rt.ctx.id)
            raise
        finally:
            turn = self._turn(rt)
            if rt.done is not None:
                rt.done.turn = turn
            if rt.hand_back and rt.holder.current() not in RESTING:
                self.loaded.unload(rt.ctx.id)  # the next owner changes it
            if rt.lease_status is CLAIM and rt.lease is not None:  # never taken: the last stands
                rt.lease_status = RELEASED
                rt.lease = replace(rt.lease, token=rt.lease.token - 1)
            if rt.lease is not None and rt.lease_status is HELD:
                rt.lease_status = RELEASED  # first: a heartbeat racing the release stays quiet
                await _leases.release(self.settings, rt.lease)
            rt.watch = None
            self._leave(rt)
        return turn

    async def _confirm_claim(self, rt: Runtime) -> None:
        """A call that left its lease to its first commit ends without one (it
        failed, or had nothing to commit): take the lease now, to learn
        whether another owner ran on the context since this engine's last
        call. If one did, raise ``_StaleCopy`` (the call is run again on a
        fresh copy); if one holds it now, ContextLeased. Else the call's
        outcome stands, and the lease is released when it returns."""
        claimed = rt.lease
        assert claimed is not None
        rt.lease_status = RELEASED
        lease = await _leases.acquire(self.settings, rt.ctx.id)
        if lease.token != claimed.token:
            await _leases.release(self.settings, lease)
            raise _StaleCopy
        rt.lease = lease
        rt.lease_status = HELD

    async def _hold_again(self, rt: Runtime) -> bool:
        """Take the lease again for a cancel that came after the call's last
        commit had released it. False (and the context unloaded) when another
        owner ran on the context in between: the cancel then has nothing left
        to stop."""
        if rt.lease_status is not RELEASED or rt.lease is None:
            return True
        cid = rt.ctx.id
        lease = await _leases.acquire(self.settings, cid)
        if lease.token != rt.lease.token + 1:
            await _leases.release(self.settings, lease)
            self.loaded.unload(cid)
            return False
        rt.lease = lease
        rt.lease_status = HELD
        return True

    def _turn(self, rt: Runtime) -> Turn:
        ctx = rt.ctx
        state = rt.holder.current()
        pending: tuple[ToolCallRequest, ...] = ()
        questions: tuple[Question, ...] = ()
        client: tuple[ToolCallRequest, ...] = ()
        if state is S.AWAITING_TOOL_APPROVAL:
            pending = tuple(ctx.pending_tool_calls())
            questions = questions_of(self.settings.tools, pending)
            pending = detached(pending)
            client = detached(tuple(client_calls(ctx)))
        pool = ctx.message_pool
        ids = [n.id for n in rt.turn_nodes]
        return Turn(
            context_id=ctx.id,
            state=state,
            stop_reason=rt.stop_reason,
            states=tuple(rt.turn_states),
            # the pool holds the latest version of each (decisions replace nodes);
            # copied when the caller first reads them
            messages=uncopied(tuple([pool[i].message for i in ids])),
            message_ids=tuple(ids),
            pending_tool_calls=pending,
            error=ctx.progress.last_error if state is S.PERMANENT_FAILURE else None,
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
        effect = rt.holder.effect
        while effect is not None:
            if effect in _WAITS:
                if rt.hand_back and effect in _HAND_BACK_BEFORE:
                    return  # handed back: the call's last commit releases the lease
                if dirty(rt):
                    # durable before the engine waits on the outside world
                    await self.commit(rt)
            if rt.watch is None:
                await self.effects[effect](self, rt)
            else:
                await _observe.run_effect(self, rt, effect, self.effects[effect])
            effect = rt.holder.effect

    # ------------------------------------------------------------------ steps

    async def step(self, rt: Runtime, trigger: Trigger) -> State:
        """Take ``trigger`` and commit it at once (then its events go out)."""
        dest = self.fire(rt, trigger)
        await self.commit(rt)
        return dest

    def fire(self, rt: Runtime, trigger: Trigger) -> State:
        """Take ``trigger`` on the machine; its StateChanged waits for the commit."""
        holder = rt.holder
        source = holder.state
        dest = self.machine.fire(holder, trigger)
        rt.turn_states.append(dest)
        debug = rt.log.debug
        if debug is not ignore:  # the default logger below DEBUG: not even the call
            debug(
                "transition",
                from_state=source,
                trigger=trigger,
                to_state=dest,
                attempt=rt.ctx.progress.attempt,
            )
        # ``later`` written out (a step is the commonest event): the seq reserved
        # even when nobody listens
        seq = rt.seq = rt.seq + 1
        if rt.subscribers:
            fields = {"from_state": source, "to_state": dest, "trigger": trigger}
            rt.outbox.append((StateChanged, seq, self.settings.clock.time(), fields))
        if rt.watch is not None:
            rt.watch.transition(rt, source, trigger, dest)
        return dest

    def later(self, rt: Runtime, kind: Callable[..., Event], **fields: Any) -> None:
        """Give the next ``seq`` to an event that goes out after the next commit.

        The seq is reserved now (and stored by that commit) even when nobody
        listens, so seqs have no gaps and are never reused after a reload.
        """
        rt.seq += 1
        if rt.subscribers:
            rt.outbox.append((kind, rt.seq, self.settings.clock.time(), fields))

    def change(self, rt: Runtime, change: Change, detail: dict[str, Any]) -> None:
        """Record a change that is not a transition (see :class:`Change`): an
        audit record and a ContextChanged event, both with the next commit."""
        rt.changes.append((change, detail))
        self.later(rt, ContextChanged, change=str(change), detail=detail, state=rt.holder.state)

    def end_turn(self, rt: Runtime) -> None:
        self.later(rt, TurnCompleted, stop_reason=str(rt.stop_reason), state=rt.holder.state)

    def failed(self, rt: Runtime, error: str, partial_text: str) -> None:
        self.later(rt, Failed, error=error, state=rt.holder.state, partial_text=partial_text)

    async def commit(self, rt: Runtime, *, release: bool = False) -> None:
        """Commit what changed since the last commit, then send its events.
        ``release``: this is the call's last commit, and the store ends the
        call's lease with it (when the store can: ``leases_in_commits``)."""
        ctx = rt.ctx
        holder = rt.holder
        now = self.now()
        version = ctx.version + 1
        steps = [StepLog(version, a, t, b, now) for (a, t, b) in holder.steps]
        if rt.changes:
            state = holder.state
            steps += [StepLog(version, state, c, state, now, detail) for c, detail in rt.changes]
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
        lease = rt.lease
        claim = rt.lease_status is CLAIM
        release = (
            release
            and self.leases_in_commits
            and lease is not None
            and rt.lease_status is not RELEASED
        )
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
            config=ctx.config if rt.config_changed else None,
            lease_token=lease.token if lease is not None else None,
            lease_owner=lease.owner if lease is not None else None,
            take_lease=lease if claim else None,
            release_lease=release,
        )
        try:
            if self.commit_nowait is not None:  # a store that never waits needs no shield
                self.commit_nowait(commit)
            else:
                with anyio.CancelScope(shield=True):
                    await self.settings.store.commit(commit)
        except LeaseLost:
            if claim:  # another owner ran since this engine's last call (see run)
                rt.lease_status = RELEASED
                raise _StaleCopy from None
            raise
        except BaseException:
            if claim:  # the outcome is unknown: release the token, in case it was taken
                rt.lease_status = HELD
            raise
        if claim:
            rt.lease_status = RELEASED if release else HELD
        elif release:
            rt.lease_status = RELEASED
        holder.steps.clear()
        rt.appended = []
        rt.replaced = {}
        rt.branches = []
        rt.active_changed = False
        rt.config_changed = False
        rt.changes = []
        # the engine's own working copy (a plain dataclass: no checks on assignment)
        ctx.version = version
        ctx.current_state = holder.state  # the holder's, between commits
        ctx.updated_at = now
        ctx.event_seq = rt.sent_seq = commit.event_seq
        if rt.outbox:
            outbox = rt.outbox
            rt.outbox = []
            cid = ctx.id
            for kind, seq, at, fields in outbox:
                fields = detached_fields(fields)  # nothing shared
                if self.publish(rt, kind(context_id=cid, seq=seq, timestamp=at, **fields)):
                    await yield_to_readers()

    def publish(self, rt: Runtime, event: Event) -> bool:
        """Offer ``event`` to every subscriber (never waits). True when some
        subscriber's buffer is half full: the caller then gives the event
        loop a turn (``yield_to_readers``) so that a reader on it keeps up."""
        pressed = False
        for sub in rt.subscribers:
            if sub.offer(event):
                pressed = True
        return pressed

    # ------------------------------------------------------------------ history with events

    def add_results(
        self, rt: Runtime, calls: Sequence[ToolCallRequest], outcomes: Sequence[ToolOutcome]
    ) -> None:
        """Append one result per call; each has its ToolResult event."""
        self._results_out(
            rt, _history.add_results(rt, calls, outcomes, self.now(), self.settings.ids)
        )

    def close_open_calls(
        self, rt: Runtime, why: str, error: Callable[[ToolCallRequest], str]
    ) -> None:
        """Close the open calls with failed results (see ``_history.close_open_calls``)."""
        self._results_out(
            rt, _history.close_open_calls(rt, why, error, self.now(), self.settings.ids)
        )

    def _results_out(self, rt: Runtime, results: list[Result]) -> None:
        for call, outcome, node in results:
            self.later(
                rt,
                ToolResult,
                call_id=call.id,
                tool_name=call.tool_name,
                success=outcome.success,
                result=outcome.result,
                message_id=node.id,
            )
