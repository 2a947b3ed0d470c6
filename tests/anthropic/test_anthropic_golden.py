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

from pathlib import Path
from typing import Any

import pytest
from anthropic_corpus import corpus, overloaded_mid_stream
from anthropic_loopback import LoopbackServer
from provider_cases import assert_golden

from turnfsm import tool

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent / "golden" / "claude_thinking_tool.json"
CLAUDE = {c.name: c for c in corpus()}


@tool
def get_weather(location: str) -> dict[str, Any]:
    """Current weather for a location."""
    return {"location": location, "temp_c": 15}


async def test_a_recorded_claude_conversation_is_the_golden_script_and_replays_offline(
    loopback: LoopbackServer,
) -> None:
    from turnfsm.adapters.llm import AnthropicLLM

    loopback.script(
        overloaded_mid_stream(), CLAUDE["thinking_then_tool"].reply(), CLAUDE["text"].reply()
    )
    async with AnthropicLLM("claude-sonnet-4-5", base_url=loopback.url, api_key="k") as llm:
        await assert_golden(llm, [get_weather], GOLDEN, "Claude: thinking, a tool call")
