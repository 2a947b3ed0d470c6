"""W10: turns on Temporal (docs/temporal.md, docs/benchmarks.md "W10").

Two parts, on a throwaway PostgreSQL (``tests/storage/pg.py``) and a
throwaway Temporal dev server (``tests/temporal/devserver.py``: the Temporal
CLI's ``server start-dev``, its state in a SQLite file):

1. **Overhead**: one conversation, ``--overhead-turns`` W1 turns (the model
   answering at once), run in-process (``Engine.send`` on the PostgreSQL
   store) and on Temporal (``TemporalEngine.send``, one ``turnfsm
   temporal-worker`` process on the same store), alternated in rounds. The
   figure is the difference of the medians, in ms per turn, with what a turn
   on Temporal is made of: the workflow history's events, workflow tasks and
   activities per turn, and the requests the Temporal server answered per
   turn, by operation (from its Prometheus metrics, ``service_requests``):
   the round trips of the client and the workers.
1b. **A large context** (``--big-mb``): W1 turns on a conversation whose
   stored JSON is 3 MB, past Temporal's payload limit (its loads, model
   requests and commits kept in the store's table), on Temporal and
   in-process, with the payloads kept per turn.
2. **Throughput**: W9's kind of load, ``--conversations`` conversations x
   ``--turns`` W1 turns, all at once, the model thinking ``--think`` seconds
   per call, driven through ``TemporalEngine.send`` from this process with 1,
   2 and 4 worker processes. Turns per second, the p99 of a turn, and the
   CPU per turn of the workers, the Temporal server, PostgreSQL and this
   process (the client), from ``/proc``.

Every turn is checked: each conversation ends ``Idle`` with the W1 history a
fresh build gives; every worker exits 0 on SIGTERM.

    python bench/w10.py [--workers 1,2,4] [--conversations 40] [--turns 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(HERE), str(ROOT / "tests")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from _common import CheckFailed, check, expected_w1_history  # noqa: E402
from w9 import _cpu_of, _tree_cpu  # noqa: E402

COUNTS = (1, 2, 4)
THINK = 0.05
CONVERSATIONS = 40
TURNS = 3
OVERHEAD_TURNS = 30
ROUNDS = 3
BIG_MB = 3.0
BIG_TURNS = 5


def make_llm() -> Any:
    """The W1 model behind ``$TURNFSM_W9_THINK`` seconds (0: at once)."""
    import w9

    return w9.make_llm()


def _tools() -> list[Any]:
    import w9

    return list(w9.TOOLS)


TOOLS = _tools()
"""The W1 tool, for the workers' ``--tools w10:TOOLS``."""


def _metrics(port: int) -> Counter[str]:
    """The Temporal server's ``service_requests`` by operation, now."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: Counter[str] = Counter()
    for line in text.splitlines():
        # the frontend's: what clients and workers asked (not the server's own services)
        if not line.startswith("service_requests{") or 'service_name="frontend"' not in line:
            continue
        if 'namespace="default"' not in line:
            continue
        labels, value = line.rsplit(" ", 1)
        op = labels.split('operation="', 1)[1].split('"', 1)[0]
        out[op] += int(float(value))
    return out


def _workers(n: int, address: str, url: str, think: float) -> list[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
        "TURNFSM_W9_THINK": str(think),
    }
    argv = [
        sys.executable,
        "-m",
        "turnfsm",
        "temporal-worker",
        "--temporal",
        address,
        "--store",
        url,
        "--llm",
        "w10:make_llm",
        "--tools",
        "w10:TOOLS",
    ]
    folder = Path(tempfile.mkdtemp(prefix="w10-workers-"))
    procs = []
    for i in range(n):
        with open(folder / f"worker{i}.log", "wb") as log:  # a log each, never a full pipe
            procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
    LOGS.update({proc.pid: folder / f"worker{i}.log" for i, proc in enumerate(procs)})
    end = time.monotonic() + 120
    for proc in procs:  # ready: each printed its first line
        while not _log(proc).startswith("turnfsm temporal-worker:"):
            check(proc.poll() is None and time.monotonic() < end, f"no worker: {_log(proc)!r}")
            time.sleep(0.05)
    return procs


LOGS: dict[int, Path] = {}


def _log(proc: subprocess.Popen[bytes]) -> str:
    return LOGS[proc.pid].read_text(errors="replace")


def _stop(procs: list[subprocess.Popen[bytes]]) -> list[int | None]:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    codes: list[int | None] = []
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        codes.append(proc.returncode)
        if proc.returncode != 0:
            print(
                f"worker {proc.pid} exited {proc.returncode}:\n{_log(proc)[-3000:]}",
                file=sys.stderr,
            )
    return codes


async def _check_histories(store: Any, cids: list[str], turns: int) -> None:
    from turnfsm.model import to_chat_messages

    expected = expected_w1_history(turns)
    for cid in cids:
        ctx = await store.load(cid)
        check(ctx.current_state == "Idle", f"{cid} ends in {ctx.current_state}")
        got = to_chat_messages(n.message for n in ctx.history())
        check(got == expected, f"{cid}: the history differs from a fresh build")


# ---------------------------------------------------------------------- 1. overhead


async def _overhead(server: Any, url: str, turns: int, rounds: int) -> dict[str, Any]:
    from temporalio.client import Client

    from turnfsm import Engine
    from turnfsm.storage._postgres import PostgresStore, upgrade
    from turnfsm.temporal import TemporalEngine, workflow_id

    await upgrade(url)
    store = PostgresStore(url, max_size=4)
    client = await Client.connect(server.address, namespace=server.namespace)
    procs = _workers(1, server.address, url, 0.0)
    inprocess: list[float] = []
    temporal: list[float] = []
    made: Counter[str] = Counter()
    requests: Counter[str] = Counter()
    tcids: list[str] = []
    icids: list[str] = []
    try:
        here = Engine(llm=make_llm(), tools=_tools(), store=store)
        there = TemporalEngine(client, store=store, tools=_tools())
        async with here, there:
            # warm-up: a turn each, not timed (the workflow started, the worker's caches)
            for engine, cids in ((here, icids), (there, tcids)):
                cid = await engine.create_context()
                cids.append(cid)
                await engine.send(cid, "turn 1")
            for _ in range(rounds):
                cid = await here.create_context()
                icids.append(cid)
                t0 = time.perf_counter()
                for i in range(1, turns + 1):
                    await here.send(cid, f"turn {i}")
                inprocess.append((time.perf_counter() - t0) / turns * 1e3)

                cid = await there.create_context()
                tcids.append(cid)
                await there.send(cid, "turn 1")  # the workflow started, outside the clock
                before = _metrics(server.metrics_port)
                t0 = time.perf_counter()
                for i in range(2, turns + 2):
                    await there.send(cid, f"turn {i}")
                temporal.append((time.perf_counter() - t0) / turns * 1e3)
                requests += _metrics(server.metrics_port) - before
                events = [
                    e
                    async for e in client.get_workflow_handle(
                        workflow_id(cid)
                    ).fetch_history_events()
                ]
                first_turn = _events_of_first_turn(events)
                for e in events:
                    made[_event_name(e)] += 1
                for name, n in first_turn.items():
                    made[name] -= n  # the first turn and the workflow's start are outside
            await _check_histories(store, icids[1:], turns)
            await _check_histories(store, tcids[1:], turns + 1)
    finally:
        codes = _stop(procs)
        await store.aclose()
    check(codes == [0], f"the worker exited with {codes} on SIGTERM")
    n = turns * rounds
    per_turn = {k: round(v / n, 2) for k, v in sorted(made.items()) if v}
    trips = {k: round(v / n, 2) for k, v in sorted(requests.items()) if v}
    return {
        "system": "turnfsm",
        "workload": "W10",
        "part": "overhead",
        "value": statistics.median(temporal) - statistics.median(inprocess),
        "unit": "ms/turn",
        "temporal_ms_per_turn": statistics.median(temporal),
        "inprocess_ms_per_turn": statistics.median(inprocess),
        "runs": [round(t - i, 2) for t, i in zip(temporal, inprocess, strict=True)],
        "history_events_per_turn": round(sum(made.values()) / n, 2),
        "history_per_turn": per_turn,
        "temporal_requests_per_turn": round(sum(requests.values()) / n, 2),
        "temporal_requests_by_operation": trips,
        "turns": turns,
        "rounds": rounds,
    }


def _event_name(event: Any) -> str:
    from temporalio.api.enums.v1 import EventType

    return str(EventType.Name(event.event_type)).removeprefix("EVENT_TYPE_")


def _events_of_first_turn(events: list[Any]) -> Counter[str]:
    """The events up to the first update's completion (the start and turn 1)."""
    out: Counter[str] = Counter()
    for e in events:
        name = _event_name(e)
        out[name] += 1
        if name == "WORKFLOW_EXECUTION_UPDATE_COMPLETED":
            break
    return out


# ---------------------------------------------------------------------- 1b. a large context


_FILLER = "The log line says the job ran and wrote its output to the usual place. "


async def _table(store: Any) -> tuple[int, int]:
    """Rows and bytes of the moved payloads' table (0, 0 before it exists)."""
    from turnfsm.temporal._payloads import TABLE

    async def read(conn: Any) -> tuple[int, int]:
        cur = await conn.execute(f"SELECT to_regclass('{TABLE}') IS NOT NULL")
        row = await cur.fetchone()
        if not row[0]:
            return 0, 0
        cur = await conn.execute(f"SELECT count(*), coalesce(sum(length(data)), 0) FROM {TABLE}")
        n, size = await cur.fetchone()
        return int(n), int(size)

    found: tuple[int, int] = await store._run(read)
    return found


async def _big(server: Any, url: str, mb: float, turns: int, rounds: int) -> dict[str, Any]:
    """W1 turns on a context whose stored JSON is ``mb`` MB (user messages of
    500 KB made in-process first): on Temporal, where each turn's load, model
    requests and commits pass Temporal's payload limit and are kept in the
    store's table, and in-process, alternated in rounds."""
    from temporalio.client import Client

    from turnfsm import Engine, records
    from turnfsm.model import to_chat_messages
    from turnfsm.storage._postgres import PostgresStore, upgrade
    from turnfsm.temporal import TemporalEngine

    await upgrade(url)
    store = PostgresStore(url, max_size=4)
    client = await Client.connect(server.address, namespace=server.namespace)
    procs = _workers(1, server.address, url, 0.0)
    inprocess: list[float] = []
    temporal: list[float] = []
    moved_rows = moved_bytes = 0
    sizes: list[int] = []
    try:
        here = Engine(llm=make_llm(), tools=_tools(), store=store)
        there = TemporalEngine(client, store=store, tools=_tools())
        async with here, there:

            async def grown() -> str:
                cid = await here.create_context()
                k = 0
                while True:
                    ctx = await here.get_context(cid)
                    size = len(json.dumps(records.to_python(ctx)))
                    if size >= mb * 1e6:
                        sizes.append(size)
                        return cid
                    k += 1
                    await here.send(cid, f"part {k}: " + _FILLER * (500_000 // len(_FILLER)))

            for _ in range(rounds):
                cid = await grown()
                t0 = time.perf_counter()
                for i in range(1, turns + 1):
                    await here.send(cid, f"turn {i}")
                inprocess.append((time.perf_counter() - t0) / turns * 1e3)

                cid = await grown()
                await there.send(cid, "turn 0")  # the workflow started, outside the clock
                rows0, bytes0 = await _table(store)
                t0 = time.perf_counter()
                for i in range(1, turns + 1):
                    await there.send(cid, f"turn {i}")
                temporal.append((time.perf_counter() - t0) / turns * 1e3)
                rows1, bytes1 = await _table(store)
                moved_rows += rows1 - rows0
                moved_bytes += bytes1 - bytes0
                ctx = await store.load(cid)
                check(ctx.current_state == "Idle", f"{cid} ends in {ctx.current_state}")
                # every turn a W1 turn: its message, the tool call, the result, the answer
                want = expected_w1_history(1)
                got = to_chat_messages(n.message for n in ctx.history())
                check(len(got) % len(want) == 0, f"{cid}: {len(got)} messages")
                tail = got[-len(want) :]
                check(
                    [m["role"] for m in tail] == [m["role"] for m in want]
                    and tail[-1]["content"] == want[-1]["content"],
                    f"{cid}: its last turn differs from a W1 turn: {tail[-1]}",
                )
    finally:
        codes = _stop(procs)
        await store.aclose()
    check(codes == [0], f"the worker exited with {codes} on SIGTERM")
    n = turns * rounds
    return {
        "system": "turnfsm",
        "workload": "W10",
        "part": "large_context",
        "value": statistics.median(temporal),
        "unit": "ms/turn",
        "inprocess_ms_per_turn": statistics.median(inprocess),
        "runs": [round(t, 1) for t in temporal],
        "inprocess_runs": [round(t, 1) for t in inprocess],
        "context_bytes": statistics.median(sizes),
        "moved_payloads_per_turn": round(moved_rows / n, 2),
        "moved_mb_per_turn": round(moved_bytes / n / 1e6, 2),
        "turns": turns,
        "rounds": rounds,
    }


# ---------------------------------------------------------------------- 2. throughput


async def _throughput(
    server: Any,
    url: str,
    workers: int,
    *,
    conversations: int,
    turns: int,
    think: float,
    pg_pid: int | None,
) -> dict[str, Any]:
    from temporalio.client import Client

    from turnfsm.storage._postgres import PostgresStore, upgrade
    from turnfsm.temporal import TemporalEngine

    await upgrade(url)
    store = PostgresStore(url, max_size=16)
    client = await Client.connect(server.address, namespace=server.namespace)
    procs = _workers(workers, server.address, url, think)
    latencies: list[float] = []
    try:
        engine = TemporalEngine(client, store=store, tools=_tools())
        async with engine:
            cids = [await engine.create_context() for _ in range(conversations)]

            async def one(cid: str) -> None:
                for i in range(1, turns + 1):
                    t0 = time.perf_counter()
                    await engine.send(cid, f"turn {i}")
                    latencies.append(time.perf_counter() - t0)

            workers0 = sum(_cpu_of(p.pid) for p in procs)
            temporal0 = _tree_cpu(server.pid)
            pg0 = _tree_cpu(pg_pid)
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            await asyncio.gather(*(one(cid) for cid in cids))
            wall = time.perf_counter() - t0
            client_cpu = time.process_time() - cpu0
            workers_cpu = sum(_cpu_of(p.pid) for p in procs) - workers0
            temporal_cpu = _tree_cpu(server.pid) - temporal0
            pg_cpu = _tree_cpu(pg_pid) - pg0
            await _check_histories(store, cids, turns)
    finally:
        codes = _stop(procs)
        await store.aclose()
    check(codes == [0] * workers, f"workers exited with {codes} on SIGTERM")
    n = conversations * turns
    lat = sorted(latencies)
    check(len(lat) == n, f"{len(lat)} turns")

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, max(0, int(p * len(lat) + 0.5) - 1))] * 1e3

    return {
        "system": "turnfsm",
        "workload": "W10",
        "part": "throughput",
        "workers": workers,
        "value": n / wall,
        "unit": "turns/s",
        "wall_s": wall,
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "cpu_ms_per_turn": {
            "workers": workers_cpu / n * 1e3,
            "temporal_server": temporal_cpu / n * 1e3,
            "postgres": pg_cpu / n * 1e3,
            "client": client_cpu / n * 1e3,
            "total": (workers_cpu + temporal_cpu + pg_cpu + client_cpu) / n * 1e3,
        },
        "load_average": os.getloadavg()[0],
        "think_s": think,
        "conversations": conversations,
        "turns": turns,
    }


def run(
    *,
    counts: tuple[int, ...] = COUNTS,
    conversations: int = CONVERSATIONS,
    turns: int = TURNS,
    think: float = THINK,
    overhead_turns: int = OVERHEAD_TURNS,
    rounds: int = ROUNDS,
    big_mb: float = BIG_MB,
    big_turns: int = BIG_TURNS,
    quiet: bool = False,
) -> list[dict[str, Any]]:
    from storage.pg import Cluster, find_bin_dir
    from temporal.devserver import NO_CLI, DevServer, find_cli

    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise CheckFailed("W10 needs PostgreSQL's initdb and pg_ctl (apt-get install postgresql)")
    cli = find_cli()
    if cli is None:
        raise CheckFailed(f"W10 needs the Temporal CLI: {NO_CLI}")
    cluster = Cluster(bin_dir)
    cluster.start()
    lines: list[dict[str, Any]] = []
    try:
        if overhead_turns:
            server = DevServer(cli)
            server.start()
            try:
                if not quiet:
                    print(f"W10: overhead, {rounds} x {overhead_turns} turns ...", file=sys.stderr)
                line = asyncio.run(
                    _overhead(server, cluster.new_database(), overhead_turns, rounds)
                )
            finally:
                server.stop()
            lines.append(line)
            print(json.dumps(line), flush=True)
        if big_mb and big_turns:
            server = DevServer(cli)
            server.start()
            try:
                if not quiet:
                    print(
                        f"W10: a {big_mb:g} MB context, {rounds} x {big_turns} turns ...",
                        file=sys.stderr,
                    )
                line = asyncio.run(_big(server, cluster.new_database(), big_mb, big_turns, rounds))
            finally:
                server.stop()
            lines.append(line)
            print(json.dumps(line), flush=True)
        for n in counts:
            server = DevServer(cli)  # a fresh server (and database) per measurement
            server.start()
            try:
                if not quiet:
                    print(f"W10: {n} worker(s) ...", file=sys.stderr)
                line = asyncio.run(
                    _throughput(
                        server,
                        cluster.new_database(),
                        n,
                        conversations=conversations,
                        turns=turns,
                        think=think,
                        pg_pid=cluster.pid,
                    )
                )
            finally:
                server.stop()
            lines.append(line)
            print(json.dumps(line), flush=True)
    finally:
        cluster.stop()
    if not quiet:
        for line in lines:
            if line["part"] == "large_context":
                print(
                    f"W10 a {line['context_bytes'] / 1e6:.1f} MB context: "
                    f"{line['value']:.0f} ms/turn on Temporal, "
                    f"{line['inprocess_ms_per_turn']:.0f} in-process; "
                    f"{line['moved_payloads_per_turn']} payloads "
                    f"({line['moved_mb_per_turn']} MB) kept in the store per turn",
                    file=sys.stderr,
                )
            elif line["part"] == "overhead":
                print(
                    f"W10 overhead: {line['temporal_ms_per_turn']:.1f} ms/turn on Temporal, "
                    f"{line['inprocess_ms_per_turn']:.1f} in-process: +{line['value']:.1f} ms; "
                    f"{line['temporal_requests_per_turn']} Temporal requests and "
                    f"{line['history_events_per_turn']} history events per turn",
                    file=sys.stderr,
                )
            else:
                cpu = line["cpu_ms_per_turn"]
                print(
                    f"W10 {line['workers']} worker(s): {line['value']:.1f} turns/s, "
                    f"p99 {line['p99_ms']:.0f} ms; CPU/turn {cpu['total']:.1f} ms (workers "
                    f"{cpu['workers']:.1f}, Temporal {cpu['temporal_server']:.1f}, PostgreSQL "
                    f"{cpu['postgres']:.1f}, client {cpu['client']:.1f})",
                    file=sys.stderr,
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated")
    p.add_argument("--conversations", type=int, default=CONVERSATIONS)
    p.add_argument("--turns", type=int, default=TURNS)
    p.add_argument("--think", type=float, default=THINK)
    p.add_argument("--overhead-turns", type=int, default=OVERHEAD_TURNS, help="0: no overhead part")
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument(
        "--big-mb", type=float, default=BIG_MB, help="the large context's MB (0: no such part)"
    )
    p.add_argument("--big-turns", type=int, default=BIG_TURNS)
    p.add_argument("--json", action="store_true", help="only the JSON lines")
    args = p.parse_args(argv)
    counts = tuple(int(x) for x in args.workers.split(",") if x)
    try:
        run(
            counts=counts,
            conversations=args.conversations,
            turns=args.turns,
            think=args.think,
            overhead_turns=args.overhead_turns,
            rounds=args.rounds,
            big_mb=args.big_mb,
            big_turns=args.big_turns,
            quiet=args.json,
        )
    except CheckFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
