"""A folder of sessions: ``{id}.json``, one session JSON document per file, as
an application that keeps its sessions in ``./sessions/`` writes them.

:func:`read_session_folder` reads every ``*.json`` file of a folder (not its
subfolders, not other files), in the order of their names, and converts each
with :func:`~turnfsm.adapters.inbound.import_session_records`. It only reads:
nothing in the folder is created, changed or removed.

- The context's id is the file's name without ``.json`` (the application
  finds a session by that name), so importing a folder twice gives the same
  ids, and an export writes each context back to the file it came from. The
  document's own ``id`` is kept as the other formats keep it
  (``metadata.extra["source"]["id"]`` of the first message); the export
  writes the context's id, the file's name, in its place.
- A file that cannot be read, is not JSON, cannot be converted, or whose name
  cannot be a context id gives a :class:`SessionFileError` naming the file
  and the JSON path of the problem (``$`` for the whole file); the files after
  it are read all the same.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ....errors import InvalidInput
from ....model import ChatContext
from ....model._json import MAX_DOCUMENT_DEPTH, JSONTooDeep, id_problem, loads_json
from ._checks import Ids
from ._session_records import import_session_records

__all__ = [
    "SESSION_SUFFIX",
    "SessionFile",
    "SessionFileError",
    "file_name_problem",
    "read_session_file",
    "read_session_folder",
    "session_files",
]

SESSION_SUFFIX = ".json"


class SessionFileError(InvalidInput):
    """One file of a session folder that cannot be imported: ``file`` is its
    path, ``path`` the JSON path of the problem (``$`` for the whole file)."""

    def __init__(self, file: Path, path: str, reason: str) -> None:
        self.file = file
        self.path = path
        super().__init__(f"{file}: {path}", reason)


@dataclass(frozen=True, slots=True)
class SessionFile:
    """What one file of the folder gave: a context, or the error that stopped it."""

    file: Path
    context: ChatContext | None = None
    error: SessionFileError | None = None


def file_name_problem(context_id: str) -> str | None:
    """Why ``{context_id}.json`` cannot be a session file of a folder (an id a
    store refuses, a path separator, a name starting with a dot: hidden, and
    the prefix of the export's temporary files), or None."""
    problem = id_problem(context_id)
    if problem is not None:
        return problem
    if "/" in context_id or "\\" in context_id:
        return "holds a path separator"
    if context_id.startswith("."):
        return "starts with a dot"
    return None


def session_files(folder: Path) -> list[Path]:
    """The ``*.json`` files of ``folder``, by name (``OSError`` if it cannot be listed)."""
    return sorted(p for p in folder.iterdir() if p.name.endswith(SESSION_SUFFIX) and p.is_file())


def _context_id(file: Path) -> str:
    stem = file.name[: -len(SESSION_SUFFIX)]
    problem = file_name_problem(stem)
    if problem is not None:
        reason = f"the file name {stem!r} cannot be a context id: {problem}"
        raise SessionFileError(file, "$", reason)
    return stem


def _load(file: Path) -> Any:
    try:
        text = file.read_bytes().decode("utf-8")
    except OSError as exc:
        raise SessionFileError(file, "$", f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SessionFileError(
            file, "$", f"not UTF-8 text: {exc.reason} at byte {exc.start}"
        ) from None
    try:
        return loads_json(text, MAX_DOCUMENT_DEPTH)
    except json.JSONDecodeError as exc:
        raise SessionFileError(
            file, "$", f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except JSONTooDeep as exc:
        raise SessionFileError(file, "$", f"cannot be read: {exc}") from None


def read_session_file(
    file: Path, *, now: datetime | None = None, ids: Ids | None = None
) -> ChatContext:
    """One session file as a context whose id is the file's name without ``.json``."""
    context_id = _context_id(file)
    data = _load(file)
    try:
        ctx = import_session_records(data, now=now, ids=ids)
    except InvalidInput as exc:
        raise SessionFileError(file, exc.where, exc.reason) from None
    return dataclasses.replace(ctx, id=context_id)


def read_session_folder(
    folder: Path, *, now: datetime | None = None, ids: Ids | None = None
) -> Iterator[SessionFile]:
    """Each ``*.json`` file of ``folder``, by name, as a context or an error
    (see the module docstring). ``OSError`` if the folder cannot be listed."""
    for file in session_files(folder):
        try:
            yield SessionFile(file, context=read_session_file(file, now=now, ids=ids))
        except SessionFileError as exc:
            yield SessionFile(file, error=exc)
