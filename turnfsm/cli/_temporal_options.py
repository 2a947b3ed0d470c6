"""The Temporal options of ``turnfsm serve`` and ``turnfsm temporal-worker``
(``--temporal``, ``--temporal-namespace``, ``--temporal-task-queue``), the
extra they need, the connection, and the store they share
(``docs/temporal.md``); ``turnfsm temporal-prune`` uses them too."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from types import ModuleType
from typing import Any, NoReturn

import anyio

from ..storage import Store, WorkQueue
from ._errors import CLIError

__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_TASK_QUEUE",
    "add_temporal_options",
    "connect",
    "exit_at_once",
    "shared_store",
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


def connect(
    args: argparse.Namespace, package: ModuleType, store: Store, *, namespace: str | None = None
) -> Any:
    """A client of the Temporal server of ``--temporal`` (connected now, so
    that a wrong address is a usage error before anything starts), through
    ``TemporalEngine.connect`` (only ``turnfsm.temporal`` imports the SDK). It
    is made on an event loop of its own and used on another: the SDK's client
    belongs to no event loop. Its namespace: ``namespace``, else
    ``--temporal-namespace``."""
    namespace = namespace or args.temporal_namespace

    async def go() -> Any:
        with anyio.fail_after(CONNECT_TIMEOUT):
            engine = await package.TemporalEngine.connect(
                args.temporal, store=store, namespace=namespace
            )
            return engine.client

    try:
        return anyio.run(go)
    except TimeoutError:
        problem = f"no answer within {CONNECT_TIMEOUT:g} s"
    except Exception as exc:  # the SDK's RuntimeError for a refused connection, RPCError, ...
        problem = " ".join(str(exc).split())[:300] or type(exc).__name__
    raise CLIError(
        f"--temporal {args.temporal}: cannot reach the Temporal server "
        f"(namespace {namespace}): {problem}"
    )


def shared_store(store: Store, url: str, flag: str) -> None:
    """A usage error unless ``store`` is one other processes can share."""
    if not isinstance(store, WorkQueue):
        raise CLIError(
            f"{flag}: {url} is this process's only; the workers and the server of "
            "Temporal turns share a store: use a PostgreSQL URL (or, on one machine, "
            "a SQLite file)"
        )


def exit_at_once(code: int) -> NoReturn:
    """End a process that holds a Temporal client, once it has stopped
    cleanly, without the interpreter's finalization: the SDK's Rust threads
    may still call into Python while it finalizes, which aborts the process
    (``Fatal Python error: PyGILState_Release``, SIGABRT; temporalio/sdk-python
    issue 300). Everything of ours is closed by then; the standard streams
    are flushed here."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or a broken pipe
            stream.flush()
    os._exit(code)
