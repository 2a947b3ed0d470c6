"""``POST /ag-ui`` with AG-UI's own client: ``@ag-ui/client``'s ``HttpAgent``,
unmodified, driven by Node (``tests/js-agui/run_agent.cjs``) against a real
server on loopback. The client validates every event with its schemas and
checks their order; what it assembled is asserted here.

The client is installed by ``.ci/run`` (``npm ci`` from
``tests/js-agui/package-lock.json`` into ``.cache/ag-ui-client``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .ag_ui_server import PIECES, PLAN_TEXT, ag_ui_server
from .conftest import Running

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "tests" / "js-agui" / "run_agent.cjs"
MODULES = ROOT / ".cache" / "ag-ui-client"
NODE = shutil.which("node")

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="Node.js is not installed"),
    pytest.mark.skipif(
        not (MODULES / "node_modules" / "@ag-ui" / "client").is_dir(),
        reason=f"@ag-ui/client is not installed in {MODULES} (.ci/run installs it: npm ci)",
    ),
]


@pytest.fixture(scope="module")
def agui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yield from ag_ui_server(tmp_path_factory.mktemp("ag-ui-client") / "server.db")


def drive(server: Running, thread: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Run the steps with one HttpAgent; what it saw and assembled."""
    assert NODE is not None
    plan = {
        "modules": str(MODULES),
        "url": f"{server.url}/ag-ui",
        "token": "token-alice",
        "threadId": thread,
        "steps": steps,
    }
    done = subprocess.run(
        [NODE, str(HARNESS)],
        input=json.dumps(plan),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def stored_tools(server: Running, thread: str) -> list[dict[str, Any]]:
    with server.client() as http:
        answer = http.get(f"/api/contexts/{thread}/messages", params={"limit": 200})
    answer.raise_for_status()
    return [n["message"] for n in answer.json()["messages"] if n["message"]["role"] == "tool"]


def test_the_ag_ui_client_assembles_text_tool_calls_results_and_an_approval(
    agui: Running,
) -> None:
    thread = f"agui-{uuid.uuid4().hex}"
    seen = drive(
        agui,
        thread,
        [
            {"user": "hi"},
            {"user": "add two and three"},
            {"user": "plan it"},
            {"user": "book a trip"},
            {"resume": {"approved": True}},
        ],
    )
    runs = seen["runs"]
    assert [r["error"] for r in runs] == [None, None, None, None, None]

    # 1: streamed text, in two pieces
    hello = runs[0]
    assert list(hello["text"].values()) == ["Hello there."]
    assert hello["types"].count("TEXT_MESSAGE_CONTENT") == 2
    assert hello["finished"]["outcome"] == "success"
    assert "StreamingLLMResponse" in hello["steps"]

    # 2: a call the server runs, with its arguments and its result
    add = runs[1]
    assert add["toolCalls"] == [{"id": "call_add", "name": "add", "args": {"a": 2, "b": 3}}]
    assert add["results"] == [{"toolCallId": "call_add", "content": "5"}]
    assert "The answer is 5." in add["text"].values()

    # 3: a call whose arguments the model streamed in pieces
    plan = runs[2]
    assert plan["toolCalls"] == [{"id": "call_plan", "name": "add", "args": {"a": 4, "b": 5}}]
    assert plan["argPieces"]["call_plan"] == list(PIECES)  # as the model streamed them
    assert plan["results"] == [{"toolCallId": "call_plan", "content": "9"}]
    assert PLAN_TEXT in plan["text"].values()

    # 4: a call that needs approval ends the run with an interrupt
    book = runs[3]
    assert book["toolCalls"] == [{"id": "call_book", "name": "book", "args": {"city": "Oslo"}}]
    assert book["results"] == []
    assert book["finished"]["outcome"] == "interrupt"
    (interrupt,) = book["finished"]["interrupts"]
    assert interrupt["toolCallId"] == "call_book"
    assert interrupt["reason"] == "tool_approval"

    # 5: the client's resume approves it: the tool runs (once) and the turn goes on
    resumed = runs[4]
    assert resumed["results"] == [{"toolCallId": "call_book", "content": "booked Oslo"}]
    assert resumed["finished"]["outcome"] == "success"
    assert "The answer is booked Oslo." in resumed["text"].values()
    booked = stored_tools(agui, thread)
    assert [t["tool_result"]["request_id"] for t in booked].count("call_book") == 1

    # what the client holds: each user message once, the calls with their results
    messages = seen["messages"]
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert users == ["hi", "add two and three", "plan it", "book a trip"]
    calls = [c for m in messages if m["role"] == "assistant" for c in m.get("toolCalls", [])]
    assert [(c["id"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("call_add", {"a": 2, "b": 3}),
        ("call_plan", {"a": 4, "b": 5}),
        ("call_book", {"city": "Oslo"}),
    ]
    results = {m["toolCallId"]: m["content"] for m in messages if m["role"] == "tool"}
    assert results == {"call_add": "5", "call_plan": "9", "call_book": "booked Oslo"}

    # the resent histories added nothing twice to the context
    with agui.client() as http:
        nodes = http.get(f"/api/contexts/{thread}/messages", params={"limit": 200}).json()
    stored_users = [n["message"] for n in nodes["messages"] if n["message"]["role"] == "user"]
    assert len(stored_users) == 4


def test_the_ag_ui_client_runs_a_frontend_tool_and_sends_its_result(agui: Running) -> None:
    thread = f"agui-{uuid.uuid4().hex}"
    card = {
        "name": "show_card",
        "description": "Show a card in the page.",
        "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
    }
    seen = drive(
        agui,
        thread,
        [
            {"user": "show me a card", "tools": [card]},
            {"toolResults": {"call_card": "shown"}, "tools": [card]},
        ],
    )
    asked, answered = seen["runs"]
    assert [asked["error"], answered["error"]] == [None, None]
    assert asked["toolCalls"] == [
        {"id": "call_card", "name": "show_card", "args": {"title": "Oslo"}}
    ]
    assert asked["finished"]["outcome"] == "success"
    assert asked["finished"]["pendingToolCallIds"] == ["call_card"]
    assert asked["results"] == []
    assert "The answer is shown." in answered["text"].values()
    assert answered["finished"]["pendingToolCallIds"] == []
    stored = [t["tool_result"] for t in stored_tools(agui, thread)]
    assert stored == [{"request_id": "call_card", "result": "shown", "success": True}]
