"""``--max-turns-per-tenant``: a turn over the tenant's limit is ``429`` with ``Retry-After``."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from turnfsm import Engine
from turnfsm.adapters.llm.demo import DemoLLM
from turnfsm.cli._demo import get_weather

from .conftest import TOKENS, Running, serve_in_thread


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path_factory.mktemp("limit") / "server.db"

    def factory() -> Engine:
        # slow enough that a turn is still running when the next request comes
        return Engine(llm=DemoLLM(delay=0.1), tools=[get_weather], store=f"sqlite:///{db}")

    app = create_app(factory, ServerConfig(tokens=dict(TOKENS), max_turns_per_tenant=1))
    for url in serve_in_thread(app):
        yield Running(url, db)


def new_context(c: httpx.Client) -> str:
    r = c.post("/api/contexts", json={"system_prompt": "You talk."})
    assert r.status_code == 201, r.text
    cid: str = r.json()["id"]
    return cid


def wait_idle(c: httpx.Client, cid: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        st = c.get(f"/api/contexts/{cid}/state").json()
        if not st["running"] and st["state"] == "Idle":
            return
        assert time.monotonic() < deadline, st
        time.sleep(0.05)


def test_a_turn_over_the_limit_is_429(slow: Running) -> None:
    with slow.client() as alice, slow.client("token-bob") as bob:
        first, second = new_context(alice), new_context(alice)
        r = alice.post(f"/api/contexts/{first}/messages", json={"content": "Tell me a story"})
        assert r.status_code == 202, r.text
        assert alice.get(f"/api/contexts/{first}/state").json()["running"] is True

        for refused in (
            alice.post(f"/api/contexts/{second}/messages", json={"content": "Hello"}),
            alice.post("/api/chat", json={"messages": [{"role": "user", "content": "Hello"}]}),
            alice.post(f"/api/contexts/{second}/children", json={"task": "Hello"}),
            alice.post(
                "/v1/chat/completions",
                json={"model": "turnfsm", "messages": [{"role": "user", "content": "Hello"}]},
            ),
        ):
            assert refused.status_code == 429, refused.text
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "too_many_turns"
        # the refused message was not stored
        assert alice.get(f"/api/contexts/{second}/messages").json()["messages"] == []
        assert alice.get(f"/api/contexts/{second}/children").json() == []  # no child made

        # the limit is per tenant: bob's turn runs meanwhile
        r = bob.post(f"/api/contexts/{new_context(bob)}/messages", json={"content": "Hello"})
        assert r.status_code == 202, r.text

        wait_idle(alice, first)
        r = alice.post(f"/api/contexts/{second}/messages?wait=true", json={"content": "Hello"})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "Idle"
