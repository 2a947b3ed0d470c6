"""Event delivery: bounded anyio memory streams, never waited on by the engine."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..events import Event, EventsMissed

__all__ = ["Subscription"]


class Subscription:
    """An async iterator of one context's events.

    Use it as ``async with engine.subscribe(cid) as events: async for ev in events``.
    The buffer is bounded: when it is full the engine drops events for this
    subscriber (never waits) and, once there is room again, delivers an
    :class:`~turnfsm.events.EventsMissed` saying how many from which ``seq``.
    """

    def __init__(self, context_id: str, buffer: int, on_close: Callable[[Subscription], None]):
        self.context_id = context_id
        send, receive = anyio.create_memory_object_stream[Event](buffer)
        self._send: MemoryObjectSendStream[Event] = send
        self._receive: MemoryObjectReceiveStream[Event] = receive
        self._on_close = on_close
        self._missed = 0
        self._first_missed = 0
        self._missed_at = 0.0
        self.closed = False

    def _note(self) -> EventsMissed:
        return EventsMissed(
            context_id=self.context_id,
            seq=self._first_missed + self._missed - 1,
            timestamp=self._missed_at,
            count=self._missed,
            first_seq=self._first_missed,
        )

    def offer(self, event: Event) -> None:
        """Deliver without waiting; count what does not fit."""
        if self._missed:
            try:
                self._send.send_nowait(self._note())
            except anyio.WouldBlock:
                self._missed += 1
                self._missed_at = event.timestamp
                return
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
            self._missed = 0
        try:
            self._send.send_nowait(event)
        except anyio.WouldBlock:
            self._first_missed = event.seq
            self._missed = 1
            self._missed_at = event.timestamp
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    def _take_missed(self) -> EventsMissed | None:
        """The note for what was dropped, once the reader has emptied the buffer."""
        if not self._missed:
            return None
        note = self._note()
        self._missed = 0
        return note

    def end(self) -> None:
        """No more events will come (the engine closed, or the subscriber left)."""
        self._send.close()

    def drain(self) -> list[Event]:
        """Every event already delivered and not yet read, without waiting."""
        out: list[Event] = []
        while True:
            try:
                out.append(self._receive.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                note = self._take_missed()
                if note is not None:
                    out.append(note)
                return out

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        try:
            return self._receive.receive_nowait()
        except anyio.WouldBlock:
            note = self._take_missed()
            if note is not None:
                return note
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            note = self._take_missed()
            if note is not None:
                return note
            raise StopAsyncIteration from None
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            self._on_close(self)
            self._send.close()
            self._receive.close()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
