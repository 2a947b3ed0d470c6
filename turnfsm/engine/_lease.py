"""A call's hold on its context: :class:`CallLease` owns the claim, hold and
hand-back protocol of the lease the call runs under (the engine's calls share
one: it keeps nothing of a call).

Where the lease stands is one fact on the loaded context (``rt.lease`` and
``rt.lease_status``, see :class:`~turnfsm.engine._runtime.LeaseStatus`), read
by the heartbeat and by the commit that takes or releases it; this object is
the one that moves it. The drive loop asks it to enter (mark the context
busy, load it, take or claim its lease), to confirm a claim that no commit
took, to hold the lease again for a late cancel, and to let go when the call
returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from ..errors import ContextBusy, InvalidInput, LeaseLost
from ..storage import Commit, Lease
from ..storage._base import new_lease
from . import _leases
from ._loaded import Loaded
from ._runtime import CLAIM, HELD, RELEASED, Runtime
from ._settings import Settings
from ._steps import Recorded, build_commit, committed

__all__ = ["CallLease", "StaleCopy"]


class StaleCopy(Exception):
    """The call's loaded copy may be stale (another owner ran on the context
    since this engine's last call): the drive loop runs the call again."""


class CallLease:
    """The lease protocol of a call on a context (of any call: it keeps
    nothing of one; the engine's calls share it).

    A context this engine ran the last call on, and still holds loaded, can
    leave its lease to the call's first commit (``Commit.take_lease``, on a
    store with ``leases_in_commits``): the lease with the next token, granted
    only while the store still has this engine's last token, so only while
    no other owner ran on the context since, and thus only while the loaded
    copy is current. Until that commit nothing leaves the engine. When the
    store refuses it, or the call ends before committing anything and the
    lease then taken shows that another owner ran meanwhile, :class:`StaleCopy`
    says to run the call again on a fresh copy."""

    __slots__ = ("in_commits", "loaded", "settings")

    def __init__(self, settings: Settings, loaded: Loaded, in_commits: bool) -> None:
        self.settings = settings
        self.loaded = loaded
        self.in_commits = in_commits
        """The store takes and releases a lease with a commit."""

    async def enter_claimed(self, context_id: str, lease: Lease) -> Runtime:
        """Mark the context busy and load it afresh under ``lease`` (this
        engine's, claimed from the store): whatever copy was loaded before the
        claim may be stale. The lease is released if the load fails."""
        s = self.settings
        if lease.owner != s.owner or lease.context_id != context_id:
            raise InvalidInput(
                "lease", f"is {lease.owner}'s lease on {lease.context_id!r}, not this engine's"
            )
        loaded = self.loaded
        try:
            loaded.refuse_if_busy(context_id)
        except ContextBusy:
            await _leases.release(s, lease)
            raise
        loaded.busy.add(context_id)
        try:
            loaded.unload(context_id)
            rt = loaded.attach(await s.store.load(context_id), s)
        except BaseException:
            await _leases.release(s, lease)
            loaded.busy.discard(context_id)
            raise
        return _begin_holding(rt, lease, s)

    def enter_loaded(self, context_id: str) -> Runtime | None:
        """Enter a context without an await, when it can: not busy, and still
        loaded from this engine's last call on it; its lease is then left to
        the call's first commit (a claim). None, with nothing done, otherwise:
        :meth:`enter` takes the lease (and refuses a busy context)."""
        loaded = self.loaded
        runtimes = loaded.runtimes
        rt = runtimes.get(context_id) if self.in_commits else None
        if rt is None or rt.lease is None or rt.lease_status is HELD:
            return None
        busy = loaded.busy
        if context_id in busy:
            return None
        busy.add(context_id)
        s = self.settings
        del runtimes[context_id]
        runtimes[context_id] = rt  # most recently used last
        rt.lease = new_lease(context_id, s.owner, rt.lease.token + 1, s.clock.time() + s.lease_ttl)
        rt.lease_status = CLAIM
        return _begin(rt, s)

    async def enter(self, context_id: str) -> Runtime:
        """Mark the context busy and return it loaded, under a lease taken from
        the store; raise ContextBusy if it is busy."""
        loaded = self.loaded
        busy = loaded.busy
        if context_id in busy:
            loaded.refuse_if_busy(context_id)
        busy.add(context_id)
        s = self.settings
        lease: Lease | None = None
        try:
            lease = await _leases.acquire(s, context_id)
            rt = loaded.take(context_id)
            if rt is not None and (rt.lease is None or rt.lease.token + 1 != lease.token):
                # another owner held the context since this engine's last call
                # on it: what is loaded may be stale
                loaded.put(rt)
                loaded.unload(context_id)
                rt = None
            if rt is None:
                rt = loaded.attach(await s.store.load(context_id), s)
            else:
                loaded.put(rt)  # most recently used last
        except BaseException:
            if lease is not None:
                await _leases.release(s, lease)
            loaded.busy.discard(context_id)
            raise
        return _begin_holding(rt, lease, s)

    async def confirm_claim(self, rt: Runtime) -> None:
        """A call that left its lease to its first commit ends without one (it
        failed, or had nothing to commit): take the lease now, to learn
        whether another owner ran on the context since this engine's last
        call. If one did, raise :class:`StaleCopy`; if one holds it now,
        ContextLeased. Else the call's outcome stands, and the lease is
        released when it returns."""
        claimed = rt.lease
        assert claimed is not None
        rt.lease_status = RELEASED
        s = self.settings
        lease = await _leases.acquire(s, rt.ctx.id)
        if lease.token != claimed.token:
            await _leases.release(s, lease)
            raise StaleCopy
        rt.lease = lease
        rt.lease_status = HELD

    async def hold_again(self, rt: Runtime) -> bool:
        """Take the lease again for a cancel that came after the call's last
        commit had released it. False (and the context unloaded) when another
        owner ran on the context in between: the cancel then has nothing left
        to stop."""
        if rt.lease_status is not RELEASED or rt.lease is None:
            return True
        cid = rt.ctx.id
        s = self.settings
        lease = await _leases.acquire(s, cid)
        if lease.token != rt.lease.token + 1:
            await _leases.release(s, lease)
            self.loaded.unload(cid)
            return False
        rt.lease = lease
        rt.lease_status = HELD
        return True

    @staticmethod
    def commit_failed(rt: Runtime, exc: BaseException) -> None:
        """The commit that was to take the claimed lease failed: refused
        (another owner ran since this engine's last call) raises
        :class:`StaleCopy`; an unknown outcome counts the lease as held, so
        that it is released in case it was taken."""
        if rt.lease_status is not CLAIM:
            return
        if isinstance(exc, LeaseLost):
            rt.lease_status = RELEASED
            raise StaleCopy from None
        rt.lease_status = HELD

    @staticmethod
    def let_go(rt: Runtime) -> Lease | None:
        """The call returns: a claim never taken leaves the last lease standing;
        a lease still held is marked released and returned, for the caller to
        give up (``_leases.release``). A plain call, so that a call whose last
        commit released its lease does not wait here."""
        status = rt.lease_status
        lease = rt.lease
        if lease is None or status is RELEASED:
            return None
        rt.lease_status = RELEASED  # first: a heartbeat racing the release stays quiet
        if status is CLAIM:
            rt.lease = replace(lease, token=lease.token - 1)
            return None
        return lease


def _begin_holding(rt: Runtime, lease: Lease, settings: Settings) -> Runtime:
    """:func:`_begin` for a call that holds ``lease``."""
    rt.lease = lease
    rt.lease_status = HELD
    return _begin(rt, settings)


def _begin(rt: Runtime, settings: Settings) -> Runtime:
    """Reset what a call keeps on its runtime."""
    rt.settings = settings
    rt.turn_states = ()
    rt.turn_nodes = ()
    rt.stop_reason = None
    rt.output = rt.output_error = None
    rt.cancel_requested = False
    rt.hand_back = False
    rt.running = True  # its end (``rt.done``) is made by a cancel that waits for it
    return rt


class Commits(Protocol):
    """What :func:`commit_at_once` reads of the engine's driver."""

    commit_recorded: Recorded | None
    commit_nowait: Callable[[Commit], None] | None
    leases_in_commits: bool


def commit_at_once(d: Commits, rt: Runtime, release: bool) -> bool:
    """``Driver.commit`` done without an await where it needs none: a store
    that never waits (``d.commit_recorded``, else ``d.commit_nowait``: see
    ``_steps.commit_recorded_of`` and ``_steps.commit_nowait_of``), and no event
    to send (sending one may yield to its readers). ``release``: the call's
    last commit (the store ends the lease with it, when it can). False, with
    nothing done, otherwise: the caller awaits ``Driver.commit``. Each commit
    of a turn takes this path, without a coroutine of its own."""
    recorded = d.commit_recorded
    nowait = d.commit_nowait
    if rt.outbox or (recorded is None and nowait is None):
        return False
    status = rt.lease_status
    release = release and d.leases_in_commits and rt.lease is not None and status is not RELEASED
    commit = build_commit(rt, release, recorded is not None)
    try:
        if recorded is not None:
            recorded(commit, rt.holder.steps, rt.changes)
        elif nowait is not None:
            nowait(commit)
    except BaseException as exc:
        if status is CLAIM:
            CallLease.commit_failed(rt, exc)
        raise
    committed(rt, commit)  # no event: nothing to send
    return True
