"""The files store's kept heads: a commit reads ``metadata.json`` and writes
what changed, without reading every message file again, and writes the same
bytes as a commit that read the whole context (what the store did before it
kept heads). A page and ``load_messages`` read only the messages asked for.

The cost itself is a benchmark (``bench/run.py --workload files``), not a
timed test: here the files read are counted."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fixtures.records import make
from kit import first_by_default  # tests/ is on sys.path (no tests/__init__.py)

from turnfsm.model import (
    Branch,
    ChatContext,
    InternalMessage,
    MessageMetadata,
    MessageNode,
    Role,
    TextPart,
    TurnProgress,
)
from turnfsm.storage import Commit, FilesStore, StepLog, _files, _files_heads, _files_records

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def _node(mid: str, n: int, role: Role = Role.USER) -> MessageNode:
    return MessageNode(
        id=mid,
        message=InternalMessage(
            role=role,
            content=[TextPart(text=f"text {n} ✓")],
            metadata=MessageMetadata(created_at=T0 + timedelta(seconds=n)),
        ),
    )


def _script(seed: int) -> tuple[ChatContext, list[Commit]]:
    """A context and a random run of commits on it: appends to several
    branches, forks (new branches), branches set again (detaching messages),
    replaced messages (some changing what the index lists), config changes."""
    rnd = random.Random(seed)
    first = _node("é-0", 0)
    ctx = ChatContext(
        id="ctx",
        message_pool={first.id: first},
        branches={"main": Branch(name="main", message_ids=[first.id])},
        created_at=T0,
        updated_at=T0,
    )
    commits = []
    branches = {"main": [first.id]}
    pool = [first.id]
    n = 1
    for version in range(1, 40):
        appended = []
        new_branches = []
        replaced = []
        kind = rnd.random()
        if kind < 0.15:  # a fork, or a branch set again
            name = rnd.choice([*branches, f"b{version}"])
            src = branches[rnd.choice(list(branches))]
            ids = src[: rnd.randrange(len(src) + 1)]
            new_branches.append(Branch(name=name, message_ids=list(ids), forked_from="main"))
            branches[name] = list(ids)
        if kind > 0.8 and pool:
            mid = rnd.choice(pool)
            role = rnd.choice([Role.USER, Role.ASSISTANT])
            replaced.append(_node(mid, n + 1000 * rnd.randrange(2), role))
        for _ in range(rnd.randrange(4)):
            name = rnd.choice(list(branches))
            node = _node(f"m-{n}", n, rnd.choice([Role.USER, Role.ASSISTANT, Role.TOOL]))
            n += 1
            appended.append((name, node))
            branches[name].append(node.id)
            pool.append(node.id)
        commits.append(
            Commit(
                context_id="ctx",
                expected_version=version - 1,
                version=version,
                state="Idle",
                updated_at=T0 + timedelta(minutes=version),
                progress=TurnProgress(iteration=version),
                event_seq=version * 3,
                steps=[StepLog(version, "Idle", "send", "Idle", T0)] if version % 3 else [],
                appended=appended,
                replaced=replaced,
                branches=new_branches,
                active_branch=rnd.choice(list(branches)) if rnd.random() < 0.2 else None,
                config=dataclasses.replace(ctx.config, title=f"t{version}")
                if rnd.random() < 0.1
                else None,
            )
        )
    return ctx, commits


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


class Tailing(FilesStore):
    """Commits that use ``commits.jsonl`` at any size (the tail may grow to
    three times the whole files: most commits append, every few fold)."""

    tail_from = 0
    tail_limit = 3.0


def _run(
    root: Path,
    ctx: ChatContext,
    commits: list[Commit],
    stores: int = 1,
    cls: type[FilesStore] = FilesStore,
) -> None:
    """The commits, each through the next of ``stores`` store objects (more than
    one: each sees the others' writes), each loaded before its first commit."""

    async def go() -> None:
        objs = [cls(root, fsync=False) for _ in range(stores)]
        await objs[0].create(ctx)
        for obj in objs:
            await obj.load("ctx")
        for i, commit in enumerate(commits):
            await objs[i % stores].commit(commit)
            if i % 7 == 6:
                await objs[(i + 1) % stores].load("ctx")

    anyio.run(go)


@pytest.mark.parametrize("seed", first_by_default(range(6), map(str, range(6))))
def test_kept_heads_write_what_a_whole_read_writes(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx, commits = _script(seed)
    _run(tmp_path / "kept", ctx, commits)
    _run(tmp_path / "shared", ctx, commits, stores=3)
    monkeypatch.setattr(_files, "HEADS", 0)  # every commit reads the whole context
    _run(tmp_path / "whole", ctx, commits)
    whole = _tree(tmp_path / "whole")
    assert len(whole) > 20
    assert _tree(tmp_path / "kept") == whole
    assert _tree(tmp_path / "shared") == whole

    # the same commits with commits.jsonl: the same on every way of keeping heads
    _run(tmp_path / "tail-whole", ctx, commits, cls=Tailing)
    monkeypatch.setattr(_files, "HEADS", 64)
    _run(tmp_path / "tail-kept", ctx, commits, cls=Tailing)
    _run(tmp_path / "tail-shared", ctx, commits, stores=3, cls=Tailing)
    tail_whole = _tree(tmp_path / "tail-whole")
    assert _tree(tmp_path / "tail-kept") == tail_whole
    assert _tree(tmp_path / "tail-shared") == tail_whole

    # and a whole read of every version: the same as the store's own encoding
    async def loaded() -> ChatContext:
        return await FilesStore(tmp_path / "whole", fsync=False).load("ctx")

    back = anyio.run(loaded)
    folder = "contexts/ctx/"
    assert whole[folder + "message_index.json"] == _files_records._index_of(back)
    meta = _files_records._read_metadata(tmp_path / "whole" / folder / "metadata.json")
    assert whole[folder + "metadata.json"] == _files_records._dumps(
        {
            **_files_records._metadata_of(back, meta.steps_bytes),
            "detached_message_ids": meta.detached_message_ids,
        }
    )

    # read back with commits.jsonl: the same context, steps, summary and pages
    assert folder + "commits.jsonl" in tail_whole
    assert anyio.run(_everything, tmp_path / "tail-whole") == anyio.run(
        _everything, tmp_path / "whole"
    )

    # one more commit of a store that writes the whole files: the very files
    # of a store that never appended a record (and commits.jsonl emptied)
    extra = _extra(commits[-1])
    anyio.run(FilesStore(tmp_path / "whole", fsync=False).commit, extra)
    anyio.run(_Folding(tmp_path / "tail-whole", fsync=False).commit, extra)
    folded = _tree(tmp_path / "tail-whole")
    assert folded.pop(folder + "commits.jsonl") == b""
    assert folded == _tree(tmp_path / "whole")


class _Folding(FilesStore):
    tail_from = 0
    tail_limit = 0.0


def _extra(last: Commit) -> Commit:
    node = _node("last", 9999)
    return dataclasses.replace(
        last,
        expected_version=last.version,
        version=last.version + 1,
        steps=[],
        appended=[("main", node)],
        replaced=[],
        branches=[],
        active_branch=None,
        config=None,
    )


async def _everything(root: Path) -> tuple[Any, ...]:
    """What every read of the store gives of the context (a fresh store object)."""
    store = FilesStore(root, fsync=False)
    ctx = await store.load("ctx")
    pages = [await store.message_page("ctx", name, 1, 3) for name in ctx.branches]
    pages.append(await store.message_page("ctx", None, 0, None))
    found = await store.load_messages("ctx", list(ctx.message_pool))
    return ctx, await store.steps("ctx"), await store.list_contexts(), pages, found


def _index_by_json(ctx: ChatContext) -> bytes:
    """``message_index.json`` through the JSON encoder (how it was first written)."""
    return _files_records._dumps(
        {
            "messages": [
                {
                    "id": mid,
                    "role": str(ctx.message_pool[mid].message.role),
                    "message_type": str(ctx.message_pool[mid].message.message_type),
                    "created_at": ctx.message_pool[mid].message.metadata.created_at.isoformat(),
                    "branch": name,
                }
                for name, b in ctx.branches.items()
                for mid in b.message_ids
            ]
        }
    )


def test_the_hand_made_encodings_are_the_json_encoders() -> None:
    odd = _node('q"\\\u2028 ✓\t', 1)
    ctx = ChatContext(
        id="ctx",
        message_pool={odd.id: odd, "x": _node("x", 2)},
        branches={
            'ma"in': Branch(name='ma"in', message_ids=[odd.id, odd.id]),
            "e": Branch(name="e"),
        },
        created_at=T0,
        updated_at=T0,
    )
    for c in (ctx, make.parent_created(), make.child_created()):
        assert _files_records._index_of(c) == _index_by_json(c)
        ids = {
            n: b",\n".join([_files_records._id_line(m) for m in b.message_ids])
            for n, b in c.branches.items()
        }
        for detached in ([], ["x"]):
            want = _files_records._dumps(
                {**_files_records._metadata_of(c, 9), "detached_message_ids": detached}
            )
            assert _files_records._metadata_text(c, ids, detached, 9) == want


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    read: list[str] = []
    real = _files_records._read_message

    def counted(path: Path, mid: str, named_at: str) -> Any:
        read.append(mid)
        return real(path, mid, named_at)

    monkeypatch.setattr(_files_records, "_read_message", counted)
    monkeypatch.setattr(_files_heads, "_read_message", counted)
    return read


def _long(n: int) -> ChatContext:
    nodes = [_node(f"m{i}", i) for i in range(n)]
    return ChatContext(
        id="ctx",
        message_pool={x.id: x for x in nodes},
        branches={"main": Branch(name="main", message_ids=[x.id for x in nodes])},
        created_at=T0,
        updated_at=T0,
    )


def test_a_commit_after_the_first_reads_no_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = _count_reads(monkeypatch)

    def commit(version: int) -> Commit:
        return Commit(
            context_id="ctx",
            expected_version=version - 1,
            version=version,
            state="Idle",
            updated_at=T0,
            progress=TurnProgress(),
            event_seq=version,
            appended=[("main", _node(f"n{version}", version))],
        )

    async def go() -> None:
        store = FilesStore(tmp_path, fsync=False)
        await store.create(_long(50))
        await store.commit(commit(1))  # nothing kept yet: reads the context
        assert len(read) == 50
        read.clear()
        for v in range(2, 6):
            await store.commit(commit(v))
        assert read == []
        # another store object's commit: this one reads the whole context again
        await FilesStore(tmp_path, fsync=False).commit(commit(6))
        read.clear()
        await store.commit(commit(7))
        assert len(read) == 56
        ctx = await FilesStore(tmp_path, fsync=False).load("ctx")
        assert ctx.branches["main"].message_ids[-3:] == ["n5", "n6", "n7"]

    anyio.run(go)


def test_a_page_reads_only_its_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def go() -> None:
        await FilesStore(tmp_path, fsync=False).create(_long(300))
        read = _count_reads(monkeypatch)
        store = FilesStore(tmp_path, fsync=False)
        page = await store.message_page("ctx", None, 280, 50)
        assert page is not None
        name, nodes = page
        assert name == "main" and [x.id for x in nodes] == [f"m{i}" for i in range(280, 300)]
        assert read == [f"m{i}" for i in range(280, 300)]
        assert await store.message_page("ctx", "nope", 0, 5) is None
        assert await store.message_page("ctx", "main", 400, None) == ("main", [])
        read.clear()
        found = await store.load_messages("ctx", ["m7", "m3", "m7"])
        assert [x.id for x in found] == ["m7", "m3", "m7"] and sorted(read) == ["m3", "m7"]
        with pytest.raises(Exception, match="no message 'zz'"):
            await store.load_messages("ctx", ["m1", "zz"])

    anyio.run(go)
