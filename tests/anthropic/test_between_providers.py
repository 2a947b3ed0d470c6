"""One conversation moving OpenAI Responses -> Claude -> OpenAI Responses with
tool calls, each provider on its own loopback server, on one SQLite store:
each request carries its own provider's reasoning back and never another's."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from anthropic_corpus import corpus

from turnfsm import State
from turnfsm.storage import SQLiteStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "openai"))
from openai_corpus import ENC
from openai_handoff import OPENAI, engine, get_weather, start_with_openai
from openai_loopback import LoopbackServer as OpenAILoopback

pytestmark = pytest.mark.anyio

CLAUDE = {c.name: c for c in corpus()}


async def test_a_context_moves_between_providers_and_each_gets_only_its_own_reasoning(
    loopback: Any, tmp_path: Path
) -> None:
    from turnfsm.adapters.llm import AnthropicLLM
    from turnfsm.adapters.llm.openai import OpenAIResponsesAdapter

    db = tmp_path / "t.db"
    with OpenAILoopback() as openai_server:
        cid = await start_with_openai(openai_server, db)

        loopback.script(CLAUDE["thinking_then_tool"].reply(), CLAUDE["text"].reply())
        claude = AnthropicLLM("claude-sonnet-4-5", base_url=loopback.url, api_key="k")
        async with claude, engine(llm=claude, tools=[get_weather], store=SQLiteStore(db)) as e:
            second = await e.send(cid, "And in Paris?")
        assert second.state == State.IDLE

        openai_server.script(OPENAI["resp_logprobs_stream"].reply())
        async with (
            OpenAIResponsesAdapter(base_url=openai_server.url, api_key="sk-loop") as gpt,
            engine(llm=gpt, tools=[get_weather], store=SQLiteStore(db)) as e,
        ):
            third = await e.send(cid, "Thanks")
            history = (await e.get_context(cid)).history()
        assert third.state == State.IDLE
        to_openai = openai_server.bodies[-1]

    to_claude = loopback.bodies[0]
    claude_text = json.dumps(to_claude)
    assert ENC not in claude_text and "rs_01" not in claude_text  # no OpenAI reasoning
    gpt_turn = to_claude["messages"][1]
    assert gpt_turn["role"] == "assistant"
    assert [b["type"] for b in gpt_turn["content"]] == ["tool_use"]
    assert gpt_turn["content"][0]["id"] == "call_W1"
    assert to_claude["messages"][2]["content"][0]["tool_use_id"] == "call_W1"
    # Claude's own thinking went back to Claude, signature intact, before its tool_use
    claude_turn = loopback.bodies[1]["messages"][-2]
    assert [b["type"] for b in claude_turn["content"]] == ["thinking", "text", "tool_use"]
    signature = claude_turn["content"][0]["signature"]
    assert signature.startswith("c3ludGhldGljLXNpZ25hdHVyZS1maXh0dXJl")

    reasoning = [i for i in to_openai["input"] if i["type"] == "reasoning"]
    assert [r["id"] for r in reasoning] == ["rs_01"]  # OpenAI's own, and only it
    assert signature not in json.dumps(to_openai)
    stored = [r.provider for n in history for r in n.message.reasoning or ()]
    assert stored == ["openai", "anthropic"]
