"""The bounds of the engine's loaded-context cache as command-line options:
``--max-loaded-contexts`` and ``--max-loaded-messages`` (``serve`` and
``worker``); see docs/server.md, "Memory".

A server or worker runs for long and serves contexts that come and go, so
its cache is always full: its bounds are what every such process spends.
Their defaults are smaller than a plain ``Engine``'s: 1,024 contexts and
12,000 messages, sized from the measured bytes per loaded context and per
loaded message (docs/benchmarks.md, "The loaded-context cache") to stay
under the memory docs/server.md promises. A context that is not loaded costs one read from the
store on its next call.
"""

from __future__ import annotations

import argparse
from typing import Any

from ._errors import count

__all__ = [
    "SERVER_MAX_LOADED_CONTEXTS",
    "SERVER_MAX_LOADED_MESSAGES",
    "add_cache_options",
    "cache_settings",
]

SERVER_MAX_LOADED_CONTEXTS = 1_024
"""``serve`` and ``worker``: the contexts the engine holds loaded at most."""
SERVER_MAX_LOADED_MESSAGES = 12_000
"""``serve`` and ``worker``: the messages of the loaded contexts at most, in all."""


def add_cache_options(p: argparse.ArgumentParser) -> None:
    """The two options, with the server's defaults."""
    p.add_argument(
        "--max-loaded-contexts",
        type=count(1, 10_000_000),
        default=SERVER_MAX_LOADED_CONTEXTS,
        metavar="N",
        help="contexts kept loaded in memory at most; the least recently used resting "
        f"ones are unloaded beyond it and read again from the store when called "
        f"({SERVER_MAX_LOADED_CONTEXTS})",
    )
    p.add_argument(
        "--max-loaded-messages",
        type=count(1, 1_000_000_000),
        default=SERVER_MAX_LOADED_MESSAGES,
        metavar="N",
        help=f"messages of the loaded contexts at most, in all ({SERVER_MAX_LOADED_MESSAGES})",
    )


def cache_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Engine`` arguments the options give: ``max_loaded``,
    ``max_loaded_messages``."""
    return {
        "max_loaded": args.max_loaded_contexts,
        "max_loaded_messages": args.max_loaded_messages,
    }
