"""``POST /api/contexts/{id}/messages`` with an ``output_schema``: the turn's
typed answer comes back as ``output``, a bad schema is a 422 naming its path,
and the web view shows the typed answer; on a real uvicorn on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.conftest import loopback_tls, serve_in_thread
from turnfsm import Engine
from turnfsm.adapters.llm import LLMRequest
from turnfsm.testing import ScriptedLLM

CITY = {
    "title": "City",
    "type": "object",
    "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["name", "population"],
}
PARIS = {"name": "Paris", "population": 2100000}


def _answer(request: LLMRequest) -> dict[str, Any]:
    """Plain text without an output type; with one, a first answer that
    misses ``population``, and a valid one once the errors came back."""
    if request.output is None:
        return {"text": "plain words"}
    last_user = next(m for m in reversed(request.messages) if m["role"] == "user")
    if "does not match" in last_user["content"]:
        return {"text": json.dumps(PARIS)}
    return {"text": '{"name": "Paris"}'}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from turnfsm.server import ServerConfig, create_app

    db: Path = tmp_path_factory.mktemp("typed") / "server.db"
    app = create_app(
        lambda: Engine(llm=ScriptedLLM(_answer), store=f"sqlite:///{db}"),
        ServerConfig(tokens={"token-alice": "alice"}),
    )
    yield from serve_in_thread(app)


def _client(url: str) -> httpx.Client:
    return httpx.Client(
        verify=loopback_tls(),
        base_url=url,
        headers={"Authorization": "Bearer token-alice"},
        timeout=30,
    )


def _context(api: httpx.Client) -> str:
    made = api.post("/api/contexts", json={})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def test_a_typed_message_returns_its_output(url: str) -> None:
    with _client(url) as api:
        cid = _context(api)
        sent = api.post(
            f"/api/contexts/{cid}/messages?wait=true",
            json={"content": "The capital of France?", "output_schema": CITY},
        )
        assert sent.status_code == 200, sent.text
        body = sent.json()
        assert body["state"] == "Idle" and body["output"] == PARIS
        assert body["states"] == [
            "ProcessingUserMessage",
            "AwaitingLLMResponse",
            "ProcessingLLMResponse",
            "AwaitingLLMResponse",
            "ProcessingLLMResponse",
            "Idle",
        ]
        errors = body["messages"][2]["metadata"]["extra"]["output_errors"]
        assert errors == [{"path": "$", "message": "'population' is a required property"}]
        plain = api.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "hi"})
        assert plain.status_code == 200 and plain.json()["output"] is None
        assert plain.json()["text"] == "plain words"
        spent = api.post(
            f"/api/contexts/{cid}/messages?wait=true",
            json={"content": "again", "output_schema": CITY, "output_retries": 0},
        )
        assert spent.json()["state"] == "PermanentFailure" and spent.json()["output"] is None
        assert "does not match output type City" in spent.json()["error"]


def test_a_bad_schema_is_a_422_naming_its_path(url: str) -> None:
    with _client(url) as api:
        cid = _context(api)
        bad = {"type": "object", "properties": {"n": {"type": "integr"}}}
        sent = api.post(
            f"/api/contexts/{cid}/messages", json={"content": "hi", "output_schema": bad}
        )
        assert sent.status_code == 422, sent.text
        error = sent.json()["error"]
        assert error["where"] == "body.output_schema.properties.n.type"
        assert "not a valid JSON Schema" in error["message"]
        retries = api.post(
            f"/api/contexts/{cid}/messages",
            json={"content": "hi", "output_schema": CITY, "output_retries": -1},
        )
        assert retries.status_code == 422 and "output_retries" in retries.json()["error"]["where"]
        # nothing was stored for either
        page = api.get(f"/api/contexts/{cid}/messages").json()
        assert page["messages"] == []


def test_openapi_names_the_fields(url: str) -> None:
    with _client(url) as api:
        schemas = api.get("/openapi.json").json()["components"]["schemas"]
    assert "output_schema" in schemas["MessageIn"]["properties"]
    assert "output_retries" in schemas["MessageIn"]["properties"]
    assert "output" in schemas["TurnOut"]["properties"]


def test_the_web_view_shows_the_typed_answer(url: str) -> None:
    with _client(url) as api:
        cid = _context(api)
        api.post(
            f"/api/contexts/{cid}/messages?wait=true",
            json={"content": "The capital of France?", "output_schema": CITY},
        )
    with httpx.Client(
        verify=loopback_tls(), base_url=url, cookies={"turnfsm_token": "token-alice"}, timeout=30
    ) as tab:
        page = tab.get(f"/contexts/{cid}")
    assert page.status_code == 200, page.text
    html = page.text
    assert html.count("Typed answer: <code>City</code>") == 2  # the invalid one and the valid one
    assert "&#34;population&#34;: 2100000" in html or "&quot;population&quot;: 2100000" in html
    assert "Sent back" in html


@pytest.mark.anyio
async def test_a_turn_a_worker_ran_is_read_back_with_its_output(tmp_path: Path) -> None:
    from turnfsm.server._handoff import wait_for_rest
    from turnfsm.server._models import TurnOut

    store = f"sqlite:///{tmp_path / 'chats.db'}"
    async with Engine(llm=ScriptedLLM([]), store=store) as server:
        cid = await server.create_context()
        mid = await server.submit(cid, "Paris?", output_type=CITY)
        async with Engine(llm=ScriptedLLM(_answer), store=store) as worker:
            assert (await worker.resume(cid)).output == PARIS
        turn = await wait_for_rest(server, cid, mid)
    assert turn.state == "Idle" and turn.output == PARIS
    assert TurnOut.of(turn).output == PARIS
