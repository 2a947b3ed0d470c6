"""``POST /api/chat``: both request formats, malformed bodies, one answer per messageId."""

from __future__ import annotations

import json
from typing import Any

import httpx

from .conftest import Running


def cm_body(current: str, message_id: str, context: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "contextManagement": {
            "currentMessage": {"role": "user", "content": current, "messageId": message_id},
            "conversationContext": context,
        },
        "userLanguage": "de",
        "userTimezone": "Europe/Berlin",
    }


def history(c: httpx.Client, cid: str) -> list[tuple[str, str]]:
    page = c.get(f"/api/contexts/{cid}/messages", params={"limit": 100}).json()
    return [(m["message"]["role"], str(m["message"]["content"])) for m in page["messages"]]


def test_context_management_body(server: Running) -> None:
    context = [
        {"role": "user", "content": "Hallo", "messageId": "m1"},
        {"role": "assistant", "content": "Hallo! Wie kann ich helfen?", "messageId": "m2"},
    ]
    with server.client() as c:
        r = c.post("/api/chat?wait=true", json=cm_body("Erzähl mir etwas", "m3", context))
        assert r.status_code == 200, r.text
        turn = r.json()
        assert turn["state"] == "Idle" and turn["text"]
        said = history(c, turn["context_id"])
        assert [role for role, _ in said] == ["user", "assistant", "user", "assistant"]
        assert "Hallo" in said[0][1] and "Erzähl mir etwas" in said[2][1]
    with server.client("token-bob") as c:
        assert c.get(f"/api/contexts/{turn['context_id']}").status_code == 404


def test_legacy_messages_body(server: Running) -> None:
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "tell me something"},
        ]
    }
    with server.client() as c:
        r = c.post("/api/chat?wait=true", json=body)
        assert r.status_code == 200, r.text
        said = history(c, r.json()["context_id"])
        assert [role for role, _ in said] == ["user", "assistant", "user", "assistant"]


def test_malformed_bodies_name_each_format(server: Running) -> None:
    with server.client() as c:
        before = len(c.get("/api/contexts", params={"limit": 500}).json()["contexts"])
        bad_cm = {"contextManagement": {"currentMessage": {"role": "user"}}}
        r = c.post("/api/chat", json=bad_cm)
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["code"] == "invalid_input" and error["where"] == "request body"
        assert "as a contextManagement body" in error["message"]
        assert "contextManagement.currentMessage.content" in error["message"]
        r = c.post("/api/chat", json={"messages": [{"role": 3, "content": "x"}]})
        assert r.status_code == 422, r.text
        assert "as a legacy messages body: [messages[0].role" in r.json()["error"]["message"]
        r = c.post("/api/chat", json=["not", "an", "object"])
        assert r.status_code == 422 and "JSON object" in r.json()["error"]["message"]
        after = len(c.get("/api/contexts", params={"limit": 500}).json()["contexts"])
        assert after == before  # nothing stored for a refused body


def test_the_same_message_id_is_answered_once(server: Running) -> None:
    with server.client() as c:
        first = c.post("/api/chat?wait=true", json=cm_body("Erzähl mir etwas", "x1", []))
        assert first.status_code == 200, first.text
        cid = first.json()["context_id"]
        said = history(c, cid)
        again = c.post(
            "/api/chat?wait=true",
            params={"context_id": cid},
            json=cm_body("Erzähl mir etwas", "x1", []),
        )
        assert again.status_code == 422, again.text
        assert "x1" in again.json()["error"]["message"]
        assert history(c, cid) == said
    with server.client("token-bob") as c:
        r = c.post("/api/chat", params={"context_id": cid}, json=cm_body("hi", "x2", []))
        assert r.status_code == 404


def test_a_resent_history_is_appended_once_and_a_conflict_is_409(server: Running) -> None:
    seed = [
        {"role": "user", "content": "Hello", "messageId": "msg-122"},
        {
            "role": "assistant",
            "content": "Hi! How can I help you?",
            "messageId": "msg-122-response",
        },
    ]
    with server.client() as c:
        r = c.post("/api/chat?wait=true", json=cm_body("Add a task", "msg-123", seed))
        assert r.status_code == 200, r.text
        cid, answer = r.json()["context_id"], r.json()["text"]
        resent = [
            *seed,
            {"role": "user", "content": "Add a task", "messageId": "msg-123"},
            {"role": "assistant", "content": answer, "messageId": "msg-123-response"},
        ]
        r = c.post(f"/api/chat?wait=true&context_id={cid}", json=cm_body("More", "msg-124", resent))
        assert r.status_code == 200, r.text
        stored = history(c, cid)
        assert len(stored) == 6 and "More" in stored[4][1]
        # a known id whose content changed: 409 naming it, nothing stored
        changed = [seed[0], {**seed[1], "content": "Something else"}]
        r = c.post(f"/api/chat?context_id={cid}", json=cm_body("Again", "msg-125", changed))
        assert r.status_code == 409, r.text
        error = r.json()["error"]
        assert error["code"] == "history_conflict"
        assert error["message_id"] == "msg-122-response"
        assert error["where"] == "contextManagement.conversationContext[1]"
        assert "msg-122-response" in error["message"]
        # a legacy body out of the stored order: 409 without an id
        legacy = {
            "messages": [{"role": "user", "content": "not said"}, {"role": "user", "content": "x"}]
        }
        r = c.post(f"/api/chat?context_id={cid}", json=legacy)
        assert r.status_code == 409 and r.json()["error"]["message_id"] is None
        assert r.json()["error"]["where"] == "messages[0]"
        assert history(c, cid) == stored


def test_the_answer_carries_the_response_id_and_a_resend_matches_it(server: Running) -> None:
    """On a real server: the answer to ``msg-7`` is stored (and listed) with the
    client id ``msg-7-response``; a history resent from that answer alone is
    matched by it, and one that gives it other content is 409 naming it."""
    with server.client() as c:
        r = c.post("/api/chat?wait=true", json=cm_body("Hello there", "msg-7", []))
        assert r.status_code == 200, r.text
        cid, answer = r.json()["context_id"], r.json()["text"]
        [stored] = [m for m in r.json()["messages"] if m["role"] == "assistant"]
        assert stored["metadata"]["extra"]["message_id"] == "msg-7-response"
        page = c.get(f"/api/contexts/{cid}/messages").json()["messages"]
        assert [m["message"]["metadata"]["extra"].get("message_id") for m in page] == [
            "msg-7",
            "msg-7-response",
        ]
        changed = [{"role": "assistant", "content": answer + "!", "messageId": "msg-7-response"}]
        r = c.post(f"/api/chat?context_id={cid}", json=cm_body("More", "msg-8", changed))
        assert r.status_code == 409, r.text
        assert r.json()["error"]["message_id"] == "msg-7-response"
        assert "content differs" in r.json()["error"]["message"]
        tail = [{"role": "assistant", "content": answer, "messageId": "msg-7-response"}]
        r = c.post(f"/api/chat?wait=true&context_id={cid}", json=cm_body("More", "msg-8", tail))
        assert r.status_code == 200, r.text
        said = history(c, cid)
    assert len(said) == 4 and said[2][0] == "user" and "More" in said[2][1]


def test_unknown_keys_are_ignored_here_and_refused_by_the_rest_api(server: Running) -> None:
    legacy = {
        "messages": [
            {"id": "a1", "role": "user", "content": "Hello"},
            {"id": "a2", "role": "assistant", "content": "Hi! How can I help you?"},
            {"id": "a3", "role": "user", "content": "Add a task to buy milk"},
        ],
        "stream": True,
        "userLanguage": "en",
    }
    cm = {
        "contextManagement": {
            "currentMessage": {"role": "user", "content": "Hi", "attachments": ["x-secret"]},
            "conversationContext": [{"role": "user", "content": "Yo", "id": "x-secret"}],
            "threadId": "x-secret",
        },
        "sessionId": "x-secret",
    }
    with server.client() as c:
        for body in (legacy, cm):
            r = c.post("/api/chat?wait=true", json=body)
            assert r.status_code == 200, r.text
            page = c.get(f"/api/contexts/{r.json()['context_id']}/messages").json()
            assert "x-secret" not in json.dumps(page) and '"a1"' not in json.dumps(page)
        # the engine's own API keeps its rule: an unknown key is 422, with its name
        r = c.post("/api/contexts", json={"title": "t", "stream": True})
        assert r.status_code == 422, r.text
        assert "stream" in json.dumps(r.json())
        bad = {**legacy, "messages": [{"id": "a1", "role": "user", "content": 5}]}
        r = c.post("/api/chat", json=bad)
        assert r.status_code == 422 and "messages[0].content" in r.json()["error"]["message"]


def test_the_202_names_a_frontend_operators_current_message(server: Running) -> None:
    body = {
        "contextManagement": {
            "currentMessage": {"role": "frontend_operator", "content": "opened the cart"},
            "conversationContext": [{"role": "user", "content": "hello"}],
        }
    }
    with server.client() as c:
        r = c.post("/api/chat", json=body)
        assert r.status_code == 202, r.text
        accepted = r.json()
        page = c.get(f"/api/contexts/{accepted['context_id']}/messages").json()
    named = [m for m in page["messages"] if m["id"] == accepted["message_id"]]
    assert [m["message"]["role"] for m in named] == ["frontend_operator"]
