"""One owner per running call: the lease a call takes on its context, the
heartbeat that renews it, and the takeover of a dead process's lease."""

from __future__ import annotations

import os
import sys

import anyio

from ..errors import ContextLeased, LeaseLost, StoreError
from ..storage import Lease
from ._defaults import DEFAULT_LEASE_TTL, HOST
from ._loaded import Loaded
from ._runtime import CLAIM, HELD, Runtime
from ._settings import Settings

__all__ = ["DEFAULT_LEASE_TTL", "HOST", "acquire", "heartbeat", "heartbeat_all", "release"]


def owner_gone(owner: str) -> bool:
    """Whether a lease owner (``host:pid:random``) is a process of this host that no
    longer exists: its lease can be taken over before it expires. Anything else
    (another host, a live pid, a name of another form) waits for the expiry."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or sys.platform == "win32":
        return False
    host, pid_text, _ = parts
    if host != HOST or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


async def acquire(s: Settings, context_id: str) -> Lease:
    """Take the context's lease for this engine; ContextLeased when another
    live owner holds it. A lease whose owner is a dead process of this host
    is taken over at once (after a crash and restart, say)."""
    store = s.store
    now = s.clock.time()
    lease = await store.acquire_lease(context_id, s.owner, s.lease_ttl, now=now)
    if lease is not None:
        return lease
    held = await store.lease(context_id)
    if held is not None and owner_gone(held.owner):
        lease = await store.acquire_lease(
            context_id, s.owner, s.lease_ttl, now=now, take_over=held.token
        )
        if lease is not None:
            rt_log = s.log.bind(context_id=context_id)
            rt_log.warning("lease_taken_over", dead_owner=held.owner, token=lease.token)
            return lease
        held = await store.lease(context_id)
    if held is None:  # released in between: try once more
        lease = await store.acquire_lease(context_id, s.owner, s.lease_ttl, now=now)
        if lease is not None:
            return lease
        held = await store.lease(context_id)
    raise ContextLeased(
        context_id,
        held.owner if held is not None else "another engine",
        held.expires_at if held is not None else now,
    )


async def release(s: Settings, lease: Lease) -> None:
    """Give the lease up, shielded from cancellation; a store error is logged
    (the lease then ends at its expiry), never raised over the call's outcome."""
    with anyio.CancelScope(shield=True):
        try:
            await s.store.release_lease(lease)
        except StoreError as exc:
            s.log.warning("lease_release_failed", context_id=lease.context_id, error=str(exc))


async def renew(s: Settings, rt: Runtime) -> bool:
    """Renew the running call's lease; False once it is lost (the next commit
    is then refused with LeaseLost) or released. Never raises."""
    lease = rt.lease
    status = rt.lease_status
    if lease is None or status is not HELD:
        return status is CLAIM  # not taken yet (the call's first commit takes it)
    try:
        renewed = await s.store.renew_lease(lease, s.lease_ttl, now=s.clock.time())
    except LeaseLost as exc:
        if rt.lease is lease and rt.lease_status is HELD:  # not released meanwhile
            rt.log.warning("lease_lost", token=lease.token, current=exc.current)
        return False
    except Exception as exc:  # a store's failure; the next beat tries again
        rt.log.warning("lease_renew_failed", error=str(exc))
        return True
    if rt.lease is lease and rt.lease_status is HELD:  # the call may have returned meanwhile
        rt.lease = renewed
    return True


async def heartbeat(s: Settings, rt: Runtime) -> None:
    """Renew one call's lease every third of its ttl, in real time
    (``anyio.sleep``: the engine's clock may be a test's, which only moves
    when told), until the lease is lost or the call returns."""
    interval = s.lease_ttl / 3
    while True:
        await anyio.sleep(interval)
        if not await renew(s, rt):
            return


async def heartbeat_all(s: Settings, busy: set[str], loaded: Loaded) -> None:
    """The entered engine's heartbeat: every third of the ttl, renew the lease
    of every call running then."""
    interval = s.lease_ttl / 3
    while True:
        await anyio.sleep(interval)
        for cid in list(busy):
            rt = loaded.get(cid)
            if rt is not None and rt.lease is not None and rt.lease_status is HELD:
                await renew(s, rt)
