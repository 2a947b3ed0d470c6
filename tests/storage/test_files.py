"""The contract suite for the file store (the session directory layout)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from turnfsm.errors import StoreError
from turnfsm.model import ApprovalStatus
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


def test_the_layout_is_the_session_directory_layout(tmp_path: Path) -> None:
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
    assert not (folder / "commit.journal").exists()  # only while a commit is applied


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


# ---------------------------------------------------------------- commits interrupted


class Interrupted(Exception):
    pass


def interrupt_at(label: str) -> Any:
    """An op hook that raises before the first file operation ``label`` ("rename
    metadata.json"), as if the process died there (nothing after it runs)."""

    def hook(kind: str, path: Path) -> None:
        if f"{kind} {path.name}" == label:
            raise Interrupted(label)

    return hook


async def _awaiting_approval(root_dir: Path) -> str:
    from turnfsm import Engine, tool
    from turnfsm.adapters.llm import LLMResponse, ToolCallData
    from turnfsm.testing import ScriptedLLM

    @tool(approval="required")
    def book(city: str) -> str:
        return city

    llm = ScriptedLLM([LLMResponse(tool_calls=(ToolCallData("call-1", "book", {"city": "Oslo"}),))])
    async with Engine(llm=llm, tools=[book], store=FilesStore(root_dir)) as engine:
        cid = await engine.create_context(context_id="c")
        turn = await engine.send(cid, "book Oslo")
        assert str(turn.state) == "AwaitingToolApproval"
    return cid


@pytest.mark.parametrize(
    "label",
    [
        "steps steps.jsonl",
        "rename MESSAGE.json",
        "rename message_index.json",
        "rename metadata.json",
        "unlink commit.journal",
    ],
)
def test_a_commit_interrupted_after_its_journal_is_completed_by_the_next_reader(
    tmp_path: Path, label: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bug this layout once had: a decision written to the message file
    while metadata.json still waited for it. Interrupted anywhere after its
    journal, the commit is whole once the context is next read."""
    import anyio

    from turnfsm import Engine
    from turnfsm.storage import _files
    from turnfsm.testing import FakeClock, ScriptedLLM

    cid = anyio.run(_awaiting_approval, root(tmp_path))
    before = anyio.run(FilesStore(root(tmp_path)).load, cid)
    decided = before.pending_tool_calls()[0].id
    holder = before.last_tool_batch()
    assert holder is not None
    label = label.replace("MESSAGE", holder[0].id)

    async def approve() -> None:
        async with Engine(
            llm=ScriptedLLM([{"text": "done"}]), store=FilesStore(root(tmp_path))
        ) as e:
            await e.approve(cid, decided)

    monkeypatch.setattr(_files, "op_hook", interrupt_at(label))
    with pytest.raises(Interrupted):
        anyio.run(approve)
    monkeypatch.setattr(_files, "op_hook", None)
    folder = root(tmp_path) / "contexts" / cid
    assert (folder / "commit.journal").exists()
    after = anyio.run(FilesStore(root(tmp_path)).load, cid)
    assert not (folder / "commit.journal").exists()
    assert after.version == before.version + 1
    assert after.current_state != "AwaitingToolApproval"
    calls = after.message_pool[holder[0].id].message.tool_calls
    assert calls is not None
    assert calls[0].approval_status is ApprovalStatus.APPROVED

    # and the engine carries on from there, once the interrupted call's lease
    # (held by this very process, which a real crash would have ended) expired
    async def finish() -> str:
        async with Engine(
            llm=ScriptedLLM([{"text": "done"}]),
            store=FilesStore(root(tmp_path)),
            clock=FakeClock(time.time() + 3600),
        ) as e:
            recovery = await e.recover()
            assert not recovery.failed and not recovery.skipped, recovery
            return (await e.get_context(cid)).current_state

    assert anyio.run(finish) == "Idle"


def test_a_commit_interrupted_before_its_journal_leaves_the_old_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio

    from turnfsm import Engine
    from turnfsm.storage import _files
    from turnfsm.testing import ScriptedLLM

    cid = anyio.run(_awaiting_approval, root(tmp_path))
    before = anyio.run(FilesStore(root(tmp_path)).load, cid)

    async def approve() -> None:
        async with Engine(
            llm=ScriptedLLM([{"text": "done"}]), store=FilesStore(root(tmp_path))
        ) as e:
            await e.approve(cid, before.pending_tool_calls()[0].id)

    monkeypatch.setattr(_files, "op_hook", interrupt_at("rename commit.journal"))
    with pytest.raises(Interrupted):
        anyio.run(approve)
    monkeypatch.setattr(_files, "op_hook", None)
    after = anyio.run(FilesStore(root(tmp_path)).load, cid)
    assert after == before
    assert [c.id for c in after.pending_tool_calls()] == [c.id for c in before.pending_tool_calls()]


def test_a_create_interrupted_leaves_no_context_and_the_id_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio

    from turnfsm.errors import ContextNotFound
    from turnfsm.storage import _files

    from .contract import rich_context

    monkeypatch.setattr(_files, "op_hook", interrupt_at("write metadata.json"))
    with pytest.raises(Interrupted):
        anyio.run(FilesStore(root(tmp_path)).create, rich_context("c"))
    monkeypatch.setattr(_files, "op_hook", None)
    store = FilesStore(root(tmp_path))
    with pytest.raises(ContextNotFound):
        anyio.run(store.load, "c")
    with pytest.raises(ContextNotFound):
        anyio.run(store.delete, "c")
    assert anyio.run(store.list_contexts) == []
    anyio.run(store.create, rich_context("c"))
    assert anyio.run(store.load, "c") == rich_context("c")


def test_a_delete_interrupted_leaves_no_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio

    from turnfsm.errors import ContextNotFound
    from turnfsm.storage import _files

    from .contract import rich_context

    store = FilesStore(root(tmp_path))
    anyio.run(store.create, rich_context("c"))
    monkeypatch.setattr(_files, "op_hook", interrupt_at("unlink metadata.json"))
    with pytest.raises(Interrupted):
        anyio.run(store.delete, "c")
    monkeypatch.setattr(_files, "op_hook", None)
    store = FilesStore(root(tmp_path))
    with pytest.raises(ContextNotFound):
        anyio.run(store.load, "c")
    assert anyio.run(store.list_contexts) == []
    assert sorted(p.name for p in (root(tmp_path) / "contexts").iterdir()) == [".lock"]
