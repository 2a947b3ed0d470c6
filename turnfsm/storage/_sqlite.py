"""The SQLite store: the embedded default (``sqlite:///path.db``).

Layout (one database file, WAL mode)::

    turnfsm_meta     key/value: the store format version
    contexts         one row per context: its small fields as columns
                     (version, state, updated_at, event_seq, active_branch,
                     config and progress as JSON, ...)
    branches         one row per branch, without its message ids (JSON)
    branch_messages  (context, branch, position) -> message id
    messages         one row per message: ``MessageNode.model_dump_json()``
    steps            one row per committed transition, in order, with the
                     fencing token and owner of the lease it was committed
                     under (NULL without one; the columns are added to older
                     files when they are opened)
    leases           one row per context that was ever leased: owner (NULL once
                     released), fencing token, expiry (added to older files
                     when they are opened)

Every row carries the ``schema_version`` it was written with; on read, older
rows go through the upcasters of :mod:`turnfsm.storage._schema` and newer ones
are refused with :class:`~turnfsm.errors.SchemaVersionError`.

A commit is applied in one transaction (``BEGIN IMMEDIATE``, possibly shared
with other contexts' commits: see "Threads"): the version check (and the lease's
fencing token) is the ``UPDATE contexts ... WHERE id = ? AND version = ?`` that
writes the small fields; then the rows of the new messages, branch positions and steps are
inserted (replaced messages, the approval decisions, are updated in place).
Nothing of the history is rewritten, so the cost of a commit does not grow with
the history: ``tests/storage/test_sqlite.py`` checks that rows changed and bytes
written per commit are the same at 100 and at 2,000 messages. Measured (one
message and one step per commit, 4 KiB pages, WAL growth with checkpoints off):
4 rows and 25,958 bytes (6.3 pages) per commit at 100, 2,000 and 5,000
messages alike. A commit that is refused (version conflict, unknown branch,
unknown replaced message, any error) stores nothing.

Durability: ``synchronous=FULL`` by default (the WAL is synced on every
commit, so an acknowledged step survives power loss); ``synchronous="NORMAL"``
(or ``?synchronous=NORMAL`` in the URL) syncs at checkpoints only: it survives
a crash of the process, not of the machine. ``busy_timeout`` (seconds) is how
long a writer waits for another process's write lock.

Threads: sqlite3 blocks, so the store runs its calls in two threads of its own,
each with its own connection, fed by a queue (one hand-off per call, a test
counts them): the writer takes every write and applies the writes waiting
together as one group, one transaction and one sync (group commit, across
contexts); the reader runs the reads. See "plumbing" below for how a write that
fails leaves the others of its group alone. ``python -m tests.storage.test_sqlite``
prints what a commit costs called directly and through the hand-off.

A damaged file is never overwritten: before connecting, the header is checked
(a file that is not SQLite, or shorter than its header says, is refused with a
:class:`~turnfsm.errors.StoreError` naming the file), a database of another
application is refused, and any SQLite error later (``database disk image is
malformed``) is raised as a :class:`~turnfsm.errors.StoreError` naming the
file, with the transaction rolled back; from then on that store object refuses
to write (reads go on, for what is still sound).
:meth:`SQLiteStore.integrity_check` runs ``PRAGMA integrity_check``.

Damaged rows are refused the same way. SQLite lets any column hold any value,
so every column read is checked (a NULL, a number stored as text, a blob where
text belongs), the JSON columns are validated strictly by the models, and the
context as a whole must hold together (a known state, an active branch that
exists, every message a branch names stored, every parent message and source
branch known). The :class:`~turnfsm.errors.StoreError` names the file, the
table, the row and the column, and the JSON path inside a JSON column
(``table contexts, row (context 'c1'), column config: $.parameters: ...``);
nothing is changed. ``list_contexts`` leaves out a row whose summary columns
cannot be read (``load`` of it raises) and lists the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import anyio
import anyio.to_thread
from pydantic import ValidationError

from ..errors import (
    ContextNotFound,
    InvalidInput,
    LeaseLost,
    SchemaVersionError,
    StoreError,
    VersionConflict,
)
from ..model import SCHEMA_VERSION, Branch, ChatConfig, ChatContext, MessageNode, TurnProgress
from ..states import RESTING
from ._base import Commit, ContextSummary, Lease, StepLog, Store, WorkQueue, lease_is_held
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

__all__ = ["STORE_FORMAT", "SQLiteStore"]

STORE_FORMAT = 1
"""The version of the table layout (``turnfsm_meta.store_format``)."""

SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")

_HEADER = b"SQLite format 3\x00"
_V = SCHEMA_VERSION
R = TypeVar("R")
_M = TypeVar("_M", Branch, ChatContext)

_TABLES = """
CREATE TABLE IF NOT EXISTS turnfsm_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS contexts (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    schema_version INTEGER NOT NULL,
    version INTEGER NOT NULL,
    state TEXT NOT NULL,
    parent_id TEXT,
    active_branch TEXT NOT NULL,
    event_seq INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    config TEXT NOT NULL,
    progress TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS branches (
    ctx INTEGER NOT NULL,
    name TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (ctx, name)
);
CREATE TABLE IF NOT EXISTS branch_messages (
    ctx INTEGER NOT NULL,
    branch TEXT NOT NULL,
    pos INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    PRIMARY KEY (ctx, branch, pos)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages (
    ctx INTEGER NOT NULL,
    id TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (ctx, id)
);
CREATE TABLE IF NOT EXISTS steps (
    ctx INTEGER NOT NULL,
    schema_version INTEGER NOT NULL,
    version INTEGER NOT NULL,
    from_state TEXT NOT NULL,
    trigger TEXT NOT NULL,
    to_state TEXT NOT NULL,
    at TEXT NOT NULL,
    detail TEXT,
    lease_token INTEGER,
    lease_owner TEXT
);
CREATE INDEX IF NOT EXISTS steps_by_context ON steps (ctx);
"""

_HEAD_COLUMNS = (
    "seq, schema_version, id, parent_id, config, active_branch, state, created_at, "
    "updated_at, version, event_seq, progress"
)


def _ts(value: datetime) -> str:
    return value.isoformat()


_COLUMN_OF = {"active_branch_name": "active_branch", "current_state": "state"}


def _column(row: str, column: str, value: object, kind: type | tuple[type, ...]) -> None:
    """Refuse a column holding NULL or a value of another type (SQLite lets any
    column hold anything) with a StoreError naming the row and the column."""
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        names = (kind,) if isinstance(kind, type) else kind
        want = " or ".join("NULL" if k is type(None) else k.__name__ for k in names)
        raise StoreError(f"{row}, column {column}: expected {want}, found {value!r}")


def _fence(row: str, token: object, owner: object) -> tuple[int | None, str | None]:
    """A step row's ``lease_token`` and ``lease_owner`` (both NULL, or an
    integer and a text), checked like every other column."""
    _column(row, "lease_token", token, (int, type(None)))
    _column(row, "lease_owner", owner, (str, type(None)))
    assert token is None or isinstance(token, int)
    assert owner is None or isinstance(owner, str)
    return token, owner


def check_database_file(path: Path) -> None:
    """Refuse, without writing anything, a file that is not a whole SQLite database.

    A missing or empty file is fine (SQLite makes a new database). Otherwise the
    100-byte header must be SQLite's, and the file must be at least as long as
    the page count its header states (when that count is valid), so that a
    truncated database is caught before SQLite touches it.
    """
    try:
        if not path.exists():
            return
        if path.is_dir():
            raise StoreError(f"{path}: is a directory, not a SQLite database file")
        size = path.stat().st_size
        if size == 0:
            return
        with path.open("rb") as f:
            header = f.read(100)
    except OSError as exc:
        raise StoreError(f"{path}: cannot read the database file: {exc}") from exc
    if not header.startswith(_HEADER):
        raise StoreError(
            f"{path}: not a SQLite database (the file does not start with the SQLite "
            "header); it was left untouched"
        )
    if len(header) < 100:
        raise StoreError(
            f"{path}: truncated SQLite database ({size} bytes, shorter than its header); "
            "it was left untouched"
        )
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    change_counter = header[24:28]
    pages = int.from_bytes(header[28:32], "big")
    valid_for = header[92:96]
    if page_size < 512 or page_size & (page_size - 1):
        raise StoreError(
            f"{path}: damaged SQLite header (page size {page_size}); it was left untouched"
        )
    if pages and change_counter == valid_for and size < pages * page_size:
        raise StoreError(
            f"{path}: truncated SQLite database: {size} bytes, its header says "
            f"{pages} pages of {page_size} bytes ({pages * page_size} bytes); it was left "
            "untouched"
        )


class SQLiteStore(Store, WorkQueue):
    """A :class:`~turnfsm.storage.Store` in one SQLite database file.

    ``SQLiteStore("chats.db")`` opens (or creates) the file at once and raises
    :class:`~turnfsm.errors.StoreError` naming it when it cannot be used.
    ``synchronous`` is SQLite's setting (``"FULL"`` by default, or ``"NORMAL"``,
    ``"EXTRA"``, ``"OFF"``); ``busy_timeout`` is how many seconds a write waits
    for another process's lock. Missing parent directories are created.
    """

    leases_in_commits = True
    """``Commit.take_lease`` and ``Commit.release_lease`` are applied in the
    commit's own transaction (see
    :class:`~turnfsm.storage.LeasesInCommits`)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout: float = 5.0,
    ) -> None:
        mode = str(synchronous).upper()
        if mode not in SYNCHRONOUS_MODES:
            raise InvalidInput(
                "synchronous", f"must be one of {', '.join(SYNCHRONOUS_MODES)}, not {synchronous!r}"
            )
        if not busy_timeout >= 0:
            raise InvalidInput("busy_timeout", f"must be >= 0 seconds, not {busy_timeout!r}")
        self.path = Path(path)
        self.synchronous = mode
        self.busy_timeout = float(busy_timeout)
        self._damage: str | None = None
        """Set when SQLite reports the file damaged: no write is tried after that."""
        self._closed = False
        self._writeq: _Worker | None = None
        self._readq: _Worker | None = None
        self._conn: sqlite3.Connection | None = self._open()
        """The writer's connection (every write goes through it)."""
        try:
            self._rconn: sqlite3.Connection | None = self._connect()
            """The reader's connection."""
        except BaseException:
            self._conn.close()
            raise

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r}, synchronous={self.synchronous!r})"

    # ------------------------------------------------------------------ opening

    def _open(self) -> sqlite3.Connection:
        path = self.path
        check_database_file(path)
        if not path.exists():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"{path}: cannot create its directory: {exc}") from exc
        conn = self._connect()
        try:
            self._prepare(conn)
            self._prepare_leases(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,  # explicit BEGIN / COMMIT
                check_same_thread=False,  # used by its one thread (opened in another)
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open the database: {exc}") from exc
        return conn

    def _prepare(self, conn: sqlite3.Connection) -> None:
        path = self.path
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            # read before anything is written: a damaged file fails here, untouched
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
            if tables and "turnfsm_meta" not in tables:
                raise StoreError(
                    f"{path}: a SQLite database of something else (tables: "
                    f"{', '.join(sorted(tables))}), not a turnfsm store; it was left untouched"
                )
            if tables:
                self._check_format(conn)
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode is None or str(mode[0]).lower() != "wal":
                raise StoreError(f"{path}: cannot switch the database to WAL mode ({mode!r})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            if not tables:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in _TABLES.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute(
                        "INSERT OR IGNORE INTO turnfsm_meta (key, value) "
                        "VALUES ('store_format', ?)",
                        (str(STORE_FORMAT),),
                    )
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                self._check_format(conn)
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot use the database: {exc}") from exc

    def _check_format(self, conn: sqlite3.Connection) -> None:
        row = conn.execute("SELECT value FROM turnfsm_meta WHERE key = 'store_format'").fetchone()
        try:
            found = int(row[0]) if row is not None else None
        except ValueError:
            found = None
        if found is None:
            raise StoreError(f"{self.path}: the turnfsm store has no valid store_format")
        if found > STORE_FORMAT:
            raise SchemaVersionError(f"{self.path} (store format)", found, STORE_FORMAT)

    # ------------------------------------------------------------------ plumbing
    #
    # Two threads, each with its own connection, each fed by a queue (a
    # ``queue.SimpleQueue``; the waiting task's asyncio future is resolved with
    # ``loop.call_soon_threadsafe``, one call per loop and batch), started on first
    # use:
    #
    # * the writer (``_conn``) takes every write. The writes waiting in its queue
    #   when it looks are applied as one group: one ``BEGIN IMMEDIATE``, the writes
    #   in order, one ``COMMIT``, so one sync for all of them. No waiter hears of its
    #   write before that ``COMMIT`` has returned: an acknowledged write was synced
    #   (at the store's ``synchronous``). Each write keeps its own checks, and one
    #   that fails fails alone: refused before it changed a row (a version conflict,
    #   a lost lease: the checks come first), it is simply left out; failed after
    #   (an unknown branch, an SQLite error), the group's transaction is rolled
    #   back and the other writes are applied again without it, in a new one.
    #   (``total_changes`` tells the two apart. This costs less than a
    #   ``SAVEPOINT`` per write: every statement hands the GIL back and forth
    #   between the writer and the event loop.)
    # * the reader (``_rconn``) runs the reads, one at a time; in WAL mode it sees
    #   every committed write and never blocks the writer.

    def _worker(self, reader: bool) -> _Worker:
        worker = self._readq if reader else self._writeq
        if worker is None:
            if self._closed:
                raise StoreError(f"{self.path}: the store is closed")
            worker = _Worker(self, reader)
            if reader:
                self._readq = worker
            else:
                self._writeq = worker
        return worker

    async def _run(self, fn: Callable[[sqlite3.Connection], R], *, write: bool = False) -> R:
        """Run ``fn`` on the reader thread (``write``: as one write of the writer's
        next group, with the store's ``synchronous``)."""
        return await self._submit(fn, reader=not write, durable=True)

    async def _submit(
        self, fn: Callable[[sqlite3.Connection], R], *, reader: bool, durable: bool
    ) -> R:
        if self._closed:
            raise StoreError(f"{self.path}: the store is closed")
        worker = self._worker(reader)
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # another async library (trio): wait in a thread
            loop = None
        if loop is None:
            done = threading.Event()
            op = _Op(fn, durable, None, done)
            worker.put(op)
            await anyio.to_thread.run_sync(done.wait)
            if op.error is not None:
                raise op.error
            return op.result  # type: ignore[no-any-return]
        fut = loop.create_future()
        worker.put(_Op(fn, durable, loop, fut))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            # like anyio.to_thread.run_sync: a cancelled caller still waits for the
            # outcome (a write may be applied; the caller must not go on as if
            # not), then is cancelled
            while not fut.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait((fut,))
            raise

    def _call(self, fn: Callable[[sqlite3.Connection], R], write: bool = False) -> R:
        """Run ``fn`` on the writer's connection in this thread (``write``: as its
        own transaction). For tests and measurements of an idle store."""
        conn = self._conn
        if conn is None:
            raise StoreError(f"{self.path}: the store is closed")
        if write:
            self._writable()
        try:
            if not write:
                return fn(conn)
            conn.execute("BEGIN IMMEDIATE")
            result = fn(conn)
            conn.execute("COMMIT")
            return result
        except BaseException as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            err = self._translate(exc)
            if err is exc:
                raise
            raise err from exc

    def _writable(self) -> None:
        if self._damage is not None:
            raise StoreError(
                f"{self.path}: the database is damaged ({self._damage}); this store no longer "
                "writes to it. Nothing was stored; restore the file from a backup"
            )

    def _translate(self, exc: BaseException) -> BaseException:
        """The error a caller sees for ``exc`` (SQLite's errors as StoreError)."""
        if isinstance(exc, sqlite3.DatabaseError) and (
            getattr(exc, "sqlite_errorname", None) in ("SQLITE_CORRUPT", "SQLITE_NOTADB")
            or "malformed" in str(exc)
        ):
            self._damage = str(exc)
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            err: BaseException = StoreError(
                f"{self.path}: {exc} (another writer held the lock for longer than "
                f"busy_timeout={self.busy_timeout:g}s); nothing was stored"
            )
        elif isinstance(exc, sqlite3.Error):
            err = StoreError(f"{self.path}: {exc}")
        else:
            return exc
        err.__cause__ = exc
        return err

    def _read_batch(self, ops: list[_Op]) -> None:
        """The reader thread: each read on its own."""
        conn = self._rconn
        for op in ops:
            if conn is None:
                op.error = StoreError(f"{self.path}: the store is closed")
                continue
            try:
                op.result = op.fn(conn)
            except BaseException as exc:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                op.error = self._translate(exc)

    def _write_batch(self, ops: list[_Op]) -> None:
        """The writer thread: the writes waiting together, as groups (one
        transaction and one sync each; normally one group)."""
        conn = self._conn
        todo = []
        for op in ops:
            if conn is None:
                op.error = StoreError(f"{self.path}: the store is closed")
            elif self._damage is not None:
                try:
                    self._writable()
                except StoreError as exc:
                    op.error = exc
            else:
                todo.append(op)
        while todo and conn is not None:
            todo = self._group(conn, todo)

    def _group(self, conn: sqlite3.Connection, ops: list[_Op]) -> list[_Op]:
        """Apply ``ops`` in one transaction; each op ends with its result or its
        error, except those returned: their work was lost with a transaction that
        SQLite rolled back (a failed op took it down), to be applied again."""
        mode = self.synchronous
        if mode in ("FULL", "EXTRA") and not any(op.durable for op in ops):
            mode = "NORMAL"  # leases only: see the lease section
        try:
            if mode != self.synchronous:
                conn.execute(f"PRAGMA synchronous = {mode}")
            try:
                self._group_tx(conn, ops)
            finally:
                if mode != self.synchronous:
                    conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        except _Redo as redo:
            return redo.ops
        except BaseException as exc:  # BEGIN or COMMIT failed: nothing of the group stored
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            err = self._translate(exc)
            for op in ops:
                if op.error is None:
                    op.result = None
                    op.error = err
        return []

    def _group_tx(self, conn: sqlite3.Connection, ops: list[_Op]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        if len(ops) == 1:
            op = ops[0]
            try:
                op.result = op.fn(conn)
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                op.error = self._translate(exc)
                return
            conn.execute("COMMIT")
            return
        done: list[_Op] = []
        for i, op in enumerate(ops):
            before = conn.total_changes
            try:
                op.result = op.fn(conn)
            except BaseException as exc:
                op.error = self._translate(exc)
                if self._damage is not None:  # nothing more is written to it
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    for o in (*done, *ops[i + 1 :]):
                        o.result = None
                        o.error = StoreError(
                            f"{self.path}: the database is damaged ({self._damage}); "
                            "nothing was stored"
                        )
                    return
                if conn.in_transaction and conn.total_changes == before:
                    continue  # refused before it changed a row: it fails alone
                # it changed rows before it failed (or SQLite ended the transaction):
                # the group is undone, and the others are applied again without it
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                for o in done:
                    o.result = None
                raise _Redo(done + ops[i + 1 :]) from None
            done.append(op)
        conn.execute("COMMIT")

    async def _stop(self) -> None:
        """Stop both threads once they have run what is queued (each closes its
        connection), and close a connection whose thread never started."""
        for worker in (self._writeq, self._readq):
            if worker is None:
                continue
            with anyio.CancelScope(shield=True):
                try:
                    loop = asyncio.get_running_loop()
                except RuntimeError:  # another async library: wait in a thread
                    done = threading.Event()
                    worker.put(_Op(_stop_marker, False, None, done))
                    await anyio.to_thread.run_sync(done.wait)
                else:
                    fut = loop.create_future()
                    worker.put(_Op(_stop_marker, False, loop, fut))
                    await fut
            worker.thread.join()
        self._writeq = self._readq = None
        for name in ("_rconn", "_conn"):
            conn = getattr(self, name)
            setattr(self, name, None)
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    await anyio.to_thread.run_sync(conn.close)

    def _where(self, context_id: str, what: str = "") -> str:
        return f"{self.path}: context {context_id!r}{what}"

    # ------------------------------------------------------------------ Store

    async def create(self, context: ChatContext) -> None:
        await self._run(lambda conn: self._create_tx(conn, context), write=True)

    def _create_tx(self, conn: sqlite3.Connection, context: ChatContext) -> None:
        """The rows of a new context (inside the writer's transaction)."""
        if conn.execute("SELECT 1 FROM contexts WHERE id = ?", (context.id,)).fetchone():
            raise StoreError(f"context {context.id!r} already exists")
        cur = conn.execute(
            "INSERT INTO contexts (id, schema_version, version, state, parent_id, "
            "active_branch, event_seq, created_at, updated_at, config, progress) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        seq = cur.lastrowid
        assert seq is not None
        self._put_branches(conn, seq, context.branches.values())
        conn.executemany(
            "INSERT INTO messages (ctx, id, schema_version, body) VALUES (?, ?, ?, ?)",
            [(seq, n.id, _V, n.model_dump_json()) for n in context.message_pool.values()],
        )

    async def load(self, context_id: str) -> ChatContext:
        return await self._run(lambda conn: self._load_tx(conn, context_id))

    def _load_tx(self, conn: sqlite3.Connection, context_id: str) -> ChatContext:
        conn.execute("BEGIN")  # one snapshot for every read below
        head = conn.execute(
            f"SELECT {_HEAD_COLUMNS} FROM contexts WHERE id = ?", (context_id,)
        ).fetchone()
        if head is None:
            raise ContextNotFound(context_id)
        seq = head[0]
        ctx = self._context_of(head)
        positions: dict[str, list[str]] = {}
        for branch, pos, mid, version in conn.execute(
            "SELECT branch, pos, message_id, schema_version FROM branch_messages WHERE ctx = ? "
            "ORDER BY branch, pos",
            (seq,),
        ):
            if type(mid) is str and type(version) is int and version == _V:
                positions.setdefault(branch, []).append(mid)  # the common case
                continue
            row = self._row(context_id, "branch_messages", f"branch {branch!r}, pos {pos!r}")
            _column(row, "message_id", mid, str)
            _column(row, "schema_version", version, int)
            if version != _V:
                check_version(version, where=self._where(context_id, f", branch {branch!r}"))
            positions.setdefault(branch, []).append(mid)
        branches: dict[str, Branch] = {}
        for name, version, body in conn.execute(
            "SELECT name, schema_version, body FROM branches WHERE ctx = ? ORDER BY rowid",
            (seq,),
        ):
            row = self._row(context_id, "branches", f"name {name!r}")
            _column(row, "name", name, str)
            _column(row, "schema_version", version, int)
            _column(row, "body", body, str)
            where = self._where(context_id, f", branch {name!r}")
            data = json_object_column(body, f"{row}, column body")
            if version != _V:
                data = upcast_branch(data, version, where=where)
            data["message_ids"] = positions.get(name, [])
            branches[name] = self._validate(Branch, data, f"{row}, column body")
        pool: dict[str, MessageNode] = {}
        self._load_messages(conn, context_id, seq, pool)
        conn.execute("COMMIT")
        ctx.branches = branches
        ctx.message_pool = pool
        problems = context_problems(ctx)
        if problems:
            loc, problem = problems[0]
            raise StoreError(f"{self._place(context_id, loc)}: {problem}")
        return ctx

    def _load_messages(
        self, conn: sqlite3.Connection, context_id: str, seq: int, pool: dict[str, MessageNode]
    ) -> None:
        """Every message row of the context, each validated strictly, into ``pool``.

        A row of the common kind (text id and body, the current schema version)
        goes straight to the model's strict JSON validation; the description of
        where the row is is made only for an error. Validating the bodies as one
        JSON array in a single call was measured no faster: the model's own
        validation is nearly all of the time (see docs/benchmarks.md)."""
        validate = MessageNode.model_validate_json
        for mid, version, body in conn.execute(
            "SELECT id, schema_version, body FROM messages WHERE ctx = ? ORDER BY rowid", (seq,)
        ):
            if type(mid) is str and type(body) is str and type(version) is int and version == _V:
                try:
                    node = validate(body, strict=True)
                except ValidationError:
                    node = None
                if node is not None and node.id == mid:
                    pool[mid] = node
                    continue
            self._load_row(context_id, mid, version, body, pool)

    def _load_row(
        self, context_id: str, mid: Any, version: Any, body: Any, pool: dict[str, MessageNode]
    ) -> None:
        """One message row, checked column by column: an older schema version is
        upcast, damage raises a StoreError naming the row."""
        row = self._row(context_id, "messages", f"id {mid!r}")
        _column(row, "id", mid, str)
        _column(row, "schema_version", version, int)
        _column(row, "body", body, str)
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
        pool[mid] = node

    def _row(self, context_id: str, table: str, key: str = "") -> str:
        """Where a row is, for an error: the file, the table, the row."""
        key = f", {key}" if key else ""
        return f"{self.path}: table {table}, row (context {context_id!r}{key})"

    def _place(self, context_id: str, loc: tuple[str | int, ...]) -> str:
        """Where a field of the context (a key path) is stored."""
        if loc[0] == "current_state":
            return f"{self._row(context_id, 'contexts')}, column state"
        if loc[0] == "active_branch_name":
            return f"{self._row(context_id, 'contexts')}, column active_branch"
        if loc[0] == "branches" and len(loc) > 2 and loc[2] == "message_ids":
            row = self._row(context_id, "branch_messages", f"branch {loc[1]!r}")
            return f"{row}, column message_id, {json_path(loc)}"
        if loc[0] == "branches" and len(loc) > 2:
            row = self._row(context_id, "branches", f"name {loc[1]!r}")
            return f"{row}, column body, {json_path(loc[2:])}"
        return f"{self._row(context_id, 'contexts')}, {json_path(loc)}"

    def _context_of(self, head: tuple[Any, ...]) -> ChatContext:
        """The context (without messages and branches) of a ``contexts`` row."""
        (_, version, cid, parent_id, config, active, state, created, updated, ver, seq, prog) = head
        row = self._row(str(cid), "contexts")
        for column, value, kind in (
            ("id", cid, str),
            ("schema_version", version, int),
            ("parent_id", parent_id, (str, type(None))),
            ("config", config, str),
            ("active_branch", active, str),
            ("state", state, str),
            ("created_at", created, str),
            ("updated_at", updated, str),
            ("version", ver, int),
            ("event_seq", seq, int),
            ("progress", prog, str),
        ):
            _column(row, column, value, kind)
        where = self._where(cid)
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
            data = upcast_context(data, version, where=where)
            data["schema_version"] = _V
        for column, model in (("config", ChatConfig), ("progress", TurnProgress)):
            try:  # strictly: a number stored as text is damage, not a number
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

    async def commit(self, commit: Commit) -> None:
        # serialized here, on the caller's thread: the writer thread is what all
        # the contexts' commits queue for, so it is left the SQL alone
        rows = self._commit_rows(commit)
        await self._run(lambda conn: self._apply_commit(conn, commit, rows), write=True)

    def _commit_tx(self, conn: sqlite3.Connection, commit: Commit) -> None:
        """The whole commit on ``conn``, inside the caller's transaction."""
        self._apply_commit(conn, commit, self._commit_rows(commit))

    @staticmethod
    def _commit_rows(commit: Commit) -> _CommitRows:
        """What a commit writes, serialized: the ``UPDATE`` of the context row
        (with the version check, and the fence when the commit names a lease), and
        the rows of the replaced and appended messages and of the steps, without
        the context's ``seq`` (known once the ``UPDATE`` has found the row)."""
        cid = commit.context_id
        sets = "version = ?, state = ?, updated_at = ?, event_seq = ?, progress = ?"
        params: list[Any] = [
            commit.version,
            commit.state,
            _ts(commit.updated_at),
            commit.event_seq,
            commit.progress.model_dump_json(),
        ]
        if commit.active_branch is not None:
            sets += ", active_branch = ?"
            params.append(commit.active_branch)
        if commit.config is not None:
            sets += ", config = ?"
            params.append(commit.config.model_dump_json())
        where = "WHERE id = ? AND version = ? AND schema_version = ?"
        params += [cid, commit.expected_version, _V]
        take = commit.take_lease if commit.lease_token is not None else None
        if take is not None:  # the lease taken: the token just before, released or ours
            where += (
                " AND IFNULL((SELECT token = ? AND (owner IS NULL OR owner = ?) FROM leases "
                "WHERE context_id = ?), ?)"
            )
            params += [take.token - 1, take.owner, cid, int(take.token == 1)]
        elif commit.lease_token is not None:  # the fence, in the same statement
            where += " AND (SELECT token FROM leases WHERE context_id = ?) IS ?"
            params += [cid, commit.lease_token]
        return _CommitRows(
            f"UPDATE contexts SET {sets} {where} RETURNING seq",
            params,
            [(n.model_dump_json(), n.id) for n in commit.replaced],
            [(name, n.id, n.model_dump_json()) for name, n in commit.appended],
            [
                (
                    s.version,
                    s.from_state,
                    s.trigger,
                    s.to_state,
                    _ts(s.at),
                    None if s.detail is None else json.dumps(s.detail, ensure_ascii=False),
                    commit.lease_token,
                    commit.lease_owner if commit.lease_token is not None else None,
                )
                for s in commit.steps
            ],
        )

    def _apply_commit(self, conn: sqlite3.Connection, commit: Commit, rows: _CommitRows) -> None:
        """The commit's statements (in the writer's transaction)."""
        cid = commit.context_id
        update, params = rows.update, rows.params
        row = conn.execute(update, params).fetchone()
        if row is None:
            self._refused(conn, commit)  # raises, or brings an old row up to date
            row = conn.execute(update, params).fetchone()
            if row is None:  # pragma: no cover - _refused explains every miss
                raise StoreError(f"context {cid!r}: the commit was not applied")
        seq = row[0]
        if commit.branches:
            self._put_branches(conn, seq, commit.branches, replace=True)
        for body, mid in rows.replaced:
            cur = conn.execute(
                "UPDATE messages SET schema_version = ?, body = ? WHERE ctx = ? AND id = ?",
                (_V, body, seq, mid),
            )
            if cur.rowcount != 1:
                raise StoreError(
                    f"commit replaces message {mid!r} of context {cid!r}, which is not stored"
                )
        if rows.appended:
            next_pos: dict[str, int] = {}
            positions = []
            for name, mid, _body in rows.appended:
                pos = next_pos.get(name)
                if pos is None:
                    known, last = conn.execute(
                        "SELECT EXISTS (SELECT 1 FROM branches WHERE ctx = ? AND name = ?), "
                        "(SELECT MAX(pos) FROM branch_messages WHERE ctx = ? AND branch = ?)",
                        (seq, name, seq, name),
                    ).fetchone()
                    if not known:
                        raise StoreError(
                            f"commit appends to unknown branch {name!r} of context {cid!r}"
                        )
                    pos = 0 if last is None else last + 1
                next_pos[name] = pos + 1
                positions.append((seq, name, pos, mid, _V))
            conn.executemany(
                "INSERT INTO messages (ctx, id, schema_version, body) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (ctx, id) DO UPDATE SET schema_version = excluded.schema_version, "
                "body = excluded.body",
                [(seq, mid, _V, body) for _name, mid, body in rows.appended],
            )
            conn.executemany(
                "INSERT INTO branch_messages (ctx, branch, pos, message_id, schema_version) "
                "VALUES (?, ?, ?, ?, ?)",
                positions,
            )
        if rows.steps:
            conn.executemany(
                "INSERT INTO steps (ctx, schema_version, version, from_state, trigger, "
                "to_state, at, detail, lease_token, lease_owner) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(seq, _V, *step) for step in rows.steps],
            )
        take = commit.take_lease if commit.lease_token is not None else None
        if take is not None:  # taken with this commit (the UPDATE above checked it)
            conn.execute(
                "INSERT INTO leases (context_id, owner, token, expires_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (context_id) DO UPDATE SET owner = excluded.owner, "
                "token = excluded.token, expires_at = excluded.expires_at",
                (cid, None if commit.release_lease else take.owner, take.token, take.expires_at),
            )
        elif commit.release_lease and commit.lease_token is not None:
            # the lease ends with this commit, in its transaction (the fence in
            # the UPDATE above found the token current)
            conn.execute(
                "UPDATE leases SET owner = NULL WHERE context_id = ? AND token = ?",
                (cid, commit.lease_token),
            )

    def _refused(self, conn: sqlite3.Connection, commit: Commit) -> None:
        """The fence or the version check missed: say why, or (an old schema
        version) bring the context row up to date so that the check can be made
        again."""
        cid = commit.context_id
        take = commit.take_lease if commit.lease_token is not None else None
        if take is not None:
            found = conn.execute(
                "SELECT owner, token FROM leases WHERE context_id = ?", (cid,)
            ).fetchone()
            owner, token = found if found is not None else (None, 0)
            if token != take.token - 1 or owner not in (None, take.owner):
                raise LeaseLost(cid, take.token, token if found is not None else None)
        elif commit.lease_token is not None:
            self._check_fence(conn, cid, commit.lease_token)
        row = conn.execute(f"SELECT {_HEAD_COLUMNS} FROM contexts WHERE id = ?", (cid,)).fetchone()
        if row is None:
            raise ContextNotFound(cid)
        schema_version, version = row[1], row[9]
        check_version(schema_version, where=self._where(cid))
        if version != commit.expected_version:
            raise VersionConflict(cid, commit.expected_version, version)
        ctx = self._context_of(row)  # upcast
        conn.execute(
            "UPDATE contexts SET schema_version = ?, parent_id = ?, active_branch = ?, "
            "state = ?, created_at = ?, updated_at = ?, event_seq = ?, config = ?, progress = ? "
            "WHERE seq = ?",
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

    def _put_branches(
        self, conn: sqlite3.Connection, seq: int, branches: Iterable[Branch], replace: bool = False
    ) -> None:
        for b in branches:
            conn.execute(
                "INSERT INTO branches (ctx, name, schema_version, body) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (ctx, name) DO UPDATE SET schema_version = excluded.schema_version, "
                "body = excluded.body",
                (seq, b.name, _V, b.model_dump_json(exclude={"message_ids"})),
            )
            if replace:
                conn.execute(
                    "DELETE FROM branch_messages WHERE ctx = ? AND branch = ?", (seq, b.name)
                )
            conn.executemany(
                "INSERT INTO branch_messages (ctx, branch, pos, message_id, schema_version) "
                "VALUES (?, ?, ?, ?, ?)",
                [(seq, b.name, i, mid, _V) for i, mid in enumerate(b.message_ids)],
            )

    async def list_ids(self) -> list[str]:
        return await self._run(
            lambda conn: [r[0] for r in conn.execute("SELECT id FROM contexts ORDER BY seq")]
        )

    async def list_contexts(self) -> list[ContextSummary]:
        def read(conn: sqlite3.Connection) -> list[ContextSummary]:
            rows = conn.execute(
                "SELECT id, state, version, updated_at, parent_id, config FROM contexts "
                "ORDER BY seq"
            ).fetchall()
            out = []
            for cid, state, version, updated, parent, config in rows:
                try:  # a row whose summary cannot be read is left out (load raises)
                    for column, value, kind in (
                        ("id", cid, str),
                        ("state", state, str),
                        ("version", version, int),
                        ("updated_at", updated, str),
                        ("parent_id", parent, (str, type(None))),
                    ):
                        _column("", column, value, kind)
                    at = datetime.fromisoformat(updated)
                except (StoreError, ValueError):
                    continue
                title, model = summary_of_config(config)
                out.append(
                    ContextSummary(
                        id=cid,
                        state=state,
                        version=version,
                        updated_at=at,
                        parent_id=parent,
                        title=title,
                        model=model,
                    )
                )
            return out

        return await self._run(read)

    async def delete(self, context_id: str) -> None:
        def delete(conn: sqlite3.Connection) -> None:
            row = conn.execute("SELECT seq FROM contexts WHERE id = ?", (context_id,)).fetchone()
            if row is None:
                raise ContextNotFound(context_id)
            for table in ("steps", "messages", "branch_messages", "branches"):
                conn.execute(f"DELETE FROM {table} WHERE ctx = ?", row)
            conn.execute("DELETE FROM contexts WHERE seq = ?", row)
            conn.execute("DELETE FROM leases WHERE context_id = ?", (context_id,))

        await self._run(delete, write=True)

    async def steps(self, context_id: str) -> list[StepLog]:
        def read(conn: sqlite3.Connection) -> list[StepLog]:
            conn.execute("BEGIN")
            row = conn.execute("SELECT seq FROM contexts WHERE id = ?", (context_id,)).fetchone()
            if row is None:
                raise ContextNotFound(context_id)
            out = []
            for schema_version, version, a, t, b, at, detail, token, owner in conn.execute(
                "SELECT schema_version, version, from_state, trigger, to_state, at, detail, "
                "lease_token, lease_owner FROM steps "
                "WHERE ctx = ? ORDER BY rowid",
                row,
            ):
                row = self._row(context_id, "steps", f"version {version!r}")
                _column(row, "schema_version", schema_version, int)
                if schema_version != _V:
                    check_version(schema_version, where=self._where(context_id, ", steps"))
                for column, value, kind in (
                    ("version", version, int),
                    ("from_state", a, str),
                    ("trigger", t, str),
                    ("to_state", b, str),
                    ("at", at, str),
                ):
                    _column(row, column, value, kind)
                try:
                    when = datetime.fromisoformat(at)
                except ValueError:
                    raise StoreError(f"{row}, column at: not a timestamp: {at!r}") from None
                problem = step_problem(a, b)
                if problem is not None:
                    raise StoreError(f"{row}, column {problem}")
                detail_ = step_detail_column(row, detail)
                out.append(StepLog(version, a, t, b, when, detail_, *_fence(row, token, owner)))
            conn.execute("COMMIT")
            return out

        return await self._run(read)

    async def integrity_check(self) -> list[str]:
        """``PRAGMA integrity_check``: the problems found, or ``[]`` when the
        database is sound (an error that stops the check is one problem)."""

        def check(conn: sqlite3.Connection) -> list[str]:
            try:
                rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
            except sqlite3.DatabaseError as exc:
                return [f"{self.path}: {exc}"]
            return [] if rows == ["ok"] else rows

        return await self._run(check)

    async def aclose(self) -> None:
        """Run what is queued, stop the threads and close the connections (the
        last one checkpoints the WAL); harmless twice."""
        if self._closed:
            return
        self._closed = True
        await self._stop()

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _validate(model: type[_M], data: dict[str, Any], where: str) -> _M:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise StoreError(
                f"{where}: not a valid {model.__name__} record: {validation_problem(exc)}"
            ) from exc

    # ------------------------------------------------------------------ leases
    #
    # One row per context in ``leases`` (keyed by the context id, apart from the
    # history tables). A lease write is one write of the writer's next group: one
    # per heartbeat, and one at a call's start and end unless the call's first
    # and last commits take and release the lease themselves (``take_lease``,
    # ``release_lease``: statements of the commit's own write). A group of lease
    # writes only is committed at ``synchronous=NORMAL`` whatever the store's
    # setting: a lease only matters among live processes, and a power cut ends
    # them all; the next commit's sync at FULL makes the lease rows before it
    # durable too (a group with a commit in it is synced at the store's setting).

    async def _lease_write(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        """``fn`` as a write of the writer's next group; a group of lease writes
        only is committed at ``synchronous=NORMAL`` (see above)."""
        return await self._submit(fn, reader=False, durable=False)

    def _prepare_leases(self, conn: sqlite3.Connection) -> None:
        """Add the ``leases`` table, and the ``detail``, ``lease_token`` and
        ``lease_owner`` columns of ``steps``, to a file made before they existed
        (old rows keep NULL in the new columns)."""
        try:
            known = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'leases'"
            ).fetchone()
            if known is None:
                conn.execute(_LEASES_TABLE)
            columns = {r[1] for r in conn.execute("PRAGMA table_info(steps)")}
            for column, kind in (
                ("detail", "TEXT"),
                ("lease_token", "INTEGER"),
                ("lease_owner", "TEXT"),
            ):
                if column in columns:
                    continue
                try:
                    conn.execute(f"ALTER TABLE steps ADD COLUMN {column} {kind}")
                except sqlite3.OperationalError as exc:
                    if "duplicate column" not in str(exc):  # another process added it
                        raise
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot add the leases table: {exc}") from exc

    @staticmethod
    def _check_fence(conn: sqlite3.Connection, context_id: str, token: int) -> None:
        row = conn.execute(
            "SELECT token FROM leases WHERE context_id = ?", (context_id,)
        ).fetchone()
        current = row[0] if row is not None else None
        if current != token:
            raise LeaseLost(context_id, token, current)

    async def acquire_lease(
        self,
        context_id: str,
        owner: str,
        ttl: float,
        *,
        now: float,
        take_over: int | None = None,
    ) -> Lease | None:
        def acquire(conn: sqlite3.Connection) -> Lease | None:
            # the context and its lease (if any) in one statement
            found = conn.execute(
                "SELECT l.owner, l.token, l.expires_at FROM contexts c "
                "LEFT JOIN leases l ON l.context_id = c.id WHERE c.id = ?",
                (context_id,),
            ).fetchone()
            if found is None:
                raise ContextNotFound(context_id)
            row = None if found[1] is None else found
            if row is not None:
                held_by, token, expires_at = row
                if lease_is_held(
                    held_by, token, expires_at, owner=owner, now=now, take_over=take_over
                ):
                    return None
            lease = Lease(context_id, owner, (row[1] if row is not None else 0) + 1, now + ttl)
            conn.execute(
                "INSERT INTO leases (context_id, owner, token, expires_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (context_id) DO UPDATE SET owner = excluded.owner, "
                "token = excluded.token, expires_at = excluded.expires_at",
                (context_id, owner, lease.token, lease.expires_at),
            )
            return lease

        return await self._lease_write(acquire)

    async def renew_lease(self, lease: Lease, ttl: float, *, now: float) -> Lease:
        renewed = Lease(lease.context_id, lease.owner, lease.token, now + ttl)

        def renew(conn: sqlite3.Connection) -> Lease:
            cur = conn.execute(
                "UPDATE leases SET expires_at = ? WHERE context_id = ? AND token = ? "
                "AND owner IS NOT NULL",
                (renewed.expires_at, lease.context_id, lease.token),
            )
            if cur.rowcount != 1:
                row = conn.execute(
                    "SELECT token FROM leases WHERE context_id = ?", (lease.context_id,)
                ).fetchone()
                raise LeaseLost(lease.context_id, lease.token, row[0] if row else None)
            return renewed

        return await self._lease_write(renew)

    async def release_lease(self, lease: Lease) -> None:
        def release(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE leases SET owner = NULL WHERE context_id = ? AND token = ?",
                (lease.context_id, lease.token),
            )

        await self._lease_write(release)

    async def lease(self, context_id: str) -> Lease | None:
        def read(conn: sqlite3.Connection) -> Lease | None:
            row = conn.execute(
                "SELECT owner, token, expires_at FROM leases WHERE context_id = ? "
                "AND owner IS NOT NULL",
                (context_id,),
            ).fetchone()
            return None if row is None else Lease(context_id, row[0], row[1], row[2])

        return await self._run(read)

    async def claim_expired(
        self, owner: str, ttl: float, *, now: float, limit: int | None = 100
    ) -> list[Lease]:
        """Take the leases of up to ``limit`` (None: all) contexts that are away from
        rest (their state is not ``Idle``, ``AwaitingToolApproval`` or
        ``PermanentFailure``) and whose lease was released, expired at ``now``,
        or never taken, the longest waiting first (by their last commit, so a
        context handed off again goes behind those handed off before it): each
        with the next fencing token, for
        ``ttl`` seconds. One write of the writer's group: processes claiming at
        once are serialized by SQLite's write lock and get disjoint sets, as
        PostgreSQL's ``claim_expired`` gives them."""
        resting = sorted(s.value for s in RESTING)
        marks = ",".join("?" * len(resting))

        def claim(conn: sqlite3.Connection) -> list[Lease]:
            found = conn.execute(
                "SELECT c.id, IFNULL(l.token, 0) FROM contexts c "
                "LEFT JOIN leases l ON l.context_id = c.id "
                f"WHERE c.state NOT IN ({marks}) "
                "AND (l.context_id IS NULL OR l.owner IS NULL OR l.expires_at <= ?) "
                "ORDER BY c.updated_at, c.seq LIMIT ?",
                (*resting, now, -1 if limit is None else limit),
            ).fetchall()
            leases = [Lease(cid, owner, token + 1, now + ttl) for cid, token in found]
            conn.executemany(
                "INSERT INTO leases (context_id, owner, token, expires_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (context_id) DO UPDATE SET owner = excluded.owner, "
                "token = excluded.token, expires_at = excluded.expires_at",
                [(x.context_id, x.owner, x.token, x.expires_at) for x in leases],
            )
            return leases

        return await self._lease_write(claim)

    # ------------------------------------------------------------------ messages

    async def load_messages(self, context_id: str, ids: Sequence[str]) -> list[MessageNode]:
        """The messages with these ids: one indexed query per 500 ids."""
        wanted = list(dict.fromkeys(ids))

        def read(conn: sqlite3.Connection) -> dict[str, MessageNode]:
            row = conn.execute("SELECT seq FROM contexts WHERE id = ?", (context_id,)).fetchone()
            if row is None:
                raise ContextNotFound(context_id)
            found: dict[str, MessageNode] = {}
            for at in range(0, len(wanted), 500):
                part = wanted[at : at + 500]
                marks = ",".join("?" * len(part))
                for mid, version, body in conn.execute(
                    "SELECT id, schema_version, body FROM messages "
                    f"WHERE ctx = ? AND id IN ({marks})",
                    (row[0], *part),
                ):
                    where = self._row(context_id, "messages", f"id {mid!r}")
                    _column(where, "body", body, str)
                    _column(where, "schema_version", version, int)
                    if version == _V:
                        try:
                            node = MessageNode.model_validate_json(body, strict=True)
                        except ValidationError as exc:
                            raise StoreError(
                                f"{where}, column body: {validation_problem(exc)}"
                            ) from None
                    else:
                        node = message_from_record(
                            body, version, where=self._where(context_id, f", message {mid!r}")
                        )
                    found[mid] = node
            return found

        found = await self._run(read)
        out = []
        for mid in ids:
            node = found.get(mid)
            if node is None:
                raise StoreError(f"context {context_id!r} has no message {mid!r}")
            out.append(node)
        return out


_LEASES_TABLE = """
CREATE TABLE IF NOT EXISTS leases (
    context_id TEXT PRIMARY KEY,
    owner TEXT,
    token INTEGER NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID
"""


# ---------------------------------------------------------------------- the threads


class _CommitRows(NamedTuple):
    """A commit, serialized (see ``SQLiteStore._commit_rows``)."""

    update: str
    params: list[Any]
    replaced: list[tuple[str, str]]
    """(body, message id)"""
    appended: list[tuple[str, str, str]]
    """(branch, message id, body)"""
    steps: list[tuple[int, str, str, str, str, str | None, int | None, str | None]]
    """(version, from, trigger, to, at, detail as JSON, lease token, lease owner)"""


class _Redo(Exception):
    """A group's transaction was lost: these ops are to be applied again."""

    def __init__(self, ops: list[_Op]) -> None:
        super().__init__()
        self.ops = ops


def _stop_marker(conn: sqlite3.Connection) -> None:
    """The op that stops a worker thread (after the ops queued before it)."""


class _Op:
    """One store call handed to a worker thread, and its outcome."""

    __slots__ = ("durable", "error", "fn", "loop", "result", "waiter")

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], Any],
        durable: bool,
        loop: asyncio.AbstractEventLoop | None,
        waiter: asyncio.Future[Any] | threading.Event,
    ) -> None:
        self.fn = fn
        self.durable = durable
        self.loop = loop
        self.waiter = waiter
        self.result: Any = None
        self.error: BaseException | None = None


def _settle(ops: list[_Op]) -> None:
    """On the waiters' event loop: hand each op's outcome to its future."""
    for op in ops:
        fut = op.waiter
        assert isinstance(fut, asyncio.Future)
        if fut.done():  # its waiter was cancelled by force; nobody listens
            continue
        if op.error is not None:
            fut.set_exception(op.error)
        else:
            fut.set_result(op.result)


def _resolve(ops: list[_Op]) -> None:
    """From a worker thread: wake every waiter, one hand-off per event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Op]] = {}
    for op in ops:
        if op.loop is None:
            waiter = op.waiter
            assert isinstance(waiter, threading.Event)
            waiter.set()
        else:
            by_loop.setdefault(op.loop, []).append(op)
    for loop, group in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(_settle, group)


class _Worker:
    """A thread that runs a store's calls from a queue: the writer (the writes
    waiting together as one group) or the reader (one read at a time). It holds
    the store weakly between batches and ends when the store is gone or stops it."""

    IDLE_CHECK = 5.0
    """Seconds between looks at whether the store still exists, when idle."""

    def __init__(self, store: SQLiteStore, reader: bool) -> None:
        self.reader = reader
        self.queue: queue.SimpleQueue[_Op] = queue.SimpleQueue()
        self.put = self.queue.put
        self.thread = threading.Thread(
            target=self._main,
            args=(weakref.ref(store),),
            name=f"turnfsm-sqlite-{'reader' if reader else 'writer'}",
            daemon=True,
        )
        self.thread.start()

    def _main(self, ref: weakref.ref[SQLiteStore]) -> None:
        q = self.queue
        while True:
            try:
                ops = [q.get(timeout=self.IDLE_CHECK)]
            except queue.Empty:
                if ref() is None:
                    return
                continue
            while True:
                try:
                    ops.append(q.get_nowait())
                except queue.Empty:
                    break
            store = ref()
            stop = next((i for i, op in enumerate(ops) if op.fn is _stop_marker), None)
            work = ops if stop is None else ops[:stop]
            try:
                if store is None:
                    raise StoreError("the store is gone")
                if work:
                    (store._read_batch if self.reader else store._write_batch)(work)
            except BaseException as exc:  # never leave a waiter hanging
                for op in work:
                    if op.error is None:
                        op.result = None
                        op.error = StoreError(
                            f"the SQLite store's {'reader' if self.reader else 'writer'} "
                            f"thread failed: {type(exc).__name__}: {exc}"
                        )
                        op.error.__cause__ = exc
            if stop is None:
                _resolve(work)
                del store, ops, work
                continue
            if store is not None:
                name = "_rconn" if self.reader else "_conn"
                conn = getattr(store, name)
                setattr(store, name, None)
                if conn is not None:
                    with contextlib.suppress(sqlite3.Error):
                        conn.close()
            path = store.path if store is not None else "the store"
            for op in ops[stop + 1 :]:
                op.error = StoreError(f"{path}: the store is closed")
            _resolve(ops)
            return
