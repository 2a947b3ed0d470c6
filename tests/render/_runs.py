"""Real engine runs for the render tests: the golden replay scripts, replayed into a store."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from turnfsm.audit import AuditRecord, audit_jsonl, audit_records
from turnfsm.model import ChatContext
from turnfsm.render import RenderError, RunPath, find_dot, path_from_steps
from turnfsm.replay import ReplayResult, replay
from turnfsm.storage import MemoryStore, StepLog, Store, open_store

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "scripts"
GOLDEN = sorted(
    p for p in SCRIPTS.iterdir() if p.is_file() and p.suffix in (".json", ".yaml", ".yml")
)


@dataclass
class Run:
    name: str
    store_url: str
    context_id: str
    ctx: ChatContext
    steps: list[StepLog]
    result: ReplayResult

    @property
    def path(self) -> RunPath:
        return path_from_steps(self.steps, start=self.ctx.created_at)

    @property
    def records(self) -> list[AuditRecord]:
        return audit_records(self.context_id, self.steps, self.ctx.message_pool.values())

    @property
    def log(self) -> str:
        return audit_jsonl(self.records)


async def _load(store: Store, cid: str) -> tuple[ChatContext, list[StepLog]]:
    try:
        return await store.load(cid), await store.steps(cid)
    finally:
        await store.aclose()


def replay_into(script: Path, store_url: str) -> Run:
    """Replay ``script`` through the real engine into the store at ``store_url``."""

    async def go() -> Run:
        if store_url == "memory://":
            store: Store = MemoryStore()
            result = await replay(script, store=store)
            reopened: Store = store  # a memory store keeps its data after aclose
        else:
            result = await replay(script, store=open_store(store_url))
            reopened = open_store(store_url)
        assert result.ok, result.report()
        assert result.context_id is not None
        ctx, steps = await _load(reopened, result.context_id)
        return Run(script.name, store_url, result.context_id, ctx, steps, result)

    return anyio.run(go)


def require_dot() -> None:
    """Skip when Graphviz is missing, except in CI (which installs it): there, fail."""
    try:
        find_dot()
    except RenderError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have Graphviz: {exc}")
        pytest.skip(str(exc))
