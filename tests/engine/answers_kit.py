"""What the tests of an LLM's answers share (``test_llm_answers.py``, the
answer's ids, text and arguments; ``test_llm_adapter_failures.py``, answers
of the wrong shape and adapters that fail): the tools, an engine on a SQLite
file, and checks of what is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from turnfsm import Engine, ToolCallRequest, tool
from turnfsm.adapters.llm import LLMRequest, LLMResponse, ToolCallData
from turnfsm.events import EVENT_ADAPTER
from turnfsm.model import ChatContext
from turnfsm.storage import SQLiteStore
from turnfsm.testing import FakeClock, SequentialIds

RUNS: list[tuple[str, Any]] = []


@tool
def lookup(city: str) -> str:
    """Look a city up (runs without asking)."""
    RUNS.append(("lookup", city))
    return f"found {city}"


@tool(approval="required")
def book(city: str) -> str:
    """Book a trip (a human approves each call)."""
    RUNS.append(("book", city))
    return f"booked {city}"


def engine_on(path: Path, llm: Any, prefix: str = "a-") -> Engine:
    return Engine(
        llm=llm,
        tools=[lookup, book],
        store=SQLiteStore(path),
        clock=FakeClock(),
        ids=SequentialIds(prefix),
    )


def calls_of(ctx: ChatContext) -> list[ToolCallRequest]:
    return [c for n in ctx.history() for c in n.message.tool_calls or ()]


def results_of(ctx: ChatContext) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for n in ctx.history():
        r = n.message.tool_result
        if r is not None:
            out.setdefault(r.request_id, []).append(r)
    return out


def assert_every_call_answered_once(ctx: ChatContext) -> None:
    results = results_of(ctx)
    ids = [c.id for c in calls_of(ctx)]
    assert len(ids) == len(set(ids)), ids
    assert sorted(results) == sorted(ids)
    assert all(len(v) == 1 for v in results.values()), results


def assert_chat_pairs_ids(request: LLMRequest) -> None:
    """Every tool message answers a call id the request's assistant messages carry."""
    asked = [c["id"] for m in request.messages for c in m.get("tool_calls") or ()]
    answered = [m["tool_call_id"] for m in request.messages if m["role"] == "tool"]
    assert len(asked) == len(set(asked))
    assert sorted(asked) == sorted(answered)


def assert_events_serialise(events: list[Any]) -> None:
    for e in events:
        EVENT_ADAPTER.dump_json(e)


def answer(*calls: tuple[Any, Any, Any], text: str = "") -> LLMResponse:
    return LLMResponse(
        text=text,
        tool_calls=tuple(ToolCallData(i, n, a) for i, n, a in calls),
        finish_reason="tool_calls",
    )


class Adapter:
    """An adapter whose ``stream`` is given by the test."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.calls = 0

    def stream(self, request: LLMRequest) -> Any:
        self.calls += 1
        return self._stream(request)
