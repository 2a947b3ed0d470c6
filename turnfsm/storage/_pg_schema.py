"""The PostgreSQL store's database: its connection, and its table layout.

The layout is versioned as the SQLite store's is
(:mod:`turnfsm.storage._migrate`): ``turnfsm_meta.store_format`` is the
number of :data:`MIGRATIONS` applied. A new, empty database gets them all
when a store first opens it (unless it is opened with ``create=False``); a
database of an older layout is refused naming ``turnfsm db upgrade --store
URL``, which applies the missing ones (:func:`upgrade`).

This is the one module that imports psycopg (``pip install
'turnfsm[postgres]'``): :mod:`turnfsm.storage._postgres` and
:mod:`turnfsm.storage._pg_events` take it from here.
"""

from __future__ import annotations

import asyncio
import select
import threading
from typing import Any

import anyio

from ..errors import SchemaVersionError, StoreError
from ._migrate import FORMAT_ROW, SET_FORMAT, format_of_row, missing
from ._secrets import redact
from ._sql import pg

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
    "AsyncConnectionPool",
    "PostgresDatabase",
    "check_connection",
    "format_of",
    "need_psycopg",
    "psycopg",
    "redact",
    "said",
    "upgrade",
    "upgrade_hint",
]

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


_LOCK_KEY = 0x7475726E66736D  # "turnfsm": the advisory lock migrations are applied under


def need_psycopg() -> None:
    if _IMPORT_ERROR is not None:
        raise StoreError(
            "postgresql:// stores need psycopg 3 and psycopg-pool: pip install 'turnfsm[postgres]'"
        ) from _IMPORT_ERROR


def said(exc: BaseException) -> str:
    """An error of psycopg or libpq on one line (libpq's span several)."""
    return " ".join(str(exc).split())


def upgrade_hint(url: str) -> str:
    return f"turnfsm db upgrade --store {redact(url)}"


async def format_of(conn: Any, url: str) -> int | None:
    """The database's ``store_format``; ``None`` for a database without turnfsm's
    tables (``-1``: no valid one); a StoreError for a database of something else."""
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
    cur = await conn.execute(FORMAT_ROW)
    return format_of_row(await cur.fetchone())


async def upgrade(url: str, *, to: int = STORE_FORMAT) -> tuple[int, int]:
    """Apply the migrations a database lacks, up to ``to`` (all by default), in one
    transaction under an advisory lock: ``(format before, format after)``; a
    database without turnfsm's tables gets them all. A newer layout than this
    turnfsm knows is a SchemaVersionError."""
    need_psycopg()
    if not 1 <= to <= STORE_FORMAT:
        raise StoreError(f"no store format {to}: this turnfsm knows 1 to {STORE_FORMAT}")
    try:
        async with (
            await psycopg.AsyncConnection.connect(url, connect_timeout=10) as conn,
            conn.transaction(),
        ):
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            found = await format_of(conn, url)
            todo = missing(found, STORE_FORMAT, redact(url), to=to)
            for number in todo:
                await conn.execute(MIGRATIONS[number - 1].encode())
            before = found or 0
            if todo:
                await conn.execute(pg(SET_FORMAT), (str(to),))
            return before, max(before, to)
    except psycopg.Error as exc:
        raise StoreError(f"{redact(url)}: cannot upgrade the store: {said(exc)}") from exc


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


class PostgresDatabase:
    """A PostgreSQL store's way to its database: the layout checked (and made
    in an empty database, with ``create``) before the pool of ``min_size`` to
    ``max_size`` connections opens, on first use; psycopg's errors as
    StoreErrors naming the database (without its password)."""

    def __init__(self, url: str, *, create: bool, min_size: int, max_size: int) -> None:
        need_psycopg()
        self.url = url
        self.create_missing = create
        self._min_size = min_size
        self._max_size = max_size
        self._pool: Any = None
        self._opening: anyio.Lock | None = None
        self._closed = False

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
                    raise StoreError(f"{redact(self.url)}: cannot connect: {said(exc)}") from exc
                self._pool = pool
        return self._pool

    async def _check_layout(self) -> None:
        try:
            async with await psycopg.AsyncConnection.connect(
                self.url, connect_timeout=10, autocommit=True
            ) as conn:
                found = await format_of(conn, self.url)
        except psycopg.Error as exc:
            raise StoreError(f"{redact(self.url)}: cannot connect: {said(exc)}") from exc
        if found is None:
            if not self.create_missing:
                raise StoreError(
                    f"{redact(self.url)}: no turnfsm store in this database (it is not "
                    f"created here; make it with `{upgrade_hint(self.url)}`)"
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
                f"needs {STORE_FORMAT}; run `{upgrade_hint(self.url)}`"
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
            found = await format_of(conn, self.url)
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
            raise StoreError(f"{redact(self.url)}: {type(exc).__name__}: {said(exc)}") from exc

    async def _read(self, fn: Any) -> Any:
        """``fn`` in a read-only REPEATABLE READ transaction: one snapshot."""

        async def snapshot(conn: Any) -> Any:
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            return await fn(conn)

        return await self._run(snapshot, transaction=True)
