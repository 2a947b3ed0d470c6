"""Event streams across processes on one PostgreSQL database: two real
``turnfsm serve`` processes, and a plain engine with the event relay
(``docs/server.md``, "Several processes")."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import httpx
import pytest

pytest.importorskip("psycopg")

from kit import (
    READY_WITHIN,
    listening_url,
    wait_ready,
)  # tests/ is on sys.path (no tests/__init__.py)
from storage.pg import Cluster, pg_cluster

from .conftest import TOKENS, loopback_tls, serve_in_thread
from .test_events import Sse, read_events, until
from .test_rest import create, wait_rest

__all__ = ["pg_cluster"]

DELAY = 0.1
"""Seconds between the demo model's chunks: a turn streams for about a second."""


class Served:
    """``turnfsm serve`` in a process of its own."""

    def __init__(self, store: str, tokens: Path, log: Path, *extra: str) -> None:
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "turnfsm",
                "serve",
                "--store",
                store,
                "--port",
                "0",
                "--tokens",
                str(tokens),
                "--demo-delay",
                str(DELAY),
                "--heartbeat",
                "0.5",
                *extra,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""},
        )
        self.log_path = log
        self.url = ""  # where it says it listens: wait_ready() reads it

    def wait_ready(self) -> None:
        self.url = listening_url(self.proc, self.log_path)
        wait_ready(self.url, process=self.proc, log=self.log_path)

    def client(self, token: str = "token-alice") -> httpx.Client:
        return httpx.Client(
            verify=loopback_tls(),
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()


@pytest.fixture(scope="module")
def pair(
    pg_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Served, Served, str]]:
    """Servers A and B on one database schema, and its URL (each test makes
    contexts of its own)."""
    url = pg_cluster.new_schema()
    folder = tmp_path_factory.mktemp("processes")
    tokens = folder / "tokens"
    tokens.write_text("".join(f"{t} {who}\n" for t, who in TOKENS.items()))
    a = Served(url, tokens, folder / "a.log")
    b = Served(url, tokens, folder / "b.log")
    try:
        a.wait_ready()
        b.wait_ready()
        yield a, b, url
    finally:
        a.stop()
        b.stop()


def stream_until(
    c: httpx.Client, cid: str, done: str, opened: threading.Event | None = None, **headers: str
) -> list[Sse]:
    """The stream's events up to ``done``; ``opened`` is set at its first event
    (every stream begins with a Heartbeat, sent once it is subscribed)."""
    with c.stream("GET", f"/api/contexts/{cid}/events", headers=headers) as r:
        assert r.status_code == 200
        events = read_events(r)
        first = next(events, None)
        if opened is not None:
            opened.set()
        head = [] if first is None else [first]
        return [e for e in until(itertools.chain(head, events), done) if e.event != "Heartbeat"]


def open_streams(*opened: threading.Event) -> None:
    """Return once every stream has begun (a stream that never does fails the test)."""
    for event in opened:
        assert event.wait(READY_WITHIN), "a stream did not open"


def post_watched(
    ca: httpx.Client, cb: httpx.Client, cid: str, content: str
) -> tuple[httpx.Response, list[Sse], list[Sse]]:
    """A message posted to B while a stream on each server is open: B's answer
    and each stream's events up to the turn's end (A's, then B's)."""
    with ThreadPoolExecutor(2) as pool:
        opened = threading.Event(), threading.Event()
        on_a = pool.submit(stream_until, ca, cid, "TurnCompleted", opened[0])
        on_b = pool.submit(stream_until, cb, cid, "TurnCompleted", opened[1])
        open_streams(*opened)
        posted = cb.post(f"/api/contexts/{cid}/messages", json={"content": content})
        assert posted.is_success, posted.text  # said here, not as the streams' timeout
        return posted, on_a.result(30), on_b.result(30)


def seqs(events: list[Sse]) -> list[int]:
    return [int(e.id or 0) for e in events]


def test_a_stream_on_one_server_shows_a_turn_run_on_another(
    pair: tuple[Served, Served, str],
) -> None:
    a, b = pair[0], pair[1]
    with a.client() as ca, b.client() as cb:
        cid = create(ca)
        r, seen_a, seen_b = post_watched(ca, cb, cid, "hello")
        assert r.status_code == 202, r.text
        text = cb.get(f"/api/contexts/{cid}/messages").json()["messages"][-1]
    # A shows what B's own stream shows: the same events, seqs and data, deltas
    # included (they came in the notes), nothing missing, nothing twice
    assert [(e.id, e.event, e.data) for e in seen_a] == [(e.id, e.event, e.data) for e in seen_b]
    assert seqs(seen_a) == list(range(seqs(seen_a)[0], seqs(seen_a)[0] + len(seen_a)))
    deltas = [e.data["delta"] for e in seen_a if e.event == "ContentDelta"]
    assert len(deltas) > 3 and "".join(deltas) == text["message"]["content"][0]["text"]
    assert "Resync" not in {e.event for e in seen_a}


def test_reconnect_to_the_server_that_runs_the_turn_loses_nothing_durable(
    pair: tuple[Served, Served, str],
) -> None:
    a, b = pair[0], pair[1]
    with a.client() as ca, b.client() as cb:
        cid = create(ca)
        first: list[Sse] = []
        with ca.stream("GET", f"/api/contexts/{cid}/events") as r:
            events = read_events(r)
            assert next(events).event == "Heartbeat"  # the stream is open
            posted = cb.post(f"/api/contexts/{cid}/messages", json={"content": "hello"})
            assert posted.status_code == 202, posted.text
            for n, ev in enumerate(events):  # away mid-turn, after a few deltas
                assert n < 100, [e.event for e in first]
                if ev.event == "Heartbeat":
                    continue
                first.append(ev)
                if sum(e.event == "ContentDelta" for e in first) == 3:
                    break
        last = first[-1].id
        assert last is not None
        assert cb.get(f"/api/contexts/{cid}/state").json()["running"]  # still mid-turn
        second = stream_until(cb, cid, "TurnCompleted", **{"Last-Event-ID": last})
        wait_rest(cb, cid)
        audit = [json.loads(x) for x in cb.get(f"/api/contexts/{cid}/audit").text.splitlines()]
        stored = cb.get(f"/api/contexts/{cid}/messages").json()["messages"]
    both = first + second
    assert seqs(both) == list(range(1, len(both) + 1))  # no gap, no repeat
    assert "Resync" not in {e.event for e in both}
    seen = [(e.data["from_state"], e.data["to_state"]) for e in both if e.event == "StateChanged"]
    assert seen == [(x["from"], x["to"]) for x in audit]
    completed = [e.data["message_id"] for e in both if e.event == "MessageCompleted"]
    assert completed == [stored[-1]["id"]]
    deltas = "".join(e.data["delta"] for e in both if e.event == "ContentDelta")
    assert deltas == stored[-1]["message"]["content"][0]["text"]


async def plain_engine_turn(url: str, cid: str, delay: float) -> None:
    """A turn on a plain engine (no server) with the event relay: this process
    is not the servers', so its events reach their streams only through the
    relay's notes."""
    from turnfsm import Engine
    from turnfsm.adapters.llm.demo import DemoLLM
    from turnfsm.relay import EventRelay
    from turnfsm.storage._eventlog import open_event_log

    with anyio.fail_after(60):
        engine = Engine(llm=DemoLLM(delay=delay), store=url)
        log = open_event_log(engine.store)
        await log.open()
        async with engine, EventRelay(engine, log):
            await engine.send(cid, "hello")
        await log.aclose()


def test_a_plain_engine_with_the_relay_reaches_a_server_stream(
    pair: tuple[Served, Served, str],
) -> None:
    a, url = pair[0], pair[2]
    with a.client() as ca:
        cid = create(ca)
        with ca.stream("GET", f"/api/contexts/{cid}/events") as r:
            events = read_events(r)
            assert next(events).event == "Heartbeat"
            anyio.run(plain_engine_turn, url, cid, DELAY / 4)
            got = [e for e in until(events, "TurnCompleted") if e.event != "Heartbeat"]
    assert seqs(got) == list(range(1, len(got) + 1))
    assert {"StateChanged", "ContentDelta", "MessageCompleted"} <= {e.event for e in got}
    assert got[-1].data["stop_reason"] == "completed"


def test_on_sqlite_another_process_is_seen_by_polling_the_log(tmp_path: Path) -> None:
    """Two servers on one SQLite file, A in this process and B in one of its
    own: a stream on A shows B's turn from the log (polled), its durable events
    as they were, its deltas as one Resync."""
    from turnfsm import Engine
    from turnfsm.adapters.llm.demo import DemoLLM
    from turnfsm.server import ServerConfig, create_app

    store = f"sqlite:///{tmp_path / 'shared.db'}"
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{t} {who}\n" for t, who in TOKENS.items()))
    app = create_app(
        lambda: Engine(llm=DemoLLM(delay=DELAY), store=store),
        ServerConfig(tokens=dict(TOKENS), heartbeat=0.5),
    )
    b = Served(store, tokens, tmp_path / "b.log")
    try:
        for url in serve_in_thread(app):
            b.wait_ready()
            auth = {"Authorization": "Bearer token-alice"}
            with (
                httpx.Client(verify=loopback_tls(), base_url=url, headers=auth, timeout=30) as ca,
                b.client() as cb,
            ):
                cid = create(ca)
                posted, seen_a, seen_b = post_watched(ca, cb, cid, "hi")
                assert posted.is_success, posted.text
    finally:
        b.stop()
    durable_b = [(e.id, e.event, e.data) for e in seen_b if e.event != "ContentDelta"]
    durable_a = [(e.id, e.event, e.data) for e in seen_a if e.event != "Resync"]
    assert durable_a == durable_b
    resyncs = [e.data for e in seen_a if e.event == "Resync"]
    deltas = [int(e.id or 0) for e in seen_b if e.event == "ContentDelta"]
    assert [(r["first_seq"], r["last_seq"]) for r in resyncs] == [(deltas[0], deltas[-1])]


def test_a_turn_handed_to_a_worker_streams_on_the_server(
    pg_cluster: Cluster, tmp_path: Path
) -> None:
    """A server with ``turns="workers"`` (``serve --turns workers``, here in this
    process) and a ``turnfsm worker`` process: the message is posted to the
    server, the turn runs on the worker, and the server's stream shows it live
    (the worker relays its events), deltas included."""
    from turnfsm import Engine
    from turnfsm.adapters.llm.demo import DemoLLM
    from turnfsm.server import ServerConfig, create_app

    url = pg_cluster.new_schema()
    app = create_app(
        lambda: Engine(llm=DemoLLM(delay=DELAY), store=url),
        ServerConfig(tokens=dict(TOKENS), heartbeat=0.5, turns="workers"),
    )
    log = (tmp_path / "worker.log").open("w")
    argv = ["worker", "--store", url, "--poll", "0.2", "--demo-delay", str(DELAY)]
    worker = subprocess.Popen(
        [sys.executable, "-m", "turnfsm", *argv],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""},
    )
    try:
        for served in serve_in_thread(app):
            auth = {"Authorization": "Bearer token-alice"}
            with httpx.Client(
                verify=loopback_tls(), base_url=served, headers=auth, timeout=30
            ) as c:
                cid = create(c)
                with ThreadPoolExecutor(1) as pool:
                    opened = threading.Event()
                    streamed = pool.submit(stream_until, c, cid, "TurnCompleted", opened)
                    open_streams(opened)
                    r = c.post(f"/api/contexts/{cid}/messages", json={"content": "hello"})
                    assert r.status_code == 202, r.text
                    got = streamed.result(60)
                stored = c.get(f"/api/contexts/{cid}/messages").json()["messages"]
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, (tmp_path / "worker.log").read_text()
        log.close()
    assert seqs(got) == list(range(seqs(got)[0], seqs(got)[0] + len(got)))
    assert "Resync" not in {e.event for e in got}
    deltas = "".join(e.data["delta"] for e in got if e.event == "ContentDelta")
    assert len(deltas) > 3 and deltas == stored[-1]["message"]["content"][0]["text"]
