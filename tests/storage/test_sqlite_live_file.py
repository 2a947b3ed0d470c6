"""The SQLite store's truncation check on a file other processes use: a file
shorter than its header says is whole while a checkpoint copies the WAL into
it (another process's, or one a kill cut short), and only a short file with
no WAL or journal beside it is refused as truncated."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from turnfsm.errors import StoreError
from turnfsm.storage import SQLiteStore
from turnfsm.storage._sqlite_schema import check_database_file

from .contract import make_commit, msg, rich_context

pytestmark = pytest.mark.anyio

_WAL_HEADER = 32
_FRAME_HEADER = 24


def _stated_size(db: bytes) -> int:
    """The size the header's page count says the file has."""
    page_size = int.from_bytes(db[16:18], "big")
    return int.from_bytes(db[28:32], "big") * page_size


def _newest_first_page(wal: bytes) -> bytes:
    """The newest copy of page 1 in a WAL (the first page a checkpoint writes)."""
    page_size = int.from_bytes(wal[8:12], "big")
    found = None
    frame = _FRAME_HEADER + page_size
    for at in range(_WAL_HEADER, len(wal) - frame + 1, frame):
        if int.from_bytes(wal[at : at + 4], "big") == 1:
            found = wal[at + _FRAME_HEADER : at + _FRAME_HEADER + page_size]
    assert found is not None, "no copy of page 1 in the WAL"
    return found


def _files(db: Path) -> tuple[bytes, bytes]:
    """A database file's bytes and its WAL's."""
    return db.read_bytes(), Path(f"{db}-wal").read_bytes()


def _write_files(db: Path, content: bytes, wal: bytes) -> None:
    db.write_bytes(content)
    Path(f"{db}-wal").write_bytes(wal)


async def test_a_checkpoint_cut_short_by_a_kill_is_finished_on_opening(tmp_path: Path) -> None:
    """A kill in the middle of a checkpoint leaves the file with its new first
    page and without the pages after it: SQLite finishes the copy from the WAL,
    so the store opens it and reads everything."""
    live = tmp_path / "live.db"
    store = SQLiteStore(live)
    try:
        for i in range(5):
            await store.create(rich_context(f"c{i}"))
            body = [("main", msg(f"x{j}", text="z" * 3000)) for j in range(20)]
            await store.commit(make_commit(f"c{i}", 7, appended=body))
        # what a kill would leave: the commits are in the WAL, not yet in the file
        db, wal = _files(live)
    finally:
        await store.aclose()
    page = _newest_first_page(wal)
    cut = page + db[len(page) :]  # the checkpoint wrote page 1 and was killed
    assert len(cut) < _stated_size(cut), "the file is not shorter than its header says"
    killed = tmp_path / "killed.db"
    _write_files(killed, cut, wal)

    reopened = SQLiteStore(killed)
    try:
        assert await reopened.list_ids() == [f"c{i}" for i in range(5)]
        ctx = await reopened.load("c4")
        assert [m.id for m in ctx.history("main")][-20:] == [f"x{j}" for j in range(20)]
    finally:
        await reopened.aclose()


def test_a_short_file_with_an_empty_wal_is_still_truncated(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    conn_script = f"import sqlite3; c = sqlite3.connect({str(path)!r}); "
    conn_script += "c.execute('CREATE TABLE t (b BLOB)'); "
    conn_script += "c.executemany('INSERT INTO t VALUES (?)', [(b'x' * 5000,)] * 40); c.commit()"
    subprocess.run([sys.executable, "-c", conn_script], check=True)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    Path(f"{path}-wal").write_bytes(b"")  # a WAL truncated after a whole checkpoint
    with pytest.raises(StoreError, match="truncated"):
        check_database_file(path)
    Path(f"{path}-journal").write_bytes(b"")  # an empty journal is not a hot one
    with pytest.raises(StoreError, match="truncated"):
        check_database_file(path)


_WRITER = textwrap.dedent(
    """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE IF NOT EXISTS t (b BLOB)")
    print("ready", flush=True)
    for _ in range(int(sys.argv[2])):
        conn.execute("INSERT INTO t VALUES (?)", (b"x" * 40000,))
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    conn.close()
    """
)


def test_a_file_another_process_checkpoints_is_never_called_truncated(tmp_path: Path) -> None:
    """Another process grows the file by checkpoints while it is checked over
    and over: the check never takes a checkpoint in progress for a cut file."""
    path = tmp_path / "busy.db"
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), "400"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        checks = 0
        while writer.poll() is None:
            check_database_file(path)
            checks += 1
        assert writer.returncode == 0
        assert checks > 100, f"only {checks} checks ran while the writer wrote"
    finally:
        writer.kill()
        writer.communicate()
    assert len(path.read_bytes()) >= 400 * 40000
