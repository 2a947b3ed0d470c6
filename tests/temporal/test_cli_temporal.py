"""``turnfsm serve --turns temporal`` and ``turnfsm temporal-worker`` as
processes on a real Temporal dev server and one SQLite file: a tool loop with
an approval over HTTP, its events on the stream, and a worker stopped by
SIGTERM in the middle of a tool call, which it finishes before it exits 0
while another worker goes on with the turn; a context past Temporal's
payload limit through both. (The usage errors:
tests/cli/test_cli_temporal.py; the kill test: test_kill.py.)"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

# tests/ is on sys.path (no tests/__init__.py)
from kit import listening_url, loopback_tls, skip_without, wait_ready

from temporal.devserver import DevServer, RunningServer

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

skip_without("fastapi", reason="the server extra is not installed")

ROOT = Path(__file__).resolve().parents[2]
MODEL = [
    "--llm",
    "tests.temporal.kill_model:make_llm",
    "--tools",
    "tests.temporal.kill_model:TOOLS",
]


class Processes:
    def __init__(self, server: DevServer | RunningServer, folder: Path) -> None:
        self.folder = folder
        self.store = f"sqlite:///{folder / 'chats.db'}"
        self.effects = folder / "effects.txt"
        self.marks = folder / "marks.txt"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TURNFSM_KILL_THINK": "0.3",
            "TURNFSM_KILL_EFFECTS": str(self.effects),
            "TURNFSM_KILL_MARKS": str(self.marks),
        }
        # a task queue of the test's own: the server may be the run's, whose
        # other tests' workers must not take this test's workflows
        queue = f"cli-{uuid.uuid4().hex[:10]}"
        self.common = ["--temporal", server.address, "--temporal-task-queue", queue]
        self.common += [*MODEL, "--store", self.store]
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *argv: str, name: str) -> subprocess.Popen[bytes]:
        with open(self.folder / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "turnfsm", *argv, *self.common],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def wait_for_line(self, name: str, text: str, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while text not in self.log(name):
            assert time.monotonic() < end, self.log(name)
            time.sleep(0.05)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _processes(server: DevServer | RunningServer, folder: Path) -> Iterator[Processes]:
    procs = Processes(server, folder)
    try:
        yield procs
    finally:
        procs.stop()


@pytest.fixture
def processes(temporal_server: RunningServer, tmp_path: Path) -> Iterator[Processes]:
    yield from _processes(temporal_server, tmp_path)


@pytest.fixture
def own_processes(own_temporal_server: DevServer, tmp_path: Path) -> Iterator[Processes]:
    """The processes of a test that stops the Temporal server: on its own."""
    yield from _processes(own_temporal_server, tmp_path)


def _ready(server: subprocess.Popen[bytes], processes: Processes) -> str:
    """The URL of a ``serve --port 0`` process (where it says it listens), once ready."""
    url = listening_url(server, lambda: processes.log("serve"))
    wait_ready(url, process=server, log=lambda: processes.log("serve"))
    return url


def _open_marks(marks: Path, kind: str) -> list[str]:
    """The pids running a ``kind`` call right now (a begin without its end)."""
    open_: dict[tuple[str, str], int] = {}
    if marks.exists():
        for line in marks.read_text().splitlines():
            edge, k, ref, pid = line.split()
            if k == kind:
                open_[(ref, pid)] = open_.get((ref, pid), 0) + (1 if edge == "begin" else -1)
    return [pid for (_, pid), n in open_.items() if n > 0]


def _events(http: httpx.Client, cid: str) -> list[dict[str, Any]]:
    """The context's events from the start (``Last-Event-ID: 0``) up to the
    last ``TurnCompleted`` now in its log."""
    out: list[dict[str, Any]] = []
    with http.stream(
        "GET", f"/api/contexts/{cid}/events", headers={"Last-Event-ID": "0"}, timeout=30
    ) as r:
        kind = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind not in ("Heartbeat", None):
                out.append(json.loads(line[6:]))
                if kind == "TurnCompleted" and sum(e["kind"] == kind for e in out) == 2:
                    return out
    return out


@pytest.mark.temporal  # seconds: with -m temporal (.ci/run)
def test_a_tool_loop_over_http_on_temporal_and_a_worker_stopped_mid_tool(
    processes: Processes,
) -> None:
    first = processes.start("temporal-worker", "--grace", "20", name="worker1")
    processes.wait_for_line("worker1", "turnfsm temporal-worker: ")
    server = processes.start("serve", "--turns", "temporal", "--port", "0", name="serve")
    url = _ready(server, processes)
    with httpx.Client(verify=loopback_tls(), base_url=url, timeout=60) as http:
        cid = http.post("/api/contexts", json={}).json()["id"]
        r = http.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "pay-1"})
        assert r.status_code == 200, r.text
        turn = r.json()
        assert turn["state"] == "AwaitingToolApproval"
        assert [c["id"] for c in turn["pending_tool_calls"]] == ["c-pay-1"]

        # the approval: the tools run on the worker; SIGTERM reaches it while
        # charge runs: it finishes the call, exits 0, and the second worker
        # takes the rest of the turn (the next model call)
        second = processes.start("temporal-worker", name="worker2")
        processes.wait_for_line("worker2", "turnfsm temporal-worker: ")
        # (the 202 of a call on Temporal comes when its Update returns: at rest)
        approved: list[httpx.Response] = []
        approving = threading.Thread(
            target=lambda: approved.append(
                http.post(f"/api/contexts/{cid}/tools/approve", json={"approve": ["c-pay-1"]})
            )
        )
        approving.start()
        end = time.monotonic() + 30
        while str(first.pid) not in _open_marks(processes.marks, "charge"):
            assert time.monotonic() < end, processes.marks.read_text()
            time.sleep(0.02)
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0, processes.log("worker1")
        assert "turnfsm temporal-worker: stopped (SIGTERM)" in processes.log("worker1")
        assert processes.effects.read_text().split() == ["pay-1", str(first.pid)]

        approving.join(timeout=60)
        assert [r.status_code for r in approved] == [202], approved
        end = time.monotonic() + 60
        while (state := http.get(f"/api/contexts/{cid}/state").json()["state"]) != "Idle":
            assert time.monotonic() < end, state
            time.sleep(0.1)
        messages = http.get(f"/api/contexts/{cid}/messages").json()["messages"]
        texts = ["".join(p.get("text", "") for p in m["message"]["content"]) for m in messages]
        assert texts[0] == "pay-1" and texts[-1] == "done pay-1."
        calls = [c for m in messages for c in (m["message"]["tool_calls"] or [])]
        assert [c["outcome_unknown"] for c in calls if c["tool_name"] == "charge"] == [False]
        results = [m["message"]["tool_result"] for m in messages if m["message"]["tool_result"]]
        assert sorted(r["request_id"] for r in results) == ["c-pay-1", "l-pay-1"]
        assert all(r["success"] for r in results)
        assert "stream" in {k for k in processes.marks.read_text().split() if k == "stream"}

        # the stream from the start: every seq once, each event as the worker wrote it
        events = _events(http, cid)
        spans = [
            (e["first_seq"], e["last_seq"]) if "first_seq" in e else (e["seq"],) * 2 for e in events
        ]
        assert spans[0][0] == 1 and all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans)), (
            spans
        )
        kinds = [e["kind"] for e in events]
        assert kinds.count("TurnCompleted") == 2
        assert kinds.count("ToolResult") == 2

    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) in (0, -signal.SIGTERM)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0, processes.log("worker2")


def _serve(processes: Processes) -> tuple[subprocess.Popen[bytes], str]:
    """A temporal-worker, and the URL of a ``serve --turns temporal``."""
    worker = processes.start("temporal-worker", name="worker")
    processes.wait_for_line("worker", "turnfsm temporal-worker: ")
    server = processes.start("serve", "--turns", "temporal", "--port", "0", name="serve")
    return worker, _ready(server, processes)


def _approve(http: httpx.Client, cid: str, call_id: str) -> httpx.Response:
    """``?wait=true`` approval; again while it is ``409 context_busy``: the
    store shows the context at rest a moment before its workflow has ended
    the call (its last events are being written), as a client sees it."""
    end = time.monotonic() + 10
    while True:
        r = http.post(f"/api/contexts/{cid}/tools/approve?wait=true", json={"approve": [call_id]})
        if r.status_code != 409 or r.json()["error"]["code"] != "context_busy":
            return r
        assert time.monotonic() < end, r.text
        time.sleep(0.1)


def _until_state(http: httpx.Client, cid: str, want: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while (state := http.get(f"/api/contexts/{cid}/state").json()["state"]) != want:
        assert time.monotonic() < end, state
        time.sleep(0.1)


@pytest.mark.temporal  # a process to start: with -m temporal (.ci/run)
def test_a_temporal_worker_stopped_by_ctrl_c_exits_130_and_by_sigterm_0(
    processes: Processes,
) -> None:
    """As every command: Ctrl-C (SIGINT) is 130, a supervisor's SIGTERM a
    clean 0; the stop line names the signal."""
    for signum, code in ((signal.SIGINT, 130), (signal.SIGTERM, 0)):
        name = f"worker-{signum.name}"
        worker = processes.start("temporal-worker", name=name)
        processes.wait_for_line(name, "turnfsm temporal-worker: ")
        worker.send_signal(signum)
        assert worker.wait(timeout=60) == code, processes.log(name)
        assert f"turnfsm temporal-worker: stopped ({signum.name})" in processes.log(name)


@pytest.mark.temporal  # seconds of waiting: with -m temporal (.ci/run)
def test_a_call_on_temporal_answers_202_once_accepted_not_when_the_turn_rests(
    processes: Processes,
) -> None:
    """The model thinks 2 s before it asks for its tools: the 202 comes before
    that (once the workflow accepted the Update); a second message meanwhile is
    refused by the workflow with 409 context_busy; ``?wait=true`` still gives
    the Turn at rest."""
    processes.env["TURNFSM_KILL_THINK"] = "2"
    _, url = _serve(processes)
    with httpx.Client(verify=loopback_tls(), base_url=url, timeout=60) as http:
        cid = http.post("/api/contexts", json={}).json()["id"]
        r = http.post(f"/api/contexts/{cid}/messages", json={"content": "pay-2"})
        assert r.status_code == 202, r.text
        body = r.json()
        assert body["context_id"] == cid and body["message_id"]
        # answered while the model still thinks: no model call has ended yet
        # (the worker writes its mark as the call ends, so a 202 sent after
        # it would find the mark here, however fast or slow the machine)
        marks = processes.marks.read_text() if processes.marks.exists() else ""
        assert "end model pay-2" not in marks, marks
        assert body["state"] != "AwaitingToolApproval"

        busy = http.post(f"/api/contexts/{cid}/messages", json={"content": "again"})
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "context_busy"

        _until_state(http, cid, "AwaitingToolApproval")
        r = _approve(http, cid, "c-pay-2")
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "Idle"
        messages = http.get(f"/api/contexts/{cid}/messages").json()["messages"]
        texts = ["".join(p.get("text", "") for p in m["message"]["content"]) for m in messages]
        assert texts[0] == "pay-2" and texts[-1] == "done pay-2." and "again" not in texts
        assert messages[0]["id"] == body["message_id"]


@pytest.mark.temporal  # seconds of waiting: with -m temporal (.ci/run)
def test_temporal_down_is_503_with_retry_after_and_a_retry_stores_the_message_once(
    own_temporal_server: DevServer, own_processes: Processes
) -> None:
    """With the Temporal server killed, a message is ``503
    temporal_unavailable`` with ``Retry-After`` (reads still work: they are the
    store's); the client posts it again once Temporal is back, and the
    message is stored once. A call accepted before the kill (``?wait=true``)
    waits across it and gives its Turn."""
    own_processes.env["TURNFSM_KILL_THINK"] = "3"
    _, url = _serve(own_processes)
    with httpx.Client(verify=loopback_tls(), base_url=url, timeout=120) as http:
        cid = http.post("/api/contexts", json={}).json()["id"]
        early = http.post("/api/contexts", json={}).json()["id"]
        waited: list[httpx.Response] = []
        waiting = threading.Thread(
            target=lambda: waited.append(
                http.post(f"/api/contexts/{early}/messages?wait=true", json={"content": "pay-4"})
            )
        )
        waiting.start()
        end = time.monotonic() + 30
        while not _open_marks(own_processes.marks, "model"):  # its model call under way
            assert time.monotonic() < end
            time.sleep(0.05)
        own_temporal_server.kill()
        try:
            r = http.post(f"/api/contexts/{cid}/messages", json={"content": "pay-3"})
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "temporal_unavailable"
            assert int(r.headers["Retry-After"]) > 0
            assert "RPCError" not in own_processes.log("serve")
            assert "unexpected_error" not in own_processes.log("serve")
            state = http.get(f"/api/contexts/{cid}/state")
            assert state.status_code == 200 and state.json()["state"] == "Idle"
        finally:
            own_temporal_server.start()
        waiting.join(timeout=120)
        assert [r.status_code for r in waited] == [200], [r.text for r in waited]
        assert waited[0].json()["state"] == "AwaitingToolApproval"
        end = time.monotonic() + 90
        while True:  # the client's retry, as Retry-After says
            r = http.post(f"/api/contexts/{cid}/messages", json={"content": "pay-3"})
            if r.status_code == 202:
                break
            assert r.status_code == 503 and time.monotonic() < end, r.text
            time.sleep(1)
        _until_state(http, cid, "AwaitingToolApproval")
        r = _approve(http, cid, "c-pay-3")
        assert r.status_code == 200 and r.json()["state"] == "Idle", r.text
        messages = http.get(f"/api/contexts/{cid}/messages").json()["messages"]
        users = [m for m in messages if m["message"]["role"] == "user"]
        assert ["".join(p["text"] for p in m["message"]["content"]) for m in users] == ["pay-3"]
        assert own_processes.effects.read_text().split()[::2] == ["pay-3"]
        early_messages = http.get(f"/api/contexts/{early}/messages").json()["messages"]
        assert [m["message"]["role"] for m in early_messages][:1] == ["user"]
        assert sum(m["message"]["role"] == "user" for m in early_messages) == 1


@pytest.mark.temporal  # seconds of waiting: with -m temporal (.ci/run)
def test_a_temporal_server_that_stops_answering_is_503_within_the_bound(
    own_temporal_server: DevServer, own_processes: Processes
) -> None:
    """The Temporal server SIGSTOPped: its connections stay open and nothing
    answers on them (nor on new ones), so the SDK alone would wait for ever.
    A message is ``503 temporal_unavailable`` within ``ACCEPT_WITHIN`` (and
    the grace past it); reads still work; once the server goes on, the
    message posted again is taken."""
    from turnfsm.temporal._faults import ACCEPT_WITHIN, GRACE

    _, url = _serve(own_processes)
    bound = ACCEPT_WITHIN + GRACE + 3.0  # + the server's own work, on a busy machine
    with httpx.Client(verify=loopback_tls(), base_url=url, timeout=bound + 30) as http:
        cid = http.post("/api/contexts", json={}).json()["id"]
        assert own_temporal_server.pid is not None
        os.kill(own_temporal_server.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            r = http.post(f"/api/contexts/{cid}/messages", json={"content": "pay-5"})
            took = time.monotonic() - started
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "temporal_unavailable"
            assert took < bound, took
            assert http.get(f"/api/contexts/{cid}/state").status_code == 200
        finally:
            os.kill(own_temporal_server.pid, signal.SIGCONT)
        end = time.monotonic() + 90
        while True:  # whether the first was accepted is not known: the context says
            if http.get(f"/api/contexts/{cid}/state").json()["state"] != "Idle":
                break
            r = http.post(f"/api/contexts/{cid}/messages", json={"content": "pay-5"})
            if r.status_code == 202:
                break
            assert r.status_code in (409, 503) and time.monotonic() < end, r.text
            time.sleep(1)
        _until_state(http, cid, "AwaitingToolApproval")
    log = own_processes.log("serve")
    assert "Traceback (most recent call last)" not in log
    assert "Exception in ASGI application" not in log


@pytest.mark.temporal  # seconds of waiting: with -m temporal (.ci/run)
def test_a_turn_longer_than_a_poll_of_its_result_is_waited_for(processes: Processes) -> None:
    """A model call longer than one long poll of the Update's result
    (``RPC_TIMEOUT``): the poll runs out at a server that answers its health
    check, so ``?wait=true`` polls again and gives the Turn, not a 503."""
    from turnfsm.temporal._faults import RPC_TIMEOUT

    processes.env["TURNFSM_KILL_THINK"] = str(RPC_TIMEOUT + 3)
    _, url = _serve(processes)
    with httpx.Client(verify=loopback_tls(), base_url=url, timeout=120) as http:
        cid = http.post("/api/contexts", json={}).json()["id"]
        started = time.monotonic()
        r = http.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "pay-6"})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "AwaitingToolApproval"
        assert time.monotonic() - started > RPC_TIMEOUT


@pytest.mark.temporal  # processes and seconds: with -m temporal (.ci/run)
def test_serve_and_workers_keep_payloads_over_the_threshold_in_the_store(
    processes: Processes,
) -> None:
    """A message of 600 KB through ``serve --turns temporal`` and a
    ``temporal-worker``: its Update, the loads, the model requests, the tool
    calls (the model passes the text on as their argument) and the Turn all
    pass the threshold, and the context's stored JSON passes Temporal's limit
    (2 MB) before the approval's call loads it; both processes keep the
    payloads in the SQLite file's table and read each other's, with nothing
    to set up."""
    import sqlite3

    from turnfsm.temporal._payloads import TABLE

    processes.env["TURNFSM_KILL_THINK"] = "0"
    _, url = _serve(processes)
    big = "big-" + "0123456789abcdef" * 37_500
    with httpx.Client(verify=loopback_tls(), base_url=url, timeout=120) as http:
        cid = http.post("/api/contexts", json={}).json()["id"]
        r = http.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": big})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "AwaitingToolApproval"
        r = _approve(http, cid, f"c-{big}")
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "Idle" and r.json()["text"] == f"done {big}."
        messages = http.get(f"/api/contexts/{cid}/messages").json()["messages"]
        texts = ["".join(p.get("text", "") for p in m["message"]["content"]) for m in messages]
        assert texts[0] == big and texts[-1] == f"done {big}."
        assert len(json.dumps(messages)) > 2_000_000  # over Temporal's limit
    with sqlite3.connect(processes.folder / "chats.db") as db:
        sizes = [n for (n,) in db.execute(f"SELECT length(data) FROM {TABLE}")]
    assert len(sizes) >= 5 and min(sizes) > 256 * 1024, sizes


@pytest.mark.temporal  # two processes to start: with -m temporal (.ci/run)
def test_the_openai_compatible_route_runs_its_turns_on_temporal(processes: Processes) -> None:
    """``/v1/chat/completions`` on ``serve --turns temporal`` (the demo model
    on the workers): a client resending its whole ``messages`` list gets its
    answer, and the context holds each message once."""
    processes.common = [a for a in processes.common if a not in MODEL]
    _, url = _serve(processes)
    with httpx.Client(verify=loopback_tls(), base_url=url, timeout=60) as http:
        messages = [{"role": "user", "content": "hello"}]
        first = http.post("/v1/chat/completions", json={"model": "demo", "messages": messages})
        assert first.status_code == 200, first.text
        cid = first.headers["x-turnfsm-context-id"]
        messages += [first.json()["choices"][0]["message"], {"role": "user", "content": "again"}]
        second = http.post(
            "/v1/chat/completions",
            json={"model": "demo", "messages": messages},
            headers={"x-turnfsm-context-id": cid},
        )
        assert second.status_code == 200, second.text
        page = http.get(f"/api/contexts/{cid}/messages").json()
    stored = [n["message"] for n in page["messages"]]
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    assert [m["content"][0]["text"] for m in stored if m["role"] == "user"] == ["hello", "again"]


# ------------------------------------------------------------ temporal-prune


def _prune(
    server: DevServer | RunningServer, store: str, *argv: str
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "turnfsm", "temporal-prune", "--temporal", server.address]
    return subprocess.run(
        [*command, "--store", store, *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _kept(path: Path) -> set[str]:
    import sqlite3

    from turnfsm.temporal._payloads import TABLE

    with contextlib.closing(sqlite3.connect(path)) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (TABLE,)).fetchall():
            return set()  # made with the first payload moved
        return {k for (k,) in db.execute(f"SELECT sha256 FROM {TABLE}")}


def _backdate(path: Path, hours: float) -> None:
    """Every row of the table as if last written ``hours`` ago."""
    import sqlite3
    from datetime import UTC, datetime, timedelta

    from turnfsm.temporal._payloads import TABLE, _stamp

    at = _stamp(datetime.now(UTC) - timedelta(hours=hours))
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(f"UPDATE {TABLE} SET written_at = ?", (at,))


@pytest.mark.temporal  # processes: with -m temporal (.ci/run)
def test_temporal_prune_deletes_what_no_history_of_the_namespaces_given_refers_to(
    own_temporal_server: DevServer, tmp_path: Path
) -> None:
    """Rows referred to by a running workflow in ``default`` (A) and in a
    second namespace (B), and rows no history refers to, one old (C) and one
    new (D): the command keeps A and B while it is given both namespaces,
    deletes C (older than ``--older-than``), then D (``0s``), then B once
    only ``default`` is given; a namespace Temporal does not know deletes
    nothing."""
    from google.protobuf.duration_pb2 import Duration
    from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
    from temporalio.client import Client
    from temporalio.service import RPCError

    from turnfsm import SQLiteStore
    from turnfsm.temporal import StoredPayloadCodec
    from turnfsm.temporal._payloads import payload_table, with_payloads

    path = tmp_path / "chats.db"
    url = f"sqlite:///{path}"
    other = f"prune-{uuid.uuid4().hex[:8]}"
    queue = f"nobody-{uuid.uuid4().hex[:8]}"  # no worker: the workflows wait, running

    def big() -> str:
        return os.urandom(150_000).hex()  # 300 KB of JSON: over the threshold

    async def setup() -> tuple[list[Any], dict[str, str]]:
        store = SQLiteStore(path)
        try:
            client = await Client.connect(own_temporal_server.address)
            await client.workflow_service.register_namespace(
                RegisterNamespaceRequest(
                    namespace=other,
                    workflow_execution_retention_period=Duration(seconds=86400),
                )
            )
            theirs = await Client.connect(own_temporal_server.address, namespace=other)
            handles = []
            rows: dict[str, str] = {}
            for name, c in (("A", client), ("B", theirs)):
                before = _kept(path)
                end = time.monotonic() + 30
                while True:  # a new namespace is known to the frontend after a moment
                    try:
                        handle = await with_payloads(c, store).start_workflow(
                            "turnfsm-prune-test",
                            big(),
                            id=f"prune-{name}-{uuid.uuid4().hex[:8]}",
                            task_queue=queue,
                        )
                        break
                    except RPCError:
                        assert time.monotonic() < end
                        await anyio.sleep(0.5)
                handles.append(handle)
                [rows[name]] = _kept(path) - before
                for _ in range(100):  # listed: visibility may lag a moment
                    if [w async for w in c.list_workflows(f"WorkflowId = '{handle.id}'")]:
                        break
                    await anyio.sleep(0.1)
            codec = StoredPayloadCodec(payload_table(store))
            rows["C"] = await _ref_of(codec, big())
            return handles, rows
        finally:
            await store.aclose()

    async def orphan() -> str:
        store = SQLiteStore(path)
        try:
            return await _ref_of(StoredPayloadCodec(payload_table(store)), big())
        finally:
            await store.aclose()

    handles, rows = anyio.run(setup)
    try:
        _backdate(path, 2)
        rows["D"] = anyio.run(orphan)  # new: younger than the default hour
        assert _kept(path) == set(rows.values())
        both = ["--temporal-namespace", "default", "--temporal-namespace", other]

        ran = _prune(own_temporal_server, url, *both)
        assert ran.returncode == 0, ran.stderr
        line = ran.stdout.strip()
        assert re.fullmatch(
            r"deleted 1 payload, kept 2 still referred to, read \d+ histories", line
        ), line
        histories = int(line.split()[-2])
        assert histories >= 2
        assert ran.stdout.count("\n") == 1
        assert _kept(path) == {rows["A"], rows["B"], rows["D"]}

        ran = _prune(own_temporal_server, url, *both, "--older-than", "0s", "--json")
        assert ran.returncode == 0, ran.stderr
        out = json.loads(ran.stdout)
        assert out["deleted"] == 1 and out["kept"] == 2 and out["histories"] >= 2, out
        assert set(out) == {"deleted", "kept", "histories"}
        assert _kept(path) == {rows["A"], rows["B"]}

        # a namespace Temporal does not know: nothing deleted, one line, exit 2
        rows["E"] = anyio.run(orphan)
        ran = _prune(
            own_temporal_server,
            url,
            *both,
            "--temporal-namespace",
            "nope-none",
            "--older-than",
            "0s",
        )
        assert ran.returncode == 2, (ran.stdout, ran.stderr)
        assert ran.stdout == ""
        [err] = ran.stderr.splitlines()
        assert err == (
            f"turnfsm temporal-prune: --temporal {own_temporal_server.address}: cannot read the "
            f"workflow histories (namespaces default, {other}, nope-none): "
            "Namespace nope-none is not found; nothing was deleted"
        ), err
        assert _kept(path) == {rows["A"], rows["B"], rows["E"]}

        # only default given: B, which only the other namespace's history
        # refers to, goes (why every namespace of the store must be given)
        ran = _prune(own_temporal_server, url, "--older-than", "0s", "--json")
        assert ran.returncode == 0, ran.stderr
        out = json.loads(ran.stdout)
        assert out["deleted"] == 2 and out["kept"] == 1, out
        assert _kept(path) == {rows["A"]}
    finally:

        async def end() -> None:
            for handle in handles:
                await handle.terminate()

        anyio.run(end)


async def _ref_of(codec: Any, value: str) -> str:
    """``value`` through ``codec`` as a JSON payload: the key of its row."""
    from temporalio.converter import DataConverter

    [payload] = await DataConverter.default.encode([value])
    [ref] = await codec.encode([payload])
    return str(ref.metadata["sha256"].decode())
