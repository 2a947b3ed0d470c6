"""A stream resumed on another server in the middle of a streamed answer, with
the seq of a delta it was given as ``Last-Event-ID``: a delta is never stored,
so that seq is past the context's last stored one. It is where the stream
goes on from (every later seq once, as itself or inside a ``Resync``), not
an id "ahead of the context" answered with a ``Resync`` from seq 1."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnfsm import Engine
from turnfsm.model import LLMRequest, LLMResponse, TextDelta

pytestmark = pytest.mark.anyio

CHUNKS = ["Once ", "upon ", "a ", "time."]


class _Gated:
    """Streams CHUNKS, waiting at the third for ``gate``."""

    def __init__(self) -> None:
        self.gate = anyio.Event()

    async def stream(self, request: LLMRequest) -> AsyncIterator[Any]:
        for i, text in enumerate(CHUNKS):
            if i == 2:
                await self.gate.wait()
            yield TextDelta(text)
        yield LLMResponse(text="".join(CHUNKS), finish_reason="stop")


def _frames(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw.decode().replace("\r\n", "\n").split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if ": " in line and line[0] != ":"
        )
        if "data" in fields:
            out.append(json.loads(fields["data"]))
    return out


async def test_a_delta_id_given_by_another_server_is_where_the_stream_goes_on(
    tmp_path: Path,
) -> None:
    from turnfsm.server import Hub, ServerConfig
    from turnfsm.server._events import _context_stream

    url = f"sqlite:///{tmp_path / 'chats.db'}"
    llm = _Gated()
    config = ServerConfig(recover_on_start=False, heartbeat=0.2)
    runs = Hub(lambda: Engine(llm=llm, store=url), config)  # the server that runs the turn
    other = Hub(lambda: Engine(llm=None, store=url), config)  # the one the client comes back to
    async with runs.lifespan(), other.lifespan(), anyio.create_task_group() as tg:
        engine = runs.engine
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            tg.start_soon(engine.send, cid, "a story")
            seen: list[Any] = []
            with anyio.fail_after(10):
                while sum(e.kind == "ContentDelta" for e in seen) < 2:
                    seen.append(await sub.__anext__())
        last = seen[-1].seq  # the second delta: past the last stored seq
        stored = (await other.engine.store.load(cid)).event_seq
        assert last > stored and (await other.engine.store.load(cid)).current_state != "Idle"

        got: list[dict[str, Any]] = []
        stop = anyio.Event()
        with anyio.fail_after(20):
            stream = _context_stream(other, cid, last, stop)
            first = True
            async for chunk in stream:
                got += [f for f in _frames(chunk) if f["kind"] != "Heartbeat"]
                if first:
                    first = False
                    llm.gate.set()  # the rest of the answer, once the stream is open
                if any(f["kind"] == "TurnCompleted" for f in got):
                    break
            await stream.aclose()
    spans = [
        (f["first_seq"], f["last_seq"]) if f["kind"] == "Resync" else (f["seq"],) * 2 for f in got
    ]
    # no reset from seq 1: every seq after the client's once, in order
    assert spans[0][0] == last + 1, spans
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans)), spans
    kinds = [f["kind"] for f in got]
    assert "MessageCompleted" in kinds and kinds[-1] == "TurnCompleted"


async def test_the_tenant_stream_resumed_with_a_delta_id_goes_on_from_there(
    tmp_path: Path,
) -> None:
    """The same on ``GET /api/events``: the position it resumes at in the
    context opens the channel there, and every later seq of the context comes
    once, as itself or inside a Resync."""
    from turnfsm.server import DEFAULT_TENANT, Hub, ServerConfig
    from turnfsm.server._events import _tenant_stream

    url = f"sqlite:///{tmp_path / 'chats.db'}"
    llm = _Gated()
    config = ServerConfig(recover_on_start=False, heartbeat=0.2)
    runs = Hub(lambda: Engine(llm=llm, store=url), config)
    other = Hub(lambda: Engine(llm=None, store=url), config)
    async with runs.lifespan(), other.lifespan(), anyio.create_task_group() as tg:
        engine = runs.engine
        cid = await engine.create_context()
        await runs.adopt(cid, DEFAULT_TENANT)
        async with engine.subscribe(cid) as sub:
            tg.start_soon(engine.send, cid, "a story")
            seen: list[Any] = []
            with anyio.fail_after(10):
                while sum(e.kind == "ContentDelta" for e in seen) < 2:
                    seen.append(await sub.__anext__())
        last = seen[-1].seq
        assert last > (await other.engine.store.load(cid)).event_seq

        got: list[dict[str, Any]] = []
        stop = anyio.Event()
        with anyio.fail_after(20):
            stream = _tenant_stream(other, DEFAULT_TENANT, {cid: last}, stop)
            first = True
            async for chunk in stream:
                got += [f for f in _frames(chunk) if f["kind"] != "Heartbeat"]
                if first:
                    first = False
                    llm.gate.set()
                if any(f["kind"] == "TurnCompleted" for f in got):
                    break
            await stream.aclose()
    spans = [
        (f["first_seq"], f["last_seq"]) if f["kind"] == "Resync" else (f["seq"],) * 2
        for f in got
        if f.get("context_id") == cid
    ]
    assert spans and spans[0][0] == last + 1, spans
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans)), spans
    assert [f["kind"] for f in got][-1] == "TurnCompleted"


async def test_the_tenant_stream_has_the_turns_another_process_runs(tmp_path: Path) -> None:
    """A tenant stream on one server gets the events of a context that only
    another server (or a worker) ever touched: its tenant is read from the
    table the first time one of its events comes, durable ones included."""
    from turnfsm.server import DEFAULT_TENANT, Hub, ServerConfig
    from turnfsm.server._events import _tenant_stream

    url = f"sqlite:///{tmp_path / 'chats.db'}"
    llm = _Gated()
    llm.gate.set()
    config = ServerConfig(recover_on_start=False, heartbeat=0.2)
    runs = Hub(lambda: Engine(llm=llm, store=url), config)
    other = Hub(lambda: Engine(llm=None, store=url), config)
    got: list[dict[str, Any]] = []
    async with runs.lifespan(), other.lifespan(), anyio.create_task_group() as tg:
        stop = anyio.Event()
        opened = anyio.Event()
        ended = anyio.Event()
        cid = ""

        async def listen() -> None:
            stream = _tenant_stream(other, DEFAULT_TENANT, None, stop)
            async for chunk in stream:
                opened.set()
                got.extend(f for f in _frames(chunk) if f["kind"] != "Heartbeat")
                if any(f["kind"] == "TurnCompleted" for f in got):
                    break
            await stream.aclose()
            ended.set()

        with anyio.fail_after(20):
            tg.start_soon(listen)
            await opened.wait()  # its first heartbeat: listening
            cid = await runs.engine.create_context()
            await runs.adopt(cid, DEFAULT_TENANT)
            await runs.engine.send(cid, "a story")
            await ended.wait()
    mine = [f for f in got if f.get("context_id") == cid]
    spans = [
        (f["first_seq"], f["last_seq"]) if f["kind"] == "Resync" else (f["seq"],) * 2 for f in mine
    ]
    # every seq of the turn once, in order, from the first
    assert spans and spans[0][0] == 1, spans
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans)), spans
    assert mine[-1]["kind"] == "TurnCompleted"
