"""What the provider adapters' suites share: the states a turn goes through, one
turn of a real engine over an adapter, the stored answer of a turn, and the
golden-script check of a recorded conversation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NamedTuple

import kit

from turnfsm import Engine, records
from turnfsm.adapters.llm import LLM
from turnfsm.events import Event
from turnfsm.model import MessageNode
from turnfsm.replay import Recorder, replay
from turnfsm.storage import SQLiteStore
from turnfsm.testing import FakeClock, SequentialIds
from turnfsm.tools import Tool

__all__ = [
    "ALR",
    "IDLE",
    "PF",
    "PLR",
    "PUM",
    "SLR",
    "TF",
    "Turned",
    "assert_golden",
    "one_turn",
    "stored_turn",
]

IDLE, PUM, ALR, SLR, PLR, TF, PF = (
    "Idle",
    "ProcessingUserMessage",
    "AwaitingLLMResponse",
    "StreamingLLMResponse",
    "ProcessingLLMResponse",
    "TransientFailure",
    "PermanentFailure",
)


class Turned(NamedTuple):
    turn: Any
    seen: list[Event]
    history: list[MessageNode]


async def one_turn(llm: LLM, clock: FakeClock | None = None) -> Turned:
    """``"Hi"`` sent to a new context of an engine over ``llm``: the turn, the
    events seen meanwhile, and the history after it."""
    async with kit.make_engine(llm=llm, clock=clock).engine as engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            turn = await engine.send(cid, "Hi")
            seen = sub.drain()
        history = (await engine.get_context(cid)).history()
    return Turned(turn, seen, history)


async def stored_turn(llm: LLM, tools: list[Tool], db: Path) -> tuple[Any, str, list[MessageNode]]:
    """``"Weather in Paris?"`` (system prompt ``"Be brief."``) sent through an
    engine storing in ``db``: the turn, the context's id, and the history as a new engine reads it
    back from the file."""
    made = kit.make_engine(llm=llm, tools=tools, store=SQLiteStore(db))
    async with made.engine as engine:
        cid = await engine.create_context(system_prompt="Be brief.")
        turn = await engine.send(cid, "Weather in Paris?")
    async with kit.make_engine(llm=llm, store=SQLiteStore(db)).engine as engine:
        history = (await engine.get_context(cid)).history()
    return turn, cid, history


def _shape(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out = []
    for node in messages:
        m = node["message"]
        calls = [(c["id"], c["tool_name"], c["arguments"]) for c in m["tool_calls"] or []]
        out.append((m["role"], m["content"], calls, m["tool_result"], m["thinking"]))
    return out


def _check_golden(script: dict[str, Any], golden: Path) -> None:
    if os.environ.get("TURNFSM_WRITE_GOLDEN"):
        golden.write_text(json.dumps(script, indent=2, ensure_ascii=False) + "\n")
    assert script == json.loads(golden.read_text())


async def assert_golden(
    llm: LLM, tools: list[Tool], golden: Path, name: str
) -> list[tuple[Any, ...]]:
    """Record ``"Weather in Paris?"`` through :class:`Recorder` over ``llm``, check
    the script is the ``golden`` file (written instead with
    ``TURNFSM_WRITE_GOLDEN=1``), and that it replays offline to the same trace and
    messages, a transient failure among them. Returns the live messages' shape
    (role, content, calls, tool result, thinking)."""
    recorder = Recorder(llm, tools=tools, name=name)
    async with Engine(
        llm=recorder.llm, tools=recorder.tools, clock=FakeClock(), ids=SequentialIds()
    ) as engine:
        cid = await recorder.start(engine, system_prompt="Be brief.")
        await recorder.send("Weather in Paris?")
        script = await recorder.script()
        live = [records.to_python(n) for n in (await engine.get_context(cid)).history()]
    _check_golden(script, golden)
    result = await replay(golden)
    assert result.ok, result.report()
    assert result.trace == script["expect"]["trace"]
    assert _shape(result.messages) == _shape(live)
    assert "TransientFailure" in result.trace
    return _shape(live)
