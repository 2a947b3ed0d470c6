"""``turnfsm db upgrade --store URL``: bring a store's table layout up to date.

A PostgreSQL store keeps the version of its table layout
(``turnfsm_meta.store_format``); a turnfsm that needs a newer layout refuses
to open it and names this command. It applies the missing migrations in one
transaction (an empty database gets them all) and says what it did. SQLite,
files and memory stores bring their layout up to date when they are opened:
for them the command only says so.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from ..errors import StoreError
from ._errors import CLIError, guarded

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "db", help="the store's table layout (turnfsm db upgrade)", description=__doc__
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    up = verbs.add_parser(
        "upgrade", help="apply the store layout's missing migrations (PostgreSQL)"
    )
    up.add_argument(
        "--store",
        metavar="URL",
        required=True,
        help="the store to upgrade: postgresql://user@host:5432/db",
    )
    p.set_defaults(run=guarded("turnfsm db", _run))


def _run(args: argparse.Namespace) -> int:
    url: str = args.store
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("postgresql", "postgres"):
        if scheme in ("sqlite", "files", "memory"):
            print(f"{url}: a {scheme}:// store brings its layout up to date when opened")
            return 0
        raise CLIError(f"--store: {url!r} is not a store URL (postgresql://user@host/db)")
    from ..storage._postgres import STORE_FORMAT, redact, upgrade

    try:
        before, after = anyio.run(upgrade, url)
    except StoreError as exc:
        raise CLIError(f"--store: {exc}") from exc
    if before == after:
        print(f"{redact(url)}: store format {after}, up to date")
    elif before == 0:
        print(f"{redact(url)}: made a turnfsm store, format {after}")
    else:
        print(f"{redact(url)}: upgraded the store from format {before} to {after}")
    assert after == STORE_FORMAT
    return 0
