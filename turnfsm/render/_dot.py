"""Graphviz DOT text of the declared machine, optionally with a run path overlaid.

Pure: the same table (and path) gives the same bytes. Ids are stable so that
the SVG Graphviz makes from it can be checked by machine: a state is
``s_<State>``, an edge ``e_<source>__<trigger>`` (a (source, trigger) pair is
unique in the table), a step the table does not declare ``x_<source>__<trigger>``.

The second line is ``comment="... dot sha256:<hex>"``: the digest of every
other line. Graphviz copies a graph's comment into the SVG it writes, so an
SVG can be traced back to the exact DOT that produced it
(:func:`dot_digest`, :func:`svg_digest`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from ._graph import Edge, EdgeKind, Node, declared_edges, declared_nodes
from ._path import RunPath, spent_text

__all__ = ["dot_digest", "dot_source", "svg_digest"]

_FONT = "Helvetica"
_DIGEST_LINE = re.compile(r'^  comment="[^"]*dot sha256:([0-9a-f]{64})";$', re.M)
_SVG_DIGEST = re.compile(r"<!-- [^>]*?dot sha256:([0-9a-f]{64}) -->")

# How each kind of edge is drawn on the declared diagram: (colour, font colour, style).
_EDGE_STYLE: dict[EdgeKind, tuple[str, str, str]] = {
    EdgeKind.NORMAL: ("#37474f", "#263238", "solid"),
    EdgeKind.FAILURE: ("#c62828", "#b71c1c", "solid"),
    EdgeKind.RETRY: ("#ef6c00", "#e65100", "solid"),
    EdgeKind.CANCEL: ("#9e9e9e", "#757575", "dashed"),
}
_RESTING_FILL = "#e3f2fd"
_RESTING_LINE = "#1565c0"
_FAILURE_FILL = {"TransientFailure": "#ffe0b2", "PermanentFailure": "#ffcdd2"}
_FAILURE_LINE = {"TransientFailure": "#ef6c00", "PermanentFailure": "#c62828"}
_TAKEN = "#1565c0"
_NOT_TAKEN = "#cfd8dc"
_NOT_TAKEN_TEXT = "#b0bec5"
_CURRENT_FILL = "#fff59d"
_UNDECLARED = "#d500f9"

_LEGEND = (
    "turnfsm: the declared machine (generated from turnfsm.states.TRANSITIONS)\n"
    "double border: resting state (the engine waits for the outside)  |  "
    "red: failure states and the edges into them  |  orange: retry  |  "
    "dashed grey: cancel"
)
_LEGEND_PATH = (
    "{title}\n"
    "bold: transitions taken, with their counts  |  yellow: current state  |  "
    "grey: not visited / not taken  |  red: failures  |  orange: retries"
)


def _q(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _attrs(pairs: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{k}={v}" for k, v in pairs)


def _node_line(
    node: Node,
    *,
    path: RunPath | None,
    visits: int,
    spent: float | None,
) -> str:
    name = str(node.state)
    small = [" · ".join(node.tags)] if node.tags else []
    attrs: list[tuple[str, str]] = [("id", _q(f"s_{name}"))]
    fill, line, font = "white", "#37474f", "#263238"
    if node.resting:
        fill, line = _RESTING_FILL, _RESTING_LINE
        attrs.append(("peripheries", "2"))
    if node.failure:
        fill, line = _FAILURE_FILL[name], _FAILURE_LINE[name]
    penwidth = "1.5"
    if path is not None:
        if visits:
            detail = f"visited {visits}x"
            if spent is not None:
                detail += f", {spent_text(spent)}"
            small.append(detail)
        else:
            fill, line, font = "white", _NOT_TAKEN, _NOT_TAKEN_TEXT
            small.append("not visited")
        if name == path.current:
            fill, penwidth = _CURRENT_FILL, "3"
            small.append("◉ current state")
    label = f"<<B>{_html(name)}</B>" + "".join(
        f'<BR/><FONT POINT-SIZE="9">{_html(s)}</FONT>' for s in small
    )
    attrs += [
        ("label", label + ">"),
        ("tooltip", _q(node.description)),
        ("fillcolor", _q(fill)),
        ("color", _q(line)),
        ("fontcolor", _q(font)),
        ("penwidth", penwidth),
    ]
    return f"  {_q(name)} [{_attrs(attrs)}];"


def _edge_line(edge: Edge, *, path: RunPath | None, count: int) -> str:
    colour, font, style = _EDGE_STYLE[edge.kind]
    label = str(edge.trigger)
    penwidth = "1.2"
    if path is not None:
        if count:
            if edge.kind is EdgeKind.NORMAL:
                colour = font = _TAKEN
            label = f"{label} x{count}"
            penwidth = f"{2.0 + 0.5 * min(count, 6):.1f}"
            style = "bold" if style == "solid" else style
        else:
            colour, font = _NOT_TAKEN, _NOT_TAKEN_TEXT
    attrs: list[tuple[str, str]] = [
        ("id", _q(f"e_{edge.source}__{edge.trigger}")),
        ("label", _q(label)),
        ("tooltip", _q(f"{edge.trigger}: {edge.meaning}")),
        ("color", _q(colour)),
        ("fontcolor", _q(font)),
        ("style", style),
        ("penwidth", penwidth),
    ]
    return f"  {_q(str(edge.source))} -> {_q(str(edge.dest))} [{_attrs(attrs)}];"


def dot_source(path: RunPath | None = None, *, times: bool = False, title: str = "") -> str:
    """The DOT text of the declared machine; with ``path``, that run overlaid.

    The overlay draws the transitions taken bold with their counts (failures
    red, retries orange), greys what was not visited or taken, fills the
    current state yellow, and with ``times`` writes the time spent in each
    state (:meth:`RunPath.time_in_states`). A step the table does not declare
    (only a damaged or forged log has one) is drawn as an extra magenta edge.
    """
    counts = path.edge_counts() if path is not None else None
    visits = path.visits() if path is not None else None
    spent = path.time_in_states() if path is not None and times else {}
    legend = _LEGEND if path is None else _LEGEND_PATH.format(title=title or "run path")
    body = [
        "digraph turnfsm {",
        f"  graph [rankdir=TB, nodesep=0.5, ranksep=0.55, fontname={_q(_FONT)}, "
        f"fontsize=10, labelloc=b, label={_q(legend)}];",
        f'  node [shape=box, style="rounded,filled", fontname={_q(_FONT)}, fontsize=12, '
        'margin="0.15,0.06"];',
        f"  edge [fontname={_q(_FONT)}, fontsize=9, arrowsize=0.7];",
    ]
    declared_states = set()
    for node in declared_nodes():
        declared_states.add(str(node.state))
        body.append(
            _node_line(
                node,
                path=path,
                visits=visits[str(node.state)] if visits is not None else 0,
                spent=spent.get(str(node.state)),
            )
        )
    for edge in declared_edges():
        body.append(_edge_line(edge, path=path, count=counts[edge.key] if counts else 0))
    if path is not None:
        extra = path.undeclared()
        for name in sorted({n for s in extra for n in (s.from_state, s.to_state)}):
            if name not in declared_states:
                body.append(
                    f"  {_q(name)} [id={_q(f's_{name}')}, label={_q(name + ' (not a state)')}, "
                    f"color={_q(_UNDECLARED)}, fillcolor=white];"
                )
        seen: dict[tuple[str, str, str], int] = {}
        for step in extra:
            key = (step.from_state, step.trigger, step.to_state)
            seen[key] = seen.get(key, 0) + 1
        for (src, trig, dst), n in seen.items():
            body.append(
                f"  {_q(src)} -> {_q(dst)} [id={_q(f'x_{src}__{trig}')}, "
                f"label={_q(f'{trig} x{n} (not declared)')}, color={_q(_UNDECLARED)}, "
                f"fontcolor={_q(_UNDECLARED)}, style=bold, penwidth=2.5];"
            )
    body.append("}")
    digest = _digest(body)
    return "\n".join([body[0], f'  comment="turnfsm dot sha256:{digest}";', *body[1:]]) + "\n"


def _digest(lines: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def dot_digest(dot: str) -> str:
    """The digest written in the DOT's comment line, checked against the rest of it.

    Raises ValueError when the DOT has no digest line or the digest does not
    match its other lines (it was edited by hand).
    """
    match = _DIGEST_LINE.search(dot)
    if match is None:
        raise ValueError("the DOT text has no 'dot sha256' comment line")
    lines = dot.rstrip("\n").split("\n")
    rest = [ln for ln in lines if not _DIGEST_LINE.fullmatch(ln)]
    if _digest(rest) != match.group(1):
        raise ValueError("the DOT text does not match its own digest (edited by hand?)")
    return match.group(1)


def svg_digest(svg: str) -> str | None:
    """The DOT digest Graphviz copied into an SVG (None if there is none)."""
    match = _SVG_DIGEST.search(svg)
    return match.group(1) if match else None
