"""What a commit of the files store writes, worked out before anything is
written: the checks against the context's head, the steps appended to
``steps.jsonl``, the files or the ``commits.jsonl`` record, and the journal
that holds them all (the commit point). :mod:`turnfsm.storage._files` puts it
in place under the crash rules."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from ..errors import StoreError, VersionConflict
from ._base import Commit
from ._files_heads import _Head, _steps_lines
from ._files_journal import _journal_bytes
from ._files_records import _file_id
from ._files_write import _message_file

__all__ = ["At", "Plan", "check_commit", "kept_after", "plan_commit"]

At = tuple[int, bytes] | None
"""What goes at an offset of ``steps.jsonl`` or ``commits.jsonl``."""


@dataclasses.dataclass(slots=True)
class Plan:
    """A commit's writes: the files, the steps, the tail, and their journal."""

    files: list[tuple[str, bytes]]
    steps: At
    tail: At
    record: bytes | None
    """The record appended to ``commits.jsonl``; None when the whole files are written."""
    metadata: bytes
    """``metadata.json``'s new text when the whole files are written, else empty."""
    journal: bytes


def check_commit(head: _Head, commit: Commit) -> None:
    """Refuse a commit that does not follow on from the context's head."""
    ctx = head.ctx
    if ctx.version != commit.expected_version:
        raise VersionConflict(commit.context_id, commit.expected_version, ctx.version)
    for name, _ in commit.appended:
        if name not in ctx.branches and all(b.name != name for b in commit.branches):
            raise StoreError(f"commit appends to unknown branch {name!r}")
    for node in commit.replaced:
        if node.id not in head.pool:
            raise StoreError(f"commit replaces message {node.id!r}, which is not stored")


def _steps_at(folder: Path, head: _Head, commit: Commit) -> At:
    """The commit's steps at the committed end of ``steps.jsonl`` (``head``'s
    length of it grows by them)."""
    if not commit.steps:
        return None
    steps_bytes = head.steps_bytes
    path = folder / "steps.jsonl"
    size = path.stat().st_size if path.exists() else 0
    if size < steps_bytes:
        raise StoreError(
            f"{path}: {size} bytes, but metadata.json's $.steps_bytes says "
            f"{steps_bytes} are committed; the file is left as it is"
        )
    lines = _steps_lines(commit.steps)
    head.steps_bytes = steps_bytes + len(lines)  # kept again only once applied
    return (steps_bytes, lines)


def plan_commit(
    folder: Path, head: _Head, commit: Commit, record_of: Callable[[_Head, Commit], bytes | None]
) -> Plan:
    """The commit's writes, with ``head`` brought to the commit (``record_of``
    says whether it goes to ``commits.jsonl``, given the head with it applied)."""
    files = [_message_file(node) for _, node in commit.appended]
    files += [_message_file(node) for node in commit.replaced]
    steps = _steps_at(folder, head, commit)
    head.apply(commit)
    record = record_of(head, commit)
    metadata = b""
    tail: At
    if record is not None:  # appended to commits.jsonl
        tail = (head.tail_bytes, record)
    else:  # the two whole files written again, commits.jsonl emptied
        metadata = head.metadata()
        files.append(("message_index.json", head.index()))
        files.append(("metadata.json", metadata))
        tail = (0, b"") if head.tail_bytes else None
    journal = _journal_bytes(
        commit.context_id, commit.expected_version, commit.version, files, steps, tail
    )
    return Plan(files, steps, tail, record, metadata, journal)


def kept_after(head: _Head, plan: Plan, folder: Path) -> None:
    """Bring ``head`` to what is on disk once the plan is applied."""
    if plan.record is not None:
        head.tail_bytes += len(plan.record)
        head.last = plan.record
    else:
        head.raw, head.meta_id = plan.metadata, _file_id(folder / "metadata.json")
        head.tail_bytes, head.last = 0, b""
