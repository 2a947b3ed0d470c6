"""Server-sent events framing: the one place a frame is written.

Every stream of the server goes through :func:`sse_frame` (or, for an engine
event with its seq as ``id:``, :func:`event_frame`, which writes the same
frame in one step): the engine's
events and the control events of ``/api/.../events`` (``_events.py``), the
records of ``POST /chat`` (``_sessions.py``) and the chunks of
``/v1/chat/completions`` (``_openai_compat.py``). A frame is what
sse-starlette's ``ServerSentEvent`` writes (``id:``, ``event:``, one
``data:`` line, ``\\r\\n`` line ends); its data is one line of JSON (JSON
escapes every line break inside a string).
"""

import functools
import json
from typing import Any

from sse_starlette import EventSourceResponse
from starlette.types import Message, Send

from ..events import Event, event_bytes

__all__ = ["EventStream", "event_frame", "event_json", "json_frame", "sse_frame"]


class EventStream(EventSourceResponse):
    """sse-starlette's response, whose writes take no deadline when it has
    none (``send_timeout`` None, as every stream of this server): its own
    puts each write under a cancel scope of no deadline, one on every burst
    of every stream. Everything else is sse-starlette's."""

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        if self.send_timeout is not None:
            await super()._send_with_timeout(send, message)
            return
        try:
            await send(message)
        except BaseException:
            self._send_interrupted = True  # as sse-starlette marks an interrupted write
            raise


def sse_frame(data: bytes, event: str | None = None, ident: str | None = None) -> bytes:
    """One frame: ``id: ident`` and ``event: event`` when given, then ``data``
    (one line, no line break in it)."""
    if event is None:
        if ident is None:
            return b"data: %s\r\n\r\n" % data
        return b"id: %s\r\ndata: %s\r\n\r\n" % (ident.encode(), data)
    if ident is None:
        return b"event: %s\r\ndata: %s\r\n\r\n" % (event.encode(), data)
    return b"id: %s\r\nevent: %s\r\ndata: %s\r\n\r\n" % (ident.encode(), event.encode(), data)


def json_frame(value: Any, event: str | None = None, ident: str | None = None) -> bytes:
    """``value`` as JSON in one frame (``json.dumps``: ASCII, one line)."""
    return sse_frame(json.dumps(value).encode(), event, ident)


def event_json(ev: Event) -> bytes:
    """The event as the JSON a stream sends (with the names thin frontends read:
    ``new_state`` on ``StateChanged``, ``sequence`` on ``ContentDelta``)."""
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


def event_frame(ev: Event, ident: str | None = None) -> bytes:
    """An engine event as one frame: its kind as ``event:``, its JSON
    (:func:`event_json`) as data and ``ident`` as ``id:`` (default: its seq).
    The frame :func:`sse_frame` writes, in one step: every event of every
    stream is framed here."""
    if ident is None:
        return b"id: %d\r\n%sdata: %s\r\n\r\n" % (ev.seq, _event_line(ev.kind), event_json(ev))
    return sse_frame(event_json(ev), ev.kind, ident)


@functools.lru_cache(maxsize=64)
def _event_line(kind: str) -> bytes:
    """``event: kind`` and its line end (an event kind: a few dozen, each made once)."""
    return b"event: %s\r\n" % kind.encode()
