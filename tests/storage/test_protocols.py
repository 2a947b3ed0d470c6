"""The store protocols (docs/storage.md, "Writing a store"): each store states
what it implements by its bases, and the engine asks with ``isinstance``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from turnfsm import Engine
from turnfsm.engine import Worker
from turnfsm.errors import StoreError
from turnfsm.storage import (
    ContextOutlines,
    ContextStore,
    FilesStore,
    Lease,
    Leases,
    MemoryStore,
    MessagePages,
    SQLiteStore,
    Store,
    WorkDoorbell,
    WorkQueue,
)
from turnfsm.testing import ScriptedLLM

pytestmark = pytest.mark.anyio


def _declared(cls: type) -> set[type]:
    return {p for p in (ContextStore, Leases, Store, WorkQueue, WorkDoorbell) if p in cls.__mro__}


def test_each_store_names_what_it_implements() -> None:
    from turnfsm.storage import PostgresStore

    base = {ContextStore, Leases, Store}
    assert _declared(MemoryStore) == base
    assert _declared(FilesStore) == base
    assert _declared(SQLiteStore) == base | {WorkQueue}
    assert _declared(PostgresStore) == base | {WorkQueue, WorkDoorbell}


async def test_isinstance_tells_what_a_store_can_do(tmp_path: Path) -> None:
    memory, files = MemoryStore(), FilesStore(tmp_path / "files")
    sqlite = SQLiteStore(tmp_path / "s.db")
    try:
        for store in (memory, files, sqlite):
            assert isinstance(store, Store)
            assert isinstance(store, Leases)
            assert not isinstance(store, WorkDoorbell)
        assert not isinstance(memory, WorkQueue)
        assert not isinstance(files, WorkQueue)
        assert isinstance(sqlite, WorkQueue)
        for store in (files, sqlite):  # they read a part of a context alone
            assert isinstance(store, ContextOutlines)
            assert isinstance(store, MessagePages)
        assert not isinstance(memory, ContextOutlines)  # it holds contexts whole
        assert not isinstance(memory, MessagePages)
    finally:
        await sqlite.aclose()


class _Claims(MemoryStore):
    """A store of no declared work queue that has the method all the same: the
    protocols are runtime-checkable, so it counts as one (structurally)."""

    async def claim_expired(
        self, owner: str, ttl: float, *, now: float, limit: int | None = 100
    ) -> list[Lease]:
        return []


class _Rings(_Claims):
    async def wait_for_work(self, seconds: float) -> bool:
        return False


def test_a_store_with_the_methods_counts_without_naming_the_protocols() -> None:
    assert isinstance(_Claims(), WorkQueue)
    assert not isinstance(_Claims(), WorkDoorbell)
    assert isinstance(_Rings(), WorkDoorbell)

    class Partial:  # records only: no leases
        async def load_messages(self, context_id: str, ids: Sequence[str]) -> Any: ...

    assert not isinstance(Partial(), Store)


async def test_the_engine_hands_work_only_to_a_work_queue() -> None:
    async with Engine(llm=ScriptedLLM([]), store=MemoryStore()) as engine:
        cid = await engine.create_context()
        with pytest.raises(StoreError, match="cannot hand turns to workers"):
            await engine.submit(cid, "hi")
        with pytest.raises(StoreError, match="cannot hand out work"):
            Worker(engine)
    async with Engine(llm=ScriptedLLM([]), store=_Claims()) as engine:
        worker = Worker(engine)
        assert worker._doorbell is None
    store = _Rings()
    async with Engine(llm=ScriptedLLM([]), store=store) as engine:
        worker = Worker(engine)
        assert worker._doorbell == store.wait_for_work


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_head_is_the_state_and_version_without_a_load(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """``ContextHeads``: the stores that hand out work (the ones ``serve
    --turns workers`` runs on) read a context's state and version from its row."""
    from turnfsm.errors import ContextNotFound
    from turnfsm.storage._base import ContextHeads

    url = f"sqlite:///{tmp_path}/h.db" if kind == "sqlite" else request.getfixturevalue("pg_url")
    engine = Engine(llm=ScriptedLLM([{"text": "hi"}]), store=url)
    async with engine:
        store = engine.store
        assert isinstance(store, ContextHeads)
        cid = await engine.create_context()
        assert await store.head(cid) == ("Idle", 0)
        await engine.send(cid, "hello")
        ctx = await store.load(cid)
        assert await store.head(cid) == ("Idle", ctx.version) and ctx.version > 0
        with pytest.raises(ContextNotFound):
            await store.head("nope")
    assert not isinstance(MemoryStore(), ContextHeads)
