"""Context folders another program wrote, where a files store looks for its own.

That program keeps the same layout (``contexts/{id}/metadata.json``,
``message_index.json``, ``messages/{id}.json``) with other contents: its
``metadata.json`` has no ``schema_version``, its messages are written its own
way, and it knows nothing of turnfsm's ``.lock``, ``steps.jsonl``,
``commits.jsonl``, ``lease.json`` or journal. A files store does not adopt
such a folder: its first commit would write ``metadata.json`` and the message
files again in turnfsm's form, and on a long context leave ``metadata.json``
behind ``commits.jsonl``, which that program does not read; and that program,
taking no ``flock``, could write beside it. So the folder is refused, before
anything is written into it (not even a lock file), with an error that names
the command that imports it into a store: ``turnfsm import --format
context-folder DIR --store URL``.

Where it is found:

- when a store is opened: the root itself is one such context folder; or its
  ``contexts/`` folder, never opened by a files store (it has no ``.lock``),
  holds one; or the root has no ``contexts/`` and holds one (the root named is
  that program's ``contexts/`` folder);
- when a context is first read or changed (its folder has no ``.lock`` yet),
  and whenever its ``metadata.json`` is read: one without a
  ``schema_version`` is that program's (turnfsm writes one in every file).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from ..errors import StoreError
from ..model._json import MAX_DOCUMENT_DEPTH, loads_json

__all__ = ["ForeignContextFolder", "foreign_layout", "is_foreign"]

_METADATA = "metadata.json"
_OURS = b'{\n  "schema_version": '
"""How every ``metadata.json`` a files store writes begins."""


class ForeignContextFolder(StoreError):
    """A files store was pointed at context folders another program wrote.
    ``folder`` is the folder to import, ``file`` the ``metadata.json`` that
    shows it, ``command`` the command that imports it."""

    def __init__(self, folder: Path, file: Path) -> None:
        self.folder = folder
        self.file = file
        self.command = (
            f"turnfsm import --format context-folder {shlex.quote(str(folder))} --store URL"
        )
        super().__init__(
            f"{file}: $.schema_version: missing: this context folder was written by "
            "another program, not by a files store. A files:// store does not adopt it "
            "(its writes would change the files that program reads); nothing was written. "
            f"Import it into a store instead: {self.command} (a store elsewhere: "
            "sqlite:///... or files:// on another folder)"
        )


def is_foreign(folder: Path) -> bool:
    """Whether ``folder/metadata.json`` is a JSON object without a
    ``schema_version``. A file that cannot be read, or is not a JSON object, is
    not: a read of it says what is wrong."""
    path = folder / _METADATA
    try:
        with open(path, "rb") as f:
            if f.read(len(_OURS)) == _OURS:
                return False
            f.seek(0)
            data = loads_json(f.read(), MAX_DOCUMENT_DEPTH)
    except (OSError, ValueError):  # too deep is a ValueError too
        return False
    return isinstance(data, dict) and "schema_version" not in data


def _first_foreign(base: Path) -> Path | None:
    try:
        entries = sorted(os.scandir(base), key=lambda e: e.name)
    except OSError:
        return None
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        if is_foreign(Path(entry.path)):
            return Path(entry.path) / _METADATA
    return None


def foreign_layout(root: Path) -> ForeignContextFolder | None:
    """The refusal for a store at ``root``, when it holds another program's
    context folders where the store would look (see the module), else None."""
    if is_foreign(root):
        return ForeignContextFolder(root, root / _METADATA)
    contexts = root / "contexts"
    if contexts.is_dir():
        if (contexts / ".lock").exists():
            return None  # a files store was opened here: each context is checked when read
        found = _first_foreign(contexts)
    elif root.is_dir():
        found = _first_foreign(root)
    else:
        return None
    return None if found is None else ForeignContextFolder(root, found)
