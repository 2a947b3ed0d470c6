"""``OpenAIResponsesAdapter`` against the loopback server: text, a function call
round trip through the engine, errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest
from openai_loopback import LoopbackServer, Reply, error_body
from openai_samples import ResponsesStream

from turnfsm import Engine, Role, State, tool
from turnfsm.errors import LLMError, PermanentLLMError, TransientLLMError
from turnfsm.model import (
    LLMChunk,
    LLMRequest,
    LLMResponse,
    TextDelta,
    ThinkingDelta,
    ToolCallData,
    ToolCallDelta,
)
from turnfsm.testing import FakeClock, SequentialIds

if TYPE_CHECKING:
    from turnfsm.adapters.llm.openai import OpenAIResponsesAdapter


pytestmark = pytest.mark.anyio


@pytest.fixture
async def llm(loopback: LoopbackServer) -> AsyncIterator[OpenAIResponsesAdapter]:
    from turnfsm.adapters.llm.openai import OpenAIResponsesAdapter

    async with OpenAIResponsesAdapter(
        base_url=loopback.url, api_key="sk-loop", timeout=10
    ) as adapter:
        yield adapter


def request() -> LLMRequest:
    return LLMRequest(
        context_id="c",
        model="gpt-4o-mini",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        parameters={"max_tokens": 50},
    )


async def collect(llm: OpenAIResponsesAdapter) -> list[LLMChunk]:
    return [c async for c in llm.stream(request())]


async def test_text_with_reasoning_summary(
    loopback: LoopbackServer, llm: OpenAIResponsesAdapter
) -> None:
    loopback.script(
        Reply(
            events=ResponsesStream().reasoning(["Greet ", "back."]).text(["Hel", "lo!"]).completed()
        )
    )
    chunks = await collect(llm)
    assert chunks[:-1] == [
        ThinkingDelta("Greet "),
        ThinkingDelta("back."),
        TextDelta("Hel"),
        TextDelta("lo!"),
    ]
    final = chunks[-1]
    assert isinstance(final, LLMResponse)
    assert (final.text, final.thinking, final.finish_reason, final.model) == (
        "Hello!",
        "Greet back.",
        "stop",
        "gpt-4o-mini",
    )
    assert final.usage is not None
    assert (
        final.usage["prompt_tokens"],
        final.usage["completion_tokens"],
        final.usage["total_tokens"],
    ) == (20, 7, 27)
    [got] = loopback.requests
    assert got.path == "/v1/responses"
    assert got.body == llm.request_body(request())
    assert got.body["input"] == [
        {"type": "message", "role": "system", "content": "Be brief."},
        {"type": "message", "role": "user", "content": "Hi"},
    ]
    assert got.body["max_output_tokens"] == 50 and got.body["stream"] is True
    assert got.headers["x-stainless-retry-count"] == "0"


async def test_not_streamed(loopback: LoopbackServer, llm: OpenAIResponsesAdapter) -> None:
    llm.streaming = False
    done = ResponsesStream().text(["Whole."]).completed()[-1]
    assert isinstance(done, dict)
    loopback.script(Reply(json=done["response"]))
    [final] = await collect(llm)
    assert isinstance(final, LLMResponse) and final.text == "Whole."
    assert "stream" not in loopback.requests[0].body


CALLS: list[str] = []


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: the city name.
    """
    CALLS.append(city)
    return {"city": city, "temp_c": 15}


async def test_a_function_call_round_trip(
    loopback: LoopbackServer, llm: OpenAIResponsesAdapter
) -> None:
    CALLS.clear()
    loopback.script(
        Reply(
            events=ResponsesStream()
            .function_call("call_9", "get_weather", {"city": "Lisbon"})
            .completed()
        ),
        Reply(events=ResponsesStream().text(["Lisbon: ", "15 C."]).completed()),
    )
    async with Engine(
        llm=llm, tools=[get_weather], clock=FakeClock(), ids=SequentialIds()
    ) as engine:
        cid = await engine.create_context(system_prompt="You are helpful.", model="gpt-4o-mini")
        turn = await engine.send(cid, "Weather in Lisbon?")
        assert [State.IDLE, *turn.states] == [
            "Idle",
            "ProcessingUserMessage",
            "AwaitingLLMResponse",
            "StreamingLLMResponse",
            "ProcessingLLMResponse",
            "ExecutingTools",
            "AwaitingLLMResponse",
            "StreamingLLMResponse",
            "ProcessingLLMResponse",
            "Idle",
        ]
        assert CALLS == ["Lisbon"]
        assert turn.text == "Lisbon: 15 C."
        assert [m.role for m in turn.messages] == [
            Role.USER,
            Role.ASSISTANT,
            Role.TOOL,
            Role.ASSISTANT,
        ]
        call = turn.messages[1].tool_calls[0]  # type: ignore[index]
        assert (call.id, call.tool_name, call.arguments) == (
            "call_9",
            "get_weather",
            {"city": "Lisbon"},
        )
    first, second = loopback.bodies
    assert first["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": first["tools"][0]["parameters"],
            "strict": False,
        }
    ]
    assert second["input"][-2:] == [
        {
            "type": "function_call",
            "call_id": "call_9",
            "name": "get_weather",
            "arguments": '{"city":"Lisbon"}',
        },
        {
            "type": "function_call_output",
            "call_id": "call_9",
            "output": '{"city":"Lisbon","temp_c":15}',
        },
    ]


async def test_function_call_fragments_stream_as_deltas(
    loopback: LoopbackServer, llm: OpenAIResponsesAdapter
) -> None:
    loopback.script(
        Reply(
            events=ResponsesStream()
            .function_call("c1", "f", {"a": "long value here"}, piece=3)
            .function_call("c2", "g", {"b": 2}, piece=3)
            .completed()
        )
    )
    chunks = await collect(llm)
    deltas = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert {d.index for d in deltas} == {0, 1}
    final = chunks[-1]
    assert isinstance(final, LLMResponse)
    assert final.tool_calls == (
        ToolCallData("c1", "f", {"a": "long value here"}),
        ToolCallData("c2", "g", {"b": 2}),
    )
    assert final.finish_reason == "tool_calls"


async def test_an_http_error(loopback: LoopbackServer, llm: OpenAIResponsesAdapter) -> None:
    import openai

    loopback.script(
        Reply(
            status=429,
            json=error_body("Rate limit", "requests", "rate_limit_exceeded"),
            headers={"retry-after-ms": "1200"},
        )
    )
    with pytest.raises(TransientLLMError) as info:
        await collect(llm)
    assert (info.value.status, info.value.retry_after) == (429, 1.2)
    assert isinstance(info.value.__cause__, openai.RateLimitError)


async def test_an_error_event_mid_stream(
    loopback: LoopbackServer, llm: OpenAIResponsesAdapter
) -> None:
    stream = ResponsesStream().text(["Par", "tial"])
    stream.add("error", code="server_error", message="The server had an error", param=None)
    loopback.script(Reply(events=stream.events))
    with pytest.raises(LLMError) as info:
        await collect(llm)
    err = info.value
    assert isinstance(err, TransientLLMError)
    assert (err.kind, err.partial_text) == ("stream_error", "Partial")


async def test_a_failed_response(loopback: LoopbackServer, llm: OpenAIResponsesAdapter) -> None:
    stream = ResponsesStream()
    stream.add(
        "response.failed",
        response={
            "id": "resp_x",
            "object": "response",
            "status": "failed",
            "output": [],
            "error": {"code": "invalid_prompt", "message": "Invalid prompt."},
        },
    )
    loopback.script(Reply(events=stream.events))
    with pytest.raises(PermanentLLMError, match="Invalid prompt"):
        await collect(llm)


async def test_a_stream_without_completion(
    loopback: LoopbackServer, llm: OpenAIResponsesAdapter
) -> None:
    loopback.script(Reply(events=ResponsesStream().text(["cut"]).events))
    with pytest.raises(TransientLLMError) as info:
        await collect(llm)
    assert (info.value.kind, info.value.partial_text) == ("incomplete_stream", "cut")
