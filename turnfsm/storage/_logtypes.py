"""What an event log is (:class:`EventLog`) and what it carries: the types the
logs of :mod:`turnfsm.storage._eventlog` and :mod:`turnfsm.storage._pg_events`
share, in a module of their own so that neither imports the other's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Deliver", "EventLog", "LogNote", "LogRow", "OnConnect"]

LogRow = tuple[str, int, str, str]
"""One durable event: (context_id, seq, kind, the event as JSON)."""


@dataclass(frozen=True, slots=True)
class LogNote:
    """A doorbell: event ``seq`` of a context went out (and the events before it).
    ``event`` is the event itself when it travels in the note (a delta, which
    the log does not keep): its JSON as the relay rings it, parsed as a
    listener hears it; otherwise the event is read from the log."""

    context_id: str
    seq: int
    event: str | dict[str, Any] | None = None
    first: int | None = None
    """The first seq the doorbell covers, when it covers several (a listener
    that has seen nothing of the context yet starts there)."""


Deliver = Callable[[LogNote], None]
OnConnect = Callable[[], Awaitable[None]]


class EventLog(Protocol):
    """What the server and the event relay need of the tables beside a store."""

    shared: bool
    """Whether other processes may write this log (a database file or server)."""
    rings: bool
    """Whether :meth:`add` rings its notes (other processes listen for them);
    a log that does not is given none."""

    async def open(self) -> None:
        """Make the tables if missing (idempotent)."""
        ...

    async def add(self, rows: Sequence[LogRow], notes: Sequence[LogNote]) -> None:
        """Keep ``rows`` (a row already kept is left as it is), then ring ``notes``."""
        ...

    async def after(
        self, context_id: str, after: int, upto: int | None = None
    ) -> list[tuple[int, str, str]]:
        """A context's kept events with ``after < seq <= upto``: (seq, kind, JSON), by seq."""
        ...

    async def newest(self, context_ids: Sequence[str]) -> dict[str, int]:
        """The last kept seq of each of these contexts that has one."""
        ...

    async def forget(self, context_ids: Sequence[str]) -> None:
        """Delete the contexts' events and tenant rows."""
        ...

    async def listen(self, deliver: Deliver, on_connect: OnConnect) -> None:
        """Call ``deliver`` with every note other writers ring (and, where the
        log cannot tell them apart, this process's own), until cancelled.
        ``on_connect`` runs whenever listening (re)starts, before the notes
        that follow: notes rung while no one listened are lost, and the caller
        reads the log for what it needs. Returns at once for a log that no
        other process writes."""
        ...

    async def set_tenant(self, context_id: str, tenant: str) -> None: ...

    async def tenant(self, context_id: str) -> str | None: ...

    async def tenants(self) -> dict[str, str]: ...

    async def aclose(self) -> None: ...
