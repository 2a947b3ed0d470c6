"""``turnfsm db upgrade --store URL``: bring a store's tables up to date.

A SQLite or PostgreSQL store keeps the version of its table layout
(``turnfsm_meta.store_format``); the command applies the migrations it lacks
in one transaction (a new file or an empty database gets them all), then
makes the tables the HTTP server and the workers keep beside the store (the
event log and the tenants) if they are missing, and says what it did. A
turnfsm that needs a newer PostgreSQL layout refuses to open it and names
this command; a SQLite store also applies its migrations when it is opened.
Files and memory stores bring their layout up to date when they are opened:
for them the command only says so.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from ..errors import InvalidInput, StoreError
from ..storage._secrets import redact
from ..storage._url import path_and_options
from ._errors import CLIError, guarded

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "db", help="the store's table layout (turnfsm db upgrade)", description=__doc__
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    up = verbs.add_parser(
        "upgrade",
        help="apply the store layout's missing migrations and make the server's tables "
        "(SQLite, PostgreSQL)",
    )
    up.add_argument(
        "--store",
        metavar="URL",
        required=True,
        help="the store to upgrade: sqlite:///path.db or postgresql://user@host:5432/db",
    )
    p.set_defaults(run=guarded("turnfsm db", _run))


def _run(args: argparse.Namespace) -> int:
    url: str = args.store
    shown = redact(url)
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("files", "memory"):
        try:  # a malformed URL is still refused
            if scheme == "files":
                path_and_options(url)
            elif url.split("://", 1)[1]:
                raise InvalidInput("url", f"{shown!r}: a memory:// store takes no path or options")
        except InvalidInput as exc:
            raise CLIError(f"--store: {exc.reason}") from None
        print(f"{shown}: a {scheme}:// store brings its layout up to date when opened")
        return 0
    if scheme not in ("sqlite", "postgresql", "postgres"):
        raise CLIError(
            f"--store: {shown!r} is not a store URL (sqlite:///path.db, postgresql://user@host/db)"
        )
    from ..storage._upgrade import upgrade_store

    try:
        done = anyio.run(upgrade_store, url)
    except (StoreError, InvalidInput) as exc:
        raise CLIError(f"--store: {exc}") from exc
    name, before, after = done.store, done.before, done.after
    if before == after:
        print(f"{name}: store format {after}, up to date")
    elif before == 0:
        print(f"{name}: made a turnfsm store, format {after}")
    else:
        print(f"{name}: upgraded the store from format {before} to {after}")
    print(f"{name}: the server's tables (server_events, server_context_tenants) are in place")
    return 0
