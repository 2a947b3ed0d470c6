"""Messages and tool calls: the atoms of a conversation (see docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

__all__ = [
    "NOTICE_KEY",
    "OPENAI_PROVIDER",
    "ApprovalStatus",
    "ContentPart",
    "FilePart",
    "ImagePart",
    "InternalMessage",
    "MessageMetadata",
    "MessageNode",
    "MessageType",
    "ReasoningItem",
    "Role",
    "TextPart",
    "TokenUsage",
    "ToolCallRequest",
    "ToolCallResult",
]

# Records are slotted dataclasses: plain to build and to replace
# (``dataclasses.replace``) on the engine's hot path, validated and serialised
# by pydantic only where data enters or leaves (turnfsm.records). The content
# parts are frozen (copies share them); the others are not, as measured: the
# engine never changes a record in place, and what it hands out is a copy
# (``detached``). See docs/architecture.md, "Records".
_FORBID = ConfigDict(extra="forbid")


def _is_none(value: object) -> bool:
    return value is None


def _is_openai(value: object) -> bool:
    return value == OPENAI_PROVIDER


def _is_zero(value: object) -> bool:
    return value == 0


NOTICE_KEY = "notice"
"""The key, in an assistant message's ``metadata.extra``, that marks a
*notice*: a message the engine wrote, not the model, saying why a turn
stopped; its value names the stop (``"max_iterations"``). A notice is sent to
the model as the assistant's own text, never as a user's or a system
instruction (see :attr:`InternalMessage.notice`)."""

OPENAI_PROVIDER = "openai"
"""The provider of a :class:`ReasoningItem` stored without one: the OpenAI
Responses API (the only provider whose reasoning was kept before the field)."""


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    FRONTEND_OPERATOR = "frontend_operator"
    """A person operating the frontend on the user's behalf (the contextManagement
    request body's ``frontend_operator``)."""


class MessageType(StrEnum):
    TEXT = "Text"
    PLAN = "Plan"
    QUESTION = "Question"
    TOOL_CALL = "ToolCall"
    TOOL_RESULT = "ToolResult"


class ApprovalStatus(StrEnum):
    PENDING = "Pending"
    APPROVED = "Approved"
    DENIED = "Denied"


# The role an answer's outcome is read of, as module constants: on Python 3.11
# reading a member off its enum class goes through ``EnumType.__getattr__``'s
# slow lookup.
_ASSISTANT = Role.ASSISTANT


@dataclass(slots=True, kw_only=True, frozen=True)
class TextPart:
    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    type: Literal["text"] = "text"
    text: str


@dataclass(slots=True, kw_only=True, frozen=True)
class ImagePart:
    """An image, by URL (``https://…`` or a ``data:`` URL)."""

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    type: Literal["image"] = "image"
    url: str
    detail: Literal["auto", "low", "high"] | None = None


@dataclass(slots=True, kw_only=True, frozen=True)
class FilePart:
    """A file or other binary content, base64-encoded."""

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    type: Literal["file"] = "file"
    name: str
    mime_type: str = "application/octet-stream"
    data: str


ContentPart = Annotated[TextPart | ImagePart | FilePart, Field(discriminator="type")]


@dataclass(slots=True, kw_only=True)
class ToolCallRequest:
    """One call the assistant asked for.

    ``decided_by`` says who set ``approval_status``: the tool's policy, a human, or
    the engine itself (supersession, cancellation, iteration limit).
    ``outcome_unknown`` marks a call that was started before a crash and has no
    recorded outcome: a human must decide whether it runs again.

    ``id`` is unique in its context. The engine keeps a model's id when it is
    new; a call without an id gets ``call_<n>`` (its position in the answer,
    from 1), and an id already used (earlier in the same answer, or anywhere in
    the context's history: many local models send ``call_0`` every turn) gets
    ``<id>-<n>`` with the smallest ``n`` from 2 that is free. ``provider_id``
    then holds what the model sent (``""`` for a missing id); it is ``None``,
    and left out of the stored JSON, when the id was kept. The provider sees
    the new id on the call and on its result alike.
    """

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    id: str
    tool_name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    approval_status: ApprovalStatus = ApprovalStatus.PENDING
    decided_by: Literal["policy", "human", "system"] | None = None
    reason: str | None = None
    outcome_unknown: bool = False
    raw_arguments: str | None = None
    """The argument text as the model sent it, when it was not a JSON object
    (or could not be stored: too deep, too large, no JSON form); a long text
    is cut to its first 8192 characters (the cut is marked)."""
    arguments_error: Annotated[str | None, Field(exclude_if=_is_none)] = None
    """Why the arguments were not usable, when it is more than "not a JSON
    object" (the tool's error result says it); left out of the JSON when ``None``."""
    provider_id: Annotated[str | None, Field(exclude_if=_is_none)] = None
    """The id the model sent, when the engine gave the call another (see above)."""


@dataclass(slots=True, kw_only=True)
class ToolCallResult:
    """The one result of a tool call.

    ``result`` is JSON data. What a tool returned is converted by visible
    rules before it is stored: a pydantic model or dataclass becomes its JSON
    form; ``int``/``float``/``bool``/``None`` dict keys become their JSON text;
    ``nan``/``inf``/``-inf`` become ``"NaN"``/``"Infinity"``/``"-Infinity"``;
    lone surrogates become U+FFFD. Each conversion is listed, with its JSON
    path, in the tool message's ``metadata.extra["conversions"]``. A value
    with no visible conversion (a tuple key, a set, an object with no JSON
    form, too deep, too large) is stored as a failed result (``success`` false)
    whose ``"error"`` says what and where.
    """

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    request_id: str
    result: Any = None
    success: bool = True


_USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")


@dataclass(slots=True, init=False)
class TokenUsage:
    # No docstring: pydantic would put it in the JSON schema (the server's
    # OpenAPI document), which has none for this record.
    #
    # The counts, and ``extras``: whatever else the provider said about usage
    # (``prompt_tokens_details``, ``reasoning_tokens``, ...), kept as sent.
    # The JSON form is flat, as the provider's: the extras sit beside the
    # counts, after them, in the order they came; ``TokenUsage(prompt_tokens=1,
    # reasoning_tokens=2)`` puts ``reasoning_tokens`` in ``extras``.

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="allow")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    extras: dict[str, Any] = field(default_factory=dict)

    def __init__(
        self,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        total_tokens: int = 0,
        **extras: Any,
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.total_tokens = total_tokens
        self.extras = extras

    @model_validator(mode="wrap")
    @classmethod
    def _flat_in(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(data, dict):
            return handler(data)
        counts = {k: data[k] for k in _USAGE_FIELDS if k in data}
        usage = handler({**counts, "extras": {}})
        extras = {k: v for k, v in data.items() if k not in _USAGE_FIELDS}
        usage.extras = extras
        return usage

    @model_serializer(mode="wrap")
    def _flat_out(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            data.update(data.pop("extras", None) or {})
        return data

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # the flat form, in both modes (validation and serialisation alike)
        count = {"default": 0, "type": "integer"}
        return {
            "additionalProperties": True,
            "properties": {
                name: {**count, "title": name.replace("_", " ").title()} for name in _USAGE_FIELDS
            },
            "title": "TokenUsage",
            "type": "object",
        }


ABNORMAL_FINISH = {"length": "length", "content_filter": "content_filter"}
"""Finish reasons (the Chat Completions names) that say an answer did not end
normally, and the outcome each gives."""


class _ExtraSlot:
    """Where ``MessageMetadata.extra`` and its four rare fields are kept (see there)."""

    __slots__ = ("_extra", "_rare")
    _extra: dict[str, Any] | None
    _rare: tuple[str | None, list[Any] | None, str | None, bool] | None


_T = TypeVar("_T")


def _slots(*stored: str) -> Callable[[type[_T]], type[_T]]:
    """A dataclass made again with ``stored`` as its own slots: what
    ``dataclass(slots=True)`` does, but for the fields named only, so that the
    others (kept elsewhere, read through a descriptor) take no slot."""

    def remake(cls: type[_T]) -> type[_T]:
        body = dict(cls.__dict__)
        for name in (*stored, "__dict__", "__weakref__"):
            body.pop(name, None)
        body["__slots__"] = stored
        made: type[_T] = type(cls.__name__, cls.__bases__, body)
        made.__qualname__ = cls.__qualname__
        return made

    return remake


@_slots("created_at", "model", "usage", "attempt", "iteration", "finish_reason")
@dataclass(kw_only=True, init=False)
class MessageMetadata(_ExtraSlot):
    """What is known about a message besides its content.

    ``finish_reason`` is the provider's reason in the Chat Completions names
    (``stop``, ``tool_calls``, ``length``, ``content_filter``, ...; a Responses
    answer that is ``incomplete`` gives ``length`` for ``max_output_tokens``,
    ``content_filter`` for ``content_filter``). ``incomplete_reason`` is the
    Responses API's ``incomplete_details.reason`` as sent; ``logprobs`` the
    token log probabilities the request asked for (the provider's JSON). Both
    are left out of the stored JSON when ``None``.
    """

    # The docstring above is the record's description in the server's OpenAPI
    # document, kept as it is. ``incomplete_reason`` also holds Claude's
    # ``pause_turn``; ``provider_reason`` is the provider's own stop reason
    # when its names are not the Chat Completions ones (Claude's
    # ``stop_reason``: ``end_turn``, ``tool_use``, ``max_tokens``, ``refusal``,
    # ...; Gemini's ``finishReason``), left out of the stored JSON when ``None``.
    #
    # ``extra`` is made on first read: most messages never have one, and a
    # conversation kept in memory held an empty dict per message. Until then
    # ``_extra`` holds ``None`` (``extra=None`` to the constructor, or
    # assigned, means the same); the engine reads it with :func:`extra_of`,
    # which makes nothing. ``incomplete_reason``, ``logprobs``,
    # ``provider_reason`` and ``cancelled``, which few messages have, are kept
    # together in ``_rare`` (``None`` when all four are their defaults).
    # Neither ``extra`` nor those four take a slot of their own (``_slots``):
    # with a slot per field the record was two size classes of the allocator
    # larger, for every message an engine or a store keeps (docs/benchmarks.md).
    # ``__getstate__`` gives what the record pickled as with one slot per field.

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    created_at: datetime
    model: str | None = None
    usage: TokenUsage | None = None
    attempt: int | None = None
    iteration: int | None = None
    finish_reason: str | None = None
    cancelled: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    incomplete_reason: Annotated[str | None, Field(exclude_if=_is_none)] = None
    logprobs: Annotated[list[Any] | None, Field(exclude_if=_is_none)] = None
    provider_reason: Annotated[str | None, Field(exclude_if=_is_none)] = None

    def __init__(
        self,
        *,
        created_at: datetime,
        model: str | None = None,
        usage: TokenUsage | None = None,
        attempt: int | None = None,
        iteration: int | None = None,
        finish_reason: str | None = None,
        cancelled: bool = False,
        extra: dict[str, Any] | None = None,
        incomplete_reason: str | None = None,
        logprobs: list[Any] | None = None,
        provider_reason: str | None = None,
    ) -> None:
        self.created_at = created_at
        self.model = model
        self.usage = usage
        self.attempt = attempt
        self.iteration = iteration
        self.finish_reason = finish_reason
        self._extra = extra
        self._rare = (
            None
            if incomplete_reason is None
            and logprobs is None
            and provider_reason is None
            and cancelled is False
            else (incomplete_reason, logprobs, provider_reason, cancelled)
        )

    def __getstate__(self) -> tuple[None, dict[str, Any]]:
        return None, {
            "created_at": self.created_at,
            "model": self.model,
            "usage": self.usage,
            "attempt": self.attempt,
            "iteration": self.iteration,
            "finish_reason": self.finish_reason,
            "cancelled": self.cancelled,
            "extra": self.extra,
            "incomplete_reason": self.incomplete_reason,
            "logprobs": self.logprobs,
            "provider_reason": self.provider_reason,
            "_extra": self._extra,
        }


class _ExtraMadeOnRead:
    """``MessageMetadata.extra``: the dict kept in ``_extra``, made on first read."""

    __slots__ = ()

    def __get__(self, obj: _ExtraSlot | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        extra = obj._extra
        if extra is None:
            extra = obj._extra = {}
        return extra

    def __set__(self, obj: _ExtraSlot, value: dict[str, Any] | None) -> None:
        obj._extra = value


class _Rare:
    """One of the fields a record keeps together in its ``_rare``: item
    ``index``, where ``defaults`` are the fields' defaults (``_rare`` is
    ``None`` while all of them are)."""

    __slots__ = ("_default", "_defaults", "_index")

    def __init__(self, index: int, defaults: tuple[Any, ...]) -> None:
        self._index = index
        self._defaults = defaults
        self._default = defaults[index]

    def __get__(self, obj: _ExtraSlot | _RareSlot | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        rare = getattr(obj, "_rare", None)  # unset in a record being unpickled or validated
        return self._default if rare is None else rare[self._index]

    def __set__(self, obj: _ExtraSlot | _RareSlot, value: Any) -> None:
        defaults = self._defaults
        rare = getattr(obj, "_rare", None)
        values = list(defaults if rare is None else rare)
        values[self._index] = value
        kept = all(v is d for v, d in zip(values, defaults, strict=True))
        obj._rare = None if kept else tuple(values)


_METADATA_RARE = (None, None, None, False)
MessageMetadata.extra = _ExtraMadeOnRead()  # type: ignore[assignment]  # it has no slot
MessageMetadata.incomplete_reason = _Rare(0, _METADATA_RARE)  # type: ignore[assignment]
MessageMetadata.logprobs = _Rare(1, _METADATA_RARE)  # type: ignore[assignment]
MessageMetadata.provider_reason = _Rare(2, _METADATA_RARE)  # type: ignore[assignment]
MessageMetadata.cancelled = _Rare(3, _METADATA_RARE)  # type: ignore[assignment]
_NO_EXTRA: Mapping[str, Any] = {}
"""What :func:`extra_of` gives for a message without ``extra``: a plain dict
(its ``get`` is faster than a read-only proxy's), never changed."""


def extra_of(meta: MessageMetadata) -> Mapping[str, Any]:
    """``meta.extra`` to read only: an empty mapping when the message has none,
    where reading ``meta.extra`` would make and keep an empty dict."""
    extra = meta._extra
    return _NO_EXTRA if extra is None else extra


@dataclass(slots=True, kw_only=True)
class ReasoningItem:
    """A reasoning item of a Responses answer, kept so it can be sent back.

    ``summary`` holds the summary parts, one string each, with their
    boundaries; ``encrypted_content`` is the opaque reasoning the API returns
    when the request asked for ``reasoning.encrypted_content``.
    """

    # The docstring above is the record's description in the server's OpenAPI
    # document, kept as it is; the item serves every provider now:
    #
    # ``provider`` names who made it: ``"openai"`` (the Responses API: the
    # default, left out of the stored JSON), ``"anthropic"``, ``"google"``. An
    # adapter sends back only its own provider's items and drops the others (a
    # context may move between providers).
    #
    # ``id`` is the provider's id of the item (``""`` when the provider gives
    # none). ``summary`` holds the readable reasoning, one string per part
    # (a Responses summary's parts; Claude's thinking text; Gemini's thought
    # summary). ``data`` is any other opaque data the provider needs back, as
    # it sent it (JSON, e.g. Claude's ``{"type": "thinking", "signature":
    # ...}`` or ``{"type": "redacted_thinking", "data": ...}``). ``position``
    # keeps the item's place in the answer: how many of the answer's tool
    # calls came before it (0: before the text and the first call).

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    id: str
    summary: list[str] = field(default_factory=list)
    encrypted_content: Annotated[str | None, Field(exclude_if=_is_none)] = None
    provider: Annotated[str, Field(exclude_if=_is_openai)] = OPENAI_PROVIDER
    data: Annotated[dict[str, Any] | None, Field(exclude_if=_is_none)] = None
    position: Annotated[int, Field(ge=0, exclude_if=_is_zero)] = 0


class _RareSlot:
    """Where ``InternalMessage``'s three rare fields are kept (see there)."""

    __slots__ = ("_rare",)
    _rare: tuple[str | None, list[ReasoningItem] | None, str | None] | None


_NEW_LIST: Any = object()
"""``InternalMessage(content=...)`` not given: a new empty list."""


@_slots("role", "content", "tool_calls", "tool_result", "message_type", "metadata", "thinking")
@dataclass(kw_only=True, init=False)
class InternalMessage(_RareSlot):
    """The one message shape every provider format is converted to and from."""

    # ``refusal``, ``reasoning`` and ``phase``, which few answers have, are
    # kept together in ``_rare`` (``None`` when all three are), as
    # ``MessageMetadata`` keeps its rare fields: with a slot per field a
    # message was a size class of the allocator larger.
    # Readers on a request's path (the chat format, ``outcome``) read
    # ``_rare`` once.

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    role: Role
    content: list[ContentPart] = field(default_factory=list)
    tool_calls: list[ToolCallRequest] | None = None
    tool_result: ToolCallResult | None = None
    message_type: MessageType = MessageType.TEXT
    metadata: MessageMetadata
    thinking: str | None = None
    refusal: Annotated[str | None, Field(exclude_if=_is_none)] = None
    """The model's refusal, kept apart from its text (an assistant message)."""
    reasoning: Annotated[list[ReasoningItem] | None, Field(exclude_if=_is_none)] = None
    """The answer's reasoning items (each naming its provider), sent back on
    the next request to the same provider."""
    phase: Annotated[str | None, Field(exclude_if=_is_none)] = None
    """The Responses API's ``phase`` of the answer's message (``commentary``,
    ``final_answer``), sent back as it came."""

    def __init__(
        self,
        *,
        role: Role,
        content: list[ContentPart] = _NEW_LIST,
        tool_calls: list[ToolCallRequest] | None = None,
        tool_result: ToolCallResult | None = None,
        message_type: MessageType = MessageType.TEXT,
        metadata: MessageMetadata,
        thinking: str | None = None,
        refusal: str | None = None,
        reasoning: list[ReasoningItem] | None = None,
        phase: str | None = None,
    ) -> None:
        self.role = role
        self.content = [] if content is _NEW_LIST else content
        self.tool_calls = tool_calls
        self.tool_result = tool_result
        self.message_type = message_type
        self.metadata = metadata
        self.thinking = thinking
        self._rare = (
            None
            if refusal is None and reasoning is None and phase is None
            else (refusal, reasoning, phase)
        )

    def __getstate__(self) -> tuple[None, dict[str, Any]]:
        return None, {
            "role": self.role,
            "content": self.content,
            "tool_calls": self.tool_calls,
            "tool_result": self.tool_result,
            "message_type": self.message_type,
            "metadata": self.metadata,
            "thinking": self.thinking,
            "refusal": self.refusal,
            "reasoning": self.reasoning,
            "phase": self.phase,
        }

    @property
    def text(self) -> str:
        """The concatenated text parts."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def notice(self) -> str | None:
        """For a notice the engine wrote (``metadata.extra[NOTICE_KEY]`` on an
        assistant message), the stop it tells of (``"max_iterations"``);
        ``None`` for every other message."""
        if self.role is not Role.ASSISTANT:
            return None
        value = self.metadata.extra.get(NOTICE_KEY)
        return value if isinstance(value, str) else None

    @property
    def outcome(self) -> str | None:
        """How an assistant answer ended, when not normally: ``"refusal"`` (the
        model refused), ``"length"`` (cut at the token limit),
        ``"content_filter"`` (cut or withheld by the provider's filter), or
        ``"incomplete"`` (an answer marked incomplete for another reason: a
        Responses ``incomplete_details.reason``, Claude's ``pause_turn``).
        ``None`` for a normal answer and for any other message."""
        if self.role is not _ASSISTANT:
            return None
        meta = self.metadata
        # the rare fields read at once (every answer's decision reads this)
        kept = meta._rare  # incomplete_reason, logprobs, provider_reason, cancelled
        if kept is not None and kept[3]:
            return None
        rare = self._rare  # refusal, reasoning, phase
        if rare is not None and rare[0] is not None:
            return "refusal"
        found = ABNORMAL_FINISH.get(meta.finish_reason or "")
        if found is not None:
            return found
        if kept is not None and kept[0] is not None:
            return "incomplete"
        return None


_NO_RARE = (None, None, None)
InternalMessage.refusal = _Rare(0, _NO_RARE)  # type: ignore[assignment]
InternalMessage.reasoning = _Rare(1, _NO_RARE)  # type: ignore[assignment]
InternalMessage.phase = _Rare(2, _NO_RARE)  # type: ignore[assignment]


@dataclass(slots=True, kw_only=True)
class MessageNode:
    """A message in the pool, with its id and the id of the message before it."""

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    id: str
    message: InternalMessage
    parent_id: str | None = None
