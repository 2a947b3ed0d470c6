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

if TYPE_CHECKING:
    from ._app import Hub

__all__ = ["add_event_routes", "sse_of"]


def sse_of(ev: Event) -> ServerSentEvent:
    data: dict[str, Any] = EVENT_ADAPTER.dump_python(ev, mode="json")
    if ev.kind == "StateChanged":
        data["new_state"] = data["to_state"]
    elif ev.kind == "ContentDelta":
        data["sequence"] = data["index"]
    return ServerSentEvent(json.dumps(data), event=ev.kind, id=str(ev.seq))


def _control(kind: str, **data: Any) -> ServerSentEvent:
    return ServerSentEvent(json.dumps({"kind": kind, **data}), event=kind)


def _last_id(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None
    return int(value.strip())


def add_event_routes(
    app: FastAPI, hub: "Hub", tenant: Callable[..., Any], owned: Callable[..., Any]
) -> None:
    async def context_stream(cid: str, after: int | None) -> AsyncIterator[ServerSentEvent]:
        engine = hub.engine
        async with engine.subscribe(cid) as sub:
            if after is not None:
                ctx = await engine.store.load(cid)
                if ctx.event_seq > after:
                    # Events after `after` were sent while this client was away:
                    # one event says what it missed; the state and messages are
                    # in the store (GET .../state, .../messages).
                    yield ServerSentEvent(
                        json.dumps(
                            {
                                "kind": "Resync",
                                "context_id": cid,
                                "after": after,
                                "seq": ctx.event_seq,
                                "state": ctx.current_state,
                                "version": ctx.version,
                            }
                        ),
                        event="Resync",
                        id=str(ctx.event_seq),
                    )
                    after = ctx.event_seq
            async for item in _with_heartbeats(sub, hub):
                if item is None:
                    yield _control("Heartbeat", context_id=cid, timestamp=time.time())
                    continue
                if after is not None and item.seq <= after:
                    continue
                yield sse_of(item)
        yield _control("StreamClosed", context_id=cid)

    @app.get("/api/contexts/{context_id}/events", tags=["events"])
    async def events(
        context_id: Annotated[str, Depends(owned)],
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> EventSourceResponse:
        return EventSourceResponse(context_stream(context_id, _last_id(last_event_id)))


async def _with_heartbeats(sub: AsyncIterator[Event], hub: "Hub") -> AsyncIterator[Event | None]:
    """The subscription's events, ``None`` for a heartbeat; ends when the server stops."""
    it = sub.__aiter__()
    while not hub.closing.is_set():
        with anyio.move_on_after(hub.config.heartbeat) as scope:
            try:
                ev = await it.__anext__()
            except StopAsyncIteration:
                return
        if scope.cancelled_caught:
            yield None
        else:
            yield ev
