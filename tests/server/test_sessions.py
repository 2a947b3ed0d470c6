"""The session endpoints (``/sessions``, ``POST /chat``) against a real server."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from .conftest import Running
from .scripted import GATE, scripted_server
from .test_events import Sse, read_events

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yield from scripted_server(tmp_path_factory.mktemp("sessions") / "server.db", max_body=64_000)


def new_session(c: httpx.Client, **body: Any) -> dict[str, Any]:
    r = c.post("/sessions", json=body)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def chat(c: httpx.Client, **body: Any) -> tuple[httpx.Response, list[Sse]]:
    with c.stream("POST", "/chat", json=body) as r:
        if r.status_code != 200:
            r.read()
            return r, []
        assert r.headers["content-type"].startswith("text/event-stream")
        return r, list(read_events(r))


def stored(c: httpx.Client, cid: str) -> list[dict[str, Any]]:
    page = c.get(f"/api/contexts/{cid}/messages", params={"limit": 100}).json()
    return [m["message"] for m in page["messages"]]


def test_sessions_are_made_listed_newest_first_and_paged(server: Running) -> None:
    with server.client("token-alice") as c, server.client("token-bob") as bob:
        before = c.get("/sessions", params={"limit": 100}).json()["sessions"]
        first = new_session(c, title="First")
        second = new_session(c)
        assert set(first) == {"id", "title", "created_at", "updated_at"}
        assert first["title"] == "First" and second["title"] is None
        r = c.post("/sessions")  # no body at all: no title
        assert r.status_code == 201, r.text
        third = r.json()

        listed = c.get("/sessions", params={"limit": 100}).json()
        ids = [s["id"] for s in listed["sessions"]]
        assert ids[:3] == [third["id"], second["id"], first["id"]]
        assert len(ids) == len(before) + 3 and listed["next_cursor"] is None

        page = c.get("/sessions", params={"limit": 2}).json()
        assert [s["id"] for s in page["sessions"]] == ids[:2]
        rest = c.get("/sessions", params={"limit": 100, "cursor": page["next_cursor"]}).json()
        assert [s["id"] for s in rest["sessions"]] == ids[2:]

        assert first["id"] not in [s["id"] for s in bob.get("/sessions").json()["sessions"]]
        assert bob.get(f"/sessions/{first['id']}").status_code == 404

        r = c.post("/sessions", json={"title": "two\nlines"})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["where"] == "body.title"
        r = c.post("/sessions", json={"title": "x", "colour": "red"})
        assert r.status_code == 422, r.text
        assert c.get("/sessions", params={"limit": 100}).json()["sessions"] == listed["sessions"]


def test_a_tool_loop_streams_records_then_done(server: Running) -> None:
    with server.client() as c:
        sid = new_session(c, title="Sums")["id"]
        r, events = chat(c, session_id=sid, message="please add 2 and 3")
        assert r.status_code == 200 and r.headers["x-turnfsm-session-id"] == sid
        kinds = [
            (e.event, e.data.get("role") if isinstance(e.data, dict) else None) for e in events
        ]
        assert kinds == [
            ("record", "user"),
            ("record", "assistant"),  # the thinking
            ("tool_calls_start", None),
            ("tool_result", None),
            ("record", "assistant"),
            ("done", None),
        ], kinds
        user, thinking, start, result, final, done = (e.data for e in events)
        assert user == {
            "type": "message",
            "role": "user",
            "content": "please add 2 and 3",
            "binary_content": [],
            "timestamp": user["timestamp"],
        }
        assert thinking["content"] == "Two and three." and thinking["thinking"] is True
        assert start == [
            {"tool_call_id": "call_add", "tool_name": "add", "arguments": {"a": 2, "b": 3}}
        ]
        assert result["type"] == "tool_call" and result["tool_call_id"] == "call_add"
        assert result["result"] == 5 and result["success"] is True
        assert result["arguments"] == {"a": 2, "b": 3}
        assert final["content"] == "The answer is 5."
        assert done["session_id"] == sid and done["state"] == "Idle"
        assert done["stop_reason"] == "completed" and done["record"] == final
        assert done["pending_tool_calls"] == []

        # the stored context agrees: the same messages, the records made of them
        messages = stored(c, sid)
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[1]["thinking"] == "Two and three."
        assert messages[1]["tool_calls"][0]["id"] == "call_add"
        assert messages[2]["tool_result"] == {
            "request_id": "call_add",
            "result": 5,
            "success": True,
        }
        session = c.get(f"/sessions/{sid}").json()
        assert session["state"] == "Idle" and session["title"] == "Sums"
        assert session["records"] == [user, result, final]  # the thinking is not in the format


@pytest.fixture(scope="module")
def lossy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """Subscriptions of one event: a stream misses most of them (EventsMissed)."""
    db = tmp_path_factory.mktemp("lossy") / "server.db"
    yield from scripted_server(db, engine={"subscriber_buffer": 1})


def test_a_stream_that_misses_events_still_sends_every_record_in_order(lossy: Running) -> None:
    with lossy.client() as c:
        for _ in range(3):
            _, events = chat(c, message="please add 2 and 3")
            got = [e.event for e in events]
            assert got == ["record", "record", "tool_calls_start", "tool_result", "record", "done"]
            assert events[-1].data["record"]["content"] == "The answer is 5."


def test_an_approval_stop_ends_with_done_listing_the_pending_call(server: Running) -> None:
    with server.client() as c:
        sid = new_session(c)["id"]
        _, events = chat(c, session_id=sid, message="book a trip")
        assert [e.event for e in events] == ["record", "record", "done"]
        assert events[1].data["content"] == "I will book it."
        done = events[-1].data
        assert done["state"] == "AwaitingToolApproval"
        assert done["stop_reason"] == "awaiting_approval"
        assert done["pending_tool_calls"] == [
            {"tool_call_id": "call_book", "tool_name": "book", "arguments": {"city": "Oslo"}}
        ]
        assert done["record"] == events[1].data
        # continued through /api
        r = c.post(f"/api/contexts/{sid}/tools/approve?wait=true", json={"approve": ["call_book"]})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "Idle" and "booked Oslo" in r.json()["text"]

        # a new message at a pending approval: the call is closed first, as a record too
        _, events = chat(c, session_id=sid, message="book a trip")
        assert events[-1].data["state"] == "AwaitingToolApproval"
        _, events = chat(c, session_id=sid, message="hi")
        assert [e.event for e in events] == ["tool_result", "record", "record", "done"]
        assert events[0].data["tool_call_id"] == "call_book-2"
        assert events[0].data["success"] is False
        assert events[-1].data["state"] == "Idle"


def test_a_failed_turn_sends_error_then_done(server: Running) -> None:
    with server.client() as c:
        sid = new_session(c)["id"]
        _, events = chat(c, session_id=sid, message="this will fail")
        assert [e.event for e in events] == ["record", "error", "done"]
        error = events[1].data["error"]
        assert error["code"] == "turn_failed" and "refused" in error["message"]
        assert events[2].data["state"] == "PermanentFailure"
        assert events[2].data["record"] is None
        assert c.get(f"/api/contexts/{sid}/state").json()["state"] == "PermanentFailure"


def test_a_refusal_is_a_record_with_its_refusal(server: Running) -> None:
    with server.client() as c:
        _, events = chat(c, session_id=new_session(c)["id"], message="please refuse")
        assert [e.event for e in events] == ["record", "record", "done"]
        answer = events[1].data
        assert answer["content"] == "" and answer["refusal"] == "I can't help with that."
        assert events[2].data["stop_reason"] == "refusal" and events[2].data["record"] == answer


def test_without_a_session_id_a_session_is_made(server: Running) -> None:
    with server.client() as c:
        r, events = chat(c, message="hello")
        sid = r.headers["x-turnfsm-session-id"]
        assert events[-1].data["session_id"] == sid
        assert events[-1].data["record"]["content"] == "Hello there."
        assert sid in [
            s["id"] for s in c.get("/sessions", params={"limit": 100}).json()["sessions"]
        ]
    with server.client("token-bob") as bob:
        assert bob.get(f"/api/contexts/{sid}").status_code == 404


def test_tenants_unknown_sessions_and_bad_input(server: Running) -> None:
    with server.client() as alice, server.client("token-bob") as bob:
        sid = new_session(alice)["id"]
        for client, session_id in ((bob, sid), (alice, "no-such-session")):
            r, _ = chat(client, session_id=session_id, message="hello")
            assert r.status_code == 404, r.text
            assert r.json()["error"]["code"] == "session_not_found"
        assert bob.get(f"/sessions/{sid}").status_code == 404

        for body, where in (
            ({"session_id": sid, "message": "  "}, "body.message"),
            ({"session_id": sid}, "body.message"),
            (
                {
                    "session_id": sid,
                    "message": "see",
                    "binary_content": [{"url": "https://x/a.pdf", "kind": "document-url"}],
                },
                "body.binary_content[0].kind",
            ),
            (
                {
                    "session_id": sid,
                    "message": "see",
                    "binary_content": [{"data": "not base64!", "media_type": "image/png"}],
                },
                "body.binary_content[0].data",
            ),
            (
                {
                    "session_id": sid,
                    "message": "see",
                    "binary_content": [PNG, {"url": "ftp://host/a.png"}],
                },
                "body.binary_content[1].url",
            ),
        ):
            r, _ = chat(alice, **body)
            assert r.status_code == 422, r.text
            assert r.json()["error"]["where"] == where
        assert "'kind'?: 'image-url'" in r.json()["error"]["message"]  # says what is accepted
        r = alice.post("/chat", json={"message": "x" * 70_000})
        assert r.status_code == 413
        assert stored(alice, sid) == []  # nothing of it was stored


def test_images_and_files_are_content_parts(server: Running) -> None:
    pdf = base64.b64encode(b"%PDF-1.4").decode()
    items = [PNG, {"data": pdf, "media_type": "application/pdf", "identifier": "a.pdf"}]
    with server.client() as c:
        sid = new_session(c)["id"]
        _, events = chat(
            c, session_id=sid, message="what is in this picture?", binary_content=items
        )
        user = events[0].data
        assert user["binary_content"] == [
            {"data": PNG.split(",", 1)[1], "media_type": "image/png", "kind": "binary"},
            {"data": pdf, "media_type": "application/pdf", "identifier": "a.pdf", "kind": "binary"},
        ]
        assert events[-1].data["record"]["content"] == "1 images, 1 files."
        parts = stored(c, sid)[0]["content"]
        assert [p["type"] for p in parts] == ["text", "image", "file"]


# ---------------------------------------------------------------------- the turn limit


@pytest.fixture
def gate() -> Iterator[None]:
    """The ``hold`` answers wait until the test sets ``GATE``."""
    GATE.clear()
    try:
        yield
    finally:
        GATE.set()


def test_records_go_out_while_the_turn_runs(server: Running, gate: None) -> None:
    with server.client() as c, c.stream("POST", "/chat", json={"message": "add and hold"}) as r:
        sid = r.headers["x-turnfsm-session-id"]
        events = read_events(r)
        got = [next(events).event for _ in range(4)]
        assert got == ["record", "record", "tool_calls_start", "tool_result"]
        # the model has not answered yet: the records came as they were stored
        with server.client() as other:
            assert other.get(f"/api/contexts/{sid}/state").json()["running"] is True
        GATE.set()
        rest = [e.event for e in events]
        assert rest == ["record", "done"]


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yield from scripted_server(
        tmp_path_factory.mktemp("limited") / "server.db", max_turns_per_tenant=1
    )


def test_a_turn_over_the_limit_is_429_and_stores_nothing(limited: Running, gate: None) -> None:
    with limited.client() as alice, limited.client("token-bob") as bob:
        held = new_session(alice)["id"]
        other = new_session(alice)["id"]
        r = alice.post(f"/api/contexts/{held}/messages", json={"content": "hold on"})
        assert r.status_code == 202, r.text
        contexts = alice.get("/api/contexts", params={"limit": 500}).json()["contexts"]
        hello = [{"role": "user", "content": "Hello"}]
        refused = [
            chat(alice, session_id=other, message="hello")[0],
            chat(alice, message="hello")[0],
            alice.post("/api/chat", json={"messages": hello}),
            alice.post("/v1/chat/completions", json={"messages": hello, "user": "u-1"}),
            alice.post(
                "/v1/chat/completions",
                json={"messages": hello, "user": "u-1"},
                headers={"x-turnfsm-context-id": other},
            ),
        ]
        for r in refused:
            assert r.status_code == 429, r.text
            assert r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == "too_many_turns"
        # nothing of them was stored: no context, no message, no config change
        assert alice.get("/api/contexts", params={"limit": 500}).json()["contexts"] == contexts
        assert stored(alice, other) == []
        assert alice.get(f"/api/contexts/{other}").json()["parameters"] == {}

        _, events = chat(bob, message="hello")  # another tenant is not limited
        assert events[-1].data["state"] == "Idle"

        GATE.set()
        deadline = time.monotonic() + 20
        while alice.get(f"/api/contexts/{held}/state").json()["running"]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        _, events = chat(alice, session_id=other, message="hello")
        assert events[-1].data["state"] == "Idle"
