"""Reading a context from the SQLite store: the rows of its branch positions
and of its messages, each checked (``SQLiteStore.load``)."""

from __future__ import annotations

import sqlite3
from typing import Any

from pydantic import ValidationError

from .. import records
from ..model import SCHEMA_VERSION, MessageNode
from ._schema import check_version
from ._sql import Places, column, message_of

__all__ = ["load_messages", "message_row", "positions_of"]

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
# bodies included, in a temporary b-tree (a third of the read of 5,000 rows;
# see docs/benchmarks.md).
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
        for (branch,) in conn.execute(
            "SELECT DISTINCT branch FROM branch_messages WHERE ctx = ?", (seq,)
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
