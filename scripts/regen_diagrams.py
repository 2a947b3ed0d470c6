"""Regenerate the repository's generated files from the transition table.

    python scripts/regen_diagrams.py           # rewrite what is stale
    python scripts/regen_diagrams.py --check   # write nothing; exit 1 if stale

Writes diagrams/fsm.mmd, diagrams/fsm.dot, diagrams/fsm.svg, diagrams/fsm.png
and docs/states.md (what ``turnfsm diagram --regenerate [--check]`` does, run
from the repository root), then the SVG of each picture drawn by hand
(``HAND_DRAWN``: its DOT source is the file to edit). SVG and PNG need
Graphviz's ``dot``; ``--check`` does not.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from pathlib import Path

from turnfsm.cli._diagram import regenerate
from turnfsm.errors import TurnFSMError
from turnfsm.render import render_svg, svg_digest

ROOT = Path(__file__).resolve().parent.parent

HAND_DRAWN = {"diagrams/send.dot": "diagrams/send.svg"}
"""Pictures drawn by hand in DOT (source -> SVG), rendered here. Each SVG
carries the digest of the source it was rendered from, so that --check
needs no Graphviz and another Graphviz version does not churn the SVG."""


def source_digest(dot: bytes) -> str:
    return hashlib.sha256(dot).hexdigest()


def rendered(name: str, dot: bytes) -> bytes:
    """The SVG of a hand-drawn DOT source, its digest in the graph's comment."""
    text = dot.decode("utf-8")
    head, brace, rest = text.partition("{")
    stamp = f'\n  comment="turnfsm {Path(name).name} sha256:{source_digest(dot)}";'
    return render_svg(head + brace + stamp + rest)


def hand_drawn(root: Path, *, check: bool, say: Callable[[str], None] = print) -> int:
    """Render the stale SVGs of ``HAND_DRAWN`` (with ``check``: write nothing,
    1 when one is stale)."""
    stale = []
    for source, target in HAND_DRAWN.items():
        dot = (root / source).read_bytes()
        try:
            svg = (root / target).read_text(encoding="utf-8")
        except FileNotFoundError:
            svg = ""
        if svg_digest(svg) != source_digest(dot):
            stale.append(source)
    if check:
        for source in stale:
            say(f"stale: {HAND_DRAWN[source]} (not rendered from {source} as it is)")
        if stale:
            say("run python scripts/regen_diagrams.py")
            return 1
        return 0
    for source in stale:
        (root / HAND_DRAWN[source]).write_bytes(rendered(source, (root / source).read_bytes()))
        say(f"wrote {HAND_DRAWN[source]}")
    return 0


def main(argv: list[str]) -> int:
    unknown = [a for a in argv if a != "--check"]
    if unknown:
        print(__doc__, file=sys.stderr)
        return 2
    check = "--check" in argv
    try:
        generated = regenerate(ROOT, check=check)
        return max(generated, hand_drawn(ROOT, check=check))
    except TurnFSMError as exc:
        print(f"regen_diagrams: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
