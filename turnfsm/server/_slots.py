"""The per-tenant turn limit across servers on one PostgreSQL database
(``--max-turns-per-tenant``; the section "Tenants and tokens" of ``docs/server.md``).

A tenant's limit N is N slots, each a PostgreSQL advisory lock keyed by the
tenant (and the store's schema) and the slot's number. A server takes a slot
for each turn it starts (``pg_try_advisory_lock`` on the slots it does not
hold yet, the first that is free) and gives it back when the turn ends. The
locks are held by one connection of the server's own, so a server that dies
(killed, crashed, its machine gone) gives back every slot it held the moment
PostgreSQL sees its connection close: there is nothing to expire by hand.

One server's own turns are also counted in memory (:class:`TurnLimit`), with
no await between the check and the launch; the slots are the count of every
server. A request that makes what its turn needs before the turn starts (a
new context, an imported history) takes its slot first and *parks* it when it
is done (:meth:`SharedSlots.park`): the launch that follows, with no await in
between, takes the parked slot, so no other server can take it in the
meantime. A parked slot nobody takes is given back after
:data:`PARKED_FOR` seconds.

If the connection breaks, the server connects again at the next turn it
starts; the slots its running turns held are then free for other servers
until those turns end (the limit can be exceeded for that long), which is
logged.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import anyio
import structlog

from ._errors import ApiError
from ._limits import RETRY_AFTER

__all__ = ["PARKED_FOR", "SharedSlots", "shared_slots_for"]

log = structlog.get_logger("turnfsm.server")

PARKED_FOR = 5.0
"""Seconds a slot taken ahead of its turn stays this server's before it is given back."""

_TAKE = "SELECT pg_try_advisory_lock(hashtext(current_schema() || '/turnfsm-turn-slot/' || %s), %s)"
_GIVE = "SELECT pg_advisory_unlock(hashtext(current_schema() || '/turnfsm-turn-slot/' || %s), %s)"


class SharedSlots:
    """The slots of every tenant on one database (see the module)."""

    def __init__(self, url: str, limit: int) -> None:
        self.url = url
        self.limit = limit
        self._conn: Any = None
        self._lock = anyio.Lock()
        self._held: dict[str, set[int]] = {}
        """Per tenant, the slots this server holds (a session's advisory locks are
        re-entrant: the same lock taken twice here would count once)."""
        self._parked: dict[str, list[tuple[int, float]]] = {}

    async def _connection(self) -> Any:
        from ..storage._pg_schema import psycopg

        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        await self._close()  # a broken one: its slots are lost
        self._conn = await psycopg.AsyncConnection.connect(
            self.url, connect_timeout=10, autocommit=True
        )
        return self._conn

    def take_parked(self, tenant: str) -> int | None:
        """A slot taken ahead for this tenant's next turn, if one is parked (no await)."""
        parked = self._parked.get(tenant)
        if not parked:
            return None
        slot, _ = parked.pop()
        if not parked:
            del self._parked[tenant]
        return slot

    def park(self, tenant: str, slot: int) -> None:
        """Keep ``slot`` for this server's next turn of ``tenant`` (see the module)."""
        self._parked.setdefault(tenant, []).append((slot, time.monotonic() + PARKED_FOR))

    async def acquire(self, tenant: str) -> int:
        """Take a free slot of ``tenant``: its number, or ``429 too_many_turns``."""
        async with self._lock:
            for attempt in range(2):
                try:
                    conn = await self._connection()
                    held = self._held.setdefault(tenant, set())
                    for slot in range(self.limit):
                        if slot in held:
                            continue
                        cur = await conn.execute(_TAKE, (tenant, slot))
                        row = await cur.fetchone()
                        if row is not None and row[0]:
                            held.add(slot)
                            return slot
                    break
                except Exception as exc:  # the connection broke: once more, fresh
                    if attempt:
                        raise ApiError(
                            503, "not_ready", f"the turn slots cannot be read: {exc}"
                        ) from exc
                    await self._close()
        raise ApiError(
            429,
            "too_many_turns",
            f"{self.limit} turns of this tenant are running on the servers of this "
            f"database (the limit is {self.limit}); try again when one has ended",
            headers={"Retry-After": str(RETRY_AFTER)},
        )

    async def release(self, tenant: str, slot: int) -> None:
        """Give ``slot`` back (nothing to do when the connection broke meanwhile)."""
        with anyio.CancelScope(shield=True):
            async with self._lock:
                held = self._held.get(tenant)
                if held is None or slot not in held:
                    return
                held.discard(slot)
                if not held:
                    del self._held[tenant]
                try:
                    await self._conn.execute(_GIVE, (tenant, slot))
                except Exception as exc:
                    log.warning("turn_slot_release_failed", tenant=tenant, error=str(exc))
                    await self._close()

    async def expire_parked(self) -> None:
        """Give back the parked slots no turn took in time (run every second)."""
        now = time.monotonic()
        for tenant, parked in list(self._parked.items()):
            stale = [slot for slot, until in parked if until <= now]
            if not stale:
                continue
            left = [(slot, until) for slot, until in parked if until > now]
            if left:
                self._parked[tenant] = left
            else:
                del self._parked[tenant]
            for slot in stale:
                await self.release(tenant, slot)

    async def run(self) -> None:
        """Expire parked slots until cancelled."""
        while True:
            await anyio.sleep(1.0)
            await self.expire_parked()

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if any(self._held.values()):
            log.warning(
                "turn_slots_lost",
                held={t: sorted(s) for t, s in self._held.items() if s},
                reason="the connection holding the turn slots broke; other servers may "
                "start turns over the limit until these end",
            )
        self._held.clear()
        self._parked.clear()
        if conn is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await conn.close()  # a broken one may fail to close

    async def aclose(self) -> None:
        """Close the connection: every slot it held is given back."""
        self._held.clear()
        self._parked.clear()
        await self._close()


def shared_slots_for(store: object, limit: int) -> SharedSlots | None:
    """Slots shared through the store's database when it is PostgreSQL, else None."""
    import sys

    module = sys.modules.get("turnfsm.storage._postgres")  # loaded if the store is one
    if module is None or not isinstance(store, module.PostgresStore):
        return None
    return SharedSlots(store.url, limit)
