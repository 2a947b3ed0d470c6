"""One conversation moving OpenAI Responses -> Claude -> Gemini with tool
calls, each provider on its own loopback server, on one SQLite store (a real
engine per provider, ``update_config`` moving the context's model): each
request carries its own provider's reasoning back and never another's."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest
from gemini_corpus import corpus
from gemini_loopback import LoopbackServer

from turnfsm import State
from turnfsm.storage import SQLiteStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "openai"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "anthropic"))
from anthropic_corpus import corpus as claude_corpus
from anthropic_loopback import LoopbackServer as ClaudeLoopback
from openai_corpus import ENC
from openai_handoff import engine, get_weather, start_with_openai
from openai_loopback import LoopbackServer as OpenAILoopback

pytestmark = pytest.mark.anyio

CLAUDE = {c.name: c for c in claude_corpus()}
GEMINI = {c.name: c for c in corpus()}


def gemini_signature() -> str:
    """The thoughtSignature of the Gemini answer, as its fixture has it."""
    raw = (Path(__file__).parent / "fixtures" / "thought_then_call.sse").read_text()
    return raw.split('"thoughtSignature":"', 1)[1].split('"', 1)[0]


async def test_a_context_moves_openai_claude_gemini_and_each_gets_only_its_own_reasoning(
    loopback: LoopbackServer, tmp_path: Path
) -> None:
    from turnfsm.adapters.llm import AnthropicLLM, GeminiLLM

    db = tmp_path / "t.db"
    with OpenAILoopback() as openai_server, ClaudeLoopback() as claude_server:
        cid = await start_with_openai(openai_server, db)

        claude_server.script(CLAUDE["thinking_then_tool"].reply(), CLAUDE["text"].reply())
        claude = AnthropicLLM(base_url=claude_server.url, api_key="k")
        async with claude, engine(llm=claude, tools=[get_weather], store=SQLiteStore(db)) as e:
            await e.update_config(cid, model="claude-sonnet-4-5")
            second = await e.send(cid, "And in Paris?")
        assert second.state == State.IDLE

        loopback.script(GEMINI["thought_then_call"].reply(), GEMINI["text"].reply())
        gemini = GeminiLLM(base_url=loopback.url, api_key="gemini-key")
        async with gemini, engine(llm=gemini, tools=[get_weather], store=SQLiteStore(db)) as e:
            await e.update_config(cid, model="gemini-2.5-flash")
            third = await e.send(cid, "And in Paris, says Gemini?")
            history = (await e.get_context(cid)).history()
        assert third.state == State.IDLE
        claude_signature = claude_server.bodies[1]["messages"][-2]["content"][0]["signature"]

    to_gemini = loopback.bodies[0]
    assert loopback.requests[0].path.endswith(
        "/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    )
    text = json.dumps(to_gemini)
    assert ENC not in text and "rs_01" not in text  # no OpenAI reasoning
    assert claude_signature not in text and '"thought": true' not in text  # no Claude thinking
    assert "thoughtSignature" not in text  # no signature of Gemini's own yet
    turns = [(c["role"], [next(iter(p)) for p in c["parts"]]) for c in to_gemini["contents"]]
    assert turns == [
        ("user", ["text"]),
        ("model", ["functionCall"]),  # OpenAI's call, its reasoning dropped
        ("user", ["functionResponse"]),
        ("model", ["text"]),
        ("user", ["text"]),
        ("model", ["text", "functionCall"]),  # Claude's text and call, its thinking dropped
        ("user", ["functionResponse"]),
        ("model", ["text"]),
        ("user", ["text"]),
    ]
    responses = [
        p["functionResponse"]
        for c in to_gemini["contents"]
        for p in c["parts"]
        if "functionResponse" in p
    ]
    calls = [
        p["functionCall"] for c in to_gemini["contents"] for p in c["parts"] if "functionCall" in p
    ]
    assert [r["name"] for r in responses] == [c["name"] for c in calls] == ["get_weather"] * 2

    # Gemini's own signature went back to Gemini, on its functionCall part
    model_turn = loopback.bodies[1]["contents"][-2]
    signed = [p for p in model_turn["parts"] if "thoughtSignature" in p]
    assert [next(iter(p)) for p in signed] == ["functionCall"]
    assert base64.urlsafe_b64decode(signed[0]["thoughtSignature"] + "==") == base64.b64decode(
        gemini_signature() + "=="
    )
    stored = [r.provider for n in history for r in n.message.reasoning or ()]
    assert stored == ["openai", "anthropic", "google", "google"]
