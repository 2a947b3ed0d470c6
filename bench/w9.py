"""W9: scale-out. W8's load (1,000 conversations x 5 W1 turns, all at once) on
a throwaway PostgreSQL, the turns run by ``turnfsm worker`` processes: 1, 2 and
4 of them, one after the other in one run, each on a fresh database.

The driver (this process) submits each turn's message (``Engine.submit``) and
waits for the context to rest; the workers claim the turns and run them with
the W1 model (``Handler`` of ``turnfsm_side.py``) behind a think time of
``--think`` seconds (0.05) per model call, so a W1 turn (two model calls) takes
at least 0.1 s. A send's latency is from the submit to the first look at the
store (every 50 ms, asking about the contexts waited for) that finds the
context at rest. Figures: sends per second
and the p99 latency of a send, per worker count, and the 4-vs-1 ratio of sends
per second (target >= 3x).

Each run checks its result: every conversation ends ``Idle`` with exactly the
W1 history a fresh build gives, and every worker exits 0 on SIGTERM.

    python bench/run.py --workload W9 [--w9-concurrency N] [--w9-think S]
    python bench/w9.py [--workers 1,2,4] [--conversations 1000] [--turns 5]
    python bench/w9.py --workers 1 --conversations 200 --turns 3 --count

``--count`` adds the SQL round trips (and statements) per send, by caller, to
each line (``per_send``; ``bench/pgcount.py``), at some cost in CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(HERE), str(ROOT / "tests")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import pgcount  # noqa: E402
from _common import (  # noqa: E402
    W8_CONVERSATIONS,
    W8_TURNS,
    CheckFailed,
    check,
    expected_w1_history,
)

TARGET = 3.0
"""W9's target: 4 workers give at least 3x the sends per second of 1."""
COUNTS = (1, 2, 4)
CONCURRENCY = 3
"""Turns each worker runs at once (``turnfsm worker --concurrency``). W9 asks
whether workers scale out; on this machine's 2 cores that shows only while
four workers' work fits in them: at about 25 ms of CPU per send (driver,
worker and PostgreSQL), one worker running 3 turns of 0.1 s of thinking at
once uses about 0.6 of a core. With 16 at once one worker takes 1.7 cores
and the ratio measures the core count (docs/benchmarks.md, "W9")."""
THINK = 0.05
OBSERVE_EVERY = 0.05
"""Seconds between two looks of the driver's observer for contexts at rest: a
send's latency is known to this much (its p99 is seconds); every look costs
the driver and PostgreSQL CPU that the workers would use."""


# ---------------------------------------------------------------------- the workers' model


def make_llm() -> Any:
    """The W1 model behind a think time (``$TURNFSM_W9_THINK``): loaded by each
    worker with ``--llm w9:make_llm``."""
    import anyio
    from turnfsm_side import Handler

    from turnfsm.testing import ScriptedLLM

    think = float(os.environ.get("TURNFSM_W9_THINK", THINK))
    handler = Handler()

    async def answer(request: Any) -> Any:
        await anyio.sleep(think)
        return handler(request)

    return ScriptedLLM(answer, record=False)


def tools() -> list[Any]:
    from turnfsm_side import get_weather

    return [get_weather]


TOOLS = tools()
"""The W1 tool, for the workers' ``--tools w9:TOOLS``."""


# ---------------------------------------------------------------------- one measurement


async def _measure(
    url: str,
    workers: int,
    *,
    concurrency: int,
    think: float,
    conversations: int,
    turns: int,
    server_pid: int | None,
    count: bool = False,
) -> dict[str, Any]:
    import psycopg

    from turnfsm import Engine
    from turnfsm.model import to_chat_messages
    from turnfsm.storage._postgres import PostgresStore, upgrade

    if count:
        pgcount.install()
    await upgrade(url)
    store = PostgresStore(url, max_size=16)
    engine = Engine(store=store, tools=tools())
    cids = []
    async with engine:
        for _ in range(conversations):
            cids.append(await engine.create_context())
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
            "TURNFSM_W9_THINK": str(think),
        }
        counts_file = None
        if count:  # the workers count their round trips (bench/pgcount.py)
            counts_file = Path(tempfile.mkdtemp(prefix="w9-count-")) / "counts.jsonl"
            env["TURNFSM_PGCOUNT"] = str(counts_file)
        command = [str(HERE / "pgcount.py")] if count else ["-m", "turnfsm"]
        argv = [
            sys.executable,
            *command,
            "worker",
            "--store",
            url,
            "--llm",
            "w9:make_llm",
            "--tools",
            "w9:TOOLS",
            "--concurrency",
            str(concurrency),
            "--poll",
            "0.2",
        ]
        procs = [
            subprocess.Popen(  # noqa: ASYNC220 - started once, before the timed part
                argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            for _ in range(workers)
        ]
        try:
            for proc in procs:  # ready: each printed its first line
                assert proc.stdout is not None
                line = proc.stdout.readline().decode()
                check(line.startswith("turnfsm worker:"), f"a worker did not start: {line!r}")

            waiting: dict[str, tuple[float, asyncio.Event]] = {}
            done = asyncio.Event()

            async def observe() -> None:
                # the contexts waited for that are at rest: one waited for found
                # among them in a look that started after its submit has come to
                # rest (only those are asked about, by id)
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                    while not done.is_set():
                        started = time.time()
                        asked = [cid for cid, (after, _) in waiting.items() if started > after]
                        if asked:
                            # the ids as one text (this benchmark's ids have no
                            # spaces): psycopg dumps a list of 1,000 strings
                            # item by item, in Python
                            cur = await conn.execute(
                                "SELECT id FROM contexts WHERE "
                                "id = ANY(string_to_array(%s, ' ')) AND state IN "
                                "('Idle', 'AwaitingToolApproval', 'PermanentFailure')",
                                (" ".join(asked),),
                            )
                            for (cid,) in await cur.fetchall():
                                _, event = waiting.pop(cid)
                                event.set()
                        await asyncio.sleep(OBSERVE_EVERY)

            latencies: list[float] = []

            async def one(cid: str) -> None:
                for i in range(1, turns + 1):
                    t0 = time.perf_counter()
                    await engine.submit(cid, f"turn {i}")
                    event = asyncio.Event()
                    waiting[cid] = (time.time(), event)
                    await event.wait()
                    latencies.append(time.perf_counter() - t0)

            observer = asyncio.create_task(observe())
            driver0 = pgcount.report() if count else {}
            cpu0 = time.process_time()
            pg0 = _tree_cpu(server_pid)
            t0 = time.perf_counter()
            await asyncio.gather(*(one(cid) for cid in cids))
            wall = time.perf_counter() - t0
            driver_cpu = time.process_time() - cpu0
            pg_cpu = _tree_cpu(server_pid) - pg0
            driver1 = pgcount.report() if count else {}
            done.set()
            await observer
        finally:
            workers_cpu = sum(_cpu_of(proc.pid) for proc in procs)
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            codes = []
            for proc in procs:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                codes.append(proc.returncode)
                if proc.stdout is not None:
                    proc.stdout.close()
        check(codes == [0] * workers, f"workers exited with {codes} on SIGTERM")
        expected = expected_w1_history(turns)
        for cid in cids:
            ctx = await store.load(cid)
            check(ctx.current_state == "Idle", f"{cid} ends in {ctx.current_state}")
            got = to_chat_messages(n.message for n in ctx.history())
            check(got == expected, f"{cid}: the history differs from a fresh build")
    sends = conversations * turns
    counted: dict[str, Any] = {}
    if count:
        counted["driver"] = _per_send(_minus(driver1, driver0), sends)
        assert counts_file is not None
        merged: dict[str, dict[str, int]] = {}
        for text in counts_file.read_text().splitlines():
            merged = _plus(merged, json.loads(text))
        counted["workers"] = _per_send(merged, sends)
    lat = sorted(latencies)
    check(len(lat) == sends, f"{len(lat)} sends")

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, max(0, int(p * len(lat) + 0.5) - 1))] * 1e3

    return {
        "system": "turnfsm",
        "workload": "W9",
        "workers": workers,
        "value": sends / wall,
        "unit": "sends/s",
        "wall_s": wall,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": lat[-1] * 1e3,
        "driver_cpu_s": driver_cpu,
        "workers_cpu_s": workers_cpu,
        "postgres_cpu_s": pg_cpu,
        "cpu_ms_per_send": (driver_cpu + workers_cpu + pg_cpu) / sends * 1e3,
        "load_average": os.getloadavg()[0],
        "concurrency": concurrency,
        "think_s": think,
        "conversations": conversations,
        "turns": turns,
        **({"per_send": counted} if count else {}),
    }


def _minus(a: dict[str, dict[str, int]], b: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {
        k: {c: n - b.get(k, {}).get(c, 0) for c, n in a.get(k, {}).items()}
        for k in ("trips", "statements")
    }


def _plus(a: dict[str, dict[str, int]], b: dict[str, Any]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for k in ("trips", "statements"):
        mine = dict(a.get(k, {}))
        for c, n in b.get(k, {}).items():
            mine[c] = mine.get(c, 0) + n
        out[k] = mine
    return out


def _per_send(found: dict[str, dict[str, int]], sends: int) -> dict[str, dict[str, float]]:
    """Round trips and statements per send, by caller, and their totals."""
    out: dict[str, dict[str, float]] = {}
    for k in ("trips", "statements"):
        mine = {c: round(n / sends, 2) for c, n in sorted(found.get(k, {}).items()) if n}
        mine["total"] = round(sum(found.get(k, {}).values()) / sends, 2)
        out[k] = mine
    return out


def _cpu_of(pid: int) -> float:
    """Seconds of CPU a live process has used (user + system), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tree_cpu(pid: int | None) -> float:
    """CPU seconds of a process and its children (the PostgreSQL server's
    backends), from /proc; 0 when it cannot be read."""
    if pid is None:
        return 0.0
    total = _cpu_of(pid)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def run(
    *,
    counts: tuple[int, ...] = COUNTS,
    concurrency: int = CONCURRENCY,
    think: float = THINK,
    conversations: int = W8_CONVERSATIONS,
    turns: int = W8_TURNS,
    quiet: bool = False,
    count: bool = False,
) -> list[dict[str, Any]]:
    """One measurement per worker count (each on a fresh database of one
    throwaway cluster), then a summary line with the 4-vs-1 ratio."""
    from storage.pg import Cluster, find_bin_dir

    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise CheckFailed("W9 needs PostgreSQL's initdb and pg_ctl (apt-get install postgresql)")
    cluster = Cluster(bin_dir)
    cluster.start()
    lines = []
    try:
        for n in counts:
            if not quiet:
                print(f"W9: {n} worker(s), concurrency {concurrency} each ...", file=sys.stderr)
            line = asyncio.run(
                _measure(
                    cluster.new_database(),
                    n,
                    concurrency=concurrency,
                    think=think,
                    conversations=conversations,
                    turns=turns,
                    server_pid=cluster.pid,
                    count=count,
                )
            )
            lines.append(line)
            print(json.dumps(line), flush=True)
    finally:
        cluster.stop()
    by = {ln["workers"]: ln["value"] for ln in lines}
    if 1 in by and max(by) > 1:
        top = max(by)
        ratio = by[top] / by[1]
        summary = {
            "system": "turnfsm",
            "workload": "W9",
            "summary": f"{top}_vs_1",
            "ratio": ratio,
            "target": TARGET if top == 4 else None,
            "sends_per_s": by,
            "p99_ms": {ln["workers"]: ln["p99_ms"] for ln in lines},
        }
        print(json.dumps(summary), flush=True)
        if not quiet:
            verdict = "ok" if ratio >= TARGET else "MISSED"
            figures = ", ".join(
                f"{ln['workers']}: {ln['value']:.0f} sends/s, p99 {ln['p99_ms']:.0f} ms, "
                f"{ln['cpu_ms_per_send']:.0f} ms CPU/send"
                for ln in lines
            )
            print(
                f"W9: {figures}; {top} vs 1: {ratio:.2f}x (>= {TARGET:g}x {verdict})",
                file=sys.stderr,
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated")
    p.add_argument("--concurrency", type=int, default=CONCURRENCY)
    p.add_argument("--think", type=float, default=THINK)
    p.add_argument("--conversations", type=int, default=W8_CONVERSATIONS)
    p.add_argument("--turns", type=int, default=W8_TURNS)
    p.add_argument("--json", action="store_true", help="only the JSON lines")
    p.add_argument(
        "--count",
        action="store_true",
        help="count SQL round trips per send by caller (bench/pgcount.py; costs some CPU)",
    )
    args = p.parse_args(argv)
    counts = tuple(int(x) for x in args.workers.split(","))
    try:
        run(
            counts=counts,
            concurrency=args.concurrency,
            think=args.think,
            conversations=args.conversations,
            turns=args.turns,
            quiet=args.json,
            count=args.count,
        )
    except CheckFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
