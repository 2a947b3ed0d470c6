"""Store URLs: ``open_store`` (issue 4, item 9)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any, cast

import pytest

import turnfsm.storage
from turnfsm.errors import InvalidInput, StoreError
from turnfsm.storage import MemoryStore, SQLiteStore, Store, open_store

pytestmark = pytest.mark.anyio


async def test_memory() -> None:
    store = open_store("memory://")
    assert isinstance(store, MemoryStore)
    assert open_store("memory://") is not store
    with pytest.raises(InvalidInput, match="memory://x"):
        open_store("memory://x")


async def test_sqlite_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:///data/chats.db")
    try:
        assert isinstance(store, SQLiteStore)
        assert store.path == Path("data/chats.db")
        assert store.synchronous == "FULL"
        assert (tmp_path / "data" / "chats.db").is_file()
    finally:
        await store.aclose()


async def test_sqlite_absolute_path_and_options(tmp_path: Path) -> None:
    path = tmp_path / "with space" / "c.db"
    assert path.is_absolute()
    url = f"sqlite:///{str(path).replace(' ', '%20')}?synchronous=NORMAL&busy_timeout=2.5"
    assert url.startswith("sqlite:////")
    store = open_store(url)
    try:
        assert isinstance(store, SQLiteStore)
        assert store.path == path
        assert store.synchronous == "NORMAL"
        assert store.busy_timeout == 2.5
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("sqlite:///x.db?fast=1", "unknown sqlite option"),
        ("sqlite:///x.db?synchronous=MAYBE", "synchronous"),
        ("sqlite:///x.db?busy_timeout=soon", "busy_timeout"),
        ("sqlite:///x.db?synchronous=FULL&synchronous=OFF", "twice"),
        ("sqlite://host/x.db", "no host"),
        ("sqlite:///", "no path"),
        ("sqlite:///x.db#frag", "fragment"),
    ],
)
def test_bad_sqlite_urls(
    url: str, match: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInput, match=match):
        open_store(url)
    assert list(tmp_path.iterdir()) == []  # nothing was created


async def test_files_without_the_files_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "turnfsm.storage._files", None)
    with pytest.raises(StoreError, match=r"files:// store is not available"):
        open_store("files:///somewhere")


async def test_files_passes_path_and_options(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str, dict[str, Any]]] = []

    class FakeFilesStore(MemoryStore):
        def __init__(self, path: str, **options: Any) -> None:
            super().__init__()
            made.append((path, options))

    fake = types.ModuleType("turnfsm.storage._files")
    fake.FilesStore = FakeFilesStore  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "turnfsm.storage._files", fake)
    store = open_store("files:///rel/dir")
    assert isinstance(store, FakeFilesStore)
    open_store("files:////abs/dir?fsync=0")
    open_store("files:///d?fsync=TRUE")
    assert made == [("rel/dir", {}), ("/abs/dir", {"fsync": False}), ("d", {"fsync": True})]
    with pytest.raises(InvalidInput, match="fsync must be true or false"):
        open_store("files:///d?fsync=maybe")
    with pytest.raises(InvalidInput, match="unknown files option"):
        open_store("files:///d?compress=1")


@pytest.mark.parametrize("url", ["postgresql://user:pw@db/chats", "postgres://db/chats"])
async def test_postgresql_opens_a_postgres_store_without_connecting(url: str) -> None:
    from turnfsm.storage import PostgresStore

    store = open_store(url)  # nothing is connected before the first call
    assert isinstance(store, PostgresStore)
    assert store.url == url
    assert "pw" not in repr(store)
    assert store.create_missing
    assert not cast(PostgresStore, open_store(url, create=False)).create_missing
    await store.aclose()


@pytest.mark.parametrize("url", ["redis://localhost/0", "chats.db", "", "sqlite:/x.db"])
async def test_unknown_scheme(url: str) -> None:
    with pytest.raises(InvalidInput) as info:
        open_store(url)
    text = str(info.value)
    assert repr(url) in text
    for scheme in ("memory://", "sqlite:///", "files:///", "postgresql://"):
        assert scheme in text


def test_exports() -> None:
    assert "SQLiteStore" in turnfsm.storage.__all__
    assert "open_store" in turnfsm.storage.__all__
    assert turnfsm.storage.__all__ == sorted(turnfsm.storage.__all__, key=_ruff_order)
    assert isinstance(open_store("memory://"), Store)


def _ruff_order(name: str) -> tuple[int, str]:
    return (0 if name[:1].isupper() else 1, name)
