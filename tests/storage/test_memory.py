"""The contract suite for the in-memory store."""

from __future__ import annotations

from pathlib import Path

from turnfsm.storage import MemoryStore, Store

from .contract import StoreContract


class TestMemoryStore(StoreContract):
    persistent = False

    def make_store(self, tmp_path: Path) -> Store:
        return MemoryStore()
