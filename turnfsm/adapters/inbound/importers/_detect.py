"""Which format a source is in (:func:`detect_format`), and the import of any
of them (:func:`import_context`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, get_args

from ....errors import InvalidInput
from ....model import ChatContext
from .._request import parse_request
from ._chat_context import import_chat_context, is_chat_context
from ._checks import Ids, kind_of
from ._conversation_entries import import_conversation_entries
from ._openai_messages import import_openai_messages
from ._request_body import import_request_body
from ._session_records import import_session_records

__all__ = [
    "IMPORT_FORMATS",
    "ImportFormat",
    "count_tool_calls",
    "detect_format",
    "import_context",
]

ImportFormat = Literal["session", "entries", "openai", "request", "chatcontext"]
IMPORT_FORMATS: tuple[str, ...] = get_args(ImportFormat)

# --- detection and dispatch ---------------------------------------------------------------

_REQUEST_ONLY_KEYS = {"userLanguage", "userTimezone"}


def detect_format(data: Any) -> ImportFormat:
    """Which import fits ``data``, by its shape.

    - an object with ``records``, or an array whose first item has ``type``
      ``"message"``/``"tool_call"``: ``session``;
    - an object with ``entries``, or an array whose first item has ``user`` or
      ``assistant`` and no ``role``: ``entries``;
    - an object with ``contextManagement``; or with ``messages`` that is a valid
      request body or has ``userLanguage``/``userTimezone``: ``request``;
    - an array whose first item has a ``role``, or any other object with
      ``messages``: ``openai``;
    - an object with ``message_pool`` and ``branches`` and no ``schema_version``
      (the architecture's context document): ``chatcontext``.

    Anything else raises :class:`InvalidInput` saying which shapes are accepted.
    """
    if isinstance(data, dict):
        if is_chat_context(data):
            return "chatcontext"
        if "records" in data:
            return "session"
        if "entries" in data:
            return "entries"
        if "contextManagement" in data:
            return "request"
        if "messages" in data:
            if _REQUEST_ONLY_KEYS & set(data):
                return "request"
            try:  # a key the formats do not know (a message's name): OpenAI's
                parse_request(data, unknown="refuse")
            except InvalidInput:
                return "openai"
            return "request"
    elif isinstance(data, list):
        if not data:
            raise InvalidInput("$", "is an empty array: there is nothing to import")
        first = data[0]
        if isinstance(first, dict):
            if first.get("type") in ("message", "tool_call"):
                return "session"
            if "role" in first:
                return "openai"
            if "user" in first or "assistant" in first:
                return "entries"
    raise InvalidInput(
        "$",
        f'{kind_of(data)} of no known format; expected a session ({{"records": [...]}}), '
        'conversation entries ([{"user": ..., "assistant": ...}]), OpenAI messages '
        '([{"role": ..., "content": ...}]) or a request body ({"contextManagement": ...} '
        'or {"messages": [...]}) or a context document ({"message_pool": ..., '
        '"branches": ...})',
    )


_IMPORTERS: dict[str, Callable[..., ChatContext]] = {
    "session": import_session_records,
    "entries": import_conversation_entries,
    "openai": import_openai_messages,
    "request": import_request_body,
    "chatcontext": import_chat_context,
}


def import_context(
    data: Any,
    format: ImportFormat | Literal["auto"] = "auto",
    *,
    now: datetime | None = None,
    ids: Ids | None = None,
) -> ChatContext:
    """Import ``data`` in the given format (``"auto"``: :func:`detect_format`)."""
    fmt = detect_format(data) if format == "auto" else format
    importer = _IMPORTERS.get(fmt) if isinstance(fmt, str) else None
    if importer is None:
        raise InvalidInput(
            "format", f"must be 'auto' or one of {', '.join(IMPORT_FORMATS)}, not {fmt!r}"
        )
    return importer(data, now=now, ids=ids)


def count_tool_calls(ctx: ChatContext) -> int:
    """How many tool calls the context's messages ask for (all branches)."""
    return sum(len(n.message.tool_calls or ()) for n in ctx.message_pool.values())
