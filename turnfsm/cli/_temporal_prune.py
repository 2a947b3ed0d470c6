"""``turnfsm temporal-prune``: delete the payloads kept in the store for
Temporal that no workflow history refers to any more (``docs/temporal.md``,
"Pruning").

A payload over Temporal's threshold is kept in a table of the store
(turnfsm_temporal_payloads) and its workflow's history holds only a
reference to it. Nothing deletes those rows on its own: run this now and
then (daily, from cron, say). It reads every workflow history Temporal still
keeps in each namespace given (running, and closed within the namespace's
retention), and deletes the rows last written more than --older-than ago
that none of them refers to. It reads them all: not a command for every
turn.

Give --temporal-namespace once for each namespace whose workers use this
store: a row only a history of a namespace not given refers to is deleted,
and that workflow then fails to read it back.

Prints one line: what it deleted, what it kept (old enough, still referred
to) and how many histories it read (--json: one JSON object). A history that
cannot be read (Temporal unreachable, a namespace it does not know) deletes
nothing. Needs the ``temporal`` extra: ``pip install 'turnfsm[temporal]'``.
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import timedelta
from typing import Any

import anyio

from ..storage import Store
from ._errors import CLIError, command_parser, run_guarded
from ._store import open_cli_store
from ._temporal_options import (
    DEFAULT_NAMESPACE,
    address,
    connect,
    exit_at_once,
    shared_store,
    temporal_package,
)

__all__ = ["add_parser", "duration"]

PROG = "turnfsm temporal-prune"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^([0-9]{1,9})([smhd])$")
MAX_DAYS = 36500
"""The longest --older-than (a hundred years): any cutoff it makes is a date."""


def duration(text: str) -> timedelta:
    """``--older-than``: a whole number and a unit: ``90s``, ``30m``, ``1h``, ``2d``."""
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: a whole number and a unit, s, m, h or d "
            "(90s, 30m, 1h, 2d)"
        )
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds > MAX_DAYS * 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is more than {MAX_DAYS} days")
    return timedelta(seconds=seconds)


duration.__name__ = "duration"


def add_parser(sub: Any) -> None:
    p = command_parser(
        sub,
        "temporal-prune",
        "delete the payloads kept in the store for Temporal that no workflow "
        "history refers to any more",
        __doc__,
        _run,
    )
    p.add_argument(
        "--temporal",
        type=address,
        required=True,
        metavar="HOST:PORT",
        help="the Temporal server's frontend",
    )
    p.add_argument(
        "--temporal-namespace",
        action="append",
        metavar="NS",
        help=f"a namespace whose histories to read ({DEFAULT_NAMESPACE}); give it once for "
        "each namespace whose workers use this store, or the rows only the others' "
        "histories refer to are deleted",
    )
    p.add_argument(
        "--older-than",
        type=duration,
        default=timedelta(hours=1),
        metavar="DURATION",
        help="delete only rows last written longer ago than this: a whole number and a "
        "unit, s, m, h or d (1h); the margin for payloads handed to Temporal and not in "
        "a history yet",
    )
    p.add_argument(
        "--store",
        required=True,
        metavar="URL",
        help="the store the workers keep the payloads in: a PostgreSQL URL or a SQLite "
        "file (sqlite:///path.db), as given to turnfsm temporal-worker",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _namespaces(args: argparse.Namespace) -> list[str]:
    given: list[str] = args.temporal_namespace or [DEFAULT_NAMESPACE]
    return list(dict.fromkeys(given))  # each once, in the order given


def _run(args: argparse.Namespace) -> int:
    package = temporal_package(PROG)
    namespaces = _namespaces(args)
    store, url = open_cli_store(args.store, create=False)  # nothing to prune in a new one
    try:
        shared_store(store, url, "--store")
        clients = [connect(args, package, store, namespace=ns) for ns in namespaces]
    except BaseException:
        anyio.run(store.aclose)
        raise
    # a Temporal client is held from here on: every ending goes through exit_at_once
    exit_at_once(run_guarded(PROG, lambda: _prune(args, package, store, clients, namespaces)))


def _prune(
    args: argparse.Namespace, package: Any, store: Store, clients: list[Any], namespaces: list[str]
) -> int:
    async def go() -> Any:
        try:
            return await package.prune_payloads(store, clients, older_than=args.older_than)
        finally:
            await store.aclose()

    try:
        pruned = anyio.run(go)
    except Exception as exc:
        if type(exc).__module__.partition(".")[0] != "temporalio":  # the store's, or a bug
            raise
        problem = " ".join(str(exc).split())[:300].rstrip(".") or type(exc).__name__
        named = "namespace" if len(namespaces) == 1 else "namespaces"
        raise CLIError(
            f"--temporal {args.temporal}: cannot read the workflow histories "
            f"({named} {', '.join(namespaces)}): {problem}; nothing was deleted"
        ) from None
    if args.json:
        print(
            json.dumps(
                {"deleted": pruned.deleted, "kept": pruned.kept, "histories": pruned.histories}
            )
        )
    else:
        print(
            f"deleted {_many(pruned.deleted, 'payload')}, kept {pruned.kept} still referred "
            f"to, read {_many(pruned.histories, 'history', 'histories')}"
        )
    return 0


def _many(n: int, one: str, more: str | None = None) -> str:
    return f"{n} {one if n == 1 else (more or one + 's')}"
