"""Every engine call on a context has its route: sub-contexts (spawn, finish,
the tree, a child made with ``parent_id``), a branch's prompts, a switch by
the branch's name, the pending questions, the modes; against a real server."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from turnfsm import Engine, Mode
from turnfsm.adapters.llm import LLMRequest
from turnfsm.testing import ScriptedLLM
from turnfsm.tools import ask_user

from .conftest import TOKENS, Running, serve_in_thread
from .scripted import add
from .test_events import read_events


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


async def answer(request: LLMRequest) -> dict[str, Any]:
    last = request.messages[-1]
    if last["role"] == "tool":
        return {"text": f"The answer is {last['content']}."}
    text = _text(last)
    if "summar" in text.lower():  # the llm summarizer's request
        return {"text": "Summary: the child added 2 and 3."}
    if "add" in text:
        return {"tool_calls": [{"id": "call_add", "name": "add", "arguments": {"a": 2, "b": 3}}]}
    if "ask" in text:
        args = {"question": "Which city?", "choices": ["Oslo", "Rome"]}
        return {"tool_calls": [{"id": "call_ask", "name": "ask_user", "arguments": args}]}
    if "prompts" in text:  # says what prompts the request began with
        first = [_text(m) for m in request.messages if m["role"] == "system"]
        return {"text": f"system={first}"}
    return {"text": "Hello."}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    from turnfsm.server import ServerConfig, create_app

    db: Path = tmp_path_factory.mktemp("parity") / "server.db"

    def factory() -> Engine:
        return Engine(
            llm=ScriptedLLM(answer),
            tools=[add, ask_user],
            modes=[Mode("plan", instructions="Plan only.", tools=["ask_user"])],
            store=f"sqlite:///{db}",
        )

    app = create_app(factory, ServerConfig(tokens=dict(TOKENS), heartbeat=0.3))
    for url in serve_in_thread(app):
        yield Running(url, db)


def create(c: httpx.Client, **body: Any) -> str:
    r = c.post("/api/contexts", json=body)
    assert r.status_code == 201, r.text
    cid: str = r.json()["id"]
    return cid


def test_spawn_finish_and_the_tree(server: Running) -> None:
    with server.client() as c:
        parent = create(c, title="parent", model="scripted")
        r = c.post(
            f"/api/contexts/{parent}/children",
            json={"task": "add these", "title": "adder", "tools": ["add"]},
        )
        assert r.status_code == 201, r.text
        out = r.json()
        child = out["context_id"]
        assert out["parent_id"] == parent and child != parent
        assert out["turn"]["state"] == "Idle" and out["turn"]["text"] == "The answer is 5."
        # a tool outside the parent's list is refused, nothing made
        r = c.post(f"/api/contexts/{parent}/children", json={"task": "x", "tools": ["nope"]})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"

        # the child is the tenant's, with its parent
        assert c.get(f"/api/contexts/{child}").json()["parent_id"] == parent
        kids = c.get(f"/api/contexts/{parent}/children").json()
        assert [k["context_id"] for k in kids] == [child]

        # a grandchild made with parent_id; the tree holds both levels
        grand = create(
            c, parent_id=child, title="grand", workspace_path="/srv/w", agent_role="critic"
        )
        tree = c.get(f"/api/contexts/{parent}/tree").json()
        assert tree["id"] == parent and tree["finished"] is False
        assert [k["id"] for k in tree["children"]] == [child]
        assert [g["id"] for g in tree["children"][0]["children"]] == [grand]
        assert tree["children"][0]["title"] == "adder"

        # the grandchild still runs: the child cannot be finished
        r = c.post(f"/api/contexts/{child}/finish", json={"summarizer": "final_answer"})
        assert r.status_code == 409 and r.json()["error"]["code"] == "sub_context_error"

        # the grandchild, kept: its final answer as it is
        c.post(f"/api/contexts/{grand}/messages?wait=true", json={"content": "hi"})
        r = c.post(
            f"/api/contexts/{grand}/finish", json={"summarizer": "final_answer", "keep": True}
        )
        assert r.status_code == 200, r.text
        done = r.json()
        assert done == {
            "context_id": child,
            "child_id": grand,
            "message_id": done["message_id"],
            "summary": "Hello.",
            "kept": True,
        }
        assert c.get(f"/api/contexts/{child}/tree").json()["children"][0]["finished"] is True
        # a finished child takes no new sub-context
        r = c.post("/api/contexts", json={"parent_id": grand})
        assert r.status_code == 409 and r.json()["error"]["code"] == "sub_context_error"

        # the child, summarised by the model, then deleted (with its kept child)
        r = c.post(f"/api/contexts/{child}/finish", json={"summarizer": "llm"})
        assert r.status_code == 200, r.text
        done = r.json()
        assert done["summary"] == "Summary: the child added 2 and 3." and done["kept"] is False
        msg = c.get(f"/api/contexts/{parent}/messages/{done['message_id']}").json()
        assert msg["message"]["content"] == [
            {"type": "text", "text": "Summary: the child added 2 and 3."}
        ]
        assert msg["message"]["metadata"]["extra"]["sub_context"]["child_id"] == child
        assert c.get(f"/api/contexts/{child}").status_code == 404
        assert c.get(f"/api/contexts/{grand}").status_code == 404  # deleted with it
        assert c.get(f"/api/contexts/{parent}/tree").json()["children"] == []


def test_the_created_child_keeps_role_and_workspace(server: Running) -> None:
    with server.client() as c:
        parent = create(c)
        child = create(c, parent_id=parent, workspace_path="/srv/w", agent_role="critic")
    ctx = _stored(server, child)
    assert ctx.parent_id == parent
    assert ctx.config.workspace_path == "/srv/w" and ctx.config.agent_role == "critic"


def _stored(server: Running, cid: str) -> Any:
    import anyio

    async def load() -> Any:
        engine = Engine(store=f"sqlite:///{server.db}")
        try:
            return await engine.get_context(cid)
        finally:
            await engine.aclose()

    return anyio.run(load)


def test_parent_of_another_tenant_is_not_found(server: Running) -> None:
    with server.client("token-alice") as alice, server.client("token-bob") as bob:
        theirs = create(bob)
        before = [x["id"] for x in bob.get("/api/contexts").json()["contexts"]]
        r = alice.post("/api/contexts", json={"parent_id": theirs})
        assert r.status_code == 404 and r.json()["error"]["code"] == "context_not_found"
        r = alice.post(f"/api/contexts/{theirs}/children", json={"task": "x"})
        assert r.status_code == 404
        assert [x["id"] for x in bob.get("/api/contexts").json()["contexts"]] == before
        assert bob.get(f"/api/contexts/{theirs}/children").json() == []


def test_switch_by_name_and_branch_prompts(server: Running) -> None:
    with server.client() as c:
        cid = create(c, system_prompt="main prompt")
        c.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "hi"})
        r = c.post(f"/api/contexts/{cid}/branches", json={"name": "other", "at": 1})
        assert r.status_code == 201
        assert c.get(f"/api/contexts/{cid}").json()["active_branch"] == "other"

        r = c.put(f"/api/contexts/{cid}/branches/main")
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "Idle"
        assert c.get(f"/api/contexts/{cid}").json()["active_branch"] == "main"
        r = c.put(f"/api/contexts/{cid}/branches/nope")
        assert r.status_code == 409 and r.json()["error"]["code"] == "branch_error"

        # the other branch's own prompt; main keeps its own
        r = c.put(
            f"/api/contexts/{cid}/branches/other/prompts",
            json={"system_prompt": "other prompt", "user_prompt": "be brief"},
        )
        assert r.status_code == 200, r.text
        branches = {b["name"]: b for b in r.json()["branches"]}
        assert branches["other"]["system_prompt"] == "other prompt"
        assert branches["other"]["user_prompt"] == "be brief"
        assert branches["main"]["system_prompt"] == "main prompt"
        c.put(f"/api/contexts/{cid}/branches/other")
        turn = c.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "prompts?"})
        assert "other prompt" in turn.json()["text"] and "main prompt" not in turn.json()["text"]

        # a field left out is kept; null removes it
        r = c.put(f"/api/contexts/{cid}/branches/other/prompts", json={"user_prompt": None})
        branches = {b["name"]: b for b in r.json()["branches"]}
        assert branches["other"]["system_prompt"] == "other prompt"
        assert branches["other"]["user_prompt"] is None
        r = c.put(f"/api/contexts/{cid}/branches/nope/prompts", json={"user_prompt": "x"})
        assert r.status_code == 409 and r.json()["error"]["code"] == "branch_error"

        # /branches/active is still the switch with a body
        r = c.put(f"/api/contexts/{cid}/branches/active", json={"name": "main"})
        assert r.status_code == 200
        assert c.get(f"/api/contexts/{cid}").json()["active_branch"] == "main"


def test_questions_and_modes(server: Running) -> None:
    with server.client() as c:
        modes = c.get("/api/modes").json()
        assert [m["name"] for m in modes] == ["chat", "plan"]
        assert modes[1] == {
            "name": "plan",
            "instructions": "Plan only.",
            "tools": ["ask_user"],
            "approval": {},
            "answer_type": "Text",
        }
        cid = create(c, mode="plan")
        assert c.get(f"/api/contexts/{cid}/questions").json() == []
        turn = c.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "ask me"})
        assert turn.json()["state"] == "AwaitingToolApproval"
        asked = c.get(f"/api/contexts/{cid}/questions").json()
        assert asked == [
            {
                "call_id": "call_ask",
                "tool_name": "ask_user",
                "question": "Which city?",
                "choices": ["Oslo", "Rome"],
            }
        ]
        r = c.post(
            f"/api/contexts/{cid}/tools/answer?wait=true",
            json={"call_id": "call_ask", "text": "Oslo"},
        )
        assert r.status_code == 200, r.text
        assert c.get(f"/api/contexts/{cid}/questions").json() == []


def test_heartbeat_is_iso_8601(server: Running) -> None:
    with server.client() as c:
        cid = create(c)
        for path in (f"/api/contexts/{cid}/events", "/api/events"):
            with c.stream("GET", path) as r:
                beat = next(e for e in read_events(r) if e.event == "Heartbeat")
            stamp = beat.data["timestamp"]
            assert isinstance(stamp, str) and re.fullmatch(
                r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp
            ), stamp
            when = datetime.fromisoformat(stamp)
            assert abs(datetime.now(UTC) - when) < timedelta(minutes=1)


def test_new_routes_are_in_openapi(server: Running) -> None:
    with server.client(None) as c:
        paths = c.get("/openapi.json").json()["paths"]
    for path, method in [
        ("/api/contexts/{context_id}/children", "post"),
        ("/api/contexts/{context_id}/finish", "post"),
        ("/api/contexts/{context_id}/tree", "get"),
        ("/api/contexts/{context_id}/branches/{name}", "put"),
        ("/api/contexts/{context_id}/branches/{name}/prompts", "put"),
        ("/api/contexts/{context_id}/questions", "get"),
        ("/api/modes", "get"),
    ]:
        assert method in paths[path], (path, method)
