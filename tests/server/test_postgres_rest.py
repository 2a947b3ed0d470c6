"""The REST API and its tenants on a PostgreSQL store: the tenant table and the
event log live in the store's database (``docs/server.md``, "Several processes")."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("psycopg")

from storage.pg import Cluster, pg_cluster  # tests/ is on sys.path (no tests/__init__.py)

from turnfsm import Engine
from turnfsm.adapters.llm.demo import DemoLLM
from turnfsm.cli._demo import get_weather

from .conftest import TOKENS, Running, serve_in_thread
from .test_events import read_events, until
from .test_rest import create, test_lifecycle, test_tenants_are_isolated_on_every_endpoint

__all__ = ["pg_cluster", "test_lifecycle", "test_tenants_are_isolated_on_every_endpoint"]


@pytest.fixture(scope="module")
def pg_server_url(pg_cluster: Cluster) -> str:
    return pg_cluster.new_schema()


@pytest.fixture(scope="module")
def server(pg_server_url: str) -> Iterator[Running]:
    """The fixture of tests/server/conftest.py, on a PostgreSQL schema of its own:
    the imported tests above run against it."""
    from turnfsm.server import ServerConfig, create_app

    app = create_app(
        lambda: Engine(llm=DemoLLM(delay=0.0), tools=[get_weather], store=pg_server_url),
        ServerConfig(tokens=dict(TOKENS), max_body=64_000, heartbeat=0.5),
    )
    for url in serve_in_thread(app):
        yield Running(url, Path("/nonexistent"))


def sql(url: str, query: str) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return list(conn.execute(query.encode()).fetchall())


def test_tenants_and_events_are_tables_of_the_database(server: Running, pg_server_url: str) -> None:
    with server.client("token-alice") as alice, server.client("token-bob") as bob:
        cid = create(alice)
        with alice.stream("GET", f"/api/contexts/{cid}/events") as r:
            events = read_events(r)
            alice.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "hi"})
            got = [e for e in until(events, "TurnCompleted") if e.event != "Heartbeat"]
        assert bob.get(f"/api/contexts/{cid}").status_code == 404
    tenants = sql(
        pg_server_url, f"SELECT tenant FROM server_context_tenants WHERE context_id = '{cid}'"
    )
    assert tenants == [("alice",)]
    durable = [(int(e.id or 0), e.event) for e in got if e.event != "ContentDelta"]
    rows: list[tuple[object, ...]] = []
    for _ in range(100):  # the relay writes behind the turn
        rows = sql(
            pg_server_url,
            f"SELECT seq, kind FROM server_events WHERE context_id = '{cid}' ORDER BY seq",
        )
        if len(rows) >= len(durable):
            break
        time.sleep(0.05)
    # every durable event the stream sent, at its seq; no delta
    assert [(int(str(s)), str(k)) for s, k in rows] == durable
