"""SQLiteStore.load reads a context's message rows with the cyclic collector
paused, and leaves the collector as it found it: running after a load that
succeeds or fails, still off when the caller had turned it off."""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnfsm import records
from turnfsm.errors import StoreError
from turnfsm.storage import SQLiteStore, _sqlite_load

from .contract import rich_context

pytestmark = pytest.mark.anyio


@pytest.fixture
def collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    try:
        yield
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()


async def stored(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    store = SQLiteStore(path)
    try:
        await store.create(rich_context())
    finally:
        await store.aclose()
    return path


async def load(path: Path) -> object:
    store = SQLiteStore(path)
    try:
        return await store.load("rich")
    finally:
        await store.aclose()


async def test_the_rows_are_read_with_the_collector_paused_then_it_runs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collector_restored: None
) -> None:
    path = await stored(tmp_path)
    seen: list[bool] = []
    read = _sqlite_load._read_messages

    def spy(*args: object) -> None:
        seen.append(gc.isenabled())
        read(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_sqlite_load, "_read_messages", spy)
    gc.enable()
    ctx = await load(path)
    assert seen == [False]
    assert gc.isenabled()
    assert records.to_json(ctx) == records.to_json(rich_context())


async def test_a_damaged_row_is_still_refused_and_the_collector_runs_again(
    tmp_path: Path, collector_restored: None
) -> None:
    path = await stored(tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE messages SET body = json_set(body, '$.message.role', 'nobody')")
    conn.commit()
    conn.close()
    gc.enable()
    with pytest.raises(StoreError, match=r"table messages, row \(context 'rich', id '"):
        await load(path)
    assert gc.isenabled()


async def test_a_collector_the_caller_turned_off_stays_off(
    tmp_path: Path, collector_restored: None
) -> None:
    path = await stored(tmp_path)
    gc.disable()
    ctx = await load(path)
    assert not gc.isenabled()
    assert records.to_json(ctx) == records.to_json(rich_context())
