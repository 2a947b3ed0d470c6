"""What the tests of a conversation moving between providers share: an engine
per provider on one store, the tool they all call, and the OpenAI Responses turn
the conversation starts with (a reasoning item, then a tool call)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from openai_corpus import CASES
from openai_loopback import LoopbackServer

from turnfsm import Engine, State, tool
from turnfsm.storage import SQLiteStore
from turnfsm.testing import FakeClock

__all__ = ["OPENAI", "engine", "get_weather", "start_with_openai"]

OPENAI = {c.name: c for c in CASES}


def engine(**kwargs: Any) -> Engine:
    """An engine with ids of its own (unique across the engines sharing the store)."""
    return Engine(clock=FakeClock(), **kwargs)


@tool
def get_weather(city: str = "", location: str = "") -> dict[str, Any]:
    """Current weather."""
    return {"where": city or location, "temp_c": 15}


async def start_with_openai(server: LoopbackServer, db: Path) -> str:
    """A new context on the store ``db``, model ``o4-mini``, its first turn
    ("Weather in Oslo?") answered by the Responses API on ``server``: its id."""
    from turnfsm.adapters.llm.openai import OpenAIResponsesAdapter

    server.script(OPENAI["resp_reasoning_stream"].reply(), OPENAI["resp_logprobs_stream"].reply())
    async with (
        OpenAIResponsesAdapter(base_url=server.url, api_key="sk-loop") as gpt,
        engine(llm=gpt, tools=[get_weather], store=SQLiteStore(db)) as e,
    ):
        cid = await e.create_context(model="o4-mini")
        first = await e.send(cid, "Weather in Oslo?")
    assert first.state == State.IDLE
    return cid
