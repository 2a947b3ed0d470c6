"""``turnfsm import --format context-folder DIR``: one context folder another
program wrote, or every one of a data folder, into any store; a broken context
is reported with its file and JSON path, stores nothing, and does not stop the
others; a context already stored is skipped; DIR is never changed."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import anyio
import pytest

from turnfsm import Engine, records
from turnfsm.adapters.inbound import import_context_folder
from turnfsm.engine import Mode
from turnfsm.errors import ContextNotFound
from turnfsm.storage import open_store
from turnfsm.testing import ScriptedLLM

from .conftest import Cli

DATA = Path(__file__).parent.parent / "fixtures" / "context_folder" / "data"
IDS = sorted(p.name for p in (DATA / "contexts").iterdir())
TOOLS = "3f2b8c1e-9a4d-4e6b-8c2f-1d7e5a9b0c41"
PENDING = "b7e4c2a9-5d1f-4a3e-b8c6-0f9e8d7c6b52"


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): "dir"
        if p.is_dir()
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def data(tmp_path: Path) -> Path:
    copy = tmp_path / "data"
    shutil.copytree(DATA, copy)
    return copy


def stored_ids(url: str) -> list[str]:
    async def go() -> list[str]:
        store = open_store(url)
        try:
            return sorted(await store.list_ids())
        finally:
            await store.aclose()

    return anyio.run(go)


STORES = {
    "sqlite": lambda tmp: f"sqlite:///{tmp}/chats.db",
    "files": lambda tmp: f"files:///{tmp}/store",
}


@pytest.mark.parametrize("kind", sorted(STORES))
def test_a_whole_data_folder_goes_into_the_store_as_read(
    cli: Cli, data: Path, tmp_path: Path, kind: str
) -> None:
    url = STORES[kind](tmp_path)
    before = tree_digest(data)
    ran = cli("import", "--format", "context-folder", str(data), "--store", url)
    assert (ran.code, ran.err) == (0, ""), ran.err
    lines = ran.out.splitlines()
    assert lines[-1].startswith(f"4 imported, 0 skipped, 0 failed: {data} into {kind}:")
    assert [line.split(": ")[:2] for line in lines[:-1]] == [[c, f"imported {c}"] for c in IDS]
    assert lines[IDS.index(TOOLS)] == (
        f"{TOOLS}: imported {TOOLS}: context-folder: 6 messages, 2 tool calls, 2 branches; "
        "not read: system_prompt.json"
    )
    assert stored_ids(url) == IDS
    assert tree_digest(data) == before

    async def check() -> None:
        store = open_store(url)
        try:
            for cid in IDS:
                got = records.to_python(await store.load(cid))
                want = records.to_python(import_context_folder(data / "contexts" / cid))
                for key in ("created_at", "updated_at", "message_pool", "branches", "config"):
                    assert got[key] == want[key], (cid, key)
        finally:
            await store.aclose()

    anyio.run(check)


def test_an_imported_context_takes_its_next_turn(cli: Cli, tmp_path: Path) -> None:
    url = STORES["sqlite"](tmp_path)
    ran = cli("import", str(DATA / "contexts" / TOOLS), "--store", url)  # a folder: detected
    assert ran.code == 0, ran.err
    assert ran.out.startswith(f"{TOOLS}: imported {TOOLS}: context-folder: 6 messages")

    async def go() -> None:
        llm = ScriptedLLM([{"text": "Still 15 °C in London."}])
        async with Engine(llm=llm, store=open_store(url), modes=[Mode("code")]) as engine:
            turn = await engine.send(TOOLS, "And now?")
            assert turn.state.value == "Idle"
            ctx = await engine.get_context(TOOLS)
            assert [n.id for n in ctx.history()][:5] == json.loads(
                (DATA / "contexts" / TOOLS / "metadata.json").read_text()
            )["branches"]["main"]["message_ids"]
            assert ctx.history()[-1].message.text == "Still 15 °C in London."

    anyio.run(go)


def test_a_broken_context_is_reported_stores_nothing_and_the_others_go_in(
    cli: Cli, data: Path, tmp_path: Path
) -> None:
    bad = data / "contexts" / PENDING / "messages" / "c0ffee00-1111-4222-8333-444455556662.json"
    bad.write_text('{"id": "c0ffee00-1111-4222-8333-444455556662", "message": {"role": 3}}')
    url = STORES["sqlite"](tmp_path)
    before = tree_digest(data)
    ran = cli("import", "--format", "context-folder", str(data), "--store", url)
    assert ran.code == 2
    assert ran.err == (
        f"turnfsm import: {data / 'contexts' / PENDING}: not imported: "
        f"{bad}: $.message.role: must be a string, not a number\n"
    )
    assert ran.out.splitlines()[-1].startswith(f"3 imported, 0 skipped, 1 failed: {data} into")
    assert PENDING not in ran.out
    assert stored_ids(url) == [cid for cid in IDS if cid != PENDING]
    assert tree_digest(data) == before


def test_one_broken_context_folder_stores_nothing(cli: Cli, data: Path, tmp_path: Path) -> None:
    folder = data / "contexts" / "uuid"
    index = folder / "message_index.json"
    index.write_text(index.read_text().replace('"msg-2"', '"msg-3"'))
    url = STORES["files"](tmp_path)
    before = tree_digest(data)
    ran = cli("import", "--format", "context-folder", str(folder), "--store", url)
    assert ran.code == 2
    assert ran.out.startswith(f"0 imported, 0 skipped, 1 failed: {folder} into files:")
    assert ran.err == (
        f"turnfsm import: {folder}: not imported: {index}: $.messages[1].id: "
        "no message 'msg-3': there is no file messages/msg-3.json\n"
    )
    assert stored_ids(url) == []
    assert tree_digest(data) == before

    async def absent() -> None:
        store = open_store(url)
        with pytest.raises(ContextNotFound):
            await store.load("uuid")

    anyio.run(absent)


def test_a_context_the_store_already_holds_is_skipped_and_the_others_go_in(
    cli: Cli, tmp_path: Path
) -> None:
    url = STORES["sqlite"](tmp_path)
    assert cli("import", str(DATA / "contexts" / "uuid"), "--store", url).code == 0
    ran = cli("import", str(DATA / "contexts"), "--store", url)
    assert (ran.code, ran.err) == (0, "")
    assert "uuid: skipped: context uuid is already stored\n" in ran.out
    last = ran.out.splitlines()[-1]
    assert last.startswith(f"3 imported, 1 skipped, 0 failed: {DATA / 'contexts'}")
    assert stored_ids(url) == IDS
    again = cli("import", str(DATA), "--store", url)  # a second import adds nothing
    assert again.code == 0 and again.out.splitlines()[-1].startswith("0 imported, 4 skipped")


def test_json_prints_the_context_of_one_context_folder(cli: Cli) -> None:
    one = cli("import", str(DATA / "contexts" / "uuid"), "--json")
    assert one.code == 0, one.err
    assert json.loads(one.out)["id"] == "uuid"
    assert one.err.startswith("uuid: uuid: context-folder: 2 messages")  # the lines
    many = cli("import", str(DATA), "--json")
    assert (many.code, many.out) == (2, "")
    assert "--json prints one context" in many.err


def test_a_folder_given_another_format_names_the_folder_format(cli: Cli) -> None:
    ran = cli("import", "--format", "openai", str(DATA))
    assert (ran.code, ran.out) == (2, "")
    assert f"{DATA}: a folder;" in ran.err and "--format context-folder" in ran.err


def test_a_folder_of_session_files_is_still_read_as_sessions(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "one.json").write_text("[]")
    ran = cli("import", str(tmp_path))
    assert "context-folder" not in ran.out + ran.err
    assert "one.json" in ran.err


def test_a_folder_of_no_context_exits_2(cli: Cli, tmp_path: Path) -> None:
    ran = cli("import", "--format", "context-folder", str(tmp_path))
    assert ran.code == 2
    assert f"{tmp_path / 'metadata.json'}: $: missing" in ran.err


def test_a_folder_of_sessions_and_of_contexts_are_imported_by_one_loop() -> None:
    # the two folder formats differ in how they read and name an entry, not in
    # how they are stored, skipped and counted
    import turnfsm.cli._import_context_folder as contexts
    import turnfsm.cli._import_folder as sessions

    assert "store.create(" not in Path(contexts.__file__).read_text()
    assert Path(sessions.__file__).read_text().count("store.create(") == 1
    assert contexts.import_entries is sessions.import_entries
