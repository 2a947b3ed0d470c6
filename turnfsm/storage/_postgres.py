"""The PostgreSQL store (``postgresql://user@host:port/db``).

The tables are the SQLite store's (see :mod:`turnfsm.storage._sqlite`), with
the same append-only shape: one row per message, per branch position and per
step; a commit updates the context's row and inserts rows, and rewrites no
history (only a replaced message, a tool-call decision, is updated in place).
Every row carries the ``schema_version`` it was written with and is validated
strictly on read; an error names the database, the table, the row and the
column.

The table layout itself is versioned: ``turnfsm_meta.store_format`` is the
number of :data:`MIGRATIONS` applied (:mod:`turnfsm.storage._pg_schema`). A
new, empty database gets them all when the store first opens it (unless it
is opened with ``create=False``); a database of an older layout is refused
with a :class:`~turnfsm.errors.StoreError` naming ``turnfsm db upgrade
--store URL``, which applies the missing ones (:func:`upgrade`); a newer one
is a :class:`~turnfsm.errors.SchemaVersionError` (upgrade turnfsm).

A commit is one statement on a connection of a ``psycopg_pool`` pool: the
``turnfsm_commit`` function of the layout, given the commit as one JSON
document (see :data:`MIGRATIONS`, 4). When it names a lease, the lease's row
is locked first (``SELECT ... FOR UPDATE``, or, for a commit that takes the
lease, an ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` that applies only
from the token just before), so an acquire by another owner waits for the
commit or happens before it; then the version check is the ``UPDATE contexts
... WHERE id = ... AND version = ...`` that writes the small fields. A commit
that is refused stores nothing: the function raises, and the store makes the
commit again as separate statements in one transaction (:mod:`turnfsm.storage._pg_commit`), which
say why with the store's typed errors (or bring an older row up to date and
apply it). Locks are taken in one order everywhere (a lease row before its
context row). A load is one statement too, and so are a lease's acquire and
a claim.

This module holds the store's face: create, load, commit, the reads and
delete. How a commit is written is :mod:`turnfsm.storage._pg_commit`; the
leases, the claim and the doorbell are :mod:`turnfsm.storage._pg_leases`;
the outline and pages are :mod:`turnfsm.storage._pg_reads`. psycopg (``pip
install 'turnfsm[postgres]'``) is imported by :mod:`turnfsm.storage._pg_schema`
alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..errors import ContextNotFound, LeaseLost, StoreError
from ..model import SCHEMA_VERSION, Branch, ChatContext, MessageNode
from ..records import to_json
from ._base import Commit, ContextSummary, StepLog, Store, WorkDoorbell, WorkQueue, in_order
from ._pg_commit import (
    COMMIT,
    commit_document,
    commit_statements,
    current_token,
    put_branches,
    refused_token,
)
from ._pg_leases import LeaseRows
from ._pg_reads import PartialReads
from ._pg_schema import (
    MIGRATIONS,
    STORE_FORMAT,
    WORK_CHANNEL,
    check_connection,
    psycopg,
    redact,
    upgrade,
)
from ._schema import check_version, context_problems, summary_of_config
from ._sql import (
    INSERT_CONTEXT,
    INSERT_MESSAGE,
    Places,
    branch_of,
    context_of,
    context_row,
    message_of,
    pg,
    step_of,
)

__all__ = [
    "MIGRATIONS",
    "STORE_FORMAT",
    "WORK_CHANNEL",
    "PostgresStore",
    "check_connection",
    "redact",
    "upgrade",
]

_V = SCHEMA_VERSION

_LOAD = (
    "SELECT c.seq, c.schema_version, c.id, c.parent_id, c.config, c.active_branch, c.state, "
    "c.created_at, c.updated_at, c.version, c.event_seq, c.progress, "
    "bm.branch, bm.message_id, bm.schema_version, br.name, br.schema_version, br.body, "
    "m.id, m.schema_version, m.body FROM contexts AS c "
    "LEFT JOIN LATERAL (SELECT array_agg(branch ORDER BY branch, pos) AS branch, "
    "array_agg(message_id ORDER BY branch, pos) AS message_id, "
    "array_agg(schema_version ORDER BY branch, pos) AS schema_version "
    "FROM branch_messages WHERE ctx = c.seq) AS bm ON true "
    "LEFT JOIN LATERAL (SELECT array_agg(name ORDER BY seq) AS name, "
    "array_agg(schema_version ORDER BY seq) AS schema_version, "
    "array_agg(body ORDER BY seq) AS body FROM branches WHERE ctx = c.seq) AS br ON true "
    "LEFT JOIN LATERAL (SELECT array_agg(id ORDER BY seq) AS id, "
    "array_agg(schema_version ORDER BY seq) AS schema_version, "
    "array_agg(body ORDER BY seq) AS body FROM messages WHERE ctx = c.seq) AS m ON true "
    "WHERE c.id = %s"
)
"""A context whole, in one statement: its row, then its branch positions (by
branch and position), its branches and its messages (in the order they were
stored), each as parallel arrays."""
_INSERT_CONTEXT = pg(INSERT_CONTEXT)
_INSERT_MESSAGE = pg(INSERT_MESSAGE)


class PostgresStore(LeaseRows, PartialReads, Store, WorkQueue, WorkDoorbell):
    """A store in a PostgreSQL database (see the module docstring).

    ``url`` is a libpq connection URL (``postgresql://user:password@host:5432/db``;
    ``?host=/socket/dir`` for a unix socket). The pool (``min_size`` to
    ``max_size`` connections) is opened on first use, after the database's
    layout was checked (and, with ``create``, made in an empty database).
    """

    leases_in_commits = True

    def __init__(
        self, url: str, *, create: bool = True, min_size: int = 1, max_size: int = 8
    ) -> None:
        super().__init__(url, create=create, min_size=min_size, max_size=max_size)
        self._places = Places(redact(url))

    def __repr__(self) -> str:
        return f"PostgresStore({redact(self.url)!r})"

    # ------------------------------------------------------------------ Store

    async def create(self, context: ChatContext) -> None:
        async def create(conn: Any) -> None:
            cur = await conn.execute(
                _INSERT_CONTEXT + " ON CONFLICT (id) DO NOTHING RETURNING seq",
                context_row(context),
            )
            row = await cur.fetchone()
            if row is None:
                raise StoreError(f"context {context.id!r} already exists")
            seq = row[0]
            await put_branches(conn, seq, context.branches.values())
            if context.message_pool:
                async with conn.cursor() as c:
                    await c.executemany(
                        _INSERT_MESSAGE,
                        [
                            (seq, n.id, _V, to_json(n).decode())
                            for n in context.message_pool.values()
                        ],
                    )

        await self._run(create, transaction=True)

    async def load(self, context_id: str) -> ChatContext:
        """One statement: the context's row with its branch positions, branches
        and messages aggregated beside it (one snapshot, one round trip)."""

        async def read(conn: Any) -> Any:
            cur = await conn.execute(_LOAD, (context_id,), binary=True)
            return await cur.fetchone()

        found = await self._run(read)
        if found is None:
            raise ContextNotFound(context_id)
        return self._context_of_load(context_id, found)

    def _context_of_load(self, context_id: str, found: Sequence[Any]) -> ChatContext:
        """The context of a row of ``_LOAD``, every part validated strictly."""
        places = self._places
        head = found[:12]
        bm_branch, bm_ids, bm_versions, br_names, br_versions, br_bodies = found[12:18]
        m_ids, m_versions, m_bodies = found[18:21]
        ctx = context_of(places, head, check_columns=False)
        positions: dict[str, list[str]] = {}
        for branch, mid, version in zip(
            bm_branch or (), bm_ids or (), bm_versions or (), strict=True
        ):
            if version != _V:
                check_version(version, where=places.where(context_id, f", branch {branch!r}"))
            positions.setdefault(branch, []).append(mid)
        branches: dict[str, Branch] = {}
        for name, version, body in zip(
            br_names or (), br_versions or (), br_bodies or (), strict=True
        ):
            branches[name] = branch_of(
                places, context_id, name, version, body, positions.get(name, [])
            )
        pool: dict[str, MessageNode] = {}
        for mid, version, body in zip(m_ids or (), m_versions or (), m_bodies or (), strict=True):
            pool[mid] = message_of(places, context_id, mid, version, body)
        ctx.branches = branches
        ctx.message_pool = pool
        problems = context_problems(ctx)
        if problems:
            loc, problem = problems[0]
            raise StoreError(f"{places.place(context_id, loc)}: {problem}")
        return ctx

    # ------------------------------------------------------------------ commit

    async def commit(self, commit: Commit) -> None:
        """One statement (``turnfsm_commit``, one round trip) in the common case.
        When it misses, nothing of it was stored, and the commit is made again
        as separate statements in one transaction
        (:func:`~turnfsm.storage._pg_commit.commit_statements`): they say why
        with the errors they always raised (or, for an older row, bring it up
        to date and apply the commit)."""
        document = commit_document(commit)
        if document is None:  # a shape the function does not take: the statements
            await self._run(
                lambda conn: commit_statements(conn, self._places, commit), transaction=True
            )
            return

        async def one(conn: Any) -> None:
            try:
                await conn.execute(COMMIT, (document,))
                return
            except psycopg.Error as exc:
                if exc.sqlstate == "TF001":
                    raise LeaseLost(
                        commit.context_id, refused_token(commit), current_token(exc)
                    ) from None
                if exc.sqlstate != "TF002":
                    raise
            async with conn.transaction():
                await self._commit_tx(conn, commit)

        await self._run(one)

    async def _commit_tx(self, conn: Any, commit: Commit) -> None:
        """The commit as separate statements, in the caller's transaction."""
        await commit_statements(conn, self._places, commit)

    # ------------------------------------------------------------------ reads

    async def list_ids(self) -> list[str]:
        async def read(conn: Any) -> list[str]:
            cur = await conn.execute("SELECT id FROM contexts ORDER BY seq")
            return [r[0] for r in await cur.fetchall()]

        ids: list[str] = await self._run(read)
        return ids

    async def head(self, context_id: str) -> tuple[str, int]:
        """The context's state and version, from its row (``ContextHeads``)."""

        async def read(conn: Any) -> tuple[str, int]:
            cur = await conn.execute(
                "SELECT state, version FROM contexts WHERE id = %s", (context_id,)
            )
            row = await cur.fetchone()
            if row is None:
                raise ContextNotFound(context_id)
            return str(row[0]), int(row[1])

        found: tuple[str, int] = await self._run(read)
        return found

    async def list_contexts(self) -> list[ContextSummary]:
        return await self._summaries("", ())

    async def list_children(self, parent_id: str) -> list[ContextSummary]:
        return await self._summaries("WHERE parent_id = %s ", (parent_id,))

    async def _summaries(self, where: str, params: tuple[str, ...]) -> list[ContextSummary]:
        """The summaries of the rows ``where`` selects, oldest first."""

        async def read(conn: Any) -> list[ContextSummary]:
            cur = await conn.execute(
                "SELECT id, state, version, updated_at, parent_id, config FROM contexts "
                f"{where}ORDER BY seq",
                params,
            )
            out = []
            for cid, state, version, updated, parent, config in await cur.fetchall():
                try:  # a row whose summary cannot be read is left out (load raises)
                    at = datetime.fromisoformat(updated)
                except ValueError:
                    continue
                title, model, archived = summary_of_config(config)
                out.append(ContextSummary(cid, state, version, at, parent, title, model, archived))
            return out

        found: list[ContextSummary] = await self._run(read)
        return found

    async def delete(self, context_id: str) -> None:
        async def delete(conn: Any) -> None:
            await conn.execute("DELETE FROM leases WHERE context_id = %s", (context_id,))
            cur = await conn.execute("DELETE FROM contexts WHERE id = %s", (context_id,))
            if cur.rowcount != 1:
                raise ContextNotFound(context_id)

        await self._run(delete, transaction=True)

    async def steps(self, context_id: str) -> list[StepLog]:
        async def read(conn: Any) -> list[StepLog]:
            cur = await conn.execute("SELECT seq FROM contexts WHERE id = %s", (context_id,))
            head = await cur.fetchone()
            if head is None:
                raise ContextNotFound(context_id)
            cur = await conn.execute(
                "SELECT schema_version, version, from_state, trigger, to_state, at, detail, "
                "lease_token, lease_owner FROM steps WHERE ctx = %s ORDER BY seq",
                head,
            )
            out = []
            places = self._places
            for schema_version, version, a, t, b, at, detail, token, owner in await cur.fetchall():
                row = places.row(context_id, "steps", f"version {version!r}")
                if schema_version != _V:
                    check_version(schema_version, where=places.where(context_id, ", steps"))
                out.append(step_of(row, version, a, t, b, at, detail, token, owner))
            return out

        found: list[StepLog] = await self._read(read)
        return found

    async def load_messages(self, context_id: str, ids: Sequence[str]) -> list[MessageNode]:
        wanted = list(dict.fromkeys(ids))

        async def read(conn: Any) -> dict[str, MessageNode]:
            cur = await conn.execute("SELECT seq FROM contexts WHERE id = %s", (context_id,))
            head = await cur.fetchone()
            if head is None:
                raise ContextNotFound(context_id)
            cur = await conn.execute(
                "SELECT id, schema_version, body FROM messages WHERE ctx = %s AND id = ANY(%s)",
                (head[0], wanted),
            )
            return {
                mid: message_of(self._places, context_id, mid, version, body)
                for mid, version, body in await cur.fetchall()
            }

        found: dict[str, MessageNode] = await self._read(read)
        return in_order(context_id, ids, found)

    async def aclose(self) -> None:
        """Close the pool (and the doorbell's connection); harmless twice. A call
        after it raises StoreError."""
        self._closed = True
        pool, self._pool = self._pool, None
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(Exception):
                await listener.close()
        if pool is not None:
            await pool.close()
