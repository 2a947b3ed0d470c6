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

from ._graph import EdgeKind, Node, declared_edges, declared_nodes
from ._path import RunPath

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


def _seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


def mermaid_state_diagram(
    path: RunPath | None = None, *, times: bool = False, title: str = ""
) -> str:
    """The ``stateDiagram-v2`` text; with ``path``, that run overlaid (see the module doc)."""
    nodes = declared_nodes()
    edges = declared_edges()
    counts = path.edge_counts() if path is not None else None
    visits = path.visits() if path is not None else None
    spent = path.time_in_states() if path is not None and times else {}
    lines = ["stateDiagram-v2"]
    if path is None:
        lines += [
            f"{_IND}%% turnfsm: the declared machine, generated from turnfsm.states.TRANSITIONS.",
            f"{_IND}%% Do not edit: run `turnfsm diagram --regenerate`.",
        ]
    else:
        lines += [
            f"{_IND}%% turnfsm run path: {_label(title or 'one conversation')}",
            f"{_IND}%% labels: ✔ taken (xN: how often), ✖ into a failure, ⟲ retry, "
            "styles: current, visited, failed, not visited",
        ]
    classes: dict[str, list[str]] = {}
    for node in nodes:
        name = str(node.state)
        words = ", ".join(node.tags)
        label = f"{name} ({words})" if words else name
        if path is not None and visits is not None:
            n = visits[name]
            if n:
                label += f" · visited {n}x"
                if name in spent:
                    label += f", {_seconds(spent[name])}"
            if name == path.current:
                label += " · ◉ current"
                cls: str | None = "current"
            elif n and node.failure:
                cls = "failed"
            else:
                cls = "visited" if n else "notVisited"
        else:
            cls = _declared_class(node)
        lines.append(f'{_IND}state "{_label(label)}" as {name}')
        if cls is not None:
            classes.setdefault(cls, []).append(name)
    lines.append(f"{_IND}[*] --> {_initial(nodes)}")
    for edge in edges:
        label = str(edge.trigger)
        if counts is not None and counts[edge.key]:
            label = f"{_MARK[edge.kind]} {label} x{counts[edge.key]}"
        lines.append(f"{_IND}{edge.source} --> {edge.dest} : {label}")
    if path is not None:
        extra: dict[tuple[str, str, str], int] = {}
        for step in path.undeclared():
            key = (step.from_state, step.trigger, step.to_state)
            extra[key] = extra.get(key, 0) + 1
        for (src, trig, dst), n in extra.items():
            lines.append(
                f"{_IND}{_ident(src)} --> {_ident(dst)} : ‼ {_label(trig)} x{n} (not declared)"
            )
    styles = _CLASSES if path is None else _PATH_CLASSES
    for cls_name, style in styles.items():
        lines.append(f"{_IND}classDef {cls_name} {style}")
    for cls_name in styles:
        if cls_name in classes:
            lines.append(f"{_IND}class {', '.join(classes[cls_name])} {cls_name}")
    return "\n".join(lines) + "\n"


def _initial(nodes: tuple[Node, ...]) -> str:
    return next(str(n.state) for n in nodes if n.initial)


def _ident(name: str) -> str:
    """A state name from a log, made a Mermaid identifier (only a forged log needs this)."""
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned or "_"
