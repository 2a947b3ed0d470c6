"""A turn does not copy the history: the request an adapter is sent shares the
engine's chat-format list, which grows in place while nothing else holds it, and
is copied before a change only when a request that holds it was kept (by the
adapter, a test double, a subscriber): what was sent never changes afterwards."""

from __future__ import annotations

from typing import Any

import anyio

from turnfsm import Engine, tool
from turnfsm.engine import _history
from turnfsm.model import LLMRequest, LLMResponse, ToolCallData
from turnfsm.testing import ScriptedLLM


@tool(inline=True)
def get_weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "temp_c": 15}


class _Answers:
    """A tool call, then a text answer; keeps each request's list when ``keep``."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.kept: list[tuple[list[dict[str, Any]], int]] = []

    def __call__(self, request: LLMRequest) -> LLMResponse:
        messages = request.messages
        if self.keep:
            self.kept.append((messages, len(messages)))
        if messages[-1]["role"] == "user":
            return LLMResponse(
                tool_calls=(ToolCallData(f"c{len(messages)}", "get_weather", {"city": "X"}),),
                finish_reason="tool_calls",
            )
        return LLMResponse(text="ok", finish_reason="stop")


def _copies(monkeypatch: Any) -> list[int]:
    """Counts the lists :func:`_history.append` makes."""
    made: list[int] = []

    def counting(items: Any) -> list[Any]:
        made.append(1)
        return list(items)

    monkeypatch.setattr(_history, "list", counting, raising=False)
    return made


def _turns(answers: _Answers, n: int) -> None:
    async def go() -> None:
        async with Engine(llm=ScriptedLLM(answers, record=False), tools=[get_weather]) as engine:
            cid = await engine.create_context()
            for i in range(n):
                await engine.send(cid, f"turn {i}")

    anyio.run(go)


def test_no_copy_of_the_history_when_nothing_keeps_a_request(monkeypatch: Any) -> None:
    made = _copies(monkeypatch)
    shared: list[bool] = []

    class Shared(_Answers):
        engine: Engine

        def __call__(self, request: LLMRequest) -> LLMResponse:
            rt = self.engine._d.loaded.get(request.context_id)
            shared.append(rt is not None and request.messages is rt.chat)
            return super().__call__(request)

    async def go() -> None:
        answers = Shared(keep=False)
        async with Engine(llm=ScriptedLLM(answers, record=False), tools=[get_weather]) as engine:
            answers.engine = engine
            cid = await engine.create_context()
            for i in range(5):
                await engine.send(cid, f"turn {i}")

    anyio.run(go)
    assert shared == [True] * 10  # each request is sent the engine's own list
    assert made == []  # which was never copied


def test_a_kept_request_keeps_the_history_it_was_sent(monkeypatch: Any) -> None:
    made = _copies(monkeypatch)
    answers = _Answers(keep=True)
    _turns(answers, 3)
    assert [n for _, n in answers.kept] == [1, 3, 5, 7, 9, 11]
    for messages, n in answers.kept:
        assert len(messages) == n  # the engine went on with a copy
    assert made  # and that copy was made only because a list was kept


def test_recorded_requests_are_snapshots() -> None:
    async def go() -> list[int]:
        llm = ScriptedLLM(_Answers(keep=False))  # records every request
        async with Engine(llm=llm, tools=[get_weather]) as engine:
            cid = await engine.create_context()
            for i in range(2):
                await engine.send(cid, f"turn {i}")
        return [len(r.messages) for r in llm.requests]

    assert anyio.run(go) == [1, 3, 5, 7]
