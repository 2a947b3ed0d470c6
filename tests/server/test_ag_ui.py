"""``POST /ag-ui``: AG-UI's event stream from a real server on loopback, read
with httpx and parsed as AG-UI's client parses it (frames split on a blank
line of ``\\n\\n``, ``data:`` lines only)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from turnfsm import Engine
from turnfsm.adapters.llm import LLMRequest
from turnfsm.testing import ScriptedLLM
from turnfsm.tools import ask_user

from .ag_ui_server import PIECES, ag_ui_server
from .conftest import TOKENS, Running, serve_in_thread
from .scripted import GATE, scripted_server


@pytest.fixture(scope="module")
def agui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yield from scripted_server(tmp_path_factory.mktemp("ag-ui") / "server.db")


def parse(body: str) -> list[dict[str, Any]]:
    """The events in a stream, read as AG-UI's client reads them."""
    events: list[dict[str, Any]] = []
    for block in body.split("\n\n"):
        lines = block.split("\n")
        data = [line[5:].removeprefix(" ") for line in lines if line.startswith("data:")]
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
    assert text_of(first) == "I will book it."  # an answer that was not streamed comes whole
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


def test_a_failed_turn_ends_the_run_with_run_error(agui: Running) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    events = parse(post(agui, run_input(thread, [user("fail")])).text)
    end = events[-1]
    assert end["type"] == "RUN_ERROR"
    assert end["code"] == "turn_failed"
    assert "the model refused the request" in end["message"]
    assert "RUN_FINISHED" not in types(events)
    assert state_of(agui, thread)["state"] == "PermanentFailure"


# ---------------------------------------------------------------------- resent history


def test_a_new_thread_takes_the_history_the_client_holds(agui: Running) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    history = [
        user("earlier question"),
        {"id": "a-0", "role": "assistant", "content": "earlier answer"},
        user("hi"),
    ]
    answer = post(agui, run_input(thread, history))
    assert parse(answer.text)[-1]["type"] == "RUN_FINISHED"
    said = [(m["role"], m["content"][0]["text"]) for m in stored(agui, thread)]
    assert said == [
        ("user", "earlier question"),
        ("assistant", "earlier answer"),
        ("user", "hi"),
        ("assistant", "Hello there."),
    ]


def test_a_resent_history_adds_nothing_twice(agui: Running) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    first = user("hi")
    events = parse(post(agui, run_input(thread, [first])).text)
    reply = next(e["messageId"] for e in events if e["type"] == "TEXT_MESSAGE_START")
    assistant = {"id": reply, "role": "assistant", "content": "Hello there."}
    again = post(agui, run_input(thread, [first, assistant, user("hi again")]))
    assert parse(again.text)[-1]["type"] == "RUN_FINISHED"
    roles = [m["role"] for m in stored(agui, thread)]
    assert roles == ["user", "assistant", "user", "assistant"]

    # the same run once more (a client that retries): its message is refused, not doubled
    repeated = post(agui, run_input(thread, [first]))
    assert repeated.status_code == 422, repeated.text
    assert len(stored(agui, thread)) == 4


def test_a_history_that_disagrees_is_a_conflict_with_nothing_stored(agui: Running) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    post(agui, run_input(thread, [user("hi")]))
    answer = post(agui, run_input(thread, [user("something else"), user("and more")]))
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"]["code"] == "history_conflict"
    assert len(stored(agui, thread)) == 2


# ---------------------------------------------------------------------- what is refused


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"id": "a", "role": "assistant", "content": "x"}]}, "messages[0].role"),
        ({"tools": [{"name": "add", "description": "the server's own"}]}, "tools[0].name"),
        ({"tools": [{"name": "bad name!", "description": "x"}]}, "tools[0].name"),
        (
            {"resume": [{"interruptId": "c", "status": "resolved", "payload": {"ok": 1}}]},
            "resume[0].payload.approved",
        ),
        ({"threadId": ""}, "threadId"),
    ],
)
def test_a_malformed_run_is_a_422_naming_the_field(
    agui: Running, change: dict[str, Any], where: str
) -> None:
    body = run_input(f"t-{uuid.uuid4().hex}", [user("hi")]) | change
    answer = post(agui, body)
    assert answer.status_code == 422, answer.text
    assert where in answer.text


def test_another_tenants_thread_is_not_found(agui: Running) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    post(agui, run_input(thread, [user("book a trip")]))
    theirs = post(agui, run_input(thread, [user("hi")]), token="token-bob")
    assert theirs.status_code == 404, theirs.text
    resume = [{"interruptId": "call_book", "status": "cancelled"}]
    decided = post(agui, run_input(thread, [], resume=resume), token="token-bob")
    assert decided.status_code == 404, decided.text
    assert post(agui, run_input(thread, [user("hi")]), token="nope").status_code == 401
    assert _book_calls(agui, thread) == []  # nothing decided by them


def test_the_route_is_in_the_openapi_document(agui: Running) -> None:
    with agui.client() as http:
        document = http.get("/openapi.json").json()
    route = document["paths"]["/ag-ui"]["post"]
    assert "text/event-stream" in route["responses"]["200"]["content"]
    schema = route["requestBody"]["content"]["application/json"]["schema"]
    assert schema["$ref"].endswith("/RunAgentIn")
    assert {"threadId", "runId"} <= set(document["components"]["schemas"]["RunAgentIn"]["required"])


# ---------------------------------------------------------------------- limits and disconnects


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    db = tmp_path_factory.mktemp("ag-ui-limited") / "server.db"
    yield from scripted_server(db, max_turns_per_tenant=1, max_body=4_000)


def state_of(server: Running, cid: str) -> dict[str, Any]:
    with server.client() as http:
        answer = http.get(f"/api/contexts/{cid}/state")
    answer.raise_for_status()
    out: dict[str, Any] = answer.json()
    return out


def test_a_client_gone_mid_stream_leaves_the_turn_running(limited: Running) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    GATE.clear()
    try:
        body = run_input(thread, [user("hold")])
        with limited.client() as http, http.stream("POST", "/ag-ui", json=body) as answer:
            assert answer.status_code == 200
            seen = ""
            for piece in answer.iter_text():
                seen += piece
                if '"stepName":"AwaitingLLMResponse"' in seen:
                    break  # the model holds its answer: the client goes away
        assert state_of(limited, thread)["running"] is True
        # the turn still runs: another run on the thread is refused, not started
        busy = post(limited, run_input(thread, [user("hi")]))
        assert busy.status_code == 409, busy.text
        assert busy.json()["error"]["code"] == "context_busy"
        # and it holds the tenant's one turn: a run on another thread is a 429
        other = post(limited, run_input(f"t-{uuid.uuid4().hex}", [user("hi")]))
        assert other.status_code == 429, other.text
    finally:
        GATE.set()
    # the rest, where a client gets it: the context's durable event stream, from
    # the last frame's id: (the engine event's seq), up to the turn's end
    last = [line[4:] for line in seen.split("\n") if line.startswith("id: ")][-1]
    with limited.client() as http:
        after = {"Last-Event-ID": last}
        with http.stream("GET", f"/api/contexts/{thread}/events", headers=after) as events:
            for line in events.iter_lines():
                if line.startswith("event: TurnCompleted"):
                    break
    assert state_of(limited, thread)["state"] == "Idle"
    answer = stored(limited, thread)[-1]
    assert answer["role"] == "assistant"
    assert answer["content"][0]["text"] == "Held."
    assert answer["metadata"]["cancelled"] is False


def test_a_body_over_the_limit_is_a_413(limited: Running) -> None:
    body = run_input(f"t-{uuid.uuid4().hex}", [user("x" * 5_000)])
    answer = post(limited, body)
    assert answer.status_code == 413, answer.text


# ---------------------------------------------------------------------- questions


async def asking(request: LLMRequest) -> dict[str, Any]:
    last = request.messages[-1]
    if last["role"] == "tool":
        return {"text": f"Going to {last['content']}."}
    args = {"question": "Which city?", "choices": ["Oslo", "Rome"]}
    return {"tool_calls": [{"id": "call_ask", "name": "ask_user", "arguments": args}]}


@pytest.fixture(scope="module")
def asks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path_factory.mktemp("ag-ui-asks") / "server.db"

    def factory() -> Engine:
        return Engine(llm=ScriptedLLM(asking), tools=[ask_user], store=f"sqlite:///{db}")

    app = create_app(factory, ServerConfig(tokens=dict(TOKENS), heartbeat=0.5))
    for url in serve_in_thread(app):
        yield Running(url, db)


def test_a_question_is_an_interrupt_answered_by_the_next_run(asks: Running) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    first = parse(post(asks, run_input(thread, [user("plan a trip")])).text)
    (interrupt,) = first[-1]["outcome"]["interrupts"]
    assert interrupt["reason"] == "question"
    assert interrupt["message"] == "Which city?"
    assert interrupt["responseSchema"]["properties"]["answer"]["enum"] == ["Oslo", "Rome"]

    wrong = [{"interruptId": "call_ask", "status": "resolved", "payload": {"answer": "Paris"}}]
    refused = post(asks, run_input(thread, [], resume=wrong))
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "answer_not_a_choice"

    resume = [{"interruptId": "call_ask", "status": "resolved", "payload": {"answer": "Rome"}}]
    second = parse(post(asks, run_input(thread, [], resume=resume)).text)
    assert second[-1]["outcome"] == {"type": "success"}
    result = next(e for e in second if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "call_ask"
    assert "Rome" in result["content"]
    assert text_of(second).startswith("Going to")


# ------------------------------------------------ streamed arguments, frontend tools

CARD_TOOL = {
    "name": "show_card",
    "description": "Show a card in the page.",
    "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def pieces(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yield from ag_ui_server(tmp_path_factory.mktemp("ag-ui-pieces") / "server.db")


def test_a_calls_arguments_stream_in_the_pieces_the_model_sent(pieces: Running) -> None:
    events = parse(post(pieces, run_input(f"t-{uuid.uuid4().hex}", [user("plan it")])).text)
    call = [e for e in events if e.get("toolCallId") == "call_plan"]
    kinds = [e["type"] for e in call]
    assert kinds == [
        "TOOL_CALL_START",
        *["TOOL_CALL_ARGS"] * len(PIECES),
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ]
    assert [e["delta"] for e in call[1:-2]] == list(PIECES)
    assert call[0]["toolCallName"] == "add"
    # the call started while the answer streamed, before the model's answer was whole
    steps = [e.get("stepName") for e in events]
    assert events.index(call[0]) < steps.index("ProcessingLLMResponse")


def test_a_frontend_tools_call_goes_to_the_client_and_its_result_comes_back(
    pieces: Running,
) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    asked = user("show me a card")
    first = parse(post(pieces, run_input(thread, [asked], tools=[CARD_TOOL])).text)
    end = first[-1]
    assert end["outcome"] == {"type": "success", "pendingToolCallIds": ["call_card"]}
    start = next(e for e in first if e["type"] == "TOOL_CALL_START")
    assert (start["toolCallId"], start["toolCallName"]) == ("call_card", "show_card")
    args = "".join(e["delta"] for e in first if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(args) == {"title": "Oslo"}
    assert "TOOL_CALL_RESULT" not in types(first)
    assert state_of(pieces, thread)["state"] == "AwaitingToolApproval"

    call = {
        "id": "call_card",
        "type": "function",
        "function": {"name": "show_card", "arguments": args},
    }
    history = [
        asked,
        {"id": start["parentMessageId"], "role": "assistant", "toolCalls": [call]},
        {"id": "r-1", "role": "tool", "toolCallId": "call_card", "content": "shown"},
    ]
    second = parse(post(pieces, run_input(thread, history, tools=[CARD_TOOL])).text)
    assert second[-1]["outcome"] == {"type": "success"}
    assert text_of(second) == "The answer is shown."
    results = [m["tool_result"] for m in stored(pieces, thread) if m["role"] == "tool"]
    assert results == [{"request_id": "call_card", "result": "shown", "success": True}]

    # the same results again: the call has its result, nothing is stored twice
    again = post(pieces, run_input(thread, history, tools=[CARD_TOOL]))
    assert again.status_code == 409, again.text
    assert len([m for m in stored(pieces, thread) if m["role"] == "tool"]) == 1
