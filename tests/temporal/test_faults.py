"""A Temporal server that cannot be reached, at every call a TemporalEngine
makes, is ``TemporalUnavailable`` (``503 temporal_unavailable`` from
``turnfsm serve``), within a documented bound; the server's own answers
(a failed workflow, a status that is not a lost connection) stay what they
are. The server is :class:`temporal.frontend.Frontend`: the real SDK above an
RPC boundary that fails as planned, or a real socket that never answers."""

from __future__ import annotations

import gc
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from kit import loopback_tls, refusing_port, skip_without  # tests/ is on sys.path

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

# tests/ is on sys.path (no tests/__init__.py)
from server.conftest import serve_in_thread
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from temporal.frontend import (
    ACCEPTED,
    FAILED,
    HEALTHY,
    SILENT,
    Frontend,
    client_of,
    not_ready,
    rpc_error,
)
from turnfsm.errors import TemporalUnavailable
from turnfsm.temporal import TemporalEngine, _faults

skip_without("fastapi")

ACCEPT = 1.0
RPC = 0.3
GRACE = 0.2
PATIENCE = 0.3
FIRST_STEP = 0.5


def small_bounds(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(_faults, "ACCEPT_WITHIN", ACCEPT)
    mp.setattr(_faults, "RPC_TIMEOUT", RPC)
    mp.setattr(_faults, "GRACE", GRACE)
    mp.setattr(_faults, "PATIENCE", PATIENCE)
    mp.setattr(_faults, "FIRST_STEP_WITHIN", FIRST_STEP)
    mp.setattr(_faults, "CONNECT_WITHIN", ACCEPT)


@pytest.fixture(autouse=True)
def _bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    small_bounds(monkeypatch)


def lost_connection() -> dict[str, Any]:
    """Every way the SDK says it lost the server (a fresh error per test)."""
    return {
        "unavailable": rpc_error(RPCStatusCode.UNAVAILABLE, "tcp connect error"),
        "transport-error": rpc_error(RPCStatusCode.UNKNOWN, "transport error"),
        "deadline-exceeded": rpc_error(RPCStatusCode.DEADLINE_EXCEEDED),
        "cancelled": rpc_error(RPCStatusCode.CANCELLED, "Timeout expired"),
        "connect-failed": RuntimeError("Failed client connect: connection refused"),
        "silent": SILENT,
    }


LOST = list(lost_connection())

ANSWERS = [
    RPCStatusCode.NOT_FOUND,
    RPCStatusCode.FAILED_PRECONDITION,
    RPCStatusCode.INVALID_ARGUMENT,
    RPCStatusCode.ALREADY_EXISTS,
    RPCStatusCode.PERMISSION_DENIED,
    RPCStatusCode.UNAUTHENTICATED,
    RPCStatusCode.INTERNAL,
    RPCStatusCode.RESOURCE_EXHAUSTED,
]
"""Statuses that are the server's answer, not a lost connection."""


def _engine(frontend: Frontend, db: Path) -> TemporalEngine:
    return TemporalEngine(client_of(frontend), store=f"sqlite:///{db}")


async def _timed(call: Any) -> tuple[BaseException | None, float]:
    started = time.monotonic()
    try:
        await call
    except Exception as exc:
        return exc, time.monotonic() - started
    return None, time.monotonic() - started


# ------------------------------------------------------------------ the engine


@pytest.mark.parametrize("fault", LOST)
@pytest.mark.parametrize("call", ["send", "approve", "cancel", "resume"])
def test_a_lost_server_before_the_update_is_accepted_is_unavailable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, call: str, fault: str
) -> None:
    """The update-with-start of every turn call: the Update's fate is not
    known (it may have reached the server), unless nothing was ever sent."""
    frontend = Frontend()
    frontend.answer("execute_multi_operation", lost_connection()[fault])

    async def go() -> tuple[BaseException | None, float]:
        async with _engine(frontend, tmp_path / "s.db") as engine:
            cid = await engine.create_context()
            calls = {
                "send": lambda: engine.send(cid, "hi"),
                "approve": lambda: engine.approve(cid, ["c1"]),
                "cancel": lambda: engine.cancel(cid),
                "resume": lambda: engine.resume(cid),
            }
            return await _timed(calls[call]())

    error, took = anyio.run(go)
    assert isinstance(error, TemporalUnavailable), repr(error)
    assert error.accepted is (False if fault == "connect-failed" else None)
    assert took < ACCEPT + GRACE + 1.0
    gc.collect()  # the SDK keeps the failed start's error: read, it is not logged
    assert "never retrieved" not in caplog.text


def test_a_workflow_whose_task_failed_is_unavailable_and_the_call_not_taken(
    tmp_path: Path,
) -> None:
    """The server refuses an Update while the workflow's last workflow task
    failed (``WorkflowNotReadyFailure``, inside the update-with-start's
    failure): Temporal retries that task, and nothing of the call was taken."""
    frontend = Frontend()
    frontend.answer("execute_multi_operation", not_ready())

    async def go() -> tuple[BaseException | None, float]:
        async with _engine(frontend, tmp_path / "s.db") as engine:
            cid = await engine.create_context()
            return await _timed(engine.approve(cid, ["c1"]))

    error, took = anyio.run(go)
    assert isinstance(error, TemporalUnavailable), repr(error)
    assert error.accepted is False
    assert "workflow task failed" in str(error)
    assert took < ACCEPT + GRACE + 1.0


def test_a_call_refused_while_the_workflows_task_failed_is_made_again_until_taken(
    tmp_path: Path,
) -> None:
    """A workflow task that failed is tried again by Temporal at once: the
    call refused meanwhile is made again (within ACCEPT_WITHIN) and taken."""
    frontend = Frontend()
    frontend.answer("execute_multi_operation", not_ready(), not_ready(), ACCEPTED)

    async def go() -> BaseException | None:
        async with _engine(frontend, tmp_path / "s.db") as engine:
            cid = await engine.create_context()
            return (await _timed(engine.approve(cid, ["c1"])))[0]

    error = anyio.run(go)
    assert isinstance(error, WorkflowUpdateFailedError), repr(error)  # taken, then failed
    assert frontend.calls.count("execute_multi_operation") == 3


@pytest.mark.parametrize("fault", LOST)
def test_a_lost_server_after_the_update_was_accepted_is_unavailable_past_the_patience(
    tmp_path: Path, fault: str
) -> None:
    """The polls of the result and the health checks between them fail: the
    call waits out PATIENCE (it goes on in Temporal), then is unavailable,
    accepted."""
    frontend = Frontend()
    frontend.answer("poll_workflow_execution_update", lost_connection()[fault])
    frontend.answer("check", lost_connection()[fault])

    async def go() -> tuple[BaseException | None, float]:
        async with _engine(frontend, tmp_path / "s.db") as engine:
            cid = await engine.create_context()
            return await _timed(engine.send(cid, "hi"))

    error, took = anyio.run(go)
    assert isinstance(error, TemporalUnavailable), repr(error)
    assert error.accepted is True
    assert "goes on there" in str(error)
    assert took >= PATIENCE
    assert took < PATIENCE + 2 * (RPC + GRACE) + 2.0  # + the pause between polls


@pytest.mark.parametrize("fault", LOST)
def test_a_lost_server_when_a_deleted_contexts_workflow_is_told_to_end(
    tmp_path: Path, fault: str
) -> None:
    """delete_context's ``end`` signal: the context is deleted all the same
    (its workflow ends at its next call), within the signal's bound."""
    frontend = Frontend()
    frontend.answer("signal_workflow_execution", lost_connection()[fault])

    async def go() -> tuple[list[str], float]:
        async with _engine(frontend, tmp_path / "s.db") as engine:
            cid = await engine.create_context()
            started = time.monotonic()
            deleted = await engine.delete_context(cid)
            return deleted, time.monotonic() - started

    deleted, took = anyio.run(go)
    assert len(deleted) == 1 and "signal_workflow_execution" in frontend.calls
    assert took < RPC + GRACE + 1.0


@pytest.mark.parametrize("status", ANSWERS, ids=lambda s: s.name)
@pytest.mark.parametrize("stage", ["execute_multi_operation", "poll_workflow_execution_update"])
def test_the_servers_own_answers_are_not_taken_for_a_lost_connection(
    tmp_path: Path, stage: str, status: RPCStatusCode
) -> None:
    frontend = Frontend()
    frontend.answer(stage, rpc_error(status, "the server says no"))

    async def go() -> BaseException | None:
        async with _engine(frontend, tmp_path / "s.db") as engine:
            cid = await engine.create_context()
            return (await _timed(engine.send(cid, "hi")))[0]

    error = anyio.run(go)
    assert isinstance(error, RPCError) and error.status is status, repr(error)


def test_an_update_the_workflow_failed_is_not_a_lost_connection(tmp_path: Path) -> None:
    frontend = Frontend()
    frontend.answer("poll_workflow_execution_update", FAILED)

    async def go() -> BaseException | None:
        async with _engine(frontend, tmp_path / "s.db") as engine:
            cid = await engine.create_context()
            return (await _timed(engine.send(cid, "hi")))[0]

    assert isinstance(anyio.run(go), WorkflowUpdateFailedError)


def test_a_turn_longer_than_a_poll_is_waited_for_while_the_server_answers(
    tmp_path: Path,
) -> None:
    """A poll whose deadline passes at a live server (it holds a poll to its
    deadline) is polled again, past PATIENCE: the turn is running."""
    frontend = Frontend()
    running = rpc_error(RPCStatusCode.DEADLINE_EXCEEDED, "context deadline exceeded")
    frontend.answer("poll_workflow_execution_update", *[running] * 3, FAILED)
    frontend.answer("check", HEALTHY)

    async def go() -> BaseException | None:
        async with _engine(frontend, tmp_path / "s.db") as engine:
            cid = await engine.create_context()
            started = time.monotonic()
            error = (await _timed(engine.send(cid, "hi")))[0]
            return error if time.monotonic() - started < 5 else None

    error = anyio.run(go)
    assert isinstance(error, WorkflowUpdateFailedError), repr(error)
    assert frontend.calls.count("poll_workflow_execution_update") == 4


# ------------------------------------------------------------------ real sockets


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A frontend on 127.0.0.1 that accepts connections and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


def test_connecting_to_a_silent_or_refusing_server_is_unavailable(silent_port: int) -> None:
    async def go(port: int) -> tuple[BaseException | None, float]:
        return await _timed(TemporalEngine.connect(f"127.0.0.1:{port}", store="memory://"))

    # bound, never listened on: refused for as long as it is held
    with refusing_port() as closed_port:
        for port in (silent_port, closed_port):
            error, took = anyio.run(go, port)
            assert isinstance(error, TemporalUnavailable), repr(error)
            assert error.accepted is False
            assert took < ACCEPT + GRACE + 1.0


def test_a_call_on_a_server_that_never_answers_is_unavailable_within_the_bound(
    tmp_path: Path, silent_port: int
) -> None:
    """A lazy client on a socket that accepts and stays silent: the SDK
    would wait for ever; the call is unavailable after ACCEPT_WITHIN."""

    async def go() -> tuple[BaseException | None, float]:
        client = await Client.connect(f"127.0.0.1:{silent_port}", lazy=True)
        async with TemporalEngine(client, store=f"sqlite:///{tmp_path / 's.db'}") as engine:
            cid = await engine.create_context()
            return await _timed(engine.send(cid, "hi"))

    error, took = anyio.run(go)
    assert isinstance(error, TemporalUnavailable), repr(error)
    assert error.accepted is None
    assert took < ACCEPT + GRACE + 1.0


# ------------------------------------------------------------------ the server


class Served:
    def __init__(self, url: str, frontend: Frontend) -> None:
        self.url = url
        self.frontend = frontend


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path_factory.mktemp("faults") / "s.db"
    frontend = Frontend()
    config = ServerConfig(turns="temporal", recover_on_start=False)
    app = create_app(lambda: _engine(frontend, db), config)
    for url in serve_in_thread(app):
        yield Served(url, frontend)


@pytest.mark.parametrize("wait", [False, True], ids=["202", "wait"])
@pytest.mark.parametrize(
    ("fault", "stage"),
    [(f, s) for f in LOST for s in ("start", "result")] + [("workflow-not-ready", "start")],
)
def test_serve_answers_503_temporal_unavailable_and_logs_no_traceback(
    served: Served,
    caplog: pytest.LogCaptureFixture,
    fault: str,
    stage: str,
    wait: bool,
) -> None:
    frontend = served.frontend
    frontend.answer("execute_multi_operation", ACCEPTED)
    frontend.answer("poll_workflow_execution_update", FAILED)
    frontend.answer("check", HEALTHY)
    if fault == "workflow-not-ready":
        frontend.answer("execute_multi_operation", not_ready())
    elif stage == "start":
        frontend.answer("execute_multi_operation", lost_connection()[fault])
    else:
        frontend.answer("poll_workflow_execution_update", lost_connection()[fault])
        frontend.answer("check", lost_connection()[fault])
    caplog.set_level(logging.INFO)
    with httpx.Client(verify=loopback_tls(), base_url=served.url, timeout=30) as http:
        cid = http.post("/api/contexts", json={}).json()["id"]
        started = time.monotonic()
        r = http.post(
            f"/api/contexts/{cid}/messages?wait={str(wait).lower()}", json={"content": "x"}
        )
        took = time.monotonic() - started
    if stage == "result" and not wait:
        # accepted: answered 202 once the first step is in, or FIRST_STEP_WITHIN later
        assert r.status_code == 202, r.text
        assert took < FIRST_STEP + 1.0
    else:
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "temporal_unavailable"
        assert int(r.headers["Retry-After"]) > 0
        assert took < ACCEPT + PATIENCE + 2 * (RPC + GRACE) + 2.0
    gc.collect()  # an SDK future whose error nobody read is logged when collected
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert "Exception in ASGI application" not in caplog.text
    assert "never retrieved" not in caplog.text


def test_serve_answers_within_its_own_bound_whatever_the_engine_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The server's own bound on a call without ``?wait=true``
    (``ServerConfig.temporal_answer_within``) holds even where a wait of the
    engine would be longer: a request is never left open."""
    from turnfsm.server import ServerConfig, create_app

    monkeypatch.setattr(_faults, "ACCEPT_WITHIN", 120.0)
    frontend = Frontend()
    frontend.answer("execute_multi_operation", SILENT)
    config = ServerConfig(turns="temporal", recover_on_start=False, temporal_answer_within=1.0)
    app = create_app(lambda: _engine(frontend, tmp_path / "s.db"), config)
    for url in serve_in_thread(app):
        with httpx.Client(verify=loopback_tls(), base_url=url, timeout=60) as http:
            cid = http.post("/api/contexts", json={}).json()["id"]
            started = time.monotonic()
            r = http.post(f"/api/contexts/{cid}/tools/approve", json={"approve": ["c1"]})
            took = time.monotonic() - started
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "temporal_unavailable"
        assert "not known" in r.json()["error"]["message"]
        assert took < 1.0 + 2.0
    assert "Exception in ASGI application" not in caplog.text
