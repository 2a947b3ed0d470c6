"""A durable conversation: SQLite store, streamed events, an approval, a restart.

Run it: ``python examples/durable_weather.py [path.db]``. The first engine
stops at the approval point; a second engine (as after a restart) loads the
conversation from the file, approves the call and finishes the turn, while a
subscriber prints the streamed text.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio

from turnfsm import ContentDelta, Engine, State, TurnCompleted, tool
from turnfsm.adapters.llm.demo import DemoLLM


@tool(approval="required")
def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city.

    Args:
        city: The city name.
    """
    return {"city": city, "temp_c": 15, "conditions": "cloudy"}


async def main(store: str) -> None:
    async with Engine(llm=DemoLLM(), tools=[get_weather], store=store) as engine:
        cid = await engine.create_context(system_prompt="You are a weather assistant.")
        turn = await engine.send(cid, "What's the weather in Oslo?")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        call = turn.pending_tool_calls[0]
        print(f"stopped at {turn.state}: {call.tool_name}({call.arguments})")

    # A new engine, as after a restart: the conversation comes back from the file.
    async with Engine(llm=DemoLLM(), tools=[get_weather], store=store) as engine:
        async with engine.subscribe(cid) as events, anyio.create_task_group() as tg:

            async def show() -> None:
                async for ev in events:
                    if isinstance(ev, ContentDelta):
                        print(ev.delta, end="", flush=True)
                    elif isinstance(ev, TurnCompleted):
                        print(f"\n[{ev.stop_reason}]")
                        return

            tg.start_soon(show)
            turn = await engine.approve(cid, call.id)
        print("trace:", " -> ".join(await engine.trace(cid)))


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "weather.db"
    anyio.run(main, f"sqlite:///{path.resolve()}")
