"""The SQLite store: the embedded default (``sqlite:///path.db``).

Layout (one database file, WAL mode)::

    turnfsm_meta     key/value: the store format version
    contexts         one row per context: its small fields as columns
                     (version, state, updated_at, event_seq, active_branch,
                     config and progress as JSON, ...)
    branches         one row per branch, without its message ids (JSON)
    branch_messages  (context, branch, position) -> message id
    messages         one row per message: ``records.to_json(node)``
    steps            one row per committed transition, in order, with the
                     fencing token and owner of the lease it was committed
                     under (NULL without one; the columns are added to older
                     files when they are opened)
    leases           one row per context that was ever leased: owner (NULL once
                     released), fencing token, expiry (added to older files
                     when they are opened)

The file's check before connecting and the table layout's migrations are
:mod:`turnfsm.storage._sqlite_schema`'s.

Every row carries the ``schema_version`` it was written with; on read, older
rows go through the upcasters of :mod:`turnfsm.storage._schema` and newer ones
are refused with :class:`~turnfsm.errors.SchemaVersionError`.

A commit is applied in one transaction (``BEGIN IMMEDIATE``, possibly shared
with other contexts' commits: see "Threads"): the version check (and the lease's
fencing token) is the ``UPDATE contexts ... WHERE id = ? AND version = ?`` that
writes the small fields (its ``RETURNING`` gives the last position of each branch
appended to); then the rows of the new messages, branch positions and steps are
inserted, gathered with those of the other commits of the writer's group into
one multi-row ``INSERT`` per table (:mod:`turnfsm.storage._sqlite_rows`;
replaced messages, the approval decisions, are updated in place).
Nothing of the history is rewritten, so the cost of a commit does not grow with
the history: ``tests/storage/test_sqlite.py`` checks that rows changed and bytes
written per commit are the same at 100 and at 2,000 messages (the measured
figures are in docs/benchmarks.md). A commit that is refused (version conflict, unknown branch,
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
contexts); the reader runs the reads. :mod:`turnfsm.storage._sqlite_threads`
(the store's base class) says how a write that fails leaves the others of its
group alone. ``python -m tests.storage.test_sqlite``
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

import os
import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import ContextNotFound, InvalidInput, LeaseLost, StoreError
from ..model import SCHEMA_VERSION, Branch, ChatContext, MessageNode
from ..records import to_json
from ._base import (
    Commit,
    ContextSummary,
    StepLog,
    Store,
    WorkQueue,
    in_order,
)
from ._outline import ContextOutline
from ._schema import check_version, context_problems, summary_of_config
from ._sql import (
    DELETE_POSITIONS,
    HEAD_COLUMNS,
    INSERT_CONTEXT,
    INSERT_MESSAGE,
    INSERT_POSITIONS,
    INSERT_STEPS,
    NEXT_POSITION,
    PUT_LEASE,
    RELEASE,
    REPLACE_MESSAGE,
    UPSERT_BRANCH,
    UPSERT_MESSAGE,
    CommitRows,
    Places,
    column,
    context_row,
    positions,
    refused_update,
    step_of,
)
from ._sqlite_leases import SQLiteLeases
from ._sqlite_load import (
    begin_with_row,
    branch_page,
    branches_of,
    load_messages,
    message_row,
    outline_of_rows,
    positions_of,
)
from ._sqlite_rows import commit_rows_of
from ._sqlite_schema import STORE_FORMAT, check_database_file, prepare

__all__ = ["STORE_FORMAT", "SQLiteStore"]

SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
_V = SCHEMA_VERSION


def _fence(row: str, token: object, owner: object) -> tuple[int | None, str | None]:
    """A step row's ``lease_token`` and ``lease_owner`` (both NULL, or an
    integer and a text), checked like every other column."""
    column(row, "lease_token", token, (int, type(None)))
    column(row, "lease_owner", owner, (str, type(None)))
    assert token is None or isinstance(token, int)
    assert owner is None or isinstance(owner, str)
    return token, owner


class SQLiteStore(SQLiteLeases, Store, WorkQueue):
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
        self._places = Places(str(self.path))
        self._damage = None
        self._closed = False
        self._writeq = None
        self._readq = None
        self._conn = self._open()
        try:
            self._rconn = self._connect()
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
            prepare(conn, path, self.synchronous)
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

    # ------------------------------------------------------------------ Store

    async def create(self, context: ChatContext) -> None:
        await self._run(lambda conn: self._create_tx(conn, context), write=True)

    def _create_tx(self, conn: sqlite3.Connection, context: ChatContext) -> None:
        """The rows of a new context (inside the writer's transaction)."""
        if conn.execute("SELECT 1 FROM contexts WHERE id = ?", (context.id,)).fetchone():
            raise StoreError(f"context {context.id!r} already exists")
        seq = conn.execute(INSERT_CONTEXT, context_row(context)).lastrowid
        assert seq is not None
        self._put_branches(conn, seq, context.branches.values())
        conn.executemany(
            INSERT_MESSAGE,
            [(seq, n.id, _V, to_json(n).decode()) for n in context.message_pool.values()],
        )

    async def load(self, context_id: str) -> ChatContext:
        return await self._run(lambda conn: self._load_tx(conn, context_id))

    def _load_tx(self, conn: sqlite3.Connection, context_id: str) -> ChatContext:
        places = self._places
        seq, ctx = begin_with_row(conn, places, context_id)  # one snapshot for every read
        positions = positions_of(conn, places, context_id, seq)
        branches, _ = branches_of(conn, places, context_id, seq, positions)
        pool: dict[str, MessageNode] = {}
        load_messages(conn, places, context_id, seq, pool)
        conn.execute("COMMIT")
        ctx.branches = branches
        ctx.message_pool = pool
        problems = context_problems(ctx)
        if problems:
            loc, problem = problems[0]
            raise StoreError(f"{places.place(context_id, loc)}: {problem}")
        return ctx

    def _message(self, context_id: str, mid: Any, version: Any, body: Any) -> MessageNode:
        return message_row(self._places, context_id, mid, version, body)

    async def outline(self, context_id: str) -> ContextOutline:
        """The context without its messages (``ContextOutlines``): its row, its
        branch rows with their lengths and a tail of the active branch."""
        return await self._run(lambda conn: outline_of_rows(conn, self._places, context_id))

    async def message_page(
        self, context_id: str, branch: str | None, offset: int, limit: int | None
    ) -> tuple[str, list[MessageNode]] | None:
        """A page of a branch (``MessagePages``): the page's rows only."""

        return await self._run(
            lambda conn: branch_page(conn, self._places, context_id, branch, offset, limit)
        )

    async def commit(self, commit: Commit) -> None:
        # serialized here, on the caller's thread: the writer thread is what all
        # the contexts' commits queue for, so it is left the SQL alone
        rows = self._commit_rows(commit)
        await self._submit(
            lambda conn: self._apply_commit(conn, commit, rows),
            reader=False,
            durable=True,
            gathers=True,
        )

    def _commit_tx(self, conn: sqlite3.Connection, commit: Commit) -> None:
        """The whole commit on ``conn``, inside the caller's transaction."""
        self._apply_commit(conn, commit, self._commit_rows(commit))

    _commit_rows = staticmethod(commit_rows_of)

    def _apply_commit(self, conn: sqlite3.Connection, commit: Commit, rows: CommitRows) -> None:
        """The commit's checks and updates, at once; the rows it inserts are
        gathered into the writer's group (:mod:`~turnfsm.storage._sqlite_rows`),
        or written at once when the commit is made on its own."""
        cid = commit.context_id
        update, params = rows.update, rows.params
        row = conn.execute(update, params).fetchone()
        if row is None:
            self._refused(conn, commit)  # raises, or brings an old row up to date
            row = conn.execute(update, params).fetchone()
            if row is None:  # pragma: no cover - _refused explains every miss
                raise StoreError(f"context {cid!r}: the commit was not applied")
        seq = row[0]
        group = self._gathered
        if group is not None and seq in group.contexts:
            group.write(conn)  # not expected (see _sqlite_rows): its rows go first
        if commit.branches:
            self._put_branches(conn, seq, commit.branches, replace=True)
        for body, mid in rows.replaced:
            if conn.execute(REPLACE_MESSAGE, (_V, body, seq, mid)).rowcount != 1:
                raise StoreError(
                    f"commit replaces message {mid!r} of context {cid!r}, which is not stored"
                )
        appended = rows.appended
        placed: list[tuple[int, str, int, str, int]] = []
        if appended:
            if len(row) == 3:  # one branch, read by the UPDATE (commit_rows_of)
                last = {appended[0][0]: (row[1], row[2])}
            elif len(row) > 1:  # several branches, each read by the UPDATE
                names = dict.fromkeys(name for name, _, _ in appended)
                last = {name: (row[1 + 2 * i], row[2 + 2 * i]) for i, name in enumerate(names)}
            else:  # after the branches were put
                last = {
                    name: conn.execute(NEXT_POSITION, (seq, name, seq, name)).fetchone()
                    for name in dict.fromkeys(name for name, _, _ in appended)
                }
            placed = positions(commit, seq, rows, last)  # raises for an unknown branch
        messages = [(seq, mid, _V, body) for _name, mid, body in appended]
        steps = [(seq, _V, *step) for step in rows.steps]
        take = commit.take_lease if commit.lease_token is not None else None
        # the lease taken with this commit (the UPDATE above checked it), or
        # ending with it (the UPDATE's fence found the token current)
        lease = None if take is None else (cid, None if commit.release_lease else take.owner)
        release = commit.release_lease and take is None and commit.lease_token is not None
        if group is None:  # a commit on its own: its rows at once
            if messages:
                conn.executemany(UPSERT_MESSAGE, messages)
                conn.executemany(INSERT_POSITIONS, placed)
            if steps:
                conn.executemany(INSERT_STEPS, steps)
            if take is not None and lease is not None:
                conn.execute(PUT_LEASE, (*lease, take.token, take.expires_at))
            elif release:
                conn.execute(RELEASE, (cid, commit.lease_token))
            return
        group.messages += messages
        group.positions += placed
        group.steps += steps
        if take is not None and lease is not None:
            group.leases.append((*lease, take.token, take.expires_at))
        elif release:
            group.releases.append((cid, commit.lease_token))
        group.contexts.add(seq)

    def _refused(self, conn: sqlite3.Connection, commit: Commit) -> None:
        """The fence or the version check missed: say why, or (an old schema
        version) bring the context row up to date so that the check can be made
        again (:func:`~turnfsm.storage._sql.refused_update`)."""
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
        head = conn.execute(f"SELECT {HEAD_COLUMNS} FROM contexts WHERE id = ?", (cid,)).fetchone()
        conn.execute(*refused_update(self._places, commit, head, check_columns=True))

    def _put_branches(
        self, conn: sqlite3.Connection, seq: int, branches: Iterable[Branch], replace: bool = False
    ) -> None:
        for b in branches:
            conn.execute(
                UPSERT_BRANCH,
                (seq, b.name, _V, to_json(b, exclude={"message_ids"}).decode()),
            )
            if replace:
                conn.execute(DELETE_POSITIONS, (seq, b.name))
            conn.executemany(
                INSERT_POSITIONS,
                [(seq, b.name, i, mid, _V) for i, mid in enumerate(b.message_ids)],
            )

    async def list_ids(self) -> list[str]:
        return await self._run(
            lambda conn: [r[0] for r in conn.execute("SELECT id FROM contexts ORDER BY seq")]
        )

    async def head(self, context_id: str) -> tuple[str, int]:
        """The context's state and version, from its row (``ContextHeads``)."""

        def read(conn: sqlite3.Connection) -> tuple[str, int]:
            row = conn.execute(
                "SELECT state, version FROM contexts WHERE id = ?", (context_id,)
            ).fetchone()
            if row is None:
                raise ContextNotFound(context_id)
            column("", "state", row[0], str)
            column("", "version", row[1], int)
            return row[0], row[1]

        found: tuple[str, int] = await self._run(read)
        return found

    async def list_contexts(self) -> list[ContextSummary]:
        return await self._summaries("", ())

    async def list_children(self, parent_id: str) -> list[ContextSummary]:
        return await self._summaries("WHERE parent_id = ? ", (parent_id,))

    async def _summaries(self, where: str, params: tuple[str, ...]) -> list[ContextSummary]:
        """The summaries of the rows ``where`` selects, oldest first."""

        def read(conn: sqlite3.Connection) -> list[ContextSummary]:
            rows = conn.execute(
                "SELECT id, state, version, updated_at, parent_id, config FROM contexts "
                f"{where}ORDER BY seq",
                params,
            ).fetchall()
            out = []
            for cid, state, version, updated, parent, config in rows:
                try:  # a row whose summary cannot be read is left out (load raises)
                    for name, value, kind in (
                        ("id", cid, str),
                        ("state", state, str),
                        ("version", version, int),
                        ("updated_at", updated, str),
                        ("parent_id", parent, (str, type(None))),
                    ):
                        column("", name, value, kind)
                    at = datetime.fromisoformat(updated)
                except (StoreError, ValueError):
                    continue
                title, model, archived = summary_of_config(config)
                out.append(
                    ContextSummary(
                        id=cid,
                        state=state,
                        version=version,
                        updated_at=at,
                        parent_id=parent,
                        title=title,
                        model=model,
                        archived=archived,
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
        places = self._places

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
                row = places.row(context_id, "steps", f"version {version!r}")
                column(row, "schema_version", schema_version, int)
                if schema_version != _V:
                    check_version(schema_version, where=places.where(context_id, ", steps"))
                for name, value, kind in (
                    ("version", version, int),
                    ("from_state", a, str),
                    ("trigger", t, str),
                    ("to_state", b, str),
                    ("at", at, str),
                ):
                    column(row, name, value, kind)
                out.append(step_of(row, version, a, t, b, at, detail, *_fence(row, token, owner)))
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

    # ------------------------------------------------------------------ fencing

    @staticmethod
    def _check_fence(conn: sqlite3.Connection, context_id: str, token: int) -> None:
        row = conn.execute(
            "SELECT token FROM leases WHERE context_id = ?", (context_id,)
        ).fetchone()
        current = row[0] if row is not None else None
        if current != token:
            raise LeaseLost(context_id, token, current)

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
                    found[mid] = self._message(context_id, mid, version, body)
            return found

        return in_order(context_id, ids, await self._run(read))
