"""Conversations at scale, through the public API: long histories, concurrent
contexts, long tool loops, many streamed chunks. Each asserts what must hold
(counts, order, one result per call, nothing missed) and a generous wall-time
bound that only catches a blow-up (quadratic work, a lost wake-up), never a
speed target (those are in bench/). Each runs in well under a second here, so
none is marked ``slow``; the 5,000-message token budget test is
(``tests/test_token_budget.py``, ``pytest -m slow``)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from kit import make_engine

from turnfsm import State, StopReason, tool
from turnfsm.events import ContentDelta, EventsMissed, TurnCompleted
from turnfsm.model import ChatContext, LLMRequest, Role

pytestmark = pytest.mark.anyio

BOUND = 120.0
"""Seconds: far above what any of these takes on a shared 2-core machine."""


@tool
def get_weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "temp_c": 15}


def w1(request: LLMRequest) -> dict[str, Any]:
    """The benchmark model: a tool call, then a text answer."""
    last = request.messages[-1]
    if last["role"] == "user":
        n = sum(1 for m in request.messages if m["role"] == "user")
        return {
            "tool_calls": [
                {"id": f"call_{n}", "name": "get_weather", "arguments": {"city": "London"}}
            ]
        }
    return {"text": "The weather in London is 15 C."}


def one_result_per_call(ctx: ChatContext) -> None:
    asked: list[str] = []
    answered: list[str] = []
    for node in ctx.history():
        asked += [c.id for c in node.message.tool_calls or ()]
        if node.message.tool_result is not None:
            answered.append(node.message.tool_result.request_id)
    assert sorted(asked) == sorted(answered)
    assert len(set(asked)) == len(asked)


async def test_a_thousand_message_conversation() -> None:
    engine, llm, _ = make_engine(w1, tools=[get_weather])
    t0 = time.perf_counter()
    async with engine:
        cid = await engine.create_context(system_prompt="You report the weather.")
        for i in range(250):
            turn = await engine.send(cid, f"turn {i}")
            assert turn.state is State.IDLE and turn.text == "The weather in London is 15 C."
        ctx = await engine.get_context(cid)
    assert time.perf_counter() - t0 < BOUND
    assert len(ctx.history()) == 1_000
    one_result_per_call(ctx)
    # the last request held the whole history, in stored order
    last = llm.requests[-1].messages
    assert len(last) == 1 + 999
    assert [m["role"] for m in last[-3:]] == ["user", "assistant", "tool"]


async def test_ten_contexts_at_once() -> None:
    engine, _, _ = make_engine(w1, tools=[get_weather])
    t0 = time.perf_counter()
    async with engine:
        cids = [await engine.create_context() for _ in range(10)]

        async def talk(cid: str) -> None:
            for i in range(20):
                turn = await engine.send(cid, f"{cid} turn {i}")
                assert turn.state is State.IDLE

        async with anyio.create_task_group() as tg:
            for cid in cids:
                tg.start_soon(talk, cid)
        contexts = [await engine.get_context(cid) for cid in cids]
    assert time.perf_counter() - t0 < BOUND
    for cid, ctx in zip(cids, contexts, strict=True):
        assert len(ctx.history()) == 80
        one_result_per_call(ctx)
        # no message of another context leaked in
        users = [n.message.text for n in ctx.history() if n.message.role is Role.USER]
        assert users == [f"{cid} turn {i}" for i in range(20)]


async def test_a_hundred_tool_cycles_in_one_turn() -> None:
    def loop(request: LLMRequest) -> dict[str, Any]:
        done = sum(1 for m in request.messages if m["role"] == "tool")
        if done < 100:
            return {
                "tool_calls": [
                    {"id": f"c{done}", "name": "get_weather", "arguments": {"city": f"city {done}"}}
                ]
            }
        return {"text": "Done: 100 cities."}

    engine, llm, _ = make_engine(loop, tools=[get_weather], max_iterations=101)
    t0 = time.perf_counter()
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Check 100 cities.")
        ctx = await engine.get_context(cid)
        trace = await engine.trace(cid)
    assert time.perf_counter() - t0 < BOUND
    assert turn.state is State.IDLE and turn.stop_reason is StopReason.COMPLETED
    assert turn.text == "Done: 100 cities."
    assert len(llm.requests) == 101
    assert len(ctx.history()) == 1 + 200 + 1
    one_result_per_call(ctx)
    assert trace.count(State.EXECUTING_TOOLS) == 100
    results = [n.message.tool_result for n in ctx.history() if n.message.tool_result]
    assert [r.result["city"] for r in results] == [f"city {i}" for i in range(100)]


async def test_five_thousand_chunks_reach_a_subscriber() -> None:
    answers = [{"chunks": [f"{t:02d}:{i:03d} " for i in range(100)]} for t in range(50)]
    engine, _, _ = make_engine(answers, subscriber_buffer=20_000)
    received: list[str] = []
    missed = 0
    t0 = time.perf_counter()
    async with engine:
        cid = await engine.create_context()
        sub = engine.subscribe(cid)

        async def subscriber() -> None:
            nonlocal missed
            turns = 0
            async with sub:
                async for ev in sub:
                    if isinstance(ev, ContentDelta):
                        received.append(ev.delta)
                    elif isinstance(ev, EventsMissed):
                        missed += ev.count
                    elif isinstance(ev, TurnCompleted):
                        turns += 1
                        if turns == 50:
                            break

        async with anyio.create_task_group() as tg:
            tg.start_soon(subscriber)
            await anyio.lowlevel.checkpoint()
            for t in range(50):
                turn = await engine.send(cid, f"answer {t}")
                assert turn.state is State.IDLE
        ctx = await engine.get_context(cid)
    assert time.perf_counter() - t0 < BOUND
    assert missed == 0
    assert len(received) == 5_000
    assert received == [f"{t:02d}:{i:03d} " for t in range(50) for i in range(100)]
    answers_text = [n.message.text for n in ctx.history() if n.message.role is Role.ASSISTANT]
    assert answers_text[7] == "".join(f"07:{i:03d} " for i in range(100))
