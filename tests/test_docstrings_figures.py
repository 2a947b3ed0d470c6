"""No measurement in the package's docstrings or comments.

A figure (a time in µs or ms, an instruction count, "one frame less", bytes
per message) is true of one machine on one day; the code around it changes
and the figure stays, wrong. Figures belong in docs/benchmarks.md, dated, with
the command that measured them; a docstring or comment says why the code is
as it is.

Every string statement (module, class, function and attribute docstrings)
and every comment of ``turnfsm/`` is read. ``STILL_TO_CLEAN`` lists the
modules whose figures have not been moved yet; it only shrinks: an entry
whose module no longer carries a figure fails too, so that it is removed.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "turnfsm"

NUMBER = r"\d[\d,.]*"
BYTES = r"(?:KB|KiB|MB|MiB|GB|GiB|bytes)"
FIGURE = re.compile(
    rf"""
      {NUMBER}\s*(?:µs|μs|us|ns|ms)\b                        # a time
    | \b(?:micro|nano)seconds?\b
    | {NUMBER}\s*[kKMG]?\s*instructions\b                   # an instruction count
    | \b(?:one|two|three|four|five|six|seven|\d+)\s+
      (?:python\s+)?(?:frames?|calls?)\s+(?:less|fewer|more)\b  # "one frame less"
    | {NUMBER}\s*(?:x|%)\s+(?:faster|slower|cheaper|less|more)\b  # a speed-up
    | {NUMBER}\s*{BYTES}\s+(?:\([^)]*\)\s+)?(?:per|each)\b  # a size per thing
    | \bmeasured\b[^.]*?{NUMBER}\s*{BYTES}\b
    """,
    re.VERBOSE | re.IGNORECASE,
)

STILL_TO_CLEAN: frozenset[str] = frozenset()
"""Modules (relative to ``turnfsm/``) that still carry a figure, to be cleaned
by whoever works on them. Never add to it."""


def prose(source: str, *, comments: bool = True) -> list[tuple[int, str]]:
    """Each docstring (any string statement) and comment of ``source``, with
    its line (the docstrings only without ``comments``)."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            out.append((node.lineno, node.value.value))
    if comments:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                out.append((tok.start[0], tok.string))
    return out


def figures(source: str) -> list[str]:
    """The figures found in ``source``'s docstrings and comments, as
    ``line: text``."""
    # A comment is a piece of the source as written (from its "#" to the line's
    # end), so a figure in one is a figure in the source: where the source has
    # none, no comment has one, and the tokenizing, most of the work, is skipped.
    # A docstring is read from the parse: its escapes and joined pieces are not
    # the source's text.
    comments = FIGURE.search(source) is not None
    return [
        f"{line}: {' '.join(m.group(0).split())}"
        for line, text in prose(source, comments=comments)
        for m in FIGURE.finditer(text)
    ]


def _modules() -> dict[str, str]:
    return {
        p.relative_to(PACKAGE).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(PACKAGE.rglob("*.py"))
    }


def test_no_figures_in_docstrings_or_comments() -> None:
    found = {name: figures(src) for name, src in _modules().items()}
    carrying = {name: f for name, f in found.items() if f and name not in STILL_TO_CLEAN}
    assert not carrying, (
        "measurements belong in docs/benchmarks.md (dated), not in the code: "
        + "; ".join(f"turnfsm/{n}:{', '.join(f)}" for n, f in sorted(carrying.items()))
    )


def test_still_to_clean_lists_only_modules_with_figures() -> None:
    modules = _modules()
    stale = sorted(n for n in STILL_TO_CLEAN if n not in modules or not figures(modules[n]))
    assert not stale, f"carry no figure any more; remove them from STILL_TO_CLEAN: {stale}"


@pytest.mark.parametrize(
    "text",
    [
        '"""A copy takes about 2.1 us here."""',
        '"""Loading costs 20 ms on a cold process."""',
        '"""It runs in 350 µs."""',
        "# 1.2 M instructions per turn",
        "# written out: one frame less per step",
        "# two Python calls fewer",
        '"""4 rows and 25,958 bytes (6.3 pages) per commit."""',
        '"""At the measured 4.0 KB per loaded context."""',
        "# 3x faster than before",
        "def f() -> None:\n    '''Takes 5 microseconds.'''",
        "X = 1\n'''An attribute docstring: 1.2 KB each.'''",
    ],
)
def test_a_figure_is_found(text: str) -> None:
    assert figures(text)


@pytest.mark.parametrize(
    "text",
    [
        '"""The mode\'s instructions, appended to the system message."""',
        '"""The error for an HTTP status; ``retry-after-ms`` is data on it."""',
        '"""Temporal refuses a payload over its limit (2 MB by default)."""',
        '"""A 400 MB file under ``max_bytes=1000`` costs a 1,000-byte read."""',
        "# one result per call, in the order asked",
        '"""An unwatched call has no frame more than it needs."""',
        "s = '12 ms'  # a string value, not prose",
    ],
)
def test_what_is_not_a_figure(text: str) -> None:
    assert not figures(text)
