"""Schema versions of stored records (issue 4, item 6): the upcaster chains, the
refusal of newer versions, and the fixture records of each version.

``fixtures/`` keeps, for every schema version, a whole context document
(``context_v{N}.json``) and a SQLite store (``sqlite_v{N}.sql``, an SQL dump);
each must still load, through the upcasters, into what this release builds.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from turnfsm import records
from turnfsm.errors import SchemaVersionError, StoreError
from turnfsm.model import SCHEMA_VERSION, Branch, ChatConfig, MessageNode, Role, TurnProgress
from turnfsm.storage import SQLiteStore, _schema
from turnfsm.storage._schema import (
    BRANCH_UPCASTERS,
    CONTEXT_UPCASTERS,
    MESSAGE_UPCASTERS,
    UpcasterChain,
    check_version,
    context_from_document,
    message_from_record,
    upcast_branch,
    upcast_context,
    upcast_message,
)

from .contract import T0, msg, rich_context

FIXTURES = Path(__file__).resolve().parent / "fixtures"


# --------------------------------------------------------------------------- check_version


def test_current_and_older_versions_pass() -> None:
    assert check_version(SCHEMA_VERSION, where="x") == SCHEMA_VERSION
    assert check_version(2, where="x", current=3) == 2


def test_a_newer_version_is_refused_naming_where() -> None:
    with pytest.raises(SchemaVersionError) as info:
        check_version(SCHEMA_VERSION + 1, where="/data/ctx.json")
    err = info.value
    assert (err.where, err.found, err.supported) == (
        "/data/ctx.json",
        SCHEMA_VERSION + 1,
        SCHEMA_VERSION,
    )
    assert "/data/ctx.json" in str(err) and "upgrade turnfsm" in str(err)


@pytest.mark.parametrize("bad", [0, -1, None, "1", 1.0, True])
def test_a_version_that_is_not_a_positive_int_is_a_store_error(bad: object) -> None:
    with pytest.raises(StoreError) as info:
        check_version(bad, where="here")
    assert not isinstance(info.value, SchemaVersionError)
    assert str(info.value).startswith("here: ")


# --------------------------------------------------------------------------- chains


def chain_to_3() -> UpcasterChain:
    chain = UpcasterChain("test", current=3)

    @chain.register(1)
    def rename(data: dict[str, Any]) -> dict[str, Any]:
        data["name"] = data.pop("title")
        data.setdefault("log", []).append("1->2")
        return data

    @chain.register(2)
    def add(data: dict[str, Any]) -> dict[str, Any]:
        data["tags"] = []
        data["log"].append("2->3")
        return data

    return chain


def test_the_chain_runs_every_step_in_order() -> None:
    chain = chain_to_3()
    assert chain.upcast({"title": "t"}, 1, where="w") == {
        "name": "t",
        "log": ["1->2", "2->3"],
        "tags": [],
    }
    assert chain.upcast({"name": "t", "log": []}, 2, where="w") == {
        "name": "t",
        "log": ["2->3"],
        "tags": [],
    }
    current = {"name": "t", "tags": ["a"]}
    assert chain.upcast(dict(current), 3, where="w") == current


def test_the_chain_refuses_newer_and_missing_steps() -> None:
    chain = chain_to_3()
    with pytest.raises(SchemaVersionError) as info:
        chain.upcast({}, 4, where="rec")
    assert (info.value.found, info.value.supported) == (4, 3)
    gap = UpcasterChain("gappy", current=3)
    gap.register(2)(lambda d: d)
    with pytest.raises(StoreError, match=r"rec: no upgrade of gappy records from schema version 1"):
        gap.upcast({}, 1, where="rec")


def test_a_failing_upcaster_is_a_store_error() -> None:
    chain = UpcasterChain("test", current=2)

    @chain.register(1)
    def broken(data: dict[str, Any]) -> dict[str, Any]:
        return {"x": data["missing"]}

    with pytest.raises(StoreError, match=r"rec: upgrading the test record from schema version 1"):
        chain.upcast({}, 1, where="rec")


def test_register_checks_its_version() -> None:
    chain = UpcasterChain("test", current=3)
    for bad in (0, 3, 4):
        with pytest.raises(ValueError, match="upcaster reads a version"):
            chain.register(bad)
    chain.register(1)(lambda d: d)
    with pytest.raises(ValueError, match="exists"):
        chain.register(1)(lambda d: d)


def test_the_real_chains_are_complete() -> None:
    """Every version below the current one has a step in every chain (today:
    version 1 only, so the chains are empty), and a fixture of every version."""
    for chain in (CONTEXT_UPCASTERS, BRANCH_UPCASTERS, MESSAGE_UPCASTERS):
        assert chain.current == SCHEMA_VERSION
        assert sorted(chain._steps) == list(range(1, SCHEMA_VERSION)), chain.kind
    for v in range(1, SCHEMA_VERSION + 1):
        assert (FIXTURES / f"context_v{v}.json").is_file(), v
        assert (FIXTURES / f"sqlite_v{v}.sql").is_file(), v


def test_the_public_functions_at_the_current_version() -> None:
    data = {"a": 1}
    assert upcast_context(dict(data), SCHEMA_VERSION) == data
    assert upcast_branch(dict(data), SCHEMA_VERSION) == data
    assert upcast_message(dict(data), SCHEMA_VERSION) == data
    for fn in (upcast_context, upcast_branch, upcast_message):
        with pytest.raises(SchemaVersionError, match="somewhere"):
            fn({}, SCHEMA_VERSION + 1, where="somewhere")


# --------------------------------------------------------------------------- records


def test_message_from_record() -> None:
    node = msg("m", Role.USER, "hi")
    assert message_from_record(records.to_json(node).decode(), SCHEMA_VERSION, where="w") == node
    with pytest.raises(SchemaVersionError, match="msg-file"):
        message_from_record("not even json", SCHEMA_VERSION + 1, where="msg-file")
    with pytest.raises(StoreError, match="msg-file: not a valid message record"):
        message_from_record('{"id": 3}', SCHEMA_VERSION, where="msg-file")


def test_message_from_an_older_record_goes_through_the_upcaster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chain = UpcasterChain("message", current=2)

    @chain.register(1)
    def text_to_parts(data: dict[str, Any]) -> dict[str, Any]:
        text = data["message"].pop("text")
        data["message"]["content"] = [{"type": "text", "text": text}]
        return data

    monkeypatch.setattr(_schema, "MESSAGE_UPCASTERS", chain)
    monkeypatch.setattr(_schema, "SCHEMA_VERSION", 2)
    old = {
        "id": "m",
        "message": {"role": "user", "text": "hello", "metadata": {"created_at": T0.isoformat()}},
    }
    node = message_from_record(json.dumps(old), 1, where="w")
    assert isinstance(node, MessageNode)
    assert node.message.text == "hello"


def test_the_version_1_context_document_loads() -> None:
    path = FIXTURES / "context_v1.json"
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1
    ctx = context_from_document(path.read_text(), where=str(path))
    assert ctx == rich_context("fixture-v1")
    # a few fields spelled out, so that the fixture does not drift with the code
    assert ctx.branches["alt"].message_ids == ["m1", "m5", "m6"]
    assert ctx.progress.started_call_ids == ("call-a",)
    (a, b, c) = ctx.message_pool["m2"].message.tool_calls or ()
    assert (a.approval_status, b.reason, c.raw_arguments) == ("Approved", "never", "{not json")


def test_a_version_1_context_document_through_a_pretend_version_2(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole path: the document's branches, messages and the context record
    each go through their own chain."""
    seen: list[str] = []

    def chain(kind: str) -> UpcasterChain:
        c = UpcasterChain(kind, current=2)

        @c.register(1)
        def step(data: dict[str, Any]) -> dict[str, Any]:
            seen.append(kind)
            if kind == "context":
                data["config"]["parameters"]["v2"] = True
            return data

        return c

    monkeypatch.setattr(_schema, "CONTEXT_UPCASTERS", chain("context"))
    monkeypatch.setattr(_schema, "BRANCH_UPCASTERS", chain("branch"))
    monkeypatch.setattr(_schema, "MESSAGE_UPCASTERS", chain("message"))
    monkeypatch.setattr(_schema, "SCHEMA_VERSION", 2)
    ctx = context_from_document((FIXTURES / "context_v1.json").read_text(), where="doc")
    assert ctx.config.parameters["v2"] is True
    assert sorted(seen) == ["branch"] * 2 + ["context"] + ["message"] * 7
    assert ctx.schema_version == 2


def test_a_newer_context_document_is_refused() -> None:
    data = json.loads((FIXTURES / "context_v1.json").read_text())
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(SchemaVersionError, match="ctx-doc"):
        context_from_document(json.dumps(data), where="ctx-doc")
    del data["schema_version"]
    with pytest.raises(StoreError, match="no valid schema version"):
        context_from_document(data, where="ctx-doc")
    with pytest.raises(StoreError, match="ctx-doc: not valid JSON"):
        context_from_document("{", where="ctx-doc")


@pytest.mark.anyio
async def test_the_version_1_sqlite_store_loads(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    conn.executescript((FIXTURES / "sqlite_v1.sql").read_text())
    conn.close()
    store = SQLiteStore(path)
    try:
        assert await store.list_ids() == ["fixture-v1"]
        ctx = await store.load("fixture-v1")
        expected = rich_context("fixture-v1")
        assert ctx.version == 9
        assert ctx.current_state == "Idle"
        assert ctx.active_branch_name == "third"
        assert ctx.config == ChatConfig(model_id="fixture-model")
        assert ctx.event_seq == 99
        assert ctx.progress == TurnProgress()
        assert ctx.updated_at == T0 + timedelta(seconds=9)
        assert ctx.branches["third"] == Branch(
            name="third", message_ids=["m1", "m7"], parent_message_id="m1", forked_from="main"
        )
        assert ctx.branches["main"].message_ids == ["m1", "m2", "m3", "m4", "m8"]
        assert ctx.branches["alt"] == expected.branches["alt"]
        assert ctx.message_pool["m4"].message.text == "replaced result"
        for mid in ("m1", "m2", "m3", "m5", "m6", "orphan"):
            assert ctx.message_pool[mid] == expected.message_pool[mid], mid
        steps = await store.steps("fixture-v1")
        assert [(s.version, s.trigger) for s in steps] == [
            (8, "approvals_resolved"),
            (9, "tools_done"),
            (9, "text_answer"),
        ]
        assert await store.integrity_check() == []
    finally:
        await store.aclose()
