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

from pathlib import Path
from typing import Any

import pytest
from gemini_corpus import corpus, error_mid_stream
from gemini_loopback import LoopbackServer
from provider_cases import assert_golden

from turnfsm import tool

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent / "golden" / "gemini_thought_tool.json"
GEMINI = {c.name: c for c in corpus()}


@tool
def get_weather(location: str) -> dict[str, Any]:
    """Current weather for a location."""
    return {"location": location, "temp_c": 15}


async def test_a_recorded_gemini_conversation_is_the_golden_script_and_replays_offline(
    loopback: LoopbackServer,
) -> None:
    from turnfsm.adapters.llm import GeminiLLM

    loopback.script(error_mid_stream(), GEMINI["thought_then_call"].reply(), GEMINI["text"].reply())
    async with GeminiLLM("gemini-2.5-flash", base_url=loopback.url, api_key="k") as llm:
        live = await assert_golden(llm, [get_weather], GOLDEN, "Gemini: a thought, a function call")
    assert any(c[0] == "call_th0mafbwMdOjz7IP6bPY8Ac_0" for m in live for c in m[2])
