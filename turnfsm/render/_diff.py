"""Where two runs of the same script part ways (``turnfsm diagram --diff A B``)."""

from __future__ import annotations

from dataclasses import dataclass

from ._path import RunPath

__all__ = ["PathDiff", "diff_paths"]


@dataclass(frozen=True, slots=True)
class PathDiff:
    """The comparison of two traces, entry by entry.

    Entry 0 is the initial state; entry ``i`` is the state the ``i``-th step
    entered, with the trigger that entered it. ``index`` is the first entry that
    differs (None when the traces are the same); ``a`` / ``b`` are the states
    there (None when that trace has already ended); ``common_prefix`` is the
    number of equal entries before it.
    """

    length_a: int
    length_b: int
    common_prefix: int
    index: int | None = None
    a: str | None = None
    b: str | None = None
    a_trigger: str | None = None
    b_trigger: str | None = None

    @property
    def same(self) -> bool:
        return self.index is None

    def report(self, name_a: str = "A", name_b: str = "B") -> str:
        if self.same:
            return f"same: both traces have the same {self.length_a} states"
        lines = [f"traces differ at index {self.index}:"]
        for name, state, trig in (
            (name_a, self.a, self.a_trigger),
            (name_b, self.b, self.b_trigger),
        ):
            if state is None:
                lines.append(f"  {name}: (ended)")
            else:
                via = f" (via {trig})" if trig else ""
                lines.append(f"  {name}: {state}{via}")
        lines.append(
            f"common prefix: {self.common_prefix} states "
            f"({name_a} has {self.length_a}, {name_b} has {self.length_b})"
        )
        return "\n".join(lines)


def _entries(path: RunPath) -> list[tuple[str, str | None]]:
    first = path.states[0]
    return [(first, None), *((s.to_state, s.trigger) for s in path.steps)]


def diff_paths(a: RunPath, b: RunPath) -> PathDiff:
    """Compare two runs' traces: states and the triggers that entered them."""
    ea, eb = _entries(a), _entries(b)
    i = 0
    while i < len(ea) and i < len(eb) and ea[i] == eb[i]:
        i += 1
    if i == len(ea) == len(eb):
        return PathDiff(len(ea), len(eb), i)
    sa, ta = ea[i] if i < len(ea) else (None, None)
    sb, tb = eb[i] if i < len(eb) else (None, None)
    return PathDiff(len(ea), len(eb), i, i, sa, sb, ta, tb)
