"""A tool call's argument pieces on Temporal: the LLM activity rings each
``ToolCallArgumentsDelta`` with the seq the workflow's engine gives it, so the
log holds the same seqs and kinds as an in-process engine sends."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from temporal.devserver import RunningServer

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from temporalio.client import Client

from turnfsm import Engine, MemoryStore, tool
from turnfsm.model import LLMResponse, TextDelta, ToolCallData, ToolCallDelta

from .test_turns import _queue, _Recording


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: found"


class _Pieces:
    """Streams a call's arguments in three pieces, then answers with text."""

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        if request.messages[-1]["role"] == "tool":
            yield TextDelta("Found it.")
            yield LLMResponse(text="Found it.")
            return
        yield ToolCallDelta(index=0, id="c1", name="lookup")
        for piece in ('{"ci', 'ty": "Os', 'lo"}'):
            yield ToolCallDelta(index=0, arguments=piece)
        yield LLMResponse(tool_calls=(ToolCallData("c1", "lookup", {"city": "Oslo"}),))


def test_argument_pieces_take_the_engines_seqs(temporal_server: RunningServer) -> None:
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    async def in_process() -> list[tuple[int, str]]:
        async with Engine(llm=_Pieces(), tools=[lookup]) as engine:
            cid = await engine.create_context()
            async with engine.subscribe(cid) as sub:
                await engine.send(cid, "where?")
                return [(e.seq, e.kind) for e in sub.drain()]

    async def on_temporal() -> tuple[list[tuple[int, str]], str, int]:
        client = await Client.connect(temporal_server.address)
        store, log, queue = MemoryStore(), _Recording(), _queue()
        async with (
            TemporalWorker(
                client, store=store, llm=_Pieces(), tools=[lookup], task_queue=queue, event_log=log
            ),
            TemporalEngine(client, store=store, task_queue=queue) as engine,
        ):
            cid = await engine.create_context()
            await engine.send(cid, "where?")
            ctx = await engine.get_context(cid)
        rung = [json.loads(str(n.event)) for n in log.notes if n.event is not None]
        seen = [(s, k) for _, s, k, _ in log.rows] + [(e["seq"], e["kind"]) for e in rung]
        pieces = "".join(e["delta"] for e in rung if e["kind"] == "ToolCallArgumentsDelta")
        assert log.early == [] and log.conflicts == []
        return sorted(seen), pieces, ctx.event_seq

    here = anyio.run(in_process)
    there, pieces, last = anyio.run(on_temporal)
    assert [k for _, k in here].count("ToolCallArgumentsDelta") == 4
    assert there == here
    assert [s for s, _ in there] == list(range(1, last + 1))
    assert json.loads(pieces) == {"city": "Oslo"}
