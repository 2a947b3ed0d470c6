"""Damaged stored data is refused with a StoreError that names the place (the
file, or the table and row) and the field (a JSON path), and is left as it was.

Each case stores two contexts, damages one, and checks: ``load`` of it raises
that StoreError; nothing on disk changed; the other context still loads as it
was stored; ``list_contexts`` does not fail and lists the damaged one exactly
when its summary is readable.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from turnfsm import Engine
from turnfsm.errors import StoreError
from turnfsm.model import ChatContext
from turnfsm.storage import ContextOutlines, FilesStore, MessagePages, SQLiteStore, Store
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

from .contract import empty_context, rich_context

pytestmark = pytest.mark.anyio

# ---------------------------------------------------------------------- helpers


# The lease of a call is taken before the context is read (so that what is
# read is not stale) and released when the read fails: it is coordination
# between engines, not the context's data, and is left out of "untouched".


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in (".lock", "lease.json")
    }


def data_dump(conn: sqlite3.Connection) -> list[str]:
    return [line for line in conn.iterdump() if '"leases"' not in line]


def on_disk(path: Path) -> object:
    return tree_digest(path) if path.is_dir() else path.read_bytes()


async def two_contexts(store: Store) -> ChatContext:
    rich = rich_context()
    await store.create(rich)
    await store.create(empty_context("other"))
    return rich


async def check_refused(
    store: Store, damaged: Path, where: str, field: str, listed: bool, cid: str = "rich"
) -> None:
    before = on_disk(damaged)
    with pytest.raises(StoreError) as info:
        await store.load(cid)
    message = str(info.value)
    assert where in message, message
    assert field in message, message
    assert (await store.load("other")).id == "other"
    ids = [s.id for s in await store.list_contexts()]
    assert "other" in ids
    assert (cid in ids) is listed, ids
    with pytest.raises(StoreError):  # a second try finds it just as damaged
        await store.load(cid)
    await check_partial_reads(store, cid, where, field)
    after = on_disk(damaged)
    assert after == before


UNREAD_BY_OUTLINE = ("id 'm2'", "parent_message_id", "detached_message_ids[")
"""Damage the outline of the rich context does not read: a message off its
active branch ('alt': m1, m5, m6, which the first tail read holds whole) and
what the branches say of other messages. Everything else it reads."""


async def check_partial_reads(store: Store, cid: str, where: str, field: str) -> None:
    """The reads of a part of the context meet the damage as ``load`` does: the
    outline raises the StoreError naming the same place unless the damage lies
    in what it does not read (:data:`UNREAD_BY_OUTLINE`); a page of the active
    branch raises one naming that place, or answers when it does not read it
    (the context's row but its active branch). Never another kind of error."""
    if not isinstance(store, ContextOutlines):
        return
    assert isinstance(store, MessagePages)
    try:
        await store.outline(cid)
    except StoreError as exc:
        assert where in str(exc), exc
    else:
        assert any(part in where + field for part in UNREAD_BY_OUTLINE), (where, field)
    try:
        await store.message_page(cid, None, 0, None)
    except StoreError as exc:
        assert where in str(exc), exc


# ---------------------------------------------------------------------- the file store


def edit_json(path: Path, change: Callable[[Any], Any]) -> None:
    data = json.loads(path.read_text())
    data = change(data) or data
    path.write_text(json.dumps(data))


def set_key(*keys: str | int, value: Any) -> Callable[[Any], None]:
    def change(data: Any) -> None:
        for k in keys[:-1]:
            data = data[k]
        data[keys[-1]] = value

    return change


def drop(key: str) -> Callable[[Any], None]:
    def change(data: Any) -> None:
        del data[key]

    return change


META = "metadata.json"
M1 = "messages/m1.json"
FILE_CASES: list[tuple[str, str, Callable[[Path], None], str, bool]] = [
    # (case, file, damage, field named, listed)
    ("meta not utf-8", META, lambda p: p.write_bytes(b'{"id": "\xff\xfe"}'), "UTF-8", False),
    ("meta truncated", META, lambda p: p.write_bytes(p.read_bytes()[:40]), "JSON", False),
    ("meta a list", META, lambda p: p.write_text("[1, 2]"), "$", False),
    (
        "branches a list",
        META,
        lambda p: edit_json(p, set_key("branches", value=[])),
        "$.branches",
        True,
    ),
    (
        "message_ids not a list",
        META,
        lambda p: edit_json(p, set_key("branches", "main", "message_ids", value="m1")),
        "$.branches.main.message_ids",
        True,
    ),
    (
        "a message id of the wrong type",
        META,
        lambda p: edit_json(p, set_key("branches", "main", "message_ids", 1, value=7)),
        "$.branches.main.message_ids[1]",
        True,
    ),
    (
        "version a string",
        META,
        lambda p: edit_json(p, set_key("version", value="3")),
        "$.version",
        False,
    ),
    (
        "unknown state",
        META,
        lambda p: edit_json(p, set_key("current_state", value="Dancing")),
        "$.current_state",
        True,
    ),
    (
        "dangling active branch",
        META,
        lambda p: edit_json(p, set_key("active_branch_name", value="gone")),
        "$.active_branch_name",
        True,
    ),
    (
        "unknown parent message",
        META,
        lambda p: edit_json(p, set_key("branches", "alt", "parent_message_id", value="zz")),
        "$.branches.alt.parent_message_id",
        True,
    ),
    (
        "unknown source branch",
        META,
        lambda p: edit_json(p, set_key("branches", "alt", "forked_from", value="zz")),
        "$.branches.alt.forked_from",
        True,
    ),
    (
        "config of the wrong type",
        META,
        lambda p: edit_json(p, set_key("config", "parameters", value=[1])),
        "$.config.parameters",
        True,
    ),
    (
        "progress of the wrong type",
        META,
        lambda p: edit_json(p, set_key("progress", "iteration", value="2")),
        "$.progress.iteration",
        True,
    ),
    (
        "steps_bytes not a count",
        META,
        lambda p: edit_json(p, set_key("steps_bytes", value=-1)),
        "$.steps_bytes",
        True,
    ),
    (
        "detached ids not a list",
        META,
        lambda p: edit_json(p, set_key("detached_message_ids", value={})),
        "$.detached_message_ids",
        True,
    ),
    (
        "message id that is a path",
        META,
        lambda p: edit_json(p, set_key("detached_message_ids", value=["../../x"])),
        "$.detached_message_ids[0]",
        True,
    ),
    ("message missing", M1, lambda p: p.unlink(), "$.branches.main.message_ids[0]", True),
    ("message not utf-8", M1, lambda p: p.write_bytes(b"\x80\x81"), "UTF-8", True),
    ("message truncated", M1, lambda p: p.write_bytes(p.read_bytes()[:30]), "JSON", True),
    ("message a number", M1, lambda p: p.write_text("12"), "$", True),
    (
        "message role of the wrong type",
        M1,
        lambda p: edit_json(p, set_key("message", "role", value=5)),
        "$.message.role",
        True,
    ),
    (
        "message content not a list",
        M1,
        lambda p: edit_json(p, set_key("message", "content", value="hi")),
        "$.message.content",
        True,
    ),
    (
        "message of another id",
        M1,
        lambda p: edit_json(p, set_key("id", value="m2")),
        "$.id",
        True,
    ),
    (
        "message without a schema version",
        M1,
        lambda p: edit_json(p, drop("schema_version")),
        "$.schema_version",
        True,
    ),
]


@pytest.mark.parametrize(
    ("file", "damage", "field", "listed"),
    [c[1:] for c in FILE_CASES],
    ids=[c[0] for c in FILE_CASES],
)
async def test_a_damaged_file_is_refused_named_and_left_alone(
    tmp_path: Path, file: str, damage: Callable[[Path], None], field: str, listed: bool
) -> None:
    store = FilesStore(tmp_path)
    await two_contexts(store)
    folder = tmp_path / "contexts" / "rich"
    damage(folder / file)
    await check_refused(store, folder, str(folder / file), field, listed)
    # a commit refuses it too, and writes nothing
    with pytest.raises(StoreError):
        await Engine(store=store).send("rich", "hi")
    await check_refused(store, folder, str(folder / file), field, listed)


@pytest.mark.parametrize(
    ("damage", "field"),
    [
        (lambda raw: raw.replace(b"Idle", b"\xff\xfe\xfd\xfc"), "UTF-8"),
        (lambda raw: raw + b"{garbage\n", "line 3"),
        (lambda raw: raw.replace(b'"version": 1', b'"version": "1"', 1), "$.version"),
        (lambda raw: raw.replace(b'"trigger"', b'"trigxxx"', 1), "$.trigger"),
        (lambda raw: raw[:-5], "bytes, but metadata.json's $.steps_bytes"),
    ],
    ids=["not utf-8", "garbage line", "version a string", "field missing", "truncated"],
)
async def test_a_damaged_steps_file_is_refused_by_steps(
    tmp_path: Path, damage: Callable[[bytes], bytes], field: str
) -> None:
    async with Engine(
        llm=ScriptedLLM([{"text": "a"}]),
        store=FilesStore(tmp_path),
        clock=FakeClock(),
        ids=SequentialIds(),
    ) as engine:
        cid = await engine.create_context(context_id="c")
        await engine.send(cid, "hi")
    store = FilesStore(tmp_path)
    path = tmp_path / "contexts" / "c" / "steps.jsonl"
    good = await store.steps("c")
    raw = path.read_bytes()
    if "garbage" in field or field == "line 3":
        # a garbage line inside the committed part: make the metadata count it
        meta = tmp_path / "contexts" / "c" / "metadata.json"
        damaged = damage(raw)
        edit_json(meta, set_key("steps_bytes", value=len(damaged)))
        field = f"line {len(good) + 1}"
    else:
        damaged = damage(raw)
    path.write_bytes(damaged)
    with pytest.raises(StoreError) as info:
        await store.steps("c")
    assert str(path) in str(info.value)
    assert field in str(info.value)
    assert path.read_bytes() == damaged
    assert (await store.load("c")).current_state == "Idle"  # load does not read the steps


async def test_a_commit_refuses_steps_shorter_than_committed(tmp_path: Path) -> None:
    async with Engine(
        llm=ScriptedLLM([{"text": "a"}, {"text": "b"}]), store=FilesStore(tmp_path)
    ) as engine:
        cid = await engine.create_context(context_id="c")
        await engine.send(cid, "hi")
    path = tmp_path / "contexts" / "c" / "steps.jsonl"
    path.write_bytes(path.read_bytes()[:10])
    before = tree_digest(tmp_path / "contexts" / "c")
    async with Engine(llm=ScriptedLLM([{"text": "b"}]), store=FilesStore(tmp_path)) as engine:
        with pytest.raises(StoreError, match="steps_bytes"):
            await engine.send(cid, "again")
    assert tree_digest(tmp_path / "contexts" / "c") == before


async def test_a_damaged_journal_is_refused_and_the_context_still_listed(tmp_path: Path) -> None:
    store = FilesStore(tmp_path)
    await two_contexts(store)
    folder = tmp_path / "contexts" / "rich"
    (folder / "commit.journal").write_bytes(b'{"turnfsm_journal": 1}\nxx')
    await check_refused(store, folder, "commit.journal", "$.context", listed=True)


async def test_a_journal_that_does_not_match_the_metadata_is_not_applied(tmp_path: Path) -> None:
    """A journal is applied only over the version it was written from (or to):
    another one is damage, left alone with the metadata."""
    store = FilesStore(tmp_path)
    await two_contexts(store)
    folder = tmp_path / "contexts" / "rich"
    edit_json(folder / META, set_key("version", value=40))
    from turnfsm.storage._files_records import _journal_bytes

    journal = _journal_bytes("rich", 3, 4, [("metadata.json", b"{}")], None)
    (folder / "commit.journal").write_bytes(journal)
    await check_refused(store, folder, "commit.journal", "version 40", listed=True)


async def test_the_message_index_is_not_read_and_a_commit_replaces_it(tmp_path: Path) -> None:
    """message_index.json is written for other tools; the store never reads it,
    so damage there does not stop a load, and the next commit writes it anew."""
    store = FilesStore(tmp_path)
    async with Engine(llm=ScriptedLLM([{"text": "a"}, {"text": "b"}]), store=store) as engine:
        cid = await engine.create_context(context_id="c")
        await engine.send(cid, "hi")
        index = tmp_path / "contexts" / "c" / "message_index.json"
        index.write_bytes(b"\xff garbage")
        assert len((await store.load("c")).message_pool) == 2
        assert index.read_bytes() == b"\xff garbage"
        await engine.send(cid, "again")
    entries = json.loads(index.read_text())["messages"]
    assert [e["id"] for e in entries] == (await store.load("c")).active_branch.message_ids


async def test_a_damaged_context_can_be_deleted(tmp_path: Path) -> None:
    store = FilesStore(tmp_path)
    await two_contexts(store)
    (tmp_path / "contexts" / "rich" / META).write_bytes(b"\x00")
    await store.delete("rich")
    assert [s.id for s in await store.list_contexts()] == ["other"]
    assert not (tmp_path / "contexts" / "rich").exists()


async def test_a_folder_without_metadata_is_absent_everywhere_and_can_be_created(
    tmp_path: Path,
) -> None:
    """What an interrupted create of an older release left: no context."""
    from turnfsm.errors import ContextNotFound

    store = FilesStore(tmp_path)
    leftover = tmp_path / "contexts" / "half"
    (leftover / "messages").mkdir(parents=True)
    (leftover / "messages" / "m.json").write_text("{}")
    with pytest.raises(ContextNotFound):
        await store.load("half")
    with pytest.raises(ContextNotFound):
        await store.delete("half")
    assert await store.list_contexts() == []
    await store.create(empty_context("half"))
    assert (await store.load("half")).id == "half"
    assert not (tmp_path / "contexts" / "half" / "messages" / "m.json").exists()


async def test_stale_temporary_folders_are_ignored_and_removed(tmp_path: Path) -> None:
    store = FilesStore(tmp_path)
    await store.create(empty_context("a"))
    for name in (".creating-b-1234", ".deleted-a-5678"):
        (tmp_path / "contexts" / name / "messages").mkdir(parents=True)
        (tmp_path / "contexts" / name / "metadata.json").write_text("{}")
    assert [s.id for s in await store.list_contexts()] == ["a"]
    assert sorted(p.name for p in (tmp_path / "contexts").iterdir()) == [".lock", "a"]


# ---------------------------------------------------------------------- SQLite


def db(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


def without_not_null(path: Path) -> None:
    """Let the columns hold NULL (as a database edited by hand may)."""
    conn = sqlite3.connect(path)
    (version,) = conn.execute("PRAGMA schema_version").fetchone()
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET sql = replace(sql, 'NOT NULL', '') WHERE type = 'table'")
    conn.execute(f"PRAGMA schema_version = {version + 1}")
    conn.execute("PRAGMA writable_schema = OFF")
    conn.commit()
    conn.close()


SEQ = "(SELECT seq FROM contexts WHERE id = 'rich')"
SQL_CASES: list[tuple[str, str, str, str, bool]] = [
    # (case, statement, place named, field named, listed)
    (
        "version as text",
        "UPDATE contexts SET version = 'abc' WHERE id = 'rich'",
        "table contexts, row (context 'rich')",
        "column version",
        False,
    ),
    (
        "version NULL",
        "UPDATE contexts SET version = NULL WHERE id = 'rich'",
        "table contexts, row (context 'rich')",
        "column version",
        False,
    ),
    (
        "updated_at NULL",
        "UPDATE contexts SET updated_at = NULL WHERE id = 'rich'",
        "table contexts, row (context 'rich')",
        "column updated_at",
        False,
    ),
    (
        "created_at garbage",
        "UPDATE contexts SET created_at = 'yesterday' WHERE id = 'rich'",
        "table contexts, row (context 'rich')",
        "column created_at",
        True,
    ),
    (
        "unknown state",
        "UPDATE contexts SET state = 'Dancing' WHERE id = 'rich'",
        "table contexts, row (context 'rich')",
        "column state",
        True,
    ),
    (
        "dangling active branch",
        "UPDATE contexts SET active_branch = 'gone' WHERE id = 'rich'",
        "table contexts, row (context 'rich')",
        "column active_branch",
        True,
    ),
    (
        "config garbage JSON",
        "UPDATE contexts SET config = '{not json' WHERE id = 'rich'",
        "table contexts, row (context 'rich')",
        "column config",
        True,
    ),
    (
        "config of the wrong type",
        """UPDATE contexts SET config = '{"parameters": [1]}' WHERE id = 'rich'""",
        "table contexts, row (context 'rich'), column config",
        "$.parameters",
        True,
    ),
    (
        "progress number as text",
        """UPDATE contexts SET progress = '{"iteration": "2"}' WHERE id = 'rich'""",
        "table contexts, row (context 'rich'), column progress",
        "$.iteration",
        True,
    ),
    (
        "a message of the active branch not stored",
        f"DELETE FROM messages WHERE id = 'm6' AND ctx = {SEQ}",
        "table branch_messages, row (context 'rich', branch 'alt')",
        "$.branches.alt.message_ids[2]",
        True,
    ),
    (
        "message body garbage",
        f"UPDATE messages SET body = '{{oops' WHERE id = 'm1' AND ctx = {SEQ}",
        "table messages, row (context 'rich', id 'm1')",
        "column body",
        True,
    ),
    (
        "message body NULL",
        f"UPDATE messages SET body = NULL WHERE id = 'm1' AND ctx = {SEQ}",
        "table messages, row (context 'rich', id 'm1')",
        "column body",
        True,
    ),
    (
        "message body a blob",
        f"UPDATE messages SET body = x'80ff' WHERE id = 'm1' AND ctx = {SEQ}",
        "table messages, row (context 'rich', id 'm1')",
        "column body",
        True,
    ),
    (
        "message role of the wrong type",
        f"UPDATE messages SET body = json_set(body, '$.message.role', 5) "
        f"WHERE id = 'm1' AND ctx = {SEQ}",
        "table messages, row (context 'rich', id 'm1'), column body",
        "$.message.role",
        True,
    ),
    (
        "dangling message id",
        f"UPDATE branch_messages SET message_id = 'zz' WHERE ctx = {SEQ} AND pos = 1",
        "table branch_messages, row (context 'rich', branch",
        "message_ids[1]",
        True,
    ),
    (
        "message id NULL",
        f"UPDATE branch_messages SET message_id = NULL WHERE ctx = {SEQ} AND pos = 1",
        "table branch_messages, row (context 'rich', branch",
        "column message_id",
        True,
    ),
    (
        "branch body garbage",
        f"UPDATE branches SET body = '[' WHERE name = 'alt' AND ctx = {SEQ}",
        "table branches, row (context 'rich', name 'alt')",
        "column body",
        True,
    ),
    (
        "unknown parent message",
        f"UPDATE branches SET body = json_set(body, '$.parent_message_id', 'zz') "
        f"WHERE name = 'alt' AND ctx = {SEQ}",
        "table branches, row (context 'rich', name 'alt'), column body",
        "$.parent_message_id",
        True,
    ),
    (
        "schema version as text",
        f"UPDATE messages SET schema_version = 'one' WHERE id = 'm2' AND ctx = {SEQ}",
        "table messages, row (context 'rich', id 'm2')",
        "column schema_version",
        True,
    ),
]


@pytest.mark.parametrize(
    ("statement", "where", "field", "listed"),
    [c[1:] for c in SQL_CASES],
    ids=[c[0] for c in SQL_CASES],
)
async def test_a_damaged_row_is_refused_named_and_left_alone(
    tmp_path: Path, statement: str, where: str, field: str, listed: bool
) -> None:
    path = db(tmp_path)
    store = SQLiteStore(path)
    await two_contexts(store)
    await store.aclose()
    without_not_null(path)
    conn = sqlite3.connect(path)
    conn.execute(statement)
    conn.commit()
    dump = data_dump(conn)
    conn.close()
    store = SQLiteStore(path)
    try:
        await check_refused(store, path, f"{path}: {where}", field, listed)
        with pytest.raises(StoreError):
            await Engine(store=store).send("rich", "hi")
    finally:
        await store.aclose()
    conn = sqlite3.connect(path)
    assert data_dump(conn) == dump
    conn.close()


async def test_a_position_that_is_text_is_refused_by_the_outline_named(tmp_path: Path) -> None:
    """The outline reads a branch's length from its last position: one stored
    as text (which SQLite sorts after every number) is refused naming the
    column, not taken for a number; what is stored stays as it was."""
    path = db(tmp_path)
    store = SQLiteStore(path)
    await two_contexts(store)
    await store.aclose()
    conn = sqlite3.connect(path)
    conn.execute(
        f"UPDATE branch_messages SET pos = 'x' WHERE ctx = {SEQ} AND branch = 'alt' AND pos = 2"
    )
    conn.commit()
    dump = data_dump(conn)
    conn.close()
    store = SQLiteStore(path)
    try:
        with pytest.raises(StoreError) as info:
            await store.outline("rich")
        assert "table branch_messages, row (context 'rich', branch 'alt'), column pos" in str(
            info.value
        )
        assert (await store.outline("other")).lengths == {"main": 0}
    finally:
        await store.aclose()
    conn = sqlite3.connect(path)
    assert data_dump(conn) == dump
    conn.close()


async def test_a_damaged_steps_row_is_refused_by_steps(tmp_path: Path) -> None:
    path = db(tmp_path)
    async with Engine(
        llm=ScriptedLLM([{"text": "a"}]), store=SQLiteStore(path), clock=FakeClock()
    ) as engine:
        cid = await engine.create_context(context_id="c")
        await engine.send(cid, "hi")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE steps SET version = 'v1' WHERE rowid = (SELECT MIN(rowid) FROM steps)")
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    try:
        with pytest.raises(StoreError, match=r"table steps, row .*column version"):
            await store.steps("c")
        assert (await store.load("c")).current_state == "Idle"
    finally:
        await store.aclose()


def test_helpers_are_honest(tmp_path: Path) -> None:
    """The damage helpers do change what they claim to (so a passing case is not vacuous)."""
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"a": {"b": [1, 2]}}))
    edit_json(path, set_key("a", "b", 1, value="z"))
    assert json.loads(path.read_text()) == {"a": {"b": [1, "z"]}}


@pytest.mark.parametrize("name", ["../x.json", "steps.jsonl", ".lock", "messages/../metadata.json"])
async def test_a_journal_naming_another_file_is_refused(tmp_path: Path, name: str) -> None:
    from turnfsm.storage._files_records import _journal_bytes

    store = FilesStore(tmp_path)
    rich = await two_contexts(store)
    folder = tmp_path / "contexts" / "rich"
    journal = _journal_bytes("rich", rich.version, rich.version + 1, [(name, b"{}")], None)
    (folder / "commit.journal").write_bytes(journal)
    await check_refused(store, folder, "commit.journal", repr(name), listed=True)
