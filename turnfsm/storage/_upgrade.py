"""``turnfsm db upgrade``: bring a SQL store's tables up to date, the server's too.

A SQLite file and a PostgreSQL database are upgraded the same way: the
store's numbered migrations it lacks are applied (:mod:`turnfsm.storage._migrate`;
a new file or an empty database gets them all), then the tables the HTTP
server and the workers keep beside the store (``server_events``,
``server_context_tenants``: :mod:`turnfsm.storage._eventlog`) are made if
missing. The server still makes those itself when it opens a store that was
never upgraded; after an upgrade it finds them there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from ..errors import InvalidInput
from ._eventlog import SQLiteEventLog
from ._logtypes import EventLog
from ._secrets import redact
from ._sqlite_schema import upgrade as upgrade_sqlite
from ._url import SQLITE_OPTIONS, path_and_options

__all__ = ["Upgraded", "upgrade_store"]


@dataclass(frozen=True, slots=True)
class Upgraded:
    """What :func:`upgrade_store` did."""

    store: str
    """The store, for messages (a PostgreSQL URL without its password)."""
    before: int
    """The layout's format before (0: there was no store)."""
    after: int
    """The layout's format now: the one this turnfsm reads and writes."""


async def upgrade_store(url: str) -> Upgraded:
    """Apply the migrations the SQLite or PostgreSQL store at ``url`` lacks, and
    make the server's tables beside it if missing. Another kind of store is an
    :class:`~turnfsm.errors.InvalidInput` (it brings its layout up to date
    when opened); a newer layout than this turnfsm knows, a
    :class:`~turnfsm.errors.SchemaVersionError`, before anything is written."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    log: EventLog
    if scheme == "sqlite":
        where, options = path_and_options(url)
        unknown = set(options) - SQLITE_OPTIONS
        if unknown:  # as open_store refuses them
            raise InvalidInput(
                "url", f"{redact(url)!r}: unknown sqlite option(s) {', '.join(sorted(unknown))}"
            )
        path = Path(where)
        before, after = await anyio.to_thread.run_sync(upgrade_sqlite, path)
        log, name = SQLiteEventLog(path), str(path)
    elif scheme in ("postgresql", "postgres"):
        from ._pg_events import PostgresEventLog
        from ._pg_schema import upgrade

        before, after = await upgrade(url)
        log, name = PostgresEventLog(url), redact(url)
    else:
        raise InvalidInput("url", f"{redact(url)!r}: not a SQLite or PostgreSQL store URL")
    try:
        await log.open()
    finally:
        await log.aclose()
    return Upgraded(name, before, after)
