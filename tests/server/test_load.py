"""The server under load: 200 clients, 2,000 turns, nothing lost (``pytest -m load``).

A real server process (``load_server.py``: what ``turnfsm serve`` runs, on a
temporary SQLite file, the demo model, a weather tool that needs no approval)
and 200 clients at once, each an ``httpx.AsyncClient`` with a tenant of its
own and a context of its own, running 10 turns one after the other. Half the
clients post with ``?wait=true``; the other half post (``202``) and read the
context's event stream until ``TurnCompleted``. Asserted: every response has
the status expected, every stream sends each ``seq`` once and in order, and
afterwards every context is ``Idle`` and holds exactly its turns' messages in
order; a sample passes ``audit/verify``. The turn latencies (p50, p99; and
p50, p99 by the messages the context held before the turn) and the turns
per second are printed and written to ``load.json`` in the test's temporary
folder; nothing asserts a time.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from kit import (
    listening_url,
    skip_without,
    wait_ready,
)  # tests/ is on sys.path (no tests/__init__.py)

from .load_server import TEMP_C
from .test_events import Sse

skip_without("fastapi")

pytestmark = [pytest.mark.load, pytest.mark.anyio]

CLIENTS = 200
TURNS = 10
"""Turns per client, each on the client's own context: 2,000 in all."""
AUDIT_SAMPLE = 20
"""Contexts whose audit log is verified afterwards (every tenth)."""
CITIES = ("London", "Paris", "Rome", "Oslo", "Lima", "Cairo", "Tokyo", "Quito")
DEADLINE = 300.0
"""Seconds the whole run may take before it is a failure (a hang, not a speed)."""
SERVER = Path(__file__).with_name("load_server.py")


def question(k: int, i: int) -> str:
    return f"client {k}, turn {i}: what is the weather in {CITIES[k % len(CITIES)]}?"


def answer(k: int) -> str:
    return f"The weather in {CITIES[k % len(CITIES)]} is {TEMP_C} C."


# ---------------------------------------------------------------------- the server


@dataclass
class LoadServer:
    url: str
    db: Path
    tokens: list[str]
    log: Path
    pid: int

    def cpu_seconds(self) -> float | None:
        """The server process's CPU time so far (Linux; ``None`` elsewhere)."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture
def load_server(tmp_path: Path) -> Iterator[LoadServer]:
    yield from start_load_server(tmp_path)


def start_load_server(tmp_path: Path, *extra: str) -> Iterator[LoadServer]:
    """The load server on a new SQLite file in ``tmp_path`` (``extra``: more of
    its arguments), stopped at the end."""
    tokens = [f"token-{k}" for k in range(CLIENTS)]
    token_file = tmp_path / "tokens"
    token_file.write_text("".join(f"{t} tenant-{k}\n" for k, t in enumerate(tokens)))
    db, log = tmp_path / "load.db", tmp_path / "server.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--port", "0", "--db", str(db),
             "--tokens", str(token_file), *extra],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        url = listening_url(proc, log)
        wait_ready(url, process=proc, log=log)
        yield LoadServer(url, db, tokens, log, proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


# ---------------------------------------------------------------------- the clients


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[Sse]:
    fields: dict[str, str] = {}
    async for line in lines:
        if line == "":
            if "data" in fields:
                yield Sse(
                    fields.get("event", "message"), fields.get("id"), json.loads(fields["data"])
                )
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value


@dataclass
class Outcome:
    """What one client saw: its turns' latencies, and anything unexpected."""

    k: int
    mode: str
    context_id: str = ""
    latencies: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


KEEPALIVE = 2.0
"""Seconds a client keeps an idle connection: less than uvicorn's 5 (its
``timeout_keep_alive``), so that the server never closes a connection at the
moment a client sends on it (a ``ReadError`` on a request that never arrived)."""


def http_client(server: LoadServer, k: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=server.url,
        headers={"Authorization": f"Bearer {server.tokens[k]}"},
        timeout=httpx.Timeout(120.0),
        limits=httpx.Limits(keepalive_expiry=KEEPALIVE),
    )


async def create(c: httpx.AsyncClient, out: Outcome) -> bool:
    r = await c.post("/api/contexts", json={"system_prompt": "You report the weather."})
    if r.status_code != 201:
        out.problems.append(f"create: {r.status_code} {r.text[:200]}")
        return False
    out.context_id = r.json()["id"]
    return True


async def wait_client(
    c: httpx.AsyncClient, out: Outcome, ready: Callable[[], None], go: anyio.Event
) -> None:
    """Each turn posted with ``?wait=true``: the ``Turn`` once the context rests."""
    if not await create(c, out):
        return
    ready()
    await go.wait()
    cid = out.context_id
    for i in range(1, TURNS + 1):
        t0 = time.perf_counter()
        r = await c.post(
            f"/api/contexts/{cid}/messages?wait=true", json={"content": question(out.k, i)}
        )
        out.latencies.append(time.perf_counter() - t0)
        body = r.json()
        if r.status_code != 200:
            out.problems.append(f"turn {i}: {r.status_code} {r.text[:200]}")
            return
        got = (body["state"], body["stop_reason"], body["text"])
        if got != ("Idle", "completed", answer(out.k)):
            out.problems.append(f"turn {i}: the Turn is {got}")
            return


async def stream_client(
    c: httpx.AsyncClient, out: Outcome, ready: Callable[[], None], go: anyio.Event
) -> None:
    """Each turn posted (``202``), then the context's stream read until ``TurnCompleted``."""
    if not await create(c, out):
        return
    cid = out.context_id
    # Last-Event-ID 0: every event of the context is sent, also one that came
    # before the stream subscribed
    async with c.stream("GET", f"/api/contexts/{cid}/events", headers={"Last-Event-ID": "0"}) as r:
        if r.status_code != 200:
            out.problems.append(f"events: {r.status_code}")
            return
        events = sse_events(r.aiter_lines())
        ready()
        await go.wait()
        seq = 0
        for i in range(1, TURNS + 1):
            t0 = time.perf_counter()
            posted = await c.post(
                f"/api/contexts/{cid}/messages", json={"content": question(out.k, i)}
            )
            if posted.status_code != 202:
                out.problems.append(f"turn {i}: {posted.status_code} {posted.text[:200]}")
                return
            async for ev in events:
                if ev.event == "Heartbeat":
                    continue
                if ev.id is None or int(ev.id) != seq + 1:
                    out.problems.append(f"turn {i}: {ev.event} has id {ev.id} after {seq}")
                    return
                seq += 1
                if ev.event == "TurnCompleted":
                    break
            else:
                out.problems.append(f"turn {i}: the stream ended")
                return
            out.latencies.append(time.perf_counter() - t0)
            got = (ev.data["state"], ev.data["stop_reason"])
            if got != ("Idle", "completed"):
                out.problems.append(f"turn {i}: TurnCompleted says {got}")
                return


@dataclass
class Run:
    outcomes: list[Outcome]
    wall: float
    server_cpu: float | None
    client_cpu: float


async def run_clients(server: LoadServer) -> Run:
    """Every client makes its context (and opens its stream), then all start
    their turns at once; the wall time runs from that start to the last turn."""
    outcomes = [Outcome(k, "wait" if k % 2 else "stream") for k in range(CLIENTS)]
    go, all_ready = anyio.Event(), anyio.Event()
    waiting = 0

    def ready() -> None:
        nonlocal waiting
        waiting += 1
        if waiting == CLIENTS:
            all_ready.set()

    async def one(out: Outcome) -> None:
        async with http_client(server, out.k) as c:
            try:
                await (wait_client if out.mode == "wait" else stream_client)(c, out, ready, go)
            except httpx.TransportError as exc:
                out.problems.append(f"{type(exc).__name__}: {exc}")
            finally:
                if not out.context_id or (out.problems and not go.is_set()):
                    ready()  # a client that failed before the start does not hold it up

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            for out in outcomes:
                tg.start_soon(one, out)
            await all_ready.wait()
            cpu0, client0 = server.cpu_seconds(), time.process_time()
            t0 = time.perf_counter()
            go.set()
        wall = time.perf_counter() - t0
    cpu1, client1 = server.cpu_seconds(), time.process_time()
    server_cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    return Run(outcomes, wall, server_cpu, client1 - client0)


# ---------------------------------------------------------------------- afterwards


def text_of(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["content"])


async def check_context(c: httpx.AsyncClient, out: Outcome, verify: bool) -> list[str]:
    cid = out.context_id
    problems: list[str] = []
    st = (await c.get(f"/api/contexts/{cid}/state")).json()
    if (st["state"], st["running"]) != ("Idle", False):
        problems.append(f"state {st['state']}, running {st['running']}")
    page = (await c.get(f"/api/contexts/{cid}/messages?limit=500")).json()
    msgs = [n["message"] for n in page["messages"]]
    city = CITIES[out.k % len(CITIES)]
    expected = []
    for i in range(1, TURNS + 1):
        expected += [
            ("user", question(out.k, i), None, None),
            ("assistant", "Let me check.", ("get_weather", {"city": city}), None),
            ("tool", "", None, {"city": city, "temp_c": TEMP_C}),
            ("assistant", answer(out.k), None, None),
        ]
    got = [
        (
            m["role"],
            text_of(m),
            (m["tool_calls"][0]["tool_name"], m["tool_calls"][0]["arguments"])
            if m["tool_calls"]
            else None,
            m["tool_result"]["result"] if m["tool_result"] else None,
        )
        for m in msgs
    ]
    if got != expected:
        first = next(
            (j for j, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), None
        )
        problems.append(
            f"{len(got)} messages, expected {len(expected)}; first difference at {first}"
        )
    if verify:
        v = (await c.get(f"/api/contexts/{cid}/audit/verify")).json()
        if not v["ok"] or v["final_state"] != "Idle":
            problems.append(f"audit/verify: {v}")
    return [f"client {out.k} ({out.mode}), context {cid}: {p}" for p in problems]


async def check_all(server: LoadServer, outcomes: list[Outcome]) -> list[str]:
    problems: list[str] = []
    limit = anyio.Semaphore(20)

    async def one(out: Outcome) -> None:
        async with limit, http_client(server, out.k) as c:
            problems.extend(await check_context(c, out, verify=out.k % 10 == 0))

    async with anyio.create_task_group() as tg:
        for out in outcomes:
            if out.context_id:
                tg.start_soon(one, out)
    return problems


def quantile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def figures(run: Run) -> dict[str, Any]:
    def of(outs: list[Outcome]) -> dict[str, Any]:
        lat = [x * 1000 for o in outs for x in o.latencies]
        return {
            "turns": len(lat),
            "p50_ms": round(statistics.median(lat), 1),
            "p99_ms": round(quantile(lat, 0.99), 1),
            "max_ms": round(max(lat), 1),
        }

    everything = of(run.outcomes)
    n = everything["turns"]
    # by context length: the i-th turn of a client runs on a context that
    # holds 4 * (i - 1) messages (every turn a question, a tool call, its
    # result and an answer)
    by_length = {}
    for i in range(TURNS):
        lat = [o.latencies[i] * 1000 for o in run.outcomes if len(o.latencies) > i]
        if lat:
            by_length[4 * i] = {
                "p50_ms": round(statistics.median(lat), 1),
                "p99_ms": round(quantile(lat, 0.99), 1),
            }
    return {
        "clients": CLIENTS,
        "turns_per_client": TURNS,
        **everything,
        "wall_s": round(run.wall, 2),
        "turns_per_s": round(n / run.wall, 1),
        # CPU time per turn: the server's (its process, every thread) and the clients'
        "server_cpu_ms_per_turn": None
        if run.server_cpu is None
        else round(run.server_cpu * 1000 / n, 2),
        "client_cpu_ms_per_turn": round(run.client_cpu * 1000 / n, 2),
        "wait": of([o for o in run.outcomes if o.mode == "wait"]),
        "stream": of([o for o in run.outcomes if o.mode == "stream"]),
        "by_messages_before": by_length,
    }


# ---------------------------------------------------------------------- the test


async def test_200_clients_2000_turns_nothing_lost(
    load_server: LoadServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = await run_clients(load_server)
    outcomes = run.outcomes
    problems = [f"client {o.k} ({o.mode}): {p}" for o in outcomes for p in o.problems]
    assert not problems, f"{len(problems)} clients saw errors:\n" + "\n".join(problems[:20])
    assert sum(len(o.latencies) for o in outcomes) == CLIENTS * TURNS

    result = figures(run)
    (tmp_path / "load.json").write_text(json.dumps(result, indent=2) + "\n")
    with capsys.disabled():
        print(
            f"\nload: {CLIENTS} clients x {TURNS} turns in {result['wall_s']} s = "
            f"{result['turns_per_s']} turns/s; latency p50 {result['p50_ms']} ms, "
            f"p99 {result['p99_ms']} ms, max {result['max_ms']} ms "
            f"(?wait=true p50 {result['wait']['p50_ms']} / p99 {result['wait']['p99_ms']}; "
            f"202 + stream p50 {result['stream']['p50_ms']} / p99 {result['stream']['p99_ms']}); "
            f"CPU per turn: server {result['server_cpu_ms_per_turn']} ms, "
            f"clients {result['client_cpu_ms_per_turn']} ms"
            "\n      p99 by messages in the context before the turn: "
            + ", ".join(f"{k}: {v['p99_ms']}" for k, v in result["by_messages_before"].items())
            + f"\n      {tmp_path / 'load.json'}"
        )

    lost = await check_all(load_server, outcomes)
    assert not lost, f"{len(lost)} problems:\n" + "\n".join(lost[:20])
    assert "Traceback" not in load_server.log.read_text(errors="replace")
