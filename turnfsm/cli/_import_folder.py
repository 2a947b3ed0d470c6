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
from pathlib import Path

import anyio

from ..adapters.inbound import count_tool_calls
from ..adapters.inbound.importers import SessionFile, read_session_folder
from ..errors import StoreError
from ..model import ChatContext
from ..storage import Store
from ._errors import CLIError
from ._store import open_cli_store

__all__ = ["import_folder", "summary"]


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
    return anyio.run(_import_all, prog, folder, files, store_url)


async def _import_all(
    prog: str, folder: Path, files: list[SessionFile], store_url: str | None
) -> int:
    store: Store | None = None
    shown = ""
    stored: set[str] = set()
    if store_url is not None:
        store, shown = open_cli_store(store_url)
    imported = skipped = failed = 0
    try:
        if store is not None:
            stored = set(await store.list_ids())
        for item in files:
            name = item.file.name
            if item.error is not None:
                print(f"{prog}: {item.error}".replace("\n", " "), file=sys.stderr)
                failed += 1
                continue
            ctx = item.context
            assert ctx is not None
            said = summary(ctx, "session")
            if store is None:
                print(f"{name}: {ctx.id}: {said} (not stored)")
                continue
            if ctx.id in stored:
                print(f"{name}: skipped: context {ctx.id} is already stored")
                skipped += 1
                continue
            try:
                await store.create(ctx)
            except StoreError as exc:
                print(f"{prog}: {item.file}: {exc}".replace("\n", " "), file=sys.stderr)
                failed += 1
                continue
            stored.add(ctx.id)
            imported += 1
            print(f"{name}: imported {ctx.id}: {said}")
    finally:
        if store is not None:
            await store.aclose()
    if store is None:
        checked = len(files) - failed
        print(
            f"{_plural(checked, 'file')} can be imported, {failed} failed: {folder} "
            "(not stored: give --store URL)"
        )
    else:
        print(f"{imported} imported, {skipped} skipped, {failed} failed: {folder} into {shown}")
    return 2 if failed else 0
