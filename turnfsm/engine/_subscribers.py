"""Event delivery: bounded anyio memory streams, never waited on by the engine."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..events import Event, EventsMissed

__all__ = ["EngineSubscription", "EventTap", "Sink", "Subscription", "yield_to_readers"]


yield_to_readers = anyio.lowlevel.cancel_shielded_checkpoint
"""One turn of the event loop for other tasks (a subscriber's reader), without
being a point where the engine's call can be cancelled."""


class Sink(Protocol):
    """What the engine hands each event to as it goes out: a
    :class:`Subscription` or an :class:`EventTap`."""

    def offer(self, event: Event) -> bool:
        """Take ``event`` without waiting; True asks the engine to give the
        event loop a turn (a reader is falling behind)."""
        ...

    def end(self) -> None:
        """No more events will come."""
        ...


class Subscription:
    """An async iterator of one context's events.

    Use it as ``async with engine.subscribe(cid) as events: async for ev in events``.
    The buffer is bounded: when it is full the engine drops events for this
    subscriber (never waits) and, once there is room again, delivers an
    :class:`~turnfsm.events.EventsMissed` saying how many from which ``seq``.

    The engine gives a subscriber's task a turn to read whenever its buffer
    is half full (:meth:`offer` says so), so a subscriber on the same event
    loop that reads as events come misses nothing, however fast the model
    and the tools answer.
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
        self._half = max(1, buffer // 2)
        self._queued = 0
        """Events put in the stream and not yet read."""
        self.closed = False

    def _note(self) -> EventsMissed:
        return EventsMissed(
            context_id=self.context_id,
            seq=self._first_missed + self._missed - 1,
            timestamp=self._missed_at,
            count=self._missed,
            first_seq=self._first_missed,
        )

    def offer(self, event: Event) -> bool:
        """Deliver without waiting; count what does not fit. True when the
        buffer is half full or more: the reader should be given a turn."""
        if self._missed:
            try:
                self._send.send_nowait(self._note())
            except anyio.WouldBlock:
                self._missed += 1
                self._missed_at = event.timestamp
                return True
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return False
            self._missed = 0
            self._queued += 1
        try:
            self._send.send_nowait(event)
        except anyio.WouldBlock:
            self._first_missed = event.seq
            self._missed = 1
            self._missed_at = event.timestamp
            return True
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        self._queued += 1
        return self._queued >= self._half

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
                self._queued -= 1
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                note = self._take_missed()
                if note is not None:
                    out.append(note)
                return out

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        try:
            event = self._receive.receive_nowait()
        except anyio.WouldBlock:
            note = self._take_missed()
            if note is not None:
                return note
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            note = self._take_missed()
            if note is not None:
                return note
            raise StopAsyncIteration from None
        else:
            self._queued -= 1
            return event
        try:
            event = await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None
        self._queued -= 1
        return event

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


class EngineSubscription(Subscription):
    """An async iterator of the events of every context the engine runs
    (:meth:`Engine.subscribe_all`), in the order they go out.

    Bounded like :class:`Subscription`. When the buffer is full, events are
    dropped for this subscriber, counted per context; once the reader has
    emptied the buffer, each context that lost some gets one
    :class:`~turnfsm.events.EventsMissed` (its ``first_seq`` and ``count``;
    its ``seq`` is the last one dropped), and nothing is delivered meanwhile,
    so the order is kept.
    """

    def __init__(self, buffer: int, on_close: Callable[[Subscription], None]):
        super().__init__("*", buffer, on_close)
        self._gaps: dict[str, EventsMissed] = {}

    def offer(self, event: Event) -> bool:
        if not self._gaps:
            try:
                self._send.send_nowait(event)
            except anyio.WouldBlock:
                pass
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return False
            else:
                self._queued += 1
                return self._queued >= self._half
        gap = self._gaps.get(event.context_id)
        if gap is None:
            self._gaps[event.context_id] = EventsMissed(
                context_id=event.context_id,
                seq=event.seq,
                timestamp=event.timestamp,
                count=1,
                first_seq=event.seq,
            )
        else:
            gap.seq = event.seq
            gap.count += 1
            gap.timestamp = event.timestamp
        return True

    def _take_missed(self) -> EventsMissed | None:
        if not self._gaps:
            return None
        cid = next(iter(self._gaps))
        return self._gaps.pop(cid)

    def drain(self) -> list[Event]:
        out = super().drain()
        while self._gaps:  # the buffer is empty: every note goes now
            note = self._take_missed()
            assert note is not None
            out.append(note)
        return out


class EventTap:
    """A function the engine calls with every event of every context as it
    goes out (:meth:`Engine.tap <turnfsm.engine.Engine.tap>`), in the order
    they go out, inside the engine's own task: no queue, no task to wake.

    For a reader in the same process that only hands events on without
    waiting (a server putting them on its streams' queues, a log kept in
    memory). The function must not block or await; an exception it raises is
    logged and the event still goes to every other subscriber and tap. When
    it returns ``True`` (a task waits for this event: a request to answer),
    the engine gives the event loop one turn before it goes on. Use it as
    ``with engine.tap(fn):`` or call :meth:`close`.
    """

    def __init__(
        self, fn: Callable[[Event], object], on_close: Callable[[EventTap], None], log: Any
    ):
        self._fn = fn
        self._on_close = on_close
        self._log = log
        """The engine's logger (the application's ``logger=``, or the default
        one, which imports structlog only when it first logs)."""
        self.closed = False

    def offer(self, event: Event) -> bool:
        try:
            return self._fn(event) is True
        except Exception:
            self._log.exception(
                "event_tap_failed", context_id=event.context_id, seq=event.seq, kind=event.kind
            )
            return False

    def end(self) -> None:
        """The engine closed: the function is not called again."""
        self.closed = True

    def close(self) -> None:
        """Stop calling the function (from the next event on)."""
        if not self.closed:
            self.closed = True
            self._on_close(self)

    def __enter__(self) -> EventTap:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
