"""The file store: the session directory layout.

::

    {root}/contexts/{context-id}/
        metadata.json        config, branches (with their message ids), state, version, ...
        message_index.json   {"messages": [{id, role, message_type, created_at, branch}]}
        commits.jsonl        a long context's commits since the two files above were
                             last written whole: one record a line (see below)
        messages/{msg-id}.json
        steps.jsonl          the audit trail: one committed transition a line
        commit.journal       only while a commit is being applied (or after a crash)
        .lock                the context's lock (``flock``)
        lease.json           who runs a call on the context: owner (null once
                             released), fencing token, expiry

**Every change is all-or-nothing as seen after a crash.**

* A commit first writes its whole result (the final content of every file it
  changes, the lines it appends to ``steps.jsonl``, and the record it appends
  to ``commits.jsonl`` or that file's emptying) into one journal file,
  ``commit.journal``, atomically (a temporary file, fsync, rename, fsync of the
  folder): that rename is the commit point. It then applies the journal: the
  steps, each file written atomically (``metadata.json`` last), then
  ``commits.jsonl`` (written at the offset the journal names, cutting off
  what follows), and removes it. A journal left by a crash is applied again
  (idempotently) before the context is next read or changed, under the
  context's exclusive lock; a journal whose versions do not match the stored
  ones (``metadata.json``'s, or the last record's of ``commits.jsonl``) is
  damage and is refused, never applied. So ``commits.jsonl`` holds whole
  records only, once no journal is left: anything else in it is damage.
* ``create`` builds the whole folder under a temporary name
  (``contexts/.creating-...``) and renames it into place; ``delete`` renames the
  folder to a tombstone (``contexts/.deleted-...``) and then removes it. Both
  renames are atomic, so a context is either complete or absent. Folders under
  a dot-name are never contexts: they are removed once no create or delete is
  running (``contexts/.lock``), when the store is opened and on
  ``list_contexts``. A context folder without ``metadata.json`` (what an older
  release could leave after a crash inside ``create`` or ``delete``) is absent
  to every call; ``create`` of its id replaces it.
* Readers take the context's lock shared, writers exclusive, so a reader never
  sees a commit half applied. A head a commit changes is kept again only once
  the commit is applied: a commit that fails leaves none, and the next one
  reads the context whole.

**Another program's context folders are refused, never adopted.** The same
layout written by another program (a ``metadata.json`` without
``schema_version``) is refused when the store is opened on it or reads it,
with nothing written into it, naming the command that imports it
(:mod:`turnfsm.storage._files_foreign`).

**Damaged data is refused, never repaired or rewritten on read.** Every file is
validated as it is read (UTF-8, JSON, the types of every field, with the
models' own rules, strictly: ``"3"`` is not a version), and then the context as
a whole (a known state, an active branch that exists, every message a branch
names stored, every parent message and source branch known). Damage is a
:class:`~turnfsm.errors.StoreError` naming the file and the JSON path of the
field (``.../metadata.json: $.branches.main.message_ids: Input should be a
valid list``). ``load`` reads the whole context, and so does a commit that
finds no head of it kept (see below); ``steps`` reads
``steps.jsonl`` (``load`` does not). ``list_contexts`` lists a context whose
summary (id, state, version, timestamps, parent) can be read, even when
other parts of it are damaged, and silently leaves out one whose summary cannot
be read: one damaged context never hides the others; ``load`` of it raises.

``metadata.json`` and ``message_index.json`` list every message. A commit on
a long context (:attr:`FilesStore.tail_from`) appends a record to
``commits.jsonl`` instead of writing them whole, until the tail would pass
:attr:`FilesStore.tail_limit` of them (docs/storage.md has the record and the
rules). A commit does not read the history again either: see
:mod:`turnfsm.storage._files_heads`.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import anyio.to_thread

from ..errors import ContextNotFound, StoreError
from ..model import ChatContext
from ._base import (
    ChildrenOfSummaries,
    Commit,
    ContextSummary,
    MessagePages,
    StepLog,
    Store,
)
from ._files_commit import At, check_commit, kept_after, plan_commit
from ._files_foreign import ForeignContextFolder, foreign_layout, is_foreign
from ._files_heads import (
    PartialReads,
    _committed_steps,
    _Head,
    _parse_steps,
)
from ._files_journal import JOURNAL, _check_journal, _parse_journal
from ._files_leases import LeaseFiles
from ._files_records import TAIL, _read_bytes, _read_context, _read_summary, _safe_name, _Summary
from ._files_write import _dumps, _index_of, _message_file, _metadata_of

__all__ = ["FilesStore"]

HEADS = 64
"""How many contexts' heads (:class:`_Head`) a store keeps, the most recently used."""
_CREATING = ".creating-"
_DELETED = ".deleted-"

# ---------------------------------------------------------------------- file operations
#
# Every change to the disk goes through the functions below, one call a step
# that a crash can fall between. ``op_hook`` (None in use) is called before
# each step with its kind and path: the crash tests set it to kill the process
# at the n-th step.

op_hook: Callable[[str, Path], None] | None = None


def _op(kind: str, path: Path) -> None:
    if op_hook is not None:
        op_hook(kind, path)


def _write_temp(path: Path, data: bytes, fsync: bool) -> Path:
    """``data`` in a new temporary file beside ``path`` (not yet in place)."""
    _op("write", path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return Path(tmp)


def _rename(src: Path, dst: Path) -> None:
    _op("rename", dst)
    os.replace(src, dst)


def _write_atomic(path: Path, data: bytes, fsync: bool) -> None:
    _rename(_write_temp(path, data, fsync), path)


def _write_new(path: Path, data: bytes, fsync: bool) -> None:
    """A file in a folder nobody reads yet (a context being created)."""
    _op("write", path)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())


def _mkdir(path: Path) -> None:
    _op("mkdir", path)
    path.mkdir()


def _unlink(path: Path) -> None:
    _op("unlink", path)
    with suppress(FileNotFoundError):
        path.unlink()


def _write_at(kind: str, path: Path, offset: int, data: bytes, fsync: bool) -> None:
    """``data`` at ``offset`` of ``path``, cutting off whatever followed it
    (``kind``: ``steps`` for ``steps.jsonl``, ``tail`` for ``commits.jsonl``)."""
    _op(kind, path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, offset)
        os.pwrite(fd, data, offset)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _remove_tree(path: Path) -> None:
    """Remove a folder that no reader looks at (a tombstone, a stale temporary)."""
    with suppress(FileNotFoundError):
        for dirpath, dirnames, filenames in os.walk(path, topdown=False):
            for name in filenames:
                _unlink(Path(dirpath) / name)
            for name in dirnames:
                _op("rmdir", Path(dirpath) / name)
                with suppress(FileNotFoundError):
                    os.rmdir(Path(dirpath) / name)
        _op("rmdir", path)
        os.rmdir(path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_lock(folder: Path) -> int:
    """A context's ``.lock``, made on its first use, unless the folder is another
    program's: then nothing is written in it (:mod:`._files_foreign`)."""
    try:
        return os.open(folder / ".lock", os.O_RDWR)
    except FileNotFoundError:
        if is_foreign(folder):
            raise ForeignContextFolder(folder, folder / "metadata.json") from None
    return os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)


# ---------------------------------------------------------------------- the store


class FilesStore(LeaseFiles, PartialReads, Store, MessagePages, ChildrenOfSummaries):
    """Contexts as files under ``root`` (``files:///dir``).

    ``fsync=False`` skips every fsync: a crash of the process still leaves each
    change whole, a power cut may not.
    """

    leases_in_commits = True
    """``Commit.take_lease`` and ``Commit.release_lease`` are honoured, under the
    commit's lock: ``lease.json`` is taken just before the commit's journal is
    written and released right after it is applied (a crash between leaves the
    lease held by a process that is gone: taken over at once on this host, or
    at its expiry)."""

    tail_from = 64 * 1024
    """A commit appends its record to ``commits.jsonl`` instead of writing the
    two whole files once their id lists and entries are this long, ..."""
    tail_limit = 0.02
    """... while the tail stays shorter than this share of them: then written
    whole, once per a fiftieth of their length appended (a constant cost per
    commit on average; a page reads no longer a tail)."""

    def __init__(self, root: str | Path, *, fsync: bool = True) -> None:
        self.root = Path(root)
        self._contexts = self.root / "contexts"
        foreign = foreign_layout(self.root)
        if foreign is not None:
            raise foreign
        self._contexts.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._limiter = anyio.CapacityLimiter(1)
        self._heads: OrderedDict[str, _Head] = OrderedDict()
        self._collect()

    def _dir(self, context_id: str) -> Path:
        if not _safe_name(context_id) or context_id.startswith("."):
            raise StoreError(f"{context_id!r} cannot be a context folder name")
        return self._contexts / context_id

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    def _sync_dir(self, path: Path) -> None:
        if self._fsync:
            _fsync_dir(path)

    # ------------------------------------------------------------------ locks

    @contextmanager
    def _maintenance(self, exclusive: bool = False) -> Iterator[bool]:
        """``contexts/.lock``: shared while a create or delete has a dot-folder
        under way; exclusive (without waiting) to remove abandoned dot-folders.
        Yields whether the lock was taken."""
        fd = os.open(self._contexts / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if exclusive else fcntl.LOCK_SH)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def _collect(self) -> None:
        """Remove the dot-folders of creates and deletes that a crash interrupted."""
        with self._maintenance(exclusive=True) as free:
            if not free:
                return
            for entry in os.scandir(self._contexts):
                if entry.name.startswith((_CREATING, _DELETED)) and entry.is_dir():
                    _remove_tree(Path(entry.path))

    @contextmanager
    def _context(
        self, folder: Path, context_id: str, *, exclusive: bool = True, recover: bool = True
    ) -> Iterator[None]:
        """Hold the context's lock (exclusive to write, shared to read), after
        applying a journal a crash left (unless ``recover`` is false: a delete
        removes it, damaged or not). ContextNotFound when it does not exist."""
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        while True:
            try:
                fd = _open_lock(folder)
            except (FileNotFoundError, NotADirectoryError):
                raise ContextNotFound(context_id) from None
            try:
                fcntl.flock(fd, mode)
                try:
                    now = os.stat(folder / ".lock")
                except FileNotFoundError:
                    raise ContextNotFound(context_id) from None
                held = os.fstat(fd)
                if (held.st_ino, held.st_dev) != (now.st_ino, now.st_dev):
                    continue  # deleted (and perhaps created again) while we waited
                if not (folder / "metadata.json").is_file():
                    raise ContextNotFound(context_id)
                if recover and (folder / JOURNAL).exists():
                    if mode != fcntl.LOCK_EX:
                        mode = fcntl.LOCK_EX
                        continue
                    self._recover(folder, context_id)
                yield
                return
            finally:
                os.close(fd)

    def _recover(self, folder: Path, context_id: str) -> None:
        """Apply the journal a crashed commit left (under the exclusive lock)."""
        path = folder / JOURNAL
        header, files, steps, tail = _parse_journal(_read_bytes(path), path)
        _check_journal(folder, context_id, header, files, tail)
        for entry in os.scandir(folder / "messages"):  # temporaries of the interrupted apply
            if entry.name.startswith(".") and entry.name.endswith(".tmp"):
                _unlink(Path(entry.path))
        self._apply(folder, files, steps, tail)

    def _apply(self, folder: Path, files: list[tuple[str, bytes]], steps: At, tail: At) -> None:
        """Put a journal's content in place (any number of times), then remove
        it: the steps, the files (``metadata.json`` last), then the tail (a
        record appended, or the file emptied once the whole files hold it)."""
        messages = folder / "messages"
        if steps is not None:
            _write_at("steps", folder / "steps.jsonl", steps[0], steps[1], self._fsync)
        for name, data in files:
            _write_atomic(folder / name, data, self._fsync)
        if any(name.startswith("messages/") for name, _ in files):
            self._sync_dir(messages)
        if tail is not None:
            _write_at("tail", folder / TAIL, tail[0], tail[1], self._fsync)
        self._sync_dir(folder)
        _unlink(folder / JOURNAL)

    # ------------------------------------------------------------------ Store

    async def create(self, context: ChatContext) -> None:
        await self._run(self._create, context)

    def _create(self, ctx: ChatContext) -> None:
        final = self._dir(ctx.id)
        if (final / "metadata.json").exists():
            raise StoreError(f"context {ctx.id!r} already exists ({final})")
        files = [_message_file(node) for node in ctx.message_pool.values()]
        files.append(("message_index.json", _index_of(ctx)))
        files.append(("metadata.json", _dumps(_metadata_of(ctx, 0))))
        with self._maintenance():
            tmp = self._contexts / f"{_CREATING}{ctx.id}-{secrets.token_hex(4)}"
            try:
                _mkdir(tmp)
                _mkdir(tmp / "messages")
                for name, data in files:
                    _write_new(tmp / name, data, self._fsync)
                self._sync_dir(tmp / "messages")
                self._sync_dir(tmp)
                self._place(tmp, final, ctx.id)
            except BaseException:
                _remove_tree(tmp)
                raise
        self._sync_dir(self._contexts)

    def _place(self, tmp: Path, final: Path, context_id: str) -> None:
        """Rename the built folder into place: the moment the context exists."""
        for _ in range(2):
            try:
                _rename(tmp, final)
                return
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise StoreError(f"{final}: cannot create the context: {exc}") from exc
            if (final / "metadata.json").exists():
                break
            # a folder without metadata.json holds no context: set it aside
            tomb = self._contexts / f"{_DELETED}{context_id}-{secrets.token_hex(4)}"
            with suppress(FileNotFoundError):
                _rename(final, tomb)
            _remove_tree(tomb)
        raise StoreError(f"context {context_id!r} already exists ({final})")

    async def load(self, context_id: str) -> ChatContext:
        result: ChatContext = await self._run(self._load, context_id)
        return result

    def _load(self, context_id: str) -> ChatContext:
        folder = self._dir(context_id)
        with self._context(folder, context_id, exclusive=False):
            ctx, stored = _read_context(folder, context_id)
            head = self._heads.get(context_id)
            if head is None or not head.saw(stored):
                self._keep(context_id, _Head.of(ctx, stored))
            return ctx

    def _keep(self, context_id: str, head: _Head) -> None:
        self._heads[context_id] = head
        self._heads.move_to_end(context_id)
        while len(self._heads) > HEADS:
            self._heads.popitem(last=False)

    def _head(self, folder: Path, context_id: str) -> _Head:
        """The context's head, taken out of the kept ones (a commit puts it back
        once applied): the kept one if the files are still as it last saw them
        (see :class:`_Head`), else made from the whole context, read and validated."""
        head = self._heads.pop(context_id, None)
        if head is not None and head.current(folder):
            return head
        ctx, stored = _read_context(folder, context_id)
        return _Head.of(ctx, stored)

    async def commit(self, commit: Commit) -> None:
        await self._run(self._commit, commit)

    def _commit(self, commit: Commit) -> None:
        cid = commit.context_id
        folder = self._dir(cid)
        with self._context(folder, cid, exclusive=True):
            take = self._lease_of_commit(folder, commit)
            head = self._head(folder, cid)
            check_commit(head, commit)
            plan = plan_commit(folder, head, commit, self._record)
            for entry in os.scandir(folder):  # temporaries of a crashed commit
                if entry.name.startswith(".") and entry.name.endswith(".tmp"):
                    _unlink(Path(entry.path))
            if take is not None:
                # taken before the commit point: a crash between the two leaves
                # the lease held by a process that is gone, never a commit stored
                # under a lease that is not
                owner = None if commit.release_lease else take.owner
                self._write_lease(folder, owner, take.token, take.expires_at)
            self._write_journal(folder, plan.journal)
            self._apply(folder, plan.files, plan.steps, plan.tail)
            kept_after(head, plan, folder)
            self._keep(cid, head)
            self._release_after(folder, commit)

    def _record(self, head: _Head, commit: Commit) -> bytes | None:
        """The commit's record for ``commits.jsonl`` (``head`` has it applied),
        or None: the two whole files are written (:attr:`tail_from`, :attr:`tail_limit`)."""
        whole = head.whole_size()
        if whole < self.tail_from:
            return None
        record = head.record(commit)
        if head.tail_bytes + len(record) > whole * self.tail_limit:
            return None
        return record

    def _write_journal(self, folder: Path, journal: bytes) -> None:
        """Put the journal in place: the commit point."""
        _write_atomic(folder / JOURNAL, journal, self._fsync)
        self._sync_dir(folder)

    async def list_ids(self) -> list[str]:
        return [s.id for s in await self.list_contexts()]

    async def list_contexts(self) -> list[ContextSummary]:
        result: list[ContextSummary] = await self._run(self._list)
        return result

    def _list(self) -> list[ContextSummary]:
        self._collect()
        found: list[_Summary] = []
        for entry in os.scandir(self._contexts):
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            folder = Path(entry.path)
            try:
                try:
                    with self._context(folder, entry.name, exclusive=False):
                        summary = _read_summary(folder)
                except StoreError:  # a damaged journal: the summary as stored, if readable
                    summary = _read_summary(folder)
            except (ContextNotFound, StoreError, FileNotFoundError, NotADirectoryError):
                continue  # absent, or a summary that cannot be read (load raises)
            if summary.id == entry.name:
                found.append(summary)
        found.sort(key=lambda s: (s.created_at, s.id))  # oldest first
        return [
            ContextSummary(
                id=s.id,
                state=s.current_state,
                version=s.version,
                updated_at=s.updated_at,
                parent_id=s.parent_id,
                title=s.config.title if s.config is not None else None,
                model=s.config.model_id if s.config is not None else None,
                archived=s.config.archived if s.config is not None else False,
            )
            for s in found
        ]

    async def delete(self, context_id: str) -> None:
        await self._run(self._delete, context_id)

    def _delete(self, context_id: str) -> None:
        folder = self._dir(context_id)
        with self._maintenance(), self._context(folder, context_id, recover=False):
            tomb = self._contexts / f"{_DELETED}{context_id}-{secrets.token_hex(4)}"
            _rename(folder, tomb)  # from here on the context does not exist
            self._heads.pop(context_id, None)
            self._sync_dir(self._contexts)
            _remove_tree(tomb)

    async def steps(self, context_id: str) -> list[StepLog]:
        result: list[StepLog] = await self._run(self._steps, context_id)
        return result

    def _steps(self, context_id: str) -> list[StepLog]:
        folder = self._dir(context_id)
        with self._context(folder, context_id, exclusive=False):
            raw = _committed_steps(folder, context_id)
        return _parse_steps(raw, folder / "steps.jsonl") if raw else []

    async def aclose(self) -> None:
        return None

    # ------------------------------------------------------------------ leases
    #
    # The rules are :class:`~turnfsm.storage._files_leases.LeaseFiles`'s; the
    # write is here, with the others.

    def _write_lease(self, folder: Path, owner: str | None, token: int, expires_at: float) -> None:
        data = {"owner": owner, "token": token, "expires_at": expires_at}
        _write_atomic(folder / "lease.json", _dumps(data), self._fsync)
