"""How the SQLite store applies a commit: the ``UPDATE`` of the context row
that checks the version (and the lease's fencing token) and says where each
branch ends, why a commit it misses is refused (or the old row it brings up
to date), and the rows the commit inserts, written at once or gathered into
the writer's group (:mod:`turnfsm.storage._sqlite_rows`). Nothing of the
history is rewritten."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import LeaseLost, StoreError
from ..model import SCHEMA_VERSION, Branch
from ._base import Commit
from ._sql import (
    HEAD_COLUMNS,
    INSERT_POSITIONS,
    INSERT_STEPS,
    NEXT_POSITION,
    PUT_LEASE,
    RELEASE,
    REPLACE_MESSAGE,
    UPSERT_MESSAGE,
    CommitRows,
    Places,
    positions,
    refused_update,
)
from ._sqlite_rows import commit_rows_of
from ._sqlite_threads import SQLiteThreads

__all__ = ["SQLiteCommits"]

_V = SCHEMA_VERSION


class SQLiteCommits(SQLiteThreads):
    """The commit path of :class:`~turnfsm.storage.SQLiteStore`."""

    _places: Places

    if TYPE_CHECKING:

        @staticmethod
        def _check_fence(conn: sqlite3.Connection, context_id: str, token: int) -> None: ...

        def _put_branches(
            self,
            conn: sqlite3.Connection,
            seq: int,
            branches: Iterable[Branch],
            replace: bool = False,
        ) -> None: ...

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
