"""``turnfsm import --format sessions DIR``: every session file of a folder.

Each ``*.json`` file of DIR (not its subfolders), in the order of their names,
is one session in the session JSON format; its name without ``.json`` becomes
the context's id. One line per file on stdout (imported, or skipped: a context
with that id is already stored, so importing a folder again adds nothing); a
file that cannot be imported is one line on stderr naming the file and the
JSON path of the problem, and the other files are imported all the same. A
last line counts them. The folder is only read.

Without ``--store`` nothing is stored: each file is converted and reported,
a check of the folder.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import anyio

from ..adapters.inbound import count_tool_calls
from ..adapters.inbound.importers import SessionFile, read_session_folder
from ..errors import StoreError
from ..model import ChatContext
from ..storage import Store
from ._errors import CLIError
from ._store import open_cli_store

__all__ = ["Entry", "import_entries", "import_folder", "summary"]


def summary(ctx: ChatContext, fmt: str) -> str:
    """``session: 7 messages, 2 tool calls, 1 branch``."""
    n_msg = len(ctx.message_pool)
    n_calls = count_tool_calls(ctx)
    n_branches = len(ctx.branches)
    return (
        f"{fmt}: {n_msg} message{'s' * (n_msg != 1)}, "
        f"{n_calls} tool call{'s' * (n_calls != 1)}, "
        f"{n_branches} branch{'es' * (n_branches != 1)}"
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def import_folder(prog: str, folder: Path, store_url: str | None) -> int:
    """Import every session file of ``folder`` (see the module docstring);
    0 when every file was imported or skipped, 2 when one could not be."""
    if not folder.is_dir():
        raise CLIError(f"{folder}: not a folder (--format sessions reads a folder of *.json files)")
    try:
        files: list[SessionFile] = list(read_session_folder(folder))
    except OSError as exc:
        raise CLIError(f"{folder}: cannot list: {exc.strerror or exc}") from None
    if not files:
        raise CLIError(f"{folder}: no *.json file to import")
    entries = [
        Entry(
            name=item.file.name,
            # a file's problem names the file already
            where="" if item.error is not None else f"{item.file}: ",
            context=None if item.error is not None else item.context,
            problem=item.error,
            said="" if item.context is None else summary(item.context, "session"),
        )
        for item in files
    ]
    return anyio.run(import_entries, prog, folder, entries, store_url, "file", sys.stdout)


@dataclass(frozen=True)
class Entry:
    """One thing of a folder to import: a session file, a context folder."""

    name: str
    """What its lines start with (the file's or the folder's name)."""
    where: str
    """What its lines on stderr name (the file's or the folder's path, and how)."""
    context: ChatContext | None
    """What it holds; ``None`` when it could not be read."""
    problem: Exception | None
    """Why it could not be read."""
    said: str = ""
    """Its summary, for its line."""


async def import_entries(
    prog: str, folder: Path, entries: list[Entry], store_url: str | None, unit: str, out: TextIO
) -> int:
    """Store each readable entry (one line each on ``out``, a problem on stderr),
    skip those already stored, then count them in a last line; without a store
    only check them. 0 when every one was imported or skipped, 2 when one could
    not be."""
    store: Store | None = None
    shown = ""
    stored: set[str] = set()
    if store_url is not None:
        store, shown = open_cli_store(store_url)
    imported = skipped = failed = 0
    try:
        if store is not None:
            stored = set(await store.list_ids())
        for entry in entries:
            ctx = entry.context
            if ctx is None:
                _problem(prog, entry, entry.problem)
                failed += 1
                continue
            if store is None:
                print(f"{entry.name}: {ctx.id}: {entry.said} (not stored)", file=out)
                continue
            if ctx.id in stored:
                print(f"{entry.name}: skipped: context {ctx.id} is already stored", file=out)
                skipped += 1
                continue
            try:
                await store.create(ctx)
            except StoreError as exc:
                _problem(prog, entry, exc)
                failed += 1
                continue
            stored.add(ctx.id)
            imported += 1
            print(f"{entry.name}: imported {ctx.id}: {entry.said}", file=out)
    finally:
        if store is not None:
            await store.aclose()
    if store is None:
        checked = len(entries) - failed
        print(
            f"{_plural(checked, unit)} can be imported, {failed} failed: {folder} "
            "(not stored: give --store URL)",
            file=out,
        )
    else:
        print(
            f"{imported} imported, {skipped} skipped, {failed} failed: {folder} into {shown}",
            file=out,
        )
    return 2 if failed else 0


def _problem(prog: str, entry: Entry, problem: object) -> None:
    print(f"{prog}: {entry.where}{problem}".replace("\n", " "), file=sys.stderr)
