"""The contract suite for the in-memory store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from turnfsm.storage import MemoryStore, Store

from .contract import StoreContract


class TestMemoryStore(StoreContract):
    persistent = False

    def make_store(self, tmp_path: Path) -> Store:
        return MemoryStore()


def test_the_memory_store_declares_its_commit_as_a_plain_call() -> None:
    from turnfsm.storage import CommitsWithoutWaiting, SQLiteStore

    store = MemoryStore()
    assert isinstance(store, CommitsWithoutWaiting)
    assert store.commit_nowait is not None

    class Counting(MemoryStore):
        async def commit(self, commit: Any) -> None:
            await super().commit(commit)

    # a subclass whose commit does more is always called through it
    assert Counting().commit_nowait is None
    assert "commit_nowait" not in vars(SQLiteStore)


@pytest.mark.anyio
async def test_the_heads_share_one_empty_dict_that_nothing_fills() -> None:
    from datetime import UTC, datetime

    from turnfsm.model import ChatContext
    from turnfsm.storage import _memory

    from .contract import make_commit

    at = datetime(2026, 12, 2, tzinfo=UTC)
    store = MemoryStore()
    for cid in ("a", "b"):
        await store.create(ChatContext(id=cid, created_at=at, updated_at=at))
        await store.commit(make_commit(cid, 0, steps=[("Idle", "user_message", "Idle")]))
    loaded = await store.load("a")
    assert _memory._UNUSED == {}
    assert loaded.message_pool is not _memory._UNUSED
    assert (await store.load("b")).message_pool == {}
    assert [s.version for s in await store.steps("b")] == [1]


@pytest.mark.anyio
async def test_the_steps_come_back_as_they_were_committed() -> None:
    """The store keeps its step records compactly; ``steps`` gives back records
    equal to those committed, with the same repr, pickle and field objects,
    whatever they hold: a detail, a lease, another version or time than the
    commit's, a ``str`` name where another commit had the ``State``."""
    import pickle
    from dataclasses import replace
    from datetime import UTC, datetime

    from turnfsm.model import ChatContext
    from turnfsm.states import State, Trigger
    from turnfsm.storage import StepLog
    from turnfsm.storage._base import step_log

    from .contract import make_commit

    at = datetime(2026, 12, 3, tzinfo=UTC)
    store = MemoryStore()
    await store.create(ChatContext(id="c", created_at=at, updated_at=at))
    committed: list[StepLog] = []
    plain = (State.IDLE, Trigger.USER_MESSAGE, State.PROCESSING_USER_MESSAGE)
    for version in range(1, 6):
        when = datetime(2026, 12, 3, 8, version, tzinfo=UTC)
        steps = [step_log(version, *plain, when)]
        if version == 2:
            steps.append(
                step_log(version, State.IDLE, "config_updated", State.IDLE, when, {"k": 1})
            )
        if version == 3:
            steps.append(replace(steps[0], lease_token=7, lease_owner="h:1:x"))
            steps.append(step_log(version + 1, *plain, when))
        if version == 4:
            steps.append(step_log(version, "Idle", "user_message", "ProcessingUserMessage", when))
            steps.append(step_log(version, *plain, datetime(2026, 12, 3, 9, tzinfo=UTC)))
        commit = make_commit("c", version - 1)
        commit.updated_at = when
        commit.steps = steps
        await store.commit(commit)
        committed += steps
    await store.commit(make_commit("c", 5))  # a commit without steps keeps nothing

    got = await store.steps("c")
    assert got == committed
    assert [repr(s) for s in got] == [repr(s) for s in committed]
    assert pickle.dumps(got) == pickle.dumps(committed)
    for a, b in zip(got, committed, strict=True):
        assert type(a) is StepLog
        assert (a.lease_token, a.lease_owner) == (b.lease_token, b.lease_owner)
        for name in ("from_state", "trigger", "to_state", "at", "detail"):
            assert getattr(a, name) is getattr(b, name), name
    assert got[0].at is not got[1].at  # each commit its own time
    assert await store.steps("c") == got  # reading makes them again, the same


def test_a_subclass_whose_commit_does_more_is_not_given_the_steps_as_recorded() -> None:
    class Counting(MemoryStore):
        async def commit(self, commit: Any) -> None:
            await super().commit(commit)

    class Quiet(MemoryStore):
        def commit_nowait(self, commit: Any) -> None:
            super().commit_nowait(commit)

    assert MemoryStore()._commit_recorded is not None
    assert Counting._commit_recorded is None
    assert Quiet._commit_recorded is None


@pytest.mark.anyio
async def test_the_steps_given_as_recorded_are_those_a_commit_would_carry() -> None:
    """The engine gives the memory store its steps as the machine recorded
    them; a subclass whose commit does more gets them as ``commit.steps``.
    Both keep the same records for the same calls: transitions, and changes
    with their details."""
    import pickle

    from kit import make_engine

    class Plain(MemoryStore):
        async def commit(self, commit: Any) -> None:
            await super().commit(commit)

    kept = []
    for store in (MemoryStore(), Plain()):
        engine, _, _ = make_engine([{"text": "one"}, {"text": "two"}], store=store)
        async with engine:
            cid = await engine.create_context()
            await engine.send(cid, "first")
            await engine.update_config(cid, title="t")
            await engine.send(cid, "second")
        kept.append(await store.steps(cid))
    recorded, carried = kept
    assert any(s.detail for s in recorded) and len(recorded) > 4
    assert recorded == carried
    assert pickle.dumps(recorded) == pickle.dumps(carried)


@pytest.mark.anyio
async def test_the_engines_steps_are_kept_as_the_machines_own_tuples() -> None:
    """Given the steps as the machine recorded them, the store keeps per
    commit its version and time, then each step's tuple itself (one pointer):
    two contexts' same transitions are the same objects, and ``steps`` makes
    the records again from them."""
    from datetime import datetime

    from kit import make_engine

    store = MemoryStore()
    engine, _, _ = make_engine([{"text": "one"}, {"text": "two"}], store=store)
    async with engine:
        a = await engine.create_context()
        b = await engine.create_context()
        await engine.send(a, "first")
        await engine.send(b, "first")
    kept_a, kept_b = store._records[a].steps, store._records[b].steps
    tuples_a = [x for x in kept_a if type(x) is tuple]
    tuples_b = [x for x in kept_b if type(x) is tuple]
    assert len(tuples_a) >= 3 and len(tuples_a) == len(tuples_b)
    assert all(x is y for x, y in zip(tuples_a, tuples_b, strict=True))
    steps = await store.steps(a)
    assert [(s.from_state, s.trigger, s.to_state) for s in steps] == tuples_a
    # per commit a head (version, time), then its steps: nothing else
    heads = [x for x in kept_a if type(x) is not tuple]
    assert len(kept_a) == len(tuples_a) + len(heads)
    pairs = zip(heads[::2], heads[1::2], strict=True)
    assert all(type(v) is int and type(t) is datetime for v, t in pairs)
    versions = [s.version for s in steps]
    assert versions == sorted(versions) and len(set(versions)) == len(heads) // 2
    for s in steps:
        assert s.at in heads[1::2]


@pytest.mark.anyio
async def test_one_branch_in_the_pools_order_is_kept_without_its_ids() -> None:
    """A context whose one branch holds every message of the pool, in the
    pool's order, keeps that branch alone (its ids are the pool's keys); a
    commit that adds a branch, appends elsewhere or again appends an id the
    pool holds turns it into branches by name first. What ``load`` gives is
    the same either way."""
    from turnfsm.errors import StoreError
    from turnfsm.model import Branch

    from .contract import empty_context, make_commit, msg

    store = MemoryStore()
    await store.create(empty_context("c"))
    assert type(store._records["c"].branches) is Branch
    await store.commit(make_commit("c", 0, appended=[("main", msg("m1")), ("main", msg("m2"))]))
    await store.commit(make_commit("c", 1, replaced=[msg("m1", text="edited")]))
    await store.commit(make_commit("c", 2, appended=[("main", msg("m3", parent="m2"))]))
    kept = store._records["c"].branches
    assert type(kept) is Branch and kept.message_ids == ()
    ctx = await store.load("c")
    assert list(ctx.branches) == ["main"]
    assert ctx.branches["main"] == Branch(name="main", message_ids=["m1", "m2", "m3"])
    assert ctx.message_pool["m1"].message.text == "edited"
    ctx.branches["main"].message_ids.append("mine")  # the load's own list
    assert (await store.load("c")).branches["main"].message_ids == ["m1", "m2", "m3"]

    # a refused commit leaves the branch as it was
    with pytest.raises(StoreError, match="unknown branch"):
        await store.commit(make_commit("c", 3, appended=[("other", msg("m4"))]))
    assert (await store.load("c")).branches == {
        "main": Branch(name="main", message_ids=["m1", "m2", "m3"])
    }

    # a fork: branches by name from then on
    fork = Branch(name="alt", message_ids=["m1", "m4"], parent_message_id="m1", forked_from="main")
    await store.commit(
        make_commit("c", 3, appended=[("alt", msg("m4", parent="m1"))], branches=[fork])
    )
    assert type(store._records["c"].branches) is dict
    await store.commit(make_commit("c", 4, appended=[("main", msg("m5", parent="m3"))]))
    after = await store.load("c")
    assert after.branches["main"].message_ids == ["m1", "m2", "m3", "m5"]
    assert after.branches["alt"].message_ids == ["m1", "m4", "m4"]  # the fork's, then the append


@pytest.mark.anyio
async def test_an_append_of_an_id_the_pool_holds_keeps_the_branch_as_it_always_did() -> None:
    """Appending an id the pool already holds (which the engine never does)
    lists it twice in the branch and once in the pool, as before."""
    from turnfsm.model import Branch

    from .contract import empty_context, make_commit, msg

    for twice in (
        [[("main", msg("m1"))], [("main", msg("m1", text="again"))]],
        [[("main", msg("m1")), ("main", msg("m1", text="again"))]],
    ):
        store = MemoryStore()
        await store.create(empty_context("c"))
        for version, appended in enumerate(twice):
            await store.commit(make_commit("c", version, appended=appended))
        assert type(store._records["c"].branches) is dict
        ctx = await store.load("c")
        assert ctx.branches["main"].message_ids == ["m1", "m1"]
        assert list(ctx.message_pool) == ["m1"]
        assert ctx.message_pool["m1"].message.text == "again"

    # created with a pool its one branch does not hold in order: by name
    store = MemoryStore()
    await store.create(
        empty_context(
            "d",
            message_pool={"a": msg("a"), "b": msg("b")},
            branches={"main": Branch(name="main", message_ids=["b", "a"])},
        )
    )
    assert type(store._records["d"].branches) is dict
    assert (await store.load("d")).branches["main"].message_ids == ["b", "a"]


@pytest.mark.anyio
async def test_a_commits_head_is_the_one_apply_head_writes() -> None:
    """The store writes a commit's head on its own copy: every field of the
    head as ``Commit.apply_head`` leaves it, for a commit that sets each, and
    a config of its own."""
    import copy
    import dataclasses
    from datetime import UTC, datetime

    from turnfsm.model import Branch, ChatConfig, ChatContext, TurnProgress

    from .contract import make_commit

    at = datetime(2026, 12, 4, tzinfo=UTC)
    store = MemoryStore()
    ctx = ChatContext(id="a", created_at=at, updated_at=at)
    await store.create(ctx)
    commit = make_commit(
        "a",
        0,
        state="AwaitingToolApproval",
        branches=[Branch(name="side", message_ids=[])],
        active_branch="side",
        config=ChatConfig(title="t"),
        progress=TurnProgress(iteration=2, attempt=1),
        event_seq=7,
    )
    want = copy.deepcopy(ctx)
    commit.apply_head(want)
    await store.commit(commit)
    got = await store.load("a")
    for f in dataclasses.fields(ChatContext):
        if f.name not in ("message_pool", "branches"):
            assert getattr(got, f.name) == getattr(want, f.name), f.name
    assert got.config is not commit.config
