"""Every transition the engine takes fires through ``transitions``' own Event,
Transition and State objects and the callbacks declared with the table."""

from __future__ import annotations

from typing import Any

import pytest

from turnfsm import Engine, State, tool
from turnfsm.states._machine import (
    ContextHolder,
    LeanEvent,
    LeanMachine,
    LeanState,
    LeanTransition,
)
from turnfsm.testing import ScriptedLLM

pytestmark = pytest.mark.anyio


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    return {"city": city, "temp_c": 15}


async def test_every_transition_of_a_tool_loop_turn_goes_through_transitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, list[Any]] = {"event": [], "execute": [], "enter": [], "after": []}

    def spy(cls: type, name: str, key: str) -> None:
        original = getattr(cls, name)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            seen[key].append(self)
            return original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, wrapper)

    spy(LeanEvent, "_trigger", "event")
    spy(LeanTransition, "execute", "execute")
    spy(LeanState, "enter", "enter")
    spy(ContextHolder, "after_step", "after")

    llm = ScriptedLLM(
        [
            {"tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": {"city": "L"}}]},
            {"text": "The weather in London is 15 C."},
        ]
    )
    async with Engine(llm=llm, tools=[get_weather]) as engine:
        assert isinstance(engine._machine._machine, LeanMachine)
        cid = await engine.create_context()
        turn = await engine.send(cid, "turn 1")
        steps = await engine.steps(cid)

    assert turn.state is State.IDLE
    entered = [State(s.to_state) for s in steps]
    assert entered == list(turn.states) and len(entered) == 7
    # one Event trigger, one Transition execution, one State entry and one
    # declared after-callback per step, in the order the steps were taken
    assert len(seen["event"]) == len(seen["execute"]) == len(seen["after"]) == 7
    assert [t.dest for t in seen["execute"]] == [s.value for s in entered]
    assert [s.name for s in seen["enter"]] == [s.value for s in entered]
    assert [e.name for e in seen["event"]] == [s.trigger for s in steps]
