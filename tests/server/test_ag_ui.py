"""``POST /ag-ui``: AG-UI's event stream from a real server on loopback, read
with httpx and parsed as AG-UI's client parses it (frames split on a blank
line of ``\\n\\n``, ``data:`` lines only)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import Running
from .scripted import GATE, scripted_server


@pytest.fixture(scope="module")
def agui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yield from scripted_server(tmp_path_factory.mktemp("ag-ui") / "server.db")


def parse(body: str) -> list[dict[str, Any]]:
    """The events in a stream, read as AG-UI's client reads them."""
    events: list[dict[str, Any]] = []
    for block in body.split("\n\n"):
        data = [line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")]
        if data:
            events.append(json.loads("\n".join(data)))
    return events


def user(text: str, mid: str | None = None) -> dict[str, Any]:
    return {"id": mid or uuid.uuid4().hex, "role": "user", "content": text}


def run_input(thread: str, messages: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": uuid.uuid4().hex,
        "messages": messages,
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
        **more,
    }


def post(server: Running, body: dict[str, Any], token: str = "token-alice") -> httpx.Response:
    with server.client(token) as http:
        return http.post("/ag-ui", json=body, headers={"Accept": "text/event-stream"})


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def stored(server: Running, cid: str) -> list[dict[str, Any]]:
    with server.client() as http:
        answer = http.get(f"/api/contexts/{cid}/messages", params={"limit": 200})
    answer.raise_for_status()
    nodes: list[dict[str, Any]] = answer.json()["messages"]
    return [n["message"] | {"id": n["id"]} for n in nodes]


def test_a_streamed_answer_is_a_run_of_text_events(agui: Running) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    body = run_input(thread, [user("hi")])
    answer = post(agui, body)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert "\r\n" not in answer.text  # AG-UI's client splits frames on "\n\n" only
    events = parse(answer.text)
    assert events[0] == {"type": "RUN_STARTED", "threadId": thread, "runId": body["runId"]}
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "success"}
    assert events[-1]["runId"] == body["runId"]
    assert text_of(events) == "Hello there."
    kinds = types(events)
    start = kinds.index("TEXT_MESSAGE_START")
    assert kinds.index("TEXT_MESSAGE_END") > start
    assert kinds.count("TEXT_MESSAGE_CONTENT") == 2  # one per streamed piece
    started = [e["stepName"] for e in events if e["type"] == "STEP_STARTED"]
    finished = [e["stepName"] for e in events if e["type"] == "STEP_FINISHED"]
    assert started == [
        "ProcessingUserMessage",
        "AwaitingLLMResponse",
        "StreamingLLMResponse",
        "ProcessingLLMResponse",
        "Idle",
    ]
    assert finished == started  # every step closed before RUN_FINISHED
    # the thread is a context of the caller's tenant, named by the thread's id
    assert [m["role"] for m in stored(agui, thread)] == ["user", "assistant"]


def test_a_tool_the_server_runs_is_a_call_and_its_result(agui: Running) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    events = parse(post(agui, run_input(thread, [user("add them")])).text)
    kinds = types(events)
    assert kinds.count("TOOL_CALL_START") == 1
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["toolCallId"] == "call_add"
    assert start["toolCallName"] == "add"
    args = "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(args) == {"a": 2, "b": 3}
    assert kinds.index("TOOL_CALL_END") < kinds.index("TOOL_CALL_RESULT")
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "call_add"
    assert result["content"] == "5"
    tool_message = next(m for m in stored(agui, thread) if m["role"] == "tool")
    assert result["messageId"] == tool_message["id"]
    assert text_of(events) == "The answer is 5."
    assert events[-1]["outcome"] == {"type": "success"}


def _book_calls(server: Running, thread: str) -> list[dict[str, Any]]:
    return [
        m
        for m in stored(server, thread)
        if m["role"] == "tool" and m["tool_result"]["request_id"] == "call_book"
    ]


def test_an_approval_ends_the_run_with_an_interrupt_and_the_next_run_decides(
    agui: Running,
) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    first = parse(post(agui, run_input(thread, [user("book a trip")])).text)
    end = first[-1]
    assert end["type"] == "RUN_FINISHED"
    assert end["outcome"]["type"] == "interrupt"
    (interrupt,) = end["outcome"]["interrupts"]
    assert interrupt["id"] == interrupt["toolCallId"] == "call_book"
    assert interrupt["reason"] == "tool_approval"
    assert interrupt["responseSchema"]["required"] == ["approved"]
    assert "TOOL_CALL_RESULT" not in types(first)
    assert _book_calls(agui, thread) == []  # not run before the decision

    resume = [{"interruptId": "call_book", "status": "resolved", "payload": {"approved": True}}]
    second = parse(post(agui, run_input(thread, [], resume=resume)).text)
    assert second[-1]["outcome"] == {"type": "success"}
    result = next(e for e in second if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == "booked Oslo"
    assert text_of(second) == "The answer is booked Oslo."
    assert len(_book_calls(agui, thread)) == 1

    # the same decision again: refused, and the tool does not run twice
    again = post(agui, run_input(thread, [], resume=resume))
    assert again.status_code == 409, again.text
    assert again.json()["error"]["code"] == "tool_call_not_pending"
    assert len(_book_calls(agui, thread)) == 1


def test_a_denial_resumes_the_turn_without_running_the_tool(agui: Running) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    post(agui, run_input(thread, [user("book a trip")]))
    resume = [
        {
            "interruptId": "call_book",
            "status": "resolved",
            "payload": {"approved": False, "reason": "too far"},
        }
    ]
    events = parse(post(agui, run_input(thread, [], resume=resume)).text)
    assert events[-1]["outcome"] == {"type": "success"}
    (result,) = _book_calls(agui, thread)
    assert result["tool_result"]["success"] is False
    assert "too far" in json.dumps(result["tool_result"]["result"])
