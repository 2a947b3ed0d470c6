"""The in-memory store: the default for embedding and tests.

It keeps its own copy of each context's small fields and branch lists, and
keeps the message nodes a commit gives it (the engine replaces a node, never
changes one in place); what it hands out (``load``, ``load_messages``) are
copies that share nothing that can change. A commit is applied all at once
after its version check, so a refused commit leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ContextNotFound, LeaseLost, StoreError, VersionConflict
from ..model import Branch, ChatContext, MessageNode, detached
from ..model._detach import detached_context
from ._base import (
    Commit,
    ContextSummary,
    Lease,
    StepLog,
    Store,
    in_order,
    lease_is_held,
    step_log,
)

__all__ = ["MemoryStore"]


_UNUSED: Any = {}
"""The head's ``message_pool`` and ``branches``, which nothing reads or
writes (``_Record`` keeps them beside it): one empty dict for all heads."""


def _branch_copy(branch: Branch) -> Branch:
    """A copy that shares nothing mutable (its other fields are immutable)."""
    return dataclasses.replace(branch, message_ids=list(branch.message_ids))


_IN_POOL_ORDER: Any = ()
"""The ``message_ids`` of a ``_Record``'s one branch (see ``_Record.branches``):
the pool's keys, in order."""


def _kept_branches(pool: dict[str, MessageNode], branches: dict[str, Branch]) -> _Branches:
    """What a ``_Record`` keeps of ``branches`` (copies): the one branch alone
    when it holds every message of ``pool`` in the pool's order."""
    if len(branches) == 1:
        ((name, only),) = branches.items()
        if only.name == name and only.message_ids == list(pool):
            return dataclasses.replace(only, message_ids=_IN_POOL_ORDER)
    return {n: _branch_copy(b) for n, b in branches.items()}


def _all_branches(rec: _Record) -> dict[str, Branch]:
    """``rec.branches`` as a dict of them (the one branch's ids made from the pool)."""
    kept = rec.branches
    if type(kept) is Branch:
        return {kept.name: dataclasses.replace(kept, message_ids=list(rec.pool))}
    return kept  # type: ignore[return-value]


_Branches = dict[str, Branch] | Branch
"""``_Record.branches``."""


@dataclass(slots=True)
class _Record:
    context: ChatContext
    """Small fields only; ``message_pool`` and ``branches`` live beside it."""
    pool: dict[str, MessageNode]
    branches: _Branches
    """By name; or, while the context has one branch holding every message of
    the pool in the pool's order (nearly every context: a new one, and one
    that only ever appends), that branch alone, its ``message_ids`` left out
    (``_IN_POOL_ORDER``): a conversation kept its ids twice, as the pool's
    keys and as the branch's list, and a dict for the one branch. A commit
    that adds a branch, appends elsewhere or appends an id the pool holds
    turns it into the dict first (:func:`_all_branches`)."""
    steps: list[Any] = field(default_factory=list)
    """The committed step records, kept flat: a conversation in memory held
    a ``StepLog`` of 96 bytes for each, seven a turn. Per commit its
    ``version`` and ``at``, then each of its transitions as a
    ``(from_state, trigger, to_state)`` tuple: the machine records each step
    as its table's tuple for the edge, shared by every context and never
    changed, so a step costs one pointer. A record with more to it (a
    detail, a lease) follows ``_AS_IS``, as it came. :func:`_made_again`
    makes the records again."""


_AS_IS = object()
"""In ``_Record.steps``: a record kept as it came follows."""


def _appended_to_one(rec: _Record, one: Branch, commit: Commit) -> bool:
    """Put ``commit``'s appended messages in the pool of ``rec``, whose
    branches are ``one`` in the pool's order (see ``_Record.branches``), when
    the commit keeps it so: it adds no branch, and appends to ``one`` only
    messages the pool does not hold. False (nothing done) otherwise."""
    if commit.branches:
        return False
    pool = rec.pool
    name = one.name
    appended = commit.appended
    for to, node in appended:
        if to != name or node.id in pool:
            return False
    if len(appended) > 1 and len({node.id for _, node in appended}) < len(appended):
        return False
    for _, node in appended:
        pool[node.id] = node
    return True


def _appended_by_name(rec: _Record, commit: Commit) -> None:
    """Put ``commit``'s branches and appended messages in ``rec``, its
    branches kept by name from now on; :class:`StoreError` (nothing done)
    for an append to a branch neither kept nor in the commit."""
    appended = commit.appended
    branches = _all_branches(rec)
    for name, _ in appended:
        if name not in branches and not any(b.name == name for b in commit.branches):
            raise StoreError(f"commit appends to unknown branch {name!r}")
    rec.branches = branches
    pool = rec.pool
    for b in commit.branches:
        branches[b.name] = _branch_copy(b)
    for name, node in appended:
        pool[node.id] = node
        branches[name].message_ids.append(node.id)


def _made_again(kept: list[Any]) -> list[StepLog]:
    """The records kept in ``_Record.steps``, in order, as they were committed."""
    out: list[StepLog] = []
    i, n = 0, len(kept)
    while i < n:
        item = kept[i]
        if item is _AS_IS:
            out.append(kept[i + 1])
            i += 2
            continue
        version, at = item, kept[i + 1]  # a commit's: its transitions follow
        i += 2
        while i < n and type(kept[i]) is tuple:
            a, t, b = kept[i]
            out.append(step_log(version, a, t, b, at))
            i += 1
    return out


def _keep_logs(kept: list[Any], steps: list[StepLog]) -> None:
    """Add a commit's ``steps`` to ``kept`` (``_Record.steps``): each run of
    plain records with one version and time under one head."""
    head: tuple[int, Any] | None = None
    for s in steps:
        if s.detail is None and s.lease_token is None and s.lease_owner is None:
            if head is None or head[0] != s.version or head[1] is not s.at:
                head = (s.version, s.at)
                kept += head
            kept.append((s.from_state, s.trigger, s.to_state))
        else:
            kept += (_AS_IS, s)
            head = None


def _keep_changes(
    kept: list[Any], commit: Commit, changes: Sequence[tuple[str, dict[str, Any]]]
) -> None:
    """Add the records of ``changes`` (see ``MemoryStore._commit_recorded``)
    to ``kept``: each has a detail, so each is kept as it is."""
    version = commit.version
    at = commit.updated_at
    state = commit.state
    for c, detail in changes:
        kept += (_AS_IS, step_log(version, state, c, state, at, detail))


class MemoryStore(Store):
    leases_in_commits = True
    """``Commit.take_lease`` and ``Commit.release_lease`` are honoured (see
    :class:`~turnfsm.storage.LeasesInCommits`)."""

    def __init__(self) -> None:
        self._records: dict[str, _Record] = {}
        self._leases: dict[str, Lease] = {}
        """context id -> its latest lease."""
        self._held: set[str] = set()
        """The contexts whose latest lease is held (not released): a set
        rather than a pair per context, as nearly all of them rest with their
        lease released."""

    async def create(self, context: ChatContext) -> None:
        if context.id in self._records:
            raise StoreError(f"context {context.id!r} already exists")
        head = dataclasses.replace(context, message_pool=_UNUSED, branches=_UNUSED)
        pool = dict(context.message_pool)
        self._records[context.id] = _Record(
            context=head, pool=pool, branches=_kept_branches(pool, context.branches)
        )

    def _get(self, context_id: str) -> _Record:
        try:
            return self._records[context_id]
        except KeyError:
            raise ContextNotFound(context_id) from None

    async def load(self, context_id: str) -> ChatContext:
        rec = self._get(context_id)
        # shares nothing that can change with what is stored, as a real store
        kept = rec.branches
        if not isinstance(kept, Branch):
            return detached_context(rec.context, rec.pool, kept)
        ctx = detached_context(rec.context, rec.pool, {kept.name: kept})
        ctx.branches[kept.name].message_ids = list(rec.pool)  # the copy's own list
        return ctx

    async def commit(self, commit: Commit) -> None:
        MemoryStore._commit_recorded(self, commit, (), ())  # also where a subclass set it to None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        if "commit" in own and "commit_nowait" not in own:
            # a subclass whose commit does more: the engine must go through it
            cls.commit_nowait = None  # type: ignore[assignment]
        if "commit" in own or "commit_nowait" in own:
            # nor may the engine go round it with the steps as recorded
            cls._commit_recorded = None  # type: ignore[assignment]

    def commit_nowait(self, commit: Commit) -> None:
        """:meth:`commit` without an await (see
        :class:`~turnfsm.storage.CommitsWithoutWaiting`): the engine calls it
        directly, since a store in memory never waits. A subclass that
        overrides ``commit`` alone has ``commit_nowait = None``."""
        MemoryStore._commit_recorded(self, commit, (), ())

    def _commit_recorded(
        self,
        commit: Commit,
        recorded: Sequence[tuple[str, str, str]],
        changes: Sequence[tuple[str, dict[str, Any]]],
    ) -> None:
        """:meth:`commit_nowait` of a commit whose steps come as the engine's
        machine recorded them rather than as ``commit.steps``: each transition
        a ``(from_state, trigger, to_state)`` tuple, kept as it is (a tuple
        cannot change), then each change with its detail at
        ``commit.state``, all at the commit's version and time. The store
        keeps them flat (see ``_Record.steps``), so the engine makes no
        ``StepLog`` for it to take apart again. ``commit.steps`` (none,
        from the engine) come first. ``None`` on a subclass that overrides
        ``commit`` or ``commit_nowait``: the engine then goes through those."""
        cid = commit.context_id
        rec = self._records.get(cid)  # ``_get`` and the fence written out: every commit runs them
        if rec is None:
            raise ContextNotFound(cid)
        head = rec.context
        token = commit.lease_token
        take = commit.take_lease if token is not None else None
        if take is not None:
            self._check_take(cid, take)
        elif token is not None:
            stored = self._leases.get(cid)
            current = stored.token if stored is not None else None
            if current != token:
                raise LeaseLost(cid, token, current)
        if head.version != commit.expected_version:
            raise VersionConflict(cid, commit.expected_version, head.version)
        pool = rec.pool
        replaced = commit.replaced
        for node in replaced:
            if node.id not in pool:
                raise StoreError(f"commit replaces message {node.id!r}, which is not stored")
        one = rec.branches
        if type(one) is not Branch or not _appended_to_one(rec, one, commit):
            _appended_by_name(rec, commit)  # checked before anything is applied
        for node in replaced:
            pool[node.id] = node
        kept = rec.steps
        if commit.steps:
            _keep_logs(kept, commit.steps)
        if recorded:  # the engine's every step: the machine's tuples, under the commit's head
            kept += (commit.version, commit.updated_at)
            kept += recorded
        if changes:
            _keep_changes(kept, commit, changes)
        commit.apply_head(head)  # on the store's own copy
        if take is not None:
            self._leases[cid] = take
            if commit.release_lease:
                self._held.discard(cid)
            else:
                self._held.add(cid)
        elif commit.release_lease and token is not None:
            self._held.discard(cid)  # the fence found the lease

    async def list_ids(self) -> list[str]:
        return list(self._records)

    async def list_contexts(self) -> list[ContextSummary]:
        return [_summary(r.context) for r in self._records.values()]

    async def list_children(self, parent_id: str) -> list[ContextSummary]:
        return [
            _summary(r.context) for r in self._records.values() if r.context.parent_id == parent_id
        ]

    async def delete(self, context_id: str) -> None:
        self._get(context_id)
        del self._records[context_id]
        self._leases.pop(context_id, None)
        self._held.discard(context_id)

    async def steps(self, context_id: str) -> list[StepLog]:
        return _made_again(self._get(context_id).steps)

    async def aclose(self) -> None:
        return None

    # ------------------------------------------------------------------ leases

    def _check_take(self, context_id: str, take: Lease) -> None:
        """``Commit.take_lease``: the stored lease has the token just before, and
        no other owner holds it (no lease at all counts as token 0)."""
        old = self._leases.get(context_id)
        if old is None:
            if take.token != 1:
                raise LeaseLost(context_id, take.token, None)
            return
        held = context_id in self._held
        if old.token != take.token - 1 or (held and old.owner != take.owner):
            raise LeaseLost(context_id, take.token, old.token)

    async def acquire_lease(
        self,
        context_id: str,
        owner: str,
        ttl: float,
        *,
        now: float,
        take_over: int | None = None,
    ) -> Lease | None:
        self._get(context_id)
        old = self._leases.get(context_id)
        if old is not None:
            holder = old.owner if context_id in self._held else None
            if lease_is_held(
                holder, old.token, old.expires_at, owner=owner, now=now, take_over=take_over
            ):
                return None
        token = old.token + 1 if old is not None else 1
        lease = Lease(context_id, owner, token, now + ttl)
        self._leases[context_id] = lease
        self._held.add(context_id)
        return lease

    async def renew_lease(self, lease: Lease, ttl: float, *, now: float) -> Lease:
        cid = lease.context_id
        old = self._leases.get(cid)
        if old is None or old.token != lease.token or cid not in self._held:
            raise LeaseLost(cid, lease.token, old.token if old is not None else None)
        renewed = Lease(cid, lease.owner, lease.token, now + ttl)
        self._leases[cid] = renewed
        return renewed

    async def release_lease(self, lease: Lease) -> None:
        old = self._leases.get(lease.context_id)
        if old is not None and old.token == lease.token:
            self._held.discard(lease.context_id)

    async def lease(self, context_id: str) -> Lease | None:
        return self._leases.get(context_id) if context_id in self._held else None

    # ------------------------------------------------------------------ messages

    async def load_messages(self, context_id: str, ids: Sequence[str]) -> list[MessageNode]:
        return [detached(node) for node in in_order(context_id, ids, self._get(context_id).pool)]


def _summary(ctx: ChatContext) -> ContextSummary:
    return ContextSummary(
        id=ctx.id,
        state=ctx.current_state,
        version=ctx.version,
        updated_at=ctx.updated_at,
        parent_id=ctx.parent_id,
        title=ctx.config.title,
        model=ctx.config.model_id,
        archived=ctx.config.archived,
    )
