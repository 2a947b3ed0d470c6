"""The rows the SQLite store's commits insert, written as multi-row ``INSERT``\\ s.

Every SQL statement the writer thread steps hands the GIL to the event loop's
thread and then waits to take it back (up to the interpreter's switch
interval while the loop is busy), so the store keeps the statements of a
commit few. A commit's own checks run at once, in its ``UPDATE`` of the
context row (the version, the lease's fence, and in its ``RETURNING`` the
last position of each branch it appends to); the rows it inserts (its
messages, their branch positions, its steps, the lease it takes or gives
back) are gathered in :class:`Rows` and written when the writer's group
ends, one multi-row ``INSERT`` per table for all the commits of the group,
or at once for a commit made on its own (``SQLiteStore._commit_tx``).

The rows written are the rows the statements one by one wrote, in the same
order (so with the same rowids): a group holds at most one commit of a
context (the next commit of a context is made once this one is
acknowledged, after the group's ``COMMIT``), and a write of the group that
is not a commit first has the rows gathered before it written
(``SQLiteThreads._group_tx``). Should a commit of a context whose rows are
still gathered come along all the same, they are written before it goes on.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ._base import Commit
from ._sql import CommitRows, commit_rows

__all__ = ["Rows", "commit_rows_of"]

_MOST = 64
"""Rows per statement at most (64 steps are 640 values, under SQLite's
oldest limit of 999)."""

_TABLES: dict[str, tuple[str, str, str]] = {
    # the statement's head, one row's placeholders, its tail
    "messages": (
        "INSERT INTO messages (ctx, id, schema_version, body) VALUES ",
        "(?, ?, ?, ?)",
        # a message appended again replaces its body (UPSERT_MESSAGE)
        " ON CONFLICT (ctx, id) DO UPDATE SET schema_version = excluded.schema_version, "
        "body = excluded.body",
    ),
    "positions": (
        "INSERT INTO branch_messages (ctx, branch, pos, message_id, schema_version) VALUES ",
        "(?, ?, ?, ?, ?)",
        "",
    ),
    "steps": (
        "INSERT INTO steps (ctx, schema_version, version, from_state, trigger, to_state, at, "
        "detail, lease_token, lease_owner) VALUES ",
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        "",
    ),
    "leases": (
        "INSERT INTO leases (context_id, owner, token, expires_at) VALUES ",
        "(?, ?, ?, ?)",
        # a context's lease, stored whole (PUT_LEASE in _sql)
        " ON CONFLICT (context_id) DO UPDATE SET owner = excluded.owner, "
        "token = excluded.token, expires_at = excluded.expires_at",
    ),
    "releases": (
        # a lease given up under its token (RELEASE), for several at once
        "UPDATE leases SET owner = NULL WHERE (context_id, token) IN (VALUES ",
        "(?, ?)",
        ")",
    ),
}

_STATEMENTS: dict[tuple[str, int], str] = {}


def _statement(table: str, count: int) -> str:
    """The statement for ``count`` rows of ``table`` (made once; the counts
    used are powers of two, so few texts reach sqlite3's statement cache)."""
    found = _STATEMENTS.get((table, count))
    if found is None:
        head, one, tail = _TABLES[table]
        found = _STATEMENTS[(table, count)] = head + ", ".join([one] * count) + tail
    return found


_ONE = {table: _statement(table, 1) for table in _TABLES}
"""The statements for one row (a commit on its own inserts one message, and
one position, per statement)."""


def _write(conn: sqlite3.Connection, table: str, rows: list[tuple[Any, ...]]) -> None:
    """``rows`` into ``table``, in order, in as few statements as the powers
    of two up to :data:`_MOST` make them (a row set of 1 to 64 rows takes
    at most 7)."""
    at, end = 0, len(rows)
    while at < end:
        count = min(_MOST, 1 << ((end - at).bit_length() - 1))
        part = rows[at : at + count]
        conn.execute(_statement(table, count), [v for row in part for v in row])
        at += count


class Rows:
    """The rows gathered for insertion, table by table, in the order given,
    and the contexts (by ``seq``) they belong to."""

    __slots__ = ("contexts", "leases", "messages", "positions", "releases", "steps")

    def __init__(self) -> None:
        self.contexts: set[int] = set()
        self.messages: list[tuple[Any, ...]] = []
        self.positions: list[tuple[Any, ...]] = []
        self.steps: list[tuple[Any, ...]] = []
        self.leases: list[tuple[Any, ...]] = []
        self.releases: list[tuple[Any, ...]] = []

    def __bool__(self) -> bool:
        return bool(self.contexts)

    def write(self, conn: sqlite3.Connection) -> None:
        """Insert every row gathered, then forget them (also when a statement
        fails: the transaction they were for is then rolled back)."""
        try:
            for table, rows in (
                ("messages", self.messages),
                ("positions", self.positions),
                ("steps", self.steps),
                ("leases", self.leases),
                ("releases", self.releases),
            ):
                if len(rows) == 1:
                    conn.execute(_ONE[table], rows[0])
                elif rows:
                    _write(conn, table, rows)
        finally:
            self.clear()

    def clear(self) -> None:
        self.contexts.clear()
        self.messages.clear()
        self.positions.clear()
        self.steps.clear()
        self.leases.clear()
        self.releases.clear()


def commit_rows_of(commit: Commit) -> CommitRows:
    """What a commit writes (:func:`~turnfsm.storage._sql.commit_rows`), with
    the lease's check in the ``UPDATE``'s own ``WHERE`` when the commit names
    a lease, and in its ``RETURNING``, for each branch it appends to, whether
    the branch exists and its last position (one statement fewer per commit;
    not for a commit that also puts branches: their positions are read after)."""
    cid = commit.context_id
    positions = not commit.branches
    take = commit.take_lease if commit.lease_token is not None else None
    if take is not None:  # the lease taken: the token just before, released or ours
        return commit_rows(
            commit,
            also=(
                " AND IFNULL((SELECT token = ? AND (owner IS NULL OR owner = ?) FROM leases "
                "WHERE context_id = ?), ?)",
                [take.token - 1, take.owner, cid, int(take.token == 1)],
            ),
            positions=positions,
        )
    if commit.lease_token is not None:  # the fence, in the same statement
        return commit_rows(
            commit,
            also=(
                " AND (SELECT token FROM leases WHERE context_id = ?) IS ?",
                [cid, commit.lease_token],
            ),
            positions=positions,
        )
    return commit_rows(commit, positions=positions)
