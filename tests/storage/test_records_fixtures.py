"""Stored data does not move: the fixtures of ``tests/fixtures/records`` (written
by ``make.py`` with the release whose records were pydantic models) are read by
today's records, and written back byte for byte.

For each store: the stored contexts load and equal the ones ``make.py``
builds; the same build, created and committed in a fresh store, writes the
same rows (files) as the fixture; and a loaded context written again gives
the same message, branch, config and progress rows. The exports, the
whole-context JSON document, two events and the server's OpenAPI document
(component names aside) are compared too.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from fixtures.records import make

from turnfsm import records
from turnfsm.model import ChatContext, InternalMessage, MessageNode, TokenUsage
from turnfsm.storage import FilesStore, SQLiteStore

FIXTURES = make.HERE
IDS = ("ctx-parent", "ctx-child")


def _expected() -> dict[str, ChatContext]:
    """The two contexts as the fixture's stores hold them: created, then the
    parent's commit applied (built by hand, not by a store)."""
    parent = make.parent_created()
    commit = make.parent_commit()
    pool = dict(parent.message_pool)
    branches = dict(parent.branches)
    for b in commit.branches:
        branches[b.name] = dataclasses.replace(b, message_ids=list(b.message_ids))
    for name, node in commit.appended:  # appended after the ids the branch came with
        pool[node.id] = node
        branches[name].message_ids.append(node.id)
    for node in commit.replaced:
        pool[node.id] = node
    assert commit.config is not None and commit.active_branch is not None
    parent = dataclasses.replace(
        parent,
        message_pool=pool,
        branches=branches,
        version=commit.version,
        current_state=commit.state,
        updated_at=commit.updated_at,
        event_seq=commit.event_seq,
        progress=commit.progress,
        config=commit.config,
        active_branch_name=commit.active_branch,
    )
    return {"ctx-parent": parent, "ctx-child": make.child_created()}


def _same_pool_order(ctx: ChatContext, want: ChatContext) -> ChatContext:
    # stores give the pool in their own order; compare it as a mapping
    assert ctx.message_pool == want.message_pool
    return dataclasses.replace(ctx, message_pool=want.message_pool)


def _check_records(loaded: dict[str, ChatContext]) -> None:
    want = _expected()
    for cid in IDS:
        ctx = loaded[cid]
        assert type(ctx) is ChatContext
        assert _same_pool_order(ctx, want[cid]) == want[cid]
    parent = loaded["ctx-parent"]
    m2 = parent.message_pool["m2"].message
    assert type(parent.message_pool["m2"]) is MessageNode and type(m2) is InternalMessage
    assert m2.tool_calls is not None
    first, second, third = m2.tool_calls
    assert (first.approval_status, first.decided_by, first.provider_id) == (
        "Approved",
        "human",
        "call_0",
    )
    assert (second.provider_id, second.arguments_error) == (
        "",
        "the arguments are not a JSON object",
    )
    assert third.provider_id is None and third.outcome_unknown
    usage = m2.metadata.usage
    assert type(usage) is TokenUsage and usage.total_tokens == 153
    assert usage.extras == {
        "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
        "reasoning_tokens": 7,
        "provider": "acme",
    }
    assert m2.reasoning is not None and m2.reasoning[1].encrypted_content == "gAAAA-opaque"
    refused = parent.message_pool["m6"].message
    assert (refused.refusal, refused.outcome) == ("I can't help with that.", "refusal")
    assert [type(p).__name__ for p in parent.message_pool["m1"].message.content] == [
        "TextPart",
        "ImagePart",
        "ImagePart",
        "FilePart",
        "FilePart",
    ]
    assert parent.progress.started_call_ids == ("call_0-2", "call_3")
    assert parent.branches["alt"].system_prompt is not None
    child = loaded["ctx-child"]
    assert child.config.archived and child.config.subtask_call == "call_3"


# ---------------------------------------------------------------------- SQLite


def _load_all(store: Any) -> dict[str, ChatContext]:
    async def run() -> dict[str, ChatContext]:
        try:
            return {cid: await store.load(cid) for cid in IDS}
        finally:
            await store.aclose()

    return anyio.run(run)


def _recreate(store: Any, contexts: dict[str, ChatContext]) -> None:
    async def run() -> None:
        try:
            for ctx in contexts.values():
                await store.create(ctx)
        finally:
            await store.aclose()

    anyio.run(run)


def _fixture_json(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


ROW_BODIES = {"contexts": (10, 11), "branches": (3,), "messages": (3,)}
"""The JSON columns of each table (config, progress; body; body)."""


def _bodies(rows: dict[str, list[list[Any]]]) -> dict[str, list[tuple[Any, ...]]]:
    """The JSON columns of the rows, with the row's id (contexts: id; others: name/id)."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for table, columns in ROW_BODIES.items():
        key = 1
        out[table] = sorted(tuple([row[key], *(row[c] for c in columns)]) for row in rows[table])
    return out


def test_sqlite_fixture_loads_into_the_same_records(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    shutil.copy(FIXTURES / "store.sqlite", path)
    _check_records(_load_all(SQLiteStore(path)))


def test_sqlite_rows_are_written_byte_for_byte(tmp_path: Path) -> None:
    want = _fixture_json("sqlite_rows.json")
    assert make.sqlite_rows(FIXTURES / "store.sqlite") == want
    fresh = tmp_path / "fresh.sqlite"
    make.write_sqlite(fresh)  # the same creates and commit, with today's records
    assert make.sqlite_rows(fresh) == want
    # a loaded context, written again: the same JSON in every row
    copy = tmp_path / "copy.sqlite"
    shutil.copy(FIXTURES / "store.sqlite", copy)
    loaded = _load_all(SQLiteStore(copy))
    again = tmp_path / "again.sqlite"
    _recreate(SQLiteStore(again), loaded)
    assert _bodies(make.sqlite_rows(again)) == _bodies(want)


# ---------------------------------------------------------------------- files


def test_files_fixture_loads_into_the_same_records(tmp_path: Path) -> None:
    root = tmp_path / "files"
    shutil.copytree(FIXTURES / "files", root)
    _check_records(_load_all(FilesStore(root, fsync=False)))


def test_files_are_written_byte_for_byte(tmp_path: Path) -> None:
    want = make.files_tree(FIXTURES / "files")
    assert any(name.endswith("messages/m2.json") for name in want)
    fresh = tmp_path / "fresh"
    make.write_files(fresh)
    assert make.files_tree(fresh) == want
    # a loaded context, written again: the same message and metadata files
    root = tmp_path / "copy"
    shutil.copytree(FIXTURES / "files", root)
    loaded = _load_all(FilesStore(root, fsync=False))
    again = tmp_path / "again"
    _recreate(FilesStore(again, fsync=False), loaded)
    written = make.files_tree(again)
    messages = {k: v for k, v in want.items() if "/messages/" in k}
    assert {k: written[k] for k in messages} == messages
    assert written["contexts/ctx-child/metadata.json"] == want["contexts/ctx-child/metadata.json"]


# ---------------------------------------------------------------------- PostgreSQL


def test_postgres_rows_are_written_byte_for_byte(pg_url: str) -> None:
    pytest.importorskip("psycopg")
    from turnfsm.storage import PostgresStore

    anyio.run(make._postgres, pg_url)
    want = _fixture_json("postgres_rows.json")
    assert make.postgres_rows(pg_url) == want
    loaded = _load_all(PostgresStore(pg_url))
    _check_records(loaded)


# ---------------------------------------------------------------------- exports


def test_exports_documents_and_events_are_unchanged(tmp_path: Path) -> None:
    want = _fixture_json("exports.json")
    loaded = _load_all(SQLiteStore(_copy_sqlite(tmp_path)))
    contexts = [loaded[cid] for cid in IDS]
    documents = {ctx.id: records.to_json(ctx).decode() for ctx in contexts}
    assert documents == want["documents"]
    got = json.loads(make.dumps({"documents": documents, **make.exports(contexts)}))
    assert got == want
    # the whole-context document reads back into the same context
    for ctx in contexts:
        back = records.from_json(ChatContext, want["documents"][ctx.id], strict=True)
        assert back == ctx


def _copy_sqlite(folder: Path) -> Path:
    shutil.copy(FIXTURES / "store.sqlite", folder / "store.sqlite")
    return folder / "store.sqlite"


# ---------------------------------------------------------------------- OpenAPI


def _normalised(doc: Any) -> Any:
    """``doc`` with component names replaced by their position among names
    sorted by shape (a renamed component compares equal; a changed shape does not)."""
    schemas = doc.get("components", {}).get("schemas", {})
    names = {
        name: f"#/components/schemas/<{json.dumps(_strip_refs(s), sort_keys=True)}>"
        for name, s in schemas.items()
    }

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if k == "$ref" and isinstance(v, str) and v.startswith("#/components/schemas/"):
                    out[k] = names[v.rsplit("/", 1)[1]]
                elif k == "title" and isinstance(v, str) and v in schemas:
                    out[k] = "<component title>"
                else:
                    out[k] = walk(v)
            return out
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    out = walk({k: v for k, v in doc.items() if k != "components"})
    out["components"] = sorted(json.dumps(walk(s), sort_keys=True) for s in schemas.values())
    return out


def _strip_refs(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: ("<ref>" if k == "$ref" else _strip_refs(v))
            for k, v in value.items()
            if k != "title"
        }
    if isinstance(value, list):
        return [_strip_refs(v) for v in value]
    return value


def _inlined(schemas: dict[str, Any], value: Any, seen: tuple[str, ...] = ()) -> Any:
    """``value`` with every component ``$ref`` replaced by the component itself
    and the titles that are component names dropped (a renamed component
    compares equal); a component met again inside itself stays a marker."""
    if isinstance(value, dict):
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            name = ref.rsplit("/", 1)[1]
            if name in seen:
                return {"$ref": f"<cycle {len(seen) - seen.index(name)}>"}
            return _inlined(schemas, schemas[name], (*seen, name))
        return {
            k: _inlined(schemas, v, seen)
            for k, v in value.items()
            if not (k == "title" and isinstance(v, str) and v in schemas)
        }
    if isinstance(value, list):
        return [_inlined(schemas, v, seen) for v in value]
    return value


def _extends(new: Any, old: Any, where: str, grows: bool = False) -> None:
    """``new`` is ``old`` with only additions a client of ``old`` cannot see:
    more properties in an object (``required`` stays the same list, so they
    are optional in a request), more paths, more methods on a path, and
    parameters on a route that had none when none of them is required.
    Everything else is equal."""
    if isinstance(old, dict):
        assert isinstance(new, dict), where
        if not grows:
            added = set(new) - set(old)
            if where.startswith("/paths/") and added == {"parameters"} and "responses" in old:
                assert all(p.get("required") is False for p in new["parameters"]), where
                added = set()
            assert not added and set(old) <= set(new), (where, sorted(set(new) ^ set(old)))
        for k, v in old.items():
            assert k in new, f"{where}/{k} is gone"
            path_item = where == "/paths"
            _extends(new[k], v, f"{where}/{k}", k in ("properties", "paths") or path_item)
    elif isinstance(old, list):
        assert isinstance(new, list) and len(new) == len(old), where
        for i, (a, b) in enumerate(zip(new, old, strict=True)):
            _extends(a, b, f"{where}[{i}]")
    else:
        assert new == old, (where, new, old)


def test_the_openapi_document_has_the_same_shapes() -> None:
    """Every route of the fixture is served with the same shapes; new routes,
    and new optional fields of a body, extend it."""
    pytest.importorskip("fastapi")
    want = _fixture_json("openapi.json")
    got = json.loads(make.dumps(make.openapi()))
    old = {k: v for k, v in want.items() if k != "components"}
    new = {k: v for k, v in got.items() if k != "components"}
    _extends(
        _inlined(got["components"]["schemas"], new),
        _inlined(want["components"]["schemas"], old),
        "",
    )
    # the record components are still there, under their own names
    for name in ("MessageNode", "InternalMessage", "TokenUsage", "ToolCallRequest"):
        assert got["components"]["schemas"][name] == want["components"]["schemas"][name]
