"""(De)serialising records: the one way in and out of JSON (``docs/storage.md``).

The records of the data model (:class:`ChatContext`, :class:`Branch`,
:class:`MessageNode`, :class:`InternalMessage`, ...) are slotted
dataclasses. pydantic validates and serialises them, through one
``TypeAdapter`` per type, built on first use and kept::

    from turnfsm import records

    data = records.to_json(node)                          # bytes
    node = records.from_json(records.MessageNode, data)   # checked
    plain = records.to_python(ctx)                        # JSON-ready dicts and lists
    ctx = records.from_python(records.ChatContext, plain)

``to_json`` gives the bytes the stores write (``model_dump_json`` of the
pydantic models of earlier releases gave the same bytes); ``to_python``
gives the same data as Python values (``mode="json"`` by default: datetimes
and enums as strings). Fields marked so are left out when ``None`` (or
``False``), as in the stored JSON. ``from_json`` and ``from_python`` refuse
what the record does not take (an unknown key, a wrong type) with pydantic's
``ValidationError``, whose errors name the place (``loc``); ``strict=True``
refuses what would need converting (a number as a string, ...), as the stores
read their own rows.

Any type pydantic can handle may be passed (``list[MessageNode]``, a union,
an event), also to :func:`adapter`, which returns the cached ``TypeAdapter``.
Every adapter is built on its first use, not when this module is imported:
a process that never reads or writes a record (``turnfsm --help``, a
command's usage error) does not pay for pydantic's schemas.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar, cast

from pydantic import TypeAdapter, ValidationError
from pydantic_core import InitErrorDetails

from .model import (
    ApprovalStatus,
    Branch,
    ChatConfig,
    ChatContext,
    ClientTool,
    ClientTools,
    ContentPart,
    FilePart,
    ImagePart,
    InternalMessage,
    MessageMetadata,
    MessageNode,
    MessageType,
    ReasoningItem,
    Role,
    SystemPrompt,
    TextPart,
    TokenUsage,
    ToolCallRequest,
    ToolCallResult,
    TurnProgress,
)

__all__ = [
    "RECORD_TYPES",
    "ApprovalStatus",
    "Branch",
    "ChatConfig",
    "ChatContext",
    "ClientTool",
    "ClientTools",
    "ContentPart",
    "FilePart",
    "ImagePart",
    "InternalMessage",
    "MessageMetadata",
    "MessageNode",
    "MessageType",
    "ReasoningItem",
    "Role",
    "SystemPrompt",
    "TextPart",
    "TokenUsage",
    "ToolCallRequest",
    "ToolCallResult",
    "TurnProgress",
    "adapter",
    "from_json",
    "from_python",
    "to_json",
    "to_python",
]

T = TypeVar("T")

RECORD_TYPES: tuple[type, ...] = (
    Branch,
    ChatConfig,
    ChatContext,
    ClientTool,
    ClientTools,
    FilePart,
    ImagePart,
    InternalMessage,
    MessageMetadata,
    MessageNode,
    ReasoningItem,
    SystemPrompt,
    TextPart,
    TokenUsage,
    ToolCallRequest,
    ToolCallResult,
    TurnProgress,
)
"""The record classes (for ``isinstance``: what was ``isinstance(x, BaseModel)``)."""

_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def adapter(tp: Any) -> TypeAdapter[Any]:
    """The ``TypeAdapter`` of ``tp``, built on first use and kept."""
    found = _ADAPTERS.get(tp)
    if found is None:
        found = _ADAPTERS[tp] = TypeAdapter(tp)
    return found


def to_json(obj: Any, **options: Any) -> bytes:
    """``obj`` as compact JSON (UTF-8 bytes), as the stores write it.

    ``options`` go to ``TypeAdapter.dump_json`` (``exclude={"message_ids"}``,
    ``indent=2``, ...)."""
    return adapter(type(obj)).dump_json(obj, **options)


def to_python(obj: Any, *, mode: Literal["json", "python"] = "json", **options: Any) -> Any:
    """``obj`` as plain Python data: dicts, lists and scalars (``mode="json"``,
    the default: as :func:`to_json` would write it) or with datetimes and enums
    kept (``mode="python"``). ``options`` go to ``TypeAdapter.dump_python``."""
    return adapter(type(obj)).dump_python(obj, mode=mode, **options)


def from_json(tp: type[T], data: str | bytes | bytearray, *, strict: bool | None = None) -> T:
    """A ``tp`` read from JSON text, checked (``pydantic.ValidationError`` if not)."""
    try:
        return cast(T, adapter(tp).validate_json(data, strict=strict))
    except ValidationError as exc:
        raise _as_models_said(exc) from None


def from_python(tp: type[T], data: Any, *, strict: bool | None = None) -> T:
    """A ``tp`` made from plain Python data (as :func:`to_python` gives), checked."""
    try:
        return cast(T, adapter(tp).validate_python(data, strict=strict))
    except ValidationError as exc:
        raise _as_models_said(exc) from None


def _as_models_said(exc: ValidationError) -> ValidationError:
    """``exc``, with an unknown key reported as pydantic models report it
    (``extra_forbidden``, "Extra inputs are not permitted") rather than as a
    dataclass argument ("Unexpected keyword argument"): the same words, and
    the same place, as before records were dataclasses."""
    errors = exc.errors(include_url=False)
    if not any(e["type"] == "unexpected_keyword_argument" for e in errors):
        return exc
    details: list[InitErrorDetails] = []
    for e in errors:
        kind = "extra_forbidden" if e["type"] == "unexpected_keyword_argument" else e["type"]
        detail: InitErrorDetails = {"type": kind, "loc": e["loc"], "input": e["input"]}
        if "ctx" in e and kind != "extra_forbidden":
            detail["ctx"] = e["ctx"]
        details.append(detail)
    return ValidationError.from_exception_data(exc.title, details)
