"""Against the real OpenAI API: skipped unless ``OPENAI_API_KEY`` is set.

``OPENAI_MODEL`` picks the model (default ``gpt-4o-mini``). Run with
``pytest -m real_api tests/openai``.
"""

from __future__ import annotations

import os

import pytest

from turnfsm import Engine, State

pytestmark = [
    pytest.mark.real_api,
    pytest.mark.anyio,
    pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="needs OPENAI_API_KEY"),
]

MODEL = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")


@pytest.mark.parametrize("adapter", ["OpenAIChatAdapter", "OpenAIResponsesAdapter"])
async def test_one_streamed_turn(adapter: str) -> None:
    from turnfsm.adapters.llm import openai as adapters

    adapter_cls = getattr(adapters, adapter)
    async with adapter_cls(timeout=60) as llm, Engine(llm=llm) as engine:
        cid = await engine.create_context(system_prompt="Answer in one word.", model=MODEL)
        turn = await engine.send(cid, "What is the capital of France?")
        assert turn.state is State.IDLE, turn.error
        assert "paris" in turn.text.lower()
        assert State.STREAMING_LLM_RESPONSE in turn.states
