"""Parsers for the diagram formats: the tests read the output, never eyeball it.

Each parser accepts only the line shapes its generator is documented to write
and raises AssertionError on anything else, so "nothing else appears" is
checked, not assumed.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field

Edge = tuple[str, str, str]  # (source, trigger, dest)


@dataclass
class Diagram:
    states: set[str] = field(default_factory=set)
    edges: Counter[Edge] = field(default_factory=Counter)
    labels: dict[str, str] = field(default_factory=dict)  # state -> label
    edge_labels: dict[tuple[str, str], str] = field(default_factory=dict)  # (src, trig) -> label
    classes: dict[str, set[str]] = field(default_factory=dict)  # class -> states
    initial: str | None = None
    attrs: dict[str, str] = field(default_factory=dict)  # state or "src/trig" -> attr text


_M_STATE = re.compile(r'^    state "([^"]*)" as (\w+)$')
_M_EDGE = re.compile(r"^    (\w+) --> (\w+) : (.+)$")
_M_INITIAL = re.compile(r"^    \[\*\] --> (\w+)$")
_M_CLASSDEF = re.compile(r"^    classDef (\w+) [\w#:,.-]+$")
_M_CLASS = re.compile(r"^    class (\w+(?:, \w+)*) (\w+)$")
_M_COMMENT = re.compile(r"^    %% .*$")
_TRIGGER_IN_LABEL = re.compile(r"^(?:[✔✖⟲‼] )?(\w+)(?: x\d+)?(?: \(not declared\))?$")


def parse_mermaid_state(text: str) -> Diagram:
    lines = text.split("\n")
    assert lines[0] == "stateDiagram-v2", lines[0]
    assert lines[-1] == "", "the text ends with one newline"
    d = Diagram()
    for line in lines[1:-1]:
        if _M_COMMENT.match(line):
            continue
        if m := _M_STATE.match(line):
            d.states.add(m.group(2))
            d.labels[m.group(2)] = m.group(1)
        elif m := _M_INITIAL.match(line):
            assert d.initial is None, "one initial marker"
            d.initial = m.group(1)
        elif m := _M_EDGE.match(line):
            src, dst, label = m.groups()
            t = _TRIGGER_IN_LABEL.match(label)
            assert t, f"edge label {label!r} does not name a trigger"
            d.edges[(src, t.group(1), dst)] += 1
            d.edge_labels[(src, t.group(1))] = label
        elif _M_CLASSDEF.match(line):
            continue
        elif m := _M_CLASS.match(line):
            d.classes.setdefault(m.group(2), set()).update(m.group(1).split(", "))
        else:
            raise AssertionError(f"unexpected Mermaid line: {line!r}")
    return d


_D_NODE = re.compile(r'^  "(\w+)" \[id="s_(\w+)", (.*)\];$')
_D_EDGE = re.compile(
    r'^  "(\w+)" -> "(\w+)" \[id="([ex])_(\w+?)__(\w+)", label="([^"]*)", (.*)\];$'
)
_D_FIXED = (
    re.compile(r"^digraph turnfsm \{$"),
    re.compile(r'^  comment="turnfsm dot sha256:[0-9a-f]{64}";$'),
    re.compile(r"^  graph \[.*\];$"),
    re.compile(r"^  node \[.*\];$"),
    re.compile(r"^  edge \[.*\];$"),
    re.compile(r"^\}$"),
)


def parse_dot(text: str) -> Diagram:
    assert text.endswith("}\n")
    d = Diagram()
    for line in text.rstrip("\n").split("\n"):
        if m := _D_NODE.match(line):
            name, ident, attrs = m.groups()
            assert name == ident, line
            d.states.add(name)
            d.attrs[name] = attrs
        elif m := _D_EDGE.match(line):
            src, dst, kind, id_src, id_trig, label, attrs = m.groups()
            assert id_src == src, line
            trig = _TRIGGER_IN_LABEL.match(label)
            assert trig and trig.group(1) == id_trig, f"label {label!r} vs id {id_trig!r}"
            d.edges[(src, id_trig, dst)] += 1
            d.edge_labels[(src, id_trig)] = label
            d.attrs[f"{src}/{id_trig}"] = attrs
            if kind == "x":
                d.attrs[f"{src}/{id_trig}"] += ", undeclared"
        elif not any(p.match(line) for p in _D_FIXED):
            raise AssertionError(f"unexpected DOT line: {line!r}")
    return d


_SVG = "{http://www.w3.org/2000/svg}"


def parse_svg(svg: bytes) -> Diagram:
    """States from ``<g class="node">`` titles, edges from ``<g class="edge">``:
    the ``<title>`` (``A->B``), the id (``e_A__trigger``) and the label ``<text>``."""
    root = ET.fromstring(svg)
    assert root.tag == f"{_SVG}svg"
    d = Diagram()
    for g in root.iter(f"{_SVG}g"):
        cls = g.get("class")
        if cls not in ("node", "edge"):
            continue
        title = g.find(f"{_SVG}title")
        assert title is not None and title.text
        texts = [t.text or "" for t in g.iter(f"{_SVG}text")]
        if cls == "node":
            assert g.get("id") == f"s_{title.text}", (g.get("id"), title.text)
            d.states.add(title.text)
            d.labels[title.text] = " / ".join(texts)
            continue
        src, _, dst = title.text.partition("->")
        ident = g.get("id") or ""
        m = re.fullmatch(r"[ex]_(\w+?)__(\w+)", ident)
        assert m and m.group(1) == src, (ident, title.text)
        [label] = texts
        trig = _TRIGGER_IN_LABEL.match(label)
        assert trig and trig.group(1) == m.group(2), (label, ident)
        d.edges[(src, m.group(2), dst)] += 1
        d.edge_labels[(src, m.group(2))] = label
    return d


_WHO = "(user|engine|LLM|tools|approver)"
_S_LINE = (
    re.compile(r"^    participant (user|engine|LLM|tools|approver)$"),
    re.compile(r"^    %% .*$"),
    re.compile(rf"^    {_WHO}(->>|-->>|--x){_WHO}: \S.*$"),
    re.compile(r"^    Note over (engine|engine,tools): \S.*$"),
)


def parse_sequence(text: str) -> list[str]:
    """The participant, arrow and note lines of a sequenceDiagram (comments left out),
    after checking every line's shape."""
    lines = text.split("\n")
    assert lines[0] == "sequenceDiagram"
    assert lines[-1] == ""
    out = []
    for line in lines[1:-1]:
        assert any(p.match(line) for p in _S_LINE), f"unexpected sequence line: {line!r}"
        text = re.sub(r"#\w+;", "", line.split(":", 1)[-1])  # entity codes such as #59;
        assert ";" not in text, f"a raw ';' ends a Mermaid statement: {line!r}"
        if not line.startswith("    %%"):
            out.append(line.strip())
    return out
