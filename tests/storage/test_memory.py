"""The contract suite for the in-memory store."""

from __future__ import annotations

import dataclasses
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
async def test_steps_kept_compact_read_back_equal_to_the_ones_committed() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    from turnfsm.model import ChatContext
    from turnfsm.states import State, Trigger
    from turnfsm.storage import StepLog

    from .contract import make_commit

    store = MemoryStore()
    at = datetime(2026, 12, 2, 19, 0, 0, 123457, tzinfo=UTC)
    for cid in ("a", "b"):
        await store.create(ChatContext(id=cid, created_at=at, updated_at=at))
    walk = [
        (State.IDLE, Trigger.USER_MESSAGE, State.PROCESSING_USER_MESSAGE),
        (State.PROCESSING_USER_MESSAGE, Trigger.PROMPT_READY, State.AWAITING_LLM_RESPONSE),
    ]
    other_zone = timezone(timedelta(hours=2))
    commits = [
        make_commit("a", 0, steps=walk, at=at),
        make_commit("a", 1, steps=[], at=at),  # no steps: nothing recorded
        make_commit("a", 2, steps=walk[:1], at=at.astimezone(other_zone)),
        make_commit("a", 3, steps=walk, at=at + timedelta(microseconds=1)),
    ]
    with_detail = dataclasses.replace(commits[3].steps[1], detail={"name": "x"})
    commits[3].steps[1] = with_detail
    leased = dataclasses.replace(commits[0].steps[0], lease_token=3, lease_owner="h:1:r")
    commits.append(make_commit("a", 4, steps=walk, at=at))
    commits[4].steps[0] = leased
    for c in commits:
        await store.commit(c)
    await store.commit(make_commit("b", 0, steps=walk, at=at))
    expected = [s for c in commits for s in c.steps]
    got = await store.steps("a")
    assert got == expected
    # every field, also those equality leaves out, and the same zone and state objects
    for g, e in zip(got, expected, strict=True):
        assert type(g) is StepLog
        assert [getattr(g, f.name) for f in dataclasses.fields(g)] == [
            getattr(e, f.name) for f in dataclasses.fields(e)
        ]
        assert g.at.utcoffset() == e.at.utcoffset() and g.from_state is e.from_state
    assert got[-2].lease_token == 3 and got[-2].lease_owner == "h:1:r"
    # the two contexts that took the same transitions share their names
    logs = [store._records[cid].steps for cid in ("a", "b")]
    assert logs[0].entries[0] is logs[1].entries[0]
    assert len(logs[0].entries) == 4  # the empty commit adds no entry
    assert isinstance(logs[0].entries[1], list)  # not UTC: kept as given
    assert await store.steps("b") == [StepLog(1, a, t, b, at) for (a, t, b) in walk]
