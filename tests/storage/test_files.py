"""The contract suite for the file store (the session directory layout)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from turnfsm.errors import StoreError
from turnfsm.model import ApprovalStatus, TurnProgress
from turnfsm.storage import FilesStore, Store, open_store

from .contract import StoreContract
from .contract_reads import PartialReadsContract


def root(tmp_path: Path) -> Path:
    return tmp_path / "data"


class TestFilesStore(StoreContract, PartialReadsContract):
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


class TailingFilesStore(FilesStore):
    """A files store whose commits use ``commits.jsonl`` at any size: most
    append a record, every few write the whole files again (the tail may grow
    to three times them)."""

    tail_from = 0
    tail_limit = 3.0


class AlwaysTailing(FilesStore):
    """Every commit appends to ``commits.jsonl``."""

    tail_from = 0
    tail_limit = 1e9


class NeverTailing(FilesStore):
    """Every commit writes the whole files (and empties ``commits.jsonl``)."""

    tail_from = 0
    tail_limit = 0.0


class TestFilesStoreWithATail(TestFilesStore):
    """The contract again, on the layout of long conversations: the current
    small fields and the newest ids in ``commits.jsonl``."""

    def make_store(self, tmp_path: Path) -> Store:
        return TailingFilesStore(root(tmp_path))

    def reopen(self, store: Store, tmp_path: Path) -> Store:
        return TailingFilesStore(root(tmp_path))

    def set_schema_version(
        self,
        store: Store,
        tmp_path: Path,
        context_id: str,
        version: int,
        message_id: str | None = None,
    ) -> str:
        tail = root(tmp_path) / "contexts" / context_id / "commits.jsonl"
        if message_id is not None or not tail.exists() or not tail.read_bytes():
            return super().set_schema_version(store, tmp_path, context_id, version, message_id)
        lines = tail.read_bytes().splitlines(keepends=True)
        last = json.loads(lines[-1])
        last["metadata"]["schema_version"] = version
        lines[-1] = json.dumps(last).encode() + b"\n"
        tail.write_bytes(b"".join(lines))
        return f"{tail}: line {len(lines)}"


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


async def _awaiting_approval(root_dir: Path, store: type[FilesStore] = FilesStore) -> str:
    from turnfsm import Engine, tool
    from turnfsm.adapters.llm import LLMResponse, ToolCallData
    from turnfsm.testing import ScriptedLLM

    @tool(approval="required")
    def book(city: str) -> str:
        return city

    llm = ScriptedLLM([LLMResponse(tool_calls=(ToolCallData("call-1", "book", {"city": "Oslo"}),))])
    async with Engine(llm=llm, tools=[book], store=store(root_dir)) as engine:
        cid = await engine.create_context(context_id="c")
        turn = await engine.send(cid, "book Oslo")
        assert str(turn.state) == "AwaitingToolApproval"
    return cid


WHOLE = (FilesStore, FilesStore)
APPENDED = (AlwaysTailing, AlwaysTailing)
FOLDED = (AlwaysTailing, NeverTailing)
"""(the store that makes the context, the one whose commit is interrupted):
the whole files written; a record appended to ``commits.jsonl``; the whole
files written after records were appended, and ``commits.jsonl`` emptied."""


@pytest.mark.parametrize(
    ("label", "stores"),
    [
        ("steps steps.jsonl", WHOLE),
        ("rename MESSAGE.json", WHOLE),
        ("rename message_index.json", WHOLE),
        ("rename metadata.json", WHOLE),
        ("unlink commit.journal", WHOLE),
        ("steps steps.jsonl", APPENDED),
        ("rename MESSAGE.json", APPENDED),
        ("tail commits.jsonl", APPENDED),
        ("unlink commit.journal", APPENDED),
        ("rename message_index.json", FOLDED),
        ("rename metadata.json", FOLDED),
        ("tail commits.jsonl", FOLDED),
        ("unlink commit.journal", FOLDED),
    ],
)
def test_a_commit_interrupted_after_its_journal_is_completed_by_the_next_reader(
    tmp_path: Path,
    label: str,
    stores: tuple[type[FilesStore], type[FilesStore]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bug this layout once had: a decision written to the message file
    while metadata.json still waited for it. Interrupted anywhere after its
    journal, the commit is whole once the context is next read: a commit that
    writes the whole files, one that appends its record to commits.jsonl, and
    one that writes the whole files again after records were appended."""
    import anyio

    from turnfsm import Engine
    from turnfsm.storage import _files
    from turnfsm.testing import FakeClock, ScriptedLLM

    maker, writer = stores
    cid = anyio.run(_awaiting_approval, root(tmp_path), maker)
    folder = root(tmp_path) / "contexts" / cid
    tail = folder / "commits.jsonl"
    assert tail.exists() == (maker is AlwaysTailing)
    before = anyio.run(FilesStore(root(tmp_path)).load, cid)
    decided = before.pending_tool_calls()[0].id
    holder = before.last_tool_batch()
    assert holder is not None
    label = label.replace("MESSAGE", holder[0].id)

    async def approve() -> None:
        async with Engine(llm=ScriptedLLM([{"text": "done"}]), store=writer(root(tmp_path))) as e:
            await e.approve(cid, decided)

    monkeypatch.setattr(_files, "op_hook", interrupt_at(label))
    with pytest.raises(Interrupted):
        anyio.run(approve)
    monkeypatch.setattr(_files, "op_hook", None)
    assert (folder / "commit.journal").exists()
    after = anyio.run(FilesStore(root(tmp_path)).load, cid)
    assert not (folder / "commit.journal").exists()
    if stores is FOLDED:
        assert tail.read_bytes() == b""
    elif stores is APPENDED:
        assert json.loads(tail.read_bytes().splitlines()[-1])["version"] == after.version
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


@pytest.mark.parametrize("stores", [WHOLE, APPENDED, FOLDED])
def test_a_commit_interrupted_before_its_journal_leaves_the_old_state(
    tmp_path: Path,
    stores: tuple[type[FilesStore], type[FilesStore]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import anyio

    from turnfsm import Engine
    from turnfsm.storage import _files
    from turnfsm.testing import ScriptedLLM

    maker, writer = stores
    cid = anyio.run(_awaiting_approval, root(tmp_path), maker)
    before = anyio.run(FilesStore(root(tmp_path)).load, cid)

    async def approve() -> None:
        async with Engine(llm=ScriptedLLM([{"text": "done"}]), store=writer(root(tmp_path))) as e:
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


# ---------------------------------------------------------------- commits.jsonl


def _appending(version: int, n: int = 1) -> Any:
    from datetime import UTC, datetime

    from turnfsm.model import InternalMessage, MessageMetadata, MessageNode, Role, TextPart
    from turnfsm.storage import Commit, StepLog

    at = datetime(2026, 3, 1, 12, tzinfo=UTC)
    nodes = [
        MessageNode(
            id=f"v{version}-{i}",
            message=InternalMessage(
                role=Role.USER,
                content=[TextPart(text=f"{version} {i}")],
                metadata=MessageMetadata(created_at=at),
            ),
        )
        for i in range(n)
    ]
    return Commit(
        context_id="long",
        expected_version=version - 1,
        version=version,
        state="Idle",
        updated_at=at,
        progress=TurnProgress(iteration=version),
        event_seq=version,
        steps=[StepLog(version, "Idle", "send", "Idle", at)],
        appended=[("main", node) for node in nodes],
    )


def _long_context(n: int) -> Any:
    from datetime import UTC, datetime

    from turnfsm.model import (
        Branch,
        ChatContext,
        InternalMessage,
        MessageMetadata,
        MessageNode,
        Role,
        TextPart,
    )

    at = datetime(2026, 3, 1, tzinfo=UTC)
    nodes = [
        MessageNode(
            id=f"m{i:05d}",
            message=InternalMessage(
                role=Role.USER,
                content=[TextPart(text=f"message {i}")],
                metadata=MessageMetadata(created_at=at),
            ),
        )
        for i in range(n)
    ]
    return ChatContext(
        id="long",
        message_pool={x.id: x for x in nodes},
        branches={"main": Branch(name="main", message_ids=[x.id for x in nodes])},
        created_at=at,
        updated_at=at,
    )


def test_a_long_context_of_an_old_store_gains_a_tail_and_folds_it(tmp_path: Path) -> None:
    """A long context as every earlier release wrote it (the whole files, no
    commits.jsonl): a commit appends a record and leaves both whole files as
    they were; the commit that would make the tail longer than its share
    writes them whole again, as they always were, and empties it."""
    import anyio

    from turnfsm.storage import _files_records

    folder = root(tmp_path) / "contexts" / "long"
    tail = folder / "commits.jsonl"

    async def go() -> None:
        store = FilesStore(root(tmp_path), fsync=False)
        await store.create(_long_context(1_000))
        whole = {n: (folder / n).read_bytes() for n in ("metadata.json", "message_index.json")}
        assert len(whole["message_index.json"]) + len(whole["metadata.json"]) > store.tail_from
        assert not tail.exists()
        version = 0
        sizes = []
        while True:
            version += 1
            await store.commit(_appending(version))
            sizes.append(tail.stat().st_size)
            if sizes[-1] == 0:
                break
            assert {n: (folder / n).read_bytes() for n in whole} == whole
            back = await FilesStore(root(tmp_path), fsync=False).load("long")
            assert back.version == version
            assert back.branches["main"].message_ids[-1] == f"v{version}-0"
            assert len(tail.read_bytes().splitlines()) == version
        assert version > 3 and sizes[:-1] == sorted(sizes[:-1])
        # folded: the files of always, commits.jsonl empty
        back = await FilesStore(root(tmp_path), fsync=False).load("long")
        steps_bytes = (folder / "steps.jsonl").stat().st_size
        assert (folder / "metadata.json").read_bytes() == _files_records._dumps(
            _files_records._metadata_of(back, steps_bytes)
        )
        assert (folder / "message_index.json").read_bytes() == _files_records._index_of(back)
        assert len(await store.steps("long")) == version
        # and appending again after the fold
        await store.commit(_appending(version + 1))
        assert len(tail.read_bytes().splitlines()) == 1
        summary = (await FilesStore(root(tmp_path), fsync=False).list_contexts())[0]
        assert summary.version == version + 1

    anyio.run(go)


def _tail_damage(tail: Path, kind: str) -> str:
    """Damage ``tail`` (of three or more records); the words the error gives."""
    lines = tail.read_bytes().splitlines(keepends=True)
    last = json.loads(lines[-1])
    if kind == "torn":
        tail.write_bytes(b"".join(lines)[:-20])
        return "does not end with a whole record"
    if kind == "gap":
        del lines[1]
        tail.write_bytes(b"".join(lines))
        return "line 2: \\$.version"
    if kind == "not json":
        lines[0] = b"{nope\n"
        tail.write_bytes(b"".join(lines))
        return "line 1: not valid JSON"
    if kind == "field":
        last["metadata"]["version"] = "9"
        lines[-1] = json.dumps(last).encode() + b"\n"
        tail.write_bytes(b"".join(lines))
        return f"line {len(lines)}: \\$.metadata.version"
    if kind == "newer":  # a record but the last, which a page reads only in part
        first = json.loads(lines[0])
        first["metadata"]["schema_version"] = 99
        lines[0] = json.dumps(first).encode() + b"\n"
        tail.write_bytes(b"".join(lines))
        return "line 1: \\$.metadata.schema_version: schema version 99 is newer"
    if kind == "branch":
        last["appended"][0][0] = "nowhere"
        lines[-1] = json.dumps(last).encode() + b"\n"
        tail.write_bytes(b"".join(lines))
        return "unknown branch 'nowhere'"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["torn", "gap", "not json", "field", "newer", "branch"])
def test_a_damaged_tail_is_refused_named_and_left_alone(tmp_path: Path, kind: str) -> None:
    """commits.jsonl is written only from a commit's journal, so no reader ever
    sees half a record: a torn or otherwise damaged one is damage, refused by
    every read and commit that needs it, naming the file, and left as it is."""
    import anyio

    folder = root(tmp_path) / "contexts" / "long"
    tail = folder / "commits.jsonl"

    async def go() -> None:
        store = AlwaysTailing(root(tmp_path), fsync=False)
        await store.create(_long_context(30))
        for version in range(1, 5):
            await store.commit(_appending(version))
        words = _tail_damage(tail, kind)
        damaged = tail.read_bytes()
        fresh = FilesStore(root(tmp_path), fsync=False)
        for read in (
            fresh.load("long"),
            fresh.message_page("long", None, 0, 5),
            fresh.load_messages("long", ["m00001"]),
            fresh.steps("long"),
            store.commit(_appending(5)),
        ):
            with pytest.raises(StoreError, match=f"commits.jsonl: .*{words}|{words}") as err:
                await read
            assert str(tail) in str(err.value)
        assert tail.read_bytes() == damaged

    anyio.run(go)


def test_a_kept_head_is_not_used_for_a_context_made_again_under_its_id(tmp_path: Path) -> None:
    """Deleted and made again by another store object, with the same commits:
    commits.jsonl ends with the very same record, at the same length. The
    first object's kept head is still not taken for the new context (its
    metadata.json is another file), so the commit that folds the tail writes
    the new context's messages."""
    import anyio

    async def go() -> None:
        first = AlwaysTailing(root(tmp_path), fsync=False)
        await first.create(_long_context(5))
        for version in range(1, 4):
            await first.commit(_appending(version))
        other = AlwaysTailing(root(tmp_path), fsync=False)
        tail = root(tmp_path) / "contexts" / "long" / "commits.jsonl"
        before = tail.read_bytes()
        await other.delete("long")
        await other.create(_long_context(6))
        for version in range(1, 4):
            await other.commit(_appending(version))
        assert tail.read_bytes() == before
        first.tail_limit = 0.0  # this commit folds, from the head it uses
        await first.commit(_appending(4))
        ctx = await FilesStore(root(tmp_path), fsync=False).load("long")
        ids = ctx.branches["main"].message_ids
        assert ids[:6] == [f"m{i:05d}" for i in range(6)] and len(ids) == 10

    anyio.run(go)
