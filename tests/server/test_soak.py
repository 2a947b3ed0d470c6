"""A server's memory under steady load: flat after warm-up (``pytest -m soak``).

The load test's server process and clients (``test_load.py``: 200 clients,
each with a context of its own, 10 tool-loop turns each, half waiting, half
streaming) run :data:`ROUNDS` times on one server, each round on new
contexts, so that what the server keeps per context it ever served would
show. The engine's cache is bounded to :data:`MAX_LOADED_MESSAGES`
messages, which the first round fills; after them, the server's resident memory (RSS,
``/proc``) must stay within :data:`FLAT_MIB` of its level after warm-up.
Before the bound on the cache's messages (docs/benchmarks.md, "Memory under
steady load"), it grew by 23 to 27 MiB per round and did not level off;
with it, and the SQLite event log still opening a connection per call on
anyio's worker threads, by 3.5 to 7.3 MiB over the last three rounds, all of
it memory those threads had freed and their malloc arenas kept. The figures
are printed and written to ``soak.json``; the run is bounded by
:data:`DEADLINE`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

pytest.importorskip("fastapi")

from .test_load import CLIENTS, TURNS, LoadServer, figures, run_clients, start_load_server

pytestmark = [pytest.mark.soak, pytest.mark.anyio]

ROUNDS = 5
"""Rounds of 200 clients x 10 turns: 10,000 turns, 1,000 contexts."""
WARM_UP = 2
"""Rounds before the level is taken: the cache is full after the first."""
MAX_LOADED_MESSAGES = 6_000
"""The engine's max_loaded_messages in the soak server: 150 contexts of 10
turns (40 messages each), fewer than one round makes; max_loaded stays 4,096,
which the soak's 1,000 contexts never reach."""
FLAT_MIB = 4.0
"""How far RSS may rise after warm-up over the remaining rounds: measured 0.1
to 2.9 MiB (the highest at a load average of 15 from other work), high-water
marks of malloc's and Python's allocators, no live data. The free memory
kept in worker threads' malloc arenas made it 3.5 to 7.3; one round's growth
before the cache was bounded was 23 to 27."""
DEADLINE = 900.0
"""Seconds the whole soak may take (a hang, not a speed)."""


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def soak_server(tmp_path: Path) -> Iterator[LoadServer]:
    if not sys.platform.startswith("linux"):
        pytest.skip("reads the server's RSS from /proc")
    yield from start_load_server(tmp_path, "--max-loaded-messages", str(MAX_LOADED_MESSAGES))


async def test_rss_is_flat_after_warm_up(
    soak_server: LoadServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    levels: list[float] = []
    rounds = []
    with anyio.fail_after(DEADLINE):
        for _ in range(ROUNDS):
            run = await run_clients(soak_server)
            problems = [p for o in run.outcomes for p in o.problems]
            assert not problems, problems[:10]
            await anyio.sleep(1.0)  # the last streams closed, the relay's writes done
            levels.append(rss_mib(soak_server.pid))
            f = figures(run)
            rounds.append(
                {"rss_mib": round(levels[-1], 1), "p50_ms": f["p50_ms"], "p99_ms": f["p99_ms"]}
            )
    after_warm_up = levels[WARM_UP - 1]
    rise = max(levels[WARM_UP:]) - after_warm_up
    result = {
        "clients": CLIENTS,
        "turns_per_round": CLIENTS * TURNS,
        "max_loaded_messages": MAX_LOADED_MESSAGES,
        "rounds": rounds,
        "rise_after_warm_up_mib": round(rise, 1),
    }
    (tmp_path / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    with capsys.disabled():
        shown = ", ".join(f"{r['rss_mib']}" for r in rounds)
        print(
            f"\nsoak: {ROUNDS} rounds of {CLIENTS * TURNS} turns on new contexts, "
            f"max_loaded_messages {MAX_LOADED_MESSAGES}: RSS after each round {shown} MiB; "
            f"rise after warm-up {rise:.1f} MiB\n      {tmp_path / 'soak.json'}"
        )
    assert rise <= FLAT_MIB, result
    assert "Traceback" not in soak_server.log.read_text(errors="replace")
