"""The REST API against a real server: the lifecycle, errors, tenants, 401."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from .conftest import Running


def create(c: httpx.Client, **body: Any) -> str:
    r = c.post("/api/contexts", json={"system_prompt": "You report the weather.", **body})
    assert r.status_code == 201, r.text
    cid: str = r.json()["id"]
    return cid


def wait_rest(c: httpx.Client, cid: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        st = c.get(f"/api/contexts/{cid}/state").json()
        if not st["running"] and st["state"] in (
            "Idle",
            "AwaitingToolApproval",
            "PermanentFailure",
        ):
            return dict(st)
        assert time.monotonic() < deadline, st
        time.sleep(0.02)


def test_lifecycle(server: Running) -> None:
    with server.client() as c:
        cid = create(c, title="Trip")
        r = c.post(
            f"/api/contexts/{cid}/messages?wait=true",
            json={"content": "What's the weather in Paris?"},
        )
        assert r.status_code == 200, r.text
        turn = r.json()
        assert turn["state"] == "AwaitingToolApproval"
        call = turn["pending_tool_calls"][0]
        assert call["tool_name"] == "get_weather" and call["arguments"] == {"city": "Paris"}

        r = c.post(f"/api/contexts/{cid}/tools/approve?wait=true", json={"approve": [call["id"]]})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "Idle" and "Paris" in r.json()["text"]

        # 202: the turn runs server-side; the answer is the stored user message's id
        r = c.post(f"/api/contexts/{cid}/messages", json={"content": "Thanks!"})
        assert r.status_code == 202, r.text
        mid = r.json()["message_id"]
        assert wait_rest(c, cid)["state"] == "Idle"
        msg = c.get(f"/api/contexts/{cid}/messages/{mid}").json()
        assert msg["message"]["role"] == "user"

        page = c.get(f"/api/contexts/{cid}/messages", params={"limit": 2}).json()
        assert len(page["messages"]) == 2 and page["next_cursor"] == "2"
        rest = c.get(
            f"/api/contexts/{cid}/messages", params={"cursor": page["next_cursor"], "limit": 100}
        ).json()
        assert rest["next_cursor"] is None
        ids = [m["id"] for m in page["messages"] + rest["messages"]]
        assert ids[-2] == mid and len(ids) == len(set(ids))

        r = c.post(
            f"/api/contexts/{cid}/branches",
            json={"name": "other", "at": 0, "system_prompt": "Be brief."},
        )
        assert r.status_code == 201, r.text
        ctx = c.get(f"/api/contexts/{cid}").json()
        assert ctx["active_branch"] == "other"
        assert {b["name"] for b in ctx["branches"]} == {"main", "other"}
        r = c.put(f"/api/contexts/{cid}/branches/active", json={"name": "main"})
        assert (
            r.status_code == 200 and c.get(f"/api/contexts/{cid}").json()["active_branch"] == "main"
        )

        r = c.put(f"/api/contexts/{cid}", json={"title": "Paris trip", "parameters": {"t": 1}})
        assert r.json()["title"] == "Paris trip" and r.json()["parameters"] == {"t": 1}
        assert r.json()["model"] == "demo"

        audit = c.get(f"/api/contexts/{cid}/audit")
        assert audit.headers["content-type"].startswith("application/jsonl")
        assert len(audit.text.strip().split("\n")) >= 10
        verify = c.get(f"/api/contexts/{cid}/audit/verify").json()
        assert verify["ok"] and verify["final_state"] == "Idle"
        diagram = c.get(f"/api/contexts/{cid}/diagram")
        assert diagram.text.startswith("stateDiagram-v2") and "AwaitingToolApproval" in diagram.text

        listed = [
            x["id"] for x in c.get("/api/contexts", params={"state": "Idle"}).json()["contexts"]
        ]
        assert cid in listed
        # a list item names the title and model, read from the summary (no context loaded)
        titled = create(c, title="Weather desk", model="m-list")
        [item] = [x for x in c.get("/api/contexts").json()["contexts"] if x["id"] == titled]
        assert (item["title"], item["model"]) == ("Weather desk", "m-list")
        assert c.get(f"/api/contexts/{cid}/children").json() == []

        r = c.delete(f"/api/contexts/{cid}")
        assert r.status_code == 200 and r.json()["deleted"] == [cid]
        assert c.get(f"/api/contexts/{cid}").status_code == 404


def test_approve_and_deny_in_one_body(server: Running) -> None:
    with server.client() as c:
        cid = create(c)
        turn = c.post(
            f"/api/contexts/{cid}/messages?wait=true", json={"content": "weather in Oslo?"}
        ).json()
        call = turn["pending_tool_calls"][0]["id"]
        r = c.post(
            f"/api/contexts/{cid}/tools/approve?wait=true",
            json={"deny": [{"id": call, "reason": "not today"}]},
        )
        assert r.status_code == 200 and r.json()["state"] == "Idle"
        msgs = c.get(f"/api/contexts/{cid}/messages").json()["messages"]
        results = [m for m in msgs if m["message"]["role"] == "tool"]
        assert "not today" in str(results[-1])
        again = c.post(f"/api/contexts/{cid}/tools/approve", json={"approve": [call]})
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "tool_call_not_pending"


def error_of(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert "Traceback" not in r.text
    return dict(body["error"])


def test_errors(server: Running) -> None:
    with server.client() as c:
        error_of(c.get("/api/contexts/nope"), 404, "context_not_found")
        cid = create(c)
        error_of(c.post(f"/api/contexts/{cid}/retry"), 409, "illegal_transition")
        error_of(
            c.put(f"/api/contexts/{cid}/branches/active", json={"name": "x"}), 409, "branch_error"
        )
        bad = error_of(
            c.post(f"/api/contexts/{cid}/messages", json={"content": 3}), 422, "invalid_input"
        )
        assert bad["where"] == "body.content"
        bad = error_of(
            c.post(f"/api/contexts/{cid}/messages", json={"content": ""}), 422, "invalid_input"
        )
        assert bad["where"] == "content"
        error_of(
            c.post(f"/api/contexts/{cid}/messages", json={"content": "a" * 70_000}),
            413,
            "body_too_large",
        )
        error_of(
            c.get(f"/api/contexts/{cid}/messages", params={"cursor": "x"}), 422, "invalid_input"
        )
        error_of(c.get(f"/api/contexts/{cid}/messages/m0"), 404, "message_not_found")
        error_of(
            c.post(f"/api/contexts/{cid}/tools/approve", json={"approve": ["c9"]}),
            404,
            "unknown_tool_call",
        )
        error_of(c.post("/api/contexts", json={"mode": "nope"}), 422, "invalid_input")
        error_of(c.get("/api/nothing-here"), 404, "not_found")


ENDPOINTS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "", None),
    ("PUT", "", {"title": "mine"}),
    ("GET", "/state", None),
    ("GET", "/children", None),
    ("GET", "/messages", None),
    ("GET", "/messages/any", None),
    ("POST", "/messages", {"content": "hi"}),
    ("POST", "/messages?wait=true", {"content": "hi"}),
    ("POST", "/branches", {"name": "b", "at": 0}),
    ("PUT", "/branches/active", {"name": "main"}),
    ("PUT", "/branches/main", None),
    ("PUT", "/branches/main/prompts", {"user_prompt": "x"}),
    ("POST", "/children", {"task": "hi"}),
    ("POST", "/finish", {"summarizer": "final_answer"}),
    ("GET", "/tree", None),
    ("GET", "/questions", None),
    ("POST", "/tools/approve", {"approve": ["x"]}),
    ("POST", "/tools/answer", {"call_id": "x", "text": "y"}),
    ("POST", "/cancel", None),
    ("POST", "/retry", None),
    ("POST", "/reset", None),
    ("POST", "/resume", None),
    ("GET", "/audit", None),
    ("GET", "/audit/verify", None),
    ("GET", "/diagram", None),
    ("GET", "/events", None),
    ("DELETE", "", None),
]


def test_tenants_are_isolated_on_every_endpoint(server: Running) -> None:
    with server.client("token-alice") as alice, server.client("token-bob") as bob:
        cid = create(alice, title="Alice's")
        before = alice.get(f"/api/contexts/{cid}").json()
        for method, tail, body in ENDPOINTS:
            r = bob.request(method, f"/api/contexts/{cid}{tail}", json=body)
            assert r.status_code == 404, (method, tail, r.status_code, r.text)
            assert r.json()["error"]["code"] == "context_not_found", (method, tail)
        assert cid not in [x["id"] for x in bob.get("/api/contexts").json()["contexts"]]
        assert cid in [x["id"] for x in alice.get("/api/contexts").json()["contexts"]]
        assert alice.get(f"/api/contexts/{cid}").json() == before  # bob changed nothing


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_no_valid_token_is_401(server: Running, token: str | None) -> None:
    with server.client(token) as c:
        for method, tail, body in [("GET", "", None), ("POST", "", {"system_prompt": "x"})]:
            r = c.request(method, f"/api/contexts{tail}", json=body)
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        assert c.get("/healthz").status_code == 200


def test_openapi_is_complete(server: Running) -> None:
    with server.client(None) as c:
        spec = c.get("/openapi.json").json()
    paths = spec["paths"]
    send = paths["/api/contexts/{context_id}/messages"]["post"]
    assert send["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "MessageIn"
    )
    assert {"200", "202", "404", "422"} <= set(send["responses"])
    assert (
        "TurnOut" in spec["components"]["schemas"] and "ErrorOut" in spec["components"]["schemas"]
    )
