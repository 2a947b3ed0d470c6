"""The file store: the directory layout of seed 002.

::

    {root}/contexts/{context-id}/
        metadata.json        config, branches (with their message ids), state, version, ...
        message_index.json   {"messages": [{id, role, message_type, created_at, branch}]}
        messages/{msg-id}.json
        steps.jsonl          the audit trail: one committed transition a line
        lease.json           who runs a call on the context: owner (null once
                             released), fencing token, expiry

Every file is written atomically (a temporary file in the same folder, fsync,
rename, fsync of the folder), so a crash leaves the old or the new file, never
a torn one. A commit writes in an order that makes ``metadata.json`` its
commit point: new and changed message files first, then the steps, then the
index, then the metadata. A crash before the metadata is written leaves files
that the metadata does not name (a message file, an index entry, a step of a
version the metadata has not reached): they are ignored on load and
overwritten by the next commit. A commit holds an exclusive ``flock`` on the
context's ``.lock`` file and checks the version in ``metadata.json`` under
it, so two processes never both win.

The layout keeps every message id in ``metadata.json`` and every message in
``message_index.json``, as the seed does: those two files are rewritten on each
commit and grow with the history. The SQLite store is the append-only default
for long conversations.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio.to_thread

from ..errors import ContextNotFound, LeaseLost, StoreError, VersionConflict
from ..model import SCHEMA_VERSION, ChatContext, MessageNode
from ._base import Commit, ContextSummary, Lease, StepLog
from ._schema import check_version, upcast_branch, upcast_context, upcast_message

__all__ = ["FilesStore"]


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _dumps(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, indent=2, default=str).encode() + b"\n"


def _read_json(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise StoreError(f"{path}: not valid JSON ({exc}); the file is left as it is") from exc


def _record(data: Any, path: Path) -> tuple[dict[str, Any], int]:
    """A stored JSON object and its schema version (refused when newer)."""
    if not isinstance(data, dict):
        raise StoreError(f"{path}: expected a JSON object")
    version = check_version(data.pop("schema_version", None), where=str(path))
    return data, version


class FilesStore:
    """Contexts as files under ``root`` (``files:///dir``)."""

    def __init__(self, root: str | Path, *, fsync: bool = True) -> None:
        self.root = Path(root)
        self._contexts = self.root / "contexts"
        self._contexts.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._limiter = anyio.CapacityLimiter(1)

    def _dir(self, context_id: str) -> Path:
        if not context_id or "/" in context_id or context_id.startswith("."):
            raise StoreError(f"{context_id!r} cannot be a context folder name")
        return self._contexts / context_id

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    @contextmanager
    def _locked(self, folder: Path) -> Iterator[None]:
        fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ metadata

    @staticmethod
    def _metadata(ctx: ChatContext, steps_bytes: int) -> dict[str, Any]:
        data = ctx.model_dump(mode="json", exclude={"message_pool"})
        on_branches = {m for b in ctx.branches.values() for m in b.message_ids}
        return {
            "schema_version": SCHEMA_VERSION,
            **data,
            # pool messages no branch names (the pool is kept whole)
            "detached_message_ids": [m for m in ctx.message_pool if m not in on_branches],
            # how much of steps.jsonl belongs to committed versions
            "steps_bytes": steps_bytes,
        }

    @staticmethod
    def _index_entry(node: MessageNode, branch: str) -> dict[str, Any]:
        msg = node.message
        return {
            "id": node.id,
            "role": str(msg.role),
            "message_type": str(msg.message_type),
            "created_at": msg.metadata.created_at.isoformat(),
            "branch": branch,
        }

    def _write_message(self, folder: Path, node: MessageNode) -> None:
        data = {"schema_version": SCHEMA_VERSION, **node.model_dump(mode="json")}
        _write_atomic(folder / "messages" / f"{node.id}.json", _dumps(data))

    # ------------------------------------------------------------------ Store

    async def create(self, context: ChatContext) -> None:
        await self._run(self._create, context)

    def _create(self, ctx: ChatContext) -> None:
        folder = self._dir(ctx.id)
        try:
            folder.mkdir()
        except FileExistsError:
            raise StoreError(f"context {ctx.id!r} already exists ({folder})") from None
        (folder / "messages").mkdir()
        with self._locked(folder):
            for node in ctx.message_pool.values():
                self._write_message(folder, node)
            index = [
                self._index_entry(ctx.message_pool[mid], name)
                for name, branch in ctx.branches.items()
                for mid in branch.message_ids
            ]
            _write_atomic(folder / "message_index.json", _dumps({"messages": index}))
            _write_atomic(folder / "metadata.json", _dumps(self._metadata(ctx, 0)))

    async def load(self, context_id: str) -> ChatContext:
        result: ChatContext = await self._run(self._load, context_id)
        return result

    def _read_metadata(self, folder: Path, context_id: str) -> dict[str, Any]:
        """metadata.json at the current schema version (upcast when older)."""
        path = folder / "metadata.json"
        try:
            raw = _read_json(path)
        except FileNotFoundError:
            raise ContextNotFound(context_id) from None
        data, version = _record(raw, path)
        if version != SCHEMA_VERSION:
            branches = data.get("branches") or {}
            data["branches"] = {
                name: upcast_branch(b, version, where=f"{path}: branch {name}")
                for name, b in branches.items()
            }
            data = upcast_context(data, version, where=str(path))
        return data

    def _load(self, context_id: str) -> ChatContext:
        return self._load_with_steps(context_id)[0]

    def _load_with_steps(self, context_id: str) -> tuple[ChatContext, int]:
        folder = self._dir(context_id)
        meta = self._read_metadata(folder, context_id)
        steps_bytes = meta.pop("steps_bytes", 0)
        detached = meta.pop("detached_message_ids", [])
        pool: dict[str, Any] = {}
        named = [m for b in meta.get("branches", {}).values() for m in b.get("message_ids", [])]
        for mid in [*named, *detached]:
            if mid in pool:
                continue
            path = folder / "messages" / f"{mid}.json"
            try:
                data, version = _record(_read_json(path), path)
            except FileNotFoundError:
                raise StoreError(f"{path}: missing, but metadata.json names it") from None
            pool[mid] = upcast_message(data, version, where=str(path))
        meta["schema_version"] = SCHEMA_VERSION
        meta["message_pool"] = pool
        try:
            return ChatContext.model_validate(meta), int(steps_bytes)
        except ValueError as exc:
            raise StoreError(f"{folder / 'metadata.json'}: not a valid context: {exc}") from exc

    async def commit(self, commit: Commit) -> None:
        await self._run(self._commit, commit)

    def _commit(self, commit: Commit) -> None:
        folder = self._dir(commit.context_id)
        if not (folder / "metadata.json").exists():
            raise ContextNotFound(commit.context_id)
        with self._locked(folder):
            if commit.lease_token is not None:
                self._check_fence(folder, commit.context_id, commit.lease_token)
            ctx, steps_bytes = self._load_with_steps(commit.context_id)
            if ctx.version != commit.expected_version:
                raise VersionConflict(commit.context_id, commit.expected_version, ctx.version)
            for b in commit.branches:
                ctx.branches[b.name] = b.model_copy(deep=True)
            for name, _ in commit.appended:
                if name not in ctx.branches:
                    raise StoreError(f"commit appends to unknown branch {name!r}")
            for node in commit.replaced:
                if node.id not in ctx.message_pool:
                    raise StoreError(f"commit replaces message {node.id!r}, which is not stored")
            # 1. message files (new ones are not named by metadata.json yet)
            for _, node in commit.appended:
                self._write_message(folder, node)
            for node in commit.replaced:
                self._write_message(folder, node)
            # 2. the audit steps, after the committed part of steps.jsonl (what a
            #    crashed commit appended past it is cut off first)
            if commit.steps:
                lines = "".join(
                    json.dumps(
                        {
                            "version": s.version,
                            "from": s.from_state,
                            "trigger": s.trigger,
                            "to": s.to_state,
                            "at": s.at.isoformat(),
                        }
                    )
                    + "\n"
                    for s in commit.steps
                ).encode()
                with open(folder / "steps.jsonl", "ab") as f:
                    f.truncate(steps_bytes)
                    f.write(lines)
                    f.flush()
                    if self._fsync:
                        os.fsync(f.fileno())
                steps_bytes += len(lines)
            # 3. the new context head, then the index, then metadata.json (the commit point)
            for name, node in commit.appended:
                ctx.message_pool[node.id] = node
                ctx.branches[name].message_ids.append(node.id)
            for node in commit.replaced:
                ctx.message_pool[node.id] = node
            ctx.version = commit.version
            ctx.current_state = commit.state
            ctx.updated_at = commit.updated_at
            ctx.progress = commit.progress
            ctx.event_seq = commit.event_seq
            if commit.active_branch is not None:
                ctx.active_branch_name = commit.active_branch
            if commit.config is not None:
                ctx.config = commit.config.model_copy(deep=True)
            index = [
                self._index_entry(ctx.message_pool[mid], name)
                for name, branch in ctx.branches.items()
                for mid in branch.message_ids
            ]
            _write_atomic(folder / "message_index.json", _dumps({"messages": index}))
            _write_atomic(folder / "metadata.json", _dumps(self._metadata(ctx, steps_bytes)))

    async def list_ids(self) -> list[str]:
        return [s.id for s in await self.list_contexts()]

    async def list_contexts(self) -> list[ContextSummary]:
        result: list[ContextSummary] = await self._run(self._list)
        return result

    def _list(self) -> list[ContextSummary]:
        out = []
        created: dict[str, str] = {}
        for folder in self._contexts.iterdir():
            path = folder / "metadata.json"
            if not folder.is_dir() or not path.exists():
                continue
            meta = self._read_metadata(folder, folder.name)
            created[meta["id"]] = meta["created_at"]
            out.append(
                ContextSummary(
                    id=meta["id"],
                    state=meta["current_state"],
                    version=meta["version"],
                    updated_at=datetime.fromisoformat(meta["updated_at"]),
                    parent_id=meta.get("parent_id"),
                )
            )
        out.sort(key=lambda s: (datetime.fromisoformat(created[s.id]), s.id))  # oldest first
        return out

    async def delete(self, context_id: str) -> None:
        await self._run(self._delete, context_id)

    def _delete(self, context_id: str) -> None:
        folder = self._dir(context_id)
        if not (folder / "metadata.json").exists():
            raise ContextNotFound(context_id)
        with self._locked(folder):
            # metadata first: from then on the context does not exist
            (folder / "metadata.json").unlink()
            for path in sorted(folder.rglob("*"), reverse=True):
                if path.is_dir():
                    path.rmdir()
                else:
                    path.unlink()
        folder.rmdir()

    async def steps(self, context_id: str) -> list[StepLog]:
        result: list[StepLog] = await self._run(self._steps, context_id)
        return result

    def _steps(self, context_id: str) -> list[StepLog]:
        folder = self._dir(context_id)
        meta = self._read_metadata(folder, context_id)
        size = int(meta.get("steps_bytes", 0))
        path = folder / "steps.jsonl"
        if not size:
            return []
        with open(path, "rb") as f:
            raw = f.read(size)
        out = []
        for n, line in enumerate(raw.decode().splitlines(), 1):
            try:
                row = json.loads(line)
                out.append(
                    StepLog(
                        row["version"],
                        row["from"],
                        row["trigger"],
                        row["to"],
                        datetime.fromisoformat(row["at"]),
                    )
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise StoreError(f"{path}: line {n} is not a step ({exc})") from exc
        return out

    async def aclose(self) -> None:
        return None

    # ------------------------------------------------------------------ leases
    #
    # ``lease.json`` in the context's folder, read and written under the
    # context's ``.lock`` (the one commits hold), written atomically.

    @staticmethod
    def _read_lease(folder: Path) -> dict[str, Any] | None:
        path = folder / "lease.json"
        try:
            data = _read_json(path)
        except FileNotFoundError:
            return None
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("token"), int)
            or not isinstance(data.get("expires_at"), int | float)
            or not isinstance(data.get("owner"), str | None)
        ):
            raise StoreError(f"{path}: not a lease record")
        return data

    def _check_fence(self, folder: Path, context_id: str, token: int) -> None:
        data = self._read_lease(folder)
        current = data["token"] if data is not None else None
        if current != token:
            raise LeaseLost(context_id, token, current)

    def _existing(self, context_id: str) -> Path:
        folder = self._dir(context_id)
        if not (folder / "metadata.json").exists():
            raise ContextNotFound(context_id)
        return folder

    @staticmethod
    def _write_lease(folder: Path, owner: str | None, token: int, expires_at: float) -> None:
        data = {"owner": owner, "token": token, "expires_at": expires_at}
        _write_atomic(folder / "lease.json", _dumps(data))

    async def acquire_lease(
        self,
        context_id: str,
        owner: str,
        ttl: float,
        *,
        now: float,
        take_over: int | None = None,
    ) -> Lease | None:
        def acquire() -> Lease | None:
            folder = self._existing(context_id)
            with self._locked(folder):
                old = self._read_lease(folder)
                if (
                    old is not None
                    and old["owner"] is not None
                    and old["owner"] != owner
                    and now < old["expires_at"]
                    and old["token"] != take_over
                ):
                    return None
                lease = Lease(context_id, owner, (old["token"] if old else 0) + 1, now + ttl)
                self._write_lease(folder, owner, lease.token, lease.expires_at)
                return lease

        result: Lease | None = await self._run(acquire)
        return result

    async def renew_lease(self, lease: Lease, ttl: float, *, now: float) -> Lease:
        def renew() -> Lease:
            folder = self._existing(lease.context_id)
            with self._locked(folder):
                old = self._read_lease(folder)
                if old is None or old["token"] != lease.token or old["owner"] is None:
                    raise LeaseLost(lease.context_id, lease.token, old["token"] if old else None)
                renewed = Lease(lease.context_id, lease.owner, lease.token, now + ttl)
                self._write_lease(folder, lease.owner, lease.token, renewed.expires_at)
                return renewed

        result: Lease = await self._run(renew)
        return result

    async def release_lease(self, lease: Lease) -> None:
        def release() -> None:
            folder = self._dir(lease.context_id)
            if not (folder / "metadata.json").exists():
                return
            with self._locked(folder):
                old = self._read_lease(folder)
                if old is not None and old["token"] == lease.token and old["owner"] is not None:
                    self._write_lease(folder, None, lease.token, old["expires_at"])

        await self._run(release)

    async def lease(self, context_id: str) -> Lease | None:
        def read() -> Lease | None:
            data = self._read_lease(self._dir(context_id))
            if data is None or data["owner"] is None:
                return None
            return Lease(context_id, data["owner"], data["token"], float(data["expires_at"]))

        result: Lease | None = await self._run(read)
        return result
