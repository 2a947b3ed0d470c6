"""Messages and tool calls: the atoms of a conversation (see docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, NoReturn

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


class _OpenTextPart:
    """TextPart's slots, without its frozen ``__setattr__``
    (see :func:`text_part`)."""

    __slots__ = ("text", "type")
    type: str
    text: str


_new = object.__new__


def text_part(text: str) -> TextPart:
    """``TextPart(text=text)``, the same record, made with plain slot writes:
    a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, several times the cost, and a turn makes one for
    its message and one for its answer (as ``_context.turn_progress`` does;
    ``tests/test_open_records.py`` holds the two to the same record)."""
    part = _new(_OpenTextPart)
    part.type = "text"
    part.text = text
    # laid out as a TextPart (the same slots), it becomes one
    part.__class__ = TextPart  # type: ignore[assignment]
    return part  # type: ignore[return-value]


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


class _NoContent(list):  # type: ignore[type-arg]
    """The content of a message the engine makes without any (a tool call's
    answer, a tool's result): one empty list shared by all of them, which
    refuses every change, as an engine keeps thousands of such messages and
    an empty list of their own for each. A copy of a message
    (:func:`~turnfsm.model.detached`, which is what the engine hands out)
    gets a list of its own; a copy or pickle of the list itself is the same
    one list."""

    __slots__ = ()

    def __new__(cls, *items: Iterable[Any]) -> Any:
        if items:  # a copy made through the type (``dataclasses.asdict``): a list of its own
            return list(*items)
        return super().__new__(cls)

    def __init__(self, *items: Iterable[Any]) -> None:
        super().__init__()

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("a message's shared empty content cannot change: give it a list of its own")

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __copy__(self) -> _NoContent:
        return self

    def __deepcopy__(self, memo: object) -> _NoContent:
        return self

    def __reduce__(self) -> str:
        return "NO_CONTENT"


NO_CONTENT: list[ContentPart] = _NoContent()
"""The shared empty content of the messages the engine makes without any
(see :class:`_NoContent`); not exported: a message made elsewhere gets a
list of its own."""


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
    """Where ``MessageMetadata.extra`` is kept (see there)."""

    __slots__ = ("_extra",)
    _extra: dict[str, Any] | None


@dataclass(slots=True, kw_only=True, init=False)
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
    # which makes nothing. ``_extra`` is a slot of its own, not the field's
    # (which stays unused: the object's size class is the same with it), so
    # that the constructor and ``extra_of`` use it as plain attribute.

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
        self.cancelled = cancelled
        self._extra = extra  # type: ignore[misc]  # mypy does not see _ExtraSlot's slot
        self.incomplete_reason = incomplete_reason
        self.logprobs = logprobs
        self.provider_reason = provider_reason


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


MessageMetadata.extra = _ExtraMadeOnRead()  # type: ignore[assignment,misc]  # its slot unused
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


@dataclass(slots=True, kw_only=True)
class InternalMessage:
    """The one message shape every provider format is converted to and from."""

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
        if self.role is not _ASSISTANT or self.metadata.cancelled:
            return None
        if self.refusal is not None:
            return "refusal"
        meta = self.metadata
        found = ABNORMAL_FINISH.get(meta.finish_reason or "")
        if found is not None:
            return found
        if meta.incomplete_reason is not None:
            return "incomplete"
        return None


@dataclass(slots=True, kw_only=True)
class MessageNode:
    """A message in the pool, with its id and the id of the message before it."""

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    id: str
    message: InternalMessage
    parent_id: str | None = None
