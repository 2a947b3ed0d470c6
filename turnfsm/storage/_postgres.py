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
commit again as separate statements in one transaction (:meth:`PostgresStore._commit_tx`), which
say why with the store's typed errors (or bring an older row up to date and
apply it). Locks are taken in one order everywhere (a lease row before its
context row). A load is one statement too, and so are a lease's acquire and
a claim.

psycopg (``pip install 'turnfsm[postgres]'``) is imported by
:mod:`turnfsm.storage._pg_schema` alone.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from ..errors import ContextNotFound, LeaseLost, StoreError
from ..model import SCHEMA_VERSION, Branch, ChatContext, MessageNode
from ..records import to_json
from ..states import RESTING
from ._base import Commit, ContextSummary, Lease, StepLog, Store, WorkDoorbell, WorkQueue, in_order
from ._pg_reads import PartialReads
from ._pg_schema import (
    MIGRATIONS,
    STORE_FORMAT,
    WORK_CHANNEL,
    PostgresDatabase,
    check_connection,
    psycopg,
    redact,
    said,
    upgrade,
)
from ._schema import check_version, context_problems, summary_of_config
from ._sql import (
    DELETE_POSITIONS,
    HEAD_COLUMNS,
    INSERT_CONTEXT,
    INSERT_MESSAGE,
    INSERT_POSITIONS,
    INSERT_STEPS,
    NEXT_POSITION,
    RELEASE,
    RENEW,
    REPLACE_MESSAGE,
    UPSERT_BRANCH,
    UPSERT_MESSAGE,
    Places,
    branch_of,
    commit_rows,
    context_of,
    context_row,
    message_of,
    pg,
    positions,
    refused_update,
    step_of,
    ts,
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
_RESTING = frozenset(s.value for s in RESTING)

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
_ACQUIRE = (
    "WITH ctx AS (SELECT 1 FROM contexts WHERE id = %s), "
    "taken AS (INSERT INTO leases AS l (context_id, owner, token, expires_at) "
    "SELECT %s, %s, 1, %s FROM ctx ON CONFLICT (context_id) DO UPDATE "
    "SET owner = excluded.owner, token = l.token + 1, expires_at = excluded.expires_at "
    "WHERE NOT (l.token > 0 AND l.owner IS NOT NULL AND l.owner <> excluded.owner "
    "AND %s < l.expires_at AND l.token IS DISTINCT FROM %s::bigint) RETURNING l.token) "
    "SELECT EXISTS (SELECT 1 FROM ctx), (SELECT token FROM taken)"
)
"""acquire_lease in one statement: whether the context exists, and the new
token (NULL when another owner holds the lease: ``lease_is_held``)."""
_INSERT_CONTEXT = pg(INSERT_CONTEXT)
_UPSERT_BRANCH = pg(UPSERT_BRANCH)
_DELETE_POSITIONS = pg(DELETE_POSITIONS)
_INSERT_POSITIONS = pg(INSERT_POSITIONS)
_INSERT_MESSAGE = pg(INSERT_MESSAGE)
_UPSERT_MESSAGE = pg(UPSERT_MESSAGE)
_REPLACE_MESSAGE = pg(REPLACE_MESSAGE)
_NEXT_POSITION = pg(NEXT_POSITION)
_INSERT_STEPS = pg(INSERT_STEPS)
_RELEASE = pg(RELEASE)
_RENEW = pg(RENEW)

_COMMIT = "SELECT turnfsm_commit(%s::jsonb)"
"""A commit as one statement (the function of migration 4), its fields as one
JSON document (one parameter: cheaper to send than many arrays)."""


def _commit_document(commit: Commit) -> str | None:
    """The JSON document ``turnfsm_commit`` takes for ``commit``; None for one it
    does not take (a message appended twice, which the statements store as an
    insert then an update). Stored texts (bodies, details) are JSON strings in
    it, so that the function stores them as the statements would."""
    appended = commit.appended
    if len({node.id for _, node in appended}) != len(appended):
        return None
    take = commit.take_lease if commit.lease_token is not None else None
    token = commit.lease_token
    # branches stored whole: a name given twice keeps its first place and its
    # last body and positions, as one write after the other would
    branches: dict[str, Branch] = {}
    for b in commit.branches:
        branches[b.name] = b
    document = {
        "id": commit.context_id,
        "ev": commit.expected_version,
        "v": commit.version,
        "sv": _V,
        "st": commit.state,
        "at": ts(commit.updated_at),
        "es": commit.event_seq,
        "pg": to_json(commit.progress).decode(),
        "ab": commit.active_branch,
        "cf": None if commit.config is None else to_json(commit.config).decode(),
        "tk": token,
        "ow": None if token is None else commit.lease_owner,
        "tt": None if take is None else take.token,
        "to": None if take is None else take.owner,
        "te": None if take is None else take.expires_at,
        "rl": commit.release_lease,
        # handed off: away from rest with its lease released, the context is
        # work for claim_expired; ring the workers' doorbell (delivered when
        # the statement commits, and not at all if it fails)
        "nt": commit.release_lease and commit.state not in _RESTING,
        "br": [[b.name, to_json(b, exclude={"message_ids"}).decode()] for b in branches.values()],
        "bm": [
            [b.name, pos, mid] for b in branches.values() for pos, mid in enumerate(b.message_ids)
        ],
        "rp": [[n.id, to_json(n).decode()] for n in commit.replaced],
        "ap": [[name, n.id, to_json(n).decode()] for name, n in appended],
        "s": [
            [
                x.version,
                x.from_state,
                x.trigger,
                x.to_state,
                ts(x.at),
                None if x.detail is None else json.dumps(x.detail, ensure_ascii=False),
            ]
            for x in commit.steps
        ],
    }
    return json.dumps(document, ensure_ascii=False, allow_nan=False)


def _token_of(commit: Commit) -> int:
    """The token a refused commit's LeaseLost names (as ``_commit_tx`` does)."""
    take = commit.take_lease
    if take is not None and commit.lease_token is not None:
        return take.token
    assert commit.lease_token is not None
    return commit.lease_token


def _current(exc: Any) -> int | None:
    """The lease's current token that ``turnfsm_commit`` reports (DETAIL)."""
    detail = exc.diag.message_detail or ""
    try:
        found = int(detail)
    except ValueError:
        return None
    return found if found > 0 else None


class PostgresStore(PostgresDatabase, PartialReads, Store, WorkQueue, WorkDoorbell):
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
        self._listener: Any = None
        """The connection that listens on WORK_CHANNEL (``wait_for_work``)."""

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
            await self._put_branches(conn, seq, context.branches.values())
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

    async def _put_branches(
        self, conn: Any, seq: int, branches: Iterable[Branch], replace: bool = False
    ) -> None:
        async with conn.cursor() as c:
            for b in branches:
                await c.execute(
                    _UPSERT_BRANCH,
                    (seq, b.name, _V, to_json(b, exclude={"message_ids"}).decode()),
                )
                if replace:
                    await c.execute(_DELETE_POSITIONS, (seq, b.name))
                if b.message_ids:
                    await c.executemany(
                        _INSERT_POSITIONS,
                        [(seq, b.name, i, mid, _V) for i, mid in enumerate(b.message_ids)],
                    )

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
        as the statements of :meth:`_commit_tx` in one transaction: they say
        why with the errors they always raised (or, for an older row, bring it
        up to date and apply the commit)."""
        document = _commit_document(commit)
        if document is None:  # a shape the function does not take: the statements
            await self._run(lambda conn: self._commit_tx(conn, commit), transaction=True)
            return

        async def one(conn: Any) -> None:
            try:
                await conn.execute(_COMMIT, (document,))
                return
            except psycopg.Error as exc:
                if exc.sqlstate == "TF001":
                    raise LeaseLost(commit.context_id, _token_of(commit), _current(exc)) from None
                if exc.sqlstate != "TF002":
                    raise
            async with conn.transaction():
                await self._commit_tx(conn, commit)

        await self._run(one)

    async def _commit_tx(self, conn: Any, commit: Commit) -> None:
        cid = commit.context_id
        take = commit.take_lease if commit.lease_token is not None else None
        if take is not None:
            # the lease is taken only from the token just before, released or ours
            cur = await conn.execute(
                "INSERT INTO leases AS l (context_id, owner, token, expires_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (context_id) DO UPDATE SET "
                "owner = excluded.owner, token = excluded.token, "
                "expires_at = excluded.expires_at "
                "WHERE l.token = %s AND (l.owner IS NULL OR l.owner = %s) RETURNING token",
                (
                    cid,
                    None if commit.release_lease else take.owner,
                    take.token,
                    take.expires_at,
                    take.token - 1,
                    take.owner,
                ),
            )
            if await cur.fetchone() is None:
                current = await self._token(conn, cid)
                raise LeaseLost(cid, take.token, current)
        elif commit.lease_token is not None:
            await self._check_fence(conn, cid, commit.lease_token)
        rows = commit_rows(commit, mark="%s")
        cur = await conn.execute(rows.update, rows.params)
        row = await cur.fetchone()
        if row is None:
            await self._refused(conn, commit)  # raises, or brings an old row up to date
            cur = await conn.execute(rows.update, rows.params)
            row = await cur.fetchone()
            if row is None:  # pragma: no cover - _refused explains every miss
                raise StoreError(f"context {cid!r}: the commit was not applied")
        seq = row[0]
        if commit.branches:
            await self._put_branches(conn, seq, commit.branches, replace=True)
        for body, mid in rows.replaced:
            cur = await conn.execute(_REPLACE_MESSAGE, (_V, body, seq, mid))
            if cur.rowcount != 1:
                raise StoreError(
                    f"commit replaces message {mid!r} of context {cid!r}, which is not stored"
                )
        if rows.appended:
            last = {}
            for name in dict.fromkeys(name for name, _, _ in rows.appended):
                cur = await conn.execute(_NEXT_POSITION, (seq, name, seq, name))
                last[name] = await cur.fetchone()
            placed = positions(commit, seq, rows, last)
            async with conn.cursor() as c:
                await c.executemany(
                    _UPSERT_MESSAGE, [(seq, mid, _V, body) for _name, mid, body in rows.appended]
                )
                await c.executemany(_INSERT_POSITIONS, placed)
        if rows.steps:
            async with conn.cursor() as c:
                await c.executemany(_INSERT_STEPS, [(seq, _V, *step) for step in rows.steps])
        if take is None and commit.release_lease and commit.lease_token is not None:
            await conn.execute(_RELEASE, (cid, commit.lease_token))
        if commit.release_lease and commit.state not in _RESTING:
            # handed off: away from rest with its lease released, the context is
            # work for claim_expired; ring the workers' doorbell (delivered when
            # this transaction commits, and not at all if it rolls back)
            await conn.execute(f"NOTIFY {WORK_CHANNEL}")

    @staticmethod
    async def _check_fence(conn: Any, context_id: str, token: int) -> None:
        """The fence of a commit under a lease: lock the lease's row and refuse
        with LeaseLost unless ``token`` is still its token (another owner that
        acquired or claimed it since has a larger one)."""
        cur = await conn.execute(
            "SELECT token FROM leases WHERE context_id = %s FOR UPDATE", (context_id,)
        )
        found = await cur.fetchone()
        current = found[0] if found is not None and found[0] > 0 else None
        if current != token:
            raise LeaseLost(context_id, token, current)

    @staticmethod
    async def _token(conn: Any, context_id: str) -> int | None:
        cur = await conn.execute("SELECT token FROM leases WHERE context_id = %s", (context_id,))
        row = await cur.fetchone()
        return row[0] if row is not None and row[0] > 0 else None

    async def _refused(self, conn: Any, commit: Commit) -> None:
        """The version check missed: say why, or (an older schema version) bring
        the context row up to date so that the check can be made again
        (:func:`~turnfsm.storage._sql.refused_update`)."""
        cur = await conn.execute(
            f"SELECT {HEAD_COLUMNS} FROM contexts WHERE id = %s FOR UPDATE", (commit.context_id,)
        )
        head = await cur.fetchone()
        update, params = refused_update(self._places, commit, head, check_columns=False)
        await conn.execute(pg(update), params)

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

    async def wait_for_work(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the doorbell: a commit that handed a
        context off (:data:`WORK_CHANNEL`). True when it rang (every notification
        that came meanwhile is taken), False when the time is up. The first call opens
        a connection of its own that listens from then on; a lost connection is
        opened again by the next call. A worker polls ``claim_expired`` after
        each wait anyway, so a notification lost with a connection delays work
        by one timeout at most."""
        await self._get_pool()  # the layout's checks first
        conn = self._listener
        try:
            if conn is None or conn.closed:
                conn = await psycopg.AsyncConnection.connect(
                    self.url, connect_timeout=10, autocommit=True
                )
                await conn.execute(f"LISTEN {WORK_CHANNEL}")
                self._listener = conn
            rang = False
            async for _ in conn.notifies(timeout=seconds, stop_after=1):
                rang = True
            if rang:  # the rest of a burst: one claim answers them all
                async for _ in conn.notifies(timeout=0.001):
                    pass
            return rang
        except psycopg.Error as exc:
            self._listener = None
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
            where = f"{redact(self.url)}: the doorbell's connection"
            raise StoreError(f"{where}: {said(exc)}") from exc

    # ------------------------------------------------------------------ leases
    #
    # One row per context that was ever leased, keyed by the context id. Every
    # write locks that row (FOR UPDATE, or an INSERT ... ON CONFLICT that
    # updates it), so a lease write and a commit under a lease of the same
    # context are applied one after the other.

    async def acquire_lease(
        self,
        context_id: str,
        owner: str,
        ttl: float,
        *,
        now: float,
        take_over: int | None = None,
    ) -> Lease | None:
        async def acquire(conn: Any) -> tuple[bool, int | None]:
            # one statement: the row made (token 1) or, unless another owner
            # holds it (lease_is_held, in SQL), taken with the next token; the
            # row is locked by the INSERT ... ON CONFLICT either way
            cur = await conn.execute(
                _ACQUIRE, (context_id, context_id, owner, now + ttl, now, take_over)
            )
            found, token = await cur.fetchone()
            return bool(found), token

        found, token = await self._run(acquire)
        if not found:
            raise ContextNotFound(context_id)
        return None if token is None else Lease(context_id, owner, token, now + ttl)

    async def renew_lease(self, lease: Lease, ttl: float, *, now: float) -> Lease:
        renewed = Lease(lease.context_id, lease.owner, lease.token, now + ttl)

        async def renew(conn: Any) -> Lease:
            cur = await conn.execute(_RENEW, (renewed.expires_at, lease.context_id, lease.token))
            if cur.rowcount != 1:
                raise LeaseLost(
                    lease.context_id, lease.token, await self._token(conn, lease.context_id)
                )
            return renewed

        result: Lease = await self._run(renew)
        return result

    async def release_lease(self, lease: Lease) -> None:
        async def release(conn: Any) -> None:
            await conn.execute(_RELEASE, (lease.context_id, lease.token))

        await self._run(release)

    async def lease(self, context_id: str) -> Lease | None:
        async def read(conn: Any) -> Lease | None:
            cur = await conn.execute(
                "SELECT owner, token, expires_at FROM leases WHERE context_id = %s "
                "AND owner IS NOT NULL AND token > 0",
                (context_id,),
            )
            row = await cur.fetchone()
            return None if row is None else Lease(context_id, row[0], row[1], row[2])

        found: Lease | None = await self._run(read)
        return found

    async def claim_expired(
        self, owner: str, ttl: float, *, now: float, limit: int | None = 100
    ) -> list[Lease]:
        """Take the leases of up to ``limit`` (None: all) contexts that are away from rest
        (their state is not ``Idle``, ``AwaitingToolApproval`` or
        ``PermanentFailure``) and whose lease was released, expired at ``now``,
        or never taken, the longest waiting first (by their last commit, so a
        context handed off again goes behind those handed off before it): each
        with the next fencing token, for
        ``ttl`` seconds. Rows another engine is claiming at the same moment are
        skipped (``FOR UPDATE SKIP LOCKED``), so engines claiming at once get
        disjoint sets: each such context is resumed by one of them."""

        async def claim(conn: Any) -> list[Lease]:
            # one statement: what the function does is the three of old (rows
            # made for contexts never leased, those free locked SKIP LOCKED,
            # then taken), in one transaction
            cur = await conn.execute(
                "SELECT context_id, token FROM turnfsm_claim(%s::text, %s::float8, "
                "%s::float8, %s::bigint)",
                (owner, now, now + ttl, limit),
            )
            return [Lease(cid, owner, token, now + ttl) for cid, token in await cur.fetchall()]

        claimed: list[Lease] = await self._run(claim)
        return claimed
