"""Regenerate the repository's generated files from the transition table.

    python scripts/regen_diagrams.py           # rewrite what is stale
    python scripts/regen_diagrams.py --check   # write nothing; exit 1 if stale

Writes diagrams/fsm.mmd, diagrams/fsm.dot, diagrams/fsm.svg, diagrams/fsm.png
and docs/states.md. The same as ``turnfsm diagram --regenerate [--check]`` run
from the repository root; SVG and PNG need Graphviz's ``dot``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from turnfsm.cli._diagram import regenerate
from turnfsm.errors import TurnFSMError

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    unknown = [a for a in argv if a != "--check"]
    if unknown:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return regenerate(ROOT, check="--check" in argv)
    except TurnFSMError as exc:
        print(f"regen_diagrams: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
