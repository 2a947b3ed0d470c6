"""Event delivery: a bounded buffer per subscriber, never waited on by the engine.

A subscription's buffer is a deque with an ``anyio.Event`` for a reader that
waits on an empty buffer: what an anyio memory object stream does for one
reader, without its per-item checks (it was about a fifth of a streamed chunk).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import anyio
import anyio.lowlevel

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
        self._buffer: deque[Event] = deque()
        """Events delivered and not yet read, oldest first (at most ``buffer``)."""
        self._size = buffer
        self._waiter: anyio.Event | None = None
        """Set by the reader while it waits for an event; the next one is handed
        to it (in ``_handed``) without taking a place in the buffer."""
        self._handed: list[Event] = []
        self._on_close = on_close
        self._missed = 0
        self._first_missed = 0
        self._missed_at = 0.0
        self._half = max(1, buffer // 2)
        self._queued = 0
        """Events put in the buffer or handed to the reader, and not yet read."""
        self._ended = False
        """No more events will come (:meth:`end`)."""
        self.closed = False

    def _note(self) -> EventsMissed:
        return EventsMissed(
            context_id=self.context_id,
            seq=self._first_missed + self._missed - 1,
            timestamp=self._missed_at,
            count=self._missed,
            first_seq=self._first_missed,
        )

    def _put(self, event: Event) -> bool:
        """Hand ``event`` to the waiting reader, or buffer it; False when the
        buffer is full."""
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            self._handed.append(event)
            waiter.set()
        elif len(self._buffer) < self._size:
            self._buffer.append(event)
        else:
            return False
        self._queued += 1
        return True

    def offer(self, event: Event) -> bool:
        """Deliver without waiting; count what does not fit. True when the
        buffer is half full or more: the reader should be given a turn."""
        if self.closed or self._ended:
            return False
        if not self._missed and self._waiter is None:
            # what ``_put`` does when nobody waits and nothing was missed (the
            # common case, for every streamed chunk), without its frame
            buffer = self._buffer
            if len(buffer) < self._size:
                buffer.append(event)
                queued = self._queued = self._queued + 1
                return queued >= self._half
        if self._missed:
            if not self._put(self._note()):
                self._missed += 1
                self._missed_at = event.timestamp
                return True
            self._missed = 0
        if not self._put(event):
            self._first_missed = event.seq
            self._missed = 1
            self._missed_at = event.timestamp
            return True
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
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            waiter.set()

    def drain(self) -> list[Event]:
        """Every event already delivered and not yet read, without waiting."""
        out: list[Event] = []
        if not self.closed:
            out.extend(self._buffer)
            self._buffer.clear()
            self._queued = 0
        note = self._take_missed()
        if note is not None:
            out.append(note)
        return out

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        while True:
            if self.closed:
                raise StopAsyncIteration
            if self._buffer:
                self._queued -= 1
                return self._buffer.popleft()
            note = self._take_missed()
            if note is not None:
                return note
            if self._ended:
                raise StopAsyncIteration
            waiter = self._waiter = anyio.Event()
            try:
                await waiter.wait()
            finally:
                if self._waiter is waiter:
                    self._waiter = None
                if self._handed:  # first in the buffer (even if the wait was cancelled)
                    self._buffer.extendleft(reversed(self._handed))
                    self._handed.clear()

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            self._on_close(self)
            self._ended = True
            self._buffer.clear()
            self._handed.clear()
            self._queued = 0
            self._wake()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
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
        if self.closed or self._ended:
            return False
        if not self._gaps and self._put(event):
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

    def __exit__(self, *exc_info: object) -> None:
        self.close()
