"""The prepare workload: how long the engine takes to build one request (the
``prepare`` effect: the history in chat format through every enhancer) with a
token budget, at 100 and at 5,000 stored messages.

The conversation is W1-shaped (user message, tool call, tool result, text
answer) with realistic message sizes (about 200 characters, some 50 tokens
each), so that 100 messages already exceed the 4,000-token budget: from there
on the view holds the same number of turns however long the history is, and
preparing it must cost the same (target: the time at 5,000 messages at most
1.5x the time at 100). The engine runs with ``tool_history_rounds=10`` and
``TokenBudget(4000, reserve_output=500)``; the request is built ``REPEAT`` times
a round on each loaded context, rounds of the two sizes interleaved, and the
median of ``ROUNDS`` rounds of each is reported.
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime
from typing import Any

import anyio

from turnfsm import Engine
from turnfsm.engine._prepare import build_request
from turnfsm.enhancers import TokenBudget
from turnfsm.model import (
    Branch,
    ChatContext,
    InternalMessage,
    MessageMetadata,
    MessageNode,
    Role,
    TextPart,
    ToolCallRequest,
    ToolCallResult,
)
from turnfsm.testing import ScriptedLLM
from turnfsm.tools import tool

SIZES = (100, 5_000)
REPEAT = 200
ROUNDS = 15
TARGET = 1.5
SENTENCE = (
    "The weather in London is mild today, with light rain in the morning and a dry "
    "afternoon; the wind comes from the south-west at about fifteen kilometres an hour. "
)


@tool
def get_weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "temp_c": 15}


def _history(n: int) -> list[InternalMessage]:
    meta = MessageMetadata(created_at=datetime(2026, 1, 1, tzinfo=UTC))
    out: list[InternalMessage] = []
    turn = 0
    while len(out) < n:
        turn += 1
        out.append(
            InternalMessage(
                role=Role.USER, content=[TextPart(text=f"turn {turn}: {SENTENCE}")], metadata=meta
            )
        )
        out.append(
            InternalMessage(
                role=Role.ASSISTANT,
                tool_calls=[
                    ToolCallRequest(
                        id=f"call_{turn}", tool_name="get_weather", arguments={"city": "London"}
                    )
                ],
                metadata=meta,
            )
        )
        out.append(
            InternalMessage(
                role=Role.TOOL,
                tool_result=ToolCallResult(request_id=f"call_{turn}", result={"report": SENTENCE}),
                metadata=meta,
            )
        )
        out.append(
            InternalMessage(role=Role.ASSISTANT, content=[TextPart(text=SENTENCE)], metadata=meta)
        )
    return out[:n]


async def _loaded(n: int) -> tuple[Engine, Any, Any]:
    """An engine with a loaded context of ``n`` messages, and its runtime."""
    llm = ScriptedLLM(lambda request: {"text": "ok"}, record=False)
    engine = Engine(
        llm=llm,
        tools=[get_weather],
        tool_history_rounds=10,
        token_budget=TokenBudget(4_000, reserve_output=500),
    )
    now = datetime(2026, 1, 1, tzinfo=UTC)
    nodes = []
    parent = None
    for i, msg in enumerate(_history(n - 2)):
        nodes.append(MessageNode(id=f"m{i}", message=msg, parent_id=parent))
        parent = nodes[-1].id
    ctx = ChatContext(
        id="long",
        message_pool={node.id: node for node in nodes},
        branches={"main": Branch(name="main", message_ids=[node.id for node in nodes])},
        created_at=now,
        updated_at=now,
    )
    await engine.store.create(ctx)
    await engine.send("long", SENTENCE)  # loads the context: n messages now
    d = engine._d
    rt = d.loaded.get("long")
    assert rt is not None and len(rt.chat) == n, (n, None if rt is None else len(rt.chat))
    request = build_request(d, rt)
    assert request.metadata["token_budget"]["tokens"] <= 3_500
    return engine, d, rt


async def _measure() -> dict[int, float]:
    """Rounds of each size, interleaved, so that drift on a shared machine hits
    both alike; the median round of each."""
    loaded = {n: await _loaded(n) for n in SIZES}
    rounds: dict[int, list[float]] = {n: [] for n in SIZES}
    for _ in range(ROUNDS):
        for n, (_, d, rt) in loaded.items():
            t0 = time.perf_counter()
            for _ in range(REPEAT):
                build_request(d, rt)
            rounds[n].append((time.perf_counter() - t0) / REPEAT * 1e6)
    for engine, _, _ in loaded.values():
        await engine.aclose()
    return {n: statistics.median(r) for n, r in rounds.items()}


def run() -> dict[str, Any]:
    at = anyio.run(_measure)
    small, large = at[SIZES[0]], at[SIZES[1]]
    return {
        "system": "turnfsm",
        "workload": "prepare",
        "value": round(large, 2),
        "unit": "us",
        "prepare_us_at_100": round(small, 2),
        "prepare_us_at_5000": round(large, 2),
        "ratio_5000_to_100": round(large / small, 3),
        "target": TARGET,
    }
