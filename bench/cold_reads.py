"""The cold-reads workload: what the server reads of a context it has not
loaded, at 100 and 5,000 stored messages, on each store that reads a part of
a context alone.

Each size is a context of that many W1-shaped messages (the prepare
workload's, about 200 characters each), created in a store of its own kind:
SQLite and files in a fresh folder under ``$TMPDIR``, and PostgreSQL when
``$TURNFSM_BENCH_PG`` names an empty database. A round times, on each store
and size in turn (interleaved, so that drift on a shared machine hits all
alike), ``REPS`` calls of:

- **outline**: ``store.outline(cid)``: what ``GET /api/contexts/{id}`` and
  ``…/state`` read;
- **page**: ``store.message_page(cid, None, n - 20, 20)``: what ``GET
  …/messages`` reads of a context that is not loaded;
- **load**: ``store.load(cid)``, the whole context: what both read before
  (the reference the two are measured against).

The figure of each is the median round, in microseconds a call; the target:
the outline and the page at 5,000 messages at most 1.5x the one at 100
(``outline_ratio_5000_to_100`` and ``page_ratio_5000_to_100`` per store).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from files_flat import _context

from turnfsm.storage import open_store

SIZES = (100, 5_000)
REPS = 20
ROUNDS = 7
PAGE = 20
TARGET = 1.5
OPS = ("outline", "page", "load")
RUN = os.getpid()
"""In the contexts' ids: the runs of one invocation share a PostgreSQL database."""


async def _measure(root: Path) -> dict[str, float]:
    urls = {"sqlite": f"sqlite:///{root}/bench.db", "files": f"files://{root}/files"}
    if os.environ.get("TURNFSM_BENCH_PG"):
        urls["postgresql"] = os.environ["TURNFSM_BENCH_PG"]
    stores = {kind: open_store(url) for kind, url in urls.items()}
    try:
        for store in stores.values():
            for n in SIZES:
                ctx = _context(n)
                ctx.id = f"long-{RUN}-{n}"
                await store.create(ctx)

        async def call(store: Any, op: str, n: int) -> None:
            cid = f"long-{RUN}-{n}"
            if op == "outline":
                await store.outline(cid)
            elif op == "page":
                name, page = await store.message_page(cid, None, n - PAGE, PAGE)
                assert len(page) == PAGE, (name, len(page))
            else:
                await store.load(cid)

        rounds: dict[str, list[float]] = {}
        for _ in range(ROUNDS):
            for kind, store in stores.items():
                for n in SIZES:
                    for op in OPS:
                        await call(store, op, n)  # warm
                        t0 = time.perf_counter()
                        for _ in range(REPS):
                            await call(store, op, n)
                        elapsed = (time.perf_counter() - t0) / REPS * 1e6
                        rounds.setdefault(f"{kind}_{op}_{n}", []).append(elapsed)
        return {key: statistics.median(r) for key, r in rounds.items()}
    finally:
        for store in stores.values():
            await store.aclose()


def run() -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="turnfsm-bench-cold-"))
    try:
        at = anyio.run(_measure, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    small, large = SIZES
    out: dict[str, Any] = {"system": "turnfsm", "workload": "cold", "unit": "us"}
    for kind in dict.fromkeys(key.split("_")[0] for key in at):
        for op in OPS:
            for n in SIZES:
                out[f"{kind}_{op}_us_at_{n}"] = round(at[f"{kind}_{op}_{n}"], 1)
            ratio = at[f"{kind}_{op}_{large}"] / at[f"{kind}_{op}_{small}"]
            out[f"{kind}_{op}_ratio_5000_to_100"] = round(ratio, 3)
    out["target"] = TARGET
    return out
