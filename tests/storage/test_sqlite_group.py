"""The SQLite store's writer thread and its group commit.

Every write goes to one writer thread through a queue; the writes waiting
together are applied in one transaction (one sync). These tests hold the
writer on a gate so that the writes queued meanwhile are known to form one
group, then check that each write keeps its own checks and fails alone. No
timing is asserted (speed is measured in bench/).
"""

from __future__ import annotations

import functools
import gc
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from turnfsm.errors import LeaseLost, StoreError, VersionConflict
from turnfsm.model import Role
from turnfsm.storage import Lease, SQLiteStore, _sqlite_threads

from .contract import empty_context, make_commit, msg

pytestmark = pytest.mark.anyio


class Gate:
    """A write that holds the writer thread until ``open()``; the writes queued
    meanwhile are taken together as the next group."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()

    def __call__(self, conn: sqlite3.Connection) -> None:
        self.entered.set()
        self.released.wait(30)

    def open(self) -> None:
        self.released.set()


class Transactions:
    """Counts the transactions the writer's connection commits (its trace)."""

    def __init__(self, store: SQLiteStore) -> None:
        self.statements: list[str] = []
        assert store._conn is not None
        store._conn.set_trace_callback(self.statements.append)

    @property
    def commits(self) -> int:
        return sum(1 for s in self.statements if s.strip().upper() == "COMMIT")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "group.db")
    yield s
    await s.aclose()


async def grouped(
    store: SQLiteStore, writes: list[Callable[[], Any]]
) -> list[BaseException | None]:
    """Run ``writes`` (each an awaitable maker) while the writer waits on a gate,
    so that they are all queued before it looks; their outcomes, in order."""
    gate = Gate()
    outcomes: list[BaseException | None] = [None] * len(writes)

    async def one(i: int) -> None:
        try:
            await writes[i]()
        except Exception as exc:
            outcomes[i] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(store._submit, gate, reader=False, durable=False))
        await anyio.to_thread.run_sync(gate.entered.wait, 30)
        for i in range(len(writes)):
            tg.start_soon(one, i)
        for _ in range(50):  # let every task reach the queue
            await anyio.lowlevel.checkpoint()
        gate.open()
    return outcomes


async def contexts(store: SQLiteStore, n: int) -> list[str]:
    ids = [f"c{i}" for i in range(n)]
    for cid in ids:
        await store.create(empty_context(cid))
    return ids


def note(cid: str, version: int) -> Any:
    return make_commit(
        cid,
        version,
        steps=[("Idle", "t", "ExecutingTools")],
        appended=[("main", msg(f"{cid}-m{version}", Role.USER, f"hello {version}"))],
    )


async def test_many_concurrent_commits_of_different_contexts_all_land(
    store: SQLiteStore,
) -> None:
    ids = await contexts(store, 40)
    tx = Transactions(store)
    outcomes = await grouped(store, [lambda c=c: store.commit(note(c, 0)) for c in ids])
    assert outcomes == [None] * len(ids)
    assert tx.commits == 2  # the gate's group, then all 40 commits in one
    for cid in ids:
        ctx = await store.load(cid)
        assert ctx.version == 1
        assert ctx.branches["main"].message_ids == [f"{cid}-m0"]
        assert [s.version for s in await store.steps(cid)] == [1]


async def test_a_conflicting_commit_fails_alone(store: SQLiteStore) -> None:
    ids = await contexts(store, 5)
    for cid in ids:
        await store.commit(note(cid, 0))
    writes = [lambda c=c: store.commit(note(c, 1)) for c in ids]
    writes[2] = lambda: store.commit(note("c2", 0))  # stale: c2 is at version 1
    tx = Transactions(store)
    outcomes = await grouped(store, writes)
    assert isinstance(outcomes[2], VersionConflict)
    assert [o for i, o in enumerate(outcomes) if i != 2] == [None] * 4
    assert tx.commits == 2
    c2 = await store.load("c2")
    assert c2.version == 1 and c2.branches["main"].message_ids == ["c2-m0"]
    assert len(await store.steps("c2")) == 1
    for cid in ("c0", "c1", "c3", "c4"):
        assert (await store.load(cid)).version == 2


async def test_two_commits_of_one_context_in_one_group_the_second_conflicts(
    store: SQLiteStore,
) -> None:
    """Each write sees the ones before it in its group: a second writer of the
    same version loses, as it would in two transactions."""
    await contexts(store, 1)
    first = note("c0", 0)
    second = make_commit("c0", 0, appended=[("main", msg("other", Role.USER, "x"))])
    outcomes = await grouped(store, [lambda: store.commit(first), lambda: store.commit(second)])
    assert outcomes[0] is None and isinstance(outcomes[1], VersionConflict)
    assert (await store.load("c0")).branches["main"].message_ids == ["c0-m0"]


async def test_a_commit_with_a_lost_lease_fails_alone(store: SQLiteStore) -> None:
    ids = await contexts(store, 3)
    stale = await store.acquire_lease("c1", "a", 30, now=0)
    assert stale is not None
    taken = await store.acquire_lease("c1", "b", 30, now=100)  # a's lease expired
    assert taken is not None and taken.token == stale.token + 1
    fenced = note("c1", 0)
    fenced.lease_token = stale.token
    writes = [lambda c=c: store.commit(note(c, 0)) for c in ids]
    writes[1] = lambda: store.commit(fenced)
    outcomes = await grouped(store, writes)
    assert isinstance(outcomes[1], LeaseLost)
    assert outcomes[0] is None and outcomes[2] is None
    assert (await store.load("c1")).version == 0
    assert (await store.load("c0")).version == 1 and (await store.load("c2")).version == 1


async def test_a_store_error_fails_alone_and_leases_share_the_group(store: SQLiteStore) -> None:
    ids = await contexts(store, 3)
    bad = make_commit("c1", 0, appended=[("nowhere", msg("x", Role.USER, "x"))])
    writes: list[Callable[[], Any]] = [lambda c=c: store.commit(note(c, 0)) for c in ids]
    writes[1] = lambda: store.commit(bad)
    writes.append(lambda: store.acquire_lease("c1", "a", 30, now=0))
    outcomes = await grouped(store, writes)
    assert isinstance(outcomes[1], StoreError) and "unknown branch" in str(outcomes[1])
    assert outcomes[0] is None and outcomes[2] is None and outcomes[3] is None
    assert (await store.load("c1")).version == 0
    lease = await store.lease("c1")
    assert lease is not None and lease.owner == "a"


async def test_a_write_that_ends_the_transaction_fails_alone_and_the_others_are_applied_again(
    store: SQLiteStore,
) -> None:
    """SQLite rolls a whole transaction back on some errors (a full disk, an I/O
    error): the write that failed fails, the others of its group are applied
    again in a new transaction, none is lost or acknowledged unapplied."""
    ids = await contexts(store, 4)

    def takes_the_transaction_down(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO turnfsm_meta (key, value) VALUES ('x', 'y')")
        conn.execute("ROLLBACK")
        raise sqlite3.OperationalError("disk I/O error")

    writes: list[Callable[[], Any]] = [lambda c=c: store.commit(note(c, 0)) for c in ids]
    writes.insert(2, lambda: store._submit(takes_the_transaction_down, reader=False, durable=True))
    outcomes = await grouped(store, writes)
    assert isinstance(outcomes[2], StoreError) and "disk I/O error" in str(outcomes[2])
    assert [o for i, o in enumerate(outcomes) if i != 2] == [None] * 4
    for cid in ids:
        assert (await store.load(cid)).version == 1
    assert store._call(
        lambda conn: conn.execute("SELECT COUNT(*) FROM turnfsm_meta WHERE key = 'x'").fetchone()
    ) == (0,)


def busy(cid: str, version: int, *, take: Lease | None = None, release: int | None = None) -> Any:
    """A commit with two messages and three steps; ``take``: it takes that
    lease; ``release``: it gives back the lease of that token."""
    commit = make_commit(
        cid,
        version,
        steps=[
            ("Idle", "a", "ExecutingTools"),
            ("ExecutingTools", "b", "Idle"),
            ("Idle", "c", "Idle"),
        ],
        appended=[
            ("main", msg(f"{cid}-m{version}a", Role.USER, f"hello {version}")),
            ("main", msg(f"{cid}-m{version}b", Role.ASSISTANT, f"hi {version}")),
        ],
    )
    if take is not None:
        commit.lease_token, commit.lease_owner, commit.take_lease = take.token, take.owner, take
    if release is not None:
        commit.lease_token, commit.lease_owner, commit.release_lease = release, "w", True
    return commit


def dump(store: SQLiteStore) -> dict[str, list[Any]]:
    """Every row of every table, rowids included where a table has them."""
    queries = {
        "contexts": "SELECT * FROM contexts ORDER BY seq",
        "branches": "SELECT rowid, * FROM branches ORDER BY rowid",
        "branch_messages": "SELECT * FROM branch_messages ORDER BY ctx, branch, pos",
        "messages": "SELECT rowid, * FROM messages ORDER BY rowid",
        "steps": "SELECT rowid, * FROM steps ORDER BY rowid",
        "leases": "SELECT * FROM leases ORDER BY context_id",
    }
    return {
        name: store._call(lambda conn, q=q: conn.execute(q).fetchall())
        for name, q in queries.items()
    }


async def test_a_group_writes_the_rows_its_commits_one_by_one_write(tmp_path: Path) -> None:
    """The rows of a group's commits are gathered and inserted together before
    its COMMIT: the same rows, in the same order (the same rowids), as the
    commits made one at a time; and the group steps a few statements per
    table, not one per row."""
    grouped_store = SQLiteStore(tmp_path / "grouped.db")
    alone = SQLiteStore(tmp_path / "alone.db")
    try:
        n = 40
        for store in (grouped_store, alone):
            ids = await contexts(store, n)
            for cid in ids[20:30]:  # leased contexts, given back by the next commits
                lease = await store.acquire_lease(cid, "w", 30, now=0)
                assert lease is not None and lease.token == 1
        takes = {cid: Lease(cid, "w", 1, 100.0) for cid in ids[:20]}

        def commit_of(cid: str) -> Any:
            i = int(cid[1:])
            return busy(cid, 0, take=takes.get(cid), release=1 if 20 <= i < 30 else None)

        tx = Transactions(grouped_store)
        outcomes = await grouped(
            grouped_store, [lambda c=c: grouped_store.commit(commit_of(c)) for c in ids]
        )
        assert outcomes == [None] * n
        for cid in ids:
            await alone.commit(commit_of(cid))
        assert dump(grouped_store) == dump(alone)
        assert dump(grouped_store)["leases"][:3] == [
            ("c0", "w", 1, 100.0),
            ("c1", "w", 1, 100.0),
            ("c10", "w", 1, 100.0),
        ]
        assert (await grouped_store.lease("c25")) is None  # given back
        statements = [s.split()[0:3] for s in tx.statements]
        assert statements.count(["UPDATE", "contexts", "SET"]) == n  # each commit's checks
        inserts = [s for s in statements if s[:2] == ["INSERT", "INTO"]]
        # in statements of 64, 32, ... rows: 80 messages (64 + 16), 80 positions,
        # 120 steps (64 + 32 + 16 + 8), 20 leases taken (16 + 4); 10 given back (8 + 2)
        assert len(inserts) == 2 + 2 + 4 + 2, inserts
        assert statements.count(["UPDATE", "leases", "SET"]) == 2
    finally:
        await grouped_store.aclose()
        await alone.aclose()


async def test_a_write_after_commits_in_a_group_sees_their_rows(store: SQLiteStore) -> None:
    """A write of the group that is not a commit has the rows gathered before
    it written first: a delete after a commit of the same context leaves
    none of that commit's rows behind."""
    ids = await contexts(store, 3)
    outcomes = await grouped(
        store,
        [
            lambda: store.commit(busy("c0", 0)),
            lambda: store.delete("c0"),
            lambda: store.commit(busy("c1", 0)),
        ],
    )
    assert outcomes == [None, None, None]
    assert await store.list_ids() == ids[1:]
    left = dump(store)
    assert {row[2] for row in left["messages"]} == {"c1-m0a", "c1-m0b"}  # (rowid, ctx, id, ...)
    assert len(left["steps"]) == 3 and len(left["branch_messages"]) == 2
    assert (await store.load("c1")).branches["main"].message_ids == ["c1-m0a", "c1-m0b"]


async def test_rows_that_cannot_be_written_together_fail_their_commit_alone(
    store: SQLiteStore,
) -> None:
    """When the gathered rows fail to insert, the group is rolled back and
    applied again with each commit inserting its own rows: the commit whose
    rows fail fails alone, the others are stored, none is half stored."""
    ids = await contexts(store, 6)
    store._call(
        lambda conn: conn.execute(
            "CREATE TEMP TRIGGER refuse_boom AFTER INSERT ON main.steps "
            "WHEN NEW.trigger = 'boom' BEGIN SELECT RAISE(ABORT, 'no boom here'); END"
        )
    )
    bad = make_commit(
        "c3",
        0,
        steps=[("Idle", "boom", "ExecutingTools")],
        appended=[("main", msg("c3-m0", Role.USER, "x"))],
    )
    writes: list[Callable[[], Any]] = [lambda c=c: store.commit(note(c, 0)) for c in ids]
    writes[3] = lambda: store.commit(bad)
    tx = Transactions(store)
    outcomes = await grouped(store, writes)
    assert isinstance(outcomes[3], StoreError) and "no boom here" in str(outcomes[3])
    assert [o for i, o in enumerate(outcomes) if i != 3] == [None] * 5
    c3 = await store.load("c3")
    assert c3.version == 0 and c3.branches["main"].message_ids == []
    assert await store.steps("c3") == []
    for cid in ids[:3] + ids[4:]:
        ctx = await store.load(cid)
        assert ctx.version == 1 and ctx.branches["main"].message_ids == [f"{cid}-m0"]
        assert [s.trigger for s in await store.steps(cid)] == ["t"]
    assert tx.commits == 2  # the gate's group, then the five commits (after two rollbacks)
    assert sum(1 for s in tx.statements if s.strip().upper() == "ROLLBACK") == 2


async def test_an_error_in_the_writer_is_a_store_error_not_a_hang(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await contexts(store, 2)

    def broken(ops: list[Any]) -> None:
        raise RuntimeError("the writer broke")

    monkeypatch.setattr(store, "_write_batch", broken)
    with anyio.fail_after(30):
        with pytest.raises(
            StoreError, match="writer thread failed: RuntimeError: the writer broke"
        ):
            await store.commit(note("c0", 0))
    monkeypatch.undo()
    await store.commit(note("c1", 0))  # the thread lives on
    assert (await store.load("c1")).version == 1
    assert (await store.load("c0")).version == 0


async def test_an_error_in_the_reader_is_a_store_error_not_a_hang(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await contexts(store, 1)

    def broken(ops: list[Any]) -> None:
        raise RuntimeError("the reader broke")

    monkeypatch.setattr(store, "_read_batch", broken)
    with anyio.fail_after(30):
        with pytest.raises(StoreError, match="reader thread failed"):
            await store.load("c0")
    monkeypatch.undo()
    assert (await store.load("c0")).version == 0


async def test_aclose_drains_the_queue_and_stops_the_threads(tmp_path: Path) -> None:
    path = tmp_path / "group.db"
    store = SQLiteStore(path)
    ids = await contexts(store, 20)
    writer = store._writeq
    assert writer is not None and writer.thread.is_alive()
    results: list[BaseException | None] = []

    async def commit(cid: str) -> None:
        try:
            await store.commit(note(cid, 0))
            results.append(None)
        except Exception as exc:
            results.append(exc)

    gate = Gate()
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(store._submit, gate, reader=False, durable=False))
        await anyio.to_thread.run_sync(gate.entered.wait, 30)
        for cid in ids:
            tg.start_soon(commit, cid)
        for _ in range(50):
            await anyio.lowlevel.checkpoint()
        tg.start_soon(store.aclose)  # queued behind the commits
        for _ in range(10):
            await anyio.lowlevel.checkpoint()
        gate.open()
    assert results == [None] * len(ids)
    assert not writer.thread.is_alive()
    assert store._conn is None and store._rconn is None
    with pytest.raises(StoreError, match="closed"):
        await store.commit(note("c0", 1))
    with pytest.raises(StoreError, match="closed"):
        await store.load("c0")
    await store.aclose()  # harmless twice
    again = SQLiteStore(path)
    try:
        for cid in ids:
            assert (await again.load(cid)).version == 1
    finally:
        await again.aclose()


async def test_a_store_that_only_reads_starts_no_writer(tmp_path: Path) -> None:
    path = tmp_path / "group.db"
    first = SQLiteStore(path)
    await first.create(empty_context("c"))
    await first.aclose()
    store = SQLiteStore(path)
    try:
        assert (await store.load("c")).id == "c"
        assert store._writeq is None
    finally:
        await store.aclose()
    assert store._conn is None and store._rconn is None


def test_the_writer_ends_when_its_store_is_gone(tmp_path: Path) -> None:
    async def main() -> threading.Thread:
        store = SQLiteStore(tmp_path / "group.db")
        await store.create(empty_context("c"))
        assert store._writeq is not None
        return store._writeq.thread

    saved = _sqlite_threads._Worker.IDLE_CHECK
    _sqlite_threads._Worker.IDLE_CHECK = 0.05
    try:
        thread = anyio.run(main)
        gc.collect()
        thread.join(30)
        assert not thread.is_alive()
    finally:
        _sqlite_threads._Worker.IDLE_CHECK = saved
