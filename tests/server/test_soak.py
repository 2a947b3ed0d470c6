"""A server's memory under steady load: flat after warm-up (``pytest -m soak``).

The load test's server process and clients (``test_load.py``: 200 clients,
each with a context of its own, 10 tool-loop turns each, half waiting, half
streaming) run :data:`ROUNDS` times on one server, each round on new
contexts, so that what the server keeps per context it ever served would
show. The server runs with ``turnfsm serve``'s DEFAULT cache bounds
(``--max-loaded-contexts`` 1,024, ``--max-loaded-messages`` 12,000): a round
makes 200 contexts of 40 messages, 8,000 messages, so the bound in messages
is reached in the second round and the cache is exercised from then on.
After :data:`WARM_UP` rounds, the server's resident memory (RSS, ``/proc``)
must stay within :data:`FLAT_MIB` of its level, and ``/metrics`` must show
the cache at or under its bounds after every round. With the earlier default
(250,000 messages) the cache never filled in such a run and RSS grew by 11 to
12 MiB a round (docs/benchmarks.md, "Memory under steady load"). The figures
are printed and written to ``soak.json``; the run is bounded by
:data:`DEADLINE`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from kit import skip_without  # tests/ is on sys.path

from turnfsm.cli._cache_options import SERVER_MAX_LOADED_CONTEXTS, SERVER_MAX_LOADED_MESSAGES

from .test_load import CLIENTS, TURNS, LoadServer, figures, run_clients, start_load_server

skip_without("fastapi")

pytestmark = [pytest.mark.soak, pytest.mark.anyio]

ROUNDS = 5
"""Rounds of 200 clients x 10 turns: 10,000 turns, 1,000 contexts."""
WARM_UP = 2
"""Rounds before the level is taken: the cache is full during the second
(16,000 messages made, 12,000 kept)."""
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
    yield from start_load_server(tmp_path)  # turnfsm serve's defaults for the cache


def cache_gauges(server: LoadServer) -> dict[str, float]:
    """The server's ``turnfsm_loaded_*`` gauges, from ``/metrics``."""
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    scrape = httpx.get(
        f"{server.url}/metrics",
        headers={"Authorization": f"Bearer {server.tokens[0]}"},
        timeout=30,
    )
    assert scrape.status_code == 200, scrape.text
    return {
        s.name: s.value
        for family in text_string_to_metric_families(scrape.text)
        for s in family.samples
        if s.name.startswith("turnfsm_loaded_")
    }


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
            cache = cache_gauges(soak_server)
            f = figures(run)
            rounds.append(
                {
                    "rss_mib": round(levels[-1], 1),
                    "loaded_contexts": cache["turnfsm_loaded_contexts"],
                    "loaded_messages": cache["turnfsm_loaded_messages"],
                    "p50_ms": f["p50_ms"],
                    "p99_ms": f["p99_ms"],
                }
            )
            # the defaults are in force, and the cache is within them
            assert cache["turnfsm_loaded_contexts_max"] == SERVER_MAX_LOADED_CONTEXTS
            assert cache["turnfsm_loaded_messages_max"] == SERVER_MAX_LOADED_MESSAGES
            assert 0 < cache["turnfsm_loaded_messages"] <= SERVER_MAX_LOADED_MESSAGES, cache
            assert 0 < cache["turnfsm_loaded_contexts"] <= SERVER_MAX_LOADED_CONTEXTS, cache
    after_warm_up = levels[WARM_UP - 1]
    rise = max(levels[WARM_UP:]) - after_warm_up
    result = {
        "clients": CLIENTS,
        "turns_per_round": CLIENTS * TURNS,
        "max_loaded_contexts": SERVER_MAX_LOADED_CONTEXTS,
        "max_loaded_messages": SERVER_MAX_LOADED_MESSAGES,
        "rounds": rounds,
        "rise_after_warm_up_mib": round(rise, 1),
    }
    (tmp_path / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    with capsys.disabled():
        shown = ", ".join(f"{r['rss_mib']}" for r in rounds)
        print(
            f"\nsoak: {ROUNDS} rounds of {CLIENTS * TURNS} turns on new contexts, "
            f"default cache bounds: RSS after each round {shown} MiB; "
            f"rise after warm-up {rise:.1f} MiB\n      {tmp_path / 'soak.json'}"
        )
    assert rise <= FLAT_MIB, result
    assert "Traceback" not in soak_server.log.read_text(errors="replace")
