"""What every exporter shares: the branch to write, the source fields an import
kept, the fields of ``metadata.extra`` written back, results by call, timestamps
and data URLs."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from ....errors import BranchError, InvalidInput
from ....model import Branch, ChatContext, InternalMessage, Role

__all__ = [
    "NOTES",
    "base64_data_url",
    "extra_fields",
    "is_synthesized",
    "results_by_call",
    "select_branch",
    "source_fields",
    "stamp",
    "system_text",
]

NOTES = frozenset({"source", "synthesized", "conversions"})
"""Keys of ``metadata.extra`` that are turnfsm's own notes, never written as a
field of a message: ``source`` (the fields of the whole source an import kept;
each exporter writes them at the top level), ``synthesized`` (a result an
import gave a call whose result was missing) and ``conversions`` (how the
engine made a tool's value storable)."""


def select_branch(ctx: ChatContext, branch: str | None) -> tuple[Branch, list[InternalMessage]]:
    """The branch to export (the active one when ``branch`` is None) and its messages."""
    if not isinstance(ctx, ChatContext):
        raise InvalidInput("ctx", f"must be a ChatContext, not {type(ctx).__name__}")
    if branch is not None and not isinstance(branch, str):
        raise InvalidInput("branch", f"must be a branch name or None, not {type(branch).__name__}")
    name = ctx.active_branch_name if branch is None else branch
    found = ctx.branches.get(name)
    if found is None:
        names = ", ".join(sorted(ctx.branches)) or "none"
        raise BranchError(f"context {ctx.id!r} has no branch named {name!r} (branches: {names})")
    return found, [node.message for node in ctx.history(name)]


def system_text(branch: Branch) -> str | None:
    """The branch's system prompt, then its user prompt, joined by a blank line:
    the system message the engine sends first (``SystemPromptEnhancer``)."""
    prompt = branch.system_prompt.content if branch.system_prompt is not None else None
    text = "\n\n".join(p for p in (prompt, branch.user_prompt) if p)
    return text or None


def source_fields(history: list[InternalMessage]) -> dict[str, Any]:
    """The fields of the whole source an import kept on the first message
    (``metadata.extra["source"]``), or an empty dict."""
    if not history:
        return {}
    source = history[0].metadata.extra.get("source")
    return dict(source) if isinstance(source, dict) else {}


def extra_fields(extra: Mapping[str, Any], taken: Iterable[str]) -> dict[str, Any]:
    """The keys of ``extra`` written back as fields: all but turnfsm's notes and
    the fields the format itself fills (``taken``), which win."""
    skip = NOTES.union(taken)
    return {k: v for k, v in extra.items() if k not in skip}


def is_synthesized(msg: InternalMessage) -> bool:
    """A result an import made up for a call whose result was missing."""
    return msg.metadata.extra.get("synthesized") is True


def results_by_call(history: list[InternalMessage]) -> dict[str, InternalMessage]:
    """Each call's tool message, by call id."""
    return {
        m.tool_result.request_id: m
        for m in history
        if m.role is Role.TOOL and m.tool_result is not None
    }


_DATETIME: TypeAdapter[datetime] = TypeAdapter(datetime)


def stamp(value: datetime) -> str:
    """A timestamp as ISO 8601 text, written as a stored context writes it."""
    text: str = _DATETIME.dump_python(value, mode="json")
    return text


def base64_data_url(url: str) -> tuple[str, str] | None:
    """``data:<mime>;base64,<data>`` as (mime, data) when the data is valid base64."""
    head, sep, data = url.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        return None
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return head[len("data:") : -len(";base64")], data
