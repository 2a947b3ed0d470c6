"""Reasoning items that name their provider, the provider's own stop reason,
and usage in the shared shape: through a real engine on a real SQLite store,
into the next request's view, and out of another provider's requests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kit
import pytest
from canonical import WEATHER_CALLS, get_weather

from turnfsm import State, StopReason
from turnfsm.adapters.llm import LLMChunk, LLMRequest, LLMResponse
from turnfsm.adapters.llm._openai_responses import responses_request_body
from turnfsm.model import (
    RESPONSES_KEY,
    ReasoningData,
    ReasoningItem,
    ToolCallData,
    provider_usage,
)
from turnfsm.storage import SQLiteStore

pytestmark = pytest.mark.anyio

THINKING = ReasoningData(
    "",
    ("I should look the weather up.",),
    provider="anthropic",
    data={"type": "thinking", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},
)
REDACTED = ReasoningData(
    "",
    provider="anthropic",
    data={"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
    position=1,
)
OPENAI_ITEM = ReasoningData("rs_1", ("plan",), "gAAAA-opaque")


class Answers:
    """An adapter that gives the scripted answers in order and keeps each request."""

    def __init__(self, *answers: LLMResponse) -> None:
        self.answers = list(answers)
        self.requests: list[LLMRequest] = []

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMChunk]:
        self.requests.append(request)
        yield self.answers.pop(0)


def _tool_answer(*reasoning: ReasoningData) -> LLMResponse:
    return LLMResponse(
        tool_calls=(
            ToolCallData("toolu_1", "get_weather", {"city": "Oslo"}),
            ToolCallData("toolu_2", "get_weather", {"city": "Bergen"}),
        ),
        finish_reason="tool_calls",
        provider_reason="tool_use",
        reasoning=reasoning,
    )


async def test_reasoning_items_are_stored_and_go_back_in_the_next_view(tmp_path: Path) -> None:
    WEATHER_CALLS.clear()
    llm = Answers(
        _tool_answer(OPENAI_ITEM, THINKING, REDACTED),
        LLMResponse(text="Cool.", finish_reason="stop", provider_reason="end_turn"),
    )
    store = SQLiteStore(tmp_path / "t.db")
    async with kit.make_engine(llm=llm, tools=[get_weather], store=store).engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Weather?")
        assert turn.stop_reason == StopReason.COMPLETED
    second = llm.requests[1].messages
    asked = next(m for m in second if m.get("tool_calls"))
    assert asked[RESPONSES_KEY]["reasoning"] == [
        {"id": "rs_1", "summary": ["plan"], "encrypted_content": "gAAAA-opaque"},
        {
            "id": "",
            "summary": ["I should look the weather up."],
            "provider": "anthropic",
            "data": {"type": "thinking", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},
        },
        {
            "id": "",
            "summary": [],
            "provider": "anthropic",
            "data": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            "position": 1,
        },
    ]
    reopened = SQLiteStore(tmp_path / "t.db")
    async with kit.make_engine(llm=Answers(), store=reopened).engine as engine:
        ctx = await engine.get_context(cid)
    stored = ctx.history()[1].message
    assert stored.reasoning == [
        ReasoningItem(id="rs_1", summary=["plan"], encrypted_content="gAAAA-opaque"),
        ReasoningItem(
            id="",
            summary=["I should look the weather up."],
            provider="anthropic",
            data={"type": "thinking", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},
        ),
        ReasoningItem(
            id="",
            provider="anthropic",
            data={"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            position=1,
        ),
    ]
    assert stored.metadata.provider_reason == "tool_use"
    assert ctx.history()[-1].message.metadata.provider_reason == "end_turn"


@pytest.mark.parametrize(
    ("item", "says"),
    [
        (ReasoningData("", provider="anthropic", data=["not", "a", "dict"]), "not a dict"),  # type: ignore[arg-type]
        (ReasoningData("", provider="anthropic", data={"n": float("nan")}), "unchanged"),
        (ReasoningData("", provider="anthropic", position=-1), "position"),
    ],
)
async def test_reasoning_data_that_cannot_go_back_unchanged_is_an_invalid_answer(
    item: ReasoningData, says: str
) -> None:
    llm = Answers(LLMResponse(text="x", reasoning=(item,)))
    async with kit.make_engine(llm=llm).engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
    assert turn.state == State.PERMANENT_FAILURE
    assert turn.error is not None and turn.error.startswith("invalid_answer: ")
    assert says in turn.error


def test_the_responses_api_gets_back_only_its_own_reasoning() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                }
            ],
            RESPONSES_KEY: {
                "reasoning": [
                    {"id": "", "summary": ["t"], "provider": "anthropic", "data": {"x": 1}},
                    {"id": "rs_1", "summary": ["plan"]},
                    {"id": "rs_2", "summary": [], "provider": "openai"},
                ]
            },
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "15 C"},
    ]
    body = responses_request_body(LLMRequest("c", "o4-mini", messages), stream=True)
    reasoning = [i for i in body["input"] if i["type"] == "reasoning"]
    assert [r["id"] for r in reasoning] == ["rs_1", "rs_2"]


def test_provider_usage_puts_the_shared_details_under_the_chat_names() -> None:
    sent = {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 5}
    usage = provider_usage(
        sent,
        prompt_tokens=100,
        completion_tokens=5,
        cache_read_tokens=90,
        cache_creation_tokens=0,
        reasoning_tokens=3,
    )
    assert usage == {
        "prompt_tokens": 100,
        "completion_tokens": 5,
        "total_tokens": 105,
        "input_tokens": 10,
        "cache_read_input_tokens": 90,
        "output_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 90, "cache_creation_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }


def test_an_answer_with_provider_reasoning_crosses_the_temporal_wire_whole() -> None:
    """The LLM activity's result carries the answer as JSON (the Temporal codec)."""
    from turnfsm.temporal import _codec

    answer = _tool_answer(THINKING, REDACTED)
    wire = json.loads(json.dumps(_codec.chunk_to(answer)))
    assert _codec.chunk_from(wire) == answer
