"""Server-sent events: a context's engine events, and a tenant's (``docs/server.md``).

Each engine event goes out with its kind as the SSE ``event:`` and its ``seq``
as ``id:``; its data is the event as JSON (``turnfsm.events.EVENT_ADAPTER``)
plus the names thin frontends read: ``new_state`` on ``StateChanged``,
``sequence`` on ``ContentDelta``. ``Heartbeat`` goes out when nothing else
did for ``ServerConfig.heartbeat`` seconds.

A stream reads its context's :class:`Channel` on this server, which puts in
one order (by seq, each once) the events of this process's engine and those
of other processes (the event log and its doorbell, ``turnfsm.relay``). The
engine never waits for a stream: a stream that falls behind by
:data:`STREAM_BUFFER` gets a ``Resync`` for what it lost.
"""

import functools
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
import anyio.lowlevel
import structlog
from fastapi import Depends, FastAPI, Header
from sse_starlette import EventSourceResponse, ServerSentEvent

from ..errors import TurnFSMError
from ..events import EVENT_ADAPTER, Event, event_bytes
from ..model import ChatContext

if TYPE_CHECKING:
    from ._app import Hub

__all__ = [
    "RECENT_EVENTS",
    "STREAM_BUFFER",
    "Channel",
    "Gap",
    "Listener",
    "add_event_routes",
    "event_json",
    "sse_data",
    "sse_frame",
]

log = structlog.get_logger("turnfsm.server")

STOP_CHECK = 0.25
"""Seconds a waiting stream may take to notice that the server stops."""
SHUTDOWN_GRACE = 2.0
"""Seconds a stream has, once the server stops, to send its last event."""
STREAM_BUFFER = 1024
"""Events a stream may fall behind by; beyond, they are dropped for it (a Resync)."""
RECENT_EVENTS = 4096
"""Events kept per channel for streams that reconnect (``Last-Event-ID``)."""
BATCH = 256
"""Events a stream writes at most in one piece (every event queued when it
writes, up to this: one write per burst, not one per event)."""

T = TypeVar("T")


def event_json(ev: Event) -> bytes:
    """The event as the JSON a stream sends (with the names thin frontends read:
    ``new_state`` on ``StateChanged``, ``sequence`` on ``ContentDelta``). One
    line: JSON escapes every line break inside a string."""
    data = event_bytes(ev)
    if ev.kind == "StateChanged":
        return b"%s,%s}" % (data[:-1], _json_member("new_state", ev.to_state))
    if ev.kind == "ContentDelta":
        return b'%s,"sequence":%d}' % (data[:-1], ev.index)
    return data


@functools.lru_cache(maxsize=256)
def _json_member(name: str, value: str) -> bytes:
    """``"name":"value"`` (a state's name: a handful of values, each made once)."""
    return b'"%s":%s' % (name.encode(), json.dumps(value).encode())


def sse_data(ev: Event) -> str:
    """:func:`event_json` as text."""
    return event_json(ev).decode()


def sse_frame(ev: Event, ident: str | None = None) -> bytes:
    """The event as one SSE frame (``id:``, ``event:``, ``data:``), as
    sse-starlette's ``ServerSentEvent`` writes it; ``ident`` defaults to its seq."""
    return b"id: %s\r\nevent: %s\r\ndata: %s\r\n\r\n" % (
        (str(ev.seq) if ident is None else ident).encode(),
        ev.kind.encode(),
        event_json(ev),
    )


@dataclass(frozen=True, slots=True)
class Gap:
    """Events ``first`` to ``last`` of a context that cannot be sent (deltas
    another process's notes lost, events dropped for a slow reader): a stream
    sends a ``Resync`` for them."""

    context_id: str
    first: int
    last: int


Item = Event | Gap


def _first(item: Item) -> int:
    return item.first if isinstance(item, Gap) else item.seq


def _last(item: Item) -> int:
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
        self._wake = anyio.Event()

    def put(self, item: Item) -> None:
        if self.closed:
            return
        if self.gaps or len(self.items) >= self.cap:
            cid = item.context_id
            gap = self.gaps.get(cid)
            self.gaps[cid] = Gap(cid, gap.first if gap else _first(item), _last(item))
        else:
            self.items.append(item)
        wake = self._wake
        if not wake.is_set():
            wake.set()

    def close(self) -> None:
        self.closed = True
        self._wake.set()

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

    async def wait(self) -> None:
        """Until an item is queued or the listener is closed."""
        if self.items or self.gaps or self.closed:
            return
        self._wake = anyio.Event()
        await self._wake.wait()


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

    def _quick(self, item: Event | int) -> bool:
        """Handled without the log: sent, or already sent."""
        seq = item if isinstance(item, int) else item.seq
        if self.next is not None and seq < self.next:
            return True
        if isinstance(item, int):
            return False
        if self.next is None or seq == self.next:
            self.send(item)
            return True
        return False

    async def fill(self, hub: "Hub") -> None:
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
                    rows = await hub.tenants.events_after(self.context_id, start - 1, upto)
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
                        self.send(EVENT_ADAPTER.validate_json(data))
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
        self.ring.append(item)
        if self.listeners:
            for listener in list(self.listeners):
                listener.put(item)
        if self.tenant is not None and self.tenant_streams:
            for listener in list(self.tenant_streams.get(self.tenant, ())):
                listener.put(item)

    def close(self) -> None:
        self.closed = True
        for listener in list(self.listeners):
            listener.close()


async def _resync(hub: "Hub", gap: Gap) -> ServerSentEvent:
    """Events ``first`` to ``last`` cannot be sent again: pull the state and the
    messages (``GET .../state``, ``.../messages``), which hold everything durable."""
    try:
        ctx: ChatContext | None = await hub.engine.store.load(gap.context_id)
    except TurnFSMError:
        ctx = None
    data = {
        "kind": "Resync",
        "context_id": gap.context_id,
        "first_seq": gap.first,
        "last_seq": gap.last,
        "state": ctx.current_state if ctx is not None else None,
        "version": ctx.version if ctx is not None else None,
    }
    return ServerSentEvent(json.dumps(data), event="Resync", id=str(gap.last))


async def _frame(hub: "Hub", item: Item, ident: str | None = None) -> bytes:
    """An item as the bytes a stream writes: an event's frame, or a gap's ``Resync``."""
    if isinstance(item, Gap):
        sse = await _resync(hub, item)
        if ident is not None:
            sse.id = ident
        return sse.encode()
    return sse_frame(item, ident)


def _control(kind: str, **data: Any) -> ServerSentEvent:
    return ServerSentEvent(json.dumps({"kind": kind, **data}), event=kind)


def _last_id(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None
    return int(value.strip())


def add_event_routes(
    app: FastAPI, hub: "Hub", tenant: Callable[..., Any], owned: Callable[..., Any]
) -> None:
    async def history(ch: Channel, after: int) -> AsyncIterator[Item]:
        """What a stream that saw ``after`` missed, before the live items."""
        ring = list(ch.ring)
        if ring and _first(ring[0]) <= after + 1:
            for item in ring:  # every item it missed, as sent
                if _last(item) > after:
                    yield item
            return
        # Older than the ring (a restart, another process, a long absence):
        # the kept durable events, and a Gap for each stretch the log lacks
        # (deltas, or the events of a crash's last moments).
        ctx = await hub.engine.store.load(ch.context_id)
        newest = max(ctx.event_seq, _last(ring[-1]) if ring else 0)
        if newest <= after:
            return
        expect = after + 1
        for seq, _kind, data in await hub.tenants.events_after(ch.context_id, after, newest):
            if seq > expect:
                yield Gap(ch.context_id, expect, seq - 1)
            try:
                yield EVENT_ADAPTER.validate_json(data)
            except ValueError:
                yield Gap(ch.context_id, seq, seq)
            expect = seq + 1
        if newest >= expect:
            yield Gap(ch.context_id, expect, newest)

    async def context_stream(
        cid: str, after: int | None, stop: anyio.Event
    ) -> AsyncIterator[ServerSentEvent | bytes]:
        ch = hub.hold(cid)
        listener = Listener()
        ch.listeners.add(listener)
        sent = after

        async def unsent(items: list[Item]) -> bytes:
            """The frames of the items after ``sent`` (a gap cut to what is not sent)."""
            nonlocal sent
            frames: list[bytes] = []
            for item in items:
                if not isinstance(item, Gap):  # an event: the usual case, framed here
                    if sent is None or item.seq > sent:
                        frames.append(sse_frame(item))
                        sent = item.seq
                    continue
                if sent is not None and item.last <= sent:
                    continue  # sent already (from the ring or the log)
                if sent is not None and item.first <= sent:
                    item = Gap(item.context_id, sent + 1, item.last)
                frames.append(await _frame(hub, item))
                sent = item.last
            return b"".join(frames)

        try:
            if after is not None:  # what it missed, BATCH items a write
                pending: list[Item] = []
                async for item in history(ch, after):
                    pending.append(item)
                    if len(pending) == BATCH:
                        chunk = await unsent(pending)
                        pending = []
                        if chunk:
                            yield chunk
                chunk = await unsent(pending)
                if chunk:
                    yield chunk
            async for batch in _batches(listener, hub, stop):
                if batch is None:
                    yield _control("Heartbeat", context_id=cid, timestamp=time.time())
                    continue
                chunk = await unsent(batch)
                if chunk:
                    yield chunk
            yield _control("StreamClosed", context_id=cid)
        finally:
            ch.listeners.discard(listener)
            hub.release(ch)

    @app.get("/api/contexts/{context_id}/events", tags=["events"])
    async def events(
        context_id: Annotated[str, Depends(owned)],
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> EventSourceResponse:
        """The context's events (``text/event-stream``); ``Last-Event-ID`` resumes."""
        stop = anyio.Event()
        return EventSourceResponse(
            context_stream(context_id, _last_id(last_event_id), stop),
            shutdown_event=stop,
            shutdown_grace_period=SHUTDOWN_GRACE,
        )

    async def tenant_stream(who: str, stop: anyio.Event) -> AsyncIterator[ServerSentEvent | bytes]:
        listener = Listener()
        hub.listeners.setdefault(who, set()).add(listener)
        try:
            async for batch in _batches(listener, hub, stop):
                if batch is None:
                    yield _control("Heartbeat", timestamp=time.time())
                    continue
                # seqs are per context: the id names both
                yield b"".join(
                    [await _frame(hub, item, f"{item.context_id}/{_last(item)}") for item in batch]
                )
            yield _control("StreamClosed")
        finally:
            listeners = hub.listeners.get(who)
            if listeners is not None:
                listeners.discard(listener)
                if not listeners:
                    del hub.listeners[who]

    @app.get("/api/events", tags=["events"])
    async def all_events(who: Annotated[str, Depends(tenant)]) -> EventSourceResponse:
        """The events of every context of the tenant (each names its ``context_id``)."""
        stop = anyio.Event()
        return EventSourceResponse(
            tenant_stream(who, stop), shutdown_event=stop, shutdown_grace_period=SHUTDOWN_GRACE
        )


async def _batches(
    listener: Listener, hub: "Hub", stop: anyio.Event
) -> AsyncIterator[list[Item] | None]:
    """The listener's items, as many at a time as are queued (up to
    :data:`BATCH`), ``None`` for a heartbeat; ends within :data:`STOP_CHECK`
    seconds when the server stops (``hub.closing``) or sse-starlette saw the
    shutdown (``stop``), and when the listener is closed.

    Queued items are taken without waiting; an empty queue is waited on under
    a deadline, cut every :data:`STOP_CHECK` seconds to look at the stop
    events again (a cut wait loses nothing: items stay queued)."""
    beat = hub.config.heartbeat
    tick = min(beat, STOP_CHECK)
    last = time.monotonic()
    while not (hub.closing.is_set() or stop.is_set()):
        batch = listener.ready()
        if not batch:
            if listener.closed:
                return
            with anyio.move_on_after(tick):
                await listener.wait()
                # Woken by the first events of a burst: the rest of the burst
                # comes in the same turn of the loop (the engine goes on after
                # it let the 202 out), so one more turn and it goes in one write.
                await anyio.lowlevel.cancel_shielded_checkpoint()
            batch = listener.ready()
        now = time.monotonic()
        if batch:
            last = now
            yield batch
        elif now - last >= beat:
            last = now
            yield None
