"""``POST /api/ui/chat``: the AI SDK's UI message stream from a real server
(in-process uvicorn on loopback) whose model streams over the OpenAI wire, read
by httpx and by the AI SDK's own client in Node (``tests/js``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .ui_server import ADD, BOOK, RUNS, Reply, UiServer, chunks, serve, text_stream, tool_turn

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / ".cache" / "ui-stream"
CLIENT = ROOT / "tests" / "js" / "ui_chat_client.mjs"


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    """One server for the module: each test uses chats of its own."""
    yield from serve(tmp_path_factory.mktemp("ui"))


@pytest.fixture
def ui(ui_server: UiServer) -> UiServer:
    """The module's server with no tool run counted and no model reply queued."""
    RUNS.clear()
    ui_server.model.replies.clear()
    return ui_server


def user(text: str, mid: str = "u1") -> dict[str, Any]:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def post(ui: UiServer, body: dict[str, Any], token: str | None = "token-alice") -> list[Any]:
    with ui.client(token) as c, c.stream("POST", "/api/ui/chat", json=body) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["x-vercel-ai-ui-message-stream"] == "v1"
        assert r.headers["content-type"].startswith("text/event-stream")
        return chunks(r)


def types(got: list[Any]) -> list[str]:
    return [c if isinstance(c, str) else c["type"] for c in got]


def messages(ui: UiServer, cid: str) -> list[dict[str, Any]]:
    with ui.client() as c:
        r = c.get(f"/api/contexts/{cid}/messages")
        assert r.status_code == 200, r.text
        return [node["message"] for node in r.json()["messages"]]


def test_text_tool_and_approval_as_chunks(ui: UiServer) -> None:
    ui.model.script(*tool_turn())
    got = post(
        ui, {"id": "chat-1", "messages": [user("add, then book")], "trigger": "submit-message"}
    )
    kinds = types(got)
    assert kinds[0] == "start" and kinds[-2:] == ["finish", "[DONE]"]
    assert got[-2]["finishReason"] == "tool-calls"
    text = "".join(c["delta"] for c in got if isinstance(c, dict) and c["type"] == "text-delta")
    assert text == "Let me add.Booking."
    # the arguments in pieces, in order, after the call's start
    pieces = [c for c in got if isinstance(c, dict) and c["type"] == "tool-input-delta"]
    by_call: dict[str, str] = {}
    for p in pieces:
        by_call[p["toolCallId"]] = by_call.get(p["toolCallId"], "") + p["inputTextDelta"]
    assert json.loads(by_call["call_add"]) == ADD and json.loads(by_call["call_book"]) == BOOK
    assert len([p for p in pieces if p["toolCallId"] == "call_add"]) > 3
    start = kinds.index("tool-input-start")
    assert start < kinds.index("tool-input-delta") < kinds.index("tool-input-available")
    available = [c for c in got if isinstance(c, dict) and c["type"] == "tool-input-available"]
    assert [(c["toolName"], c["input"]) for c in available] == [("add", ADD), ("book", BOOK)]
    outputs = [c for c in got if isinstance(c, dict) and c["type"] == "tool-output-available"]
    assert [(c["toolCallId"], c["output"]) for c in outputs] == [("call_add", 42)]
    approval = [c for c in got if isinstance(c, dict) and c["type"] == "tool-approval-request"]
    assert [c["toolCallId"] for c in approval] == ["call_book"]
    # a step per LLM call, each closed
    assert kinds.count("start-step") == kinds.count("finish-step") == 2
    for opened, closed in (("text-start", "text-end"), ("start-step", "finish-step")):
        assert kinds.count(opened) == kinds.count(closed)
    assert RUNS == [("add", ADD)]

    # the decision, as the client sends it: the turn goes on, book runs once
    assistant = {
        "id": got[0]["messageId"],
        "role": "assistant",
        "parts": [
            {
                "type": "dynamic-tool",
                "toolName": "book",
                "toolCallId": "call_book",
                "state": "approval-responded",
                "input": BOOK,
                "approval": {"id": "call_book", "approved": True},
            }
        ],
    }
    body = {
        "id": "chat-1",
        "messages": [user("add, then book"), assistant],
        "trigger": "submit-message",
    }
    again = post(ui, {**body, "messageId": assistant["id"]})
    assert again[0] == {"type": "start", "messageId": assistant["id"]}
    out = [c for c in again if isinstance(c, dict) and c["type"] == "tool-output-available"]
    assert [(c["toolCallId"], c["output"]) for c in out] == [
        ("call_book", "booked 3 nights in Oslo, Norway")
    ]
    assert again[-2] == {"type": "finish", "finishReason": "stop"}
    assert RUNS == [("add", ADD), ("book", BOOK)]
    stored = messages(ui, "chat-1")
    assert [m["role"] for m in stored].count("user") == 1


def test_denied_call_is_output_denied_and_never_runs(ui: UiServer) -> None:
    ui.model.script(*tool_turn()[:2], Reply(events=text_stream(["As you wish."])))
    first = post(ui, {"id": "chat-d", "messages": [user("book")]})
    assistant = {
        "id": first[0]["messageId"],
        "role": "assistant",
        "parts": [
            {
                "type": "dynamic-tool",
                "toolName": "book",
                "toolCallId": "call_book",
                "state": "approval-responded",
                "input": BOOK,
                "approval": {"id": "call_book", "approved": False, "reason": "too dear"},
            }
        ],
    }
    got = post(ui, {"id": "chat-d", "messages": [user("book"), assistant]})
    assert {"type": "tool-output-denied", "toolCallId": "call_book"} in got
    assert [name for name, _ in RUNS] == ["add"]


def test_resent_history_adds_only_the_new_message(ui: UiServer) -> None:
    ui.model.script(
        Reply(events=text_stream(["Hello", " there."])),
        Reply(events=text_stream(["Again."])),
    )
    first = post(ui, {"id": "chat-r", "messages": [user("hi")]})
    said = {
        "id": first[0]["messageId"],
        "role": "assistant",
        "parts": [{"type": "text", "text": "Hello there."}],
    }
    post(ui, {"id": "chat-r", "messages": [user("hi"), said, user("and again", "u2")]})
    stored = [(m["role"], m["content"][0]["text"]) for m in messages(ui, "chat-r")]
    assert stored == [
        ("user", "hi"),
        ("assistant", "Hello there."),
        ("user", "and again"),
        ("assistant", "Again."),
    ]
    # a resent history that disagrees is refused, nothing stored
    with ui.client() as c:
        r = c.post(
            "/api/ui/chat", json={"id": "chat-r", "messages": [user("bye", "u1"), user("x", "u3")]}
        )
    assert r.status_code == 409 and r.json()["error"]["code"] == "history_conflict"
    assert len(messages(ui, "chat-r")) == 4


def test_regenerate_retries_a_failure_and_asks_again_at_rest(ui: UiServer) -> None:
    ui.model.script(
        Reply(status=400, json={"error": {"message": "bad", "type": "invalid_request_error"}}),
        Reply(events=text_stream(["Second try."])),
        Reply(events=text_stream(["Third answer."])),
    )
    failed = post(ui, {"id": "chat-g", "messages": [user("hi")]})
    assert types(failed).count("error") == 1 and failed[-2]["finishReason"] == "error"
    body = {"id": "chat-g", "messages": [user("hi")], "trigger": "regenerate-message"}
    retried = post(ui, body)
    assert (
        "".join(c["delta"] for c in retried if isinstance(c, dict) and c["type"] == "text-delta")
        == "Second try."
    )
    again = post(ui, body)
    assert (
        "".join(c["delta"] for c in again if isinstance(c, dict) and c["type"] == "text-delta")
        == "Third answer."
    )
    stored = [(m["role"], m["content"][0]["text"]) for m in messages(ui, "chat-g")]
    assert stored == [("user", "hi"), ("assistant", "Third answer.")]  # the new branch


def test_tenants_tokens_and_bad_bodies(ui: UiServer) -> None:
    ui.model.script(Reply(events=text_stream(["Mine."])))
    post(ui, {"id": "chat-t", "messages": [user("hi")]})
    with ui.client(None) as c:
        assert c.post("/api/ui/chat", json={"id": "x", "messages": [user("hi")]}).status_code == 401
    with ui.client("token-bob") as c:  # alice's chat is not bob's: 404, nothing made
        r = c.post("/api/ui/chat", json={"id": "chat-t", "messages": [user("hi")]})
        assert r.status_code == 404, r.text
    with ui.client() as c:
        bad = [
            ({"id": "c", "messages": []}, "messages"),
            (
                {"id": "c", "messages": [{"id": "a", "role": "assistant", "parts": []}]},
                "messages[0].role",
            ),
            (
                {
                    "id": "c",
                    "messages": [
                        {"id": "a", "role": "user", "parts": [{"type": "file", "url": "x"}]}
                    ],
                },
                "messages[0].parts[0].type",
            ),
            ({"id": "c", "messages": [user("hi")], "trigger": "other"}, "trigger"),
        ]
        for body, where in bad:
            r = c.post("/api/ui/chat", json=body)
            assert r.status_code == 422, (body, r.text)
            assert where in r.text, r.text
        assert c.get("/api/contexts/c").status_code == 404  # nothing made
        assert "/api/ui/chat" in c.get("/openapi.json").json()["paths"]


def test_a_client_gone_mid_stream_does_not_stop_the_turn(ui: UiServer) -> None:
    words = [f"w{i} " for i in range(40)]
    ui.model.script(Reply(events=text_stream(words), event_delay=0.02))
    body = {"id": "chat-x", "messages": [user("hi")]}
    with ui.client() as c, c.stream("POST", "/api/ui/chat", json=body) as r:
        for line in r.iter_lines():
            if "text-delta" in line:
                break  # gone after the first piece
    # the way back: the context's events, from the start, until the turn ends
    seen: list[str] = []
    with (
        ui.client() as c,
        c.stream("GET", "/api/contexts/chat-x/events", headers={"Last-Event-ID": "0"}) as r,
    ):
        for line in r.iter_lines():
            if line.startswith("event: "):
                seen.append(line[len("event: ") :])
                if seen[-1] == "TurnCompleted":
                    break
    assert "TurnCompleted" in seen
    stored = messages(ui, "chat-x")
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[-1]["content"][0]["text"] == "".join(words)


needs_node = pytest.mark.skipif(
    not (MODULES / "node_modules" / "ai").is_dir() or shutil.which("node") is None,
    reason="the AI SDK is not installed (.ci/run installs tests/js/package.json "
    "into .cache/ui-stream)",
)


@needs_node
@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_the_ai_sdk_client_assembles_the_turn(ui: UiServer, decision: str) -> None:
    replies = tool_turn()
    if decision == "deny":
        replies[2] = Reply(events=text_stream(["Not booked."]))
    ui.model.script(*replies)
    env = {
        **os.environ,
        "UI_STREAM_MODULES": str(MODULES),
        "TURNFSM_URL": ui.url,
        "TURNFSM_TOKEN": "token-alice",
        "CHAT_ID": f"chat-node-{decision}",
        "PROMPT": "add, then book",
        "DECISION": decision,
    }
    done = subprocess.run(
        ["node", str(CLIENT)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    first, second = out["first"], out["second"]
    texts = [p["text"] for p in first["parts"] if p["type"] == "text"]
    assert texts == ["Let me add.", "Booking."]
    tools = {p["toolCallId"]: p for p in first["parts"] if p["type"] == "dynamic-tool"}
    assert tools["call_add"]["state"] == "output-available"
    assert tools["call_add"]["input"] == ADD and tools["call_add"]["output"] == 42
    assert tools["call_book"]["state"] == "approval-requested"
    assert tools["call_book"]["input"] == BOOK
    assert out["wouldSend"] is True  # useChat would send the decision by itself
    assert second["id"] == first["id"]  # the same assistant message goes on
    booked = next(p for p in second["parts"] if p.get("toolCallId") == "call_book")
    closing = [p["text"] for p in second["parts"] if p["type"] == "text"][-1]
    stored = messages(ui, f"chat-node-{decision}")
    results = [m for m in stored if m["role"] == "tool"]
    if decision == "approve":
        assert booked["state"] == "output-available"
        assert booked["output"] == "booked 3 nights in Oslo, Norway"
        assert closing == "Done: 42, and booked."
        assert RUNS == [("add", ADD), ("book", BOOK)]  # once
        assert len(results) == 2
    else:
        assert booked["state"] == "output-denied"
        assert closing == "Not booked."
        assert RUNS == [("add", ADD)]
