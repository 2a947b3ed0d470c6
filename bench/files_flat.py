"""The files workload: a W1 turn and a cold page of 20 messages on a
``files://`` store, at 100, 1,000 and 5,000 stored messages.

Each size is a context of that many W1-shaped messages (the prepare
workload's: user message, tool call, tool result, text answer, about 200
characters each) in a files store of its own, in a fresh folder under
``$TMPDIR`` (a real disk: the store fsyncs, as by default). It is created
without fsyncs (set-up, untimed); the measured store fsyncs.

- **turn**: one engine per size with the context loaded (its first turn,
  untimed, loads it); a round runs ``TURNS`` W1 turns on each size, the sizes
  interleaved, so that drift on a shared machine hits all alike. The engine
  runs with ``tool_history_rounds=10`` and ``TokenBudget(4000)``, so the
  request it builds is as long at every size (the prepare workload): what
  may grow is the store's share. The same turns on ``memory://`` are
  measured too (``memory_turn_us_at_*``): the engine's own share.
  The turns are measured three ways (``KINDS``): on the files store without
  fsyncs (``turn_*``, and its CPU time ``turn_cpu_*``: the store's own work,
  the figure), with them (``fsync_turn_*``: what the disk adds, noisy on a
  shared machine), and on ``memory://`` (``memory_turn_*``).
- **page**: ``engine.messages(cid, offset=n - 20, limit=20)`` of an engine
  that has not loaded the context (a fresh store object each time): what
  ``GET /api/contexts/{id}/messages`` does on a cold context.

- **bytes**: what the files store writes per turn (every file it writes,
  the commit journal included), the mean over ``BYTES_TURNS`` W1 turns on a
  fresh store object of each size: counted, not timed, so the same on a
  loaded machine (``bytes_per_turn_at_*``). The mean, not a median: it
  includes the commits that write ``metadata.json`` and
  ``message_index.json`` whole again (docs/storage.md), amortised.

The figure of each is the median round; the target: the figure at 5,000
messages at most 1.5x the one at 100 (``turn_ratio_5000_to_100``,
``page_ratio_5000_to_100``).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from prepare_view import SENTENCE, _history, get_weather
from turnfsm_side import Handler

from turnfsm import Engine
from turnfsm.enhancers import TokenBudget
from turnfsm.model import Branch, ChatContext, MessageNode
from turnfsm.storage import FilesStore, MemoryStore
from turnfsm.storage import _files as files_module
from turnfsm.testing import ScriptedLLM

SIZES = (100, 1_000, 5_000)
TURNS = 5
ROUNDS = 5
PAGE = 20
TARGET = 1.5
BYTES_TURNS = 60


def _context(n: int) -> ChatContext:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    nodes: list[MessageNode] = []
    for i, msg in enumerate(_history(n)):
        nodes.append(
            MessageNode(id=f"m{i}", message=msg, parent_id=nodes[-1].id if nodes else None)
        )
    return ChatContext(
        id="long",
        message_pool={node.id: node for node in nodes},
        branches={"main": Branch(name="main", message_ids=[node.id for node in nodes])},
        created_at=now,
        updated_at=now,
    )


def _engine(store: Any) -> Engine:
    return Engine(
        llm=ScriptedLLM(Handler(), record=False),
        tools=[get_weather],
        store=store,
        tool_history_rounds=10,
        token_budget=TokenBudget(4_000, reserve_output=500),
    )


KINDS = ("files", "fsync", "memory")
"""``files``: the files store with ``fsync=False`` (its own work: what it reads,
parses, encodes and writes); ``fsync``: the same with its fsyncs (the default;
the disk's share, noisy on a shared machine); ``memory``: the engine's share."""


async def _measure(root: Path) -> dict[str, float]:
    engines: dict[tuple[str, int], Engine] = {}
    for n in SIZES:
        for kind in KINDS:
            folder = root / f"{kind}-{n}"
            store: Any = MemoryStore() if kind == "memory" else FilesStore(folder, fsync=False)
            await store.create(_context(n))
            if kind == "fsync":
                store = FilesStore(folder)
            engines[kind, n] = _engine(store)
    for engine in engines.values():
        await engine.send("long", SENTENCE)  # loads the context (untimed)
    rounds: dict[str, list[float]] = {}
    done = 1
    for _ in range(ROUNDS):
        for n in SIZES:
            for kind in KINDS:
                engine = engines[kind, n]
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(TURNS):
                    await engine.send("long", SENTENCE)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                rounds.setdefault(f"{kind}_turn_{n}", []).append(wall / TURNS * 1e6)
                rounds.setdefault(f"{kind}_turn_cpu_{n}", []).append(cpu / TURNS * 1e6)
        done += TURNS
        for n in SIZES:
            cold = _engine(FilesStore(root / f"files-{n}", fsync=False))
            stored = n + 4 * done
            t0 = time.perf_counter()
            page = await cold.messages("long", offset=stored - PAGE, limit=PAGE)
            rounds.setdefault(f"page_{n}", []).append((time.perf_counter() - t0) * 1e6)
            assert len(page) == PAGE and page[-1].id != "m0", (n, len(page))
            await cold.aclose()
    for engine in engines.values():
        await engine.aclose()
    return {key: statistics.median(r) for key, r in rounds.items()}


async def _bytes(root: Path) -> dict[str, float]:
    """Bytes the files store writes per W1 turn, by size (counted at the three
    functions every write of the store goes through)."""
    written = [0]
    real = files_module._write_temp, files_module._write_new, files_module._write_at

    def temp(path: Path, data: bytes, fsync: bool) -> Path:
        written[0] += len(data)
        return real[0](path, data, fsync)

    def new(path: Path, data: bytes, fsync: bool) -> None:
        written[0] += len(data)
        real[1](path, data, fsync)

    def at(kind: str, path: Path, offset: int, data: bytes, fsync: bool) -> None:
        written[0] += len(data)
        real[2](kind, path, offset, data, fsync)

    out = {}
    for n in SIZES:
        folder = root / f"bytes-{n}"
        store = FilesStore(folder, fsync=False)
        await store.create(_context(n))
        engine = _engine(store)
        await engine.send("long", SENTENCE)  # loads the context
        files_module._write_temp, files_module._write_new, files_module._write_at = temp, new, at
        try:
            written[0] = 0
            for _ in range(BYTES_TURNS):
                await engine.send("long", SENTENCE)
        finally:
            files_module._write_temp, files_module._write_new, files_module._write_at = real
        out[f"bytes_{n}"] = written[0] / BYTES_TURNS
        await engine.aclose()
    return out


def run() -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="turnfsm-bench-files-"))
    try:
        at = anyio.run(_measure, root)
        at.update(anyio.run(_bytes, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    small, large = SIZES[0], SIZES[-1]
    out: dict[str, Any] = {"system": "turnfsm", "workload": "files", "unit": "us"}
    for key, name in (
        ("files_turn", "turn"),
        ("files_turn_cpu", "turn_cpu"),
        ("page", "page"),
        ("fsync_turn", "fsync_turn"),
        ("memory_turn", "memory_turn"),
        ("bytes", "bytes_per_turn"),
    ):
        unit = "" if key == "bytes" else "_us"
        for n in SIZES:
            out[f"{name}{unit}_at_{n}"] = round(at[f"{key}_{n}"], 1)
        out[f"{name}_ratio_5000_to_100"] = round(at[f"{key}_{large}"] / at[f"{key}_{small}"], 3)
    out["value"] = out[f"turn_us_at_{large}"]
    out["target"] = TARGET
    return out
