"""``turnfsm db upgrade`` (docs/storage.md, "Table layouts and migrations"): a
SQLite file and a PostgreSQL database are upgraded the same way, and the
server's tables are made beside the store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from turnfsm.cli import main as cli_main
from turnfsm.errors import SchemaVersionError
from turnfsm.storage import SQLiteStore
from turnfsm.storage._eventlog import LogNote, open_event_log
from turnfsm.storage._migrate import missing
from turnfsm.storage._sqlite_schema import MIGRATIONS, STORE_FORMAT
from turnfsm.storage._upgrade import upgrade_store

from .contract import make_commit, msg, rich_context

pytestmark = pytest.mark.anyio

SERVER_TABLES = {"server_events", "server_context_tenants"}


def tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


def store_rows(path: Path) -> list[str]:
    """The store's own tables, dumped (the server's left out)."""
    conn = sqlite3.connect(path)
    try:
        return [line for line in conn.iterdump() if "server_" not in line]
    finally:
        conn.close()


def test_the_missing_migrations_by_one_rule() -> None:
    assert list(missing(None, 4, "db")) == [1, 2, 3, 4]
    assert list(missing(2, 4, "db")) == [3, 4]
    assert list(missing(4, 4, "db")) == []
    assert list(missing(1, 4, "db", to=2)) == [2]
    with pytest.raises(SchemaVersionError):
        missing(5, 4, "db")
    with pytest.raises(Exception, match="no valid store_format"):
        missing(-1, 4, "db")
    assert len(MIGRATIONS) == STORE_FORMAT == 1


async def test_sqlite_a_new_file_gets_the_store_and_the_server_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "new" / "chats.db"
    url = f"sqlite:///{path}"
    code = await anyio.to_thread.run_sync(cli_main, ["db", "upgrade", "--store", url])
    assert code == 0
    out = capsys.readouterr().out
    assert f"made a turnfsm store, format {STORE_FORMAT}" in out
    assert "server_events" in out
    assert {"turnfsm_meta", "contexts", "steps", "leases"} | SERVER_TABLES <= tables(path)
    # the file is a store like any other: a store opens it and writes to it
    store = SQLiteStore(path)
    try:
        await store.create(rich_context("c"))
        await store.commit(make_commit("c", 7, appended=[("main", msg("n", text="n"))]))
        assert (await store.load("c")).version == 8
    finally:
        await store.aclose()
    code = await anyio.to_thread.run_sync(cli_main, ["db", "upgrade", "--store", url])
    assert code == 0
    assert f"store format {STORE_FORMAT}, up to date" in capsys.readouterr().out


async def test_sqlite_a_store_made_by_opening_it_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    store = SQLiteStore(path)
    await store.create(rich_context("c"))
    await store.aclose()
    assert not SERVER_TABLES & tables(path)  # opening a store makes only its own
    before = store_rows(path)
    done = await upgrade_store(f"sqlite:///{path}")
    assert (done.before, done.after) == (STORE_FORMAT, STORE_FORMAT)
    assert tables(path) >= SERVER_TABLES
    assert store_rows(path) == before


async def test_the_server_tables_serve_on_an_upgraded_store_and_on_one_that_is_not(
    tmp_path: Path,
) -> None:
    upgraded, plain = tmp_path / "up.db", tmp_path / "plain.db"
    await upgrade_store(f"sqlite:///{upgraded}")
    for path in (upgraded, plain):
        store = SQLiteStore(path)
        try:
            log = open_event_log(store)
            await log.open()
            await log.set_tenant("c", "acme")
            await log.add([("c", 1, "StateChanged", "{}")], [LogNote("c", 1)])
            assert await log.tenant("c") == "acme"
            assert await log.after("c", 0) == [(1, "StateChanged", "{}")]
            await log.aclose()
        finally:
            await store.aclose()
        assert tables(path) >= SERVER_TABLES


async def test_sqlite_a_newer_layout_is_refused_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "chats.db"
    await SQLiteStore(path).aclose()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "UPDATE turnfsm_meta SET value = ? WHERE key = 'store_format'", (STORE_FORMAT + 1,)
        )
    conn.close()
    code = await anyio.to_thread.run_sync(
        cli_main, ["db", "upgrade", "--store", f"sqlite:///{path}"]
    )
    assert code != 0
    assert "store format" in capsys.readouterr().err
    assert not SERVER_TABLES & tables(path)


def test_files_and_memory_are_told_they_need_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["db", "upgrade", "--store", f"files:///{tmp_path}"]) == 0
    assert "brings its layout up to date when opened" in capsys.readouterr().out


async def test_postgresql_the_upgrade_makes_the_server_tables(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    from turnfsm.storage._pg_schema import STORE_FORMAT as PG_FORMAT

    code = await anyio.to_thread.run_sync(cli_main, ["db", "upgrade", "--store", pg_url])
    assert code == 0
    assert f"made a turnfsm store, format {PG_FORMAT}" in capsys.readouterr().out
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
        names = {r[0] for r in await cur.fetchall()}
    assert {"turnfsm_meta", "contexts", "leases"} | SERVER_TABLES <= names
