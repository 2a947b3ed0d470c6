"""Server-sent events: a context's engine events, and a tenant's (``docs/server.md``).

Each engine event goes out with its kind as the SSE ``event:`` and its ``seq``
as ``id:``; its data is the event as JSON (``turnfsm.events.EVENT_ADAPTER``)
plus the names thin frontends read: ``new_state`` on ``StateChanged``,
``sequence`` on ``ContentDelta`` (the frames: ``_sse.py``). ``Heartbeat``
goes out when nothing else did for ``ServerConfig.heartbeat`` seconds.

A stream reads its context's :class:`~turnfsm.server._channels.Channel` on
this server (``_channels.py``), which puts in one order (by seq, each once)
the events of this process's engine and those of other processes. The engine
never waits for a stream: a stream that falls behind by
:data:`~turnfsm.server._channels.STREAM_BUFFER` gets a ``Resync`` for what it
lost. :func:`context_events` and :func:`tenant_events` are the streams; the
API's routes and the web view's pages both answer with them.
"""

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any

import anyio
import anyio.lowlevel
from fastapi import APIRouter, Header
from sse_starlette import EventSourceResponse

from .._numbers import whole_number
from ..errors import TurnFSMError
from ..events import EVENT_ADAPTER
from ..model import ChatContext
from ._channels import BATCH, Channel, Gap, Item, Listener, first_seq, last_seq
from ._deps import HubOf, Owned, Tenant
from ._hub import Hub
from ._sse import event_frame, json_frame

__all__ = ["context_events", "router", "tenant_events"]

STOP_CHECK = 0.25
"""Seconds a waiting stream may take to notice that the server stops."""
SHUTDOWN_GRACE = 2.0
"""Seconds a stream has, once the server stops, to send its last event."""

router = APIRouter(tags=["events"])


@router.get("/api/contexts/{context_id}/events")
async def events(
    hub: HubOf,
    context_id: Owned,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """The context's events (``text/event-stream``); ``Last-Event-ID`` resumes."""
    return context_events(hub, context_id, last_event_id)


@router.get("/api/events")
async def all_events(hub: HubOf, who: Tenant) -> EventSourceResponse:
    """The events of every context of the tenant (each names its ``context_id``)."""
    return tenant_events(hub, who)


def context_events(hub: Hub, context_id: str, last_event_id: str | None) -> EventSourceResponse:
    """The stream of a context the caller owns (checked by the caller), from
    after ``last_event_id`` (a ``Last-Event-ID``) when given."""
    stop = anyio.Event()
    return EventSourceResponse(
        _context_stream(hub, context_id, _last_id(last_event_id), stop),
        shutdown_event=stop,
        shutdown_grace_period=SHUTDOWN_GRACE,
    )


def tenant_events(hub: Hub, who: str) -> EventSourceResponse:
    """The stream of every context of tenant ``who``."""
    stop = anyio.Event()
    return EventSourceResponse(
        _tenant_stream(hub, who, stop), shutdown_event=stop, shutdown_grace_period=SHUTDOWN_GRACE
    )


async def _load(hub: Hub, context_id: str) -> ChatContext | None:
    try:
        return await hub.engine.store.load(context_id)
    except TurnFSMError:
        return None


async def _resync(
    hub: Hub, gap: Gap, ident: str | None = None, loaded: list[ChatContext | None] | None = None
) -> bytes:
    """Events ``first`` to ``last`` cannot be sent again: pull the state and the
    messages (``GET .../state``, ``.../messages``), which hold everything durable.

    ``loaded``: the context as a replay loaded it once for all its Resyncs
    (one a turn: its deltas), filled on the first; else it is loaded here."""
    if loaded is None:
        ctx = await _load(hub, gap.context_id)
    else:
        if not loaded:
            loaded.append(await _load(hub, gap.context_id))
        ctx = loaded[0]
    data = {
        "kind": "Resync",
        "context_id": gap.context_id,
        "first_seq": gap.first,
        "last_seq": gap.last,
        "state": ctx.current_state if ctx is not None else None,
        "version": ctx.version if ctx is not None else None,
    }
    return json_frame(data, "Resync", str(gap.last) if ident is None else ident)


async def _frame(hub: Hub, item: Item, ident: str | None = None) -> bytes:
    """An item as the bytes a stream writes: an event's frame, or a gap's ``Resync``."""
    if isinstance(item, Gap):
        return await _resync(hub, item, ident)
    return event_frame(item, ident)


def _now_iso() -> str:
    """Now, in UTC, as ISO 8601 (``2026-11-27T09:45:00.123Z``): a
    ``Heartbeat``'s ``timestamp``, as the design's event list has it."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _control(kind: str, **data: Any) -> bytes:
    return json_frame({"kind": kind, **data}, kind)


MAX_SEQ = 2**63 - 1
"""The largest ``Last-Event-ID`` a stream takes (a seq is a 64-bit integer in the stores)."""


def _last_id(value: str | None) -> int | None:
    """A ``Last-Event-ID``: none (or empty) is ``None``; anything but a whole
    number is ``422`` naming the header."""
    if value is None or not value.strip():
        return None
    return whole_number(value.strip(), "header.last-event-id", 0, MAX_SEQ)


async def _newest(
    hub: Hub, ch: Channel, after: int, loaded: list[ChatContext | None]
) -> int | None:
    """The context's last seq when a stream that saw ``after`` is not served by
    the ring (None: it is); read from the store then (the context so loaded
    put in ``loaded``, for the replay's Resyncs)."""
    ring = ch.ring
    if ring and first_seq(ring[0]) <= after + 1 and after <= last_seq(ring[-1]):
        return None
    ctx = await hub.engine.store.load(ch.context_id)
    loaded.append(ctx)
    return max(ctx.event_seq, last_seq(ring[-1]) if ring else 0)


async def _history(hub: Hub, ch: Channel, after: int, newest: int | None) -> AsyncIterator[Item]:
    """What a stream that saw ``after`` missed, before the live items
    (``newest``: what :func:`_newest` said)."""
    if newest is None:
        for item in list(ch.ring):  # every item it missed, as sent
            if last_seq(item) > after:
                yield item
        return
    # Older than the ring (a restart, another process, a long absence):
    # the kept durable events, and a Gap for each stretch the log lacks
    # (deltas, or the events of a crash's last moments).
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


async def _context_stream(
    hub: Hub, cid: str, after: int | None, stop: anyio.Event
) -> AsyncIterator[bytes]:
    ch = hub.hold(cid)
    listener = Listener()
    ch.listeners.add(listener)
    sent = after
    # While a reconnect replays what it missed: the context loaded once for
    # every Resync of the replay (each answer's deltas are one), not once a
    # Resync, which made a replay cost the square of the context's length.
    replay: list[ChatContext | None] | None = []

    async def unsent(items: list[Item]) -> bytes:
        """The frames of the items after ``sent`` (a gap cut to what is not sent)."""
        nonlocal sent
        frames: list[bytes] = []
        for item in items:
            if not isinstance(item, Gap):  # an event: the usual case, framed here
                if sent is None or item.seq > sent:
                    frames.append(event_frame(item))
                    sent = item.seq
                continue
            if sent is not None and item.last <= sent:
                continue  # sent already (from the ring or the log)
            if sent is not None and item.first <= sent:
                item = Gap(item.context_id, sent + 1, item.last)
            frames.append(await _resync(hub, item, loaded=replay))
            sent = item.last
        return b"".join(frames)

    try:
        newest = None if after is None or replay is None else await _newest(hub, ch, after, replay)
        if after is not None and newest is not None and after > newest:
            # The client's id is ahead of the context (a store restored from
            # a backup, another server's id): nothing it holds can be trusted.
            # One Resync for everything up to the context's last seq, whose
            # id the client keeps; the stream goes on from there.
            yield await _resync(hub, Gap(cid, min(1, newest), newest), loaded=replay)
            sent = after = newest
        if after is not None:  # what it missed, BATCH items a write
            pending: list[Item] = []
            async for item in _history(hub, ch, after, newest):
                pending.append(item)
                if len(pending) == BATCH:
                    chunk = await unsent(pending)
                    pending = []
                    if chunk:
                        yield chunk
            chunk = await unsent(pending)
            if chunk:
                yield chunk
        replay = None  # live gaps (a stream that fell behind) read the state anew
        async for batch in _batches(listener, hub, stop):
            if batch is None:
                yield _control("Heartbeat", context_id=cid, timestamp=_now_iso())
                continue
            chunk = await unsent(batch)
            if chunk:
                yield chunk
        yield _control("StreamClosed", context_id=cid)
    finally:
        ch.listeners.discard(listener)
        hub.release(ch)


async def _tenant_stream(hub: Hub, who: str, stop: anyio.Event) -> AsyncIterator[bytes]:
    listener = Listener()
    hub.listeners.setdefault(who, set()).add(listener)
    try:
        async for batch in _batches(listener, hub, stop):
            if batch is None:
                yield _control("Heartbeat", timestamp=_now_iso())
                continue
            # seqs are per context: the id names both
            yield b"".join(
                [await _frame(hub, item, f"{item.context_id}/{last_seq(item)}") for item in batch]
            )
        yield _control("StreamClosed")
    finally:
        listeners = hub.listeners.get(who)
        if listeners is not None:
            listeners.discard(listener)
            if not listeners:
                del hub.listeners[who]


async def _batches(
    listener: Listener, hub: Hub, stop: anyio.Event
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
