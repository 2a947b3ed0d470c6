"""What the engine's loaded-context cache holds: bytes per loaded context and
per loaded message, measured with ``tracemalloc`` (docs/benchmarks.md, "The
loaded-context cache").

Each shape is ``--contexts`` contexts of ``turns`` tool-loop turns on a SQLite
file (the load test's: a question of some 50 characters, a tool call, its
result, a streamed answer: four messages a turn), driven through an engine
whose cache holds every one of them, and again through an engine that holds
one. The difference of the Python memory each keeps once the last turn has
returned (``tracemalloc``'s traced total after a full collection) is what the
cache holds for those contexts. With two shapes (``--short`` and ``--long``
turns), the two unknowns follow: bytes per loaded context (the runtime, its
machine holder, the working copy's own records) and bytes per loaded message
(the message, its node, its parts and metadata, its chat-format copy).

::

    python bench/cache_memory.py [--contexts 200] [--short 1] [--long 10] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import anyio

from turnfsm import Engine, RetryPolicy, tool
from turnfsm.adapters.llm.demo import DemoLLM
from turnfsm.storage import open_store

CITIES = ("London", "Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Perth", "Quito")


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: The city name, e.g. "London".
    """
    return {"city": city, "temp_c": 15}


async def held_bytes(folder: Path, contexts: int, turns: int, max_loaded: int) -> tuple[int, int]:
    """The traced bytes an engine keeps after driving ``contexts`` x ``turns``
    turns with a cache of ``max_loaded`` contexts, and the messages it holds."""
    store = open_store(f"sqlite:///{folder / f'{contexts}-{turns}-{max_loaded}.db'}")
    engine = Engine(
        llm=DemoLLM(delay=0.0),
        tools=[get_weather],
        store=store,
        retry=RetryPolicy(),
        max_loaded=max_loaded,
        max_loaded_messages=10**9,
    )
    async with engine:
        for k in range(contexts):
            cid = await engine.create_context(system_prompt="You are a weather assistant.")
            for i in range(turns):
                city = CITIES[(k + i) % len(CITIES)]
                await engine.send(cid, f"client {k}, turn {i}: what is the weather in {city}?")
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        messages = engine.loaded_messages
        assert len(engine.loaded_contexts) == min(contexts, max_loaded)
    return held, messages


async def cache_bytes(folder: Path, contexts: int, turns: int) -> tuple[int, int]:
    """Bytes the cache holds for ``contexts`` contexts of ``turns`` turns, and
    the messages in it."""
    all_held, messages = await held_bytes(folder, contexts, turns, contexts)
    one_held, one_messages = await held_bytes(folder, contexts, turns, 1)
    return all_held - one_held, messages - one_messages


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--contexts", type=int, default=200)
    p.add_argument("--short", type=int, default=1, help="turns of the short shape")
    p.add_argument("--long", type=int, default=10, help="turns of the long shape")
    p.add_argument("--json", action="store_true", help="only the JSON line")
    args = p.parse_args()
    tracemalloc.start()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        await held_bytes(folder, 20, 2, 20)  # imports, caches, first-use allocations
        short_bytes, short_messages = await cache_bytes(folder, args.contexts, args.short)
        long_bytes, long_messages = await cache_bytes(folder, args.contexts, args.long)
    per_message = (long_bytes - short_bytes) / (long_messages - short_messages)
    per_context = (short_bytes - per_message * short_messages) / (args.contexts - 1)
    result = {
        "contexts": args.contexts,
        "short": {"turns": args.short, "messages": short_messages, "bytes": short_bytes},
        "long": {"turns": args.long, "messages": long_messages, "bytes": long_bytes},
        "bytes_per_message": round(per_message),
        "bytes_per_context": round(per_context),
    }
    if not args.json:
        print(
            f"{args.contexts - 1} contexts of {args.short} turn(s): {short_bytes / 2**20:.2f} MiB "
            f"({short_messages} messages); of {args.long} turns: {long_bytes / 2**20:.2f} MiB "
            f"({long_messages} messages)\n"
            f"per loaded message {per_message:,.0f} bytes, per loaded context "
            f"{per_context:,.0f} bytes besides its messages"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    anyio.run(main)
