"""The server of the load test, run as its own process (``tests/server/test_load.py``).

It is what ``turnfsm serve`` runs (``turnfsm.server._run.run_server``: uvicorn,
the app, its shutdown), with the demo model and one change: the weather tool
needs no approval, so that every turn is a whole tool loop (the user's
question, a tool call, the tool's result, the streamed answer) with no human
in it. ``turnfsm serve`` offers the demo's ``get_weather``, which needs one.
The engine's cache takes ``turnfsm serve``'s options and defaults.

::

    python tests/server/load_server.py [--port N] --db FILE --tokens FILE --max-turns N
        [--max-loaded-contexts N] [--max-loaded-messages N]

It says where it listens (``load server: listening on URL``): the port
``--port 0``, the default, took.
"""

from __future__ import annotations

import argparse
from typing import Any

from turnfsm import Engine, RetryPolicy, tool
from turnfsm.adapters.llm.demo import DemoLLM
from turnfsm.cli._cache_options import add_cache_options, cache_settings
from turnfsm.storage import open_store

TEMP_C = 15


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: The city name, e.g. "London".
    """
    return {"city": city, "temp_c": TEMP_C}


def main() -> None:
    from turnfsm.server import ServerConfig, load_tokens
    from turnfsm.server._run import run_server

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, default=0, help="0 (the default): a free port, said")
    p.add_argument("--db", required=True, help="the SQLite file of the store")
    p.add_argument("--tokens", required=True, help="lines 'token tenant'")
    p.add_argument("--max-turns", type=int, default=8, help="--max-turns-per-tenant")
    # the cache's bounds are turnfsm serve's options, with its defaults
    add_cache_options(p)
    args = p.parse_args()
    llm = DemoLLM(delay=0.0)
    store = open_store(f"sqlite:///{args.db}")  # as `turnfsm serve --store` opens it

    def factory() -> Engine:
        return Engine(
            llm=llm,
            tools=[get_weather],
            store=store,
            retry=RetryPolicy(),
            **cache_settings(args),
        )

    config = ServerConfig(tokens=load_tokens(args.tokens), max_turns_per_tenant=args.max_turns)

    def listening(urls: list[str]) -> None:  # the port --port 0 took, for the test
        print(f"load server: listening on {urls[0]}", flush=True)

    run_server(factory, config, host="127.0.0.1", port=args.port, on_listening=listening)


if __name__ == "__main__":
    main()
