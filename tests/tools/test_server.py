"""A sync tool that sleeps, on a real server (uvicorn on 127.0.0.1, a real HTTP
client): the server answers its health check, another context's page and the
web view's Stop while the tool sleeps in its worker thread; the stopped turn
keeps the tool's late result out of history."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from kit import loopback_tls, skip_without  # tests/ is on sys.path

pytest.importorskip("jinja2")

from server.conftest import serve_in_thread  # tests/ is on sys.path

from turnfsm import Engine, tool
from turnfsm.testing import ScriptedLLM

skip_without("fastapi")

TOKENS = {"token-alice": "alice"}
WATCHDOG = 60.0
"""Seconds after which the sleeping tool is let go whatever happens, so that a
server that froze fails the test instead of hanging it."""


@dataclass
class Sleeper:
    entered: threading.Event
    release: threading.Event
    woke: threading.Event
    watchdog_fired: threading.Event


@pytest.fixture
def sleeper() -> Iterator[Sleeper]:
    s = Sleeper(threading.Event(), threading.Event(), threading.Event(), threading.Event())

    def fire() -> None:
        s.watchdog_fired.set()
        s.release.set()

    timer = threading.Timer(WATCHDOG, fire)
    timer.daemon = True
    timer.start()
    yield s
    timer.cancel()
    s.release.set()


@pytest.fixture
def url(tmp_path: Path, sleeper: Sleeper) -> Iterator[str]:
    from turnfsm.server import ServerConfig, create_app

    @tool(timeout=None)
    def slow_lookup(city: str) -> dict[str, Any]:
        """Look a city up in a slow directory (a plain def: it blocks)."""
        sleeper.entered.set()
        sleeper.release.wait()
        sleeper.woke.set()
        return {"city": city, "found": True}

    answers = [
        {"text": "Hello from the other context."},
        {"tool_calls": [{"id": "t1", "name": "slow_lookup", "arguments": {"city": "Oslo"}}]},
        {"text": "never reached: the turn is stopped"},
    ]
    db = tmp_path / "server.db"
    app = create_app(
        lambda: Engine(llm=ScriptedLLM(answers), tools=[slow_lookup], store=f"sqlite:///{db}"),
        ServerConfig(tokens=dict(TOKENS), heartbeat=0.5),
    )
    yield from serve_in_thread(app)


def messages_of(api: httpx.Client, cid: str) -> list[dict[str, Any]]:
    page = api.get(f"/api/contexts/{cid}/messages").json()
    return [node["message"] for node in page["messages"]]


def test_the_server_answers_while_a_sync_tool_sleeps(url: str, sleeper: Sleeper) -> None:
    api = httpx.Client(
        verify=loopback_tls(),
        base_url=url,
        headers={"Authorization": "Bearer token-alice"},
        timeout=90,
    )
    page = httpx.Client(
        base_url=url, cookies={"turnfsm_token": "token-alice"}, headers={"Origin": url}, timeout=90
    )
    with api, page:
        other = api.post("/api/contexts", json={"title": "other"}).json()["id"]
        done = api.post(f"/api/contexts/{other}/messages?wait=true", json={"content": "hi"})
        assert done.json()["state"] == "Idle", done.text
        cid = api.post("/api/contexts", json={"title": "slow"}).json()["id"]
        accepted = api.post(f"/api/contexts/{cid}/messages", json={"content": "Find Oslo"})
        assert accepted.status_code == 202, accepted.text
        assert sleeper.entered.wait(WATCHDOG)

        # the tool sleeps: every one of these is answered before it wakes
        assert api.get("/healthz").status_code == 200
        assert api.get("/readyz").status_code == 200
        messages = messages_of(api, other)
        assert [m["content"][0]["text"] for m in messages] == [
            "hi",
            "Hello from the other context.",
        ]
        assert "Hello from the other context." in page.get(f"/contexts/{other}").text
        assert api.get(f"/api/contexts/{cid}/state").json()["state"] == "ExecutingTools"
        assert page.get(f"/contexts/{cid}").status_code == 200
        stopped = page.post(  # the Stop button's form: no fields
            f"/contexts/{cid}/cancel",
            content=b"",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            follow_redirects=True,
        )
        assert stopped.status_code == 200, stopped.text
        assert not sleeper.woke.is_set()
        assert not sleeper.watchdog_fired.is_set(), "the server answered only when the tool woke"

        # stopped: Idle, the call closed as cancelled; the thread sleeps on
        assert api.get(f"/api/contexts/{cid}/state").json()["state"] == "Idle"
        results = [m["tool_result"] for m in messages_of(api, cid) if m["tool_result"]]
        assert len(results) == 1
        assert results[0]["success"] is False
        assert "cancelled" in str(results[0]["result"])

        # the thread runs to its end; its result is dropped
        sleeper.release.set()
        assert sleeper.woke.wait(WATCHDOG)
        assert [m["tool_result"] for m in messages_of(api, cid) if m["tool_result"]] == results
        assert api.get(f"/api/contexts/{cid}/state").json()["state"] == "Idle"
