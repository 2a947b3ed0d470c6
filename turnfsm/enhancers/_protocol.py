"""The enhancer interface: what the engine calls to shape a request."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..model import ChatContext, LLMRequest

__all__ = ["Enhancer"]


@runtime_checkable
class Enhancer(Protocol):
    """Shapes one request. Raising makes the turn fail (``prepare_failed``).

    ``enhance`` runs on the engine's task, in the event loop's thread: it must
    not block. An enhancer that reads something slow (files, say) may also
    define ``async def prefetch(self, context) -> None``, which the engine
    awaits before it builds each request, and keep what it read for the
    ``enhance`` that follows (:class:`~turnfsm.enhancers.StickyFiles` does,
    reading in a worker thread)."""

    def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest: ...
