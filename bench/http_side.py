"""W7: the W1 turn through ``turnfsm serve`` (HTTP + SSE), against the same turn in-process.

Two measuring processes, run alternately by ``run.py`` (docs/benchmarks.md, "W7"):

- ``inprocess``: an engine made by :func:`make_engine` in this process; 200 W1
  turns (``engine.send``), then the streamed part: 50 answers of 100 deltas
  read by a subscriber, as W2.
- ``http``: the same engine in a server process of its own (``--serve PORT``:
  what ``turnfsm serve`` runs, ``turnfsm.server._run.run_server``, on
  127.0.0.1); this process is the client, one ``httpx.AsyncClient``: it opens
  the context's event stream, then for each turn posts the message (``202``)
  and reads the stream until ``TurnCompleted``. The streamed part the same
  way, every ``ContentDelta`` read from the stream.

The figures: microseconds per W1 turn, and deltas per second of the streamed
part. ``run.py`` subtracts the two medians: the milliseconds a turn costs over
HTTP and SSE on top of the turn in-process. The server process's CPU time
(``/proc``) is reported beside it, split from the client's.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from _common import (
    W1_TURNS,
    W2_CHUNKS_PER_ANSWER,
    W2_TEXT,
    W2_TURNS,
    CheckFailed,
    Timed,
    check,
    current_rss_mib,
    expected_w1_history,
    expected_w2_history,
    peak_rss_mib,
)
from turnfsm_side import Handler, StreamingLLM, get_weather

from turnfsm import ContentDelta, Engine, EventsMissed, State, StopReason, TurnCompleted
from turnfsm.model import MessageNode, to_chat_messages
from turnfsm.testing import ScriptedLLM

SELF = os.path.abspath(__file__)
STREAM_MODEL = "w7-stream"
"""A context created with this model is answered by W2's streaming adapter;
any other by W1's handler."""
DELTAS = W2_TURNS * W2_CHUNKS_PER_ANSWER
READY_TIMEOUT = 60.0


class W7LLM:
    """W1's scripted handler, or W2's 100-delta answers for a context whose
    model is :data:`STREAM_MODEL`: one engine serves both parts."""

    def __init__(self) -> None:
        self.handler = Handler()
        self.scripted = ScriptedLLM(self.handler, record=False)
        self.streaming = StreamingLLM()

    def stream(self, request: Any) -> AsyncIterator[Any]:
        llm = self.streaming if request.model == STREAM_MODEL else self.scripted
        return llm.stream(request)


def make_engine() -> Engine:
    """The engine of both sides: the defaults (in memory), as W1."""
    return Engine(llm=W7LLM(), tools=[get_weather])


# --------------------------------------------------------------------- in-process


async def inprocess() -> dict[str, Any]:
    async with make_engine() as engine:
        warm = await engine.create_context()
        await engine.send(warm, "turn 1")  # not timed: as the HTTP side's warm-up turn
        cid = await engine.create_context()
        rss0 = current_rss_mib()
        tm = Timed.start()
        for i in range(1, W1_TURNS + 1):
            turn = await engine.send(cid, f"turn {i}")
            if turn.state is not State.IDLE or turn.stop_reason is not StopReason.COMPLETED:
                raise CheckFailed(f"turn {i}: {turn.state} {turn.stop_reason} {turn.error}")
        wall = tm.stop()
        ctx = await engine.get_context(cid)
        check(
            to_chat_messages(n.message for n in ctx.history()) == expected_w1_history(W1_TURNS),
            "the W1 history differs from a fresh build",
        )

        scid = await engine.create_context(model=STREAM_MODEL)
        received: list[str] = []
        missed = 0
        sub = engine.subscribe(scid)

        async def subscriber() -> None:
            nonlocal missed
            turns = 0
            async with sub:
                async for ev in sub:
                    if isinstance(ev, ContentDelta):
                        received.append(ev.delta)
                    elif isinstance(ev, TurnCompleted):
                        turns += 1
                        if turns == W2_TURNS:
                            break
                    elif isinstance(ev, EventsMissed):
                        missed += ev.count

        async with anyio.create_task_group() as tg:
            tg.start_soon(subscriber)
            await anyio.lowlevel.checkpoint()
            t0 = time.perf_counter()
            for i in range(1, W2_TURNS + 1):
                await engine.send(scid, f"turn {i}")
        stream_wall = time.perf_counter() - t0
        check(missed == 0, f"the subscriber missed {missed} events")
        check("".join(received) == W2_TEXT * W2_TURNS, "the streamed deltas differ")
        sctx = await engine.get_context(scid)
        check(
            to_chat_messages(n.message for n in sctx.history()) == expected_w2_history(W2_TURNS),
            "the streamed history differs from a fresh build",
        )
    return _result(tm, wall, stream_wall, rss0, server_cpu=None)


# --------------------------------------------------------------------- over HTTP


def serve(port: int) -> None:
    """The server process: the app over :func:`make_engine`, as ``turnfsm serve`` runs it."""
    from turnfsm.server import ServerConfig
    from turnfsm.server._run import run_server

    run_server(make_engine, ServerConfig(), host="127.0.0.1", port=port)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Stream:
    """A context's event stream, read event by event (``event:``, ``id:``, ``data:``)."""

    def __init__(self, lines: AsyncIterator[str]) -> None:
        self._lines = lines
        self.seq = 0
        self.missed = 0

    async def next(self) -> tuple[str, dict[str, Any]]:
        """The next engine event (heartbeats skipped); checks that seqs follow on."""
        kind, ident, data = "message", None, None
        async for line in self._lines:
            if line:
                if line.startswith("data:"):
                    data = line[5:].strip()
                elif line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("id:"):
                    ident = line[3:].strip()
                continue
            if data is None or kind == "Heartbeat":
                kind, ident, data = "message", None, None
                continue
            if kind == "EventsMissed":
                self.missed += 1
            if ident is None or int(ident) != self.seq + 1:
                raise CheckFailed(f"{kind} has id {ident} after {self.seq}")
            self.seq += 1
            return kind, json.loads(data)
        raise CheckFailed("the event stream ended")

    async def until_rest(self, deltas: list[str] | None = None) -> dict[str, Any]:
        while True:
            kind, data = await self.next()
            if kind == "ContentDelta" and deltas is not None:
                deltas.append(data["delta"])
            elif kind == "TurnCompleted":
                return data


async def _turns(client: Any, cid: str, turns: int, deltas: list[str] | None) -> None:
    async with client.stream(
        "GET", f"/api/contexts/{cid}/events", headers={"Last-Event-ID": "0"}
    ) as r:
        check(r.status_code == 200, f"events: {r.status_code}")
        events = Stream(r.aiter_lines())
        for i in range(1, turns + 1):
            posted = await client.post(
                f"/api/contexts/{cid}/messages", json={"content": f"turn {i}"}
            )
            check(posted.status_code == 202, f"turn {i}: {posted.status_code} {posted.text}")
            done = await events.until_rest(deltas)
            if (done["state"], done["stop_reason"]) != ("Idle", "completed"):
                raise CheckFailed(f"turn {i}: {done}")
        check(events.missed == 0, f"the stream missed events {events.missed} times")


async def _history(client: Any, cid: str) -> list[dict[str, Any]]:
    nodes: list[MessageNode] = []
    cursor: str | None = ""
    while cursor is not None:
        page = (await client.get(f"/api/contexts/{cid}/messages?limit=500&cursor={cursor}")).json()
        nodes += [MessageNode.model_validate(n) for n in page["messages"]]
        cursor = page["next_cursor"]
    return to_chat_messages(n.message for n in nodes)


def over_http() -> dict[str, Any]:
    """Start the server process (not timed), measure as its client, stop it."""
    port = _free_port()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, SELF, "--serve", str(port)], stdout=subprocess.DEVNULL, stderr=err
        )
        try:
            result = anyio.run(_client, port, proc)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            err.seek(0)
            printed = err.read().decode(errors="replace")
    check("Traceback" not in printed, f"the server printed a traceback:\n{printed}")
    return result


async def _client(port: int, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    import httpx

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            check(proc.poll() is None, f"the server exited ({proc.returncode})")
            try:
                if (await client.get("/readyz")).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            check(time.monotonic() < deadline, "the server did not get ready")
            await anyio.sleep(0.05)

        async def create(**body: Any) -> str:
            r = await client.post("/api/contexts", json=body)
            check(r.status_code == 201, f"create: {r.status_code} {r.text}")
            return str(r.json()["id"])

        await _turns(client, await create(), 1, None)  # warm-up, not timed
        cid = await create()
        rss0 = current_rss_mib()
        cpu0 = _cpu_seconds(proc.pid)
        tm = Timed.start()
        await _turns(client, cid, W1_TURNS, None)
        wall = tm.stop()
        server_cpu = _cpu_seconds(proc.pid) - cpu0
        check(await _history(client, cid) == expected_w1_history(W1_TURNS), "W1 history")

        scid = await create(model=STREAM_MODEL)
        deltas: list[str] = []
        t0 = time.perf_counter()
        await _turns(client, scid, W2_TURNS, deltas)
        stream_wall = time.perf_counter() - t0
        check(len(deltas) == DELTAS, f"{len(deltas)} deltas, expected {DELTAS}")
        check("".join(deltas) == W2_TEXT * W2_TURNS, "the streamed deltas differ")
        check(await _history(client, scid) == expected_w2_history(W2_TURNS), "W2 history")
    return _result(tm, wall, stream_wall, rss0, server_cpu=server_cpu)


def _result(
    tm: Timed, wall: float, stream_wall: float, rss0: float, server_cpu: float | None
) -> dict[str, Any]:
    extra: dict[str, Any] = {"deltas_per_s": DELTAS / stream_wall}
    if server_cpu is not None:
        # the server's CPU (every thread) and this process's (the client), per turn
        extra["server_cpu_us"] = server_cpu * 1e6 / W1_TURNS
        extra["client_cpu_us"] = tm.cpu * 1e6 / W1_TURNS
    return {
        "value": wall * 1e6 / W1_TURNS,
        "cpu_value": (tm.cpu + (server_cpu or 0.0)) * 1e6 / W1_TURNS,
        "unit": "us/turn",
        "wall_s": wall,
        "cpu_s": tm.cpu,
        "peak_rss_mib": peak_rss_mib(),
        "rss_start_mib": rss0,
        "extra": extra,
    }


def run(system: str) -> dict[str, Any]:
    """One measurement: ``system`` is ``inprocess`` or ``http``."""
    return over_http() if system == "http" else anyio.run(inprocess)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
    else:
        sys.exit("usage: http_side.py --serve PORT (the W7 server; run.py starts it)")
