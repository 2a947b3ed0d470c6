"""The path one conversation took: its steps, and what an overlay draws of them.

A :class:`RunPath` is built from any of the three records of a conversation:

- the store's audit steps (:func:`path_from_steps`, given ``await store.steps(cid)``);
- a replay ``--trace-out`` file (:func:`path_from_trace_out`): its ``StateChanged``
  events, which carry the trigger and a timestamp;
- an audit log written by ``turnfsm audit export`` (:func:`path_from_audit_lines`).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from ..errors import RenderError
from ..model._json import MAX_DOCUMENT_DEPTH, loads_json
from ..states import CHANGES, INITIAL, TRANSITIONS, State, Trigger, next_state

__all__ = [
    "PathStep",
    "RunPath",
    "StepLike",
    "path_from_audit_lines",
    "path_from_steps",
    "path_from_trace_out",
    "spent_text",
]


class StepLike(Protocol):
    """What :class:`~turnfsm.storage.StepLog` offers (the store is not imported here)."""

    @property
    def version(self) -> int: ...
    @property
    def from_state(self) -> str: ...
    @property
    def trigger(self) -> str: ...
    @property
    def to_state(self) -> str: ...
    @property
    def at(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class PathStep:
    """One committed transition. ``version`` is the store commit that holds it
    (several steps can share a commit); ``None`` when the source has none."""

    from_state: str
    trigger: str
    to_state: str
    at: datetime | None = None
    version: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.from_state, self.trigger)

    @property
    def declared(self) -> bool:
        try:
            dest = next_state(State(self.from_state), Trigger(self.trigger))
        except ValueError:
            return False
        return dest is not None and str(dest) == self.to_state


@dataclass(frozen=True, slots=True)
class RunPath:
    steps: tuple[PathStep, ...]
    start: datetime | None = None
    """When the initial state was entered (the context's creation), if known."""

    @property
    def states(self) -> list[str]:
        """The trace: the initial state, then the state each step entered."""
        first = self.steps[0].from_state if self.steps else str(INITIAL)
        return [first, *(s.to_state for s in self.steps)]

    @property
    def current(self) -> str:
        return self.states[-1]

    def edge_counts(self) -> Counter[tuple[str, str]]:
        """How often each (source, trigger) was taken."""
        return Counter(s.key for s in self.steps)

    def visits(self) -> Counter[str]:
        return Counter(self.states)

    def undeclared(self) -> list[PathStep]:
        """Steps the table does not allow (none in a log the engine wrote)."""
        return [s for s in self.steps if not s.declared]

    def time_in_states(self) -> dict[str, float]:
        """Seconds spent in each state, over the visits that ended.

        A visit runs from the step that entered the state (or ``start`` for the
        initial state) to the step that left it; the visit to the current state
        has not ended and is not counted. Steps without a time count nothing.
        """
        spent: dict[str, float] = {}
        entered = self.start
        for i, step in enumerate(self.steps):
            state = self.steps[i - 1].to_state if i else step.from_state
            if entered is not None and step.at is not None:
                spent[state] = spent.get(state, 0.0) + (step.at - entered).total_seconds()
            entered = step.at
        return spent


def spent_text(seconds: float) -> str:
    """Time spent in a state, as the diagrams label it: ms, s or min."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def path_from_steps(steps: Iterable[StepLike], *, start: datetime | None = None) -> RunPath:
    """The path of a stored context, from ``await store.steps(context_id)``.

    Change records (config updates, branch changes: :data:`~turnfsm.states.CHANGES`)
    are not transitions and are left out."""
    return RunPath(
        tuple(
            PathStep(s.from_state, s.trigger, s.to_state, s.at, s.version)
            for s in steps
            if s.trigger not in CHANGES
        ),
        start,
    )


def _unique_trigger(source: str, dest: str) -> str:
    found = {str(row.trigger) for row in TRANSITIONS if dest == row.dest and source in row.sources}
    if len(found) != 1:
        raise RenderError(
            f"the trace has no StateChanged events, and the step {source} -> {dest} "
            f"cannot be named from the table ({len(found)} triggers fit)"
        )
    return found.pop()


def path_from_trace_out(data: Mapping[str, Any]) -> RunPath:
    """The path of a replay ``--trace-out`` file (decoded JSON).

    The ``StateChanged`` events give triggers and times. A file whose events
    were left out falls back on ``trace``, naming each step by the one
    trigger the table has between its two states.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("trace"), list):
        raise RenderError("not a replay --trace-out file: it has no 'trace' list")
    events = data.get("events") or []
    if not isinstance(events, list):
        raise RenderError("not a replay --trace-out file: 'events' is not a list")
    changes = [e for e in events if isinstance(e, Mapping) and e.get("kind") == "StateChanged"]
    if changes:
        steps = []
        for e in sorted(changes, key=lambda e: int(e.get("seq", 0))):
            try:
                at = datetime.fromtimestamp(float(e["timestamp"]), UTC)
                steps.append(
                    PathStep(str(e["from_state"]), str(e["trigger"]), str(e["to_state"]), at)
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise RenderError(f"a StateChanged event is malformed: {exc}") from None
        return RunPath(tuple(steps))
    trace = [str(s) for s in data["trace"]]
    return RunPath(
        tuple(PathStep(a, _unique_trigger(a, b), b) for a, b in itertools.pairwise(trace))
    )


def path_from_audit_lines(lines: Sequence[str]) -> RunPath:
    """The path of an audit log (JSON Lines from ``turnfsm audit export``).

    Lines are taken in file order, as written; ``turnfsm audit verify`` is what
    checks them. Change records (not transitions) are left out.
    """
    steps = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = loads_json(line, MAX_DOCUMENT_DEPTH)
            if rec["trigger"] in CHANGES:
                continue
            at = datetime.fromisoformat(rec["timestamp"]) if rec.get("timestamp") else None
            steps.append(
                PathStep(
                    str(rec["from"]), str(rec["trigger"]), str(rec["to"]), at, rec.get("version")
                )
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RenderError(f"line {n} is not an audit record: {exc}") from None
    return RunPath(tuple(steps))
