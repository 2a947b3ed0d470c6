"""The SQLite store's leases (see :class:`~turnfsm.storage.Leases`).

One row per context in ``leases`` (keyed by the context id, apart from the
history tables). A lease write is one write of the writer's next group: one
per heartbeat, and one at a call's start and end unless the call's first and
last commits take and release the lease themselves (``take_lease``,
``release_lease``: statements of the commit's own write). A group of lease
writes only is committed at ``synchronous=NORMAL`` whatever the store's
setting: a lease only matters among live processes, and a power cut ends them
all; the next commit's sync at FULL makes the lease rows before it durable too
(a group with a commit in it is synced at the store's setting).
"""

from __future__ import annotations

import sqlite3

from ..errors import ContextNotFound, LeaseLost
from ..states import RESTING
from ._base import Lease, TakesLeases, lease_is_held
from ._sql import PUT_LEASE, RELEASE, RENEW
from ._sqlite_threads import SQLiteThreads

__all__ = ["SQLiteLeases"]


class SQLiteLeases(SQLiteThreads, TakesLeases):
    """The lease calls of :class:`~turnfsm.storage.SQLiteStore`, each one write
    of the writer's group (see the module)."""

    async def _take_lease(self, wanted: Lease, now: float, take_over: int | None) -> int | None:
        cid, owner = wanted.context_id, wanted.owner

        def take(conn: sqlite3.Connection) -> int | None:
            # the context and its lease (if any) in one statement
            found = conn.execute(
                "SELECT l.owner, l.token, l.expires_at FROM contexts c "
                "LEFT JOIN leases l ON l.context_id = c.id WHERE c.id = ?",
                (cid,),
            ).fetchone()
            if found is None:
                raise ContextNotFound(cid)
            held_by, token, expires_at = found
            if token is not None and lease_is_held(
                held_by, token, expires_at, owner=owner, now=now, take_over=take_over
            ):
                return None
            token = (token or 0) + 1
            conn.execute(PUT_LEASE, (cid, owner, token, wanted.expires_at))
            return token

        return await self._lease_write(take)

    async def renew_lease(self, lease: Lease, ttl: float, *, now: float) -> Lease:
        renewed = Lease(lease.context_id, lease.owner, lease.token, now + ttl)

        def renew(conn: sqlite3.Connection) -> Lease:
            cur = conn.execute(RENEW, (renewed.expires_at, lease.context_id, lease.token))
            if cur.rowcount != 1:
                row = conn.execute(
                    "SELECT token FROM leases WHERE context_id = ?", (lease.context_id,)
                ).fetchone()
                raise LeaseLost(lease.context_id, lease.token, row[0] if row else None)
            return renewed

        return await self._lease_write(renew)

    async def release_lease(self, lease: Lease) -> None:
        def release(conn: sqlite3.Connection) -> None:
            conn.execute(RELEASE, (lease.context_id, lease.token))

        await self._lease_write(release)

    async def lease(self, context_id: str) -> Lease | None:
        def read(conn: sqlite3.Connection) -> Lease | None:
            row = conn.execute(
                "SELECT owner, token, expires_at FROM leases WHERE context_id = ? "
                "AND owner IS NOT NULL",
                (context_id,),
            ).fetchone()
            return None if row is None else Lease(context_id, row[0], row[1], row[2])

        return await self._run(read)

    async def claim_expired(
        self, owner: str, ttl: float, *, now: float, limit: int | None = 100
    ) -> list[Lease]:
        """Take the leases of up to ``limit`` (None: all) contexts that are away from
        rest (their state is not ``Idle``, ``AwaitingToolApproval`` or
        ``PermanentFailure``) and whose lease was released, expired at ``now``,
        or never taken, the longest waiting first (by their last commit, so a
        context handed off again goes behind those handed off before it): each
        with the next fencing token, for
        ``ttl`` seconds. One write of the writer's group: processes claiming at
        once are serialized by SQLite's write lock and get disjoint sets, as
        PostgreSQL's ``claim_expired`` gives them."""
        resting = sorted(s.value for s in RESTING)
        marks = ",".join("?" * len(resting))

        def claim(conn: sqlite3.Connection) -> list[Lease]:
            found = conn.execute(
                "SELECT c.id, IFNULL(l.token, 0) FROM contexts c "
                "LEFT JOIN leases l ON l.context_id = c.id "
                f"WHERE c.state NOT IN ({marks}) "
                "AND (l.context_id IS NULL OR l.owner IS NULL OR l.expires_at <= ?) "
                "ORDER BY c.updated_at, c.seq LIMIT ?",
                (*resting, now, -1 if limit is None else limit),
            ).fetchall()
            leases = [Lease(cid, owner, token + 1, now + ttl) for cid, token in found]
            conn.executemany(
                PUT_LEASE,
                [(x.context_id, x.owner, x.token, x.expires_at) for x in leases],
            )
            return leases

        return await self._lease_write(claim)
