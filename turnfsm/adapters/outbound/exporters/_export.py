"""The export of a context's branch in any of the formats (:func:`export_context`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, get_args

from ....errors import InvalidInput
from ....model import ChatContext
from ._conversation_entries import export_conversation_entries
from ._openai_messages import export_openai_messages
from ._session_records import export_session_records

__all__ = [
    "EXPORT_FORMATS",
    "ExportFormat",
    "export_context",
]

ExportFormat = Literal["session", "entries", "openai"]
EXPORT_FORMATS: tuple[str, ...] = get_args(ExportFormat)

_EXPORTERS: dict[str, Callable[..., Any]] = {
    "session": export_session_records,
    "entries": export_conversation_entries,
    "openai": export_openai_messages,
}


def export_context(ctx: ChatContext, format: ExportFormat, *, branch: str | None = None) -> Any:
    """The branch ``branch`` of ``ctx`` (the active one by default) in ``format``,
    as a JSON-ready value (dicts, lists, strings, numbers, booleans, None).

    Raises :class:`~turnfsm.errors.InvalidInput` for an unknown format and
    :class:`~turnfsm.errors.BranchError` for a branch the context does not have.
    """
    exporter = _EXPORTERS.get(format) if isinstance(format, str) else None
    if exporter is None:
        raise InvalidInput("format", f"must be one of {', '.join(EXPORT_FORMATS)}, not {format!r}")
    return exporter(ctx, branch=branch)
