"""Diagrams of the declared machine: every state and edge of the table, and nothing else.

Each format is parsed (Mermaid lines, DOT statements, SVG ``<g class="node">`` /
``<g class="edge">`` elements), never eyeballed.

The committed ``diagrams/`` files are checked against the table:

- ``fsm.mmd`` and ``fsm.dot`` byte for byte: they are pure text from the table;
- ``fsm.svg`` is not compared byte for byte, because Graphviz's coordinates
  depend on its version and the fonts installed, and CI's Graphviz need not be
  the one that drew it. Instead the SVG is parsed (every state and edge, with
  its trigger label, and nothing else) and the DOT digest Graphviz copied into
  it from the graph's ``comment`` must equal the digest of the DOT the table
  produces now: any change to the table or to the drawing code changes that
  DOT, so a stale SVG fails even on another Graphviz;
- ``fsm.png`` carries the same digest in a PNG ``tEXt`` chunk.
"""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

import pytest

from turnfsm.errors import TurnFSMError
from turnfsm.render import (
    FAILURE_STATES,
    GENERATED,
    PNG_DIGEST_KEY,
    RenderError,
    declared_edges,
    dot_digest,
    dot_source,
    find_dot,
    generated_texts,
    mermaid_state_diagram,
    png_text,
    render_png,
    render_svg,
    svg_digest,
)
from turnfsm.states import INITIAL, RESTING, TRANSITIONS, State, Trigger

from ._parse import Edge, parse_dot, parse_mermaid_state, parse_svg
from ._runs import ROOT, require_dot

DIAGRAMS = ROOT / "diagrams"
ALL_STATES = {str(s) for s in State}


def table_edges() -> Counter[Edge]:
    return Counter(
        (str(src), str(row.trigger), str(row.dest)) for row in TRANSITIONS for src in row.sources
    )


def test_the_table_has_multi_source_rows() -> None:
    # what "one edge per source" is about: cancel leaves 7 states, user_message 3
    edges = table_edges()
    assert sum(n for (_, t, _), n in edges.items() if t == "cancel") == 7
    assert sum(n for (_, t, _), n in edges.items() if t == "user_message") == 3
    assert len(declared_edges()) == sum(edges.values()) == 34


# ---------------------------------------------------------------------- Mermaid


def test_mermaid_has_every_state_and_edge_and_nothing_else() -> None:
    d = parse_mermaid_state(mermaid_state_diagram())
    assert d.states == ALL_STATES
    assert d.edges == table_edges()
    assert d.initial == str(INITIAL)  # Mermaid's [*] marker, the one pseudo-state
    every_named = {s for e in d.edges for s in (e[0], e[2])} | {
        s for members in d.classes.values() for s in members
    }
    assert every_named <= ALL_STATES


def test_mermaid_labels_edges_with_triggers_and_marks_resting_and_failure() -> None:
    d = parse_mermaid_state(mermaid_state_diagram())
    for (src, trig), label in d.edge_labels.items():
        assert label == trig, (src, trig)
    resting = d.classes["resting"] | d.classes["restingFailure"]
    failure = d.classes["failure"] | d.classes["restingFailure"]
    assert resting == {str(s) for s in RESTING}
    assert failure == {str(s) for s in FAILURE_STATES}
    for s in State:
        assert d.labels[s].startswith(str(s))
        assert ("resting" in d.labels[s]) == (s in RESTING)
        assert ("failure" in d.labels[s]) == (s in FAILURE_STATES)


# ---------------------------------------------------------------------- DOT


def test_dot_has_every_state_and_edge_and_nothing_else() -> None:
    d = parse_dot(dot_source())
    assert d.states == ALL_STATES
    assert d.edges == table_edges()


def test_dot_styles_resting_failure_and_edge_kinds() -> None:
    d = parse_dot(dot_source())
    for s in State:
        attrs = d.attrs[str(s)]
        assert ("peripheries=2" in attrs) == (s in RESTING), s
        assert (">failure<" in attrs or "· failure<" in attrs) == (s in FAILURE_STATES), s
        assert ('fillcolor="white"' not in attrs) == (s in RESTING or s in FAILURE_STATES), s
    for src, trig, dst in d.edges:
        attrs = d.attrs[f"{src}/{trig}"]
        assert d.edge_labels[(src, trig)] == trig
        if trig == Trigger.CANCEL:
            assert "style=dashed" in attrs
        elif trig == Trigger.RETRY:
            assert 'color="#ef6c00"' in attrs
        elif dst in {str(s) for s in FAILURE_STATES}:
            assert 'color="#c62828"' in attrs
        else:
            assert 'color="#37474f"' in attrs


def test_dot_tooltips_carry_the_table_descriptions() -> None:
    text = dot_source()
    for row in TRANSITIONS:
        assert row.meaning.replace('"', '\\"') in text


def test_dot_digest_covers_every_other_line() -> None:
    text = dot_source()
    digest = dot_digest(text)
    assert f"dot sha256:{digest}" in text.split("\n")[1]
    edited = text.replace('label="give_up"', 'label="give up"')
    with pytest.raises(ValueError, match="does not match"):
        dot_digest(edited)
    with pytest.raises(ValueError, match="no 'dot sha256'"):
        dot_digest("digraph x {}\n")


def test_text_formats_are_deterministic() -> None:
    assert mermaid_state_diagram() == mermaid_state_diagram()
    assert dot_source() == dot_source()
    assert generated_texts() == generated_texts()


# ---------------------------------------------------------------------- SVG and PNG


def test_svg_has_every_state_and_edge_and_nothing_else() -> None:
    require_dot()
    svg = render_svg(dot_source())
    d = parse_svg(svg)
    assert d.states == ALL_STATES
    assert d.edges == table_edges()
    for (_, trig), label in d.edge_labels.items():
        assert label == trig
    assert svg_digest(svg.decode()) == dot_digest(dot_source())


def test_svg_and_png_are_deterministic() -> None:
    require_dot()
    dot = dot_source()
    assert render_svg(dot) == render_svg(dot)
    assert render_png(dot) == render_png(dot)


def test_png_carries_the_dot_digest() -> None:
    require_dot()
    png = render_png(dot_source(), text={PNG_DIGEST_KEY: "sha256:abc", "Title": "x"})
    assert png_text(png) == {PNG_DIGEST_KEY: "sha256:abc", "Title": "x"}
    width, height = struct.unpack(">II", png[16:24])
    assert width > 800 and height > 400


def test_a_missing_dot_is_a_clear_render_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNFSM_DOT", "/nonexistent/graphviz/dot")
    with pytest.raises(RenderError) as err:
        render_svg(dot_source())
    assert isinstance(err.value, TurnFSMError)
    message = str(err.value)
    assert "not found" in message and "apt-get install graphviz" in message
    assert "--format mermaid" in message
    with pytest.raises(RenderError):
        find_dot()
    # the text formats need nothing
    assert mermaid_state_diagram() and dot_source()


def test_dot_failing_is_a_render_error() -> None:
    require_dot()
    with pytest.raises(RenderError, match="failed"):
        render_svg("digraph {{{ this is not DOT")


# ---------------------------------------------------------------------- committed files


def test_diagrams_folder_holds_the_generated_files() -> None:
    for name in ("fsm.mmd", "fsm.dot", "fsm.svg", "fsm.png"):
        assert (DIAGRAMS / name).is_file(), name
    assert {p.split("/")[0] for p in GENERATED} == {"diagrams", "docs"}


@pytest.mark.parametrize("name", ["diagrams/fsm.mmd", "diagrams/fsm.dot", "docs/states.md"])
def test_committed_text_file_is_what_the_table_produces_now(name: str) -> None:
    committed = (ROOT / name).read_text("utf-8")
    assert committed == generated_texts()[name], (
        f"{name} is stale: run `turnfsm diagram --regenerate` (or python scripts/regen_diagrams.py)"
    )


def test_committed_svg_matches_the_table() -> None:
    svg = (DIAGRAMS / "fsm.svg").read_bytes()
    d = parse_svg(svg)
    assert d.states == ALL_STATES
    assert d.edges == table_edges()
    assert svg_digest(svg.decode()) == dot_digest(dot_source()), (
        "diagrams/fsm.svg was drawn from another DOT: run `turnfsm diagram --regenerate`"
    )


def test_committed_png_matches_the_table() -> None:
    png = (DIAGRAMS / "fsm.png").read_bytes()
    assert png_text(png).get(PNG_DIGEST_KEY) == f"sha256:{dot_digest(dot_source())}", (
        "diagrams/fsm.png was drawn from another DOT: run `turnfsm diagram --regenerate`"
    )
    width, height = struct.unpack(">II", png[16:24])
    assert width >= 1200 and height >= 600  # legible at its own size


def test_the_svg_parser_rejects_an_extra_edge() -> None:
    # the check is not vacuous: an SVG with one more edge does not match the table
    svg = Path(DIAGRAMS / "fsm.svg").read_text("utf-8")
    start = svg.index('<g id="e_Idle__user_message" class="edge">')
    end = svg.index("</g>\n<!--", start) + len("</g>\n")
    extra = (
        svg[start:end]
        .replace("e_Idle__user_message", "e_Idle__reset")
        .replace(">user_message<", ">reset<")
    )
    forged = svg[:end] + extra + svg[end:]
    assert parse_svg(forged.encode()).edges != table_edges()


def test_states_appear_in_every_format_with_their_exact_names() -> None:
    texts = generated_texts()
    for s in State:
        assert f" as {s}\n" in texts["diagrams/fsm.mmd"]
        assert f'"{s}" [id="s_{s}"' in texts["diagrams/fsm.dot"]
