"""The Store interface: what the engine needs from persistence.

A context is created once and then changed only by :class:`Commit` records,
one per committed step: the transitions taken, the messages appended (in
order, per branch) or replaced, and the context's small fields. A commit names
the version it expects; a store that holds another version refuses it with
:class:`~turnfsm.errors.VersionConflict` and stores nothing of it. Appends
are per message, so the cost of a commit does not grow with history.

One owner per running turn: an engine takes the context's :class:`Lease`
before it runs a call on it, renews it while the call runs and releases it
when the call returns. Each successful acquire gives the lease a larger
fencing ``token``; a commit that names a token (``Commit.lease_token``) is
refused with :class:`~turnfsm.errors.LeaseLost` once another owner has taken
the context over, in the same transaction as the version check.

A store that declares :class:`LeasesInCommits` also takes and gives the lease
up inside a commit (``Commit.take_lease``, ``Commit.release_lease``): the
engine then leases a call with its first commit and releases it with its last
one, instead of writes of their own (see the engine's ``Driver.run``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from ..errors import StoreError
from ..model import Branch, ChatConfig, ChatContext, MessageNode, TurnProgress

__all__ = [
    "ChildSummaries",
    "ChildrenOfSummaries",
    "Commit",
    "CommitsWithoutWaiting",
    "ContextHeads",
    "ContextStore",
    "ContextSummary",
    "Lease",
    "Leases",
    "LeasesInCommits",
    "StepLog",
    "Store",
    "TakesLeases",
    "WorkDoorbell",
    "WorkQueue",
    "in_order",
    "lease_is_held",
    "step_log",
]


@dataclass(frozen=True, slots=True)
class ContextSummary:
    """What ``list_contexts`` tells of each stored context, without loading it."""

    id: str
    state: str
    version: int
    updated_at: datetime
    parent_id: str | None = None
    title: str | None = None
    """The config's title (``None`` when it has none, or a store cannot tell)."""
    model: str | None = None
    """The config's model id (``None`` when a store cannot tell)."""
    archived: bool = False
    """The config's ``archived`` flag: a finished sub-context that was kept."""


@dataclass(frozen=True, slots=True)
class StepLog:
    """One committed record of the audit trail: a transition, or a change.

    A transition names a trigger of the declared table. A change (a config
    update, a branch forked or switched, its prompts set: the names are
    :class:`~turnfsm.states.Change`) is committed the same way but is not a
    transition: ``from_state`` and ``to_state`` are the state it happened in,
    and ``detail`` says what changed (JSON; ``None`` for transitions).
    """

    version: int
    from_state: str
    trigger: str
    to_state: str
    at: datetime
    detail: dict[str, Any] | None = None
    lease_token: int | None = field(default=None, compare=False)
    """The fencing token of the lease the record was committed under (``None``:
    committed without a lease, or by a store or a turnfsm that does not record
    it). Stores that record it: SQLite and PostgreSQL. Not compared: two logs
    with the same records are equal whoever wrote them."""
    lease_owner: str | None = field(default=None, compare=False)
    """The owner of that lease (``host:pid:random``), with ``lease_token``."""


class _OpenStepLog:
    """StepLog's slots, without its frozen ``__setattr__`` (see :func:`step_log`)."""

    __slots__ = (
        "at",
        "detail",
        "from_state",
        "lease_owner",
        "lease_token",
        "to_state",
        "trigger",
        "version",
    )
    version: int
    from_state: str
    trigger: str
    to_state: str
    at: datetime
    detail: dict[str, Any] | None
    lease_token: int | None
    lease_owner: str | None


_new = object.__new__


def step_log(
    version: int,
    from_state: str,
    trigger: str,
    to_state: str,
    at: datetime,
    detail: dict[str, Any] | None = None,
) -> StepLog:
    """``StepLog(version, from_state, trigger, to_state, at, detail)``, the same
    record, made with plain slot writes: a frozen dataclass's ``__init__`` sets
    each of its fields through ``object.__setattr__``, about four times the
    cost, and the engine makes one for every step of every turn. The slots are
    written here rather than by an ``__init__`` of the open class: a class
    call goes through ``type.__call__`` and the ``__init__`` slot first."""
    record = _new(_OpenStepLog)
    record.version = version
    record.from_state = from_state
    record.trigger = trigger
    record.to_state = to_state
    record.at = at
    record.detail = detail
    record.lease_token = None
    record.lease_owner = None
    # laid out as a StepLog (the same slots), it becomes one
    record.__class__ = StepLog  # type: ignore[assignment]
    return record  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Lease:
    """Who runs a call on a context, until when, under which fencing token.

    ``expires_at`` is in seconds since the epoch, on the clock of the engine
    that took it (the engine passes ``now`` to the store: stores never read a
    clock). ``token`` grows by one on every successful acquire of the context.
    """

    context_id: str
    owner: str
    token: int
    expires_at: float

    def expired(self, now: float) -> bool:
        return now >= self.expires_at


class _OpenLease:
    """Lease's slots, without its frozen ``__setattr__`` (see :func:`new_lease`)."""

    __slots__ = ("context_id", "expires_at", "owner", "token")
    context_id: str
    owner: str
    token: int
    expires_at: float


def new_lease(context_id: str, owner: str, token: int, expires_at: float) -> Lease:
    """``Lease(context_id, owner, token, expires_at)``, the same record, made
    with plain slot writes as :func:`step_log` makes its records: the engine
    makes one for every call on a context it keeps loaded (the lease its
    first commit takes), and a frozen dataclass's ``__init__`` sets each
    field through ``object.__setattr__``."""
    record = _new(_OpenLease)
    record.context_id = context_id
    record.owner = owner
    record.token = token
    record.expires_at = expires_at
    # laid out as a Lease (the same slots), it becomes one
    record.__class__ = Lease  # type: ignore[assignment]
    return record  # type: ignore[return-value]


@dataclass(slots=True)
class Commit:
    context_id: str
    expected_version: int
    version: int
    state: str
    updated_at: datetime
    progress: TurnProgress
    event_seq: int
    steps: list[StepLog] = field(default_factory=list)
    appended: list[tuple[str, MessageNode]] = field(default_factory=list)
    """(branch name, node), in order: the node is added to the pool and its id
    appended to that branch."""
    replaced: list[MessageNode] = field(default_factory=list)
    """Nodes already stored whose message changed (tool call decisions)."""
    branches: list[Branch] = field(default_factory=list)
    """Branches created or re-pointed (fork), stored whole."""
    active_branch: str | None = None
    config: ChatConfig | None = None
    lease_token: int | None = None
    """The fencing token of the writer's lease: when set, the commit is refused
    with :class:`~turnfsm.errors.LeaseLost` unless it is still the context's
    latest token (checked with the version, in the same transaction)."""
    take_lease: Lease | None = None
    """With ``lease_token`` equal to its token: the commit also takes this
    lease, in the same transaction. It is applied only if the context's stored
    lease has the token just before (``take_lease.token - 1``) and no other
    owner holds it (it was released, or its holder is ``take_lease.owner``);
    otherwise it is refused with :class:`~turnfsm.errors.LeaseLost` and
    nothing of it is stored. The lease is then stored as ``take_lease`` (and
    released at once when ``release_lease`` is set too). Only stores that
    declare :class:`LeasesInCommits` are given a commit with it set."""
    lease_owner: str | None = None
    """With ``lease_token``: the owner of the writer's lease. Stores that record
    fencing (SQLite, PostgreSQL) write the token and this owner on each step
    row of the commit (``StepLog.lease_token``, ``StepLog.lease_owner``)."""
    release_lease: bool = False
    """With ``lease_token``: once the commit's checks pass, release the lease
    under that token in the same transaction (as :meth:`Store.release_lease`
    would, after the commit). Only stores that declare
    :class:`LeasesInCommits` are given a commit with it set."""

    def apply_head(self, ctx: ChatContext) -> None:
        """Write what the commit sets of the context's head (version, state,
        time, progress, event seq, active branch, config) on a store's own
        copy ``ctx``; its messages, branches, steps and lease are the
        store's to apply."""
        ctx.version = self.version
        ctx.current_state = self.state
        ctx.updated_at = self.updated_at
        ctx.progress = self.progress
        ctx.event_seq = self.event_seq
        if self.active_branch is not None:
            ctx.active_branch_name = self.active_branch
        if self.config is not None:
            ctx.config = copy.deepcopy(self.config)


@runtime_checkable
class ContextStore(Protocol):
    """The contexts and their committed history: what every store keeps.

    A store states what it implements by naming the protocols as its bases
    (``class MyStore(Store, WorkQueue)``): a type checker then holds it to
    every method, and the engine tells what it can do with ``isinstance``.
    """

    async def create(self, context: ChatContext) -> None:
        """Store a new context (version as given); an existing id is an error."""
        ...

    async def load(self, context_id: str) -> ChatContext:
        """The context as last committed; :class:`ContextNotFound` if unknown."""
        ...

    async def commit(self, commit: Commit) -> None:
        """Apply one step atomically, or raise (VersionConflict, StoreError)."""
        ...

    async def list_ids(self) -> list[str]: ...

    async def list_contexts(self) -> list[ContextSummary]:
        """Every stored context, oldest first."""
        ...

    async def delete(self, context_id: str) -> None: ...

    async def steps(self, context_id: str) -> list[StepLog]:
        """Every committed transition of the context, in order."""
        ...

    async def aclose(self) -> None: ...

    async def load_messages(self, context_id: str, ids: Sequence[str]) -> list[MessageNode]:
        """The messages with these ids, in the order given (an id given twice
        comes twice), without loading the rest of the context.
        :class:`ContextNotFound` for an unknown context; :class:`StoreError`
        naming the first id the context does not hold."""
        ...


@runtime_checkable
class Leases(Protocol):
    """One owner per running turn: the context's lease and its fencing token
    (see the module's docstring). Every store of turnfsm has them; the engine
    takes a lease around every call it runs."""

    async def acquire_lease(
        self,
        context_id: str,
        owner: str,
        ttl: float,
        *,
        now: float,
        take_over: int | None = None,
    ) -> Lease | None:
        """Take the context's lease for ``ttl`` seconds from ``now``, with the next
        fencing token; ``None`` when another owner's lease has not expired at
        ``now`` (unless its token is ``take_over``: its owner is known to be
        gone). :class:`ContextNotFound` if the context is unknown."""
        ...

    async def renew_lease(self, lease: Lease, ttl: float, *, now: float) -> Lease:
        """Extend a held lease to ``now + ttl``; :class:`LeaseLost` if its token is
        no longer the context's (another owner took it over) or it was released."""
        ...

    async def release_lease(self, lease: Lease) -> None:
        """Give the lease up (the token stays, so a later acquire gets a larger
        one); does nothing when it is no longer held under that token."""
        ...

    async def lease(self, context_id: str) -> Lease | None:
        """The context's lease as stored (possibly expired), ``None`` when it has
        none or it was released."""
        ...


@runtime_checkable
class Store(ContextStore, Leases, Protocol):
    """What the engine needs of a store: its contexts (:class:`ContextStore`)
    and their leases (:class:`Leases`)."""


@runtime_checkable
class WorkQueue(Protocol):
    """A store that hands out work: the contexts left away from rest with no
    live lease, each to one claimant (a :class:`~turnfsm.engine.Worker`, an
    engine's ``recover``). An engine hands a turn to workers
    (``Engine.hand_off``) only on a store that is one."""

    async def claim_expired(
        self, owner: str, ttl: float, *, now: float, limit: int | None = 100
    ) -> list[Lease]:
        """Take the leases of up to ``limit`` (None: all) contexts that are away
        from rest (their state is not ``Idle``, ``AwaitingToolApproval`` or
        ``PermanentFailure``) and whose lease was released, expired at ``now``,
        or never taken, the longest waiting first: each with the next fencing
        token, for ``ttl`` seconds. Claimants at the same moment get disjoint
        sets."""
        ...


@runtime_checkable
class WorkDoorbell(Protocol):
    """A :class:`WorkQueue` that rings when work comes: a worker waits on it
    between claims instead of sleeping its poll interval out."""

    async def wait_for_work(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for a commit that hands a context off: True
        when one came, False when the time is up."""
        ...


@runtime_checkable
class ChildSummaries(Protocol):
    """A store that lists one context's children without the others
    (``Engine.children`` and the context tree read only these summaries:
    no child is loaded). Every store of turnfsm is one."""

    async def list_children(self, parent_id: str) -> list[ContextSummary]:
        """The summaries of the stored contexts whose ``parent_id`` is
        ``parent_id``, oldest first (as ``list_contexts`` orders them); an
        empty list for an unknown parent."""
        ...


class ChildrenOfSummaries:
    """:meth:`ChildSummaries.list_children` from ``list_contexts``, for a store
    whose summaries are read together anyway (the files store reads each
    context's ``metadata.json``): no context is loaded."""

    async def list_children(self: ContextStore, parent_id: str) -> list[ContextSummary]:
        return [s for s in await self.list_contexts() if s.parent_id == parent_id]


@runtime_checkable
class MessagePages(Protocol):
    """A store that reads a page of a branch's messages without the rest of the
    context (the files store: ``metadata.json`` and the page's message files).
    ``Engine.messages`` uses it for a context it has not loaded."""

    async def message_page(
        self, context_id: str, branch: str | None, offset: int, limit: int | None
    ) -> tuple[str, list[MessageNode]] | None:
        """The branch's name (the active branch when ``branch`` is None) and its
        messages from index ``offset``, at most ``limit`` (None: all the rest),
        as last committed; ``None`` when the context has no such branch.
        :class:`ContextNotFound` for an unknown context."""
        ...


@runtime_checkable
class ContextHeads(Protocol):
    """A store that reads a context's state and version without loading it (one
    row): what ``serve --turns workers`` looks at while a worker runs a turn it
    waits for (docs/workers.md)."""

    async def head(self, context_id: str) -> tuple[str, int]:
        """The context's ``current_state`` and ``version`` as last committed;
        :class:`ContextNotFound` for an unknown context."""
        ...


@runtime_checkable
class CommitsWithoutWaiting(Protocol):
    """A store whose :meth:`Store.commit` never waits (it holds everything in
    memory) declares its commit as a plain call too: ``commit_nowait(commit)``
    does what ``await commit(commit)`` does, and the engine calls it directly,
    without an await or a cancel shield around it. ``None`` means the store's
    commit must be awaited after all (a subclass whose ``commit`` does more)."""

    commit_nowait: Callable[[Commit], None] | None


@runtime_checkable
class LeasesInCommits(Protocol):
    """A store that honours ``Commit.take_lease`` and ``Commit.release_lease``:
    the commit and the lease's change are applied together (one transaction
    where the store has them), so a call's first commit can take its lease
    and its last commit end it. The engine sets them only for a store that
    declares ``leases_in_commits = True``; any other store gets the lease
    taken and released with :meth:`Store.acquire_lease` and
    :meth:`Store.release_lease`."""

    leases_in_commits: bool


def lease_is_held(
    holder: str | None,
    token: int,
    expires_at: float,
    *,
    owner: str,
    now: float,
    take_over: int | None,
) -> bool:
    """The rule every store's ``acquire_lease`` applies to the stored lease:
    it keeps ``owner`` out while another holder's lease has not expired,
    unless ``take_over`` names its token. A released lease (``holder`` None)
    and the owner's own lease hold no one out."""
    return holder is not None and holder != owner and now < expires_at and token != take_over


class TakesLeases:
    """``acquire_lease`` for a store that takes a lease in one step of its own,
    :meth:`_take_lease`: under its lock, or in one statement, the store reads
    the context's lease, keeps out whom :func:`lease_is_held` keeps out, and
    writes the lease asked for with the next fencing token. What is asked and
    what is given back are the same for every store, so they are said here."""

    async def acquire_lease(
        self,
        context_id: str,
        owner: str,
        ttl: float,
        *,
        now: float,
        take_over: int | None = None,
    ) -> Lease | None:
        """As :meth:`Leases.acquire_lease` says."""
        wanted = Lease(context_id, owner, 0, now + ttl)
        token = await self._take_lease(wanted, now, take_over)
        return None if token is None else Lease(context_id, owner, token, wanted.expires_at)

    async def _take_lease(self, wanted: Lease, now: float, take_over: int | None) -> int | None:
        """Write ``wanted`` (its token is the store's to give: the context's
        next one) unless the stored lease is held against it; the token
        written, ``None`` when held. :class:`ContextNotFound` if the context
        is unknown."""
        raise NotImplementedError


def in_order(
    context_id: str, ids: Sequence[str], found: dict[str, MessageNode]
) -> list[MessageNode]:
    """``load_messages``' answer: the messages found, in the order asked (an
    id asked twice comes twice); a StoreError naming the first one missing."""
    out = []
    for mid in ids:
        node = found.get(mid)
        if node is None:
            raise StoreError(f"context {context_id!r} has no message {mid!r}")
        out.append(node)
    return out
