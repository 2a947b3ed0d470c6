"""Replays into one store at the same moment never collide: the run prefix is
claimed by the context's create (the store's create-if-absent), and a replay
that loses the race takes the next prefix (docs/script-format.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from kit import first_by_default  # tests/ is on sys.path (no tests/__init__.py)
from storage.pg import pg_cluster, pg_url

from turnfsm.replay import load_script, replay
from turnfsm.storage import open_store

from .conftest import WEATHER

__all__ = ["pg_cluster", "pg_url"]

pytestmark = pytest.mark.anyio

SCRIPT = json.loads(WEATHER.read_text())
RUNS = 4
"""Scripts each process replays, one after the other (more chances to meet)."""


async def _ids(url: str) -> list[str]:
    store = open_store(url)
    try:
        return await store.list_ids()
    finally:
        await store.aclose()


def _two_processes_at_once(url: str, tmp_path: Path) -> None:
    """Two ``turnfsm replay`` processes, started together, each replaying the
    script RUNS times into ``url``; both must pass every replay."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    argv = [sys.executable, "-m", "turnfsm", "replay", "--json", "--store", url]
    argv += [str(WEATHER)] * RUNS
    procs = [
        subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env
        )
        for _ in range(2)
    ]
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, out + err
            results = [json.loads(line) for line in out.splitlines()]
            assert len(results) == RUNS
            for r in results:
                assert r["ok"] and r["trace"] == SCRIPT["expect"]["trace"], r
    finally:  # a failed check leaves no process running into the next test
        for proc in procs:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize(
    ("scheme", "rounds"),
    # each round is two fresh processes started together: one by default, the
    # rounds that repeat it (more chances to meet) with -m sweep
    first_by_default(
        [("sqlite", 1), ("sqlite", 3), ("files", 3)], ["sqlite", "sqlite-3-rounds", "files"]
    ),
)
def test_two_replay_processes_at_once_never_collide(
    scheme: str, rounds: int, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/r.db" if scheme == "sqlite" else f"files:///{tmp_path}/r"
    for _ in range(rounds):
        _two_processes_at_once(url, tmp_path)
    ids = anyio.run(_ids, url)
    # every replay kept its own context, under a prefix of its own
    assert len(ids) == len(set(ids)) == rounds * 2 * RUNS
    prefixes = {cid.rsplit("id-", 1)[0] for cid in ids}
    assert len(prefixes) == len(ids)


def test_two_replay_processes_at_once_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    _two_processes_at_once(pg_url, tmp_path)
    ids = anyio.run(_ids, pg_url)
    assert len(set(ids)) == 2 * RUNS


async def test_the_replay_that_loses_the_race_takes_the_next_prefix(tmp_path: Path) -> None:
    """Both replays read the same store before either creates: one keeps ``id-``,
    the other, refused by the create, takes ``r2-`` and replays in full."""
    url = f"sqlite:///{tmp_path}/r.db"
    script = load_script(WEATHER)
    results = []

    async def one() -> None:
        results.append(await replay(script, store=open_store(url)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(one)
        tg.start_soon(one)
    assert all(r.ok for r in results), [r.report() for r in results]
    assert sorted(r.context_id or "" for r in results) == ["id-2", "r2-id-2"]
    assert [r.trace for r in results] == [SCRIPT["expect"]["trace"]] * 2
    # the loser's ids all carry its prefix: its messages are its own
    loser = next(r for r in results if r.context_id == "r2-id-2")
    assert loser.messages and all(m["id"].startswith("r2-id-") for m in loser.messages)
    assert sorted(await _ids(url)) == ["id-2", "r2-id-2"]


async def test_a_store_failure_that_is_not_a_lost_race_is_raised(tmp_path: Path) -> None:
    from turnfsm.errors import StoreError

    class Broken:
        def __init__(self) -> None:
            self.inner = open_store(f"sqlite:///{tmp_path}/r.db")

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        async def create(self, ctx: object) -> None:
            raise StoreError("the disk is full")

    broken = Broken()
    try:
        with pytest.raises(StoreError, match="the disk is full"):
            await replay(load_script(WEATHER), store=broken)  # type: ignore[arg-type]
    finally:
        await broken.inner.aclose()
