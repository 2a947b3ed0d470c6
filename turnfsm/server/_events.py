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
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, cast
from urllib.parse import quote, unquote

import anyio
from fastapi import APIRouter, Header
from sse_starlette import EventSourceResponse

from .. import events as event_types  # EVENT_ADAPTER is built on first use
from .._numbers import whole_number
from ..errors import InvalidInput, TurnFSMError
from ..model import ChatContext
from ..states import RESTING, State
from ._channels import BATCH, Channel, Gap, Item, Listener, first_seq, last_seq
from ._deps import HubOf, Owned, Tenant
from ._hub import Hub
from ._sse import EventStream, event_frame, json_frame

__all__ = ["context_events", "router", "tenant_events"]

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
async def all_events(
    hub: HubOf,
    who: Tenant,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """The events of every context of the tenant (each names its ``context_id``)."""
    # Last-Event-ID: the positions an id: of this stream gave (docs/server.md)
    return tenant_events(hub, who, last_event_id)


def context_events(hub: Hub, context_id: str, last_event_id: str | None) -> EventSourceResponse:
    """The stream of a context the caller owns (checked by the caller), from
    after ``last_event_id`` (a ``Last-Event-ID``) when given."""
    listener = Listener()
    stop = _Stop(listener)
    return EventStream(
        _context_stream(hub, context_id, _last_id(last_event_id), stop, listener),
        shutdown_event=cast(anyio.Event, stop),
        shutdown_grace_period=SHUTDOWN_GRACE,
    )


def tenant_events(hub: Hub, who: str, last_event_id: str | None = None) -> EventSourceResponse:
    """The stream of every context of tenant ``who``, from after the positions
    of ``last_event_id`` (a ``Last-Event-ID`` this stream gave) when given."""
    listener = Listener()
    stop = _Stop(listener)
    return EventStream(
        _tenant_stream(hub, who, _positions(last_event_id), stop, listener),
        shutdown_event=cast(anyio.Event, stop),
        shutdown_grace_period=SHUTDOWN_GRACE,
    )


class _Stop:
    """A stream's ``shutdown_event``: sse-starlette sets it once it saw the
    server shut down, and it wakes the stream's wait then, so that a waiting
    stream does not look at it on a timer. (sse-starlette only sets it, and
    the stream reads it: ``anyio.Event``'s ``set`` and ``is_set``.)"""

    __slots__ = ("_listener", "_set")

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._set = False

    def set(self) -> None:
        self._set = True
        self._listener.nudge()

    def is_set(self) -> bool:
        return self._set


async def _load(hub: Hub, context_id: str) -> ChatContext | None:
    """The context without its messages (its state, version and last seq are
    what a stream reads), or None when it cannot be read."""
    try:
        return (await hub.outline(context_id)).context
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


MAX_POSITIONS = 256
"""The contexts a tenant stream's ``id:`` holds the position of (the most
recently advanced; a ``Last-Event-ID`` with more is ``422``)."""
_WHERE = "header.last-event-id"


def _positions(value: str | None) -> dict[str, int] | None:
    """A tenant stream's ``Last-Event-ID``: ``context/seq`` pairs separated by
    commas, each context id percent-encoded; none (or empty) is ``None``. A
    seq that is not a whole number, or a pair without one, is ``422`` naming
    the header, as every number a client gives."""
    if value is None or not value.strip():
        return None
    parts = value.strip().split(",")
    if len(parts) > MAX_POSITIONS:
        raise InvalidInput(_WHERE, f"holds {len(parts)} positions; at most {MAX_POSITIONS}")
    out: dict[str, int] = {}
    for part in parts:
        cid, slash, seq = part.strip().rpartition("/")
        if not slash or not cid:
            raise InvalidInput(
                _WHERE, f"each position is context/seq, as this stream's ids are: not {part[:40]!r}"
            )
        out[unquote(cid)] = whole_number(seq, _WHERE, 0, MAX_SEQ)
    return out


class _Positions:
    """Where a tenant stream is in each context it sent something of (the most
    recently advanced last, at most :data:`MAX_POSITIONS`), and the ``id:``
    that says so."""

    def __init__(self, start: dict[str, int]) -> None:
        self.seqs: dict[str, int] = {}
        self.names: dict[str, str] = {}
        for cid, seq in start.items():
            self.advance(cid, seq)

    def get(self, cid: str) -> int | None:
        return self.seqs.get(cid)

    def advance(self, cid: str, seq: int) -> None:
        seqs = self.seqs
        if seqs.pop(cid, None) is None:
            self.names[cid] = quote(cid, safe="")
            if len(seqs) >= MAX_POSITIONS:
                gone = next(iter(seqs))
                del seqs[gone], self.names[gone]
        seqs[cid] = seq

    def ident(self) -> str:
        names = self.names
        return ",".join(f"{names[c]}/{s}" for c, s in self.seqs.items())


async def _newest(
    hub: Hub, ch: Channel, after: int, loaded: list[ChatContext | None]
) -> int | None:
    """The context's last seq when a stream that saw ``after`` is not served by
    the ring (None: it is); read from the store then (the context so loaded
    put in ``loaded``, for the replay's Resyncs)."""
    ring = ch.ring
    if ring and first_seq(ring[0]) <= after + 1 and after <= last_seq(ring[-1]):
        return None
    ctx = (await hub.outline(ch.context_id)).context
    loaded.append(ctx)
    return max(ctx.event_seq, last_seq(ring[-1]) if ring else 0)


def _ahead(after: int, newest: int | None, loaded: list[ChatContext | None]) -> bool:
    """Whether a stream that saw ``after`` is ahead of the context (``newest``:
    what :func:`_newest` said, with the context it loaded). Only when the
    context rests: while a turn runs, the seqs of its deltas are past the
    last stored one (a delta is never stored, and a turn run by another
    process commits its steps there first), and an id this server or another
    gave for one of them is where the stream goes on from."""
    if newest is None or after <= newest:
        return False
    ctx = loaded[-1] if loaded else None
    return ctx is None or State(ctx.current_state) in RESTING


def _from_here(ch: Channel, sent: int | None) -> None:
    """A stream that has everything up to ``sent`` reads the channel's live
    items: a channel that has sent nothing yet starts after ``sent``, so that
    what comes between ``sent`` and the first item it is given is read from
    the log (or is a Resync), never skipped. (What the replay gives besides
    is sent once: the stream skips what it sent.)"""
    if sent is not None and ch.next is None and not ch.filling:
        ch.next = sent + 1


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
            yield event_types.EVENT_ADAPTER.validate_json(data)
        except ValueError:
            yield Gap(ch.context_id, seq, seq)
        expect = seq + 1
    if newest >= expect:
        yield Gap(ch.context_id, expect, newest)


async def _context_stream(
    hub: Hub,
    cid: str,
    after: int | None,
    stop: anyio.Event | _Stop,
    listener: Listener | None = None,
) -> AsyncIterator[bytes]:
    listener = Listener() if listener is None else listener  # the one ``stop`` wakes
    ch = hub.hold(cid)
    ch.listeners.add(listener)
    _from_here(ch, after)  # before anything can reach the channel
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
        if after is not None and _ahead(after, newest, replay or []):
            # The client's id is ahead of the context (a store restored from
            # a backup, another server's id): nothing it holds can be trusted.
            # One Resync for everything up to the context's last seq, whose
            # id the client keeps; the stream goes on from there.
            assert newest is not None
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


async def _tenant_stream(
    hub: Hub,
    who: str,
    start: dict[str, int] | None,
    stop: anyio.Event | _Stop,
    listener: Listener | None = None,
) -> AsyncIterator[bytes]:
    listener = Listener() if listener is None else listener  # the one ``stop`` wakes
    # listening first: nothing falls between the replay and the live
    hub.listeners.setdefault(who, set()).add(listener)
    at = _Positions({})

    async def unsent(items: list[Item], replay: list[ChatContext | None] | None) -> bytes:
        """The frames of the items after the stream's position in their
        context, each with the positions as its id (seqs are per context)."""
        frames: list[bytes] = []
        for item in items:
            cid = item.context_id
            sent = at.get(cid)
            if isinstance(item, Gap):
                if sent is not None and item.last <= sent:
                    continue
                if sent is not None and item.first <= sent:
                    item = Gap(cid, sent + 1, item.last)
                at.advance(cid, item.last)
                frames.append(await _resync(hub, item, at.ident(), loaded=replay))
                continue
            if sent is not None and item.seq <= sent:
                continue
            at.advance(cid, item.seq)
            frames.append(event_frame(item, at.ident()))
        return b"".join(frames)

    try:
        for cid, after in (start or {}).items():
            async for chunk in _tenant_replay(hub, who, cid, after, at, unsent):
                if chunk:
                    yield chunk
        async for batch in _batches(listener, hub, stop):
            if batch is None:
                yield _control("Heartbeat", timestamp=_now_iso())
                continue
            chunk = await unsent(batch, None)
            if chunk:
                yield chunk
        yield _control("StreamClosed")
    finally:
        listeners = hub.listeners.get(who)
        if listeners is not None:
            listeners.discard(listener)
            if not listeners:
                del hub.listeners[who]


_Unsent = Callable[[list[Item], list[ChatContext | None] | None], Awaitable[bytes]]


async def _tenant_replay(
    hub: Hub, who: str, cid: str, after: int, at: _Positions, unsent: _Unsent
) -> AsyncIterator[bytes]:
    """What a tenant stream resumed at ``after`` in context ``cid`` missed of
    it, as the context's own stream replays it (the channel's ring, else the
    event log with a ``Resync`` per stretch it lacks, and one ``Resync`` when
    ``after`` is ahead of the context). Nothing for a context that is not the
    tenant's or no longer exists: the stream starts it from now."""
    try:
        if await hub.owner(cid) != who:
            return
    except TurnFSMError:
        return
    hub.tap(cid, who)  # its live events reach the tenant's streams, with or without a channel
    ch = hub.hold(cid)
    _from_here(ch, after)  # before anything can reach the channel: see _context_stream
    try:
        replay: list[ChatContext | None] = []
        try:
            newest = await _newest(hub, ch, after, replay)
        except TurnFSMError:  # deleted meanwhile
            return
        if _ahead(after, newest, replay):  # ahead of the context: see _context_stream
            assert newest is not None
            at.advance(cid, newest)
            yield await _resync(hub, Gap(cid, min(1, newest), newest), at.ident(), replay)
            return
        at.advance(cid, after)
        pending: list[Item] = []  # BATCH items a write
        async for item in _history(hub, ch, after, newest):
            pending.append(item)
            if len(pending) == BATCH:
                yield await unsent(pending, replay)
                pending = []
        yield await unsent(pending, replay)
    finally:
        hub.release(ch)


async def _batches(
    listener: Listener, hub: Hub, stop: anyio.Event | _Stop
) -> AsyncIterator[list[Item] | None]:
    """The listener's items, as many at a time as are queued (up to
    :data:`BATCH`), ``None`` for a heartbeat; ends when the server stops
    (``hub.closing``) or sse-starlette saw the shutdown (``stop``), and when
    the listener is closed.

    Queued items are taken without waiting; an empty queue is waited on until
    the next heartbeat is due. Each stop wakes the wait when it is set (the
    hub wakes every stream when it closes, ``stop`` its own), so a waiting
    stream wakes for nothing else: no timer looks at them."""
    beat = hub.config.heartbeat
    last = time.monotonic()
    while not (hub.closing.is_set() or stop.is_set()):
        batch = listener.ready()
        if not batch:
            if listener.closed:
                return
            # until the heartbeat is due; one more turn of the loop for a burst's rest
            await listener.wait(max(0.0, last + beat - time.monotonic()))
            batch = listener.ready()
        now = time.monotonic()
        if batch:
            last = now
            yield batch
        elif now - last >= beat:
            last = now
            yield None
