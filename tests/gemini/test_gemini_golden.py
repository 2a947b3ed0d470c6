"""A golden replay script of a Gemini conversation: recorded through the
recorder against the loopback server (an error inside a stream, a thought
summary with a signed function call, the answer after it), equal to the
committed script, and replayed offline to the same trace and messages.

The script format keeps an answer's text, calls, thinking, usage and finish
reason; Gemini's thought signatures are not part of it (a replay calls no
provider). The call ids are derived from the response's id, so the recorded
ids are the same on every run. To write the golden file again after an
intended change: ``TURNFSM_WRITE_GOLDEN=1 pytest tests/gemini/test_gemini_golden.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from gemini_corpus import corpus, error_mid_stream
from gemini_loopback import LoopbackServer

from turnfsm import Engine, records, tool
from turnfsm.adapters.llm import GeminiLLM
from turnfsm.replay import Recorder, replay
from turnfsm.testing import FakeClock, SequentialIds

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent / "golden" / "gemini_thought_tool.json"
GEMINI = {c.name: c for c in corpus()}


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


async def test_a_recorded_gemini_conversation_is_the_golden_script_and_replays_offline(
    loopback: LoopbackServer,
) -> None:
    loopback.script(error_mid_stream(), GEMINI["thought_then_call"].reply(), GEMINI["text"].reply())
    async with GeminiLLM("gemini-2.5-flash", base_url=loopback.url, api_key="k") as llm:
        recorder = Recorder(llm, tools=[get_weather], name="Gemini: a thought, a function call")
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
    assert any(c[0] == "call_th0mafbwMdOjz7IP6bPY8Ac_0" for m in _shape(live) for c in m[2])
