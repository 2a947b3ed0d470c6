"""The event log and tenant table in a PostgreSQL store's database, and its doorbell.

The tables are those of the SQLite file (``server_events``,
``server_context_tenants``; see :mod:`turnfsm.storage._eventlog`), made under
the store's schema (its ``search_path``) when the log is opened: ``CREATE
TABLE IF NOT EXISTS`` under an advisory lock, so two processes opening at
once do not collide. They are not part of the store's migrations: the engine
never reads them.

The doorbell: a write of events is one statement (one transaction, one round
trip, the batch given as one JSON document) that inserts the durable ones and
calls ``pg_notify``, per context, once for the events of the batch
(more when its deltas do not fit in one): PostgreSQL delivers the
notifications at commit, in order, after the rows are visible. A payload is
JSON ``{"c": context_id, "f": first, "s": seq, "e": [delta, ...]}``: the
context's events ``first`` to ``seq`` went out; the deltas among them (which the log does not keep)
are in ``"e"``, the others are read from the log. A delta that would not fit
in :data:`MAX_PAYLOAD` bytes is left out (a listener sees a gap and sends a
``Resync``). The channel is named after the database and schema
(``turnfsm_events_`` and a hash), so two stores in one database do not hear
each other.

A listener is one connection of its own (``LISTEN``); when it breaks, it
connects again after a second and says so (``on_connect``), and the caller
reads the log for what it may have missed.

psycopg comes from :mod:`turnfsm.storage._pg_schema`, the one module that
imports it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import anyio

from ..errors import StoreError
from ._logtypes import Deliver, LogNote, LogRow, OnConnect
from ._pg_schema import AsyncConnectionPool, check_connection, psycopg, redact

__all__ = ["MAX_PAYLOAD", "PostgresEventLog", "parse_payload", "payloads"]

MAX_PAYLOAD = 7900
"""Bytes a notification may carry (PostgreSQL's limit is 8000)."""

RECONNECT_DELAY = 1.0
"""Seconds before a broken listener connects again."""

_TABLES = """
CREATE TABLE IF NOT EXISTS server_context_tenants (
    context_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS server_events (
    context_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (context_id, seq)
);
"""
_ADD = (
    "WITH d AS (SELECT %s::jsonb AS j), "
    "kept AS (INSERT INTO server_events (context_id, seq, kind, data) "
    "SELECT e->>0, (e->>1)::bigint, e->>2, e->>3 FROM d, jsonb_array_elements(d.j->'r') AS e "
    "ON CONFLICT DO NOTHING) "
    "SELECT count(pg_notify(%s::text, n)) FROM d, jsonb_array_elements_text(d.j->'n') AS t (n)"
)
"""A batch of the log in one statement: its rows, then its notifications (one
JSON document: cheaper to send than arrays)."""
_LOCK_KEY = 0x7475726E65766C  # "turnevl": the advisory lock the tables are made under


def _said(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def payloads(notes: Sequence[LogNote]) -> list[str]:
    """Notes as the payloads of notifications: per context, in the order given,
    ``{"c": context_id, "f": first, "s": seq, "e": [delta, ...]}``: the
    context's events ``first`` to ``seq`` went out, and the deltas among them
    are in ``"e"`` (the other events are in the log); cut where a payload
    would pass :data:`MAX_PAYLOAD` bytes. A delta alone over it is left out
    (a listener sees a gap)."""
    out: list[str] = []
    groups: dict[str, list[LogNote]] = {}
    for note in notes:
        groups.setdefault(note.context_id, []).append(note)
    for cid, mine in groups.items():
        head = '{"c":' + json.dumps(cid) + ',"f":'
        deltas: list[str] = []
        size = len(head) + 48
        first = last = mine[0].seq

        for note in mine:
            event = note.event
            if isinstance(event, str):
                if size + len(event) + 1 > MAX_PAYLOAD and (deltas or first < note.seq):
                    out.append(_payload(head, first, last, deltas))
                    deltas, size, first = [], len(head) + 48, note.seq
                if size + len(event) + 1 <= MAX_PAYLOAD:
                    deltas.append(event)
                    size += len(event) + 1
            last = note.seq
        out.append(_payload(head, first, last, deltas))
    return out


def _payload(head: str, first: int, last: int, deltas: list[str]) -> str:
    return f'{head}{first},"s":{last},"e":[' + ",".join(deltas) + "]}"


def parse_payload(text: str) -> list[LogNote]:
    """A notification's notes: its deltas, then the doorbell at its last seq (the
    first note says the first seq it covers); none for one that is not ours."""
    try:
        body = json.loads(text)
        cid, first, seq, events = body["c"], body["f"], body["s"], body.get("e", [])
    except (ValueError, KeyError, TypeError, AttributeError):
        return []
    if not (
        isinstance(cid, str)
        and isinstance(first, int)
        and isinstance(seq, int)
        and isinstance(events, list)
    ):
        return []
    out = [
        LogNote(cid, ev["seq"], ev)
        for ev in events
        if isinstance(ev, dict) and isinstance(ev.get("seq"), int)
    ]
    out.append(LogNote(cid, seq))
    out[0] = LogNote(cid, out[0].seq, out[0].event, first)
    return out


class PostgresEventLog:
    """The event log, tenants and doorbell in a PostgreSQL database (``url``)."""

    shared = True
    rings = True

    def __init__(self, url: str, *, max_size: int = 4) -> None:
        if psycopg is None:
            raise StoreError("postgresql:// needs psycopg 3: pip install 'turnfsm[postgres]'")
        self.url = url
        self._max_size = max_size
        self._pool: Any = None
        self.channel = ""

    def _error(self, exc: BaseException) -> StoreError:
        return StoreError(f"{redact(self.url)}: event log: {type(exc).__name__}: {_said(exc)}")

    async def open(self) -> None:
        if self._pool is not None:
            return
        try:
            async with await psycopg.AsyncConnection.connect(self.url, connect_timeout=10) as conn:
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                    await conn.execute(_TABLES.encode())
                cur = await conn.execute("SELECT current_database(), current_schema()")
                row = await cur.fetchone()
        except psycopg.Error as exc:
            raise self._error(exc) from exc
        where = f"{row[0]}.{row[1]}" if row is not None else ""
        self.channel = "turnfsm_events_" + hashlib.sha256(where.encode()).hexdigest()[:16]
        pool = AsyncConnectionPool(
            self.url,
            min_size=1,
            max_size=self._max_size,
            open=False,
            kwargs={"autocommit": True},
            name="turnfsm-events",
            check=check_connection,
        )
        try:
            await pool.open(wait=True, timeout=30)
        except Exception as exc:
            await pool.close()
            raise self._error(exc) from exc
        self._pool = pool

    async def _run(self, fn: Any, *, transaction: bool = False) -> Any:
        if self._pool is None:
            await self.open()
        try:
            async with self._pool.connection() as conn:
                if transaction:
                    async with conn.transaction():
                        return await fn(conn)
                return await fn(conn)
        except psycopg.Error as exc:
            raise self._error(exc) from exc

    async def add(self, rows: Sequence[LogRow], notes: Sequence[LogNote]) -> None:
        """One statement: the rows inserted and the notes rung (``pg_notify``,
        in order), both delivered when it commits."""
        if not rows and not notes:
            return
        document = json.dumps(
            {"r": [list(r) for r in rows], "n": payloads(notes) if notes else []},
            ensure_ascii=False,
        )

        async def write(conn: Any) -> None:
            await conn.execute(_ADD, (document, self.channel))

        await self._run(write)

    async def after(
        self, context_id: str, after: int, upto: int | None = None
    ) -> list[tuple[int, str, str]]:
        async def read(conn: Any) -> list[tuple[int, str, str]]:
            cur = await conn.execute(
                "SELECT seq, kind, data FROM server_events WHERE context_id = %s AND seq > %s "
                "AND seq <= %s ORDER BY seq",
                (context_id, after, upto if upto is not None else 1 << 62),
            )
            return [(int(a), str(b), str(c)) for a, b, c in await cur.fetchall()]

        found: list[tuple[int, str, str]] = await self._run(read)
        return found

    async def newest(self, context_ids: Sequence[str]) -> dict[str, int]:
        async def read(conn: Any) -> dict[str, int]:
            cur = await conn.execute(
                "SELECT context_id, max(seq) FROM server_events WHERE context_id = ANY(%s) "
                "GROUP BY context_id",
                (list(context_ids),),
            )
            return {str(a): int(b) for a, b in await cur.fetchall()}

        if not context_ids:
            return {}
        found: dict[str, int] = await self._run(read)
        return found

    async def forget(self, context_ids: Sequence[str]) -> None:
        async def delete(conn: Any) -> None:
            ids = list(context_ids)
            await conn.execute("DELETE FROM server_events WHERE context_id = ANY(%s)", (ids,))
            await conn.execute(
                "DELETE FROM server_context_tenants WHERE context_id = ANY(%s)", (ids,)
            )

        await self._run(delete, transaction=True)

    async def listen(self, deliver: Deliver, on_connect: OnConnect) -> None:
        if self._pool is None:
            await self.open()
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.url, connect_timeout=10, autocommit=True
                ) as conn:
                    await conn.execute(f'LISTEN "{self.channel}"'.encode())
                    await on_connect()
                    async for n in conn.notifies():
                        for note in parse_payload(n.payload):
                            deliver(note)
            except psycopg.Error:
                pass  # the database went away: listen again, and say so (on_connect)
            await anyio.sleep(RECONNECT_DELAY)

    async def set_tenant(self, context_id: str, tenant: str) -> None:
        async def write(conn: Any) -> None:
            await conn.execute(
                "INSERT INTO server_context_tenants (context_id, tenant) VALUES (%s, %s) "
                "ON CONFLICT (context_id) DO UPDATE SET tenant = excluded.tenant",
                (context_id, tenant),
            )

        await self._run(write)

    async def tenant(self, context_id: str) -> str | None:
        async def read(conn: Any) -> str | None:
            cur = await conn.execute(
                "SELECT tenant FROM server_context_tenants WHERE context_id = %s", (context_id,)
            )
            row = await cur.fetchone()
            return str(row[0]) if row is not None else None

        found: str | None = await self._run(read)
        return found

    async def tenants(self) -> dict[str, str]:
        async def read(conn: Any) -> dict[str, str]:
            cur = await conn.execute("SELECT context_id, tenant FROM server_context_tenants")
            return {str(a): str(b) for a, b in await cur.fetchall()}

        found: dict[str, str] = await self._run(read)
        return found

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
