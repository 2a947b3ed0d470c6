"""Reading a context from the SQLite store: the rows of its branches, their
positions and its messages, each checked (``SQLiteStore.load``); and the
partial reads: a context's outline and a page of a branch
(``SQLiteStore.outline``, ``SQLiteStore.message_page``)."""

from __future__ import annotations

import functools
import sqlite3
from typing import Any

from pydantic import ValidationError

from .. import records
from ..errors import ContextNotFound
from ..model import SCHEMA_VERSION, Branch, ChatContext, MessageNode
from ._outline import ContextOutline, pending_of_branch
from ._schema import check_version
from ._sql import (
    BRANCH_LENGTH,
    HEAD_COLUMNS,
    PAGE,
    Places,
    branch_of,
    check_outline,
    column,
    context_of,
    message_of,
    page_of,
)

__all__ = [
    "begin_with_row",
    "branch_page",
    "branches_of",
    "load_messages",
    "message_row",
    "outline_of_rows",
    "page_of_rows",
    "positions_of",
]

_V = SCHEMA_VERSION

_ODD_POSITIONS = (
    "SELECT EXISTS (SELECT 1 FROM branch_messages WHERE ctx = ? "
    "AND NOT (typeof(message_id) = 'text' AND schema_version IS ?))"
)
"""Whether a context has a ``branch_messages`` row that is not of the common kind."""

# A context's message rows in the order they were written. The rows are found
# through the (ctx, id) index, whose order is the ids'; asking for that
# index's rowids first and the rows by rowid after reads them in rowid order
# directly, where "WHERE ctx = ? ORDER BY rowid" sorted every selected row,
# bodies included, in a temporary b-tree (see docs/benchmarks.md).
_SELECT_MESSAGES = (
    "SELECT id, schema_version, body FROM messages "
    "WHERE rowid IN (SELECT rowid FROM messages WHERE ctx = ?) ORDER BY rowid"
)


def positions_of(
    conn: sqlite3.Connection, places: Places, context_id: str, seq: int
) -> dict[str, list[str]]:
    """Each branch's message ids, in order. When every row is of the common
    kind (a text id, the current schema version: one query says so), each
    branch's ids are read with a query of their own, without the rest of
    the row; otherwise row by row, each checked (damage raises a StoreError
    naming the row)."""
    positions: dict[str, list[str]] = {}
    if not conn.execute(_ODD_POSITIONS, (seq, _V)).fetchone()[0]:
        # the names from the few rows of ``branches`` (a branch's positions
        # are only ever looked up by its row there, in ``branches_of``),
        # where "SELECT DISTINCT branch" went over every position once more
        for (branch,) in conn.execute(
            "SELECT name FROM branches WHERE ctx = ? ORDER BY rowid", (seq,)
        ).fetchall():
            positions[branch] = [
                mid
                for (mid,) in conn.execute(
                    "SELECT message_id FROM branch_messages WHERE ctx = ? AND branch = ? "
                    "ORDER BY pos",
                    (seq, branch),
                ).fetchall()
            ]
        return positions
    for branch, pos, mid, version in conn.execute(
        "SELECT branch, pos, message_id, schema_version FROM branch_messages WHERE ctx = ? "
        "ORDER BY branch, pos",
        (seq,),
    ):
        row = places.row(context_id, "branch_messages", f"branch {branch!r}, pos {pos!r}")
        column(row, "message_id", mid, str)
        column(row, "schema_version", version, int)
        if version != _V:
            check_version(version, where=places.where(context_id, f", branch {branch!r}"))
        positions.setdefault(branch, []).append(mid)
    return positions


def load_messages(
    conn: sqlite3.Connection,
    places: Places,
    context_id: str,
    seq: int,
    pool: dict[str, MessageNode],
) -> None:
    """Every message row of the context, each validated strictly, into ``pool``.

    A row of the common kind (text id and body, the current schema version)
    goes straight to the model's strict JSON validation; the description of
    where the row is is made only for an error. Validating the bodies as one
    JSON array in a single call was measured slower: the model's own
    validation is nearly all of the time (see docs/benchmarks.md)."""
    # the adapter's own validator: TypeAdapter.validate_json is a Python
    # wrapper around it, a call more per row
    validate = records.adapter(MessageNode).validator.validate_json
    for mid, version, body in conn.execute(_SELECT_MESSAGES, (seq,)):
        if type(mid) is str and type(body) is str and type(version) is int and version == _V:
            try:
                node = validate(body, strict=True)
            except ValidationError:
                node = None
            if node is not None and node.id == mid:
                pool[mid] = node
                continue
        pool[mid] = message_row(places, context_id, mid, version, body)


def message_row(places: Places, context_id: str, mid: Any, version: Any, body: Any) -> MessageNode:
    """One message row, checked column by column, then validated as the SQL
    stores validate one (damage raises a StoreError naming the row)."""
    row = places.row(context_id, "messages", f"id {mid!r}")
    column(row, "id", mid, str)
    column(row, "schema_version", version, int)
    column(row, "body", body, str)
    return message_of(places, context_id, mid, version, body)


def branches_of(
    conn: sqlite3.Connection,
    places: Places,
    context_id: str,
    seq: int,
    positions: dict[str, list[str]] | None,
) -> tuple[dict[str, Branch], dict[str, int]]:
    """The context's branches, in the order they were made, with their message
    ids from ``positions``; with ``positions`` None (an outline), without
    them, and each one's length as its last position says."""
    branches: dict[str, Branch] = {}
    lengths: dict[str, int] = {}
    for name, version, body, last in conn.execute(
        f"SELECT name, schema_version, body, {BRANCH_LENGTH} FROM branches AS b "
        "WHERE ctx = ? ORDER BY rowid",
        (seq,),
    ):
        row = places.row(context_id, "branches", f"name {name!r}")
        column(row, "name", name, str)
        column(row, "schema_version", version, int)
        column(row, "body", body, str)
        ids = [] if positions is None else positions.get(name, [])
        branches[name] = branch_of(places, context_id, name, version, body, ids)
        if positions is None:
            where = places.row(context_id, "branch_messages", f"branch {name!r}")
            column(where, "pos", last, (int, type(None)))  # the largest: a text sorts last
            lengths[name] = 0 if last is None else last + 1
    return branches, lengths


def begin_with_row(
    conn: sqlite3.Connection, places: Places, context_id: str
) -> tuple[int, ChatContext]:
    """Begin the read's snapshot (the caller commits it), and read the
    context's row: its ``seq`` and the context without branches or messages."""
    conn.execute("BEGIN")
    head = conn.execute(
        f"SELECT {HEAD_COLUMNS} FROM contexts WHERE id = ?", (context_id,)
    ).fetchone()
    if head is None:
        raise ContextNotFound(context_id)
    return head[0], context_of(places, head, check_columns=True)


def outline_of_rows(conn: sqlite3.Connection, places: Places, context_id: str) -> ContextOutline:
    """``SQLiteStore.outline``: the context's row, its branch rows with each
    one's last position, and a tail of the active branch, in one snapshot."""
    seq, ctx = begin_with_row(conn, places, context_id)
    ctx.branches, lengths = branches_of(conn, places, context_id, seq, None)
    check_outline(places, ctx)
    active = ctx.active_branch_name
    length = lengths[active]
    pending = pending_of_branch(
        length,
        lambda n: page_of_rows(conn, places, context_id, seq, active, length - n, n),
    )
    conn.execute("COMMIT")
    return ContextOutline(ctx, lengths, pending)


def page_of_rows(
    conn: sqlite3.Connection,
    places: Places,
    context_id: str,
    seq: int,
    branch: str,
    offset: int,
    limit: int | None,
) -> list[MessageNode]:
    """The messages of ``branch`` from index ``offset``, at most ``limit``."""
    rows = conn.execute(PAGE, (seq, branch, offset, -1 if limit is None else limit))
    return page_of(places, context_id, branch, offset, rows, functools.partial(message_row, places))


def branch_page(
    conn: sqlite3.Connection,
    places: Places,
    context_id: str,
    branch: str | None,
    offset: int,
    limit: int | None,
) -> tuple[str, list[MessageNode]] | None:
    """``SQLiteStore.message_page``: the branch's name (the active one when
    ``branch`` is None) and its page, in one snapshot; None for no such branch."""
    conn.execute("BEGIN")
    row = conn.execute(
        "SELECT seq, active_branch FROM contexts WHERE id = ?", (context_id,)
    ).fetchone()
    if row is None:
        raise ContextNotFound(context_id)
    seq, active = row
    column(places.row(context_id, "contexts"), "active_branch", active, str)
    name = active if branch is None else branch
    known = conn.execute("SELECT 1 FROM branches WHERE ctx = ? AND name = ?", (seq, name))
    page = None
    if known.fetchone() is not None:
        page = name, page_of_rows(conn, places, context_id, seq, name, offset, limit)
    conn.execute("COMMIT")
    return page
