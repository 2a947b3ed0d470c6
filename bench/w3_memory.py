"""What a resting W3 conversation keeps, and where W3's peak goes
(docs/benchmarks.md, the W3 memory rounds).

W3's conversations (5 W1 turns each, on one engine with the memory store and
the scripted LLM) are run as W3 runs them, in one asyncio task group, and
measured three ways:

- ``tracemalloc``: the traced bytes kept per conversation (after the run
  and a full collection, minus before it) and the traced peak above the
  start, per conversation; with ``--sites N``, the N allocation sites that
  keep the most;
- by type: the objects one conversation alone reaches from its loaded
  context and its store record (what other conversations also reach, the
  engine, its machine and settings, the shared names and constants, left
  out), each counted with ``sys.getsizeof``;
- by pymalloc size class (``--blocks``): the blocks in use after the run
  minus before it, per conversation, from ``sys._debugmallocstats``; what
  W3's peak RSS follows, since an object takes a whole block of its class.

::

    python bench/w3_memory.py [--conversations 1000] [--sites 20] [--blocks]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import os
import re
import subprocess
import sys
import tracemalloc
import types
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(HERE) + os.sep
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import turnfsm_side  # noqa: E402  (the W3 side's fake LLM and tool)
from _common import W3_TURNS  # noqa: E402

import turnfsm  # noqa: E402
from turnfsm import Engine  # noqa: E402

_NOT_WALKED = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.CodeType,
    types.FrameType,
)
"""Shared by every conversation: the walk stops at them."""


def _reach(roots: list[Any], stop: set[int]) -> dict[int, Any]:
    """Every object reachable from ``roots`` without passing ``stop``."""
    seen: dict[int, Any] = {}
    stack = list(roots)
    while stack:
        obj = stack.pop()
        key = id(obj)
        if key in seen or key in stop or isinstance(obj, _NOT_WALKED):
            continue
        seen[key] = obj
        stack.extend(gc.get_referents(obj))
    return seen


async def _run(conversations: int, sites: int) -> None:
    handler = turnfsm_side.Handler()
    llm = turnfsm_side.ScriptedLLM(handler, record=False)
    async with Engine(llm=llm, tools=[turnfsm_side.get_weather]) as engine:
        cids: list[str] = []

        async def one() -> None:
            cid = await engine.create_context()
            cids.append(cid)
            for i in range(1, W3_TURNS + 1):
                await engine.send(cid, f"turn {i}")

        async def group(n: int) -> None:
            async with asyncio.TaskGroup() as tg:
                for _ in range(n):
                    tg.create_task(one())

        await group(5)  # warm-up: what the first turns build once
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        start = tracemalloc.get_traced_memory()[0]
        await group(conversations)
        peak = tracemalloc.get_traced_memory()[1]
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0]
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        n = conversations
        print(f"kept per resting conversation (tracemalloc): {(kept - start) / n:,.0f} B")
        print(f"traced peak above the start, per conversation: {(peak - start) / n:,.0f} B")
        for stat in after.compare_to(before, "lineno")[:sites]:
            frame = stat.traceback[0]
            where = f"{frame.filename.removeprefix(_ROOT)}:{frame.lineno}"
            print(f"  {stat.size_diff / n:8,.0f} B {stat.count_diff / n:6.2f} x  {where}")
        _by_type(engine, cids)


def _by_type(engine: Engine, cids: list[str]) -> None:
    drive = engine._d
    loaded, store = drive.loaded, drive.settings.store
    records = store._records  # type: ignore[attr-defined]
    leases = store._leases  # type: ignore[attr-defined]

    def roots(cid: str) -> list[Any]:
        out: list[Any] = [loaded.runtimes[cid], records[cid]]
        if cid in loaded.subscribers:
            out.append(loaded.subscribers[cid])
        if cid in leases:
            out.append(leases[cid])
        return out

    shared_tables = (engine, drive, loaded, store, drive.machine, drive.settings)
    tables = (loaded.runtimes, loaded.subscribers, records, leases, loaded.busy)
    engine_ids = {id(x) for x in (*shared_tables, *tables, loaded.everywhere)}
    # what two other conversations both reach is shared (names, enums, constants)
    shared = set(_reach(roots(cids[0]), engine_ids)) & set(_reach(roots(cids[1]), engine_ids))
    mine = _reach(roots(cids[len(cids) // 2]), shared | engine_ids)
    size: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for obj in mine.values():
        name = type(obj).__name__
        size[name] += sys.getsizeof(obj)
        count[name] += 1
    print(f"one conversation's own objects: {sum(size.values()):,} B in {len(mine)}")
    for name, total in size.most_common():
        print(f"  {total:7,} B {count[name]:4} {name}")


_CLASS = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")


def _blocks(conversations: int) -> None:
    """Blocks in use by size class, after minus before, in a child process
    (``_debugmallocstats`` writes to the process's stderr)."""
    # the child imports the turnfsm this process imported, whatever its directory
    source = os.path.dirname(os.path.dirname(os.path.abspath(turnfsm.__file__)))
    code = (
        "import asyncio, sys, gc\n"
        f"sys.path[:0] = [{source!r}, {HERE!r}]\n"
        "import w3_memory\n"
        f"asyncio.run(w3_memory._stats_run({conversations}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stderr
    tables = out.split("Small block threshold")[1:]
    used = [{int(m[2]): int(m[4]) for m in map(_CLASS.match, t.splitlines()) if m} for t in tables]
    print("pymalloc blocks in use, after the run minus before, per conversation:")
    for size in sorted(used[1]):
        more = used[1][size] - used[0].get(size, 0)
        if more > conversations // 10:
            per = more / conversations
            print(f"  {size:4} B class: {per:6.1f} blocks, {per * size:6,.0f} B")


async def _stats_run(conversations: int) -> None:
    handler = turnfsm_side.Handler()
    llm = turnfsm_side.ScriptedLLM(handler, record=False)
    async with Engine(llm=llm, tools=[turnfsm_side.get_weather]) as engine:

        async def one() -> None:
            cid = await engine.create_context()
            for i in range(1, W3_TURNS + 1):
                await engine.send(cid, f"turn {i}")

        gc.collect()
        sys._debugmallocstats()
        async with asyncio.TaskGroup() as tg:
            for _ in range(conversations):
                tg.create_task(one())
        gc.collect()
        sys._debugmallocstats()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--conversations", type=int, default=1_000)
    p.add_argument("--sites", type=int, default=0, help="the N allocation sites keeping the most")
    p.add_argument("--blocks", action="store_true", help="pymalloc blocks by size class")
    args = p.parse_args()
    asyncio.run(_run(args.conversations, args.sites))
    if args.blocks:
        _blocks(args.conversations)


if __name__ == "__main__":
    main()
