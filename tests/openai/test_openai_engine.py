"""The engine driving ``OpenAIChatAdapter`` against the loopback server.

The canonical traces of docs/architecture.md (the same assertions as
tests/engine/test_traces.py makes with the scripted LLM), then the full turn
loop with approval, retries with the provider's delay on the FakeClock, a
stream that breaks mid-way, invalid tool arguments and a permanent error.

A whole (non-streamed) answer is what the canonical text / tool traces show
(no ``StreamingLLMResponse``), so those run with ``stream=False``; the
streamed trace runs streamed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import kit
import pytest
from canonical import (
    ALR,
    ATA,
    EXT,
    IDLE,
    PF,
    PLR,
    PUM,
    SLR,
    TF,
    WEATHER_CALLS,
    assert_recorded,
    get_weather,
    get_weather_approved,
    trace_of,
)
from openai_loopback import LoopbackServer, Reply, error_body
from openai_samples import completion, text_stream, tool_call_stream

from turnfsm import (
    ApprovalStatus,
    Engine,
    Role,
    State,
    StopReason,
)
from turnfsm.events import Failed, Retrying
from turnfsm.testing import FakeClock

if TYPE_CHECKING:
    from turnfsm.adapters.llm.openai import OpenAIChatAdapter


pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    WEATHER_CALLS.clear()


@pytest.fixture
async def llm(loopback: LoopbackServer) -> AsyncIterator[OpenAIChatAdapter]:
    from turnfsm.adapters.llm.openai import OpenAIChatAdapter

    async with OpenAIChatAdapter(base_url=loopback.url, api_key="sk-loop", timeout=10) as adapter:
        yield adapter


def make_engine(llm: OpenAIChatAdapter, **kwargs: Any) -> Engine:
    return kit.make_engine(llm=llm, **kwargs).engine


def weather_call(call_id: str, city: str) -> Reply:
    return Reply(json=completion(None, [(call_id, "get_weather", {"city": city})]))


# ---------------------------------------------------------------------- canonical traces


async def test_text_answer(loopback: LoopbackServer, llm: OpenAIChatAdapter) -> None:
    llm.streaming = False
    loopback.script(Reply(json=completion("Hello there.")))
    async with make_engine(llm) as engine:
        cid = await engine.create_context(system_prompt="You are terse.", model="gpt-4o-mini")
        turn = await engine.send(cid, "Hi")
        expected = [IDLE, PUM, ALR, PLR, IDLE]
        assert trace_of(turn) == expected
        await assert_recorded(engine, cid, expected)
        assert turn.stop_reason == StopReason.COMPLETED
        assert turn.text == "Hello there."
        assert [m.role for m in turn.messages] == [Role.USER, Role.ASSISTANT]
        ctx = await engine.get_context(cid)
        answer = ctx.history()[-1].message
        assert answer.metadata.usage is not None and answer.metadata.usage.total_tokens == 17
        assert answer.metadata.finish_reason == "stop"
        assert answer.metadata.model == "gpt-4o-mini"
    assert loopback.bodies[0]["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
    ]


async def test_streamed_answer(loopback: LoopbackServer, llm: OpenAIChatAdapter) -> None:
    loopback.script(Reply(events=text_stream(["Hel", "lo", "!"])))
    async with make_engine(llm) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
        expected = [IDLE, PUM, ALR, SLR, PLR, IDLE]
        assert trace_of(turn) == expected
        await assert_recorded(engine, cid, expected)
        assert turn.text == "Hello!"
        ctx = await engine.get_context(cid)
        last = ctx.history()[-1].message
        assert (last.role, last.text, last.metadata.cancelled) == (Role.ASSISTANT, "Hello!", False)


async def test_auto_approved_tool(loopback: LoopbackServer, llm: OpenAIChatAdapter) -> None:
    llm.streaming = False
    loopback.script(weather_call("call_1", "Oslo"), Reply(json=completion("It is 15 C in Oslo.")))
    async with make_engine(llm, tools=[get_weather]) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Weather in Oslo?")
        expected = [IDLE, PUM, ALR, PLR, EXT, ALR, PLR, IDLE]
        assert trace_of(turn) == expected
        await assert_recorded(engine, cid, expected)
        assert WEATHER_CALLS == [{"city": "Oslo"}]
        assert [m.role for m in turn.messages] == [
            Role.USER,
            Role.ASSISTANT,
            Role.TOOL,
            Role.ASSISTANT,
        ]
        ctx = await engine.get_context(cid)
        call = ctx.history()[1].message.tool_calls[0]  # type: ignore[index]
        assert (call.approval_status, call.decided_by) == (ApprovalStatus.APPROVED, "policy")
        result = turn.messages[2].tool_result
        assert result is not None
        assert (result.request_id, result.success) == ("call_1", True)
        assert turn.text == "It is 15 C in Oslo."
    first, second = loopback.bodies
    assert first["tools"][0]["function"]["name"] == "get_weather"
    assert second["messages"][-2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"city":"Oslo","temp_c":15}'},
    ]


async def test_tool_needing_approval_approved(
    loopback: LoopbackServer, llm: OpenAIChatAdapter
) -> None:
    llm.streaming = False
    loopback.script(weather_call("call_1", "Rome"), Reply(json=completion("15 C in Rome.")))
    async with make_engine(llm, tools=[get_weather_approved]) as engine:
        cid = await engine.create_context()
        first = await engine.send(cid, "Weather in Rome?")
        assert trace_of(first) == [IDLE, PUM, ALR, PLR, ATA]
        assert first.stop_reason == StopReason.AWAITING_APPROVAL
        assert [c.id for c in first.pending_tool_calls] == ["call_1"]
        assert WEATHER_CALLS == []
        assert len(loopback.requests) == 1
        second = await engine.approve(cid, "call_1")
        expected = [IDLE, PUM, ALR, PLR, ATA, EXT, ALR, PLR, IDLE]
        assert trace_of(first, second) == expected
        await assert_recorded(engine, cid, expected)
        assert WEATHER_CALLS == [{"city": "Rome"}]
        assert second.text == "15 C in Rome."
        ctx = await engine.get_context(cid)
        call = ctx.history()[1].message.tool_calls[0]  # type: ignore[index]
        assert (call.approval_status, call.decided_by) == (ApprovalStatus.APPROVED, "human")


async def test_one_transient_error_then_success(
    loopback: LoopbackServer, llm: OpenAIChatAdapter
) -> None:
    llm.streaming = False
    clock = FakeClock()
    loopback.script(
        Reply(status=503, json=error_body("overloaded", "server_error")),
        Reply(json=completion("Back again.")),
    )
    async with make_engine(llm, clock=clock) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
        expected = [IDLE, PUM, ALR, TF, ALR, PLR, IDLE]
        assert trace_of(turn) == expected
        await assert_recorded(engine, cid, expected)
        assert turn.text == "Back again."
        assert len(clock.sleeps) == 1
        ctx = await engine.get_context(cid)
        assert [n.message.role for n in ctx.history()] == [Role.USER, Role.ASSISTANT]
        assert ctx.history()[-1].message.metadata.attempt == 2
    assert len(loopback.requests) == 2
    assert loopback.bodies[0] == loopback.bodies[1]


# ---------------------------------------------------------------------- beyond the canon


async def test_429_retry_after_is_the_backoff_on_the_fake_clock(
    loopback: LoopbackServer, llm: OpenAIChatAdapter
) -> None:
    clock = FakeClock()
    loopback.script(
        Reply(status=429, json=error_body("slow down", "requests"), headers={"Retry-After": "7"}),
        Reply(events=text_stream(["made ", "it"])),
    )
    async with make_engine(llm, clock=clock) as engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            turn = await engine.send(cid, "Hi")
            seen = sub.drain()
    assert trace_of(turn) == [IDLE, PUM, ALR, TF, ALR, SLR, PLR, IDLE]
    assert clock.sleeps == [7.0]  # the provider's delay, not the exponential backoff
    [retrying] = [e for e in seen if isinstance(e, Retrying)]
    assert (retrying.delay, retrying.attempt) == (7.0, 1)
    assert retrying.error == "HTTP 429: slow down"
    assert turn.text == "made it"


async def test_a_stream_broken_mid_way_is_retried_and_its_text_not_kept(
    loopback: LoopbackServer, llm: OpenAIChatAdapter
) -> None:
    loopback.script(
        Reply(events=text_stream(["Once ", "upon ", "a time"]), break_after=3),
        Reply(events=text_stream(["Hello."])),
    )
    async with make_engine(llm) as engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            turn = await engine.send(cid, "Tell me a story")
            seen = sub.drain()
        assert trace_of(turn) == [IDLE, PUM, ALR, SLR, TF, ALR, SLR, PLR, IDLE]
        [retrying] = [e for e in seen if isinstance(e, Retrying)]
        assert retrying.partial_text == "Once upon "
        ctx = await engine.get_context(cid)
        assert [n.message.text for n in ctx.history()] == ["Tell me a story", "Hello."]


async def test_a_malformed_chunk_retries_then_gives_up(
    loopback: LoopbackServer, llm: OpenAIChatAdapter
) -> None:
    garbage = Reply(events=["{oops", "[DONE]"])
    loopback.script(garbage, garbage, garbage)
    async with make_engine(llm) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
        assert trace_of(turn) == [IDLE, PUM, ALR, TF, ALR, TF, ALR, TF, PF]
        assert turn.stop_reason == StopReason.FAILED
        assert turn.error is not None and "not JSON" in turn.error
    assert len(loopback.requests) == 3


async def test_a_401_fails_permanently(loopback: LoopbackServer, llm: OpenAIChatAdapter) -> None:
    loopback.script(
        Reply(status=401, json=error_body("Incorrect API key provided", "invalid_request_error"))
    )
    async with make_engine(llm) as engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            turn = await engine.send(cid, "Hi")
            seen = sub.drain()
        assert trace_of(turn) == [IDLE, PUM, ALR, PF]
        [failed] = [e for e in seen if isinstance(e, Failed)]
        assert failed.error == "HTTP 401: Incorrect API key provided"
    assert len(loopback.requests) == 1


async def test_invalid_tool_arguments_reach_the_model_as_an_error_result(
    loopback: LoopbackServer, llm: OpenAIChatAdapter
) -> None:
    llm.streaming = False
    loopback.script(
        Reply(json=completion(None, [("call_1", "get_weather", '{"city": "Oslo"')])),
        Reply(json=completion("Sorry, let me fix that.")),
    )
    async with make_engine(llm, tools=[get_weather]) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Weather in Oslo?")
        assert trace_of(turn) == [IDLE, PUM, ALR, PLR, EXT, ALR, PLR, IDLE]
        assert WEATHER_CALLS == []
        result = turn.messages[2].tool_result
        assert result is not None and result.success is False
    tool_message = loopback.bodies[1]["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_1"
    assert "error" in json.loads(tool_message["content"])
    # the model's raw arguments are sent back as it wrote them
    assert (
        loopback.bodies[1]["messages"][-2]["tool_calls"][0]["function"]["arguments"]
        == '{"city": "Oslo"'
    )


async def test_full_streamed_turn_loop_with_approval(
    loopback: LoopbackServer, llm: OpenAIChatAdapter
) -> None:
    """Parallel tool calls streamed in fragments, a human approves one and denies
    the other, the answer streams back."""
    loopback.script(
        Reply(
            events=tool_call_stream(
                [
                    ("call_a", "get_weather", {"city": "London"}),
                    ("call_b", "get_weather", {"city": "Paris"}),
                ],
                text=["Checking both."],
                piece=2,
            )
        ),
        Reply(events=text_stream(["London is 15 C; ", "Paris was not checked."])),
    )
    async with make_engine(llm, tools=[get_weather_approved]) as engine:
        cid = await engine.create_context(system_prompt="You are helpful.", model="gpt-4o-mini")
        first = await engine.send(cid, "Weather in London and Paris?")
        assert trace_of(first) == [IDLE, PUM, ALR, SLR, PLR, ATA]
        assert [(c.id, c.arguments) for c in first.pending_tool_calls] == [
            ("call_a", {"city": "London"}),
            ("call_b", {"city": "Paris"}),
        ]
        after_deny = await engine.deny(cid, "call_b", reason="only London")
        assert after_deny.state == State.AWAITING_TOOL_APPROVAL
        second = await engine.approve(cid, "call_a")
        expected = [IDLE, PUM, ALR, SLR, PLR, ATA, EXT, ALR, SLR, PLR, IDLE]
        assert trace_of(first, after_deny, second) == expected
        await assert_recorded(engine, cid, expected)
        assert WEATHER_CALLS == [{"city": "London"}]
        assert second.text == "London is 15 C; Paris was not checked."
    final_messages = loopback.bodies[1]["messages"]
    assert [m["role"] for m in final_messages] == ["system", "user", "assistant", "tool", "tool"]
    assert final_messages[2]["content"] == "Checking both."
    results = {m["tool_call_id"]: json.loads(m["content"]) for m in final_messages[3:]}
    assert results["call_a"] == {"city": "London", "temp_c": 15}
    assert results["call_b"]["status"] == "denied"
    assert "only London" in results["call_b"]["error"]
