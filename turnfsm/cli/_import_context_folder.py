"""``turnfsm import --format context-folder DIR``: the context folders another
program wrote (``metadata.json``, ``message_index.json``, ``messages/{id}.json``).

DIR is one context folder, a ``contexts/`` folder of them, or the ``data/``
folder that holds ``contexts/`` (a folder in one of these shapes is read so
with ``--format auto`` too). Every context is read and checked first, each on
its own; then each is stored whole (``Store.create``). One line per context on
stdout (imported, or skipped: a context with that id is already stored, so
importing a folder again adds nothing); a context that cannot be imported is
one line on stderr naming its folder, the file and the JSON path of the
problem: nothing of it is stored, and the others are imported all the same. A
last line counts them; exit status 2 if one could not be imported. Nothing in
DIR is written.

Without ``--store`` nothing is stored: each context is read and reported, a
check of the folder. ``--json`` prints the context of one context folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio

from .. import records
from ..adapters.inbound import ContextFolderError, FolderImport, import_context_folders
from ._errors import CLIError
from ._import_folder import Entry, import_entries, summary

__all__ = ["FORMAT", "import_context_folder_cli", "is_context_folder_layout"]

FORMAT = "context-folder"


def is_context_folder_layout(path: Path) -> bool:
    """Whether ``path`` is a context folder (it has ``metadata.json``), a data
    folder (it has ``contexts/``), or a folder of context folders."""
    if (path / "metadata.json").is_file() or (path / "contexts").is_dir():
        return True
    try:
        return any((sub / "metadata.json").is_file() for sub in path.iterdir() if sub.is_dir())
    except OSError:
        return False


def import_context_folder_cli(prog: str, path: Path, store_url: str | None, as_json: bool) -> int:
    """Import every context folder of ``path`` (see the module docstring); 0
    when every one was imported or skipped, 2 when one could not be."""
    try:
        found = import_context_folders(path)
    except ContextFolderError as exc:
        raise CLIError(str(exc)) from None
    except OSError as exc:
        raise CLIError(f"{path}: cannot list: {exc.strerror or exc}") from None
    if as_json and len(found) != 1:
        raise CLIError(f"--json prints one context: {path} holds {len(found)} context folders")
    return anyio.run(_import_all, prog, path, found, store_url, as_json)


def _line(item: FolderImport) -> str:
    assert item.context is not None
    unread = item.not_read
    return summary(item.context, FORMAT) + (f"; not read: {', '.join(unread)}" if unread else "")


async def _import_all(
    prog: str, path: Path, found: list[FolderImport], store_url: str | None, as_json: bool
) -> int:
    entries = [
        Entry(
            name=item.folder.name,
            where=f"{item.folder}: not imported: ",
            context=None if item.error is not None else item.context,
            problem=item.error,
            said="" if item.error is not None else _line(item),
        )
        for item in found
    ]
    out = sys.stderr if as_json else sys.stdout  # with --json, stdout is the context alone
    code = await import_entries(prog, path, entries, store_url, "context", out)
    if as_json and not code:
        (item,) = found
        print(json.dumps(records.to_python(item.context), indent=2, ensure_ascii=False))
    return code
