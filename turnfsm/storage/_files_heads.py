"""The files store's kept heads and its partial reads.

A commit does not read the history again: the store keeps each context's head,
checked against ``metadata.json`` (or the last record of ``commits.jsonl``)
byte for byte under the lock, and writes ``metadata.json`` and
``message_index.json``, or its record of ``commits.jsonl``, from it.
``load_messages``, ``message_page`` and ``outline`` (:class:`PartialReads`)
read ``metadata.json``, ``commits.jsonl`` and the files of the messages they
need only.

A head (:class:`_Head`) is what a commit needs of a context, kept between
commits by a :class:`~turnfsm.storage.FilesStore` (see its module for when it
is used); the functions below read a part of a context: ``metadata.json`` and
the message files asked for; and the lines of ``steps.jsonl``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ContextNotFound, StoreError
from ..model import ChatContext, MessageNode
from ._base import Commit, StepLog, in_order
from ._files_json import TAIL, _read_bytes, _safe_name, _validated
from ._files_records import (
    _file_id,
    _Metadata,
    _read_message,
    _read_state,
    _StepLine,
    _Stored,
)
from ._files_write import (
    _id_line,
    _index_head,
    _index_tail,
    _index_text,
    _metadata_text,
    _record_text,
)
from ._outline import ContextOutline, pending_of_branch
from ._schema import context_problems, json_path, step_problem

R = TypeVar("R")

# ---------------------------------------------------------------------- a context's head


@dataclasses.dataclass(slots=True)
class _Head:
    """What a commit needs of a context, kept between commits so that a commit
    reads and writes no more than it changes (not every message file, nor the
    indenting JSON encoder over every id).

    It is valid while the context's files are as the head last saw them, which
    a commit checks under the context's exclusive lock before it uses a kept
    head: with no ``commits.jsonl`` (or an empty one), ``metadata.json`` holds
    ``raw``, byte for byte (every commit that leaves no tail rewrites it);
    with one, ``commits.jsonl`` is ``tail_bytes`` long and ends with ``last``,
    byte for byte (every commit appends a record naming its version, or
    empties the file), and ``metadata.json`` is still the same file (inode,
    size and time: a context deleted and made again under its id has
    another). Otherwise the context is read whole, as on ``load``, and a new
    head made from it.
    """

    raw: bytes
    """``metadata.json`` as on disk when the head was made or last written."""
    ctx: ChatContext
    """The context's small fields and branches; ``message_pool`` is empty."""
    pool: dict[str, str]
    """Every stored message id, in the pool's order, to its index entry's head
    (:func:`_index_head`)."""
    detached: list[str]
    ids: dict[str, bytearray]
    """Each branch's message ids, encoded as ``metadata.json`` lists them
    (:func:`_id_line`, joined with ``",\\n"``): an append extends it."""
    entries: dict[str, bytearray]
    """Each branch's entries of ``message_index.json``, joined the same way."""
    steps_bytes: int
    meta_id: tuple[int, int, int] = (0, 0, 0)
    """``metadata.json``'s file identity (inode, size, time) when it held ``raw``."""
    tail_bytes: int = 0
    """How long ``commits.jsonl`` is (0: empty or missing)."""
    last: bytes = b""
    """Its last record (b"": none)."""

    @classmethod
    def of(cls, ctx: ChatContext, stored: _Stored) -> _Head:
        pool = {mid: _index_head(mid, node.message) for mid, node in ctx.message_pool.items()}
        on_branches = {m for b in ctx.branches.values() for m in b.message_ids}
        small = dataclasses.replace(
            ctx,
            message_pool={},
            branches={
                name: dataclasses.replace(b, message_ids=list(b.message_ids))
                for name, b in ctx.branches.items()
            },
            config=copy.deepcopy(ctx.config),
        )
        detached = [m for m in pool if m not in on_branches]
        steps_bytes = stored.meta.steps_bytes
        head = cls(stored.raw, small, pool, detached, {}, {}, steps_bytes)
        head.meta_id = stored.meta_id
        head.tail_bytes, head.last = stored.tail_bytes, stored.last
        for name in small.branches:
            head.index_branch(name)
        return head

    def index_branch(self, name: str) -> None:
        ids = self.ctx.branches[name].message_ids
        tail = _index_tail(name)
        self.ids[name] = bytearray(b",\n".join([_id_line(m) for m in ids]))
        self.entries[name] = bytearray(",\n".join([self.pool[m] + tail for m in ids]).encode())

    def append(self, name: str, mid: str) -> None:
        """``mid`` at the end of branch ``name``'s encodings."""
        ids, entries = self.ids[name], self.entries[name]
        if ids:
            ids += b",\n"
            entries += b",\n"
        ids += _id_line(mid)
        entries += (self.pool[mid] + _index_tail(name)).encode()

    def metadata(self) -> bytes:
        return _metadata_text(self.ctx, self.ids, self.detached, self.steps_bytes)

    def index(self) -> bytes:
        return _index_text([self.entries[name] for name in self.ctx.branches])

    def saw(self, stored: _Stored) -> bool:
        """Whether the head was made from (or last wrote) the files ``stored`` read."""
        return (self.raw, self.meta_id, self.tail_bytes, self.last) == (
            stored.raw,
            stored.meta_id,
            stored.tail_bytes,
            stored.last,
        )

    def current(self, folder: Path) -> bool:
        """Whether the context's files in ``folder`` are as the head last saw them."""
        try:
            with open(folder / TAIL, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                if size != self.tail_bytes:
                    return False
                if size:
                    f.seek(size - len(self.last))
                    if f.read() != self.last:
                        return False
        except (FileNotFoundError, NotADirectoryError):
            if self.tail_bytes:
                return False
        try:
            if self.tail_bytes:
                return _file_id(folder / "metadata.json") == self.meta_id
            return _read_bytes(folder / "metadata.json") == self.raw
        except (FileNotFoundError, NotADirectoryError):
            raise ContextNotFound(folder.name) from None

    def whole_size(self) -> int:
        """About how long ``metadata.json`` and ``message_index.json`` are: their
        id lists and entries (the rest is small)."""
        return sum(map(len, self.ids.values())) + sum(map(len, self.entries.values()))

    def record(self, commit: Commit) -> bytes:
        """The record of ``commits.jsonl`` of ``commit``, once applied to the head."""
        return _record_text(
            self.ctx,
            self.detached,
            self.steps_bytes,
            {b.name: list(b.message_ids) for b in commit.branches},
            commit.appended,
            commit.replaced,
        )

    def apply(self, commit: Commit) -> None:
        """The commit's changes (checked already) to the head."""
        ctx = self.ctx
        order = None
        if commit.branches:  # the pool's order as read back: branches, then detached
            order = [m for b in ctx.branches.values() for m in b.message_ids]
            order += self.detached
        changed = self._replace(commit)
        self._append_all(commit, changed, order)
        for name in changed:
            self.index_branch(name)
        self._detach(commit, order)
        commit.apply_head(ctx)

    def _replace(self, commit: Commit) -> set[str]:
        """The branches and the messages the commit replaces; the names of the
        branches whose index entries must be made again."""
        ctx = self.ctx
        changed = set()
        for b in commit.branches:
            ctx.branches[b.name] = dataclasses.replace(b, message_ids=list(b.message_ids))
            changed.add(b.name)
        for node in commit.replaced:
            listed = _index_head(node.id, node.message)
            if self.pool[node.id] != listed:  # the index lists what it changed
                self.pool[node.id] = listed
                changed.update(ctx.branches)
        return changed

    def _append_all(self, commit: Commit, changed: set[str], order: list[str] | None) -> None:
        """The messages the commit appends, each to its branch (and its index
        entry, unless the branch's is made again anyway)."""
        ctx = self.ctx
        for name, node in commit.appended:
            listed = _index_head(node.id, node.message)
            if self.pool.setdefault(node.id, listed) != listed:  # stored again, changed
                self.pool[node.id] = listed
                changed.update(ctx.branches)
            if order is not None:
                order.append(node.id)
            ctx.branches[name].message_ids.append(node.id)
            if name not in changed:
                self.append(name, node.id)

    def _detach(self, commit: Commit, order: list[str] | None) -> None:
        """The pool's messages no branch names, after the commit."""
        if order is not None:
            on_branches = {m for b in self.ctx.branches.values() for m in b.message_ids}
            self.detached = [m for m in dict.fromkeys(order) if m not in on_branches]
        elif self.detached and commit.appended:
            added = {node.id for _, node in commit.appended}
            self.detached = [m for m in self.detached if m not in added]


# ---------------------------------------------------------------------- partial reads


def _stored_metadata(folder: Path, context_id: str) -> _Metadata:
    """The context's current metadata: ``metadata.json`` and ``commits.jsonl``."""
    return _read_state(folder, context_id, every=False).meta


def _message(folder: Path, mid: str, where: str) -> MessageNode:
    if not _safe_name(mid):
        raise StoreError(
            f"{folder / 'metadata.json'}: {where}: {mid!r} cannot be a message file name"
        )
    return _read_message(folder / "messages" / f"{mid}.json", mid, where)


def _steps_lines(steps: list[StepLog]) -> bytes:
    """Lines of ``steps.jsonl``."""
    return "".join(
        json.dumps(
            {
                "version": s.version,
                "from": s.from_state,
                "trigger": s.trigger,
                "to": s.to_state,
                "at": s.at.isoformat(),
                **({} if s.detail is None else {"detail": s.detail}),
            }
        )
        + "\n"
        for s in steps
    ).encode()


def _committed_steps(folder: Path, context_id: str) -> bytes:
    """The committed part of ``steps.jsonl`` (read under the context's lock)."""
    size = _read_state(folder, context_id, every=False).meta.steps_bytes
    path = folder / "steps.jsonl"
    if not size:
        return b""
    try:
        with open(path, "rb") as f:
            raw = f.read(size)
    except FileNotFoundError:
        raw = b""
    if len(raw) < size:
        raise StoreError(
            f"{path}: {len(raw)} bytes, but metadata.json's $.steps_bytes says {size} "
            "are committed; the file is left as it is"
        )
    return raw


def _parse_steps(raw: bytes, path: Path) -> list[StepLog]:
    """The committed part of ``steps.jsonl``, validated."""
    out = []
    for n, line in enumerate(raw.split(b"\n")[:-1], 1):
        step = _validated(_StepLine, line, f"{path}: line {n}")
        problem = step_problem(step.from_, step.to)
        if problem is not None:
            raise StoreError(f"{path}: line {n}: {problem}")
        out.append(StepLog(step.version, step.from_, step.trigger, step.to, step.at, step.detail))
    if not raw.endswith(b"\n"):
        raise StoreError(f"{path}: the committed part does not end with a whole line")
    return out


def _messages_of(folder: Path, context_id: str, ids: Sequence[str]) -> dict[str, MessageNode]:
    """The messages of ``ids`` that the context holds (read under its lock)."""
    meta = _stored_metadata(folder, context_id)
    stored = {m for b in meta.branches.values() for m in b.message_ids}
    stored.update(meta.detached_message_ids)
    return {mid: _message(folder, mid, "$.branches") for mid in dict.fromkeys(ids) if mid in stored}


def _page_of(
    folder: Path, context_id: str, branch: str | None, offset: int, limit: int | None
) -> tuple[str, list[MessageNode]] | None:
    """``FilesStore.message_page`` (read under the context's lock)."""
    meta = _stored_metadata(folder, context_id)
    name = meta.active_branch_name if branch is None else branch
    found = meta.branches.get(name)
    if found is None:
        return None
    end = None if limit is None else offset + limit
    return name, _branch_messages(folder, name, found.message_ids, offset, end)


def _branch_messages(
    folder: Path, name: str, ids: Sequence[str], start: int, end: int | None
) -> list[MessageNode]:
    """The message files of ``ids[start:end]``, the ids of branch ``name``."""
    first = min(start, len(ids))
    return [
        _message(folder, mid, f"$.branches.{name}.message_ids[{i}]")
        for i, mid in enumerate(ids[start:end], first)
    ]


def _outline_of(folder: Path, context_id: str) -> ContextOutline:
    """``FilesStore.outline`` (read under the context's lock): ``metadata.json``
    (with ``commits.jsonl``) and the files of a tail of the active branch."""
    meta = _stored_metadata(folder, context_id)
    problems = context_problems(meta, messages=False)  # what load refuses, but messages
    if problems:
        loc, problem = problems[0]
        raise StoreError(f"{folder / 'metadata.json'}: {json_path(loc)}: {problem}")
    lengths = {name: len(b.message_ids) for name, b in meta.branches.items()}
    name = meta.active_branch_name
    ids = meta.branches[name].message_ids
    pending = pending_of_branch(
        len(ids), lambda n: _branch_messages(folder, name, ids, len(ids) - n, None)
    )
    fields = {f.name: getattr(meta, f.name) for f in dataclasses.fields(ChatContext)}
    fields["branches"] = {
        n: dataclasses.replace(b, message_ids=[]) for n, b in meta.branches.items()
    }
    return ContextOutline(ChatContext(**fields), lengths, pending)


class PartialReads:
    """The files store's reads of a part of a context: ``metadata.json`` and
    the message files they need, under the context's shared lock."""

    if TYPE_CHECKING:  # the store's own

        def _dir(self, context_id: str) -> Path: ...

        def _context(
            self, folder: Path, context_id: str, *, exclusive: bool = True
        ) -> AbstractContextManager[None]: ...

        async def _run(self, fn: Any, *args: Any) -> Any: ...

    async def load_messages(self, context_id: str, ids: Sequence[str]) -> list[MessageNode]:
        """The messages with these ids: ``metadata.json`` and their files only."""
        return await self._read(
            context_id,
            lambda folder: in_order(context_id, ids, _messages_of(folder, context_id, ids)),
        )

    async def message_page(
        self, context_id: str, branch: str | None, offset: int, limit: int | None
    ) -> tuple[str, list[MessageNode]] | None:
        """A page of a branch: ``metadata.json`` and the page's message files only."""
        return await self._read(
            context_id, lambda folder: _page_of(folder, context_id, branch, offset, limit)
        )

    async def outline(self, context_id: str) -> ContextOutline:
        """The context without its messages (``ContextOutlines``):
        ``metadata.json`` and the files of a tail of the active branch."""
        return await self._read(context_id, lambda folder: _outline_of(folder, context_id))

    async def _read(self, context_id: str, fn: Callable[[Path], R]) -> R:
        """``fn(folder)`` in a worker thread, under the context's shared lock."""

        def read() -> R:
            folder = self._dir(context_id)
            with self._context(folder, context_id, exclusive=False):
                return fn(folder)

        found: R = await self._run(read)
        return found
