"""What a new user meets first: the model a context shows is the one sent
upstream, whatever made the context; a call waiting for approval shows as
pending; a queued turn is "busy"; ids of one format; an icon; the 202 of
``/api/chat`` names its message (docs/server.md)."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from turnfsm import Engine
from turnfsm.adapters.llm.demo import DemoLLM
from turnfsm.cli._demo import get_weather
from turnfsm.model import LLMChunk, LLMRequest

from .conftest import loopback_tls, serve_in_thread


class Recording:
    """The demo model, keeping the model name each request carried."""

    def __init__(self) -> None:
        self.inner = DemoLLM(delay=0.0)
        self.models: list[str | None] = []

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMChunk]:
        self.models.append(request.model)
        async for chunk in self.inner.stream(request):
            yield chunk


def _id_shape(cid: str) -> str:
    return re.sub(r"[0-9a-f]+", "h", cid)


def test_every_way_of_making_a_context_gives_it_the_model_that_is_called(tmp_path: Path) -> None:
    from turnfsm.server import ServerConfig, create_app

    llm = Recording()
    app = create_app(
        lambda: Engine(llm=llm, tools=[get_weather], store=f"sqlite:///{tmp_path / 'm.db'}"),
        ServerConfig(model="gpt-test-1"),
    )
    for url in serve_in_thread(app):
        with httpx.Client(verify=loopback_tls(), base_url=url, timeout=60) as http:
            made: dict[str, str] = {}
            made["api"] = http.post("/api/contexts", json={}).json()["id"]
            r = http.post(
                "/api/chat?wait=true", json={"messages": [{"role": "user", "content": "hi"}]}
            )
            assert r.status_code == 200, r.text
            made["api/chat"] = r.json()["context_id"]
            r = http.post(
                "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
            )
            assert r.status_code == 200, r.text
            made["v1"] = r.headers["x-turnfsm-context-id"]
            history = [
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "hi"},
            ]
            r = http.post("/v1/chat/completions", json={"messages": history})
            assert r.status_code == 200, r.text
            made["v1 with history"] = r.headers["x-turnfsm-context-id"]
            with http.stream("POST", "/chat", json={"message": "hi"}) as s:
                s.read()
                made["chat"] = s.headers["x-turnfsm-session-id"]
            made["sessions"] = http.post("/sessions", json={}).json()["id"]
            shown = {
                how: http.get(f"/api/contexts/{cid}").json()["model"] for how, cid in made.items()
            }
            assert shown == dict.fromkeys(made, "gpt-test-1")
            # what went upstream: the same name, for every turn that ran
            assert llm.models and set(llm.models) == {"gpt-test-1"}
            # a context made with a model of its own sends that one
            own = http.post("/api/contexts", json={"model": "other-2"}).json()
            assert own["model"] == "other-2"
            r = http.post(f"/api/contexts/{own['id']}/messages?wait=true", json={"content": "hi"})
            assert r.status_code == 200 and llm.models[-1] == "other-2"
            # one id format, however the context was made (an imported history too)
            assert len({_id_shape(cid) for cid in made.values()}) == 1, made


def test_first_use_answers(tmp_path: Path) -> None:
    from turnfsm.server import ServerConfig, create_app
    from turnfsm.server._app import FAVICON

    app = create_app(
        lambda: Engine(
            llm=DemoLLM(delay=0.0), tools=[get_weather], store=f"sqlite:///{tmp_path / 'f.db'}"
        ),
        ServerConfig(),
    )
    for url in serve_in_thread(app):
        with httpx.Client(verify=loopback_tls(), base_url=url, timeout=60) as http:
            # the icon browsers ask for
            icon = http.get("/favicon.ico")
            assert icon.status_code == 200 and icon.content == FAVICON
            assert icon.headers["content-type"].startswith("image/svg+xml")

            # /api/chat's 202 names the stored user message
            r = http.post("/api/chat", json={"messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 202, r.text
            accepted = r.json()
            assert accepted["message_id"] is not None
            cid = accepted["context_id"]
            deadline = time.monotonic() + 30
            while http.get(f"/api/contexts/{cid}/state").json()["state"] != "Idle":
                assert time.monotonic() < deadline
                time.sleep(0.05)
            messages = http.get(f"/api/contexts/{cid}/messages").json()["messages"]
            (user,) = [m for m in messages if m["message"]["role"] == "user"]
            assert user["id"] == accepted["message_id"]

            # a call that waits for approval shows as pending, not as a failed result
            sid = http.post("/sessions", json={}).json()["id"]
            with http.stream(
                "POST", "/chat", json={"session_id": sid, "message": "weather in Paris?"}
            ) as s:
                s.read()
            session = http.get(f"/sessions/{sid}").json()
            assert session["state"] == "AwaitingToolApproval"
            (call,) = [rec for rec in session["records"] if rec["type"] == "tool_call"]
            assert call["pending"] is True
            assert call["result"] is None and call["success"] is None
            assert [p["tool_call_id"] for p in session["pending_tool_calls"]] == [
                call["tool_call_id"]
            ]
            # once decided, the record is the result, as the session format has it
            r = http.post(
                f"/api/contexts/{sid}/tools/approve?wait=true",
                json={"approve": [call["tool_call_id"]]},
            )
            assert r.status_code == 200, r.text
            session = http.get(f"/sessions/{sid}").json()
            (call,) = [rec for rec in session["records"] if rec["type"] == "tool_call"]
            assert "pending" not in call and call["success"] is True
            assert session["pending_tool_calls"] == []


def test_a_second_message_while_a_turn_is_queued_for_a_worker_is_busy(tmp_path: Path) -> None:
    """No worker runs: the first turn stays queued. The second message is
    refused as the in-process server refuses one while a turn runs."""
    from turnfsm.server import ServerConfig, create_app

    db = f"sqlite:///{tmp_path / 'w.db'}"
    app = create_app(
        lambda: Engine(llm=DemoLLM(delay=0.0), tools=[get_weather], store=db),
        ServerConfig(turns="workers"),
    )
    for url in serve_in_thread(app):
        with httpx.Client(verify=loopback_tls(), base_url=url, timeout=60) as http:
            cid = http.post("/api/contexts", json={}).json()["id"]
            first = http.post(f"/api/contexts/{cid}/messages", json={"content": "hi"})
            assert first.status_code == 202, first.text
            second = http.post(f"/api/contexts/{cid}/messages", json={"content": "again"})
            assert second.status_code == 409, second.text
            error = second.json()["error"]
            assert error["code"] == "context_busy"
            assert "queued for a worker" in error["message"]
            # an event the table refuses at rest is still what it was
            r = http.post(f"/api/contexts/{http.post('/api/contexts', json={}).json()['id']}/retry")
            assert r.status_code == 409 and r.json()["error"]["code"] == "illegal_transition"
