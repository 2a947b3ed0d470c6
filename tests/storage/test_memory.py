"""The contract suite for the in-memory store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
