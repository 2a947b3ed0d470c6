"""Every store keeps a context's own history settings across a reload (and
the engine applies them to the reloaded context's next turn)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from turnfsm import Engine
from turnfsm.states import Change
from turnfsm.storage import MemoryStore, open_store
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

pytestmark = pytest.mark.anyio

SENT = "the quick brown fox jumps over the lazy dog while it rains over the old town"


STORES = ["memory", "sqlite", "files", "postgres"]


@pytest.mark.parametrize("kind", STORES)
async def test_every_store_keeps_the_overrides_across_a_reload(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if kind == "memory":
        store: Any = MemoryStore()
        url = None
    elif kind == "postgres":
        pg = request.getfixturevalue("pg_url")
        url = pg
        store = open_store(url)
    else:
        url = f"sqlite:///{tmp_path}/db.sqlite" if kind == "sqlite" else f"files:///{tmp_path}"
        store = open_store(url)

    def engine_on(s: Any) -> Engine:
        return Engine(
            llm=ScriptedLLM(lambda r: {"text": "ok " + SENT}),
            store=s,
            clock=FakeClock(),
            ids=SequentialIds(),
        )

    async with engine_on(store) as engine:
        cid = await engine.create_context()
        await engine.update_config(cid, tool_history=2, token_budget=90, compaction="off")
    if url is not None:
        await store.aclose()
        store = open_store(url)
    llm = ScriptedLLM(lambda r: {"text": "ok " + SENT})
    async with Engine(llm=llm, store=store, clock=FakeClock(), ids=SequentialIds()) as engine:
        ctx = await engine.get_context(cid)
        assert (ctx.config.tool_history, ctx.config.token_budget, ctx.config.compaction) == (
            2,
            90,
            "off",
        )
        # applied on the reloaded context's next turns
        for i in range(4):
            await engine.send(cid, f"question {i}: {SENT}")
        assert llm.requests[-1].metadata["token_budget"]["max_input_tokens"] == 90
        assert llm.requests[-1].metadata["token_budget"]["dropped_messages"] > 0
        steps = await engine.steps(cid)
        [change] = [s for s in steps if s.trigger == Change.CONFIG_UPDATED]
        assert change.detail == {"tool_history": 2, "token_budget": 90, "compaction": "off"}
    await store.aclose()
    if kind == "files":
        stored = json.loads((tmp_path / "contexts" / cid / "metadata.json").read_text())
        assert stored["config"]["token_budget"] == 90
