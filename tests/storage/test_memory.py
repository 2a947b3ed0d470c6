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
