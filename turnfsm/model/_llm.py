"""The LLM request view and the chunks an LLM adapter yields (plain data, no I/O).

An adapter gets an :class:`LLMRequest` (the provider-format message list, OpenAI
chat format, built by the engine and shaped by the enhancers) and yields zero or
more deltas, then exactly one :class:`LLMResponse` with the whole answer.

These are plain dataclasses: nothing checks their fields when an adapter builds
them. The engine checks them where they enter; a chunk or answer whose fields
do not have the types written here fails the call permanently (kind
``invalid_answer``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LLMChunk",
    "LLMRequest",
    "LLMResponse",
    "ReasoningData",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallData",
    "ToolCallDelta",
]


def _no_cancel() -> None:
    return None


@dataclass(slots=True)
class LLMRequest:
    """One LLM call. ``messages`` and ``tools`` are in OpenAI chat format; adapters
    must not mutate them (the engine keeps them incrementally)."""

    context_id: str
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    attempt: int = 1
    iteration: int = 1
    request_cancel: Callable[[], None] = _no_cancel
    """Asks the engine to cancel this turn (a UI's stop button, or a test double)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """What the enhancers did to the view (JSON data, one key per enhancer: what
    was dropped, injected or estimated). Adapters do not send it; the engine
    stores it with the answer (``metadata.extra["view"]``) for audits."""


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a streamed tool call (the final calls come in the response)."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class ToolCallData:
    """A tool call as the model sent it. ``arguments`` is the decoded JSON object, or
    the raw text when it did not decode to an object.

    ``id`` may be empty when the model sent none: the engine gives such a call
    an id, and renames an id already used in the context (see
    :class:`~turnfsm.model.ToolCallRequest`)."""

    id: str
    name: str
    arguments: dict[str, Any] | str


@dataclass(frozen=True, slots=True)
class ReasoningData:
    """A Responses API reasoning item, to be sent back on the next request:
    its ``id``, its summary parts (one string each) and its
    ``encrypted_content`` when the API returned it."""

    id: str
    summary: tuple[str, ...] = ()
    encrypted_content: str | None = None


@dataclass(frozen=True, slots=True)
class LLMResponse:
    """The whole answer of one call.

    ``refusal`` is the model's refusal (kept apart from ``text``).
    ``finish_reason`` uses the Chat Completions names (``stop``,
    ``tool_calls``, ``length``, ``content_filter``); ``incomplete_reason`` is a
    Responses answer's ``incomplete_details.reason`` as sent. ``reasoning``
    and ``phase`` are what a Responses answer must get back on the next
    request; ``logprobs`` the token log probabilities, when asked for.
    """

    text: str = ""
    tool_calls: tuple[ToolCallData, ...] = ()
    thinking: str | None = None
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    model: str | None = None
    refusal: str | None = None
    incomplete_reason: str | None = None
    reasoning: tuple[ReasoningData, ...] = ()
    phase: str | None = None
    logprobs: list[Any] | None = None


LLMChunk = TextDelta | ThinkingDelta | ToolCallDelta | LLMResponse
