"""How PostgreSQL stores hand work between engines: the leases (one row per
context that was ever leased, with its fencing token), the claim of contexts
left away from rest, and the doorbell a worker waits on for contexts handed
off (:data:`~turnfsm.storage._pg_schema.WORK_CHANNEL`)."""

from __future__ import annotations

import contextlib
from typing import Any

from ..errors import ContextNotFound, LeaseLost, StoreError
from ._base import Lease, TakesLeases
from ._pg_commit import lease_token
from ._pg_schema import WORK_CHANNEL, PostgresDatabase, psycopg, redact, said
from ._sql import RELEASE, RENEW, pg

__all__ = ["LeaseRows"]

_RELEASE = pg(RELEASE)
_RENEW = pg(RENEW)

_ACQUIRE = (
    "WITH ctx AS (SELECT 1 FROM contexts WHERE id = %s), "
    "taken AS (INSERT INTO leases AS l (context_id, owner, token, expires_at) "
    "SELECT %s, %s, 1, %s FROM ctx ON CONFLICT (context_id) DO UPDATE "
    "SET owner = excluded.owner, token = l.token + 1, expires_at = excluded.expires_at "
    "WHERE NOT (l.token > 0 AND l.owner IS NOT NULL AND l.owner <> excluded.owner "
    "AND %s < l.expires_at AND l.token IS DISTINCT FROM %s::bigint) RETURNING l.token) "
    "SELECT EXISTS (SELECT 1 FROM ctx), (SELECT token FROM taken)"
)
"""acquire_lease in one statement: whether the context exists, and the new
token (NULL when another owner holds the lease: ``lease_is_held``)."""


class LeaseRows(TakesLeases, PostgresDatabase):
    """The leases, the claim and the doorbell of :class:`PostgresStore`.

    One row per context that was ever leased, keyed by the context id. Every
    write locks that row (FOR UPDATE, or an INSERT ... ON CONFLICT that
    updates it), so a lease write and a commit under a lease of the same
    context are applied one after the other.
    """

    _listener: Any = None
    """The connection that listens on WORK_CHANNEL (``wait_for_work``)."""

    async def wait_for_work(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the doorbell: a commit that handed a
        context off (:data:`WORK_CHANNEL`). True when it rang (every notification
        that came meanwhile is taken), False when the time is up. The first call opens
        a connection of its own that listens from then on; a lost connection is
        opened again by the next call. A worker polls ``claim_expired`` after
        each wait anyway, so a notification lost with a connection delays work
        by one timeout at most."""
        await self._get_pool()  # the layout's checks first
        conn = self._listener
        try:
            if conn is None or conn.closed:
                conn = await psycopg.AsyncConnection.connect(
                    self.url, connect_timeout=10, autocommit=True
                )
                await conn.execute(f"LISTEN {WORK_CHANNEL}")
                self._listener = conn
            rang = False
            async for _ in conn.notifies(timeout=seconds, stop_after=1):
                rang = True
            if rang:  # the rest of a burst: one claim answers them all
                async for _ in conn.notifies(timeout=0.001):
                    pass
            return rang
        except psycopg.Error as exc:
            self._listener = None
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
            where = f"{redact(self.url)}: the doorbell's connection"
            raise StoreError(f"{where}: {said(exc)}") from exc

    async def _take_lease(self, wanted: Lease, now: float, take_over: int | None) -> int | None:
        cid = wanted.context_id

        async def take(conn: Any) -> tuple[bool, int | None]:
            # one statement: the row made (token 1) or, unless another owner
            # holds it (lease_is_held, in SQL), taken with the next token; the
            # row is locked by the INSERT ... ON CONFLICT either way
            cur = await conn.execute(
                _ACQUIRE, (cid, cid, wanted.owner, wanted.expires_at, now, take_over)
            )
            found, token = await cur.fetchone()
            return bool(found), token

        taken: tuple[bool, int | None] = await self._run(take)
        found, token = taken
        if not found:
            raise ContextNotFound(cid)
        return token

    async def renew_lease(self, lease: Lease, ttl: float, *, now: float) -> Lease:
        renewed = Lease(lease.context_id, lease.owner, lease.token, now + ttl)

        async def renew(conn: Any) -> Lease:
            cur = await conn.execute(_RENEW, (renewed.expires_at, lease.context_id, lease.token))
            if cur.rowcount != 1:
                raise LeaseLost(
                    lease.context_id, lease.token, await lease_token(conn, lease.context_id)
                )
            return renewed

        result: Lease = await self._run(renew)
        return result

    async def release_lease(self, lease: Lease) -> None:
        async def release(conn: Any) -> None:
            await conn.execute(_RELEASE, (lease.context_id, lease.token))

        await self._run(release)

    async def lease(self, context_id: str) -> Lease | None:
        async def read(conn: Any) -> Lease | None:
            cur = await conn.execute(
                "SELECT owner, token, expires_at FROM leases WHERE context_id = %s "
                "AND owner IS NOT NULL AND token > 0",
                (context_id,),
            )
            row = await cur.fetchone()
            return None if row is None else Lease(context_id, row[0], row[1], row[2])

        found: Lease | None = await self._run(read)
        return found

    async def claim_expired(
        self, owner: str, ttl: float, *, now: float, limit: int | None = 100
    ) -> list[Lease]:
        """Take the leases of up to ``limit`` (None: all) contexts that are away from rest
        (their state is not ``Idle``, ``AwaitingToolApproval`` or
        ``PermanentFailure``) and whose lease was released, expired at ``now``,
        or never taken, the longest waiting first (by their last commit, so a
        context handed off again goes behind those handed off before it): each
        with the next fencing token, for
        ``ttl`` seconds. Rows another engine is claiming at the same moment are
        skipped (``FOR UPDATE SKIP LOCKED``), so engines claiming at once get
        disjoint sets: each such context is resumed by one of them."""

        async def claim(conn: Any) -> list[Lease]:
            # one statement: what the function does is the three of old (rows
            # made for contexts never leased, those free locked SKIP LOCKED,
            # then taken), in one transaction
            cur = await conn.execute(
                "SELECT context_id, token FROM turnfsm_claim(%s::text, %s::float8, "
                "%s::float8, %s::bigint)",
                (owner, now, now + ttl, limit),
            )
            return [Lease(cid, owner, token, now + ttl) for cid, token in await cur.fetchall()]

        claimed: list[Lease] = await self._run(claim)
        return claimed
