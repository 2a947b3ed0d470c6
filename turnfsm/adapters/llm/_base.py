"""The LLM adapter interface: a tiny protocol, the request it gets, what it yields.

An adapter's :meth:`LLM.stream` gets an :class:`LLMRequest` (the provider-format
message list, OpenAI chat format, built by the engine and shaped by the
enhancers) and yields zero or more deltas, then exactly one
:class:`LLMResponse` with the whole answer. A delta before the response makes
the answer *streamed* (the context passes through ``StreamingLLMResponse``);
a response alone is a whole answer (``response_received``).

Failures are raised as :class:`~turnfsm.errors.LLMError` (transient or
permanent): an adapter maps its provider's errors at this boundary.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from ...model import (
    LLMChunk,
    LLMRequest,
    LLMResponse,
    TextDelta,
    ThinkingDelta,
    ToolCallData,
    ToolCallDelta,
)

__all__ = [
    "LLM",
    "LLMChunk",
    "LLMRequest",
    "LLMResponse",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallData",
    "ToolCallDelta",
]


@runtime_checkable
class LLM(Protocol):
    """Anything that turns a request into a stream of chunks ending in a response."""

    def stream(self, request: LLMRequest) -> AsyncIterator[LLMChunk]: ...
