"""What SQLiteStore.load reads of a context's branch positions: one pass
that says every row is of the common kind, then each branch's ids, the
branch names taken from the ``branches`` rows (not from one more pass over
every position)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from turnfsm import records
from turnfsm.storage import SQLiteStore

from .contract import rich_context

pytestmark = pytest.mark.anyio


async def test_the_positions_are_read_once_per_branch_and_checked_once(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SQLiteStore(path)
    try:
        await store.create(rich_context())
        seen: list[str] = []
        for conn in (store._conn, store._rconn):
            assert conn is not None
            conn.set_trace_callback(seen.append)
        ctx = await store.load("rich")
    finally:
        await store.aclose()
    on_positions = [s for s in seen if "FROM branch_messages" in s and "FROM branches" not in s]
    assert not [s for s in on_positions if "DISTINCT" in s]
    assert len(on_positions) == 1 + len(ctx.branches)
    assert records.to_json(ctx) == records.to_json(rich_context())


async def test_positions_of_a_branch_without_its_row_are_left_out_as_before(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    store = SQLiteStore(path)
    try:
        await store.create(rich_context())
    finally:
        await store.aclose()
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO branch_messages (ctx, branch, pos, message_id, schema_version) "
        "SELECT ctx, 'gone', pos, message_id, schema_version FROM branch_messages "
        "WHERE branch = 'main'"
    )
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    try:
        ctx = await store.load("rich")
    finally:
        await store.aclose()
    assert "gone" not in ctx.branches
    assert records.to_json(ctx) == records.to_json(rich_context())
