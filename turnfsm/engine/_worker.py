"""A worker: runs the turns handed off through the store (``docs/workers.md``).

:meth:`Engine.submit` commits a user message and releases the context's lease
in that same commit, without running the turn. The context is then away from
rest with its lease released: what the store's ``claim_expired`` hands out. A
:class:`Worker` loops: it claims as many such contexts as it has free slots
(each lease with the next fencing token), and resumes each under its claimed
lease, through the engine's resume path (it continues from the committed
state). A turn that another process left mid-way (killed, its lease expired)
is claimed the same way.

Between claims it waits for the store's doorbell (PostgreSQL:
``wait_for_work``, woken by the ``NOTIFY`` a hand-off commits), or for a slot
to free, or ``poll`` seconds, whichever comes first: nothing waits on a lost
notification longer than ``poll``.

:meth:`Worker.stop` stops claiming and asks every running turn to hand itself
back before its next call of the model or backoff (a batch of tools being run
is run to its end), once what it did is committed; its last commit releases the lease, so another
worker resumes it at once. Turns still running after ``grace`` seconds are
interrupted (not cancelled: the context keeps its last committed state, as
after a crash) and their leases released.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from ..errors import InvalidInput, StoreError, TurnFSMError
from ..storage import Lease, WorkDoorbell, WorkQueue
from . import _calls
from ._turn import Turn

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["Worker"]


class Worker:
    """Claims the turns handed off to ``engine``'s store and runs them, at most
    ``concurrency`` at once (see the module docstring).

    The store must be able to hand out work (``claim_expired``: SQLite,
    PostgreSQL); any other is refused with :class:`StoreError`. Run it inside
    the engine (``async with engine: await worker.run()``) so that one
    heartbeat renews the leases of every running turn. ``poll`` is the longest
    wait between two claims; ``grace`` the seconds :meth:`stop` lets running
    turns take to hand themselves back.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        concurrency: int = 4,
        poll: float = 0.5,
        grace: float = 10.0,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidInput("concurrency", f"must be an integer >= 1, not {concurrency!r}")
        for name, value in (("poll", poll), ("grace", grace)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise InvalidInput(name, f"must be a number of seconds > 0, not {value!r}")
        if not isinstance(engine.store, WorkQueue):
            raise StoreError(
                f"{engine.store!r} cannot hand out work (it has no claim_expired): "
                "a worker needs a SQLite or PostgreSQL store"
            )
        self.engine = engine
        self.concurrency = concurrency
        self.poll = float(poll)
        self.grace = float(grace)
        self._claim: Any = engine.store.claim_expired
        self._doorbell: Any = (
            engine.store.wait_for_work if isinstance(engine.store, WorkDoorbell) else None
        )
        self._running: set[str] = set()
        self._wake = anyio.Event()
        self._stopping = anyio.Event()
        self.claimed = 0
        """Contexts claimed so far."""
        self.finished = 0
        """Claimed contexts brought to rest (or handed back) without an error."""
        self.failed = 0
        """Claimed contexts whose resume raised (a lost lease, a store error, ...)."""

    @property
    def running(self) -> list[str]:
        """The ids of the contexts this worker is running now."""
        return sorted(self._running)

    def stop(self) -> None:
        """Stop claiming; ask the running turns to hand themselves back (see the
        module docstring). :meth:`run` returns once they did (or after
        ``grace``). Safe from a signal handler run by the event loop."""
        self._stopping.set()
        self._wake.set()
        d = self.engine._d
        for cid in list(self._running):
            d.request_hand_back(cid)

    async def run(self) -> None:
        """Claim and run turns until :meth:`stop`."""
        d = self.engine._d
        log = d.settings.log.bind(owner=d.settings.owner)
        log.info("worker_started", concurrency=self.concurrency)
        async with anyio.create_task_group() as tg:
            if self._doorbell is not None:
                tg.start_soon(self._listen, log)
            while not self._stopping.is_set():
                free = self.concurrency - len(self._running)
                leases: list[Lease] = []
                if free > 0:
                    try:
                        leases = await self._claim(
                            d.settings.owner,
                            d.settings.lease_ttl,
                            now=d.settings.clock.time(),
                            limit=free,
                        )
                    except StoreError as exc:
                        log.warning("worker_claim_failed", error=str(exc))
                for lease in leases:
                    self.claimed += 1
                    self._running.add(lease.context_id)
                    tg.start_soon(self._one, lease, log)
                if leases and len(leases) == free:
                    continue  # every slot taken: more may wait; claim again when one frees
                with anyio.move_on_after(self.poll):
                    await self._wake.wait()
                self._wake = anyio.Event()
                if self._stopping.is_set():
                    self._wake.set()
            for cid in list(self._running):
                d.request_hand_back(cid)
            with anyio.move_on_after(self.grace):
                while self._running:
                    await self._wake.wait()
                    self._wake = anyio.Event()
            if self._running:
                log.warning("worker_interrupted", contexts=sorted(self._running))
            tg.cancel_scope.cancel()
        log.info("worker_stopped", finished=self.finished, failed=self.failed)

    async def _listen(self, log: Any) -> None:
        """Wake the claim loop whenever the store's doorbell rings."""
        while not self._stopping.is_set():
            try:
                if await self._doorbell(self.poll):
                    self._wake.set()
            except StoreError as exc:
                log.warning("worker_doorbell_failed", error=str(exc))
                await anyio.sleep(self.poll)

    async def _one(self, lease: Lease, log: Any) -> None:
        """Resume one claimed context under its lease."""
        cid = lease.context_id
        engine = self.engine
        d = engine._d
        try:
            if self._stopping.is_set():
                await d.settings.store.release_lease(lease)  # claimed as the worker stopped
                return
            turn: Turn = await engine._subcontexts.surface(
                await d.run(cid, functools.partial(_calls.start_resume, d), lease=lease),
            )
            self.finished += 1
            log.debug("worker_turn", context_id=cid, state=str(turn.state), token=lease.token)
        except TurnFSMError as exc:
            self.failed += 1
            log.info("worker_turn_failed", context_id=cid, token=lease.token, error=str(exc))
        finally:
            self._running.discard(cid)
            self._wake.set()
