"""``turnfsm export --format sessions --store URL DIR``: stored contexts
written into a folder of session files, ``DIR/{id}.json`` each.

Every stored context, or those named by ``--context ID`` (repeatable), is
written as its active branch in the session records format (MessageRecord /
ToolCallRecord), as the application that keeps its sessions in a folder
reads them; ``turnfsm import --format sessions DIR`` reads them back. Each
file is written atomically (a temporary file in DIR, fsync, rename): a crash
leaves a file as it was or complete, never half-written. An existing
``{id}.json`` is replaced. DIR is made if it does not exist.

One line per context: its file, its record count, and what the format could
not hold and was left out (other branches, approval decisions, thinking,
calls with no result yet, a state other than Idle). A context that cannot be
written (unknown id, an id that cannot be a file name) is one line on stderr,
and the others are written all the same (exit status 2 if any could not be).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio

from ..adapters.outbound import SessionExport, write_session_file
from ..errors import ContextNotFound, InvalidInput
from ._errors import CLIError, command_parser
from ._store import add_store_option, open_cli_store

__all__ = ["add_parser"]

_PROG = "turnfsm export"


def add_parser(sub: Any) -> None:
    p = command_parser(
        sub,
        "export",
        "write stored contexts into a folder of session files ({id}.json)",
        __doc__,
        _run,
    )
    p.add_argument("folder", metavar="DIR", help="the folder to write {id}.json files into")
    p.add_argument(
        "--format",
        choices=("sessions",),
        default="sessions",
        help="sessions (the default): one session records file per context",
    )
    p.add_argument(
        "--context",
        action="append",
        default=[],
        metavar="ID",
        help="export this context (repeatable); default: every stored context",
    )
    add_store_option(p)


def report_line(done: SessionExport) -> str:
    """``ID.json: 9 records; left out: 1 other branch: retry; ...``."""
    n = done.records
    lost = "; left out: " + "; ".join(done.left_out) if done.left_out else "; nothing left out"
    return f"{done.file.name}: {n} record{'s' * (n != 1)}{lost}"


def _run(args: argparse.Namespace) -> int:
    return anyio.run(_main, args)


def _folder(name: str) -> Path:
    folder = Path(name)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise CLIError(f"{name}: not a folder") from None
    except OSError as exc:
        raise CLIError(f"{name}: cannot make the folder: {exc.strerror or exc}") from None
    return folder


async def _main(args: argparse.Namespace) -> int:
    store, _ = open_cli_store(args.store, create=False)
    written = failed = 0
    try:
        ids: list[str] = list(dict.fromkeys(args.context))
        if not ids:
            ids = [s.id for s in await store.list_contexts()]
        folder = _folder(args.folder)
        for context_id in ids:
            try:
                ctx = await store.load(context_id)
                done = await anyio.to_thread.run_sync(write_session_file, folder, ctx)
            except (ContextNotFound, InvalidInput) as exc:
                print(f"{_PROG}: {exc}".replace("\n", " "), file=sys.stderr)
                failed += 1
                continue
            except OSError as exc:
                where = exc.filename if exc.filename is not None else folder
                print(
                    f"{_PROG}: context {context_id!r}: {where}: {exc.strerror or exc}",
                    file=sys.stderr,
                )
                failed += 1
                continue
            written += 1
            print(report_line(done))
    finally:
        await store.aclose()
    print(f"{written} written, {failed} failed: {folder}")
    return 2 if failed else 0
