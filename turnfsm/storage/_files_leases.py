"""The files store's leases: ``lease.json`` in the context's folder (owner,
null once released; fencing token; expiry), read and written under the
context's ``.lock`` (the one commits hold), written atomically. Here are the
rules (who may take, renew or release a lease, and the fence of a commit
under one); :mod:`turnfsm.storage._files` does the writing."""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ContextNotFound, LeaseLost
from ._base import Commit, Lease, TakesLeases, lease_is_held
from ._files_records import _read_lease

__all__ = ["LeaseFiles"]


class LeaseFiles(TakesLeases):
    """The lease calls of :class:`~turnfsm.storage.FilesStore`, and the lease
    half of its commits."""

    if TYPE_CHECKING:  # the store's own

        def _dir(self, context_id: str) -> Path: ...

        def _context(
            self, folder: Path, context_id: str, *, exclusive: bool = True, recover: bool = True
        ) -> AbstractContextManager[None]: ...

        async def _run(self, fn: Any, *args: Any) -> Any: ...

        def _write_lease(
            self, folder: Path, owner: str | None, token: int, expires_at: float
        ) -> None: ...

    def _lease_of_commit(self, folder: Path, commit: Commit) -> Lease | None:
        """Refuse a commit whose lease is lost; the lease it takes, if any (taken
        only from the token just before, released or ours)."""
        cid = commit.context_id
        take = commit.take_lease if commit.lease_token is not None else None
        if take is not None:
            old = _read_lease(folder)
            token = old["token"] if old is not None else 0
            if token != take.token - 1 or (
                old is not None and old["owner"] not in (None, take.owner)
            ):
                raise LeaseLost(cid, take.token, old["token"] if old is not None else None)
        elif commit.lease_token is not None:
            self._check_fence(folder, cid, commit.lease_token)
        return take

    def _release_after(self, folder: Path, commit: Commit) -> None:
        """A commit that releases the lease it ran under, once applied."""
        if commit.take_lease is not None or not commit.release_lease:
            return
        if commit.lease_token is None:
            return
        lease = _read_lease(folder)
        if lease is not None and lease["owner"] is not None:  # the fence found it
            self._write_lease(folder, None, commit.lease_token, lease["expires_at"])

    def _check_fence(self, folder: Path, context_id: str, token: int) -> None:
        data = _read_lease(folder)
        current = data["token"] if data is not None else None
        if current != token:
            raise LeaseLost(context_id, token, current)

    async def _take_lease(self, wanted: Lease, now: float, take_over: int | None) -> int | None:
        def take() -> int | None:
            folder = self._dir(wanted.context_id)
            with self._context(folder, wanted.context_id):
                old = _read_lease(folder)
                if old is not None and lease_is_held(
                    old["owner"],
                    old["token"],
                    old["expires_at"],
                    owner=wanted.owner,
                    now=now,
                    take_over=take_over,
                ):
                    return None
                token = (old["token"] if old else 0) + 1
                self._write_lease(folder, wanted.owner, token, wanted.expires_at)
                return token

        result: int | None = await self._run(take)
        return result

    async def renew_lease(self, lease: Lease, ttl: float, *, now: float) -> Lease:
        def renew() -> Lease:
            folder = self._dir(lease.context_id)
            with self._context(folder, lease.context_id):
                old = _read_lease(folder)
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
            with contextlib.suppress(ContextNotFound), self._context(folder, lease.context_id):
                old = _read_lease(folder)
                if old is not None and old["token"] == lease.token and old["owner"] is not None:
                    self._write_lease(folder, None, lease.token, old["expires_at"])

        await self._run(release)

    async def lease(self, context_id: str) -> Lease | None:
        def read() -> Lease | None:
            data = _read_lease(self._dir(context_id))
            if data is None or data["owner"] is None:
                return None
            return Lease(context_id, data["owner"], data["token"], float(data["expires_at"]))

        result: Lease | None = await self._run(read)
        return result
