"""The enhancer interface: what the engine calls to shape a request."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..model import ChatContext, LLMRequest

__all__ = ["Enhancer"]


@runtime_checkable
class Enhancer(Protocol):
    """Shapes one request. Raising makes the turn fail (``prepare_failed``)."""

    def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest: ...
