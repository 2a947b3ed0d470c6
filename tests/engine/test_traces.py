"""The canonical traces of docs/architecture.md, through the public API.

Each test asserts the exact state sequence twice: as the calls return it
(``[Idle, *turn.states, ...]``) and as the store recorded it
(``await engine.trace(cid)``), and checks that the recorded steps are edges of
the declared table that chain into one another.
"""

from __future__ import annotations

import kit
import pytest
from canonical import (
    ALR,
    ATA,
    EXT,
    IDLE,
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

from turnfsm import (
    ApprovalStatus,
    Role,
    State,
    StopReason,
)
from turnfsm.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    WEATHER_CALLS.clear()


make_engine = kit.make_engine


async def test_text_answer() -> None:
    engine, llm, _ = make_engine([{"text": "Hello there."}])
    async with engine:
        cid = await engine.create_context(system_prompt="You are terse.")
        turn = await engine.send(cid, "Hi")
        expected = [IDLE, PUM, ALR, PLR, IDLE]
        assert trace_of(turn) == expected
        await assert_recorded(engine, cid, expected)
        assert turn.state == State.IDLE
        assert turn.stop_reason == StopReason.COMPLETED
        assert turn.text == "Hello there."
        assert [m.role for m in turn.messages] == [Role.USER, Role.ASSISTANT]
        assert turn.pending_tool_calls == ()
        ctx = await engine.get_context(cid)
        assert [n.message.text for n in ctx.history()] == ["Hi", "Hello there."]
        assert list(turn.message_ids) == ctx.active_branch.message_ids
        assert llm.remaining == 0


async def test_streamed_answer() -> None:
    engine, _, _ = make_engine([{"chunks": ["Hel", "lo", "!"]}])
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
        expected = [IDLE, PUM, ALR, SLR, PLR, IDLE]
        assert trace_of(turn) == expected
        await assert_recorded(engine, cid, expected)
        assert turn.text == "Hello!"
        assert turn.stop_reason == StopReason.COMPLETED
        ctx = await engine.get_context(cid)
        last = ctx.history()[-1].message
        assert last.role == Role.ASSISTANT
        assert last.text == "Hello!"
        assert last.metadata.cancelled is False


async def test_auto_approved_tool() -> None:
    engine, _, _ = make_engine(
        [
            {
                "tool_calls": [
                    {"id": "call_1", "name": "get_weather", "arguments": {"city": "Oslo"}}
                ]
            },
            {"text": "It is 15 C in Oslo."},
        ],
        tools=[get_weather],
    )
    async with engine:
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
        assert call.approval_status == ApprovalStatus.APPROVED
        assert call.decided_by == "policy"
        result = turn.messages[2].tool_result
        assert result is not None
        assert result.request_id == "call_1"
        assert result.success is True
        assert result.result == {"city": "Oslo", "temp_c": 15}
        assert turn.text == "It is 15 C in Oslo."


async def test_tool_needing_approval_approved() -> None:
    engine, _, _ = make_engine(
        [
            {
                "tool_calls": [
                    {"id": "call_1", "name": "get_weather", "arguments": {"city": "Rome"}}
                ]
            },
            {"text": "15 C in Rome."},
        ],
        tools=[get_weather_approved],
    )
    async with engine:
        cid = await engine.create_context()
        first = await engine.send(cid, "Weather in Rome?")
        assert trace_of(first) == [IDLE, PUM, ALR, PLR, ATA]
        assert first.state == State.AWAITING_TOOL_APPROVAL
        assert first.stop_reason == StopReason.AWAITING_APPROVAL
        assert [c.id for c in first.pending_tool_calls] == ["call_1"]
        assert WEATHER_CALLS == []  # nothing runs before the human decides
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, PLR, ATA])

        second = await engine.approve(cid, "call_1")
        expected = [IDLE, PUM, ALR, PLR, ATA, EXT, ALR, PLR, IDLE]
        assert trace_of(first, second) == expected
        await assert_recorded(engine, cid, expected)
        assert second.states[0] == State.EXECUTING_TOOLS
        assert WEATHER_CALLS == [{"city": "Rome"}]
        assert second.text == "15 C in Rome."
        ctx = await engine.get_context(cid)
        call = ctx.history()[1].message.tool_calls[0]  # type: ignore[index]
        assert call.approval_status == ApprovalStatus.APPROVED
        assert call.decided_by == "human"


async def test_one_transient_error_then_success() -> None:
    clock = FakeClock()
    engine, llm, _ = make_engine(
        [{"llm_error": {"status": 503}}, {"text": "Back again."}], clock=clock
    )
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
        expected = [IDLE, PUM, ALR, TF, ALR, PLR, IDLE]
        assert trace_of(turn) == expected
        await assert_recorded(engine, cid, expected)
        assert turn.stop_reason == StopReason.COMPLETED
        assert turn.text == "Back again."
        assert len(clock.sleeps) == 1  # the backoff ran on the fake clock
        assert [r.attempt for r in llm.requests] == [1, 2]
        # the failed attempt left no message in history
        ctx = await engine.get_context(cid)
        assert [n.message.role for n in ctx.history()] == [Role.USER, Role.ASSISTANT]
        assert ctx.history()[-1].message.metadata.attempt == 2


async def test_script_format_example_trace() -> None:
    """The replay format's weather example: approval, then a streamed answer."""
    engine, _, _ = make_engine(
        [
            {
                "tool_calls": [
                    {"id": "call_1", "name": "get_weather", "arguments": {"city": "London"}}
                ]
            },
            {"chunks": ["The weather in London ", "is 15 C."]},
        ],
        tools=[get_weather_approved],
    )
    async with engine:
        cid = await engine.create_context(system_prompt="You are a helpful assistant.")
        first = await engine.send(cid, "What's the weather in London?")
        second = await engine.approve(cid, ["call_1"])
        expected = [IDLE, PUM, ALR, PLR, ATA, EXT, ALR, SLR, PLR, IDLE]
        assert trace_of(first, second) == expected
        await assert_recorded(engine, cid, expected)
        ctx = await engine.get_context(cid)
        assert len(ctx.active_branch.message_ids) == 4
        last = ctx.history()[-1].message
        assert (last.role, last.text) == (Role.ASSISTANT, "The weather in London is 15 C.")


async def test_trace_accumulates_over_turns() -> None:
    engine, _, _ = make_engine([{"text": "one"}, {"chunks": ["t", "wo"]}])
    async with engine:
        cid = await engine.create_context()
        a = await engine.send(cid, "first")
        b = await engine.send(cid, "second")
        expected = [IDLE, PUM, ALR, PLR, IDLE, PUM, ALR, SLR, PLR, IDLE]
        assert trace_of(a, b) == expected
        await assert_recorded(engine, cid, expected)


async def test_fresh_context_trace_is_idle() -> None:
    engine, _, _ = make_engine([])
    async with engine:
        cid = await engine.create_context()
        assert await engine.trace(cid) == [IDLE]
        assert await engine.steps(cid) == []
        ctx = await engine.get_context(cid)
        assert ctx.current_state == IDLE
        assert ctx.version == 0
