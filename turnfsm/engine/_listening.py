"""Who listens to an engine (:class:`Listeners`): subscriptions to one
context or to all, taps that take every event as it goes out, and the
observers asked at the start of each call. ``Engine``'s methods of the same
names hand their calls to it; ``aclose`` ends every subscription here."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InvalidInput
from ..events import Event
from ._drive import Driver
from ._inputs import check_count, check_id
from ._observing._observers import Observer
from ._subscribers import EngineSubscription, EventTap, Sink, Subscription

__all__ = ["Listeners"]


class Listeners:
    """The listeners of one engine; ``buffer``: the events a subscription may
    fall behind by, unless it says otherwise."""

    def __init__(self, driver: Driver, buffer: int) -> None:
        self.driver = driver
        self.buffer = buffer

    def end_all(self) -> None:
        """End every subscription and tap (the engine closes)."""
        loaded = self.driver.loaded
        for subs in loaded.subscribers.values():
            for sub in subs:
                sub.end()
        for sub in loaded.everywhere:
            sub.end()
        loaded.subscribers.clear()
        loaded.everywhere.clear()

    def subscribe(self, context_id: str) -> Subscription:
        """Events of one context from now on (see :class:`Subscription`)."""
        check_id("context_id", context_id)
        subs = self.driver.loaded.subscribers_of(context_id)
        sub = Subscription(context_id, self.buffer, self._drop_subscriber)
        subs.append(sub)
        return sub

    def subscribe_all(self, buffer: int | None = None) -> EngineSubscription:
        """Events of every context from now on, in the order they go out (see
        :class:`EngineSubscription`; ``buffer``: events it may fall behind by,
        the engine's ``subscriber_buffer`` by default). One subscription for
        all contexts: a reader of everything (an event relay, say) keeps no
        per-context state in the engine."""
        if buffer is not None:
            check_count("buffer", buffer, minimum=1)
        loaded = self.driver.loaded
        sub = EngineSubscription(buffer or self.buffer, self._drop_everywhere)
        loaded.everywhere.append(sub)
        for subs in loaded.subscribers.values():
            subs.append(sub)
        return sub

    def tap(self, fn: Callable[[Event], object]) -> EventTap:
        """Call ``fn`` with every event of every context from now on, as it
        goes out, in the engine's task (see :class:`EventTap`): for a reader
        in this process that hands events on without waiting. ``fn`` must not
        block; what it raises is logged. ``close()`` the tap (or use it as a
        ``with`` block) to stop."""
        if not callable(fn):
            raise InvalidInput("fn", f"must be callable, not {fn!r}")
        loaded = self.driver.loaded
        tap = EventTap(fn, self._drop_everywhere, self.driver.settings.log)
        loaded.everywhere.append(tap)
        for subs in loaded.subscribers.values():
            subs.append(tap)
        return tap

    def observe(self, observer: Observer) -> Callable[[], None]:
        """Ask ``observer`` at the start of every call whether it watches it
        (``observer.begin(context_id, call)`` returns a
        :class:`~turnfsm.engine.Watch` or None; see docs/observability.md).
        Returns the function that removes it again."""
        if not callable(getattr(observer, "begin", None)):
            raise InvalidInput("observer", f"must have a begin() method, not {observer!r}")
        observers = self.driver.observers
        observers.append(observer)

        def remove() -> None:
            if observer in observers:
                observers.remove(observer)

        return remove

    def _drop_subscriber(self, sub: Subscription) -> None:
        loaded = self.driver.loaded
        subs = loaded.subscribers.get(sub.context_id)
        if subs is not None and sub in subs:
            subs.remove(sub)
            if not subs and sub.context_id not in loaded.runtimes:
                del loaded.subscribers[sub.context_id]

    def _drop_everywhere(self, sub: Sink) -> None:
        loaded = self.driver.loaded
        if sub in loaded.everywhere:
            loaded.everywhere.remove(sub)
        for subs in loaded.subscribers.values():
            if sub in subs:
                subs.remove(sub)
