"""The history settings of the engine as command-line options: ``--tool-history``,
``--token-budget`` and ``--compaction`` (``serve``, ``worker``, and ``chat`` with
``resume`` and ``recover``); see docs/cli.md."""

from __future__ import annotations

import argparse
from typing import Any

from ..enhancers import Compaction, TokenBudget
from ._errors import count

__all__ = ["SERVER_TOOL_HISTORY", "add_history_options", "history_settings"]

SERVER_TOOL_HISTORY = 10
"""``serve`` and ``worker`` show the model the last 10 tool calls in full."""

_MAX_TOKENS = 100_000_000


def add_history_options(p: argparse.ArgumentParser, *, tool_history: int | None) -> None:
    """The three options; ``tool_history`` is the command's default (None:
    every call in full)."""
    shown = "every call in full" if tool_history is None else str(tool_history)
    p.add_argument(
        "--tool-history",
        type=count(0, 1_000_000),
        default=tool_history,
        metavar="N",
        help=f"show the model the last N tool calls in full, older ones by name only "
        f"(default: {shown})",
    )
    p.add_argument(
        "--token-budget",
        type=count(1, _MAX_TOKENS),
        default=None,
        metavar="TOKENS",
        help="drop the oldest turns from what the model is sent until it fits in TOKENS "
        "input tokens (estimated, calibrated by the usage the model reports; default: "
        "no budget)",
    )
    p.add_argument(
        "--compaction",
        type=count(2, _MAX_TOKENS),
        default=None,
        metavar="TOKENS",
        help="once the history the model is sent counts more than TOKENS tokens, replace "
        "its older part by a summary the model writes (kept, reused; default: none)",
    )


def history_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Engine`` arguments the options give: ``tool_history_rounds``,
    ``token_budget``, ``compaction``."""
    budget = args.token_budget
    threshold = args.compaction
    return {
        "tool_history_rounds": args.tool_history,
        "token_budget": TokenBudget(budget) if budget is not None else None,
        "compaction": Compaction(threshold) if threshold is not None else None,
    }
