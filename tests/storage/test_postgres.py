"""The PostgreSQL store on a real server: the contract suite, and what is
particular to PostgreSQL (the layout's version and ``turnfsm db upgrade``, a
second process writing, a lease taken over, claiming expired work).

The server is a throwaway cluster the tests start themselves
(``tests/storage/pg.py``); each test gets a schema of its own.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnfsm.cli import main as cli_main
from turnfsm.errors import (
    ContextNotFound,
    LeaseLost,
    SchemaVersionError,
    StoreError,
    VersionConflict,
)
from turnfsm.model import Branch, ChatConfig, Role
from turnfsm.storage import Commit, Lease, StepLog, Store, open_store
from turnfsm.storage._postgres import (
    STORE_FORMAT,
    PostgresStore,
    check_connection,
    redact,
    upgrade,
)

from .contract import (
    T0,
    StoreContract,
    empty_context,
    make_commit,
    msg,
    rich_context,
    snapshot,
)
from .contract_reads import PartialReadsContract
from .pg import Cluster

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]
NOW = 1_000_000.0


class TestPostgresStore(StoreContract, PartialReadsContract):
    url: str

    @pytest.fixture(autouse=True)
    def _database(self, pg_url: str) -> None:
        self.url = pg_url

    def make_store(self, tmp_path: Path) -> Store:
        store = open_store(self.url)
        assert isinstance(store, PostgresStore)
        return store

    def reopen(self, store: Store, tmp_path: Path) -> Store:
        return PostgresStore(self.url)

    def set_schema_version(
        self,
        store: Store,
        tmp_path: Path,
        context_id: str,
        version: int,
        message_id: str | None = None,
    ) -> str:
        with psycopg.connect(self.url, autocommit=True) as conn:
            if message_id is None:
                cur = conn.execute(
                    "UPDATE contexts SET schema_version = %s WHERE id = %s", (version, context_id)
                )
            else:
                cur = conn.execute(
                    "UPDATE messages SET schema_version = %s WHERE id = %s AND ctx = "
                    "(SELECT seq FROM contexts WHERE id = %s)",
                    (version, message_id, context_id),
                )
            assert cur.rowcount == 1
        return redact(self.url)


# --------------------------------------------------------------------------- the layout


TABLES = "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"


def sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement.encode(), params)
        return cur.fetchall() if cur.description else []


async def test_connections_the_server_dropped_are_replaced(pg_cluster: Cluster) -> None:
    """After a server restart (or an idle timeout) the pool's connections are
    gone; the next call gets a fresh one instead of failing. The store has a
    database of its own: every client backend of it is the pool's, and the
    other tests' connections (other xdist workers share the cluster) are left
    alone."""
    url = pg_cluster.new_database()
    store = PostgresStore(url)
    try:
        assert await store.list_ids() == []
        killed = sql(
            url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'",
        )
        assert killed and all(row[0] for row in killed)
        await gone_within(url, 10)
        assert await store.list_ids() == []
    finally:
        await store.aclose()


async def gone_within(url: str, seconds: float, pid: int | None = None) -> None:
    """Wait until the server has ended the backends of the ``turnfsm`` pool (or
    the one of ``pid``): a terminated backend ends a moment after
    ``pg_terminate_backend`` returns."""
    if pid is None:
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        params: tuple[Any, ...] = ()
    else:
        query, params = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)
    deadline = time.monotonic() + seconds
    while sql(url, query, params) != [(0,)]:
        assert time.monotonic() < deadline, "the backends did not end"
        await anyio.sleep(0.01)


async def test_the_pool_check_asks_the_server_only_about_a_suspect_connection(
    pg_url: str,
) -> None:
    """A healthy idle connection passes the check without a query (nothing
    waits to be read on it); one the server ended fails it, so that the pool
    replaces it; one left inside a transaction is asked."""
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        pid = conn.info.backend_pid
        await check_connection(conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        sql(pg_url, "SELECT pg_terminate_backend(%s)", (pid,))
        await gone_within(pg_url, 10, pid)
        with pytest.raises(psycopg.OperationalError):
            await check_connection(conn)
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        await conn.execute("SELECT 1")  # a transaction left open: asked, and refused
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        with pytest.raises(psycopg.Error):
            await check_connection(conn)


async def test_a_new_database_gets_the_current_layout(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        assert await store.list_ids() == []
        assert await store.store_format() == STORE_FORMAT
    finally:
        await store.aclose()
    assert sql(pg_url, "SELECT value FROM turnfsm_meta WHERE key = 'store_format'") == [
        (str(STORE_FORMAT),)
    ]


async def test_an_older_layout_names_the_upgrade_command(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await upgrade(pg_url, to=1) == (0, 1)
    store = PostgresStore(pg_url)
    try:
        with pytest.raises(StoreError) as info:
            await store.list_ids()
        assert f"turnfsm db upgrade --store {pg_url}" in str(info.value)
        assert "format 1" in str(info.value)
    finally:
        await store.aclose()
    # the command applies what is missing, once
    assert await anyio.to_thread.run_sync(cli_main, ["db", "upgrade", "--store", pg_url]) == 0
    assert f"from format 1 to {STORE_FORMAT}" in capsys.readouterr().out
    assert await anyio.to_thread.run_sync(cli_main, ["db", "upgrade", "--store", pg_url]) == 0
    assert "up to date" in capsys.readouterr().out
    store = PostgresStore(pg_url)
    try:
        await store.create(rich_context("r"))
        assert await store.load("r") == rich_context("r")
    finally:
        await store.aclose()


async def test_the_layout_before_the_commit_function_is_refused_then_upgraded(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store made at the previous format (before the one-statement commit's
    functions) is refused naming the upgrade command, its data untouched;
    after ``turnfsm db upgrade`` commits and claims run on it."""
    previous = STORE_FORMAT - 1
    assert await upgrade(pg_url, to=previous) == (0, previous)
    sql(
        pg_url,
        "INSERT INTO contexts (id, schema_version, version, state, active_branch, event_seq, "
        "created_at, updated_at, config, progress) VALUES ('old', 1, 0, 'Idle', 'main', 0, "
        "%s, %s, '{}', '{}')",
        (T0.isoformat(), T0.isoformat()),
    )
    sql(
        pg_url,
        "INSERT INTO branches (ctx, name, schema_version, body) "
        "SELECT seq, 'main', 1, '{\"name\": \"main\"}' FROM contexts WHERE id = 'old'",
    )
    store = PostgresStore(pg_url)
    try:
        with pytest.raises(StoreError) as info:
            await store.load("old")
        assert f"turnfsm db upgrade --store {pg_url}" in str(info.value)
        assert f"format {previous}, this turnfsm needs {STORE_FORMAT}" in str(info.value)
    finally:
        await store.aclose()
    assert sql(pg_url, "SELECT version FROM contexts") == [(0,)]
    assert await anyio.to_thread.run_sync(cli_main, ["db", "upgrade", "--store", pg_url]) == 0
    assert f"from format {previous} to {STORE_FORMAT}" in capsys.readouterr().out
    store = PostgresStore(pg_url)
    try:
        first = msg("m1", Role.USER, "hello")
        await store.commit(
            make_commit(
                "old",
                0,
                state="ProcessingUserMessage",
                steps=[("Idle", "user_message", "ProcessingUserMessage")],
                appended=[("main", first)],
            )
        )
        ctx = await store.load("old")
        assert ctx.version == 1
        assert ctx.branches["main"].message_ids == ["m1"]
        assert ctx.message_pool["m1"] == first
        claimed = await store.claim_expired("w", 30, now=NOW)
        assert [(x.context_id, x.token) for x in claimed] == [("old", 1)]
    finally:
        await store.aclose()


async def test_the_one_statement_commit_stores_what_the_statements_store(pg_url: str) -> None:
    """The same commits (a fork stored whole, appends to two branches, a
    replaced message, change records, a config, a lease taken, checked and
    released) applied to two copies of a context, to one by ``commit`` (the
    ``turnfsm_commit`` function) and to the other by the statements a missed
    commit falls back to, leave the same rows."""
    store = PostgresStore(pg_url)

    async def by_statements(commit: Commit) -> None:
        await store._run(lambda conn: store._commit_tx(conn, commit), transaction=True)

    try:
        for cid in ("fn", "sql"):
            await store.create(rich_context(cid))
        base = rich_context("x")
        node = base.message_pool["m2"]
        decided = dataclasses.replace(
            node, **{"message": dataclasses.replace(node.message, thinking="decided")}
        )
        fork = Branch(name="side", message_ids=["m1", "m2"], parent_message_id="m2")
        lease = Lease("?", "me", 1, NOW + 30)
        for apply, cid in ((store.commit, "fn"), (by_statements, "sql")):
            c1 = make_commit(
                cid,
                7,
                state="AwaitingToolApproval",
                steps=[("AwaitingToolApproval", "fork", "AwaitingToolApproval")],
                branches=[fork, Branch(name="alt", message_ids=["m1", "m5"])],
                active_branch="side",
                config=ChatConfig(model_id="other", title="T"),
                replaced=[decided],
                appended=[("side", msg("s1", Role.USER, "x")), ("main", msg("x1", Role.USER, "y"))],
            )
            c1.steps[0] = StepLog(
                8,
                "AwaitingToolApproval",
                "fork",
                "AwaitingToolApproval",
                c1.updated_at,
                {"branch": "side", "n": [1, "ü"]},
            )
            c1.lease_token = 1
            c1.lease_owner = "me"
            c1.take_lease = Lease(cid, "me", 1, lease.expires_at)
            await apply(c1)
            c2 = make_commit(
                cid,
                8,
                state="ProcessingUserMessage",
                steps=[("AwaitingToolApproval", "user_message", "ProcessingUserMessage")],
                appended=[("side", msg("s2", Role.USER, "z")), ("side", msg("s3", Role.USER, "w"))],
            )
            c2.lease_token = 1
            c2.lease_owner = "me"
            c2.release_lease = True
            await apply(c2)
        fn, sql_ = await snapshot(store, "fn"), await snapshot(store, "sql")
        assert dataclasses.replace(fn[0], id="sql") == sql_[0]
        assert fn[1] == sql_[1]
        assert [(s.lease_token, s.lease_owner) for s in fn[1]] == [
            (s.lease_token, s.lease_owner) for s in sql_[1]
        ]
        assert await store.lease("fn") is None and await store.lease("sql") is None
        rows = {
            cid: sql(
                pg_url,
                "SELECT 'bm', branch, pos::text, message_id FROM branch_messages b "
                "JOIN contexts c ON c.seq = b.ctx WHERE c.id = %s UNION ALL "
                "SELECT 'm', m.id, m.schema_version::text, m.body FROM messages m "
                "JOIN contexts c ON c.seq = m.ctx WHERE c.id = %s UNION ALL "
                "SELECT 'l', owner, token::text, expires_at::text FROM leases "
                "WHERE context_id = %s ORDER BY 1, 2, 3",
                (cid, cid, cid),
            )
            for cid in ("fn", "sql")
        }
        assert rows["fn"] == rows["sql"]
        assert fn[0].branches["side"].message_ids == ["m1", "m2", "s1", "s2", "s3"]
        assert fn[0].message_pool["m2"].message.thinking == "decided"
    finally:
        await store.aclose()


async def test_a_newer_layout_is_a_schema_version_error(pg_url: str) -> None:
    await upgrade(pg_url)
    sql(pg_url, "UPDATE turnfsm_meta SET value = %s", (str(STORE_FORMAT + 1),))
    store = PostgresStore(pg_url)
    try:
        with pytest.raises(SchemaVersionError) as info:
            await store.list_ids()
        assert info.value.found == STORE_FORMAT + 1
    finally:
        await store.aclose()
    with pytest.raises(SchemaVersionError):
        await upgrade(pg_url)


async def test_read_only_opening_creates_nothing(pg_url: str) -> None:
    store = open_store(pg_url, create=False)
    try:
        with pytest.raises(StoreError, match="no turnfsm store in this database"):
            await store.list_ids()
    finally:
        await store.aclose()
    assert sql(pg_url, "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()") == [
        (0,)
    ]


async def test_a_database_of_something_else_is_left_untouched(pg_url: str) -> None:
    sql(pg_url, "CREATE TABLE messages (x int)")
    store = PostgresStore(pg_url)
    try:
        with pytest.raises(StoreError, match="not a turnfsm store"):
            await store.list_ids()
    finally:
        await store.aclose()
    assert sql(pg_url, "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()") == [
        (1,)
    ]


async def test_errors_do_not_show_the_password(pg_cluster: Any) -> None:
    url = f"postgresql://turnfsm:s3cret@127.0.0.1:{pg_cluster.port}/no_such_database"
    store = PostgresStore(url)
    try:
        with pytest.raises(StoreError) as info:
            await store.list_ids()
    finally:
        await store.aclose()
    assert "s3cret" not in str(info.value)
    assert "turnfsm:***@127.0.0.1" in str(info.value)


async def test_a_closed_store_refuses_calls(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.create(empty_context("c"))
    await store.aclose()
    with pytest.raises(StoreError, match="closed"):
        await store.load("c")


def test_the_cli_refuses_a_url_that_is_not_a_store(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["db", "upgrade", "--store", "chats.db"]) == 2
    assert "not a store URL" in capsys.readouterr().err


# --------------------------------------------------------------------------- two writers


def fenced(commit: Any, token: int) -> Any:
    commit.lease_token = token
    return commit


async def test_a_second_process_wins_the_version_and_this_one_conflicts(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        await store.create(empty_context("c"))
        script = textwrap.dedent(
            f"""
            import anyio
            from tests.storage.contract import make_commit, msg
            from turnfsm.storage import open_store

            async def main():
                store = open_store({pg_url!r})
                await store.commit(make_commit("c", 0, appended=[("main", msg("theirs"))]))
                await store.aclose()

            anyio.run(main)
            """
        )
        done = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [sys.executable, "-c", script],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        )
        assert done.returncode == 0, done.stderr
        before = await snapshot(store, "c")
        with pytest.raises(VersionConflict) as info:
            await store.commit(make_commit("c", 0, appended=[("main", msg("ours"))]))
        assert (info.value.expected, info.value.found) == (0, 1)
        assert await snapshot(store, "c") == before
        assert list(before[0].message_pool) == ["theirs"]
    finally:
        await store.aclose()


async def test_a_lease_taken_over_fences_the_old_owner(pg_url: str) -> None:
    a, b = PostgresStore(pg_url), PostgresStore(pg_url)
    try:
        await a.create(empty_context("c"))
        old = await a.acquire_lease("c", "engine-a", 10.0, now=NOW)
        assert old is not None
        await a.commit(fenced(make_commit("c", 0), old.token))
        # engine-a stalls past its expiry; engine-b takes the context over
        assert await b.acquire_lease("c", "engine-b", 10.0, now=NOW + 5) is None
        new = await b.acquire_lease("c", "engine-b", 10.0, now=NOW + 11)
        assert new is not None and new.token == old.token + 1
        before = await snapshot(b, "c")
        with pytest.raises(LeaseLost) as info:
            await a.commit(fenced(make_commit("c", 1, appended=[("main", msg("late"))]), 1))
        assert (info.value.token, info.value.current) == (1, 2)
        with pytest.raises(LeaseLost):
            await a.renew_lease(old, 10.0, now=NOW + 12)
        await a.release_lease(old)  # does nothing: not held under that token
        assert await b.lease("c") == new
        assert await snapshot(b, "c") == before
        await b.commit(fenced(make_commit("c", 1, appended=[("main", msg("new"))]), 2))
        assert (await a.load("c")).version == 2
    finally:
        await a.aclose()
        await b.aclose()


async def test_many_concurrent_acquires_give_one_lease(pg_url: str) -> None:
    stores = [PostgresStore(pg_url) for _ in range(4)]
    try:
        await stores[0].create(empty_context("c"))
        got: list[Any] = []

        async def acquire(i: int) -> None:
            got.append(await stores[i].acquire_lease("c", f"e{i}", 30.0, now=NOW))

        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(acquire, i)
        leases = [x for x in got if x is not None]
        assert len(leases) == 1
        assert leases[0].token == 1
    finally:
        for s in stores:
            await s.aclose()


async def test_delete_of_an_unknown_context(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        with pytest.raises(ContextNotFound):
            await store.delete("nope")
    finally:
        await store.aclose()


# --------------------------------------------------------------------------- claiming work


async def busy_contexts(store: PostgresStore, ids: list[str]) -> None:
    """Contexts left away from rest (AwaitingLLMResponse), as a crash leaves them."""
    for cid in ids:
        await store.create(empty_context(cid))
        await store.commit(make_commit(cid, 0, state="AwaitingLLMResponse"))


async def test_claim_takes_what_is_away_from_rest_and_free(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        await busy_contexts(store, ["never", "expired", "live", "released"])
        await store.create(empty_context("idle"))  # at rest: never claimed
        expired = await store.acquire_lease("expired", "gone", 10.0, now=NOW - 20)
        live = await store.acquire_lease("live", "running", 10.0, now=NOW)
        released = await store.acquire_lease("released", "done", 10.0, now=NOW)
        assert expired and live and released
        await store.release_lease(released)
        claimed = await store.claim_expired("me", 30.0, now=NOW, limit=None)
        assert [(x.context_id, x.owner, x.token) for x in claimed] == [
            ("never", "me", 1),
            ("expired", "me", 2),
            ("released", "me", 2),
        ]
        assert all(x.expires_at == NOW + 30.0 for x in claimed)
        for lease in claimed:
            assert await store.lease(lease.context_id) == lease
        assert await store.lease("live") == live
        assert await store.claim_expired("other", 30.0, now=NOW, limit=None) == []
        # the old holder of a claimed lease is fenced
        with pytest.raises(LeaseLost):
            await store.commit(fenced(make_commit("expired", 1), expired.token))
        # the limit, oldest first
        later = await store.claim_expired("late", 30.0, now=NOW + 100, limit=2)
        assert [x.context_id for x in later] == ["never", "expired"]
    finally:
        await store.aclose()


async def test_engines_claiming_at_once_get_disjoint_sets(pg_url: str) -> None:
    ids = [f"c{i}" for i in range(12)]
    stores = [PostgresStore(pg_url) for _ in range(3)]
    try:
        await busy_contexts(stores[0], ids)
        got: dict[str, list[str]] = {}

        async def claim(i: int) -> None:
            leases = await stores[i].claim_expired(f"e{i}", 30.0, now=NOW, limit=None)
            got[f"e{i}"] = [x.context_id for x in leases]

        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(claim, i)
        every = [cid for claimed in got.values() for cid in claimed]
        assert sorted(every) == sorted(ids)  # each once, by one of them
        for cid in ids:
            lease = await stores[0].lease(cid)
            assert lease is not None and cid in got[lease.owner] and lease.token == 1
    finally:
        for s in stores:
            await s.aclose()


class FailOnAnswer(PostgresStore):
    """Cannot write the commit that carries the assistant's answer: the context
    stays in AwaitingLLMResponse, as a crash there leaves it."""

    async def commit(self, commit: Any) -> None:
        if any(n.message.role == "assistant" for _, n in commit.appended):
            raise StoreError("disk full")
        await super().commit(commit)


async def test_two_engines_recovering_at_once_resume_each_context_once(pg_url: str) -> None:
    from turnfsm import Engine, State
    from turnfsm.testing import FakeClock, ScriptedLLM

    clock = FakeClock()
    async with Engine(llm=ScriptedLLM([{"text": "lost"}] * 8), store=FailOnAnswer(pg_url)) as e:
        ids = [await e.create_context() for _ in range(8)]
        for cid in ids:
            with pytest.raises(StoreError):
                await e.send(cid, "hello")
            assert (await e.get_context(cid)).current_state == "AwaitingLLMResponse"

    def answering(name: str) -> ScriptedLLM:
        async def answer(request: Any) -> dict[str, Any]:
            await anyio.sleep(0.01)  # let the other engine's recover run meanwhile
            return {"text": f"from {name}"}

        return ScriptedLLM(answer)

    llms = {"a": answering("a"), "b": answering("b")}
    async with (
        Engine(llm=llms["a"], store=PostgresStore(pg_url), clock=clock) as a,
        Engine(llm=llms["b"], store=PostgresStore(pg_url), clock=clock) as b,
    ):
        recoveries: dict[str, Any] = {}

        async def recover(name: str, engine: Engine) -> None:
            recoveries[name] = await engine.recover()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(recover, "a", a)
                tg.start_soon(recover, "b", b)
        for recovery in recoveries.values():
            assert recovery.failed == {}
        resumed_a, resumed_b = set(recoveries["a"].resumed), set(recoveries["b"].resumed)
        assert resumed_a.isdisjoint(resumed_b)
        assert resumed_a | resumed_b == set(ids)
        assert len(llms["a"].requests) == len(resumed_a)
        assert len(llms["b"].requests) == len(resumed_b)
        for cid in ids:
            ctx = await a.get_context(cid)
            assert ctx.current_state == State.IDLE
            answers = [n.message.text for n in ctx.history() if n.message.role == "assistant"]
            assert answers == [f"from {'a' if cid in resumed_a else 'b'}"]


async def test_a_batch_of_the_event_log_is_stored_and_rung_in_order(pg_url: str) -> None:
    """The event log's write (one statement): its rows are stored (a row
    already there is left as it was), and its notes are rung in order, after
    the rows are visible, with the payloads ``payloads`` makes."""
    from turnfsm.storage._eventlog import LogNote
    from turnfsm.storage._pg_events import PostgresEventLog, payloads

    log = PostgresEventLog(pg_url)
    await log.open()
    try:
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as listener:
            await listener.execute(f'LISTEN "{log.channel}"'.encode())
            rows = [("a", 1, "StateChanged", '{"q": "\\"x\\" ü"}'), ("b", 1, "TurnCompleted", "{}")]
            await log.add(rows[:1], [])
            notes = [LogNote("a", 1), LogNote("a", 2, '{"seq": 2}'), LogNote("b", 1)]
            await log.add([("a", 1, "Changed", "{}"), rows[1]], notes)
            heard = []
            async for n in listener.notifies(timeout=5, stop_after=len(payloads(notes))):
                heard.append(n.payload)
        assert heard == payloads(notes)
        assert await log.after("a", 0) == [(1, "StateChanged", '{"q": "\\"x\\" ü"}')]
        assert await log.after("b", 0) == [(1, "TurnCompleted", "{}")]
    finally:
        await log.aclose()


def test_the_layout_spells_the_resting_states_of_the_table() -> None:
    """Migration 2's index and migration 4's claim write the resting states
    out (a parameter would not match the index's predicate): they must be
    the table's."""
    from turnfsm.states import RESTING
    from turnfsm.storage._postgres import MIGRATIONS

    spelled = "('Idle', 'AwaitingToolApproval', 'PermanentFailure')"
    assert {"Idle", "AwaitingToolApproval", "PermanentFailure"} == {s.value for s in RESTING}
    assert spelled in MIGRATIONS[1]
    assert spelled in MIGRATIONS[3]
