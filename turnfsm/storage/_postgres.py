"""The PostgreSQL store (``postgresql://user@host:port/db``).

The tables are the SQLite store's (see :mod:`turnfsm.storage._sqlite`), with
the same append-only shape: one row per message, per branch position and per
step; a commit updates the context's row and inserts rows, and rewrites no
history (only a replaced message, a tool-call decision, is updated in place).
Every row carries the ``schema_version`` it was written with and is validated
strictly on read; an error names the database, the table, the row and the
column.

The table layout itself is versioned: ``turnfsm_meta.store_format`` is the
number of :data:`MIGRATIONS` applied. A new, empty database gets them all
when the store first opens it (unless it is opened with ``create=False``);
a database of an older layout is refused with a
:class:`~turnfsm.errors.StoreError` naming ``turnfsm db upgrade --store URL``,
which applies the missing ones (:func:`upgrade`); a newer one is a
:class:`~turnfsm.errors.SchemaVersionError` (upgrade turnfsm).

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

Only this module imports psycopg (``pip install 'turnfsm[postgres]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import threading
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
from pydantic import ValidationError

from ..errors import (
    ContextNotFound,
    LeaseLost,
    SchemaVersionError,
    StoreError,
    VersionConflict,
)
from ..model import SCHEMA_VERSION, Branch, ChatConfig, ChatContext, MessageNode, TurnProgress
from ..states import RESTING
from ._base import Commit, ContextSummary, Lease, StepLog, Store, WorkDoorbell, WorkQueue
from ._schema import (
    check_version,
    context_problems,
    json_object_column,
    json_path,
    message_from_record,
    step_detail_column,
    step_problem,
    summary_of_config,
    upcast_branch,
    upcast_context,
    validation_problem,
)

try:  # the optional dependency: ``turnfsm[postgres]``
    import psycopg
    from psycopg_pool import AsyncConnectionPool
except ModuleNotFoundError as _missing:  # pragma: no cover - depends on the install
    psycopg = None  # type: ignore[assignment]
    AsyncConnectionPool = None  # type: ignore[assignment,misc]
    _IMPORT_ERROR: ModuleNotFoundError | None = _missing
else:
    _IMPORT_ERROR = None

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

WORK_CHANNEL = "turnfsm_work"
"""The channel a commit that hands a context off (away from rest, its lease
released) notifies in its transaction: the workers' doorbell."""

MIGRATIONS: tuple[str, ...] = (
    # 1: the tables of the SQLite store
    """
    CREATE TABLE turnfsm_meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE contexts (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        schema_version INTEGER NOT NULL,
        version BIGINT NOT NULL,
        state TEXT NOT NULL,
        parent_id TEXT,
        active_branch TEXT NOT NULL,
        event_seq BIGINT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        config TEXT NOT NULL,
        progress TEXT NOT NULL
    );
    CREATE TABLE branches (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        ctx BIGINT NOT NULL REFERENCES contexts (seq) ON DELETE CASCADE,
        name TEXT NOT NULL,
        schema_version INTEGER NOT NULL,
        body TEXT NOT NULL,
        UNIQUE (ctx, name)
    );
    CREATE TABLE branch_messages (
        ctx BIGINT NOT NULL REFERENCES contexts (seq) ON DELETE CASCADE,
        branch TEXT NOT NULL,
        pos INTEGER NOT NULL,
        message_id TEXT NOT NULL,
        schema_version INTEGER NOT NULL,
        PRIMARY KEY (ctx, branch, pos)
    );
    CREATE TABLE messages (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        ctx BIGINT NOT NULL REFERENCES contexts (seq) ON DELETE CASCADE,
        id TEXT NOT NULL,
        schema_version INTEGER NOT NULL,
        body TEXT NOT NULL,
        UNIQUE (ctx, id)
    );
    CREATE TABLE steps (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        ctx BIGINT NOT NULL REFERENCES contexts (seq) ON DELETE CASCADE,
        schema_version INTEGER NOT NULL,
        version BIGINT NOT NULL,
        from_state TEXT NOT NULL,
        trigger TEXT NOT NULL,
        to_state TEXT NOT NULL,
        at TEXT NOT NULL,
        detail TEXT
    );
    CREATE INDEX steps_by_context ON steps (ctx, seq);
    CREATE TABLE leases (
        context_id TEXT PRIMARY KEY,
        owner TEXT,
        token BIGINT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    );
    """,
    # 2: what claim_expired looks for: contexts away from rest, by their lease
    """
    CREATE INDEX contexts_not_resting ON contexts (seq)
        WHERE state NOT IN ('Idle', 'AwaitingToolApproval', 'PermanentFailure');
    """,
    # 3: the fencing token and owner of the lease each step was committed under
    # (NULL for older rows and for commits without a lease)
    """
    ALTER TABLE steps ADD COLUMN lease_token BIGINT, ADD COLUMN lease_owner TEXT;
    """,
    # 4: a commit and a claim as one statement each (one round trip): what
    # PostgresStore._commit_tx and claim_expired's three statements do, in
    # functions (a commit's fields given as one JSON document). A commit that
    # misses (a lost lease, a version conflict, an older row, an unknown branch
    # or replaced message) raises with SQLSTATE TF001 (the lease: DETAIL is the
    # current token) or TF002 (anything else), so that nothing of it is
    # stored; the store then says why.
    """
    CREATE FUNCTION turnfsm_commit(p JSONB) RETURNS BIGINT LANGUAGE plpgsql AS $$
    DECLARE
        p_id TEXT := p->>'id';
        p_schema INTEGER := (p->>'sv')::INTEGER;
        p_token BIGINT := (p->>'tk')::BIGINT;
        p_owner TEXT := p->>'ow';
        p_take_token BIGINT := (p->>'tt')::BIGINT;
        p_take_owner TEXT := p->>'to';
        p_release BOOLEAN := (p->>'rl')::BOOLEAN;
        v_seq BIGINT;
        v_token BIGINT;
        v_n BIGINT;
    BEGIN
        -- the lease first (its row before the context's): taken from the token
        -- just before, released or ours; or else its token checked under a lock
        IF p_take_token IS NOT NULL THEN
            INSERT INTO leases AS l (context_id, owner, token, expires_at)
            VALUES (p_id, CASE WHEN p_release THEN NULL ELSE p_take_owner END, p_take_token,
                (p->>'te')::DOUBLE PRECISION)
            ON CONFLICT (context_id) DO UPDATE SET owner = excluded.owner,
                token = excluded.token, expires_at = excluded.expires_at
            WHERE l.token = p_take_token - 1 AND (l.owner IS NULL OR l.owner = p_take_owner)
            RETURNING token INTO v_token;
            IF v_token IS NULL THEN
                SELECT token INTO v_token FROM leases WHERE context_id = p_id;
                RAISE EXCEPTION 'turnfsm: lease lost' USING ERRCODE = 'TF001',
                    DETAIL = coalesce(v_token::TEXT, '');
            END IF;
        ELSIF p_token IS NOT NULL THEN
            SELECT token INTO v_token FROM leases WHERE context_id = p_id FOR UPDATE;
            IF v_token IS NULL OR v_token <= 0 OR v_token <> p_token THEN
                RAISE EXCEPTION 'turnfsm: lease lost' USING ERRCODE = 'TF001',
                    DETAIL = coalesce(v_token::TEXT, '');
            END IF;
        END IF;
        UPDATE contexts SET version = (p->>'v')::BIGINT, state = p->>'st',
            updated_at = p->>'at', event_seq = (p->>'es')::BIGINT, progress = p->>'pg',
            active_branch = coalesce(p->>'ab', active_branch),
            config = coalesce(p->>'cf', config)
        WHERE id = p_id AND version = (p->>'ev')::BIGINT AND schema_version = p_schema
        RETURNING seq INTO v_seq;
        IF v_seq IS NULL THEN
            RAISE EXCEPTION 'turnfsm: version check missed' USING ERRCODE = 'TF002';
        END IF;
        IF jsonb_array_length(p->'br') > 0 THEN
            INSERT INTO branches (ctx, name, schema_version, body)
            SELECT v_seq, e->>0, p_schema, e->>1 FROM jsonb_array_elements(p->'br') AS e
            ON CONFLICT (ctx, name) DO UPDATE SET
                schema_version = excluded.schema_version, body = excluded.body;
            DELETE FROM branch_messages WHERE ctx = v_seq
                AND branch IN (SELECT e->>0 FROM jsonb_array_elements(p->'br') AS e);
            INSERT INTO branch_messages (ctx, branch, pos, message_id, schema_version)
            SELECT v_seq, e->>0, (e->>1)::INTEGER, e->>2, p_schema
            FROM jsonb_array_elements(p->'bm') AS e;
        END IF;
        IF jsonb_array_length(p->'rp') > 0 THEN
            UPDATE messages AS m SET schema_version = p_schema, body = e->>1
            FROM jsonb_array_elements(p->'rp') AS e
            WHERE m.ctx = v_seq AND m.id = e->>0;
            GET DIAGNOSTICS v_n = ROW_COUNT;
            IF v_n <> jsonb_array_length(p->'rp') THEN
                RAISE EXCEPTION 'turnfsm: a replaced message is not stored'
                    USING ERRCODE = 'TF002';
            END IF;
        END IF;
        IF jsonb_array_length(p->'ap') > 0 THEN
            IF EXISTS (SELECT 1 FROM jsonb_array_elements(p->'ap') AS e WHERE NOT EXISTS (
                    SELECT 1 FROM branches WHERE ctx = v_seq AND name = e->>0)) THEN
                RAISE EXCEPTION 'turnfsm: an unknown branch' USING ERRCODE = 'TF002';
            END IF;
            INSERT INTO messages (ctx, id, schema_version, body)
            SELECT v_seq, e->>1, p_schema, e->>2 FROM jsonb_array_elements(p->'ap') AS e
            ON CONFLICT (ctx, id) DO UPDATE SET
                schema_version = excluded.schema_version, body = excluded.body;
            INSERT INTO branch_messages (ctx, branch, pos, message_id, schema_version)
            SELECT v_seq, t.b, (coalesce(
                    (SELECT max(pos) FROM branch_messages
                     WHERE ctx = v_seq AND branch = t.b), -1)
                + row_number() OVER (PARTITION BY t.b ORDER BY t.o))::INTEGER, t.i, p_schema
            FROM (SELECT e->>0 AS b, e->>1 AS i, o
                  FROM jsonb_array_elements(p->'ap') WITH ORDINALITY AS x (e, o)) AS t
            ORDER BY t.o;
        END IF;
        IF jsonb_array_length(p->'s') > 0 THEN
            INSERT INTO steps (ctx, schema_version, version, from_state, trigger, to_state, at,
                detail, lease_token, lease_owner)
            SELECT v_seq, p_schema, (e->>0)::BIGINT, e->>1, e->>2, e->>3, e->>4, e->>5,
                p_token, CASE WHEN p_token IS NULL THEN NULL ELSE p_owner END
            FROM jsonb_array_elements(p->'s') AS e;
        END IF;
        IF p_take_token IS NULL AND p_release AND p_token IS NOT NULL THEN
            UPDATE leases SET owner = NULL WHERE context_id = p_id AND token = p_token;
        END IF;
        IF (p->>'nt')::BOOLEAN THEN
            PERFORM pg_notify('turnfsm_work', '');
        END IF;
        RETURN v_seq;
    END
    $$;
    CREATE FUNCTION turnfsm_claim(
        p_owner TEXT, p_now DOUBLE PRECISION, p_expires DOUBLE PRECISION, p_limit BIGINT
    ) RETURNS TABLE (context_id TEXT, token BIGINT) LANGUAGE plpgsql AS $$
    #variable_conflict use_column
    DECLARE
        v_id TEXT;
        v_token BIGINT;
        v_taken BIGINT := 0;
    BEGIN
        -- the contexts away from rest (the resting states written out as
        -- migration 2's index has them, so that the index can serve), the
        -- longest waiting first; each one's lease taken if it is free
        -- (released, expired, or never leased: its row made, token 0) and no
        -- other claim holds its lock (SKIP LOCKED), until p_limit are taken
        -- (NULL: all). One lease row looked up at a time, by its key, rather
        -- than a join of every lease.
        FOR v_id IN
            SELECT c.id FROM contexts AS c
            WHERE c.state NOT IN ('Idle', 'AwaitingToolApproval', 'PermanentFailure')
            ORDER BY c.updated_at, c.seq
        LOOP
            EXIT WHEN p_limit IS NOT NULL AND v_taken >= p_limit;
            SELECT l.token INTO v_token FROM leases AS l
            WHERE l.context_id = v_id AND (l.owner IS NULL OR l.expires_at <= p_now)
            FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                -- held, locked by another claim, or never leased: only the
                -- last gets its row here (made and locked by this insert)
                CONTINUE WHEN EXISTS (SELECT 1 FROM leases AS l WHERE l.context_id = v_id);
                INSERT INTO leases AS l (context_id, owner, token, expires_at)
                VALUES (v_id, NULL, 0, 0) ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING
                RETURNING l.token INTO v_token;
                CONTINUE WHEN NOT FOUND;
            END IF;
            UPDATE leases AS l SET owner = p_owner, token = v_token + 1, expires_at = p_expires
            WHERE l.context_id = v_id;
            v_taken := v_taken + 1;
            context_id := v_id;
            token := v_token + 1;
            RETURN NEXT;
        END LOOP;
    END
    $$;
    """,
)
"""The table layout's migrations, in order; ``store_format`` counts those applied."""

STORE_FORMAT = len(MIGRATIONS)
"""The layout this turnfsm reads and writes (``turnfsm_meta.store_format``)."""

_HEAD_COLUMNS = (
    "seq, schema_version, id, parent_id, config, active_branch, state, created_at, "
    "updated_at, version, event_seq, progress"
)
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
_COLUMN_OF = {"active_branch_name": "active_branch", "current_state": "state"}

_LOCK_KEY = 0x7475726E66736D  # "turnfsm": the advisory lock migrations are applied under


def _need_psycopg() -> None:
    if _IMPORT_ERROR is not None:
        raise StoreError(
            "postgresql:// stores need psycopg 3 and psycopg-pool: pip install 'turnfsm[postgres]'"
        ) from _IMPORT_ERROR


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://..."
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _said(exc: BaseException) -> str:
    """An error of psycopg or libpq on one line (libpq's span several)."""
    return " ".join(str(exc).split())


def _ts(value: datetime) -> str:
    return value.isoformat()


def _upgrade_hint(url: str) -> str:
    return f"turnfsm db upgrade --store {redact(url)}"


async def _format_of(conn: Any, url: str) -> int | None:
    """The database's ``store_format``; ``None`` for a database without turnfsm's
    tables; a StoreError for a database of something else."""
    cur = await conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    )
    tables = {r[0] for r in await cur.fetchall()}
    if "turnfsm_meta" not in tables:
        if tables & {"contexts", "messages", "steps"}:
            raise StoreError(
                f"{redact(url)}: tables of something else ({', '.join(sorted(tables))}), "
                "not a turnfsm store; it was left untouched"
            )
        return None
    cur = await conn.execute("SELECT value FROM turnfsm_meta WHERE key = 'store_format'")
    row = await cur.fetchone()
    try:
        return int(row[0]) if row is not None else -1
    except ValueError:
        return -1


async def upgrade(url: str, *, to: int = STORE_FORMAT) -> tuple[int, int]:
    """Apply the migrations a database lacks, up to ``to`` (all by default), in one
    transaction under an advisory lock: ``(format before, format after)``; a
    database without turnfsm's tables gets them all. A newer layout than this
    turnfsm knows is a SchemaVersionError."""
    _need_psycopg()
    if not 1 <= to <= STORE_FORMAT:
        raise StoreError(f"no store format {to}: this turnfsm knows 1 to {STORE_FORMAT}")
    try:
        async with (
            await psycopg.AsyncConnection.connect(url, connect_timeout=10) as conn,
            conn.transaction(),
        ):
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            found = await _format_of(conn, url)
            before = found or 0
            if before < 0:
                raise StoreError(f"{redact(url)}: the turnfsm store has no valid store_format")
            if before > STORE_FORMAT:
                raise SchemaVersionError(f"{redact(url)} (store format)", before, STORE_FORMAT)
            for number in range(before + 1, to + 1):
                await conn.execute(MIGRATIONS[number - 1].encode())
            after = max(before, to)
            if after != before:
                await conn.execute(
                    "INSERT INTO turnfsm_meta (key, value) VALUES ('store_format', %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(after),),
                )
            return before, after
    except psycopg.Error as exc:
        raise StoreError(f"{redact(url)}: cannot upgrade the store: {_said(exc)}") from exc


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
        "at": _ts(commit.updated_at),
        "es": commit.event_seq,
        "pg": commit.progress.model_dump_json(),
        "ab": commit.active_branch,
        "cf": None if commit.config is None else commit.config.model_dump_json(),
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
        "br": [[b.name, b.model_dump_json(exclude={"message_ids"})] for b in branches.values()],
        "bm": [
            [b.name, pos, mid] for b in branches.values() for pos, mid in enumerate(b.message_ids)
        ],
        "rp": [[n.id, n.model_dump_json()] for n in commit.replaced],
        "ap": [[name, n.id, n.model_dump_json()] for name, n in appended],
        "s": [
            [
                x.version,
                x.from_state,
                x.trigger,
                x.to_state,
                _ts(x.at),
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


async def check_connection(conn: Any) -> None:
    """The pool's check of a connection it is about to hand out: raise if the
    server dropped it, so that the pool replaces it. A healthy idle connection
    has nothing to read, so it is passed without a round trip; one the server
    ended (a restart, ``pg_terminate_backend``, an idle timeout) has its error
    or end of file waiting, and one in any other state is suspect: those are
    asked ``""`` (psycopg_pool's own check)."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    pgconn = conn.pgconn
    if pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        try:
            readable, _, _ = select.select([pgconn.socket], [], [], 0)
        except (OSError, ValueError, psycopg.Error):
            readable = [True]
        if not readable:
            return
    await AsyncConnectionPool.check_connection(conn)


class PostgresStore(Store, WorkQueue, WorkDoorbell):
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
        _need_psycopg()
        self.url = url
        self.create_missing = create
        self._min_size = min_size
        self._max_size = max_size
        self._pool: Any = None
        self._opening: anyio.Lock | None = None
        self._closed = False
        self._listener: Any = None
        """The connection that listens on WORK_CHANNEL (``wait_for_work``)."""

    def __repr__(self) -> str:
        return f"PostgresStore({redact(self.url)!r})"

    # ------------------------------------------------------------------ opening

    async def _get_pool(self) -> Any:
        if self._closed:
            raise StoreError(f"{redact(self.url)}: the store is closed")
        if self._pool is not None:
            return self._pool
        if self._opening is None:
            self._opening = anyio.Lock()
        async with self._opening:
            if self._pool is None:
                await self._check_layout()
                pool = AsyncConnectionPool(
                    self.url,
                    min_size=self._min_size,
                    max_size=self._max_size,
                    open=False,
                    kwargs={"autocommit": True},
                    name="turnfsm",
                    # a connection the server dropped (a restart, an idle
                    # timeout) is replaced before it is handed out
                    check=check_connection,
                )
                try:
                    await pool.open(wait=True, timeout=30)
                except Exception as exc:
                    await pool.close()
                    raise StoreError(f"{redact(self.url)}: cannot connect: {_said(exc)}") from exc
                self._pool = pool
        return self._pool

    async def _check_layout(self) -> None:
        try:
            async with await psycopg.AsyncConnection.connect(
                self.url, connect_timeout=10, autocommit=True
            ) as conn:
                found = await _format_of(conn, self.url)
        except psycopg.Error as exc:
            raise StoreError(f"{redact(self.url)}: cannot connect: {_said(exc)}") from exc
        if found is None:
            if not self.create_missing:
                raise StoreError(
                    f"{redact(self.url)}: no turnfsm store in this database (it is not "
                    f"created here; make it with `{_upgrade_hint(self.url)}`)"
                )
            await upgrade(self.url)
            return
        if found < 0:
            raise StoreError(f"{redact(self.url)}: the turnfsm store has no valid store_format")
        if found > STORE_FORMAT:
            raise SchemaVersionError(f"{redact(self.url)} (store format)", found, STORE_FORMAT)
        if found < STORE_FORMAT:
            raise StoreError(
                f"{redact(self.url)}: the store's layout is format {found}, this turnfsm "
                f"needs {STORE_FORMAT}; run `{_upgrade_hint(self.url)}`"
            )

    def check_now(self) -> None:
        """Connect and check the layout at once, as the first call would (making
        it in an empty database unless opened with ``create=False``): for a
        caller that wants a bad URL or an old layout to fail before it starts.
        Blocking; it runs on a thread and event loop of its own, so it may be
        called with or without a running loop."""
        failure: list[BaseException] = []

        def check() -> None:
            try:
                asyncio.run(self._check_layout())
            except BaseException as exc:
                failure.append(exc)

        thread = threading.Thread(target=check, name="turnfsm-pg-check")
        thread.start()
        thread.join()
        if failure:
            raise failure[0]

    async def store_format(self) -> int:
        """The database's ``store_format`` (after the checks of opening)."""

        async def read(conn: Any) -> int:
            found = await _format_of(conn, self.url)
            return found or 0

        found: int = await self._run(read)
        return found

    async def _run(self, fn: Any, *, transaction: bool = False) -> Any:
        """``await fn(conn)`` on a pooled connection (in one transaction when
        ``transaction``); psycopg's errors become StoreErrors naming the database."""
        pool = await self._get_pool()
        try:
            async with pool.connection() as conn:
                if transaction:
                    async with conn.transaction():
                        return await fn(conn)
                return await fn(conn)
        except psycopg.Error as exc:
            raise StoreError(f"{redact(self.url)}: {type(exc).__name__}: {_said(exc)}") from exc

    async def _read(self, fn: Any) -> Any:
        """``fn`` in a read-only REPEATABLE READ transaction: one snapshot."""

        async def snapshot(conn: Any) -> Any:
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            return await fn(conn)

        return await self._run(snapshot, transaction=True)

    def _where(self, context_id: str, what: str = "") -> str:
        return f"{redact(self.url)}: context {context_id!r}{what}"

    def _row(self, context_id: str, table: str, key: str = "") -> str:
        key = f", {key}" if key else ""
        return f"{redact(self.url)}: table {table}, row (context {context_id!r}{key})"

    # ------------------------------------------------------------------ Store

    async def create(self, context: ChatContext) -> None:
        async def create(conn: Any) -> None:
            cur = await conn.execute(
                "INSERT INTO contexts (id, schema_version, version, state, parent_id, "
                "active_branch, event_seq, created_at, updated_at, config, progress) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING RETURNING seq",
                (
                    context.id,
                    _V,
                    context.version,
                    context.current_state,
                    context.parent_id,
                    context.active_branch_name,
                    context.event_seq,
                    _ts(context.created_at),
                    _ts(context.updated_at),
                    context.config.model_dump_json(),
                    context.progress.model_dump_json(),
                ),
            )
            row = await cur.fetchone()
            if row is None:
                raise StoreError(f"context {context.id!r} already exists")
            seq = row[0]
            await self._put_branches(conn, seq, context.branches.values())
            if context.message_pool:
                async with conn.cursor() as c:
                    await c.executemany(
                        "INSERT INTO messages (ctx, id, schema_version, body) "
                        "VALUES (%s, %s, %s, %s)",
                        [
                            (seq, n.id, _V, n.model_dump_json())
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
                    "INSERT INTO branches (ctx, name, schema_version, body) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (ctx, name) DO UPDATE SET "
                    "schema_version = excluded.schema_version, body = excluded.body",
                    (seq, b.name, _V, b.model_dump_json(exclude={"message_ids"})),
                )
                if replace:
                    await c.execute(
                        "DELETE FROM branch_messages WHERE ctx = %s AND branch = %s",
                        (seq, b.name),
                    )
                if b.message_ids:
                    await c.executemany(
                        "INSERT INTO branch_messages (ctx, branch, pos, message_id, "
                        "schema_version) VALUES (%s, %s, %s, %s, %s)",
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
        head = found[:12]
        bm_branch, bm_ids, bm_versions, br_names, br_versions, br_bodies = found[12:18]
        m_ids, m_versions, m_bodies = found[18:21]
        ctx = self._context_of(head)
        positions: dict[str, list[str]] = {}
        for branch, mid, version in zip(
            bm_branch or (), bm_ids or (), bm_versions or (), strict=True
        ):
            if version != _V:
                check_version(version, where=self._where(context_id, f", branch {branch!r}"))
            positions.setdefault(branch, []).append(mid)
        branches: dict[str, Branch] = {}
        for name, version, body in zip(
            br_names or (), br_versions or (), br_bodies or (), strict=True
        ):
            row = self._row(context_id, "branches", f"name {name!r}")
            data = json_object_column(body, f"{row}, column body")
            if version != _V:
                data = upcast_branch(
                    data, version, where=self._where(context_id, f", branch {name!r}")
                )
            data["message_ids"] = positions.get(name, [])
            try:
                branches[name] = Branch.model_validate(data)
            except ValidationError as exc:
                raise StoreError(
                    f"{row}, column body: not a valid Branch record: {validation_problem(exc)}"
                ) from exc
        pool: dict[str, MessageNode] = {}
        for mid, version, body in zip(m_ids or (), m_versions or (), m_bodies or (), strict=True):
            pool[mid] = self._message(context_id, mid, version, body)
        ctx.branches = branches
        ctx.message_pool = pool
        problems = context_problems(ctx)
        if problems:
            loc, problem = problems[0]
            raise StoreError(f"{self._place(context_id, loc)}: {problem}")
        return ctx

    def _message(self, context_id: str, mid: str, version: int, body: str) -> MessageNode:
        """One message row, validated strictly (an older schema version upcast)."""
        row = self._row(context_id, "messages", f"id {mid!r}")
        if version == _V:
            try:
                node = MessageNode.model_validate_json(body, strict=True)
            except ValidationError as exc:
                raise StoreError(f"{row}, column body: {validation_problem(exc)}") from None
        else:
            node = message_from_record(
                body, version, where=self._where(context_id, f", message {mid!r}")
            )
        if node.id != mid:
            raise StoreError(f"{row}, column body: $.id: the message is {node.id!r}")
        return node

    def _place(self, context_id: str, loc: tuple[str | int, ...]) -> str:
        if loc[0] in _COLUMN_OF:
            return f"{self._row(context_id, 'contexts')}, column {_COLUMN_OF[str(loc[0])]}"
        if loc[0] == "branches" and len(loc) > 2 and loc[2] == "message_ids":
            row = self._row(context_id, "branch_messages", f"branch {loc[1]!r}")
            return f"{row}, column message_id, {json_path(loc)}"
        if loc[0] == "branches" and len(loc) > 2:
            row = self._row(context_id, "branches", f"name {loc[1]!r}")
            return f"{row}, column body, {json_path(loc[2:])}"
        return f"{self._row(context_id, 'contexts')}, {json_path(loc)}"

    def _context_of(self, head: Sequence[Any]) -> ChatContext:
        """The context (without messages and branches) of a ``contexts`` row."""
        (_, version, cid, parent_id, config, active, state, created, updated, ver, seq, prog) = head
        row = self._row(str(cid), "contexts")
        check_version(version, where=self._where(cid))
        data: dict[str, Any] = {
            "schema_version": version,
            "id": cid,
            "parent_id": parent_id,
            "config": json_object_column(config, f"{row}, column config"),
            "active_branch_name": active,
            "current_state": state,
            "created_at": created,
            "updated_at": updated,
            "version": ver,
            "event_seq": seq,
            "progress": json_object_column(prog, f"{row}, column progress"),
        }
        if version != _V:
            data = upcast_context(data, version, where=self._where(cid))
            data["schema_version"] = _V
        for column, model in (("config", ChatConfig), ("progress", TurnProgress)):
            try:  # strictly, as the SQLite store does
                data[column] = model.model_validate_json(json.dumps(data[column]), strict=True)
            except ValidationError as exc:
                raise StoreError(f"{row}, column {column}: {validation_problem(exc)}") from None
        try:
            return ChatContext.model_validate(data)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            field = str(err["loc"][0]) if err["loc"] else ""
            column = _COLUMN_OF.get(field, field)
            raise StoreError(f"{row}, column {column}: {validation_problem(exc)}") from None

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
        sets = "version = %s, state = %s, updated_at = %s, event_seq = %s, progress = %s"
        params: list[Any] = [
            commit.version,
            commit.state,
            _ts(commit.updated_at),
            commit.event_seq,
            commit.progress.model_dump_json(),
        ]
        if commit.active_branch is not None:
            sets += ", active_branch = %s"
            params.append(commit.active_branch)
        if commit.config is not None:
            sets += ", config = %s"
            params.append(commit.config.model_dump_json())
        update = (
            f"UPDATE contexts SET {sets} WHERE id = %s AND version = %s AND schema_version = %s "
            "RETURNING seq"
        )
        params += [cid, commit.expected_version, _V]
        cur = await conn.execute(update, params)
        row = await cur.fetchone()
        if row is None:
            await self._refused(conn, commit)  # raises, or brings an old row up to date
            cur = await conn.execute(update, params)
            row = await cur.fetchone()
            if row is None:  # pragma: no cover - _refused explains every miss
                raise StoreError(f"context {cid!r}: the commit was not applied")
        seq = row[0]
        if commit.branches:
            await self._put_branches(conn, seq, commit.branches, replace=True)
        for node in commit.replaced:
            cur = await conn.execute(
                "UPDATE messages SET schema_version = %s, body = %s WHERE ctx = %s AND id = %s",
                (_V, node.model_dump_json(), seq, node.id),
            )
            if cur.rowcount != 1:
                raise StoreError(
                    f"commit replaces message {node.id!r} of context {cid!r}, which is not stored"
                )
        if commit.appended:
            next_pos: dict[str, int] = {}
            positions = []
            for name, node in commit.appended:
                pos = next_pos.get(name)
                if pos is None:
                    cur = await conn.execute(
                        "SELECT EXISTS (SELECT 1 FROM branches WHERE ctx = %s AND name = %s), "
                        "(SELECT MAX(pos) FROM branch_messages WHERE ctx = %s AND branch = %s)",
                        (seq, name, seq, name),
                    )
                    known, last = await cur.fetchone()
                    if not known:
                        raise StoreError(
                            f"commit appends to unknown branch {name!r} of context {cid!r}"
                        )
                    pos = 0 if last is None else last + 1
                next_pos[name] = pos + 1
                positions.append((seq, name, pos, node.id, _V))
            async with conn.cursor() as c:
                await c.executemany(
                    "INSERT INTO messages (ctx, id, schema_version, body) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (ctx, id) DO UPDATE SET "
                    "schema_version = excluded.schema_version, body = excluded.body",
                    [(seq, node.id, _V, node.model_dump_json()) for _, node in commit.appended],
                )
                await c.executemany(
                    "INSERT INTO branch_messages (ctx, branch, pos, message_id, schema_version) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    positions,
                )
        if commit.steps:
            async with conn.cursor() as c:
                await c.executemany(
                    "INSERT INTO steps (ctx, schema_version, version, from_state, trigger, "
                    "to_state, at, detail, lease_token, lease_owner) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    [
                        (
                            seq,
                            _V,
                            s.version,
                            s.from_state,
                            s.trigger,
                            s.to_state,
                            _ts(s.at),
                            None if s.detail is None else json.dumps(s.detail, ensure_ascii=False),
                            commit.lease_token,
                            None if commit.lease_token is None else commit.lease_owner,
                        )
                        for s in commit.steps
                    ],
                )
        if take is None and commit.release_lease and commit.lease_token is not None:
            await conn.execute(
                "UPDATE leases SET owner = NULL WHERE context_id = %s AND token = %s",
                (cid, commit.lease_token),
            )
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
        the context row up to date so that the check can be made again."""
        cid = commit.context_id
        cur = await conn.execute(
            f"SELECT {_HEAD_COLUMNS} FROM contexts WHERE id = %s FOR UPDATE", (cid,)
        )
        row = await cur.fetchone()
        if row is None:
            raise ContextNotFound(cid)
        schema_version, version = row[1], row[9]
        check_version(schema_version, where=self._where(cid))
        if version != commit.expected_version:
            raise VersionConflict(cid, commit.expected_version, version)
        ctx = self._context_of(row)  # upcast
        await conn.execute(
            "UPDATE contexts SET schema_version = %s, parent_id = %s, active_branch = %s, "
            "state = %s, created_at = %s, updated_at = %s, event_seq = %s, config = %s, "
            "progress = %s WHERE seq = %s",
            (
                _V,
                ctx.parent_id,
                ctx.active_branch_name,
                ctx.current_state,
                _ts(ctx.created_at),
                _ts(ctx.updated_at),
                ctx.event_seq,
                ctx.config.model_dump_json(),
                ctx.progress.model_dump_json(),
                row[0],
            ),
        )

    # ------------------------------------------------------------------ reads

    async def list_ids(self) -> list[str]:
        async def read(conn: Any) -> list[str]:
            cur = await conn.execute("SELECT id FROM contexts ORDER BY seq")
            return [r[0] for r in await cur.fetchall()]

        ids: list[str] = await self._run(read)
        return ids

    async def list_contexts(self) -> list[ContextSummary]:
        async def read(conn: Any) -> list[ContextSummary]:
            cur = await conn.execute(
                "SELECT id, state, version, updated_at, parent_id, config FROM contexts "
                "ORDER BY seq"
            )
            out = []
            for cid, state, version, updated, parent, config in await cur.fetchall():
                try:  # a row whose summary cannot be read is left out (load raises)
                    at = datetime.fromisoformat(updated)
                except ValueError:
                    continue
                title, model = summary_of_config(config)
                out.append(ContextSummary(cid, state, version, at, parent, title, model))
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
            for schema_version, version, a, t, b, at, detail, token, owner in await cur.fetchall():
                row = self._row(context_id, "steps", f"version {version!r}")
                if schema_version != _V:
                    check_version(schema_version, where=self._where(context_id, ", steps"))
                try:
                    when = datetime.fromisoformat(at)
                except ValueError:
                    raise StoreError(f"{row}, column at: not a timestamp: {at!r}") from None
                problem = step_problem(a, b)
                if problem is not None:
                    raise StoreError(f"{row}, column {problem}")
                detail_ = step_detail_column(row, detail)
                out.append(StepLog(version, a, t, b, when, detail_, token, owner))
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
                mid: self._message(context_id, mid, version, body)
                for mid, version, body in await cur.fetchall()
            }

        found: dict[str, MessageNode] = await self._read(read)
        out = []
        for mid in ids:
            node = found.get(mid)
            if node is None:
                raise StoreError(f"context {context_id!r} has no message {mid!r}")
            out.append(node)
        return out

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
            raise StoreError(f"{where}: {_said(exc)}") from exc

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
            cur = await conn.execute(
                "UPDATE leases SET expires_at = %s WHERE context_id = %s AND token = %s "
                "AND owner IS NOT NULL",
                (renewed.expires_at, lease.context_id, lease.token),
            )
            if cur.rowcount != 1:
                raise LeaseLost(
                    lease.context_id, lease.token, await self._token(conn, lease.context_id)
                )
            return renewed

        result: Lease = await self._run(renew)
        return result

    async def release_lease(self, lease: Lease) -> None:
        async def release(conn: Any) -> None:
            await conn.execute(
                "UPDATE leases SET owner = NULL WHERE context_id = %s AND token = %s",
                (lease.context_id, lease.token),
            )

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
