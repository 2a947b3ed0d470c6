"""The steps of a call, as plain functions on the loaded context (``Runtime``):
take a trigger, reserve an event for the next commit, record a change that is
not a transition, add tool results, build the next commit and settle what it
stored, offer an event to the subscribers.

Nothing here waits or does I/O: what happens between two waits is decided and
recorded here, and the drive loop (``_drive``) does the waiting (the store's
commit, the LLM, the tools, the clock). So a step can be read, tested and
replayed without an event loop, and every step a call takes goes through the
one table of the machine (``rt.machine``), as the design asks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from ..events import ContextChanged, Event, Failed, StateChanged, ToolResult, TurnCompleted
from ..model import MessageNode, ToolCallRequest
from ..model._detach import detached_fields
from ..states import Change, State, Trigger
from ..storage import Commit, CommitsWithoutWaiting, MemoryStore, Store
from ..storage._base import StepLog, step_log
from ..tools import ToolOutcome
from . import _history
from ._clock import from_timestamp
from ._defaults import ignore
from ._history import Result
from ._runtime import CLAIM, HELD, RELEASED, Runtime

_new = object.__new__

__all__ = [
    "add_results",
    "build_commit",
    "change",
    "close_open_calls",
    "commit_nowait_of",
    "commit_recorded_of",
    "committed",
    "end_turn",
    "failed",
    "fire",
    "later",
    "now",
    "publish",
    "unheard",
]


def now(rt: Runtime) -> datetime:
    """The clock's time as a datetime (UTC)."""
    return from_timestamp(rt.settings.clock.time(), UTC)


def fire(rt: Runtime, trigger: Trigger) -> State:
    """Take ``trigger`` on the machine (its StateChanged goes out after the
    next commit); :class:`~turnfsm.errors.IllegalTransition` if the table has
    no such edge from the current state."""
    holder = rt.holder
    source = holder.state
    dest = rt.machine.fire(holder, trigger)
    turn_states = rt.turn_states
    if turn_states:
        turn_states.append(dest)
    else:  # the call's first step (see Runtime)
        rt.turn_states = [dest]
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
        _post(rt, (StateChanged, seq, rt.settings.clock.time(), fields))
    if rt.watch is not None:
        rt.watch.transition(rt, source, trigger, dest)
    return dest


def later(rt: Runtime, kind: Callable[..., Event], **fields: Any) -> None:
    """Give the next ``seq`` to an event that goes out after the next commit.

    The seq is reserved now (and stored by that commit) even when nobody
    listens, so seqs have no gaps and are never reused after a reload. The
    events of every turn are given here only when someone listens (their
    keywords would be packed into a dict for nothing), else their seq is
    reserved by :func:`unheard`.
    """
    seq = rt.seq = rt.seq + 1
    if rt.subscribers:
        _post(rt, (kind, seq, rt.settings.clock.time(), fields))


def _post(rt: Runtime, event: tuple[Callable[..., Event], int, float, dict[str, Any]]) -> None:
    """Queue ``event`` for after the next commit (the outbox is the empty
    tuple until its first event)."""
    outbox = rt.outbox
    if outbox:
        outbox.append(event)
    else:
        rt.outbox = [event]


def unheard(rt: Runtime, count: int = 1) -> None:
    """Reserve the seqs of ``count`` events nobody listens to
    (``rt.subscribers`` is empty): what :func:`later` does then, without the
    events' fields."""
    rt.seq += count


def change(rt: Runtime, change: Change, detail: dict[str, Any]) -> None:
    """Record a change that is not a transition (see :class:`Change`): an
    audit record and a ContextChanged event, both with the next commit."""
    changes = rt.changes
    if changes:
        changes.append((change, detail))
    else:
        rt.changes = [(change, detail)]
    later(rt, ContextChanged, change=str(change), detail=detail, state=rt.holder.state)


def end_turn(rt: Runtime) -> None:
    """The TurnCompleted event (``rt.stop_reason``), with the next commit."""
    if rt.subscribers:
        later(rt, TurnCompleted, stop_reason=str(rt.stop_reason), state=rt.holder.state)
    else:
        rt.seq += 1  # ``unheard``, without its frame: every turn ends here


def failed(rt: Runtime, error: str, partial_text: str) -> None:
    """The Failed event, with the next commit."""
    later(rt, Failed, error=error, state=rt.holder.state, partial_text=partial_text)


def add_results(
    rt: Runtime, calls: Sequence[ToolCallRequest], outcomes: Sequence[ToolOutcome]
) -> None:
    """Append one result per call; each has its ToolResult event."""
    _results_out(rt, _history.add_results(rt, calls, outcomes, now(rt), rt.settings.ids))


def close_open_calls(rt: Runtime, why: str, error: Callable[[ToolCallRequest], str]) -> None:
    """Close the open calls with failed results (see ``_history.close_open_calls``),
    each with its ToolResult event."""
    _results_out(rt, _history.close_open_calls(rt, why, error, now(rt), rt.settings.ids))


def _results_out(rt: Runtime, results: list[Result]) -> None:
    if not rt.subscribers:
        rt.seq += len(results)  # ``unheard``, without its frame
        return
    for call, outcome, node in results:
        later(
            rt,
            ToolResult,
            call_id=call.id,
            tool_name=call.tool_name,
            success=outcome.success,
            result=outcome.result,
            message_id=node.id,
        )


def publish(rt: Runtime, event: Event) -> bool:
    """Offer ``event`` to every subscriber (never waits). True when some
    subscriber's buffer is half full: the caller then gives the event loop a
    turn (``yield_to_readers``) so that a reader on it keeps up."""
    pressed = False
    for sub in rt.subscribers:
        if sub.offer(event):
            pressed = True
    return pressed


def commit_nowait_of(store: Store) -> Callable[[Commit], None] | None:
    """The store's commit as a plain call, when it declares one
    (:class:`~turnfsm.storage.CommitsWithoutWaiting`)."""
    if isinstance(store, CommitsWithoutWaiting):
        return store.commit_nowait
    return None


Recorded = Callable[
    [Commit, Sequence[tuple[str, str, str]], Sequence[tuple[str, dict[str, Any]]]], None
]
"""``MemoryStore._commit_recorded``: a commit whose steps are given as the
machine recorded them."""


def commit_recorded_of(store: Store) -> Recorded | None:
    """The memory store's commit given the steps as the machine recorded them:
    it keeps them as rows of their fields, so the engine makes no ``StepLog``
    for it to take apart again. ``None`` for any other store, and for a
    memory store's subclass whose commit does more."""
    if isinstance(store, MemoryStore):
        return store._commit_recorded
    return None


def build_commit(rt: Runtime, release: bool, recorded: bool = False) -> Commit:
    """The commit of what changed since the last one. ``release``: the store
    ends the call's lease with it (the caller checked that it can).
    ``recorded``: the store is given the steps as the machine recorded them
    (``holder.steps`` and ``rt.changes``, see ``MemoryStore._commit_recorded``),
    and the commit's ``steps`` are left empty."""
    ctx = rt.ctx
    holder = rt.holder
    at = from_timestamp(rt.settings.clock.time(), UTC)
    version = ctx.version + 1
    steps: list[StepLog] = []
    if not recorded:
        # a loop, not a comprehension: a commit has a step or two, and no frame
        for a, t, b in holder.steps:
            steps.append(step_log(version, a, t, b, at))
        if rt.changes:
            state = holder.state
            for c, detail in rt.changes:
                steps.append(step_log(version, state, c, state, at, detail))
    appended = rt.appended or []  # the commit's own list (none since the last: a new one)
    replaced = list(rt.replaced.values()) if rt.replaced else []
    if replaced and appended:
        # a message added and then changed (decided) in this same commit is
        # stored once, as it is now (loops, not comprehensions: a decided
        # tool call's commit runs this, and each of those is a call of its own)
        new: dict[str, int] = {}
        for i, (_, node) in enumerate(appended):
            new[node.id] = i
        still: list[MessageNode] = []
        for node in replaced:
            i = new.get(node.id, -1)
            if i < 0:
                still.append(node)
            else:
                appended[i] = (appended[i][0], node)
        replaced = still
    lease = rt.lease
    # each field written on the slots, as ``step_log`` makes its records: a
    # dataclass made by a class call runs ``type.__call__`` and a generated
    # ``__init__`` of seventeen arguments, on every commit
    # (tests/engine/test_commit_fields.py holds the result to the class's record)
    commit = _new(Commit)
    commit.context_id = ctx.id
    commit.expected_version = ctx.version
    commit.version = version
    commit.state = holder.state
    commit.updated_at = at
    commit.progress = ctx.progress
    commit.event_seq = rt.seq
    commit.steps = steps
    commit.appended = appended
    commit.replaced = replaced
    commit.branches = rt.branches or []
    commit.active_branch = ctx.active_branch_name if rt.active_changed else None
    commit.config = ctx.config if rt.config_changed else None
    commit.lease_token = lease.token if lease is not None else None
    commit.take_lease = lease if rt.lease_status is CLAIM else None
    commit.lease_owner = lease.owner if lease is not None else None
    commit.release_lease = release
    return commit


_NONE: tuple[Event, ...] = ()


def committed(rt: Runtime, commit: Commit) -> Sequence[Event]:
    """Settle ``commit``, which the store has taken: the working copy at its
    version, nothing pending; the events it released, in order, to publish."""
    holder = rt.holder
    holder.steps.clear()
    # the commit holds the lists it was given: the next change makes new ones
    rt.appended = ()
    rt.branches = ()
    rt.replaced = None
    rt.changes = ()
    rt.active_changed = False
    rt.config_changed = False
    if rt.lease_status is CLAIM:
        rt.lease_status = RELEASED if commit.release_lease else HELD
    elif commit.release_lease:
        rt.lease_status = RELEASED
    # the engine's own working copy (a plain dataclass: no checks on assignment)
    ctx = rt.ctx
    ctx.version = commit.version
    ctx.current_state = holder.state  # the holder's, between commits
    ctx.updated_at = commit.updated_at
    ctx.event_seq = rt.sent_seq = commit.event_seq
    outbox = rt.outbox
    if not outbox:
        return _NONE
    rt.outbox = ()
    cid = ctx.id
    return [
        kind(context_id=cid, seq=seq, timestamp=at, **detached_fields(fields))
        for kind, seq, at, fields in outbox
    ]
