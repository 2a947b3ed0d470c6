"""A golden replay script of a Claude conversation: recorded through the
recorder against the loopback server (an overloaded stream, thinking with a
tool call, the answer after it), equal to the committed script, and replayed
offline to the same trace and messages.

The script format keeps an answer's text, calls, thinking, usage and finish
reason; Claude's signatures are not part of it (a replay calls no provider).
To write the golden file again after an intended change:
``TURNFSM_WRITE_GOLDEN=1 pytest tests/anthropic/test_anthropic_golden.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from anthropic_corpus import corpus, overloaded_mid_stream
from anthropic_loopback import LoopbackServer

from turnfsm import Engine, records, tool
from turnfsm.adapters.llm import AnthropicLLM
from turnfsm.replay import Recorder, replay
from turnfsm.testing import FakeClock, SequentialIds

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent / "golden" / "claude_thinking_tool.json"
CLAUDE = {c.name: c for c in corpus()}


@tool
def get_weather(location: str) -> dict[str, Any]:
    """Current weather for a location."""
    return {"location": location, "temp_c": 15}


def _shape(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out = []
    for node in messages:
        m = node["message"]
        calls = [(c["id"], c["tool_name"], c["arguments"]) for c in m["tool_calls"] or []]
        out.append((m["role"], m["content"], calls, m["tool_result"], m["thinking"]))
    return out


async def test_a_recorded_claude_conversation_is_the_golden_script_and_replays_offline(
    loopback: LoopbackServer,
) -> None:
    loopback.script(
        overloaded_mid_stream(), CLAUDE["thinking_then_tool"].reply(), CLAUDE["text"].reply()
    )
    async with AnthropicLLM("claude-sonnet-4-5", base_url=loopback.url, api_key="k") as llm:
        recorder = Recorder(llm, tools=[get_weather], name="Claude: thinking, a tool call")
        async with Engine(
            llm=recorder.llm, tools=recorder.tools, clock=FakeClock(), ids=SequentialIds()
        ) as engine:
            cid = await recorder.start(engine, system_prompt="Be brief.")
            await recorder.send("Weather in Paris?")
            script = await recorder.script()
            live = [records.to_python(n) for n in (await engine.get_context(cid)).history()]
    if os.environ.get("TURNFSM_WRITE_GOLDEN"):
        GOLDEN.write_text(json.dumps(script, indent=2, ensure_ascii=False) + "\n")
    assert script == json.loads(GOLDEN.read_text())
    result = await replay(GOLDEN)
    assert result.ok, result.report()
    assert result.trace == script["expect"]["trace"]
    assert _shape(result.messages) == _shape(live)
    assert "TransientFailure" in result.trace
