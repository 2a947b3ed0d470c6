"""Handing turns off to workers (``docs/workers.md``): ``Engine.submit``, the
``Worker`` loop under claimed leases, the fencing token recorded with every
step, ``claim_expired`` on SQLite, the doorbell on PostgreSQL, a worker's
shutdown, ``turnfsm worker`` and ``serve --turns workers``.

Each engine here is its own owner on one store file or database, as separate
processes would be.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from kit import loopback_tls

from turnfsm import Engine, IllegalTransition, StoreError, Worker, tool
from turnfsm.storage import MemoryStore, SQLiteStore, StepLog
from turnfsm.testing import ScriptedLLM

ROOT = Path(__file__).resolve().parents[2]

runs: list[str] = []


@tool
def charge(ref: str) -> str:
    """Charge once (not idempotent).

    Args:
        ref: the reference.
    """
    runs.append(ref)
    return f"charged {ref}"


def tool_loop(request: Any) -> dict[str, Any]:
    """A call of ``charge`` for a user message, then a streamed answer."""
    if request.messages[-1]["role"] == "user":
        ref = request.messages[-1]["content"]
        return {"tool_calls": [{"id": f"c-{ref}", "name": "charge", "arguments": {"ref": ref}}]}
    return {"chunks": ["do", "ne"]}


def engine_on(url: str, handler: Callable[[Any], Any] = tool_loop, **kw: Any) -> Engine:
    return Engine(llm=ScriptedLLM(handler), tools=[charge], store=url, **kw)


async def until(predicate: Callable[[], Any], seconds: float = 20.0) -> None:
    with anyio.fail_after(seconds):
        while not await predicate():  # noqa: ASYNC110 - the store, written by others
            await anyio.sleep(0.02)


async def state_of(engine: Engine, cid: str) -> str:
    return (await engine.store.load(cid)).current_state


def fences(steps: list[StepLog]) -> list[tuple[int | None, str | None]]:
    return [(s.lease_token, s.lease_owner) for s in steps]


# ---------------------------------------------------------------------- submit


@pytest.mark.anyio
async def test_submit_commits_the_message_releases_the_lease_and_runs_nothing(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    llm = ScriptedLLM(tool_loop)
    async with Engine(llm=llm, tools=[charge], store=url) as server:
        cid = await server.create_context()
        mid = await server.submit(cid, "hello")
        ctx = await server.store.load(cid)
        assert ctx.current_state == "ProcessingUserMessage"
        assert ctx.active_branch.message_ids == [mid]
        assert ctx.message_pool[mid].message.content[0].text == "hello"  # type: ignore[union-attr]
        assert await server.store.lease(cid) is None  # released in the same commit
        steps = await server.store.steps(cid)
        assert [(s.from_state, s.trigger, s.to_state) for s in steps] == [
            ("Idle", "user_message", "ProcessingUserMessage")
        ]
        assert fences(steps) == [(1, server.owner)]
        assert llm.requests == []  # the turn did not run here
        # a second message is refused while the first one's turn waits
        with pytest.raises(IllegalTransition):
            await server.submit(cid, "again")
        # the caller may name the message
        other = await server.create_context()
        assert await server.submit(other, "hi", message_id="note-1") == "note-1"
        assert (await server.store.load(other)).active_branch.message_ids == ["note-1"]


@pytest.mark.anyio
async def test_submit_refuses_a_store_no_worker_can_claim_from() -> None:
    engine = Engine(llm=ScriptedLLM(tool_loop), tools=[charge], store=MemoryStore())
    cid = await engine.create_context()
    with pytest.raises(StoreError, match="claim_expired"):
        await engine.submit(cid, "hello")
    with pytest.raises(StoreError, match="claim_expired"):
        Worker(engine)
    assert (await engine.get_context(cid)).message_pool == {}


# ---------------------------------------------------------------------- the worker


async def run_worker(worker: Worker, until_done: Callable[[], Any]) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await until(until_done)
        worker.stop()


@pytest.mark.anyio
async def test_a_worker_runs_a_submitted_turn_under_the_token_it_claimed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    runs.clear()
    async with engine_on(url) as server, engine_on(url) as worker_engine:
        cid = await server.create_context()
        await server.submit(cid, "r1")
        worker = Worker(worker_engine, concurrency=2, poll=0.05)
        await run_worker(worker, lambda: _rests(server, cid))
        assert worker.claimed == worker.finished == 1
        ctx = await server.store.load(cid)
        assert [n.message.role.value for n in ctx.history()] == [
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        assert runs == ["r1"]
        steps = await server.store.steps(cid)
        assert fences(steps)[0] == (1, server.owner)
        assert set(fences(steps)[1:]) == {(2, worker_engine.owner)}  # claimed: the next token
        assert await server.store.lease(cid) is None  # released by the last commit
        # the server's next message starts from what the worker committed
        await server.submit(cid, "r2")
        assert (await server.store.load(cid)).version == ctx.version + 1


async def _rests(engine: Engine, cid: str) -> bool:
    return await state_of(engine, cid) == "Idle"


@pytest.mark.anyio
async def test_a_stopped_worker_hands_its_turn_back_before_the_next_model_call(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    runs.clear()
    asked = anyio.Event()
    go_on = anyio.Event()

    async def slow(request: Any) -> dict[str, Any]:
        asked.set()
        await go_on.wait()
        return tool_loop(request)

    async with (
        engine_on(url) as server,
        engine_on(url, slow) as first,
        engine_on(url) as second,
    ):
        cid = await server.create_context()
        await server.submit(cid, "r1")
        stopping = Worker(first, poll=0.05, grace=30)
        async with anyio.create_task_group() as tg:
            tg.start_soon(stopping.run)
            await asked.wait()  # the model is being called
            stopping.stop()
            go_on.set()  # its answer comes; the tools run; then it hands back
        assert await state_of(server, cid) == "AwaitingLLMResponse"
        assert await server.store.lease(cid) is None
        assert runs == ["r1"]
        assert stopping.finished == 1 and stopping.failed == 0
        await run_worker(Worker(second, poll=0.05), lambda: _rests(server, cid))
        assert runs == ["r1"]  # not run again: the results were committed
        steps = await server.store.steps(cid)
        tokens = [t for t, _ in fences(steps)]
        assert tokens == sorted(tokens) and tokens[-1] == 3


@pytest.mark.anyio
async def test_a_worker_resumes_a_turn_whose_process_died_once_its_lease_expired(
    tmp_path: Path,
) -> None:
    """A turn left mid-way (its lease held by a process that is gone for good,
    on another host) is claimed once the lease expires."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
    runs.clear()
    async with engine_on(url) as server, engine_on(url, lease_ttl=0.2) as worker_engine:
        cid = await server.create_context()
        await server.submit(cid, "r1")
        store = server.store
        assert isinstance(store, SQLiteStore)
        gone = await store.acquire_lease(cid, "elsewhere:1:dead", 0.3, now=time.time())
        assert gone is not None
        worker = Worker(worker_engine, poll=0.05)
        await run_worker(worker, lambda: _rests(server, cid))
        steps = await server.store.steps(cid)
        assert {t for t, _ in fences(steps)[1:]} == {gone.token + 1}


# ---------------------------------------------------------------------- SQLite's claim


@pytest.mark.anyio
async def test_sqlite_claims_contexts_away_from_rest_without_a_live_lease(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with engine_on(f"sqlite:///{path}") as engine:
        resting = await engine.create_context()
        free = [await engine.create_context() for _ in range(3)]
        for cid in free:
            await engine.submit(cid, "x")
        held = await engine.create_context()
        await engine.submit(held, "x")
        a, b = SQLiteStore(path), SQLiteStore(path)
        now = time.time()
        live = await a.acquire_lease(held, "other:1:x", 60, now=now)
        assert live is not None
        first = await a.claim_expired("a:1:x", 100, now=now, limit=2)
        second = await b.claim_expired("b:1:x", 100, now=now, limit=None)
        assert [x.context_id for x in first] == free[:2]
        assert [x.context_id for x in second] == free[2:]  # disjoint; the live one left
        assert all(x.token == 2 for x in first + second)  # after submit's token 1
        later = await b.claim_expired("b:1:x", 10, now=now + 61, limit=None)
        assert {x.context_id for x in later} == {held}  # its lease expired
        assert resting not in {x.context_id for x in first + second + later}
        await a.aclose()
        await b.aclose()


@pytest.mark.anyio
async def test_the_longest_waiting_context_is_claimed_first_not_the_oldest(
    tmp_path: Path,
) -> None:
    """A conversation handed off again queues behind those handed off before
    it, so a busy one cannot starve the others."""
    path = tmp_path / "c.db"
    async with engine_on(f"sqlite:///{path}") as engine:
        older, newer = await engine.create_context(), await engine.create_context()
        await engine.submit(newer, "first")
        await anyio.sleep(0.01)
        await engine.submit(older, "second")
        store = engine.store
        assert isinstance(store, SQLiteStore)
        claimed = await store.claim_expired("a:1:x", 10, now=time.time(), limit=1)
        assert [x.context_id for x in claimed] == [newer]


@pytest.mark.anyio
async def test_an_older_sqlite_file_gets_the_fencing_columns_and_keeps_its_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    async with engine_on(f"sqlite:///{path}") as engine:
        cid = await engine.create_context()
        await engine.submit(cid, "x")
    with sqlite3.connect(path) as conn:  # as a file made before the columns existed
        conn.execute("ALTER TABLE steps DROP COLUMN lease_token")
        conn.execute("ALTER TABLE steps DROP COLUMN lease_owner")
    async with engine_on(f"sqlite:///{path}") as engine:
        old = await engine.store.steps(cid)
        assert fences(old) == [(None, None)]
        other = await engine.create_context()
        await engine.submit(other, "y")
        assert fences(await engine.store.steps(other)) == [(1, engine.owner)]
        assert fences(await engine.store.steps(cid)) == [(None, None)]


# ---------------------------------------------------------------------- PostgreSQL


@pytest.mark.anyio
async def test_on_postgresql_the_hand_off_rings_the_doorbell_and_a_worker_runs_it(
    pg_url: str,
) -> None:
    runs.clear()
    async with engine_on(pg_url) as server, engine_on(pg_url) as worker_engine:
        cid = await server.create_context()
        store: Any = worker_engine.store
        assert await store.wait_for_work(0.05) is False  # listening from now on
        await server.submit(cid, "p1")
        assert await store.wait_for_work(5) is True
        worker = Worker(worker_engine, poll=5)  # the doorbell, not the poll, wakes it
        started = time.monotonic()
        await run_worker(worker, lambda: _rests(server, cid))
        assert time.monotonic() - started < 4
        assert runs == ["p1"]
        steps = await server.store.steps(cid)
        assert fences(steps)[0] == (1, server.owner)
        assert set(fences(steps)[1:]) == {(2, worker_engine.owner)}


@pytest.mark.anyio
async def test_on_postgresql_a_commit_under_a_claimed_over_lease_is_refused(
    pg_url: str,
) -> None:
    """The fence: a writer whose lease another owner claimed since cannot commit,
    even at the right version; nothing of its commit is stored."""
    from turnfsm.errors import LeaseLost

    async with engine_on(pg_url) as server:
        cid = await server.create_context()
        await server.submit(cid, "p1")
        store: Any = server.store
        now = time.time()
        (stale,) = await store.claim_expired("a:1:x", 0.1, now=now)
        (fresh,) = await store.claim_expired("b:1:x", 10, now=now + 1)
        assert fresh.token == stale.token + 1
        a = engine_on(pg_url)
        with pytest.raises(LeaseLost):
            await a._d.run(
                cid,
                _resume_start(a),
                lease=type(stale)(cid, a.owner, stale.token, now + 10),
            )
        assert await state_of(server, cid) == "ProcessingUserMessage"
        assert len(await server.store.steps(cid)) == 1
        await a.aclose()


def _resume_start(engine: Engine) -> Any:
    import functools

    from turnfsm.engine import _calls

    return functools.partial(_calls.start_resume, engine._d)


# ---------------------------------------------------------------------- the commands


def test_turnfsm_worker_runs_what_serve_turns_workers_hands_it_and_exits_0_on_sigterm(
    tmp_path: Path,
) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from server.conftest import serve_in_thread

    from turnfsm.adapters.llm.demo import DemoLLM
    from turnfsm.cli._demo import get_weather
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    app = create_app(
        lambda: Engine(llm=DemoLLM(delay=0.0), tools=[get_weather], store=url),
        ServerConfig(turns="workers"),
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "turnfsm", "worker", "--store", url, "--poll", "0.1"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        for base in serve_in_thread(app):
            with httpx.Client(verify=loopback_tls(), base_url=base, timeout=60) as http:
                cid = http.post("/api/contexts", json={}).json()["id"]
                r = http.post(f"/api/contexts/{cid}/messages", json={"content": "weather?"})
                assert r.status_code == 202, r.text
                assert r.json()["state"] == "ProcessingUserMessage"
                assert r.json()["message_id"]
                deadline = time.monotonic() + 60
                # the demo model's weather tool asks for approval: the turn rests there
                while http.get(f"/api/contexts/{cid}/state").json()["state"] != (
                    "AwaitingToolApproval"
                ):
                    assert time.monotonic() < deadline, "no worker ran the turn"
                    time.sleep(0.05)
                r = http.post(
                    f"/api/contexts/{cid}/messages?wait=true", json={"content": "and tomorrow?"}
                )
                assert r.status_code == 200, r.text
                turn = r.json()
                assert turn["state"] in ("Idle", "AwaitingToolApproval")
                assert turn["states"][0] == "ProcessingUserMessage"
                assert turn["states"][-1] == turn["state"]
                assert turn["messages"][0]["content"][0]["text"] == "and tomorrow?"
                assert len(turn["messages"]) >= 2  # the worker's answer came back too
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    text = out.decode()
    assert worker.returncode == 0, text
    assert "turnfsm worker: stopped (2 turns run, 0 failed)" in text


def test_serve_turns_workers_and_worker_refuse_a_store_no_worker_can_claim_from(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from turnfsm.cli import main

    assert main(["serve", "--turns", "workers", "--store", "memory://"]) == 2
    assert "--turns workers: the store memory:// cannot hand turns to workers" in (
        capsys.readouterr().err
    )
    assert main(["worker", "--store", "memory://"]) == 2
    assert "memory:// cannot hand out work" in capsys.readouterr().err
