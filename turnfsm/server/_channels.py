"""A context's events on this server, in order, each once; and a stream's queue.

A :class:`Channel` puts the events of this process's engine and those of
other processes (the event log and its doorbell, ``turnfsm.relay``) in one
order, by seq, each once, for the streams on it; each stream reads a
:class:`Listener`, bounded: the engine never waits for a stream, and one that
falls behind by :data:`STREAM_BUFFER` gets a :class:`Gap` (sent as a
``Resync``) for what it lost. The hub (``_hub.py``) keeps the channels; the
streams (``_events.py``) read them.
"""

import asyncio
from collections import deque
from dataclasses import dataclass

import anyio
import anyio.lowlevel
import structlog

from .. import events as event_types  # EVENT_ADAPTER is built on first use
from ..events import Event
from ._flags import running_loop, wake
from ._tenants import TenantTable

__all__ = [
    "BATCH",
    "RECENT_EVENTS",
    "STREAM_BUFFER",
    "Channel",
    "Gap",
    "Item",
    "Listener",
    "first_seq",
    "last_seq",
]

log = structlog.get_logger("turnfsm.server")

STREAM_BUFFER = 1024
"""Events a stream may fall behind by; beyond, they are dropped for it (a Resync)."""
RECENT_EVENTS = 4096
"""Events kept per channel for streams that reconnect (``Last-Event-ID``)."""
BATCH = 256
"""Events a stream writes at most in one piece (every event queued when it
writes, up to this: one write per burst, not one per event)."""


@dataclass(frozen=True, slots=True)
class Gap:
    """Events ``first`` to ``last`` of a context that cannot be sent (deltas
    another process's notes lost, events dropped for a slow reader): a stream
    sends a ``Resync`` for them."""

    context_id: str
    first: int
    last: int


Item = Event | Gap


def first_seq(item: Item) -> int:
    return item.first if isinstance(item, Gap) else item.seq


def last_seq(item: Item) -> int:
    return item.last if isinstance(item, Gap) else item.seq


class Listener:
    """One stream's queue of items, bounded: a stream that falls behind by
    ``cap`` items loses the next ones until it caught up, and gets one
    :class:`Gap` for them (per context), never slowing anyone."""

    def __init__(self, cap: int = STREAM_BUFFER) -> None:
        self.cap = cap
        self.items: deque[Item] = deque()
        self.gaps: dict[str, Gap] = {}
        self.closed = False
        self._waiter: asyncio.Future[None] | anyio.Event | None = None
        """What :meth:`wait` waits on (a future under asyncio, made per wait:
        neither a cancel scope nor an ``anyio.Event``, each a look-up of the
        running library and more, on a wait made every turn)."""
        self._woken = True
        """Whether the current wait was woken (read at every item, without a call)."""

    def put(self, item: Item) -> None:
        if self.closed:
            return
        if self.gaps or len(self.items) >= self.cap:
            cid = item.context_id
            gap = self.gaps.get(cid)
            self.gaps[cid] = Gap(cid, gap.first if gap else first_seq(item), last_seq(item))
        else:
            self.items.append(item)
        if not self._woken:
            self._woken = True
            if self._waiter is not None:
                wake(self._waiter)

    def close(self) -> None:
        self.closed = True
        self._woken = True
        if self._waiter is not None:
            wake(self._waiter)

    def nudge(self) -> None:
        """Wake the current :meth:`wait` with nothing queued: its reader
        looks at its stop signals (the server stops)."""
        if self._waiter is not None:
            wake(self._waiter)

    def ready(self, limit: int = BATCH) -> list[Item]:
        """Up to ``limit`` queued items, without waiting (the gaps after the
        items: a gap is for items that came after those queued)."""
        items = self.items
        if len(items) <= limit:
            out = list(items)
            items.clear()
        else:
            out = [items.popleft() for _ in range(limit)]
        while self.gaps and len(out) < limit and not items:
            out.append(self.gaps.pop(next(iter(self.gaps))))
        return out

    async def wait(self, within: float) -> None:
        """Until an item is queued or the listener is closed, or ``within``
        seconds passed (a cut wait loses nothing: items stay queued).

        Woken by the first events of a burst, it gives the loop one more
        turn: the rest of the burst comes in that turn (the engine goes on
        after it let the 202 out), so the burst goes out in one write. (Not
        shielded: a cancel there loses nothing either.)"""
        if self.items or self.gaps or self.closed:
            return
        self._woken = False
        loop = running_loop()
        if loop is None:  # another async library (trio): anyio's event under a deadline
            event = self._waiter = anyio.Event()
            with anyio.move_on_after(within):
                await event.wait()
                await anyio.lowlevel.checkpoint()
            return
        fut: asyncio.Future[None] = loop.create_future()
        self._waiter = fut
        timer = loop.call_later(within, wake, fut)
        try:
            await fut
        finally:
            timer.cancel()
            self._waiter = None
        if self._woken:
            await asyncio.sleep(0)


class Channel:
    """One context's events on this server, in seq order, each once.

    Items come from this process's engine and from the event log's notes
    (another process's events): an event, or a seq (a doorbell: that event is
    in the log). ``next`` is the seq it expects (None: whatever comes first).
    An item after a gap (a doorbell, or an event after some were lost) makes
    the channel read the log up to it first; what the log does not hold (the
    deltas of another process, a lost note) goes out as a :class:`Gap`.
    Items that come while the log is read wait in ``backlog``.
    """

    def __init__(self, context_id: str, tenant_streams: dict[str, set[Listener]]) -> None:
        self.context_id = context_id
        self.tenant: str | None = None
        self.tenant_streams = tenant_streams
        """Per tenant, the tenant-wide streams (the hub's)."""
        self.next: int | None = None
        self.ring: deque[Item] = deque(maxlen=RECENT_EVENTS)
        """The last items it sent (for ``Last-Event-ID``)."""
        self.listeners: set[Listener] = set()
        self.users = 0
        self.backlog: deque[Event | int] = deque()
        self.filling = False
        self.closed = False

    def take(self, item: Event | int) -> bool:
        """Send ``item`` if it is next; True when the log must be read first
        (the caller then runs :meth:`fill`)."""
        if self.filling:
            if len(self.backlog) >= RECENT_EVENTS:
                # the log is slow to answer: the oldest waiting item goes (a
                # durable one is read from the log later, a delta is a Resync)
                self.backlog.popleft()
            self.backlog.append(item)
            return False
        if self._quick(item):
            return False
        self.filling = True
        self.backlog.appendleft(item)
        return True

    def in_line(self, seq: int) -> bool:
        """Whether the event ``seq`` goes out at once: the channel reads no log
        and it is the next one (or the first) its streams are owed."""
        return not self.filling and (self.next is None or seq == self.next)

    def _quick(self, item: Event | int) -> bool:
        """Handled without the log: sent, or already sent."""
        seq = item if isinstance(item, int) else item.seq
        if self.next is not None and seq < self.next:
            return True
        if isinstance(item, int):
            return False
        if self.in_line(seq):
            self.send(item)
            return True
        return False

    async def fill(self, table: TenantTable) -> None:
        """Read the log up to each backlog item that follows a gap, send what it
        holds (a Gap for the rest), then the item; until the backlog is empty."""
        try:
            while self.backlog and not self.closed:
                item = self.backlog.popleft()
                if self._quick(item):
                    continue
                seq = item if isinstance(item, int) else item.seq
                start = self.next if self.next is not None else seq
                upto = seq if isinstance(item, int) else seq - 1
                try:
                    rows = await table.events_after(self.context_id, start - 1, upto)
                except Exception as exc:  # the log is unreachable: what it held is a Resync
                    log.warning("event_log_read_failed", context_id=self.context_id, error=str(exc))
                    rows = []
                expect = start
                for got, _kind, data in rows:
                    if got < expect:
                        continue
                    if got > expect:
                        self.send(Gap(self.context_id, expect, got - 1))
                    try:
                        self.send(event_types.EVENT_ADAPTER.validate_json(data))
                    except ValueError:
                        self.send(Gap(self.context_id, got, got))
                    expect = got + 1
                if isinstance(item, int):
                    if seq >= expect:  # rung, but not in the log (lost to a slow relay)
                        self.send(Gap(self.context_id, expect, seq))
                else:
                    if seq > expect:
                        self.send(Gap(self.context_id, expect, seq - 1))
                    self.send(item)
        finally:
            self.filling = False

    def send(self, item: Item) -> None:
        """To the ring, the streams on the context and its tenant's streams."""
        self.next = (item.last if isinstance(item, Gap) else item.seq) + 1
        self._out(item)

    def send_next(self, ev: Event) -> bool:
        """:meth:`send` the event ``ev`` when it goes out at once
        (:meth:`in_line`): True; else False, and nothing was done. What every
        event of this process's engine takes, in one call."""
        seq = ev.seq
        if self.filling or (self.next is not None and seq != self.next):
            return False
        self.next = seq + 1
        self._out(ev)
        return True

    def _out(self, item: Item) -> None:
        self.ring.append(item)
        # a put never changes these sets (a wake-up is scheduled, not run): no copy
        for listener in self.listeners:
            listener.put(item)
        if self.tenant is not None and self.tenant_streams:
            for listener in self.tenant_streams.get(self.tenant, ()):
                listener.put(item)

    def close(self) -> None:
        self.closed = True
        for listener in list(self.listeners):
            listener.close()
