"""After a crash: :meth:`Engine.recover` resumes every context left away from
rest, and says what it did with each one (:class:`Recovery`)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..errors import ContextBusy, ContextLeased, StoreError, TurnFSMError
from ..states import RESTING, State
from ..storage import Lease, WorkQueue
from . import _leases
from ._turn import Turn

if TYPE_CHECKING:
    from ._drive import Driver

Resume = Callable[[str], Awaitable[Turn]]

__all__ = ["Recovery", "recover"]


@dataclass(frozen=True, slots=True)
class Recovery:
    """The outcome of :meth:`Engine.recover`, per context (in the store's order).

    A context that rests (``Idle``, awaiting approval, ``PermanentFailure``) is
    in none of the three.
    """

    resumed: dict[str, Turn]
    """Context id -> the turn that resumed it."""
    skipped: dict[str, str]
    """Context id -> why it was not taken (another engine holds its lease, or a
    call of this engine is running on it)."""
    failed: dict[str, TurnFSMError]
    """Context id -> the typed error that stopped it (a stored state the table
    does not know, a store error, an illegal transition, ...)."""


async def recover(
    driver: Driver, resume: Resume, surface: Callable[[Turn], Awaitable[Turn]]
) -> Recovery:
    """:meth:`Engine.recover` (see there): ``resume`` is the engine's, ``surface``
    shows a resumed parent's waiting children's calls on its turn."""
    resumed: dict[str, Turn] = {}
    skipped: dict[str, str] = {}
    failed: dict[str, TurnFSMError] = {}
    # A store that claims work (PostgreSQL: ``claim_expired``) hands each
    # context away from rest to one of the engines recovering at once; the
    # others skip it. Contexts it does not hand out are resumed only when
    # their holder is a dead process of this host (taken over at once).
    # A claimed context is resumed under the lease it was handed (as a
    # worker does), not leased a second time; a claim not used is released.
    claimed: dict[str, Lease] | None = None
    store = driver.settings.store
    d = driver
    if isinstance(store, WorkQueue):
        leases = await store.claim_expired(
            d.settings.owner, d.settings.lease_ttl, now=d.settings.clock.time(), limit=None
        )
        claimed = {lease.context_id: lease for lease in leases}
    try:
        await _each(driver, resume, surface, claimed, resumed, skipped, failed)
    finally:
        for lease in (claimed or {}).values():  # those not resumed
            await _leases.release(d.settings, lease)
    return Recovery(resumed=resumed, skipped=skipped, failed=failed)


async def _each(
    driver: Driver,
    resume: Resume,
    surface: Callable[[Turn], Awaitable[Turn]],
    claimed: dict[str, Lease] | None,
    resumed: dict[str, Turn],
    skipped: dict[str, str],
    failed: dict[str, TurnFSMError],
) -> None:
    """Resume each context of the store away from rest (see :func:`recover`);
    a claim used is taken out of ``claimed``."""
    busy = driver.busy
    store = driver.settings.store
    owner = driver.settings.owner
    for summary in await store.list_contexts():
        cid = summary.id
        try:
            state = State(summary.state)
        except ValueError:
            failed[cid] = StoreError(
                f"context {cid!r}: its stored state {summary.state!r} is not a state "
                "of the table; it was left as it is"
            )
            continue
        if state in RESTING:
            continue
        if cid in busy:
            skipped[cid] = f"a call of this engine ({owner}) is running on it"
            continue
        if claimed is not None and cid not in claimed:
            held = await store.lease(cid)
            if held is None:
                continue  # another engine claimed it and has brought it to rest
            if held.owner != owner and not _leases.owner_gone(held.owner):
                until = datetime.fromtimestamp(held.expires_at, UTC).isoformat()
                skipped[cid] = f"leased by {held.owner} until {until}"
                continue
        lease = claimed.pop(cid, None) if claimed is not None else None
        try:
            if lease is None:
                resumed[cid] = await resume(cid)
            else:  # the run releases it, whatever happens
                resumed[cid] = await _resume_claimed(driver, surface, cid, lease)
        except ContextLeased as exc:
            until = datetime.fromtimestamp(exc.expires_at, UTC).isoformat()
            skipped[cid] = f"leased by {exc.owner} until {until}"
        except ContextBusy:
            skipped[cid] = f"a call of this engine ({owner}) is running on it"
        except TurnFSMError as exc:
            failed[cid] = exc


async def _resume_claimed(
    driver: Driver, surface: Callable[[Turn], Awaitable[Turn]], cid: str, lease: Lease
) -> Turn:
    """:meth:`Engine.resume` under ``lease``, which this engine claimed."""
    from . import _calls

    turn = await driver.run(cid, functools.partial(_calls.start_resume, driver), lease=lease)
    return await surface(turn)
