"""``turnfsm temporal-worker``: run the context workflows and their activities
on a Temporal server (``docs/temporal.md``).

A worker polls one task queue of one namespace (``--temporal-task-queue``,
``turnfsm`` by default) for the workflows of the contexts (one per context)
and for their activities: the model calls, the tool calls and the commits to
the store. The store (``--store``) is the one ``turnfsm serve --turns
temporal`` reads: a PostgreSQL URL for workers on several machines, a SQLite
file for processes of one machine. The model, tool and history flags are
``turnfsm serve``'s; every worker of a task queue must be given the same ones.

SIGTERM or SIGINT: the worker stops polling, lets the activities it runs
finish for up to ``--grace`` seconds (Temporal retries one cut off, on any
worker of the queue: a tool that is not idempotent becomes an unknown
outcome for a human to decide), and exits 0 (SIGTERM) or 130 (SIGINT,
Ctrl-C, as every command). A SIGKILL leaves its work to
Temporal: a workflow task goes to another worker at once, an activity after
its heartbeat timeout. Needs the ``temporal`` extra: ``pip install
'turnfsm[temporal]'``.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from datetime import timedelta
from typing import Any

import anyio
import anyio.abc

from ..engine import RetryPolicy
from ._errors import EXIT_INTERRUPTED, command_parser, count, seconds
from ._history_options import history_settings
from ._mcp import mcp_toolsets
from ._serve import add_model_options, load_tools, model_of, model_shown
from ._store import add_store_option, open_cli_store, store_location
from ._temporal_options import (
    add_temporal_options,
    connect,
    exit_at_once,
    shared_store,
    temporal_package,
)

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    p = command_parser(
        sub,
        "temporal-worker",
        "run the context workflows and their activities on a Temporal server (no HTTP)",
        __doc__,
        _run,
    )
    add_temporal_options(p, required=True)
    p.add_argument(
        "--max-activities",
        type=count(1, 10_000),
        default=100,
        metavar="N",
        help="activities (model calls, tool calls, commits) run at once (100)",
    )
    p.add_argument(
        "--grace",
        type=seconds(3600.0),
        default=10.0,
        metavar="S",
        help="on SIGTERM, seconds running activities get to finish (10)",
    )
    p.add_argument(
        "--heartbeat-timeout",
        type=seconds(3600.0),
        default=10.0,
        metavar="S",
        help="seconds a model or tool call may go without a heartbeat before Temporal "
        "takes it as lost (a killed worker's) and hands it on; the same on every worker "
        "of a task queue (10)",
    )
    add_model_options(p)
    add_store_option(p)


def _run(args: argparse.Namespace) -> int:
    package = temporal_package("turnfsm temporal-worker")
    llm, tools = model_of(args)
    shown = model_shown(args, llm)
    tools += load_tools(args.tools)
    store, url = open_cli_store(args.store)
    shared_store(store, url, "--store")
    mcp_toolsets(args)  # the options are checked before anything starts
    client = connect(args, package, store)
    identity = f"{socket.gethostname()}:{os.getpid()}"

    async def main() -> None:
        try:
            worker = package.TemporalWorker(
                client,
                store=store,
                llm=llm,
                tools=tools,
                toolsets=mcp_toolsets(args),  # started and stopped with the worker
                task_queue=args.temporal_task_queue,
                identity=identity,
                max_concurrent_activities=args.max_activities,
                graceful_shutdown_timeout=timedelta(seconds=args.grace),
                heartbeat_timeout=timedelta(seconds=args.heartbeat_timeout),
                retry=RetryPolicy(),
                **history_settings(args),
            )
            await serve(worker)
        finally:
            await store.aclose()

    received: list[signal.Signals] = []

    async def serve(worker: Any) -> None:
        async with anyio.create_task_group() as tg:

            async def on_signal(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    task_status.started()
                    async for signum in signals:
                        received.append(signum)
                        await worker.shutdown()
                        return

            await tg.start(on_signal)  # from the start line on, SIGTERM stops it cleanly
            # log lines, to standard error: standard output is for what a command outputs
            say(
                f"turnfsm temporal-worker: {identity} on {store_location(url)}, "
                f"task queue {args.temporal_task_queue} at {args.temporal} "
                f"(namespace {args.temporal_namespace}), model {shown}"
            )
            await worker.run()
            tg.cancel_scope.cancel()
        say("turnfsm temporal-worker: stopped" + (f" ({received[0].name})" if received else ""))

    anyio.run(main)
    # stopped cleanly (see exit_at_once): by Ctrl-C 130, as every command; by SIGTERM 0
    exit_at_once(EXIT_INTERRUPTED if received[:1] == [signal.SIGINT] else 0)


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
