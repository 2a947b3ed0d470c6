"""Contexts written into a folder of sessions, ``{id}.json`` each, in the
session JSON format (:func:`export_session_records`), as the application that
keeps its sessions in ``./sessions/`` reads them; the way back of
:func:`~turnfsm.adapters.inbound.importers.read_session_folder`.

- The file's name is the context's id (an import of a folder made that id
  from the file's name, so a context goes back to the file it came from); an
  id that cannot be a file name (:func:`file_name_problem`) is an
  :class:`~turnfsm.errors.InvalidInput` and nothing is written for it.
- Each file is written atomically: the whole document into a temporary file
  in the same folder (``.{id}.json.<random>.tmp``, which no ``*.json`` reader
  picks up), fsynced, then moved over ``{id}.json`` with :func:`os.replace`,
  and the folder fsynced. A crash at any moment leaves ``{id}.json`` absent,
  as it was, or complete: never half-written. A crash can leave a temporary
  file behind; it is not a session file.
- The document's ``id`` is the context's id too, as the application expects
  of ``{id}.json``: a different session id an import kept (a single file
  imported with ``turnfsm import FILE`` gets an id of its own) is replaced,
  and :func:`left_out` says so.
- An existing ``{id}.json`` is replaced: the folder is the application's, and
  the context is the newer copy of that session.
- What the format has no place for is left out, and :func:`left_out` lists it
  for each context: the other branches, approval decisions, thinking, calls
  with no result yet (written with the missing result an import gives), and a
  state other than ``Idle``.
"""

from __future__ import annotations

import json
import os
import secrets
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from ....errors import InvalidInput
from ....model import ApprovalStatus, ChatContext
from ...inbound.importers import SESSION_SUFFIX, file_name_problem
from ._common import results_by_call, select_branch, source_fields
from ._session_records import export_session_records

__all__ = [
    "SessionExport",
    "left_out",
    "session_file_name",
    "write_atomically",
    "write_session_file",
]


@dataclass(frozen=True, slots=True)
class SessionExport:
    """One context written: where, how many records, and what was left out."""

    context_id: str
    file: Path
    records: int
    left_out: tuple[str, ...]


def session_file_name(ctx: ChatContext) -> str:
    """``{id}.json``; :class:`InvalidInput` when the id cannot be a file name."""
    problem = file_name_problem(ctx.id)
    if problem is not None:
        raise InvalidInput(f"context {ctx.id!r}", f"its id cannot be a file name: {problem}")
    return ctx.id + SESSION_SUFFIX


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def left_out(ctx: ChatContext) -> list[str]:
    """What the session JSON format cannot hold of ``ctx``, one phrase each."""
    _, history = select_branch(ctx, None)
    out: list[str] = []
    others = sorted(name for name in ctx.branches if name != ctx.active_branch_name)
    if others:
        out.append(f"{_plural(len(others), 'other branch', 'other branches')}: {', '.join(others)}")
    results = results_by_call(history)
    decided: list[str] = []
    pending: list[str] = []
    thinking = 0
    for msg in history:
        if msg.thinking or msg.reasoning:
            thinking += 1
        for call in msg.tool_calls or []:
            if call.decided_by is not None or call.approval_status is ApprovalStatus.DENIED:
                by = f" by {call.decided_by}" if call.decided_by else ""
                decided.append(f"{call.id} {call.approval_status}{by}")
            if call.id not in results:
                pending.append(call.id)
    if decided:
        out.append(
            f"{_plural(len(decided), 'approval decision', 'approval decisions')}: "
            + ", ".join(decided)
        )
    if thinking:
        out.append(f"thinking of {_plural(thinking, 'message', 'messages')}")
    if pending:
        out.append(
            f"{_plural(len(pending), 'call', 'calls')} with no result yet, written with "
            f"the missing result: {', '.join(pending)}"
        )
    kept = source_fields(history).get("id", ctx.id)
    if kept != ctx.id:
        out.append(f"the session id {kept!r} kept from an import (written as the file's name)")
    if ctx.current_state != "Idle":
        out.append(f"the state {ctx.current_state}")
    return out


def write_atomically(path: Path, data: bytes) -> None:
    """``data`` as the file ``path``, all or nothing (see the module docstring)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def write_session_file(folder: Path, ctx: ChatContext) -> SessionExport:
    """The active branch of ``ctx`` as ``folder/{id}.json`` (see the module docstring)."""
    path = folder / session_file_name(ctx)
    document = {**export_session_records(ctx), "id": ctx.id}
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    write_atomically(path, text.encode("utf-8"))
    return SessionExport(
        context_id=ctx.id,
        file=path,
        records=len(document["records"]),
        left_out=tuple(left_out(ctx)),
    )
