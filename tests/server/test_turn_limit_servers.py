"""``--max-turns-per-tenant`` across servers: two ``turnfsm serve`` on one
PostgreSQL database count each other's turns (each with its own connection,
run in this process), and a server process that is killed gives its slots
back at once (docs/server.md, "Tenants and tokens")."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kit import serve_in_process  # tests/ is on sys.path (no tests/__init__.py)
from storage.pg import Cluster, pg_cluster

from .conftest import TOKENS
from .test_processes import DELAY, Served
from .test_rest import create, wait_rest

__all__ = ["pg_cluster"]

STORY = {"content": "Tell me a story"}
"""The demo model answers it over about a second (``--demo-delay``)."""


class Here:
    """``turnfsm serve`` with :class:`Served`'s options, in this process
    (``serve_in_process``): a server on the database as any other, where the
    process is not what a test looks at."""

    client = Served.client

    def __init__(self, store: str, tokens: Path, *extra: str) -> None:
        argv = ["--store", store, "--port", "0", "--tokens", str(tokens)]
        argv += ["--demo-delay", str(DELAY), "--heartbeat", "0.5", *extra]
        self._running = contextlib.ExitStack()
        env = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""}
        self.url = self._running.enter_context(serve_in_process(*argv, env=env)).url

    def stop(self) -> None:
        self._running.close()


LIMIT = ("--max-turns-per-tenant", "1")


@pytest.fixture
def store(pg_cluster: Cluster, tmp_path: Path) -> tuple[str, Path]:
    """A database schema of its own, and the tokens file."""
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{t} {who}\n" for t, who in TOKENS.items()))
    return pg_cluster.new_schema(), tokens


@pytest.fixture
def two(store: tuple[str, Path]) -> Iterator[tuple[Here, Here]]:
    """Two servers in this process on one database."""
    a = Here(*store, *LIMIT)
    try:
        b = Here(*store, *LIMIT)
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


@pytest.fixture
def killed_and_here(store: tuple[str, Path], tmp_path: Path) -> Iterator[tuple[Served, Here]]:
    """A server in a process of its own, to be killed, and one in this process."""
    a = Served(*store, tmp_path / "a.log", *LIMIT)
    try:
        a.wait_ready()
        b = Here(*store, *LIMIT)
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        if a.proc.poll() is None:
            a.stop()


def refused(r: httpx.Response) -> bool:
    if r.status_code != 429:
        return False
    assert r.headers["retry-after"] == "1"
    assert r.json()["error"]["code"] == "too_many_turns"
    return True


def test_the_limit_counts_the_turns_of_both_servers(two: tuple[Here, Here]) -> None:
    a, b = two
    with a.client() as on_a, b.client() as on_b, b.client("token-bob") as bob_on_b:
        first, second = create(on_a), create(on_b)
        contexts = {c["id"] for c in on_b.get("/api/contexts").json()["contexts"]}
        assert on_a.post(f"/api/contexts/{first}/messages", json=STORY).status_code == 202
        # alice's one turn runs on A: B refuses her next one, before storing anything
        assert refused(on_b.post(f"/api/contexts/{second}/messages", json=STORY))
        assert on_b.get(f"/api/contexts/{second}/messages").json()["messages"] == []
        assert refused(
            on_b.post("/api/chat", json={"messages": [{"role": "user", "content": "hi"}]})
        )
        made = {c["id"] for c in on_b.get("/api/contexts").json()["contexts"]}
        assert made == contexts  # no context made
        # the limit is per tenant: bob's turn runs on B meanwhile
        theirs = create(bob_on_b)
        r = bob_on_b.post(f"/api/contexts/{theirs}/messages", json={"content": "hi"})
        assert r.status_code == 202, r.text
        # A's turn ends: its slot is free for B
        wait_rest(on_a, first)
        r = on_b.post(f"/api/contexts/{second}/messages?wait=true", json={"content": "hi"})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "Idle"
        # a new context's turn: its slot, taken before the context is made, is the
        # one the turn runs on, and is given back when it ends (A may go on at once)
        chat = {"messages": [{"role": "user", "content": "hi"}]}
        r = on_b.post("/api/chat?wait=true", json=chat)
        assert r.status_code == 200, r.text
        r = on_a.post(f"/api/contexts/{first}/messages?wait=true", json={"content": "hi"})
        assert r.status_code == 200, r.text


def test_a_killed_server_gives_its_slots_back(killed_and_here: tuple[Served, Here]) -> None:
    a, b = killed_and_here
    with a.client() as on_a, b.client() as on_b:
        first, second = create(on_a), create(on_b)
        assert on_a.post(f"/api/contexts/{first}/messages", json=STORY).status_code == 202
        assert refused(on_b.post(f"/api/contexts/{second}/messages", json=STORY))
        a.proc.send_signal(signal.SIGKILL)  # mid-turn: no shutdown, no release
        a.proc.wait(10)
        a.log.close()
        deadline = time.monotonic() + 10
        while True:
            r = on_b.post(f"/api/contexts/{second}/messages", json={"content": "hi"})
            if r.status_code == 202:
                break
            assert refused(r), r.text
            assert time.monotonic() < deadline, "the dead server's slot was not given back"
            time.sleep(0.1)
        wait_rest(on_b, second)
