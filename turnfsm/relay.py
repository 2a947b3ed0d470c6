"""The event relay: an engine's events to the event log, and the doorbell rung.

Any process that runs turns (the HTTP server, a worker) runs one relay beside
its engine, so that a stream served by another process sees those turns
(``docs/server.md``, "Several processes"):

- it reads the engine's events of every context through one
  :meth:`~turnfsm.engine.Engine.subscribe_all` subscription (nothing is kept
  per context); a log kept in this process's memory (a server on a memory
  store) takes each event as it goes out instead (:meth:`~turnfsm.engine.Engine.tap`):
  there is no write to wait for;
- it writes each durable event (every kind but the streamed deltas) to the
  store's event log (:func:`turnfsm.storage._eventlog.open_event_log`) at
  ``(context_id, seq)``, the event as JSON (``EVENT_ADAPTER``);
- in the same write it rings a note per event: on PostgreSQL a ``NOTIFY``
  whose payload names the context and seq, and carries the delta itself for
  a streamed delta. A durable event is read from the log by whoever hears
  the note, so a lost note loses nothing: the next note of that context shows
  a gap, and the listener reads the log.

A slow database never slows a turn: the subscription is the relay's queue
(``buffer`` events, 4096 by default), and it takes what has piled up in
batches of at most ``batch`` events per write. When the queue is full the
engine drops events for the relay (it never waits); for each context that
lost some, the relay rings a note at the last seq dropped, so listeners read
the log, find the stretch missing and send a ``Resync`` (pull the state and
messages, which hold everything durable). A write that fails is logged and
its batch dropped the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import anyio.abc
import structlog

from .engine import Engine, EngineSubscription, EventTap
from .events import STREAMED_KINDS, Event, event_bytes
from .storage._eventlog import EventLog, LogNote, LogRow

__all__ = ["RELAY_BATCH", "RELAY_BUFFER", "EventRelay", "event_json", "split_events"]

log = structlog.get_logger("turnfsm.relay")

RELAY_BUFFER = 4096
"""Events the relay may fall behind by before the engine drops some for it."""
RELAY_BATCH = 512
"""Events written (and rung) in one transaction at most."""


def event_json(ev: Event) -> str:
    """An event as the JSON the log keeps and a note carries."""
    return event_bytes(ev).decode()


def split_events(
    events: Sequence[Event], *, rings: bool = True
) -> tuple[list[LogRow], list[LogNote]]:
    """The rows to keep and the notes to ring for events as they went out. An
    ``EventsMissed`` (events dropped for the relay) is a note at its last seq:
    listeners read the log and find that stretch missing. Without ``rings``
    (a log that rings no notes) only the rows."""
    rows: list[LogRow] = []
    notes: list[LogNote] = []
    for ev in events:
        kind = ev.kind
        if kind in STREAMED_KINDS:
            if rings:
                notes.append(LogNote(ev.context_id, ev.seq, event_json(ev)))
        elif kind == "EventsMissed":
            if rings:
                notes.append(LogNote(ev.context_id, ev.seq))
        else:
            rows.append((ev.context_id, ev.seq, kind, event_json(ev)))
            if rings:
                notes.append(LogNote(ev.context_id, ev.seq))
    return rows, notes


class EventRelay:
    """Relays ``engine``'s events to ``event_log`` (see the module docstring).

    Use it as ``async with EventRelay(engine, event_log):`` around the work
    (the log opened first); on exit it writes what it has already taken, for
    at most ``grace`` seconds. ``written`` and ``dropped`` count events.
    """

    def __init__(
        self,
        engine: Engine,
        event_log: EventLog,
        *,
        buffer: int = RELAY_BUFFER,
        batch: int = RELAY_BATCH,
        grace: float = 2.0,
    ) -> None:
        self.engine = engine
        self.event_log = event_log
        self.buffer = buffer
        self.batch = batch
        self.grace = grace
        self.written = 0
        self.dropped = 0
        self._keep = getattr(event_log, "keep_events", None)
        """A log in this process's memory keeps the events themselves."""
        self._sub: EngineSubscription | None = None
        self._tap: EventTap | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._done = anyio.Event()

    async def __aenter__(self) -> EventRelay:
        if self._keep is not None:
            # kept in this process's memory: no write to wait for, so no queue
            self._tap = self.engine.tap(self._kept)
            return self
        self._sub = self.engine.subscribe_all(self.buffer)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._run, self._sub)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._tap is not None:
            self._tap.close()
            return
        assert self._sub is not None and self._tg is not None
        self._sub.end()  # the events already taken are written, then the task ends
        with anyio.move_on_after(self.grace, shield=True):
            await self._done.wait()
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        await self._sub.aclose()

    async def _run(self, sub: EngineSubscription) -> None:
        try:
            pending: list[Event] = []
            async for first in sub:
                pending.append(first)
                pending += sub.drain()
                while pending:
                    batch, pending = pending[: self.batch], pending[self.batch :]
                    await self._write(batch)
        finally:
            self._done.set()

    def _kept(self, ev: Event) -> None:
        assert self._keep is not None
        self.written += self._keep((ev,))

    async def _write(self, batch: list[Event]) -> None:
        self.dropped += sum(ev.count for ev in batch if ev.kind == "EventsMissed")
        rows, notes = split_events(batch, rings=self.event_log.rings)
        try:
            await self.event_log.add(rows, notes)
        except Exception as exc:  # the log never stops a turn; its readers Resync
            self.dropped += len(rows)
            log.warning("event_log_write_failed", events=len(rows), error=str(exc))
            return
        self.written += len(rows)
