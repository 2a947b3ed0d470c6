"""A files store pointed at context folders another program wrote (the same
layout, without turnfsm's schema version) refuses them, writes nothing into
them, not even a lock file, and names the command that imports them; that
command, run as the error gives it, imports them."""

from __future__ import annotations

import hashlib
import shlex
import shutil
from pathlib import Path

import anyio
import pytest

from turnfsm.cli import main
from turnfsm.errors import ContextNotFound, StoreError
from turnfsm.storage import FilesStore, open_store
from turnfsm.storage._files_foreign import ForeignContextFolder

from .contract import empty_context

pytestmark = pytest.mark.anyio

DATA = Path(__file__).parent.parent / "fixtures" / "context_folder" / "data"
IDS = sorted(p.name for p in (DATA / "contexts").iterdir())
EMPTY = "e1d2c3b4-a596-4877-8899-aabbccddeeff"
"""The fixture's context of metadata.json alone."""


def tree_digest(root: Path) -> dict[str, str]:
    """Every file and folder under ``root``, dot-names (a ``.lock``) too."""
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


@pytest.mark.parametrize("where", ["data", "contexts", "one context"])
@pytest.mark.parametrize("how", ["FilesStore", "open_store"])
async def test_opening_a_store_on_their_folder_is_refused_and_writes_nothing(
    data: Path, where: str, how: str
) -> None:
    root = {"data": data, "contexts": data / "contexts", "one context": data / "contexts" / EMPTY}[
        where
    ]
    before = tree_digest(data)
    with pytest.raises(ForeignContextFolder) as info:
        FilesStore(root) if how == "FilesStore" else open_store(f"files:///{root}")
    err = info.value
    assert isinstance(err, StoreError)
    assert err.folder == root
    assert (
        err.command
        == f"turnfsm import --format context-folder {shlex.quote(str(root))} --store URL"
    )
    assert err.command in str(err) and "$.schema_version: missing" in str(err)
    assert err.file.name == "metadata.json" and err.file.is_relative_to(data)
    assert tree_digest(data) == before


def test_the_command_the_error_names_imports_their_folder(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command, run as the command line's entry in this process."""
    before = tree_digest(data)
    with pytest.raises(ForeignContextFolder) as info:
        FilesStore(data)
    url = f"sqlite:///{tmp_path}/chats.db"
    argv = shlex.split(info.value.command.replace("URL", url))
    assert argv[:2] == ["turnfsm", "import"]
    capsys.readouterr()
    code = main(argv[1:])
    ran = capsys.readouterr()
    assert code == 0, ran.err
    assert f"{len(IDS)} imported, 0 skipped, 0 failed: {data} into sqlite:" in ran.out
    assert tree_digest(data) == before

    async def stored() -> list[str]:
        store = open_store(url)
        try:
            return sorted(await store.list_ids())
        finally:
            await store.aclose()

    assert anyio.run(stored) == IDS


async def test_their_context_beside_the_stores_own_is_refused_when_read(
    data: Path, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    store = FilesStore(root)
    await store.create(empty_context("ours"))
    theirs = root / "contexts" / EMPTY
    shutil.copytree(data / "contexts" / EMPTY, theirs)
    before = tree_digest(theirs)
    for call in (
        store.load(EMPTY),
        store.outline(EMPTY),
        store.message_page(EMPTY, None, 0, None),
        store.steps(EMPTY),
        store.acquire_lease(EMPTY, "me", 30, now=0.0),
        store.delete(EMPTY),
    ):
        with pytest.raises(ForeignContextFolder) as info:
            await call
        assert info.value.folder == theirs
    assert tree_digest(theirs) == before  # no .lock, nothing deleted
    assert [s.id for s in await store.list_contexts()] == ["ours"]
    assert (await store.load("ours")).id == "ours"
    with pytest.raises(StoreError, match="already exists"):
        await store.create(empty_context(EMPTY))
    assert tree_digest(theirs) == before


async def test_their_folder_with_a_lock_already_in_it_is_still_refused(data: Path) -> None:
    """An earlier release wrote ``.lock`` files into such a folder and then read
    its metadata.json as its own: a context of no messages loaded, and a commit
    would have written it again in turnfsm's form."""
    (data / "contexts" / ".lock").touch()
    (data / "contexts" / EMPTY / ".lock").touch()
    before = tree_digest(data)
    store = FilesStore(data)
    with pytest.raises(ForeignContextFolder) as info:
        await store.load(EMPTY)
    assert info.value.file == data / "contexts" / EMPTY / "metadata.json"
    with pytest.raises(ForeignContextFolder):
        await store.outline(EMPTY)
    with pytest.raises(ContextNotFound):
        await store.load("no-such-context")
    assert tree_digest(data) == before


@pytest.mark.parametrize("where", ["data", "contexts", "one context"])
def test_a_read_only_open_names_the_import_command_too(data: Path, where: str) -> None:
    root = {"data": data, "contexts": data / "contexts", "one context": data / "contexts" / EMPTY}[
        where
    ]
    before = tree_digest(data)
    with pytest.raises(ForeignContextFolder) as info:
        open_store(f"files:///{root}", create=False)
    assert info.value.folder == root
    assert tree_digest(data) == before
