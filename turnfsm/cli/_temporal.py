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
outcome for a human to decide), and exits 0. A SIGKILL leaves its work to
Temporal: a workflow task goes to another worker at once, an activity after
its heartbeat timeout. Needs the ``temporal`` extra: ``pip install
'turnfsm[temporal]'``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import sys
from datetime import timedelta
from types import ModuleType
from typing import Any

import anyio

from ..engine import RetryPolicy
from ..storage import Store, WorkQueue
from ._errors import CLIError, count, guarded, seconds
from ._history_options import history_settings
from ._mcp import mcp_toolsets
from ._serve import add_model_options, load_tools, model_of
from ._store import add_store_option, open_cli_store, store_location

__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_TASK_QUEUE",
    "add_parser",
    "add_temporal_options",
    "connect",
    "temporal_package",
]

DEFAULT_NAMESPACE = "default"
DEFAULT_TASK_QUEUE = "turnfsm"
"""``turnfsm.temporal.DEFAULT_TASK_QUEUE``, named here so that ``--help`` does
not import the Temporal SDK (a test keeps the two equal)."""

_ADDRESS = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def address(text: str) -> str:
    """``--temporal``: ``HOST:PORT`` (an IPv6 host in brackets)."""
    match = _ADDRESS.match(text)
    if match is None or not 0 < int(match.group(1)) < 65536:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:7233, temporal.internal:7233)"
        )
    return text


def add_temporal_options(p: argparse.ArgumentParser, *, required: bool) -> None:
    """``--temporal``, ``--temporal-namespace``, ``--temporal-task-queue``."""
    p.add_argument(
        "--temporal",
        type=address,
        required=required,
        metavar="HOST:PORT",
        help="the Temporal server's frontend"
        + ("" if required else " (with --turns temporal, and only then)"),
    )
    p.add_argument(
        "--temporal-namespace",
        default=DEFAULT_NAMESPACE,
        metavar="NS",
        help=f"the Temporal namespace ({DEFAULT_NAMESPACE})",
    )
    p.add_argument(
        "--temporal-task-queue",
        default=DEFAULT_TASK_QUEUE,
        metavar="QUEUE",
        help=f"the task queue the context workflows run on ({DEFAULT_TASK_QUEUE}); a server "
        "and its workers name the same one",
    )


def temporal_package(command: str) -> ModuleType:
    """``turnfsm.temporal``, or a usage error naming the missing extra."""
    try:
        import turnfsm.temporal as package
    except ImportError as exc:
        missing = exc.name or "temporalio"
        if missing.startswith("temporalio."):  # the SDK, not one of its modules
            missing = "temporalio"
        raise CLIError(
            f"{command} needs the temporal extra ({missing} is missing): "
            "pip install 'turnfsm[temporal]'"
        ) from None
    return package


CONNECT_TIMEOUT = 10.0
"""Seconds a command waits for the Temporal server as it starts."""


def connect(args: argparse.Namespace) -> Any:
    """A client of the Temporal server of ``--temporal`` (connected now, so
    that a wrong address is a usage error before anything starts). It is
    made on an event loop of its own and used on another: the SDK's client
    belongs to no event loop."""
    from temporalio.client import Client

    async def go() -> Any:
        with anyio.fail_after(CONNECT_TIMEOUT):
            return await Client.connect(args.temporal, namespace=args.temporal_namespace)

    try:
        return anyio.run(go)
    except TimeoutError:
        problem = f"no answer within {CONNECT_TIMEOUT:g} s"
    except Exception as exc:  # the SDK's RuntimeError for a refused connection, RPCError, ...
        problem = " ".join(str(exc).split())[:300] or type(exc).__name__
    raise CLIError(
        f"--temporal {args.temporal}: cannot reach the Temporal server "
        f"(namespace {args.temporal_namespace}): {problem}"
    )


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "temporal-worker",
        help="run the context workflows and their activities on a Temporal server (no HTTP)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    p.set_defaults(run=guarded("turnfsm temporal-worker", _run))


def shared_store(store: Store, url: str, flag: str) -> None:
    """A usage error unless ``store`` is one other processes can share."""
    if not isinstance(store, WorkQueue):
        raise CLIError(
            f"{flag}: {url} is this process's only; the workers and the server of "
            "Temporal turns share a store: use a PostgreSQL URL (or, on one machine, "
            "a SQLite file)"
        )


def _run(args: argparse.Namespace) -> int:
    package = temporal_package("turnfsm temporal-worker")
    llm, tools = model_of(args)
    tools += load_tools(args.tools)
    store, url = open_cli_store(args.store)
    shared_store(store, url, "--store")
    mcp_toolsets(args)  # the options are checked before anything starts
    client = connect(args)
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

    async def serve(worker: Any) -> None:
        stopping = anyio.Event()
        async with anyio.create_task_group() as tg:

            async def on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        stopping.set()
                        await worker.shutdown()
                        return

            tg.start_soon(on_signal)
            # log lines, to standard error: standard output is for what a command outputs
            say(
                f"turnfsm temporal-worker: {identity} on {store_location(url)}, "
                f"task queue {args.temporal_task_queue} at {args.temporal} "
                f"(namespace {args.temporal_namespace})"
            )
            await worker.run()
            tg.cancel_scope.cancel()
        say("turnfsm temporal-worker: stopped" + (" (SIGTERM)" if stopping.is_set() else ""))

    anyio.run(main)
    return 0


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
