"""The inbound chat request bodies (``contextManagement`` and ``messages``),
parsed into one internal structure.

Two wire formats are accepted:

- the ``contextManagement`` body: ``{"contextManagement": {"currentMessage": {...},
  "conversationContext": [...]}, "userLanguage": "en", "userTimezone": "..."}``,
  whose current message comes from a ``user`` or a ``frontend_operator``;
- the legacy ``messages`` body: ``{"messages": [...], "userLanguage": ...,
  "userTimezone": ...}`` (at least one message; the last one is the current
  message, the ones before it are the conversation context).

Both are validated by one pydantic union (:data:`_BODY`), tagged with the format
names, and normalised into :class:`InboundRequest`. A body that fits neither is
refused with :class:`~turnfsm.errors.InvalidInput` whose message lists, for each
format, every problem with its JSON path (``contextManagement.currentMessage.role:
Input should be 'user' or 'frontend_operator'``, ``messages: Field required``).

Decisions (the formats are silent on them):

- **Unknown keys are ignored, at every level**, as the formats' own schema
  objects do: a client that sends an extra key (a legacy message's ``id``, a
  top-level ``"stream": true``) keeps working. The value is dropped, never
  stored; with ``log=`` each key path is logged once per format per process
  (:class:`UnknownKeys`). Wrong types and missing required fields are still
  refused. ``unknown="refuse"`` (the request body import, and telling a body
  from OpenAI's ``messages``) refuses an unknown key with its JSON path.
- A body that carries both ``contextManagement`` and ``messages`` is
  ambiguous: it is refused rather than read as either.
- ``conversationContext`` may be left out (a first message has no context);
  ``userLanguage`` defaults to ``"en"``; ``null`` is not accepted for it.
- Context messages may have the roles ``user``, ``assistant``, ``system`` and
  ``frontend_operator``; the current message (in the legacy format: the last
  one) must be from a ``user`` or a ``frontend_operator`` and have some text.
- Timestamps are ISO 8601 (or Unix seconds); one without an offset is taken as UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from ...errors import InvalidInput
from ...model import (
    InternalMessage,
    JSONProblem,
    MessageMetadata,
    MessageNode,
    Role,
    TextPart,
    check_json,
)
from ...model._message import extra_of
from ._unknown_keys import UNKNOWN_KEYS, key_path

__all__ = [
    "InboundFormat",
    "InboundMessage",
    "InboundRequest",
    "UnknownKeyRule",
    "format_error_path",
    "parse_request",
    "said",
    "said_by",
]

InboundFormat = Literal["context_management", "legacy"]

_FORMAT_LABELS: dict[str, str] = {
    "context_management": "as a contextManagement body",
    "legacy": "as a legacy messages body",
}


def _as_utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


_Timestamp = Annotated[datetime, AfterValidator(_as_utc)]
_ContextRole = Literal["user", "assistant", "system", "frontend_operator"]
_CurrentRole = Literal["user", "frontend_operator"]
_WIRE = ConfigDict(extra="allow", frozen=True, defer_build=True)
"""Unknown keys are kept on the wire models (``model_extra``) only to be
named (:func:`_unknown_keys`); nothing past :meth:`to_inbound` holds them.
Like every model of this module, their validators are built on first use
(``defer_build``), not by ``import turnfsm``."""


# --- the wire formats ---------------------------------------------------------------------


class _ContextMessage(BaseModel):
    model_config = _WIRE
    role: _ContextRole
    content: str
    timestamp: _Timestamp | None = None
    message_id: str | None = Field(default=None, alias="messageId")


class _CurrentMessage(BaseModel):
    model_config = _WIRE
    role: _CurrentRole
    content: str = Field(min_length=1)
    timestamp: _Timestamp | None = None
    message_id: str | None = Field(default=None, alias="messageId")


class _ContextManagement(BaseModel):
    model_config = _WIRE
    current_message: _CurrentMessage = Field(alias="currentMessage")
    conversation_context: list[_ContextMessage] = Field(
        default_factory=list, alias="conversationContext"
    )


class _ContextManagementBody(BaseModel):
    model_config = _WIRE
    context_management: _ContextManagement = Field(alias="contextManagement")
    user_language: str = Field(default="en", alias="userLanguage")
    user_timezone: str | None = Field(default=None, alias="userTimezone")

    def to_inbound(self) -> InboundRequest:
        cm = self.context_management
        return InboundRequest(
            current=InboundMessage.of(cm.current_message),
            history=[InboundMessage.of(m) for m in cm.conversation_context],
            user_language=self.user_language,
            user_timezone=self.user_timezone,
            format="context_management",
        )


class _LegacyBody(BaseModel):
    model_config = _WIRE
    messages: list[_ContextMessage] = Field(min_length=1)
    user_language: str = Field(default="en", alias="userLanguage")
    user_timezone: str | None = Field(default=None, alias="userTimezone")

    @field_validator("messages")
    @classmethod
    def _last_is_current(cls, messages: list[_ContextMessage]) -> list[_ContextMessage]:
        last = messages[-1]
        where = f"messages[{len(messages) - 1}]"
        if last.role not in ("user", "frontend_operator"):
            raise PydanticCustomError(
                "current_message_role",
                "the last message is the current one: its role must be 'user' or "
                "'frontend_operator', not '{role}' ({where}.role)",
                {"role": last.role, "where": where},
            )
        if not last.content:
            raise PydanticCustomError(
                "current_message_empty",
                "the last message is the current one: it needs some text ({where}.content)",
                {"where": where},
            )
        return messages

    def to_inbound(self) -> InboundRequest:
        *history, current = self.messages
        return InboundRequest(
            current=InboundMessage.of(current),
            history=[InboundMessage.of(m) for m in history],
            user_language=self.user_language,
            user_timezone=self.user_timezone,
            format="legacy",
        )


_BODY: TypeAdapter[_ContextManagementBody | _LegacyBody] = TypeAdapter(
    Annotated[_ContextManagementBody, Tag("context_management")]
    | Annotated[_LegacyBody, Tag("legacy")],
    config=ConfigDict(defer_build=True),
)


# --- the internal structure ---------------------------------------------------------------


class InboundMessage(BaseModel):
    """One message of an inbound request, whichever format it came in."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    role: Role
    content: str
    timestamp: datetime | None = None
    message_id: str | None = None

    @classmethod
    def of(cls, wire: _ContextMessage | _CurrentMessage) -> InboundMessage:
        return cls(
            role=Role(wire.role),
            content=wire.content,
            timestamp=wire.timestamp,
            message_id=wire.message_id,
        )

    def to_message(self, now: datetime, extra: dict[str, Any] | None = None) -> InternalMessage:
        """This message as stored: its timestamp (else ``now``), its id in ``metadata.extra``."""
        info: dict[str, Any] = {}
        if self.message_id is not None:
            info["message_id"] = self.message_id
        info.update(extra or {})
        return InternalMessage(
            role=self.role,
            content=[TextPart(text=self.content)] if self.content else [],
            metadata=MessageMetadata(created_at=self.timestamp or now, extra=info),
        )


class InboundRequest(BaseModel):
    """A chat request, normalised from either request body format.

    ``current`` is the message to answer now (role ``user`` or
    ``frontend_operator``); ``history`` is the conversation context before it,
    oldest first; ``format`` says which wire format the body used.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    current: InboundMessage
    history: list[InboundMessage] = Field(default_factory=list)
    user_language: str = "en"
    user_timezone: str | None = None
    format: InboundFormat

    def to_messages(self, *, now: datetime | None = None) -> list[InternalMessage]:
        """The history, then the current message, as stored messages.

        Each message keeps its role (a frontend operator stays
        ``Role.FRONTEND_OPERATOR``; the chat format view speaks for it as a named
        user), its timestamp (else ``now``, by default the current UTC time) and
        its ``messageId`` as ``metadata.extra["message_id"]``. The current
        message is flagged with ``metadata.extra["current"] = True`` and carries
        ``user_language`` (and ``user_timezone`` when given) in ``metadata.extra``.

        The ``[CURRENT MESSAGE FROM USER/FRONTEND_OPERATOR]:`` prefix of the format is
        *not* written into the stored content: telling the model which message is
        the current one is a prompt-shaping concern (the built-in enhancer
        :class:`~turnfsm.enhancers.CurrentMessageMarker` reads the flag and marks
        it in the view; :class:`~turnfsm.enhancers.UserLocale` shows the language
        and time zone), and stored history stays what was said.
        ``engine.send_request(body)`` stores these and answers the current message.
        """
        at = now if now is not None else datetime.now(UTC)
        out = [m.to_message(at) for m in self.history]
        flags: dict[str, Any] = {"current": True, "user_language": self.user_language}
        if self.user_timezone is not None:
            flags["user_timezone"] = self.user_timezone
        out.append(self.current.to_message(at, flags))
        return out


# --- what a body carries of a stored conversation ----------------------------------------

_PLAIN = (Role.USER, Role.ASSISTANT, Role.SYSTEM, Role.FRONTEND_OPERATOR)


def said(message: InternalMessage) -> tuple[Role, str] | None:
    """A stored message as a request body's context would carry it: its role and
    text; None for what a body does not carry (tool messages, tool calls with no
    text, summaries)."""
    if message.role not in _PLAIN:
        return None
    if message.role is Role.SYSTEM and "summary" in message.metadata.extra:
        return None
    if message.role is Role.ASSISTANT and message.tool_calls and not message.text:
        return None
    return message.role, message.text


def said_by(nodes: list[MessageNode]) -> list[InboundMessage]:
    """What a client holding these messages would resend of them, in order (see
    :func:`said`), each with its client id if it has one."""
    out: list[InboundMessage] = []
    for n in nodes:
        found = said(n.message)
        if found is not None:
            mid = extra_of(n.message.metadata).get("message_id")
            out.append(
                InboundMessage(
                    role=found[0],
                    content=found[1],
                    message_id=mid if isinstance(mid, str) else None,
                )
            )
    return out


# --- parsing ------------------------------------------------------------------------------


def format_error_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a JSON path: ``messages[2].role``; ``$`` for the root."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "$"


def _describe(errors: list[ErrorDetails]) -> str:
    by_format: dict[str, list[str]] = {name: [] for name in _FORMAT_LABELS}
    for err in errors:
        tag, *rest = err["loc"]
        msg = "Input should be an object" if err["type"] == "model_type" else err["msg"]
        by_format.setdefault(str(tag), []).append(f"{format_error_path(tuple(rest))}: {msg}")
    parts = [
        f"{_FORMAT_LABELS.get(tag, tag)}: [" + "; ".join(problems) + "]"
        for tag, problems in by_format.items()
        if problems
    ]
    return "fits neither format; " + "; ".join(parts)


UnknownKeyRule = Literal["ignore", "refuse"]
"""What :func:`parse_request` does with a key its format does not know."""


def _extra_keys(model: BaseModel, exact: str, shape: str) -> list[tuple[str, str]]:
    return [(key_path(exact, k), key_path(shape, k)) for k in model.model_extra or {}]


def _unknown_keys(parsed: _ContextManagementBody | _LegacyBody) -> list[tuple[str, str]]:
    """The keys of ``parsed`` that its format does not know, in body order:
    (JSON path, the path by shape: ``messages[].id``)."""
    found = _extra_keys(parsed, "", "")
    if isinstance(parsed, _LegacyBody):
        for i, m in enumerate(parsed.messages):
            found += _extra_keys(m, f"messages[{i}]", "messages[]")
        return found
    cm = parsed.context_management
    found += _extra_keys(cm, "contextManagement", "contextManagement")
    current = "contextManagement.currentMessage"
    found += _extra_keys(cm.current_message, current, current)
    for i, m in enumerate(cm.conversation_context):
        where = "contextManagement.conversationContext"
        found += _extra_keys(m, f"{where}[{i}]", f"{where}[]")
    return found


def parse_request(
    body: Any, *, unknown: UnknownKeyRule = "ignore", log: Any = None
) -> InboundRequest:
    """Parse a request body of either format into an :class:`InboundRequest`.

    ``body`` is the decoded JSON (a dict). Raises :class:`InvalidInput` (``where``
    is ``"request body"``) listing what is wrong with the body in each format.

    A key the body's format does not know is ignored (``unknown="ignore"``):
    its value is in no part of the result. With ``log`` (a structlog logger)
    its path is logged once per format per process (:data:`UNKNOWN_KEYS`).
    ``unknown="refuse"`` raises :class:`InvalidInput` naming the first one
    by its JSON path instead.
    """
    if not isinstance(body, dict):
        raise InvalidInput("request body", f"must be a JSON object, not {type(body).__name__}")
    if unknown not in ("ignore", "refuse"):
        raise InvalidInput("unknown", f"must be 'ignore' or 'refuse', not {unknown!r}")
    try:  # what a store could not load back is refused here, with its JSON path
        check_json(body, "$", max_bytes=None)
    except JSONProblem as exc:
        raise InvalidInput(exc.path, exc.reason) from None
    if "contextManagement" in body and "messages" in body:
        raise InvalidInput(
            "request body",
            "has both contextManagement and messages: a body is in one format, the "
            "contextManagement body or the legacy messages body",
        )
    try:
        parsed = _BODY.validate_python(body)
    except ValidationError as exc:
        raise InvalidInput("request body", _describe(exc.errors())) from exc
    extra = _unknown_keys(parsed)
    if extra:
        cm = isinstance(parsed, _ContextManagementBody)
        if unknown == "refuse":
            label = "a contextManagement body" if cm else "a legacy messages body"
            raise InvalidInput(extra[0][0], f"is not a key of {label}")
        if log is not None:
            shapes = list(dict.fromkeys(shape for _, shape in extra))
            UNKNOWN_KEYS.report(log, "context_management" if cm else "legacy", shapes)
    request = parsed.to_inbound()
    seen: set[str] = set()
    for i, m in enumerate([*request.history, request.current]):
        if m.message_id is None:
            continue
        if m.message_id in seen:
            where = (
                f"messages[{i}]"
                if request.format == "legacy"
                else "contextManagement.currentMessage"
                if i == len(request.history)
                else f"contextManagement.conversationContext[{i}]"
            )
            raise InvalidInput(
                f"{where}.messageId", f"{m.message_id!r} is the id of an earlier message too"
            )
        seen.add(m.message_id)
    return request
