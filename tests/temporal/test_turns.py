"""Turns on a real Temporal server: the engine's table inside a workflow."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest

from temporal.devserver import DevServer

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from temporalio.client import Client

from turnfsm import State
from turnfsm.testing import ScriptedLLM


def test_a_plain_text_turn_runs_on_temporal(temporal_server: DevServer, tmp_path: Path) -> None:
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    async def go() -> None:
        client = await Client.connect(temporal_server.address)
        store_url = f"sqlite:///{tmp_path / 'turns.db'}"
        queue = f"q-{uuid.uuid4().hex[:8]}"
        llm = ScriptedLLM([{"text": "Hello there"}])
        async with (
            TemporalWorker(client, store=store_url, llm=llm, task_queue=queue),
            TemporalEngine(client, store=store_url, task_queue=queue) as engine,
        ):
            cid = await engine.create_context(system_prompt="Be brief.")
            turn = await engine.send(cid, "hi")
            assert turn.state is State.IDLE
            assert turn.text == "Hello there"
            assert [str(s) for s in turn.states] == [
                "ProcessingUserMessage",
                "AwaitingLLMResponse",
                "ProcessingLLMResponse",
                "Idle",
            ]
            ctx = await engine.get_context(cid)
            assert [n.message.text for n in ctx.history()] == ["hi", "Hello there"]
            assert [str(s) for s in await engine.trace(cid)] == ["Idle", *map(str, turn.states)]

    anyio.run(go)
