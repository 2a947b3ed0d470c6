"""recover() and leases: one owner per running call, per-context outcomes.

Two engines on one SQLite file stand for two processes. Lease expiry is driven
by a FakeClock, so nothing here sleeps for real.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnfsm import Engine, Recovery, SQLiteStore, State
from turnfsm.adapters.llm import LLMRequest
from turnfsm.errors import ContextLeased, LeaseLost, StoreError
from turnfsm.storage import Commit, Lease
from turnfsm.testing import FakeClock, ScriptedLLM

pytestmark = pytest.mark.anyio

TTL = 30.0


class Blocking:
    """An LLM handler that waits on an event before it answers."""

    def __init__(self, text: str = "answer from A") -> None:
        self.text = text
        self.entered = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, request: LLMRequest) -> dict[str, Any]:
        self.entered.set()
        await self.release.wait()
        return {"text": self.text}


class DyingStore(SQLiteStore):
    """A SQLite store whose owner can "die": from then on it writes nothing, so
    its lease is neither renewed nor released (as after a SIGKILL)."""

    dead = False

    async def release_lease(self, lease: Lease) -> None:
        if not self.dead:
            await super().release_lease(lease)

    async def renew_lease(self, lease: Lease, ttl: float, *, now: float) -> Lease:
        if self.dead:
            return lease
        return await super().renew_lease(lease, ttl, now=now)


class FailOnAnswer(SQLiteStore):
    """Cannot write the commit that carries the assistant's answer: the context
    stays in AwaitingLLMResponse, as a crash there would leave it."""

    async def commit(self, commit: Commit) -> None:
        if any(n.message.role == "assistant" for _, n in commit.appended):
            raise StoreError("disk full")
        await super().commit(commit)


def engine_on(store: SQLiteStore, llm: Any, clock: FakeClock) -> Engine:
    return Engine(llm=llm, store=store, clock=clock, lease_ttl=TTL)


async def test_recover_skips_a_context_another_engine_is_running(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    clock = FakeClock()
    blocking = Blocking()
    b_llm = ScriptedLLM([{"text": "answer from B"}])
    async with (
        engine_on(SQLiteStore(path), ScriptedLLM(blocking), clock) as a,
        engine_on(SQLiteStore(path), b_llm, clock) as b,
    ):
        assert a.owner != b.owner
        cid = await a.create_context()
        turns: list[Any] = []

        async def run_a() -> None:
            turns.append(await a.send(cid, "hello"))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_a)
                await blocking.entered.wait()
                assert (await b.get_context(cid)).current_state == "AwaitingLLMResponse"
                recovery = await b.recover()
                assert isinstance(recovery, Recovery)
                assert recovery.resumed == {} and recovery.failed == {}
                assert list(recovery.skipped) == [cid]
                assert f"leased by {a.owner} until " in recovery.skipped[cid]
                with pytest.raises(ContextLeased) as info:
                    await b.send(cid, "me too")
                assert info.value.owner == a.owner
                blocking.release.set()
        (turn,) = turns  # A finished normally: no VersionConflict, no LeaseLost
        assert turn.state is State.IDLE and turn.text == "answer from A"
        assert b_llm.requests == []
        assert await a.trace(cid) == [
            "Idle",
            "ProcessingUserMessage",
            "AwaitingLLMResponse",
            "ProcessingLLMResponse",
            "Idle",
        ]
        # A released its lease when the call returned: B can work on the context
        assert await b.store.lease(cid) is None
        assert (await b.recover()) == Recovery(resumed={}, skipped={}, failed={})
        assert (await b.send(cid, "and now B")).text == "answer from B"


async def test_recover_takes_a_context_whose_owner_died(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    clock = FakeClock()
    blocking = Blocking()
    a_store = DyingStore(path)
    a = engine_on(a_store, ScriptedLLM(blocking), clock)
    b = engine_on(SQLiteStore(path), ScriptedLLM([{"text": "answer from B"}]), clock)
    async with a, b:
        cid = await a.create_context()
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(a.send, cid, "hello")
                await blocking.entered.wait()
                a_store.dead = True  # A "dies": no release, no heartbeat from here on
                tg.cancel_scope.cancel()
        held = await b.store.lease(cid)
        assert held is not None and held.owner == a.owner
        assert (await b.get_context(cid)).current_state == "AwaitingLLMResponse"
        # not yet expired: B leaves it alone
        clock.advance(TTL - 1)
        recovery = await b.recover()
        assert list(recovery.skipped) == [cid] and recovery.resumed == {}
        # expired on the clock: B takes it over and finishes the turn
        clock.advance(1)
        recovery = await b.recover()
        assert recovery.skipped == {} and recovery.failed == {}
        turn = recovery.resumed[cid]
        assert turn.state is State.IDLE and turn.text == "answer from B"
        lease = await b.store.lease(cid)
        assert lease is None  # released by B when its call returned
        ctx = await b.get_context(cid)
        assert [n.message.text for n in ctx.history()] == ["hello", "answer from B"]


async def test_a_stale_owner_gets_lease_lost_and_stores_nothing(tmp_path: Path) -> None:
    """A is alive but stalled past its lease (no heartbeat came): B takes the
    context over; when A's LLM answers at last, A's commit is refused."""
    path = tmp_path / "chats.db"
    clock = FakeClock()
    blocking = Blocking(text="late answer from A")
    a = engine_on(SQLiteStore(path), ScriptedLLM(blocking), clock)
    b = engine_on(SQLiteStore(path), ScriptedLLM([{"text": "answer from B"}]), clock)
    async with a, b:
        cid = await a.create_context()
        errors: list[BaseException] = []

        async def run_a() -> None:
            try:
                await a.send(cid, "hello")
            except LeaseLost as exc:
                errors.append(exc)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_a)
                await blocking.entered.wait()
                clock.advance(TTL)
                recovery = await b.recover()
                assert recovery.resumed[cid].text == "answer from B"
                blocking.release.set()
        (err,) = errors
        assert isinstance(err, LeaseLost) and err.context_id == cid
        assert err.current is not None and err.current > err.token
        ctx = await b.get_context(cid)
        assert [n.message.text for n in ctx.history()] == ["hello", "answer from B"]
        assert ctx.current_state == "Idle"


async def test_one_bad_context_does_not_stop_recovery_of_the_others(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    clock = FakeClock()
    failing = engine_on(FailOnAnswer(path), ScriptedLLM([{"text": "lost"}] * 3), clock)
    async with failing:
        ids = [await failing.create_context() for _ in range(3)]
        for cid in ids:
            with pytest.raises(StoreError, match="disk full"):
                await failing.send(cid, f"hello {cid}")
    good = [ids[0], ids[2]]
    bad = ids[1]
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE contexts SET state = 'NoSuchState' WHERE id = ?", (bad,))
    conn.close()
    llm = ScriptedLLM([{"text": "first"}, {"text": "third"}])
    async with engine_on(SQLiteStore(path), llm, clock) as engine:
        recovery = await engine.recover()
        assert list(recovery.resumed) == good  # in the store's order
        assert [t.text for t in recovery.resumed.values()] == ["first", "third"]
        assert all(t.state is State.IDLE for t in recovery.resumed.values())
        assert recovery.skipped == {}
        assert list(recovery.failed) == [bad]
        err = recovery.failed[bad]
        assert isinstance(err, StoreError) and "NoSuchState" in str(err)
        summaries = {s.id: s.state for s in await engine.store.list_contexts()}
        assert summaries[bad] == "NoSuchState"  # left as it was


@pytest.mark.parametrize("entered", [True, False], ids=["async-with", "bare"])
async def test_the_lease_is_renewed_while_a_call_runs(tmp_path: Path, entered: bool) -> None:
    """The heartbeat renews in real time (every ttl/3): with a tiny ttl it beats
    while the LLM is blocked; the fake clock is moved so a renewal is visible.
    An engine in ``async with`` has one heartbeat task; a bare one, one per call."""
    renewed = anyio.Event()
    seen: list[Lease] = []
    after: list[float] = []  # the expiry a renewal must pass to count

    class Watching(SQLiteStore):
        async def renew_lease(self, lease: Lease, ttl: float, *, now: float) -> Lease:
            out = await super().renew_lease(lease, ttl, now=now)
            if after and out.expires_at > after[0]:
                seen.append(out)
                renewed.set()
            return out

    clock = FakeClock()
    blocking = Blocking()
    store = Watching(tmp_path / "chats.db")
    engine = Engine(llm=ScriptedLLM(blocking), store=store, clock=clock, lease_ttl=0.03)
    if entered:
        await engine.__aenter__()
    try:
        cid = await engine.create_context()
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(engine.send, cid, "hello")
                await blocking.entered.wait()
                first = await store.lease(cid)
                assert first is not None
                after.append(first.expires_at)
                clock.advance(5)
                await renewed.wait()  # a heartbeat that never renews fails at fail_after
                blocking.release.set()
        assert seen[0].token == first.token and seen[0].owner == engine.owner
        assert seen[0].expires_at > first.expires_at + 4
        assert await store.lease(cid) is None
    finally:
        if entered:
            await engine.__aexit__(None, None, None)
        else:
            await engine.aclose()


async def test_an_error_inside_async_with_engine_stays_unwrapped() -> None:
    """The entered engine's heartbeat task group does not wrap the body's errors."""
    with pytest.raises(KeyError):
        async with Engine(llm=ScriptedLLM([])):
            raise KeyError("mine")


def test_lease_ttl_must_be_positive() -> None:
    from turnfsm.errors import InvalidInput

    for bad in (0, -1.0, float("nan")):
        with pytest.raises(InvalidInput) as info:
            Engine(lease_ttl=bad)
        assert info.value.where == "lease_ttl"


async def test_the_last_commit_releases_the_lease(tmp_path: Path) -> None:
    """A store that releases with a commit gets no release write of its own
    after a call that committed; a call that commits nothing still releases."""
    released: list[Lease] = []

    class Counting(SQLiteStore):
        async def release_lease(self, lease: Lease) -> None:
            released.append(lease)
            await super().release_lease(lease)

    store = Counting(tmp_path / "chats.db")
    async with Engine(llm=ScriptedLLM([{"text": "hi"}]), store=store) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "hello")
        assert turn.state is State.IDLE
        assert released == []
        assert await store.lease(cid) is None
        # the next call's lease has the next token: the cache stays valid
        resumed = await engine.resume(cid)  # rests already: commits nothing
        assert resumed.state is State.IDLE
        assert [lease.token for lease in released] == [2]
        assert await store.lease(cid) is None


class LeaseWrites(SQLiteStore):
    """Counts the lease writes of their own (acquire, release)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[str] = []

    async def acquire_lease(self, *args: Any, **kwargs: Any) -> Lease | None:
        self.writes.append("acquire")
        return await super().acquire_lease(*args, **kwargs)

    async def release_lease(self, lease: Lease) -> None:
        self.writes.append("release")
        await super().release_lease(lease)


async def test_a_call_on_a_loaded_context_takes_its_lease_with_its_first_commit(
    tmp_path: Path,
) -> None:
    store = LeaseWrites(tmp_path / "chats.db")
    llm = ScriptedLLM([{"text": "one"}, {"text": "two"}, {"text": "three"}])
    async with Engine(llm=llm, store=store) as engine:
        cid = await engine.create_context()
        await engine.send(cid, "first")
        assert store.writes == ["acquire"]  # released by the last commit
        store.writes.clear()
        for text in ("second", "third"):
            turn = await engine.send(cid, text)
            assert turn.state is State.IDLE
            assert await store.lease(cid) is None
        assert store.writes == []  # taken and released by the calls' commits
    other = SQLiteStore(tmp_path / "chats.db")
    try:
        lease = await other.acquire_lease(cid, "someone", 30.0, now=0.0)
        assert lease is not None and lease.token == 4  # one token per call
    finally:
        await other.aclose()


async def test_a_stale_loaded_copy_is_refused_and_the_call_runs_again(tmp_path: Path) -> None:
    """A ran a call and keeps the context loaded; B runs one meanwhile. A's next
    call starts on its stale copy, its first commit is refused (the lease was
    B's since), and the call runs again on the stored context."""
    path = tmp_path / "chats.db"
    clock = FakeClock()
    a_llm = ScriptedLLM([{"text": "A1"}, {"text": "A2"}])
    b_llm = ScriptedLLM([{"text": "B1"}])
    async with (
        engine_on(SQLiteStore(path), a_llm, clock) as a,
        engine_on(SQLiteStore(path), b_llm, clock) as b,
    ):
        cid = await a.create_context()
        await a.send(cid, "from A")
        await b.send(cid, "from B")
        turn = await a.send(cid, "A again")
        assert turn.state is State.IDLE and turn.text == "A2"
        ctx = await a.get_context(cid)
        texts = ["from A", "A1", "from B", "B1", "A again", "A2"]
        assert [n.message.text for n in ctx.history()] == texts
        # the model saw the whole stored history, B's turn included, once
        assert len(a_llm.requests) == 2
        sent = [m["content"] for m in a_llm.requests[1].messages if m["role"] != "system"]
        assert sent == texts[:5]
        assert await a.trace(cid) == [
            "Idle",
            *["ProcessingUserMessage", "AwaitingLLMResponse", "ProcessingLLMResponse", "Idle"] * 3,
        ]


async def test_a_loaded_copy_meets_a_running_owner_with_context_leased(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    clock = FakeClock()
    blocking = Blocking(text="B1")
    a_llm = ScriptedLLM([{"text": "A1"}])
    async with (
        engine_on(SQLiteStore(path), a_llm, clock) as a,
        engine_on(SQLiteStore(path), ScriptedLLM(blocking), clock) as b,
    ):
        cid = await a.create_context()
        await a.send(cid, "from A")
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(b.send, cid, "from B")
                await blocking.entered.wait()
                with pytest.raises(ContextLeased) as info:
                    await a.send(cid, "A again")
                assert info.value.owner == b.owner
                with pytest.raises(ContextLeased):  # a call that commits nothing, too
                    await a.resume(cid)
                blocking.release.set()
        assert len(a_llm.requests) == 1
        ctx = await a.get_context(cid)
        assert [n.message.text for n in ctx.history()] == ["from A", "A1", "from B", "B1"]


async def test_a_refused_call_on_a_loaded_context_leaves_no_lease(tmp_path: Path) -> None:
    """A call whose checks fail commits nothing: the lease is taken to confirm
    the loaded copy was current, the error stands, and the lease is released."""
    from turnfsm.errors import UnknownToolCall

    store = LeaseWrites(tmp_path / "chats.db")
    llm = ScriptedLLM([{"text": "one"}, {"text": "two"}])
    async with Engine(llm=llm, store=store) as engine:
        cid = await engine.create_context()
        await engine.send(cid, "first")
        store.writes.clear()
        with pytest.raises(UnknownToolCall):
            await engine.approve(cid, "call_nope")
        assert store.writes == ["acquire", "release"]
        assert await store.lease(cid) is None
        store.writes.clear()
        assert (await engine.send(cid, "second")).text == "two"
        assert store.writes == []  # the cache was kept: no reload, no lease write


async def test_recover_resumes_a_claimed_context_under_its_claimed_lease(tmp_path: Path) -> None:
    """The lease ``claim_expired`` handed out is the one the resume commits
    under: no second lease (a new token) is taken for it, and claims that
    are not resumed are given back."""
    path = tmp_path / "chats.db"
    clock = FakeClock()
    blocking = Blocking()
    claims: list[Lease] = []
    commits: list[Commit] = []

    class Recording(SQLiteStore):
        async def claim_expired(
            self, owner: str, ttl: float, *, now: float, limit: int | None = 100
        ) -> list[Lease]:
            got = await super().claim_expired(owner, ttl, now=now, limit=limit)
            claims.extend(got)
            return got

        async def acquire_lease(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("recover took a second lease")

        async def commit(self, commit: Commit) -> None:
            commits.append(commit)
            await super().commit(commit)

    a_store = DyingStore(path)
    a = engine_on(a_store, ScriptedLLM(blocking), clock)
    b = engine_on(Recording(path), ScriptedLLM([{"text": "answer from B"}]), clock)
    async with a, b:
        cid = await a.create_context()
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(a.send, cid, "hello")
                await blocking.entered.wait()
                a_store.dead = True
                tg.cancel_scope.cancel()
        clock.advance(TTL)
        recovery = await b.recover()
        assert recovery.skipped == {} and recovery.failed == {}
        assert recovery.resumed[cid].text == "answer from B"
        (claim,) = claims
        assert claim.context_id == cid and claim.owner == b.owner
        assert commits, "the resume committed nothing"
        assert all(c.take_lease is None for c in commits)
        assert {c.lease_token for c in commits} == {claim.token}
        assert commits[-1].release_lease is True
        assert await b.store.lease(cid) is None
        steps = [s for s in await b.steps(cid) if s.lease_owner == b.owner]
        assert steps and {s.lease_token for s in steps} == {claim.token}
