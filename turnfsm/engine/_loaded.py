"""The contexts an engine holds in memory: attach, unload, least-recently-used
eviction, which of them a call runs on now (busy), and the event seqs a
context must not reuse after it reloads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ContextBusy
from ..model import ChatContext, to_chat_messages
from ..states import ContextHolder, State, TurnMachine
from ._runtime import Runtime, StepSettings
from ._subscribers import Sink

__all__ = ["MAX_LOADED", "MAX_LOADED_MESSAGES", "Loaded"]

MAX_LOADED = 4_096
"""``Engine(max_loaded=...)`` by default: contexts held loaded at most."""
MAX_LOADED_MESSAGES = 200_000
"""``Engine(max_loaded_messages=...)`` by default: their messages at most, in
all: a loaded context's memory grows with its messages, and the two
defaults together keep the cache under the budget docs/benchmarks.md
measures ("The loaded-context cache")."""


class _RequestCancel:
    """``functools.partial(request_cancel, context_id)``, held by every loaded
    context: a partial keeps a tuple of its arguments and a dict of keywords
    besides, a closure its cells."""

    __slots__ = ("_context_id", "_request")

    def __init__(self, request: Callable[[str], None], context_id: str) -> None:
        self._request = request
        self._context_id = context_id

    def __call__(self) -> None:
        self._request(self._context_id)


class Loaded:
    """Loaded contexts by id, least recently used first."""

    def __init__(
        self, machine: TurnMachine, log: Any, request_cancel: Callable[[str], None]
    ) -> None:
        self.machine = machine
        self.log = log
        self.request_cancel = request_cancel
        self.runtimes: dict[str, Runtime] = {}
        self.busy: set[str] = set()
        """The contexts a call runs on now (loaded, or being loaded for it):
        never evicted, and a second call on one is refused."""
        self.subscribers: dict[str, list[Sink]] = {}
        """Per context: its subscribers (each list also holds :attr:`everywhere`)."""
        self.everywhere: list[Sink] = []
        """The subscribers to every context (``Engine.subscribe_all``, ``Engine.tap``)."""
        self.messages = 0
        """The messages of the loaded contexts (each as of its last call),
        what :meth:`evict` bounds besides the number of contexts: a loaded
        context's memory grows with its messages."""
        self.seq_marks: dict[str, int] = {}
        """Per unloaded context: the last seq its subscribers saw, when the store
        holds less (a failed commit)."""

    def get(self, context_id: str) -> Runtime | None:
        return self.runtimes.get(context_id)

    def take(self, context_id: str) -> Runtime | None:
        """Remove and return the loaded context, still attached (see :meth:`put`)."""
        return self.runtimes.pop(context_id, None)

    def put(self, rt: Runtime) -> None:
        """Hold ``rt`` as the most recently used."""
        self.runtimes[rt.ctx.id] = rt

    def refuse_if_busy(self, context_id: str) -> None:
        """ContextBusy when a call runs on the context."""
        if context_id in self.busy:
            rt = self.runtimes.get(context_id)
            raise ContextBusy(context_id, rt.holder.state if rt else "loading")

    def attach(self, ctx: ChatContext, settings: StepSettings) -> Runtime:
        holder = ContextHolder(ctx.id)
        machine = self.machine
        machine.attach(holder, State(ctx.current_state))
        cid = ctx.id
        rt = Runtime(
            ctx=ctx,
            holder=holder,
            chat=to_chat_messages(n.message for n in ctx.history()),
            subscribers=self.subscribers_of(cid),
            log=self.log.bind(context_id=cid),
            machine=machine,
            settings=settings,
            # after a failed commit the stored seq may lag what subscribers saw
            seq=max(ctx.event_seq, self.seq_marks.pop(cid, 0)),
        )
        rt.sent_seq = rt.seq
        rt.request_cancel = _RequestCancel(self.request_cancel, cid)
        rt.held = len(ctx.message_pool)
        self.messages += rt.held
        self.runtimes[cid] = rt
        return rt

    def recount(self, rt: Runtime) -> None:
        """Count the messages ``rt`` holds now (after a call added some)."""
        held = len(rt.ctx.message_pool)
        self.messages += held - rt.held
        rt.held = held

    def subscribers_of(self, context_id: str) -> list[Sink]:
        """The context's list of subscribers (made with :attr:`everywhere` in it)."""
        subs = self.subscribers.get(context_id)
        if subs is None:
            subs = self.subscribers[context_id] = list(self.everywhere)
        return subs

    def unload(self, context_id: str) -> None:
        rt = self.runtimes.pop(context_id, None)
        if rt is not None:
            self.messages -= rt.held
            self.machine.detach(rt.holder)
            if rt.sent_seq > rt.ctx.event_seq:  # seqs seen but not stored: never reuse them
                self.seq_marks[context_id] = rt.sent_seq
        subs = self.subscribers.get(context_id)
        if subs is not None and len(subs) == len(self.everywhere):
            # nobody subscribed to this context alone: the list goes with it
            # (the engine keeps a list per loaded context, not per context seen)
            del self.subscribers[context_id]

    def evict(self, max_loaded: int, max_messages: int) -> None:
        """Unload the least recently used resting contexts while more than
        ``max_loaded`` are loaded or they hold more than ``max_messages``
        messages in all (they stay in the store and load again on their next
        call). The most recently used one stays, however long it is."""
        runtimes = self.runtimes
        busy = self.busy
        for cid in [c for c in runtimes if c not in busy][:-1]:
            if len(runtimes) <= max_loaded and self.messages <= max_messages:
                return
            self.unload(cid)
