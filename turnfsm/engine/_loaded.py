"""The contexts an engine holds in memory: attach, unload, least-recently-used
eviction, and the event seqs a context must not reuse after it reloads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..model import ChatContext, to_chat_messages
from ..states import ContextHolder, State, TurnMachine
from ._runtime import Runtime
from ._subscribers import Sink

__all__ = ["Loaded"]


class Loaded:
    """Loaded contexts by id, least recently used first."""

    def __init__(
        self, machine: TurnMachine, log: Any, request_cancel: Callable[[str], None]
    ) -> None:
        self.machine = machine
        self.log = log
        self.request_cancel = request_cancel
        self.runtimes: dict[str, Runtime] = {}
        self.subscribers: dict[str, list[Sink]] = {}
        """Per context: its subscribers (each list also holds :attr:`everywhere`)."""
        self.everywhere: list[Sink] = []
        """The subscribers to every context (``Engine.subscribe_all``, ``Engine.tap``)."""
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

    def attach(self, ctx: ChatContext) -> Runtime:
        holder = ContextHolder(ctx.id)
        self.machine.attach(holder, State(ctx.current_state))
        cid = ctx.id
        rt = Runtime(
            ctx=ctx,
            holder=holder,
            chat=to_chat_messages(n.message for n in ctx.history()),
            subscribers=self.subscribers_of(cid),
            log=self.log.bind(context_id=cid),
            # after a failed commit the stored seq may lag what subscribers saw
            seq=max(ctx.event_seq, self.seq_marks.pop(cid, 0)),
        )
        rt.sent_seq = rt.seq
        rt.request_cancel = lambda: self.request_cancel(cid)
        self.runtimes[cid] = rt
        return rt

    def subscribers_of(self, context_id: str) -> list[Sink]:
        """The context's list of subscribers (made with :attr:`everywhere` in it)."""
        subs = self.subscribers.get(context_id)
        if subs is None:
            subs = self.subscribers[context_id] = list(self.everywhere)
        return subs

    def unload(self, context_id: str) -> None:
        rt = self.runtimes.pop(context_id, None)
        if rt is not None:
            self.machine.detach(rt.holder)
            if rt.sent_seq > rt.ctx.event_seq:  # seqs seen but not stored: never reuse them
                self.seq_marks[context_id] = rt.sent_seq
        subs = self.subscribers.get(context_id)
        if subs is not None and len(subs) == len(self.everywhere):
            # nobody subscribed to this context alone: the list goes with it
            # (the engine keeps a list per loaded context, not per context seen)
            del self.subscribers[context_id]

    def evict(self, max_loaded: int, busy: set[str]) -> None:
        """Unload the least recently used resting contexts beyond ``max_loaded``
        (they stay in the store and load again on their next call)."""
        excess = len(self.runtimes) - max_loaded
        if excess > 0:
            for cid in [c for c in self.runtimes if c not in busy][:excess]:
                self.unload(cid)
