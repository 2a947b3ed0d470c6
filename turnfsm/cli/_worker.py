"""``turnfsm worker``: run the turns handed off through the store (``docs/workers.md``).

A worker serves no HTTP. It claims the contexts that are away from rest with
their lease released or expired (a message a ``turnfsm serve --turns workers``
committed, a turn a killed process left), at most ``--concurrency`` at once,
and runs each under its claimed lease until it rests. On PostgreSQL it wakes
on the hand-off's notification; it also looks every ``--poll`` seconds.

SIGTERM or SIGINT: it stops claiming, lets each running turn reach its next
commit and hands it back (its lease released, another worker goes on), and
exits 0 (SIGTERM) or 130 (SIGINT, Ctrl-C, as every command); turns still
running after ``--grace`` seconds are interrupted as a crash would (their
last commit stands) and their leases released. A SIGKILL leaves the leases
to expire (``--lease-ttl``). The model and tool flags are ``turnfsm
serve``'s. Works on PostgreSQL, and on SQLite for processes of one machine.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from ..engine import Engine, RetryPolicy, Worker
from ..storage import WorkQueue
from ._cache_options import add_cache_options, cache_settings
from ._errors import EXIT_INTERRUPTED, CLIError, command_parser, count, seconds
from ._history_options import history_settings
from ._mcp import mcp_toolsets
from ._serve import add_model_options, load_tools, model_of, model_shown
from ._store import add_store_option, open_cli_store, store_location
from ._telemetry import add_metrics_options, serve_metrics, start_tracing
from ._turn_options import add_turn_options, turn_settings

if TYPE_CHECKING:
    from ..relay import EventRelay

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    p = command_parser(
        sub, "worker", "run the turns handed off through the store (no HTTP)", __doc__, _run
    )
    p.add_argument(
        "--concurrency",
        type=count(1, 10_000),
        default=16,
        metavar="N",
        help="turns run at once (16)",
    )
    p.add_argument(
        "--poll",
        type=seconds(60.0),
        default=0.5,
        metavar="S",
        help="the longest wait between two claims (0.5)",
    )
    p.add_argument(
        "--grace",
        type=seconds(3600.0),
        default=10.0,
        metavar="S",
        help="on SIGTERM, seconds running turns get to reach their next commit (10)",
    )
    add_model_options(p)
    add_turn_options(p)
    add_metrics_options(p)
    add_cache_options(p)
    add_store_option(p)


def _run(args: argparse.Namespace) -> int:
    llm, tools = model_of(args)
    shown = model_shown(args, llm)
    tools += load_tools(args.tools)
    store, url = open_cli_store(args.store)
    if not isinstance(store, WorkQueue):
        raise CLIError(f"--store: {url} cannot hand out work; use a SQLite or PostgreSQL store")
    engine = Engine(
        llm=llm,
        tools=tools,
        store=store,
        retry=RetryPolicy(),
        lease_ttl=args.lease_ttl,
        toolsets=mcp_toolsets(args),
        **history_settings(args),
        **cache_settings(args),
        **turn_settings(args),
    )
    worker = Worker(engine, concurrency=args.concurrency, poll=args.poll, grace=args.grace)
    stop_tracing = start_tracing("turnfsm-worker")
    stops: list[Callable[[], None]] = []

    async def main() -> None:
        # the event log and its relay: for a worker, not for its --help
        from ..relay import EventRelay
        from ..storage._eventlog import open_event_log

        # the turns' events go to the event log, for the servers' streams
        event_log = open_event_log(store)
        await event_log.open()
        try:
            await work(EventRelay(engine, event_log))
        finally:
            await event_log.aclose()

    async def work(relay: EventRelay) -> None:
        async with engine, relay, anyio.create_task_group() as tg:

            async def on_signal(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    task_status.started()
                    async for signum in signals:
                        received.append(signum)
                        worker.stop()

            await tg.start(on_signal)  # from the start line on, SIGTERM stops it cleanly
            # /metrics answers only once SIGTERM is handled: a supervisor that
            # waits for it, then stops the worker, gets a clean stop (exit 0)
            stops.append(serve_metrics(args, engine))
            # log lines, to standard error: standard output is for what a command outputs
            print(
                f"turnfsm worker: {engine.owner} on {store_location(url)}, "
                f"concurrency {args.concurrency}, model {shown}",
                file=sys.stderr,
                flush=True,
            )
            await worker.run()
            tg.cancel_scope.cancel()
        run = "turn run" if worker.finished == 1 else "turns run"
        print(
            f"turnfsm worker: stopped ({worker.finished} {run}, {worker.failed} failed)",
            file=sys.stderr,
            flush=True,
        )

    received: list[int] = []
    try:
        anyio.run(main)
    finally:
        for stop in stops:
            stop()
        stop_tracing()
    # stopped by Ctrl-C: 130, as every command; by SIGTERM (a supervisor): 0
    return EXIT_INTERRUPTED if received[:1] == [signal.SIGINT] else 0
