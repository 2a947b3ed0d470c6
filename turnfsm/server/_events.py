"""Server-sent events: a context's engine events, and a tenant's (``docs/server.md``).

Each engine event goes out with its kind as the SSE ``event:`` and its ``seq``
as ``id:``; its data is the event as JSON (``turnfsm.events.EVENT_ADAPTER``)
plus the names thin frontends read: ``new_state`` on ``StateChanged``,
``sequence`` on ``ContentDelta``. ``Heartbeat`` goes out when nothing else
did for ``ServerConfig.heartbeat`` seconds. The engine never waits for a
stream: events go through the engine's bounded subscription, and a stream
that falls behind gets ``EventsMissed``.
"""

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Annotated, Any

import anyio
from fastapi import Depends, FastAPI, Header
from sse_starlette import EventSourceResponse, ServerSentEvent

from ..events import EVENT_ADAPTER, Event
from ..model import ChatContext

if TYPE_CHECKING:
    from ._app import Hub

__all__ = ["STREAM_BUFFER", "add_event_routes", "sse_data", "sse_of"]

SHUTDOWN_GRACE = 2.0
"""Seconds a stream has, once the server stops, to send its last event."""
STREAM_BUFFER = 1024
"""Events a tenant-wide stream may fall behind by; beyond, they are dropped for it."""


def sse_data(ev: Event) -> str:
    """The event as the JSON a stream sends (with the names thin frontends read)."""
    data: dict[str, Any] = EVENT_ADAPTER.dump_python(ev, mode="json")
    if ev.kind == "StateChanged":
        data["new_state"] = data["to_state"]
    elif ev.kind == "ContentDelta":
        data["sequence"] = data["index"]
    return json.dumps(data)


def sse_of(ev: Event) -> ServerSentEvent:
    return ServerSentEvent(sse_data(ev), event=ev.kind, id=str(ev.seq))


def _resync(ctx: ChatContext, first: int, last: int) -> ServerSentEvent:
    """Events ``first`` to ``last`` cannot be sent again: pull the state and the
    messages (``GET .../state``, ``.../messages``), which hold everything durable."""
    data = {
        "kind": "Resync",
        "context_id": ctx.id,
        "first_seq": first,
        "last_seq": last,
        "state": ctx.current_state,
        "version": ctx.version,
    }
    return ServerSentEvent(json.dumps(data), event="Resync", id=str(last))


def _control(kind: str, **data: Any) -> ServerSentEvent:
    return ServerSentEvent(json.dumps({"kind": kind, **data}), event=kind)


def _last_id(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None
    return int(value.strip())


def add_event_routes(
    app: FastAPI, hub: "Hub", tenant: Callable[..., Any], owned: Callable[..., Any]
) -> None:
    async def context_stream(
        cid: str, after: int | None, stop: anyio.Event
    ) -> AsyncIterator[ServerSentEvent]:
        engine = hub.engine
        async with engine.subscribe(cid) as sub:
            if after is not None:
                hub.catch_up(cid)  # every event sent before `sub` is in the ring now
                ring = list(hub.recent.get(cid, ()))
                ctx = await engine.store.load(cid)
                newest = max(ctx.event_seq, ring[-1].seq if ring else 0)
                if newest > after and ring and ring[0].seq <= after + 1:
                    for ev in ring:  # every event it missed, as sent
                        if ev.seq > after:
                            yield sse_of(ev)
                            after = ev.seq
                elif newest > after:
                    # Older than the ring (or from before a restart): the kept
                    # durable events, and a Resync for each stretch it cannot get
                    # (deltas, or events of a crash's last moments).
                    expect = after + 1
                    for seq, kind, data in await hub.tenants.events_after(cid, after):
                        if seq > expect:
                            yield _resync(ctx, expect, seq - 1)
                        yield ServerSentEvent(data, event=kind, id=str(seq))
                        expect = seq + 1
                    if newest >= expect:
                        yield _resync(ctx, expect, newest)
                    after = max(newest, expect - 1)
            async for item in _with_heartbeats(sub, hub, stop):
                if item is None:
                    yield _control("Heartbeat", context_id=cid, timestamp=time.time())
                elif after is None or item.seq > after:
                    yield sse_of(item)
        yield _control("StreamClosed", context_id=cid)

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

    async def tenant_stream(who: str, stop: anyio.Event) -> AsyncIterator[ServerSentEvent]:
        send, receive = anyio.create_memory_object_stream[Event](STREAM_BUFFER)
        hub.listeners.setdefault(who, set()).add(send)
        try:
            async with receive:
                async for item in _with_heartbeats(receive, hub, stop):
                    if item is None:
                        yield _control("Heartbeat", timestamp=time.time())
                    else:
                        sse = sse_of(item)
                        sse.id = None  # seqs are per context: no Last-Event-ID here
                        yield sse
            yield _control("StreamClosed")
        finally:
            hub.listeners.get(who, set()).discard(send)
            send.close()

    @app.get("/api/events", tags=["events"])
    async def all_events(who: Annotated[str, Depends(tenant)]) -> EventSourceResponse:
        """The events of every context of the tenant (each names its ``context_id``)."""
        stop = anyio.Event()
        return EventSourceResponse(
            tenant_stream(who, stop), shutdown_event=stop, shutdown_grace_period=SHUTDOWN_GRACE
        )


async def _with_heartbeats(
    sub: AsyncIterator[Event], hub: "Hub", stop: anyio.Event
) -> AsyncIterator[Event | None]:
    """The subscription's events, ``None`` for a heartbeat; ends at once when the
    server stops (``hub.closing``) or sse-starlette saw the shutdown (``stop``)."""
    it = sub.__aiter__()
    while not (hub.closing.is_set() or stop.is_set()):
        step = await _next(it, (hub.closing, stop), hub.config.heartbeat)
        if step == "ended":
            return
        if step == "idle":
            yield None
        elif not isinstance(step, str):
            yield step


async def _next(
    it: AsyncIterator[Event], stops: tuple[anyio.Event, ...], idle: float
) -> Event | str:
    """The next event, or ``"idle"`` after ``idle`` seconds, ``"stopped"`` when
    one of ``stops`` is set, ``"ended"`` when the iterator ends."""
    out: list[Event | str] = []

    async def read(scope: anyio.CancelScope) -> None:
        try:
            out.append(await it.__anext__())
        except StopAsyncIteration:
            out.append("ended")
        scope.cancel()

    async def watch(event: anyio.Event, scope: anyio.CancelScope) -> None:
        await event.wait()
        out.append("stopped")
        scope.cancel()

    with anyio.move_on_after(idle):
        async with anyio.create_task_group() as race:
            race.start_soon(read, race.cancel_scope)
            for event in stops:
                race.start_soon(watch, event, race.cancel_scope)
    return out[0] if out else "idle"
