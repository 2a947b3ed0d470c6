"""The Store interface: what the engine needs from persistence.

A context is created once and then changed only by :class:`Commit` records,
one per committed step: the transitions taken, the messages appended (in
order, per branch) or replaced, and the context's small fields. A commit names
the version it expects; a store that holds another version refuses it with
:class:`~turnfsm.errors.VersionConflict` and stores nothing of it. Appends
are per message, so the cost of a commit does not grow with history.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from ..model import Branch, ChatConfig, ChatContext, MessageNode, TurnProgress

__all__ = ["Commit", "ContextSummary", "StepLog", "Store"]


@dataclass(frozen=True, slots=True)
class ContextSummary:
    """What ``list_contexts`` tells of each stored context, without loading it."""

    id: str
    state: str
    version: int
    updated_at: datetime
    parent_id: str | None = None


@dataclass(frozen=True, slots=True)
class StepLog:
    """One committed transition, as the audit trail keeps it."""

    version: int
    from_state: str
    trigger: str
    to_state: str
    at: datetime


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


@runtime_checkable
class Store(Protocol):
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
