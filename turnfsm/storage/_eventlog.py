"""The tables kept beside a store's own: the event log and the context tenants.

The event log holds each context's durable events (every event but
``ContentDelta``) by ``(context_id, seq)``, as JSON; the tenant table names
the tenant of each context the HTTP server made. Neither is part of the
store's contract: the engine never reads them, and a store is whole without
them. They live in the store's own database, beside its tables:

- a SQLite store: tables ``server_events`` and ``server_context_tenants`` in
  the same file (written by the store's writer thread, read on a thread and
  connection of the log's own; the engine's tables are untouched). Another
  process's events are seen by polling the log (:data:`POLL_INTERVAL`);
  deltas are not relayed between processes.
- a PostgreSQL store: the same tables under the store's schema
  (``search_path``), created on open if missing; each write rings a
  doorbell, ``NOTIFY`` on a channel named after the database and schema
  (see ``turnfsm/storage/_pg_events.py``).
- any other store: in memory, for one process.

:func:`open_event_log` picks the one for a store. See ``docs/server.md``
("Several processes").
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from ..errors import StoreError
from ..events import STREAMED_KINDS, Event, event_bytes
from ._base import Store
from ._logtypes import Deliver, EventLog, LogNote, LogRow, OnConnect

if TYPE_CHECKING:
    from ._log_reader import LogReader
    from ._sqlite import SQLiteStore

__all__ = [
    "POLL_INTERVAL",
    "EventLog",
    "LogNote",
    "LogRow",
    "MemoryEventLog",
    "SQLiteEventLog",
    "open_event_log",
]

POLL_INTERVAL = 0.5
"""Seconds between two reads of a SQLite event log for other processes' events."""

_NOT_KEPT = STREAMED_KINDS | {"EventsMissed"}
"""The events a log does not keep (a delta is rung only; a note of missed
events is no event)."""


class MemoryEventLog:
    """The log and tenants in memory: one process, kept until it ends."""

    shared = False
    rings = False
    """Its ``add`` rings no notes (nobody else listens): a relay makes none."""

    def __init__(self) -> None:
        self._events: dict[str, dict[int, tuple[str, str] | Event]] = {}
        self._tenants: dict[str, str] = {}

    async def open(self) -> None:
        return None

    async def add(self, rows: Sequence[LogRow], notes: Sequence[LogNote]) -> None:
        for cid, seq, kind, data in rows:
            self._events.setdefault(cid, {}).setdefault(seq, (kind, data))

    def keep_events(self, events: Sequence[Event]) -> int:
        """Keep the durable ones among ``events`` as they are (their JSON is
        made when they are read): what a relay does in place of :meth:`add`,
        since nothing outside this process reads the log. Returns how many."""
        kept = 0
        for ev in events:
            if ev.kind not in _NOT_KEPT:
                self._events.setdefault(ev.context_id, {}).setdefault(ev.seq, ev)
                kept += 1
        return kept

    async def after(
        self, context_id: str, after: int, upto: int | None = None
    ) -> list[tuple[int, str, str]]:
        log = self._events.get(context_id, {})
        out: list[tuple[int, str, str]] = []
        for seq in sorted(log):
            if seq > after and (upto is None or seq <= upto):
                kept = log[seq]
                if isinstance(kept, tuple):
                    out.append((seq, *kept))
                else:
                    out.append((seq, kept.kind, event_bytes(kept).decode()))
        return out

    async def newest(self, context_ids: Sequence[str]) -> dict[str, int]:
        return {cid: max(self._events[cid]) for cid in context_ids if self._events.get(cid)}

    async def forget(self, context_ids: Sequence[str]) -> None:
        for cid in context_ids:
            self._events.pop(cid, None)
            self._tenants.pop(cid, None)

    async def listen(self, deliver: Deliver, on_connect: OnConnect) -> None:
        return None

    async def set_tenant(self, context_id: str, tenant: str) -> None:
        self._tenants[context_id] = tenant

    async def tenant(self, context_id: str) -> str | None:
        return self._tenants.get(context_id)

    async def tenants(self) -> dict[str, str]:
        return dict(self._tenants)

    async def aclose(self) -> None:
        return None


_SQLITE_TABLES = (
    "CREATE TABLE IF NOT EXISTS server_context_tenants "
    "(context_id TEXT PRIMARY KEY, tenant TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS server_events (context_id TEXT NOT NULL, "
    "seq INTEGER NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL, "
    "PRIMARY KEY (context_id, seq))",
)


class SQLiteEventLog:
    """The log and tenants in a SQLite file. Other processes' events are
    polled for by rowid.

    Given the file's :class:`~turnfsm.storage.SQLiteStore` (as
    :func:`open_event_log` does), its writes are writes of the store's
    writer thread, in its next group (one transaction and one sync with the
    commits waiting there), and its reads run on a reader thread and
    connection of its own (:class:`~turnfsm.storage._log_reader.LogReader`,
    made on the first read), so
    that a request's tenant lookup or a replay never waits behind a context
    the engine loads, nor the other way round. Given a path alone, a
    connection per call, on a worker thread. That was what a busy server did
    before: every request's tenant lookup and every batch of events opened a
    connection (the schema parsed, a page cache filled and freed) on
    whichever of anyio's worker threads (up to 40) was free, and what those
    threads freed stayed in each one's malloc arena: the server's resident
    memory rose under steady load with nothing live behind it
    (docs/benchmarks.md, "Memory under steady load")."""

    shared = True
    rings = False
    """Other processes poll the table: ``add`` rings no notes."""

    def __init__(
        self,
        path: str | Path,
        *,
        poll_interval: float = POLL_INTERVAL,
        store: SQLiteStore | None = None,
    ) -> None:
        self.path = str(path)
        self.poll_interval = poll_interval
        self._store = store
        self._reader: LogReader | None = None

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def _sql(self, sql: str, args: Sequence[object] = (), many: bool = False) -> list[tuple]:  # type: ignore[type-arg]
        db = self._connect()
        try:
            with db:
                return _statement(db, sql, args, many)
        finally:
            db.close()

    async def _run(
        self,
        sql: str,
        args: Sequence[object] = (),
        many: bool = False,
        *,
        write: bool = False,
        durable: bool = True,
    ) -> list[tuple]:  # type: ignore[type-arg]
        """``sql`` on a connection of its own; with a store, on the log's
        reader, or (a ``write``) in the store's writer's next group (not
        ``durable``: a group of such writes only is committed at
        ``synchronous=NORMAL``, as the store's lease writes are, and the next
        commit's sync makes it durable)."""
        store = self._store
        if store is None:
            return await anyio.to_thread.run_sync(self._sql, sql, args, many)
        if write:
            return await store._submit(
                lambda conn: _statement(conn, sql, args, many), reader=False, durable=durable
            )
        reader = self._reader
        if reader is None:
            from ._log_reader import LogReader  # with the store's threads, as its first read

            reader = self._reader = LogReader(store)
        return await reader._submit(
            lambda conn: _statement(conn, sql, args, many), reader=True, durable=True
        )

    def _open(self) -> None:
        db = self._connect()
        try:
            with db:
                for statement in _SQLITE_TABLES:
                    db.execute(statement)
        finally:
            db.close()

    async def open(self) -> None:
        if self._store is None:
            await anyio.to_thread.run_sync(self._open)
            return
        for statement in _SQLITE_TABLES:
            await self._run(statement, write=True)

    async def add(self, rows: Sequence[LogRow], notes: Sequence[LogNote]) -> None:
        if rows:
            # the log's rows are a relay's, not the context's record (a stream
            # that finds some missing is sent a Resync): written at NORMAL when
            # no commit shares their group
            await self._run(
                "INSERT OR IGNORE INTO server_events VALUES (?, ?, ?, ?)",
                rows,
                True,
                write=True,
                durable=False,
            )

    async def after(
        self, context_id: str, after: int, upto: int | None = None
    ) -> list[tuple[int, str, str]]:
        rows = await self._run(
            "SELECT seq, kind, data FROM server_events WHERE context_id = ? AND seq > ? "
            "AND seq <= ? ORDER BY seq",
            (context_id, after, upto if upto is not None else 1 << 62),
        )
        return [(int(a), str(b), str(c)) for a, b, c in rows]

    async def newest(self, context_ids: Sequence[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for cid in context_ids:
            rows = await self._run(
                "SELECT max(seq) FROM server_events WHERE context_id = ?", (cid,)
            )
            if rows and rows[0][0] is not None:
                out[cid] = int(rows[0][0])
        return out

    async def forget(self, context_ids: Sequence[str]) -> None:
        for cid in context_ids:
            await self._run("DELETE FROM server_events WHERE context_id = ?", (cid,), write=True)
            await self._run(
                "DELETE FROM server_context_tenants WHERE context_id = ?", (cid,), write=True
            )

    async def listen(self, deliver: Deliver, on_connect: OnConnect) -> None:
        while True:
            try:
                rows = await self._run("SELECT coalesce(max(rowid), 0) FROM server_events")
                break
            except (sqlite3.Error, StoreError):
                await anyio.sleep(self.poll_interval)
        last = int(rows[0][0])
        await on_connect()
        while True:
            await anyio.sleep(self.poll_interval)
            try:
                found = await self._run(
                    "SELECT rowid, context_id, seq FROM server_events WHERE rowid > ? "
                    "ORDER BY rowid LIMIT 10000",
                    (last,),
                )
            except (sqlite3.Error, StoreError):
                continue  # locked or busy for long: the next poll reads from the same row
            for rowid, cid, seq in found:
                last = max(last, int(rowid))
                deliver(LogNote(str(cid), int(seq)))

    async def set_tenant(self, context_id: str, tenant: str) -> None:
        await self._run(
            "INSERT OR REPLACE INTO server_context_tenants VALUES (?, ?)",
            (context_id, tenant),
            write=True,
        )

    async def tenant(self, context_id: str) -> str | None:
        rows = await self._run(
            "SELECT tenant FROM server_context_tenants WHERE context_id = ?", (context_id,)
        )
        return str(rows[0][0]) if rows else None

    async def tenants(self) -> dict[str, str]:
        rows = await self._run("SELECT context_id, tenant FROM server_context_tenants")
        return {str(a): str(b) for a, b in rows}

    async def aclose(self) -> None:
        """Stop the log's reader thread and close its connection (the store's
        threads are the store's)."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader._closed = True
            await reader._stop()


def _statement(
    conn: sqlite3.Connection, sql: str, args: Sequence[object], many: bool
) -> list[tuple]:  # type: ignore[type-arg]
    if many:
        conn.executemany(sql, args)  # type: ignore[arg-type]
        return []
    return conn.execute(sql, tuple(args)).fetchall()


def open_event_log(store: Store) -> EventLog:
    """The event log and tenant table beside ``store`` (not opened yet: call
    :meth:`EventLog.open`)."""
    # a store's module is imported before one is made: a server on another
    # store does not import it (the SQL's adapters, the PostgreSQL driver)
    # to ask
    sqlite = sys.modules.get(f"{__package__}._sqlite")
    if sqlite is not None and isinstance(store, sqlite.SQLiteStore):
        return SQLiteEventLog(store.path, store=store)
    postgres = sys.modules.get(f"{__package__}._postgres")
    if postgres is not None and isinstance(store, postgres.PostgresStore):
        from ._pg_events import PostgresEventLog

        return PostgresEventLog(store.url)
    return MemoryEventLog()
