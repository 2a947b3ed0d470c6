"""The contract suite for the file store (the session directory layout)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from turnfsm.errors import StoreError
from turnfsm.storage import FilesStore, Store, open_store

from .contract import StoreContract


def root(tmp_path: Path) -> Path:
    return tmp_path / "data"


class TestFilesStore(StoreContract):
    persistent = True

    def make_store(self, tmp_path: Path) -> Store:
        return FilesStore(root(tmp_path))

    def reopen(self, store: Store, tmp_path: Path) -> Store:
        return FilesStore(root(tmp_path))

    def set_schema_version(
        self,
        store: Store,
        tmp_path: Path,
        context_id: str,
        version: int,
        message_id: str | None = None,
    ) -> str:
        folder = root(tmp_path) / "contexts" / context_id
        path = (
            folder / "metadata.json"
            if message_id is None
            else (folder / "messages" / f"{message_id}.json")
        )
        data = json.loads(path.read_text())
        data["schema_version"] = version
        path.write_text(json.dumps(data))
        return str(path)


def test_the_layout_is_the_one_of_seed_002(tmp_path: Path) -> None:
    import anyio

    from turnfsm import Engine
    from turnfsm.testing import ScriptedLLM

    async def go() -> str:
        async with Engine(
            llm=ScriptedLLM([{"text": "hello"}]), store=f"files:///{root(tmp_path)}"
        ) as engine:
            cid = await engine.create_context()
            await engine.send(cid, "hi")
            return cid

    cid = anyio.run(go)
    folder = root(tmp_path) / "contexts" / cid
    meta = json.loads((folder / "metadata.json").read_text())
    for key in (
        "id",
        "parent_id",
        "config",
        "branches",
        "active_branch_name",
        "current_state",
        "created_at",
        "updated_at",
    ):
        assert key in meta, key
    assert meta["current_state"] == "Idle"
    ids = meta["branches"]["main"]["message_ids"]
    assert [p.stem for p in sorted((folder / "messages").iterdir())] == sorted(ids)
    index = json.loads((folder / "message_index.json").read_text())["messages"]
    assert [e["id"] for e in index] == ids
    assert {tuple(sorted(e)) for e in index} == {
        ("branch", "created_at", "id", "message_type", "role")
    }


def test_a_corrupted_metadata_file_is_named_and_left_alone(tmp_path: Path) -> None:
    import anyio

    async def go() -> None:
        store = FilesStore(root(tmp_path))
        from turnfsm.model import ChatContext

        from .contract import rich_context

        ctx: ChatContext = rich_context()
        await store.create(ctx)
        path = root(tmp_path) / "contexts" / ctx.id / "metadata.json"
        path.write_bytes(b'{"id": "trunc')
        with pytest.raises(StoreError, match=str(path)):
            await store.load(ctx.id)
        assert path.read_bytes() == b'{"id": "trunc'

    anyio.run(go)


def test_files_url_opens_a_files_store(tmp_path: Path) -> None:
    assert isinstance(open_store(f"files:///{root(tmp_path)}"), FilesStore)
