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
