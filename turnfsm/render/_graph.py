"""The declared machine as a graph, read from the table and nothing else.

:func:`declared_nodes` gives every :class:`~turnfsm.states.State` with what a
diagram shows of it (initial, resting, failure, its description);
:func:`declared_edges` gives one :class:`Edge` per *source* of each row of
:data:`~turnfsm.states.TRANSITIONS` (the ``cancel`` row, with seven sources,
is seven edges), in table order. Every renderer of this package draws these,
so the diagrams cannot disagree with each other or with the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..states import (
    INITIAL,
    RESTING,
    STATE_DESCRIPTIONS,
    STATE_EFFECTS,
    TRANSITIONS,
    State,
    Trigger,
)

__all__ = [
    "FAILURE_STATES",
    "Edge",
    "EdgeKind",
    "Node",
    "declared_edges",
    "declared_nodes",
]

FAILURE_STATES: frozenset[State] = frozenset({State.TRANSIENT_FAILURE, State.PERMANENT_FAILURE})
"""The states a diagram colours as failures (their names say so)."""


class EdgeKind(StrEnum):
    """How a diagram draws an edge."""

    NORMAL = "normal"
    FAILURE = "failure"
    """Into a failure state."""
    RETRY = "retry"
    """``retry``: out of a failure state, back to the LLM."""
    CANCEL = "cancel"
    """``cancel``: drawn light, it leaves almost every state."""


@dataclass(frozen=True, slots=True)
class Node:
    state: State
    description: str
    initial: bool
    resting: bool
    failure: bool
    effect: str | None
    """The work declared on entering the state (``STATE_EFFECTS``), if any."""

    @property
    def tags(self) -> tuple[str, ...]:
        """``initial``, ``resting``, ``failure``: the words a diagram writes under the name."""
        return tuple(
            word
            for word, on in (
                ("initial", self.initial),
                ("resting", self.resting),
                ("failure", self.failure),
            )
            if on
        )


@dataclass(frozen=True, slots=True)
class Edge:
    source: State
    trigger: Trigger
    dest: State
    meaning: str

    @property
    def key(self) -> tuple[str, str]:
        """(source, trigger): unique in the table, so it names the edge."""
        return (str(self.source), str(self.trigger))

    @property
    def kind(self) -> EdgeKind:
        if self.trigger is Trigger.CANCEL:
            return EdgeKind.CANCEL
        if self.trigger is Trigger.RETRY:
            return EdgeKind.RETRY
        if self.dest in FAILURE_STATES:
            return EdgeKind.FAILURE
        return EdgeKind.NORMAL


def declared_nodes() -> tuple[Node, ...]:
    """Every state, in the order of the ``State`` enum."""
    return tuple(
        Node(
            state=s,
            description=STATE_DESCRIPTIONS[s],
            initial=s is INITIAL,
            resting=s in RESTING,
            failure=s in FAILURE_STATES,
            effect=str(STATE_EFFECTS[s]) if s in STATE_EFFECTS else None,
        )
        for s in State
    )


def declared_edges() -> tuple[Edge, ...]:
    """One edge per source of each table row, in table order."""
    return tuple(
        Edge(source, row.trigger, row.dest, row.meaning)
        for row in TRANSITIONS
        for source in row.sources
    )
