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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

__all__ = [
    "LLMChunk",
    "LLMRequest",
    "LLMResponse",
    "OutputMode",
    "OutputSpec",
    "ReasoningData",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallData",
    "ToolCallDelta",
    "provider_usage",
]


def _no_cancel() -> None:
    return None


OutputMode = Literal["native", "instruction"]
"""How an answer's schema reaches the model: ``native`` through the provider's
own structured-output mechanism (the adapter maps it), ``instruction`` as text
in the messages (the engine adds it; the adapter sends nothing more)."""


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """The type the turn's final answer must have, as a JSON Schema.

    ``name`` is the schema's name as providers want it (letters, digits, ``_``
    and ``-``, at most 64 characters); ``digest`` the SHA-256 of the schema's
    canonical JSON (sorted keys, no spaces), which the stored answer records;
    ``strict`` asks a provider that can for strict schema adherence.
    """

    name: str
    schema: dict[str, Any]
    digest: str
    strict: bool = True
    mode: OutputMode = "native"


@dataclass(slots=True)
class LLMRequest:
    """One LLM call. ``messages`` and ``tools`` are in OpenAI chat format; adapters
    must not mutate them (``messages`` may be the engine's own history list,
    kept incrementally; the engine copies it before changing it when a request
    that holds it is still kept, so a kept request keeps what it was sent)."""

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
    output: OutputSpec | None = None
    """The type the final answer must have (None: any text). With mode
    ``native`` the adapter asks the provider for it; with ``instruction`` the
    messages already say it."""


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
    """A reasoning item of an answer, to be sent back on the next request to
    the same provider (stored as a :class:`~turnfsm.model.ReasoningItem`,
    whose docstring says what each field holds).

    ``provider`` names who made it (``"openai"`` for a Responses API item,
    ``"anthropic"``, ``"google"``); ``id`` the provider's id (``""`` when it
    gives none); ``summary`` the readable parts; ``encrypted_content`` the
    Responses API's opaque reasoning; ``data`` any other opaque JSON the
    provider needs back unchanged (a Claude thinking block's ``signature``);
    ``position`` how many of the answer's tool calls came before it.
    """

    id: str
    summary: tuple[str, ...] = ()
    encrypted_content: str | None = None
    provider: str = "openai"
    data: dict[str, Any] | None = None
    position: int = 0


_object_setattr = object.__setattr__
"""How ``LLMResponse.__init__`` writes to itself: its own ``__setattr__``
refuses every name."""


class _OpenLLMResponse:
    """LLMResponse's slots, without its frozen ``__setattr__``."""

    __slots__ = (
        "finish_reason",
        "incomplete_reason",
        "logprobs",
        "model",
        "phase",
        "provider_reason",
        "reasoning",
        "refusal",
        "text",
        "thinking",
        "tool_calls",
        "usage",
    )
    text: str
    tool_calls: tuple[ToolCallData, ...]
    thinking: str | None
    usage: dict[str, Any] | None
    finish_reason: str | None
    model: str | None
    refusal: str | None
    incomplete_reason: str | None
    reasoning: tuple[ReasoningData, ...]
    phase: str | None
    logprobs: list[Any] | None
    provider_reason: str | None


@dataclass(frozen=True, slots=True, init=False)
class LLMResponse:
    """The whole answer of one call.

    ``refusal`` is the model's refusal (kept apart from ``text``).
    ``finish_reason`` uses the Chat Completions names (``stop``,
    ``tool_calls``, ``length``, ``content_filter``); ``incomplete_reason`` says
    why the answer is incomplete as the provider sent it (a Responses answer's
    ``incomplete_details.reason``, Claude's ``pause_turn``);
    ``provider_reason`` is the provider's own stop reason when its names
    differ (Claude's ``stop_reason``, Gemini's ``finishReason``).
    ``reasoning`` is what the provider must get back on the next request (in
    order), and ``phase`` a Responses message's phase; ``logprobs`` the token
    log probabilities, when asked for.

    ``usage`` uses the Chat Completions names: ``prompt_tokens`` counts every
    input token (cached ones included), ``completion_tokens`` every output
    token (thinking included); the provider's own figures ride beside them as
    sent (see :func:`provider_usage`).
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
    provider_reason: str | None = None

    def __init__(
        self,
        text: str = "",
        tool_calls: tuple[ToolCallData, ...] = (),
        thinking: str | None = None,
        usage: dict[str, Any] | None = None,
        finish_reason: str | None = None,
        model: str | None = None,
        refusal: str | None = None,
        incomplete_reason: str | None = None,
        reasoning: tuple[ReasoningData, ...] = (),
        phase: str | None = None,
        logprobs: list[Any] | None = None,
        provider_reason: str | None = None,
    ) -> None:
        # what the frozen dataclass's own __init__ does (a field, an
        # ``object.__setattr__`` call) with plain slot writes, on the open twin
        # (the same slots) for their span, then the record's class back:
        # every answer of every adapter is made here (tests/test_open_records.py
        # holds the two to the same record)
        if type(self) is not LLMResponse:  # a subclass (its slots are not the twin's):
            # the frozen dataclass's own writes
            values = (
                text,
                tool_calls,
                thinking,
                usage,
                finish_reason,
                model,
                refusal,
                incomplete_reason,
                reasoning,
                phase,
                logprobs,
                provider_reason,
            )
            for name, value in zip(_RESPONSE_FIELDS, values, strict=True):
                _object_setattr(self, name, value)
            return
        _object_setattr(self, "__class__", _OpenLLMResponse)
        open_: _OpenLLMResponse = self  # type: ignore[assignment]
        # (two or three targets to an assignment: compiled to plain slot
        # writes, with no tuple made)
        open_.text, open_.tool_calls, open_.thinking = text, tool_calls, thinking
        open_.usage, open_.finish_reason, open_.model = usage, finish_reason, model
        open_.refusal, open_.incomplete_reason = refusal, incomplete_reason
        open_.reasoning, open_.phase = reasoning, phase
        open_.logprobs, open_.provider_reason = logprobs, provider_reason
        open_.__class__ = LLMResponse  # type: ignore[assignment]


def provider_usage(
    sent: Mapping[str, Any],
    *,
    prompt_tokens: int,
    completion_tokens: int,
    cache_read_tokens: int | None = None,
    cache_creation_tokens: int | None = None,
    reasoning_tokens: int | None = None,
) -> dict[str, Any]:
    """Usage in the engine's shape for a provider whose names are not the
    Chat Completions ones: the counts (``prompt_tokens`` with every input
    token, cached ones included; ``completion_tokens`` with every output
    token, thinking included; their sum), then the provider's own fields as
    sent (``sent``), then the shared details wherever the provider reported
    them, under the names the Chat Completions usage gives them:
    ``prompt_tokens_details.cached_tokens`` (read from the cache),
    ``prompt_tokens_details.cache_creation_tokens`` (written to it) and
    ``completion_tokens_details.reasoning_tokens`` (thinking)."""
    out: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    for key, value in sent.items():
        if key not in out:
            out[str(key)] = value
    prompt_details: dict[str, Any] = {}
    if cache_read_tokens is not None:
        prompt_details["cached_tokens"] = cache_read_tokens
    if cache_creation_tokens is not None:
        prompt_details["cache_creation_tokens"] = cache_creation_tokens
    if prompt_details:
        out["prompt_tokens_details"] = prompt_details
    if reasoning_tokens is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return out


_RESPONSE_FIELDS = tuple(f.name for f in fields(LLMResponse))


LLMChunk = TextDelta | ThinkingDelta | ToolCallDelta | LLMResponse
