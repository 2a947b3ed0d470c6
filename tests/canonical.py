"""What the canonical-trace tests share, whichever LLM drives the engine
(the scripted LLM in tests/engine/test_traces.py, the OpenAI adapter against
the loopback server in tests/openai/test_openai_engine.py): the state names,
the declared edges, the weather tools, and the trace assertions."""

from __future__ import annotations

from typing import Any

from turnfsm import Engine, State, Turn, tool
from turnfsm.states import TRANSITIONS

IDLE = "Idle"
PUM = "ProcessingUserMessage"
ALR = "AwaitingLLMResponse"
SLR = "StreamingLLMResponse"
PLR = "ProcessingLLMResponse"
ATA = "AwaitingToolApproval"
EXT = "ExecutingTools"
TF = "TransientFailure"
PF = "PermanentFailure"

EDGES = {(src, t.trigger, t.dest) for t in TRANSITIONS for src in t.sources}

WEATHER_CALLS: list[dict[str, Any]] = []
"""Every run of the weather tools; cleared by each test module's fixture."""


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: the city name.
    """
    WEATHER_CALLS.append({"city": city})
    return {"city": city, "temp_c": 15}


@tool(name="get_weather", approval="required")
def get_weather_approved(city: str) -> dict[str, Any]:
    """Current weather for a city (a human approves each call)."""
    WEATHER_CALLS.append({"city": city})
    return {"city": city, "temp_c": 15}


def trace_of(*turns: Turn) -> list[State]:
    out: list[State] = [State.IDLE]
    for turn in turns:
        out.extend(turn.states)
    return out


async def assert_recorded(engine: Engine, cid: str, expected: list[str]) -> None:
    """The store's trace equals ``expected``; every step is a declared, chained edge."""
    assert await engine.trace(cid) == expected
    steps = await engine.steps(cid)
    assert [s.to_state for s in steps] == expected[1:]
    prev = IDLE
    for s in steps:
        assert s.from_state == prev
        assert (s.from_state, s.trigger, s.to_state) in EDGES
        prev = s.to_state
    versions = [s.version for s in steps]
    assert versions == sorted(versions)
    ctx = await engine.get_context(cid)
    assert ctx.current_state == expected[-1]
