"""Mermaid ``stateDiagram-v2`` text of the declared machine, optionally with a run path.

Pure: the same table (and path) gives the same text. Lines, in order:
``stateDiagram-v2``, ``%%`` comments, one ``state "label" as Name`` per state
(the label says initial / resting / failure), ``[*] --> Idle`` (Mermaid's
initial marker), one ``Source --> Dest : trigger`` per edge of the table (one
per source of a multi-source row), then ``classDef`` / ``class`` lines that
style resting and failure states.

Mermaid cannot colour single edges of a state diagram, so the overlay marks
the transitions taken in their labels (``✔ trigger xN``; ``✖`` into a failure,
``⟲`` a retry) and styles the states (visited, not visited, failed, current).
"""

from __future__ import annotations

from collections.abc import Mapping

from ._graph import EdgeKind, Node, declared_edges, declared_nodes
from ._path import RunPath, spent_text

__all__ = ["mermaid_state_diagram"]

_IND = "    "

_CLASSES = {
    "resting": "fill:#e3f2fd,stroke:#1565c0,stroke-width:3px",
    "failure": "fill:#ffe0b2,stroke:#ef6c00,stroke-width:2px",
    "restingFailure": "fill:#ffcdd2,stroke:#c62828,stroke-width:3px",
}
_PATH_CLASSES = {
    "visited": "fill:#e3f2fd,stroke:#1565c0,stroke-width:2px",
    "notVisited": "fill:#ffffff,stroke:#cfd8dc,color:#90a4ae",
    "failed": "fill:#ffcdd2,stroke:#c62828,stroke-width:3px",
    "current": "fill:#fff59d,stroke:#f57f17,stroke-width:4px",
}
_MARK = {
    EdgeKind.NORMAL: "✔",
    EdgeKind.CANCEL: "✔",
    EdgeKind.FAILURE: "✖",
    EdgeKind.RETRY: "⟲",
}


def _label(text: str) -> str:
    """Text safe inside a Mermaid double-quoted state label or after ``:``."""
    return text.replace('"', "'").replace("\n", " ").replace(";", ",")


def _declared_class(node: Node) -> str | None:
    if node.resting and node.failure:
        return "restingFailure"
    if node.failure:
        return "failure"
    if node.resting:
        return "resting"
    return None


def mermaid_state_diagram(
    path: RunPath | None = None, *, times: bool = False, title: str = ""
) -> str:
    """The ``stateDiagram-v2`` text; with ``path``, that run overlaid (see the module doc)."""
    nodes = declared_nodes()
    lines = ["stateDiagram-v2", *_heading(path, title)]
    classes: dict[str, list[str]] = {}
    spent = path.time_in_states() if path is not None and times else {}
    visits = path.visits() if path is not None else None
    for node in nodes:
        name = str(node.state)
        if path is not None and visits is not None:
            label, cls = _visited(node, path, visits[name], spent)
        else:
            label, cls = _named(node), _declared_class(node)
        lines.append(f'{_IND}state "{_label(label)}" as {name}')
        if cls is not None:
            classes.setdefault(cls, []).append(name)
    lines.append(f"{_IND}[*] --> {_initial(nodes)}")
    lines += _edges(path)
    styles = _CLASSES if path is None else _PATH_CLASSES
    for cls_name, style in styles.items():
        lines.append(f"{_IND}classDef {cls_name} {style}")
    for cls_name in styles:
        if cls_name in classes:
            lines.append(f"{_IND}class {', '.join(classes[cls_name])} {cls_name}")
    return "\n".join(lines) + "\n"


def _heading(path: RunPath | None, title: str) -> list[str]:
    """The comments that open the text: what it is, and how to read a run's labels."""
    if path is None:
        return [
            f"{_IND}%% turnfsm: the declared machine, generated from turnfsm.states.TRANSITIONS.",
            f"{_IND}%% Do not edit: run `turnfsm diagram --regenerate`.",
        ]
    return [
        f"{_IND}%% turnfsm run path: {_label(title or 'one conversation')}",
        f"{_IND}%% labels: ✔ taken (xN: how often), ✖ into a failure, ⟲ retry, "
        "styles: current, visited, failed, not visited",
    ]


def _named(node: Node) -> str:
    """A state's name with its tags."""
    name = str(node.state)
    words = ", ".join(node.tags)
    return f"{name} ({words})" if words else name


def _visited(
    node: Node, path: RunPath, n: int, spent: Mapping[str, float]
) -> tuple[str, str | None]:
    """A state's label and style on a run's path: how often it was visited, for
    how long, whether it is the current one."""
    name = str(node.state)
    label = _named(node)
    if n:
        label += f" · visited {n}x"
        if name in spent:
            label += f", {spent_text(spent[name])}"
    if name == path.current:
        return label + " · ◉ current", "current"
    if n and node.failure:
        return label, "failed"
    return label, "visited" if n else "notVisited"


def _edges(path: RunPath | None) -> list[str]:
    """The declared transitions (on a run: marked with how often each was
    taken), then the transitions a run took that are not declared."""
    counts = path.edge_counts() if path is not None else None
    lines = []
    for edge in declared_edges():
        label = str(edge.trigger)
        if counts is not None and counts[edge.key]:
            label = f"{_MARK[edge.kind]} {label} x{counts[edge.key]}"
        lines.append(f"{_IND}{edge.source} --> {edge.dest} : {label}")
    if path is None:
        return lines
    extra: dict[tuple[str, str, str], int] = {}
    for step in path.undeclared():
        key = (step.from_state, step.trigger, step.to_state)
        extra[key] = extra.get(key, 0) + 1
    for (src, trig, dst), n in extra.items():
        arrow = f"{_ident(src)} --> {_ident(dst)}"
        lines.append(f"{_IND}{arrow} : ‼ {_label(trig)} x{n} (not declared)")
    return lines


def _initial(nodes: tuple[Node, ...]) -> str:
    return next(str(n.state) for n in nodes if n.initial)


def _ident(name: str) -> str:
    """A state name from a log, made a Mermaid identifier (only a forged log needs this)."""
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned or "_"
