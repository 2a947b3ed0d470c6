"""The SQLite store: the contract suite, and what is particular to SQLite.

WAL and ``synchronous``, one hand-off to the store's thread per call, the cost
of a commit against history length, damaged files, two processes, the store
format version, busy_timeout. ``python -m tests.storage.test_sqlite`` (from the
repository root) prints the hand-off and bytes-per-commit figures quoted in
``turnfsm/storage/_sqlite.py``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from turnfsm import Engine, records
from turnfsm.errors import (
    ContextNotFound,
    InvalidInput,
    SchemaVersionError,
    StoreError,
    VersionConflict,
)
from turnfsm.model import SCHEMA_VERSION, Role
from turnfsm.storage import SQLiteStore, Store, open_store
from turnfsm.storage._sqlite import STORE_FORMAT, check_database_file
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

from .contract import (
    StoreContract,
    drive_engine,
    empty_context,
    make_commit,
    msg,
    rich_context,
    snapshot,
)
from .contract_reads import PartialReadsContract

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


class TestSQLiteStore(StoreContract, PartialReadsContract):
    def make_store(self, tmp_path: Path) -> Store:
        return SQLiteStore(db_path(tmp_path))

    def reopen(self, store: Store, tmp_path: Path) -> Store:
        return SQLiteStore(db_path(tmp_path))

    def set_schema_version(
        self,
        store: Store,
        tmp_path: Path,
        context_id: str,
        version: int,
        message_id: str | None = None,
    ) -> str:
        path = db_path(tmp_path)
        with sqlite3.connect(path) as conn:
            if message_id is None:
                cur = conn.execute(
                    "UPDATE contexts SET schema_version = ? WHERE id = ?", (version, context_id)
                )
            else:
                cur = conn.execute(
                    "UPDATE messages SET schema_version = ? WHERE id = ? AND ctx = "
                    "(SELECT seq FROM contexts WHERE id = ?)",
                    (version, message_id, context_id),
                )
            assert cur.rowcount == 1
        conn.close()
        return str(path)


class TestSQLiteStoreSynchronousNormal(TestSQLiteStore):
    """The whole contract again at ``synchronous=NORMAL`` (set through the URL)."""

    def make_store(self, tmp_path: Path) -> Store:
        store = open_store(f"sqlite:///{db_path(tmp_path)}?synchronous=NORMAL")
        assert isinstance(store, SQLiteStore)
        return store


# --------------------------------------------------------------------------- helpers


def pragma(store: SQLiteStore, name: str) -> Any:
    conn = store._conn
    assert conn is not None
    return conn.execute(f"PRAGMA {name}").fetchone()[0]


def file_size(path: Path) -> int:
    """The size of a file, -1 when it does not exist."""
    return path.stat().st_size if path.exists() else -1


def read_bytes(path: Path) -> bytes:
    return path.read_bytes()


def rows(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> Any:
    store = SQLiteStore(db_path(tmp_path))
    yield store
    await store.aclose()


# --------------------------------------------------------------------------- settings


async def test_wal_and_synchronous_full_by_default(sqlite_store: SQLiteStore) -> None:
    assert pragma(sqlite_store, "journal_mode") == "wal"
    assert pragma(sqlite_store, "synchronous") == 2  # FULL
    assert pragma(sqlite_store, "busy_timeout") == 5000
    assert sqlite_store.synchronous == "FULL"


@pytest.mark.parametrize(("given", "code"), [("NORMAL", 1), ("normal", 1), ("EXTRA", 3)])
async def test_synchronous_is_configurable(tmp_path: Path, given: str, code: int) -> None:
    store = SQLiteStore(db_path(tmp_path), synchronous=given, busy_timeout=1.5)
    try:
        assert pragma(store, "synchronous") == code
        assert pragma(store, "busy_timeout") == 1500
    finally:
        await store.aclose()


async def test_bad_settings_are_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="synchronous"):
        SQLiteStore(db_path(tmp_path), synchronous="SOMETIMES")
    with pytest.raises(InvalidInput, match="busy_timeout"):
        SQLiteStore(db_path(tmp_path), busy_timeout=-1)
    assert not db_path(tmp_path).exists()


async def test_every_row_carries_a_schema_version(sqlite_store: SQLiteStore) -> None:
    engine, _ = await drive_engine(sqlite_store)
    path = sqlite_store.path
    await engine.aclose()
    for table in ("contexts", "branches", "branch_messages", "messages", "steps"):
        versions = rows(path, f"SELECT DISTINCT schema_version FROM {table}")
        assert versions == [(SCHEMA_VERSION,)], table
        (count,) = rows(path, f"SELECT count(*) FROM {table}")[0]
        assert count > 0, table
    (fmt,) = rows(path, "SELECT value FROM turnfsm_meta WHERE key = 'store_format'")[0]
    assert fmt == str(STORE_FORMAT)


async def test_messages_are_stored_as_model_json(sqlite_store: SQLiteStore) -> None:
    ctx = rich_context()
    await sqlite_store.create(ctx)
    stored = dict(rows(sqlite_store.path, "SELECT id, body FROM messages"))
    assert stored == {mid: records.to_json(n).decode() for mid, n in ctx.message_pool.items()}


async def test_parent_directories_are_created(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a" / "b" / "c.db")
    try:
        await store.create(empty_context("x"))
        assert (tmp_path / "a" / "b" / "c.db").is_file()
    finally:
        await store.aclose()


async def test_closed_store_refuses_calls(tmp_path: Path) -> None:
    store = SQLiteStore(db_path(tmp_path))
    await store.aclose()
    with pytest.raises(StoreError, match="closed"):
        await store.list_ids()


# --------------------------------------------------------------------------- threads


async def test_exactly_one_hand_off_per_store_call(
    sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each call is one hand-off to the store's writer or reader thread (through
    its queue), never a thread-pool hop."""
    hops: list[str] = []
    real = SQLiteStore._submit

    async def counting(self: SQLiteStore, fn: Any, **kwargs: Any) -> Any:
        hops.append("reader" if kwargs["reader"] else "writer")
        return await real(self, fn, **kwargs)

    async def no_pool(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a thread-pool hop")

    monkeypatch.setattr(SQLiteStore, "_submit", counting)
    monkeypatch.setattr(anyio.to_thread, "run_sync", no_pool)
    store = sqlite_store
    calls: list[tuple[str, Any]] = [
        ("create", store.create(rich_context("c"))),
        (
            "commit",
            store.commit(
                make_commit(
                    "c",
                    7,
                    steps=[
                        ("Idle", "t", "ExecutingTools"),
                        ("ExecutingTools", "u", "PermanentFailure"),
                    ],
                    appended=[("main", msg("n1", text="1")), ("alt", msg("n2", text="2"))],
                    replaced=[msg("m1", text="new")],
                )
            ),
        ),
        ("load", store.load("c")),
        ("steps", store.steps("c")),
        ("list_ids", store.list_ids()),
        ("list_contexts", store.list_contexts()),
        ("integrity_check", store.integrity_check()),
        ("delete", store.delete("c")),
    ]
    writes = {"create", "commit", "delete"}
    for name, coro in calls:
        before = len(hops)
        await coro
        assert hops[before:] == ["writer" if name in writes else "reader"], name


async def test_the_connection_is_used_by_one_thread_at_a_time(
    sqlite_store: SQLiteStore,
) -> None:
    """Many concurrent calls on one store object: all complete, none interleaves
    inside another's transaction (a commit racing loads stays atomic)."""
    store = sqlite_store
    await store.create(empty_context("c"))
    seen: list[int] = []

    async def writer() -> None:
        for v in range(30):
            await store.commit(
                make_commit(
                    "c",
                    v,
                    appended=[("main", msg(f"a{v}", text="a")), ("main", msg(f"b{v}", text="b"))],
                )
            )

    async def reader() -> None:
        for _ in range(30):
            ctx = await store.load("c")
            assert len(ctx.branches["main"].message_ids) == 2 * ctx.version
            seen.append(ctx.version)

    async with anyio.create_task_group() as tg:
        tg.start_soon(writer)
        for _ in range(3):
            tg.start_soon(reader)
    assert (await store.load("c")).version == 30
    assert len(seen) == 90


def measure_thread_hop(path: Path, n: int = 400, synchronous: str = "NORMAL") -> dict[str, float]:
    """Seconds per small commit, run synchronously in this thread and through the
    store's one hand-off to its writer thread (same store, same kind of commit)."""

    async def main() -> dict[str, float]:
        store = SQLiteStore(path, synchronous=synchronous)
        try:
            await store.create(empty_context("direct"))
            await store.create(empty_context("hop"))

            def commit_of(cid: str, v: int) -> Any:
                return make_commit(
                    cid,
                    v,
                    steps=[("Idle", "t", "ExecutingTools")],
                    appended=[("main", msg(f"{cid}-{v}", Role.USER, "hello world"))],
                )

            for v in range(20):  # warm up both paths
                store._call(lambda c, v=v: store._commit_tx(c, commit_of("direct", v)), write=True)
                await store.commit(commit_of("hop", v))
            start = time.perf_counter()
            for v in range(20, 20 + n):
                store._call(lambda c, v=v: store._commit_tx(c, commit_of("direct", v)), write=True)
            direct = (time.perf_counter() - start) / n
            start = time.perf_counter()
            for v in range(20, 20 + n):
                await store.commit(commit_of("hop", v))
            hop = (time.perf_counter() - start) / n
            return {"direct": direct, "hop": hop, "overhead": hop - direct}
        finally:
            await store.aclose()

    return anyio.run(main)


def test_thread_hop_overhead_is_measured(tmp_path: Path) -> None:
    """Not a timing assertion (machines differ): the measurement runs, and the hop
    is not an order of magnitude beyond the commit itself."""
    figures = measure_thread_hop(db_path(tmp_path), n=100)
    assert figures["direct"] > 0 and figures["hop"] > 0
    assert figures["hop"] < 50 * figures["direct"] + 0.01, figures


# --------------------------------------------------------------------------- cost per commit


def measure_commit_cost(
    path: Path, sizes: tuple[int, ...] = (100, 2000), n: int = 20
) -> dict[int, dict[str, float]]:
    """Rows changed (``total_changes``) and WAL bytes written per commit of one
    message and one step, after the history has reached each size.

    WAL auto-checkpoints are turned off so that every page a commit writes stays
    in the WAL and its growth is exactly the bytes written.
    """

    async def main() -> dict[int, dict[str, float]]:
        store = SQLiteStore(path, synchronous="NORMAL")
        conn = store._conn
        assert conn is not None
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        wal = Path(f"{path}-wal")
        out: dict[int, dict[str, float]] = {}
        try:
            await store.create(empty_context("c"))
            version, count = 0, 0
            for size in sizes:
                while count < size:  # grow the history in big commits
                    batch = [
                        ("main", msg(f"h{count + i}", Role.USER, "x" * 200))
                        for i in range(min(100, size - count))
                    ]
                    await store.commit(make_commit("c", version, appended=batch))
                    version += 1
                    count += len(batch)
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                changes0, wal0 = conn.total_changes, file_size(wal)
                for _ in range(n):
                    node = msg(f"t{count}", Role.ASSISTANT, "y" * 200)
                    await store.commit(
                        make_commit(
                            "c",
                            version,
                            steps=[("Idle", "t", "ExecutingTools")],
                            appended=[("main", node)],
                        )
                    )
                    version += 1
                    count += 1
                out[size] = {
                    "rows": (conn.total_changes - changes0) / n,
                    "bytes": (file_size(wal) - wal0) / n,
                }
            loaded = await store.load("c")
            assert len(loaded.history()) == count
        finally:
            await store.aclose()
        return out

    return anyio.run(main)


def test_commit_cost_does_not_grow_with_history(tmp_path: Path) -> None:
    cost = measure_commit_cost(db_path(tmp_path))
    small, big = cost[100], cost[2000]
    # one contexts update, one message, one position, one step
    assert small["rows"] == big["rows"] == 4, cost
    # a handful of pages either way; rewriting the history would be 20x
    assert big["bytes"] <= 1.5 * small["bytes"], cost
    assert big["bytes"] < 64 * 1024, cost


# --------------------------------------------------------------------------- damaged files


def test_garbage_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    garbage = os.urandom(8192)
    path.write_bytes(garbage)
    with pytest.raises(StoreError) as info:
        SQLiteStore(path)
    assert str(path) in str(info.value)
    assert "not a SQLite database" in str(info.value)
    assert path.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.db"]  # no -wal, no -shm
    with pytest.raises(StoreError, match=str(path)):
        open_store(f"sqlite:///{path}")
    assert path.read_bytes() == garbage


def test_short_file_is_refused(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    path.write_bytes(b"SQLite format 3\x00" + b"\x10")
    with pytest.raises(StoreError, match="truncated"):
        SQLiteStore(path)
    assert path.read_bytes() == b"SQLite format 3\x00\x10"


async def filled_database(path: Path, contexts: int = 5) -> bytes:
    store = SQLiteStore(path)
    for i in range(contexts):
        await store.create(rich_context(f"c{i}"))
        await store.commit(
            make_commit(
                f"c{i}", 7, appended=[("main", msg(f"x{j}", text="z" * 3000)) for j in range(20)]
            )
        )
    await store.aclose()
    assert file_size(Path(f"{path}-wal")) == -1  # checkpointed and removed on close
    return read_bytes(path)


async def test_truncated_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    whole = await filled_database(path)
    cut = whole[: len(whole) // 2]
    path.write_bytes(cut)
    with pytest.raises(StoreError) as info:
        SQLiteStore(path)
    assert str(path) in str(info.value)
    assert "truncated" in str(info.value)
    assert path.read_bytes() == cut
    with pytest.raises(StoreError):
        check_database_file(path)


async def test_damaged_page_is_a_store_error_naming_the_file(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    whole = await filled_database(path)
    page = int.from_bytes(whole[16:18], "big")
    damaged = bytearray(whole)
    hit = 0
    for i in range(page, len(whole), page):  # the pages holding message bodies
        if b"z" * 500 in whole[i : i + page]:
            damaged[i : i + 64] = b"\xff" * 64
            hit += 1
    assert hit > 10
    path.write_bytes(bytes(damaged))
    store = SQLiteStore(path)  # the tables themselves are sound
    try:
        with pytest.raises(StoreError) as info:
            await store.load("c1")
        assert str(path) in str(info.value)
        assert "malformed" in str(info.value)
        problems = await store.integrity_check()
        assert problems, "integrity_check found nothing in a damaged file"
        assert await store.list_ids() == [f"c{i}" for i in range(5)]  # what is sound still reads
        for write in (
            store.commit(make_commit("c2", 8)),
            store.create(empty_context("new")),
            store.delete("c3"),
        ):
            with pytest.raises(StoreError, match="damaged"):
                await write
    finally:
        await store.aclose()
    assert read_bytes(path) == bytes(damaged)


async def test_integrity_check_of_a_sound_database(sqlite_store: SQLiteStore) -> None:
    engine, _ = await drive_engine(sqlite_store)
    assert await sqlite_store.integrity_check() == []
    await engine.aclose()


def test_a_database_of_another_application_is_refused(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a turnfsm store"):
        SQLiteStore(path)
    assert path.read_bytes() == before


async def test_a_newer_store_format_is_refused(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    await SQLiteStore(path).aclose()
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE turnfsm_meta SET value = ? WHERE key = 'store_format'", (STORE_FORMAT + 1,)
    )
    conn.commit()
    conn.close()
    with pytest.raises(SchemaVersionError) as info:
        SQLiteStore(path)
    assert str(path) in str(info.value)
    assert info.value.found == STORE_FORMAT + 1


async def test_an_empty_file_becomes_a_new_store(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    path.write_bytes(b"")
    store = SQLiteStore(path)
    try:
        await store.create(empty_context("x"))
        assert await store.list_ids() == ["x"]
    finally:
        await store.aclose()


# --------------------------------------------------------------------------- schema versions


async def test_an_old_context_row_is_upgraded_on_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a pretend version 2 and an upcaster 1 -> 2: a version-1 row loads
    through the upcaster, and the first commit rewrites the row at version 2."""
    from turnfsm.storage import _schema, _sql, _sqlite

    path = db_path(tmp_path)
    store = SQLiteStore(path)
    await store.create(rich_context("old"))
    await store.aclose()

    chain = _schema.UpcasterChain("context", current=2)

    @chain.register(1)
    def one_to_two(data: dict[str, Any]) -> dict[str, Any]:
        data["config"]["parameters"]["upgraded"] = True
        return data

    monkeypatch.setattr(_schema, "CONTEXT_UPCASTERS", chain)
    monkeypatch.setattr(_schema, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(_sqlite, "_V", 2)
    monkeypatch.setattr(_sql, "V", 2)
    store = SQLiteStore(path)
    try:
        loaded = await store.load("old")
        assert loaded.config.parameters["upgraded"] is True
        assert rows(path, "SELECT schema_version FROM contexts") == [(1,)]  # reads write nothing
        await store.commit(make_commit("old", 7, appended=[("main", msg("n", text="n"))]))
        assert rows(path, "SELECT schema_version FROM contexts") == [(2,)]
        again = await store.load("old")
        assert again.config.parameters["upgraded"] is True
        assert again.version == 8
        assert rows(path, "SELECT schema_version FROM messages WHERE id = 'n'") == [(2,)]
    finally:
        await store.aclose()


# --------------------------------------------------------------------------- processes

WORKER = textwrap.dedent(
    """
    import sys, time, json
    from pathlib import Path
    import anyio
    sys.path.insert(0, {repo!r})
    from turnfsm.errors import VersionConflict
    from turnfsm.storage import SQLiteStore
    from tests.storage.contract import make_commit, msg

    path, name, folder, rounds = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    STATE = {{"p0": "ProcessingUserMessage", "p1": "AwaitingLLMResponse"}}[name]

    async def one(round_):
        me = f"{{name}}r{{round_}}"
        go = folder / f"go{{round_}}"
        store = SQLiteStore(path)
        ctx = await store.load("shared")
        Path(folder / (me + ".ready")).touch()
        while not go.exists():
            time.sleep(0.001)
        try:
            await store.commit(make_commit(
                "shared", ctx.version, state=STATE,
                steps=[("Idle", "by-" + me, STATE)],
                appended=[("main", msg("from-" + me, text=me))],
            ))
            print(json.dumps({{"name": me, "won": True}}), flush=True)
        except VersionConflict as exc:
            print(json.dumps({{"name": me, "won": False, "found": exc.found}}), flush=True)
        await store.aclose()

    for round_ in range(rounds):
        anyio.run(one, round_)
    """
)


WORKER_STATE = {"p0": "ProcessingUserMessage", "p1": "AwaitingLLMResponse"}


def test_two_processes_commit_against_the_same_version(tmp_path: Path) -> None:
    """Two processes load the same version, then both commit against it: one
    wins, the other conflicts, three rounds over (each round a store opened
    anew in each process, so a process started once serves every round)."""
    path = db_path(tmp_path)
    anyio.run(lambda: _create_closed(path, empty_context("shared")))
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(repo=str(REPO)))
    rounds = 3
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(path), f"p{i}", str(tmp_path), str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        for round_ in range(rounds):
            deadline = time.monotonic() + 60
            while not all((tmp_path / f"p{i}r{round_}.ready").exists() for i in range(2)):
                assert time.monotonic() < deadline, "workers did not start"
                assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
                time.sleep(0.01)
            (tmp_path / f"go{round_}").touch()  # both loaded the same version; both commit
            results = []
            for p in procs:
                assert p.stdout is not None
                line = p.stdout.readline()
                assert line, p.communicate(timeout=60)
                results.append(json.loads(line))
            winners = [r["name"] for r in results if r["won"]]
            assert len(winners) == 1, results
            (loser,) = [r for r in results if not r["won"]]
            assert loser["found"] == round_ + 1
            ctx, steps, _ = anyio.run(_snapshot_closed, path, "shared")
            assert ctx.version == round_ + 1
            # a state that tells the two workers apart (the store refuses unknown states)
            assert ctx.current_state == WORKER_STATE[winners[0][:2]]
            assert ctx.branches["main"].message_ids[-1] == f"from-{winners[0]}"
            assert f"from-{loser['name']}" not in ctx.message_pool
            assert [s.trigger for s in steps][-1] == f"by-{winners[0]}"
            assert len(steps) == round_ + 1
        for p in procs:
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    assert anyio.run(_integrity, path) == []


async def _create_closed(path: Path, ctx: Any) -> None:
    store = SQLiteStore(path)
    try:
        await store.create(ctx)
    finally:
        await store.aclose()


async def _snapshot_closed(path: Path, cid: str) -> Any:
    store = SQLiteStore(path)
    try:
        return await snapshot(store, cid)
    finally:
        await store.aclose()


async def _integrity(path: Path) -> list[str]:
    store = SQLiteStore(path)
    try:
        return await store.integrity_check()
    finally:
        await store.aclose()


async def test_busy_timeout_waits_for_another_writer(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    store = SQLiteStore(path, busy_timeout=10)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        await store.create(empty_context("c"))
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock

        async def release() -> None:
            await anyio.sleep(0.3)
            other.execute("COMMIT")

        async with anyio.create_task_group() as tg:
            tg.start_soon(release)
            start = time.monotonic()
            await store.commit(make_commit("c", 0, appended=[("main", msg("a", text="a"))]))
            waited = time.monotonic() - start
        assert waited >= 0.2
        assert (await store.load("c")).version == 1
    finally:
        other.close()
        await store.aclose()


async def test_a_lock_held_past_busy_timeout_is_a_store_error(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    store = SQLiteStore(path, busy_timeout=0.1)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        await store.create(empty_context("c"))
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreError) as info:
            await store.commit(make_commit("c", 0, appended=[("main", msg("a", text="a"))]))
        assert "locked" in str(info.value) and str(path) in str(info.value)
        assert not isinstance(info.value, VersionConflict)
        other.execute("ROLLBACK")
        assert (await store.load("c")).version == 0
        await store.commit(make_commit("c", 0))  # and the store still works
    finally:
        other.close()
        await store.aclose()


# --------------------------------------------------------------------------- engine


async def test_engine_on_a_sqlite_url_survives_a_new_process_object(tmp_path: Path) -> None:
    url = f"sqlite:///{db_path(tmp_path)}"
    store = open_store(url)
    engine, cid = await drive_engine(store)
    held = await engine.get_context(cid)
    steps = await engine.steps(cid)
    await engine.aclose()
    engine2 = Engine(
        llm=ScriptedLLM([{"text": "again"}]),
        store=open_store(url),
        clock=FakeClock(),
        ids=SequentialIds("second-"),
    )
    try:
        assert await engine2.get_context(cid) == held
        assert await engine2.steps(cid) == steps
        turn = await engine2.send(cid, "once more")
        assert turn.text == "again"
    finally:
        await engine2.aclose()
    with pytest.raises(ContextNotFound):
        await SQLiteStore(db_path(tmp_path)).load("missing")


if __name__ == "__main__":  # the figures quoted in turnfsm/storage/_sqlite.py
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for mode in ("NORMAL", "FULL"):
            f = measure_thread_hop(
                Path(d) / f"hop-{mode}.db", n=1000 if mode == "NORMAL" else 200, synchronous=mode
            )
            print(
                f"synchronous={mode}: direct {f['direct'] * 1e6:.0f} us/commit, "
                f"through the hand-off {f['hop'] * 1e6:.0f} us/commit, "
                f"overhead {f['overhead'] * 1e6:.0f} us"
            )
        cost = measure_commit_cost(Path(d) / "cost.db", sizes=(100, 2000, 5000))
        for size, c in cost.items():
            print(f"history {size}: {c['rows']:.1f} rows and {c['bytes']:.0f} WAL bytes per commit")
