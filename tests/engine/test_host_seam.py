"""The seam for other hosts: ``Engine(leases=False)``, ``Engine(threads=False)``,
the engine's one internal entry (``_host_seam``) and ``hosted``, and that no
module outside the engine package reaches into the engine's drive loop."""

from __future__ import annotations

import ast
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

import turnfsm
from turnfsm import ChatContext, Engine, InvalidInput, SQLiteStore, State, tool
from turnfsm.engine._seam import HostSeam, StandIns, hosted
from turnfsm.storage import Lease, MemoryStore
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

pytestmark = pytest.mark.anyio

PKG = Path(turnfsm.__file__).resolve().parent


class CountingStore(SQLiteStore):
    """Counts the lease renewals it is asked for."""

    renewed = 0

    async def renew_lease(self, lease: Lease, ttl: float, *, now: float) -> Lease:
        self.renewed += 1
        return await super().renew_lease(lease, ttl, now=now)


@tool
async def slow() -> str:
    """Takes a while (longer than a third of the lease's time)."""
    await anyio.sleep(0.35)
    return "done"


def _script() -> ScriptedLLM:
    call = {"id": "c1", "name": "slow", "arguments": {}}
    return ScriptedLLM([{"tool_calls": [call]}, {"text": "ok"}])


@pytest.mark.parametrize("flag", ["leases", "threads"])
def test_the_host_settings_are_checked_and_read_back(flag: str) -> None:
    off: dict[str, Any] = {flag: False}
    bad: dict[str, Any] = {flag: "no"}
    assert getattr(Engine(), flag) is True
    assert getattr(Engine(**off), flag) is False
    with pytest.raises(InvalidInput) as refused:
        Engine(**bad)
    assert refused.value.where == flag


@pytest.mark.parametrize("leases", [True, False])
async def test_leases_false_renews_no_lease_while_a_call_runs(tmp_path: Path, leases: bool) -> None:
    store = CountingStore(tmp_path / "s.db")
    engine = Engine(llm=_script(), tools=[slow], store=store, lease_ttl=0.3, leases=leases)
    cid = await engine.create_context()
    turn = await engine.send(cid, "go")
    assert turn.state is State.IDLE
    assert (store.renewed > 0) is leases
    await engine.aclose()


async def test_an_entered_engine_without_leases_starts_no_heartbeat() -> None:
    async with Engine(leases=False) as engine:
        assert engine._d.beats is None
    async with Engine() as engine:
        assert engine._d.beats is not None


@pytest.mark.parametrize("threads", [True, False])
async def test_threads_false_calls_a_sync_summarizer_in_the_engines_thread(
    threads: bool,
) -> None:
    engine = Engine(llm=ScriptedLLM([{"text": "a"}]), threads=threads)
    parent = await engine.create_context()
    child = await engine.spawn(parent, "t")
    seen: list[int] = []

    def summary(ctx: ChatContext) -> str:
        seen.append(threading.get_ident())
        return "summed up"

    done = await engine.finish(child.context_id, summarizer=summary)
    assert done.summary == "summed up"
    assert (seen == [threading.get_ident()]) is not threads


async def test_the_seam_reads_and_drops_the_loaded_copy() -> None:
    engine = Engine(llm=ScriptedLLM([{"text": "a"}]))
    seam = engine._host_seam
    assert isinstance(seam, HostSeam) and seam.settings.owner == engine.owner
    cid = await engine.create_context()
    await engine.send(cid, "hi")
    rt = seam.runtime(cid)
    assert rt is not None and rt.ctx.id == cid
    assert seam.request_hand_back(cid) is False  # no call runs on it
    seam.unload(cid)
    assert seam.runtime(cid) is None and cid not in engine.loaded_contexts


def _stand_ins(**over: Any) -> StandIns:
    parts: dict[str, Any] = {
        "store": MemoryStore(),
        "llm": ScriptedLLM([{"text": "a"}]),
        "tools": (),
        "clock": FakeClock(),
        "ids": SequentialIds(),
        "logger": None,
    }
    parts.update(over)
    return StandIns(**parts)


def test_hosted_makes_an_engine_of_the_hosts_parts_without_leases_or_threads() -> None:
    parts = _stand_ins()
    engine = hosted(Engine, parts, max_iterations=3)
    assert type(engine) is Engine
    assert engine.store is parts.store and engine.llm is parts.llm and engine.clock is parts.clock
    assert (engine.leases, engine.threads, engine.max_iterations) == (False, False, 3)


@pytest.mark.parametrize("name", ["store", "llm", "clock", "ids", "logger", "leases", "threads"])
def test_hosted_refuses_an_option_that_is_the_hosts_to_give(name: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        hosted(Engine, _stand_ins(), **{name: None})
    assert refused.value.where == name


def _reaches_into_the_driver(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "_d"
    ]


def test_only_the_engine_package_reaches_into_its_drive_loop() -> None:
    """``._d`` (the engine's ``Driver``) is the engine package's own: workers
    and other hosts go through ``engine._host_seam``. The worker lives in the
    engine package but is such a host, so it is held to the same rule."""
    engine_dir = PKG / "engine"
    found = []
    for path in sorted(PKG.rglob("*.py")):
        inside = path.is_relative_to(engine_dir) and path.name != "_worker.py"
        if inside:
            continue
        found += [f"{path.relative_to(PKG)}:{n}" for n in _reaches_into_the_driver(path)]
    assert found == []


def test_the_scan_sees_a_reach_into_the_driver(tmp_path: Path) -> None:
    planted = tmp_path / "host.py"
    planted.write_text("def f(engine):\n    return engine._d.loaded\n", encoding="utf-8")
    assert _reaches_into_the_driver(planted) == [2]
