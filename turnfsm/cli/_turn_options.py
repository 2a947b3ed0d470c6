"""The engine's turn settings as command-line options: ``--max-iterations``
(the LLM calls one user message may make) and ``--ids`` (the kind of the new
context and message ids), for ``chat`` (with ``resume`` and ``recover``),
``serve`` and ``worker``."""

from __future__ import annotations

import argparse
from typing import Any

from ..engine._ids import ID_KINDS
from ._errors import count

__all__ = ["DEFAULT_MAX_ITERATIONS", "add_turn_options", "turn_settings"]

DEFAULT_MAX_ITERATIONS = 20
"""``Engine``'s own default."""


def add_turn_options(p: argparse.ArgumentParser) -> None:
    """``--max-iterations N`` (a whole number from 1) and ``--ids KIND``."""
    p.add_argument(
        "--max-iterations",
        type=count(1, 1_000_000),
        default=None,
        metavar="N",
        help="the LLM calls one user message may make; when the last one still asks "
        "for tools, they are not run, the turn stops with stop reason max_iterations "
        f"and a notice saying so is stored (default: {DEFAULT_MAX_ITERATIONS})",
    )
    p.add_argument(
        "--ids",
        choices=ID_KINDS,
        default=None,
        help="the kind of new context and message ids: uuid7 (RFC 9562, time-ordered, "
        "the default) or compact (the shorter ids of earlier versions)",
    )


def turn_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Engine`` arguments the options give: ``max_iterations``, ``ids``."""
    iterations = getattr(args, "max_iterations", None)
    return {
        "max_iterations": DEFAULT_MAX_ITERATIONS if iterations is None else iterations,
        "ids": getattr(args, "ids", None),
    }
