"""Checks of the engine's public arguments, made before anything is loaded or stored.

Each check raises :class:`~turnfsm.errors.InvalidInput` whose ``where`` names
the argument (and, inside a JSON payload or a list of content parts, the
path: ``parameters.a.b``, ``content[0].text``). Nothing is changed when an
argument is refused.

The rules:

- **ids** (context ids, branch names): a ``str`` of 1 to :data:`MAX_ID_LENGTH`
  characters, with no control character (Unicode category Cc, e.g. ``\\n``,
  ``\\x00``) and no lone surrogate. The ids the engine makes itself pass.
- **tool call ids**: a non-empty ``str`` with no lone surrogate (they are only
  looked up; the model chose them).
- **names** (model, mode, agent role): a ``str`` of at most
  :data:`MAX_ID_LENGTH` characters, no control character, no lone surrogate.
- **text** (messages, prompts, reasons, paths): a ``str`` with no lone
  surrogate, at most :data:`~turnfsm.model.MAX_JSON_BYTES` bytes as UTF-8.
- **JSON payloads** (``parameters``): the rules of :mod:`turnfsm.model._json`
  (depth, size, string keys, finite numbers, valid text).
- **counts**: an ``int`` (``bool`` is not one) within the stated range.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from typing import Any, Final

from ..errors import InvalidInput
from ..model import (
    MAX_ID_LENGTH,
    MAX_JSON_BYTES,
    MAX_TITLE_LENGTH,
    FilePart,
    HistoryOverride,
    ImagePart,
    JSONProblem,
    TextPart,
    check_json,
    has_lone_surrogate,
    id_problem,
    title_problem,
)
from ..model._message import text_part
from ..tools import ToolRegistry, Toolset

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_TITLE_LENGTH",
    "UNSET",
    "Unset",
    "check_call_ids",
    "check_content",
    "check_count",
    "check_history_override",
    "check_id",
    "check_name",
    "check_parameters",
    "check_text",
    "check_title",
    "check_tools",
    "check_toolsets",
]


class Unset(Enum):
    """The type of :data:`UNSET`."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET
"""An optional argument left out, where ``None`` means something (no prompt,
no title): ``update_config(title=None)`` clears the title, leaving ``title``
out keeps it."""


def _kind(value: object) -> str:
    return "None" if value is None else type(value).__name__


def _surrogate_reason(text: str) -> str | None:
    if not has_lone_surrogate(text):
        return None
    i = next(i for i, ch in enumerate(text) if 0xD800 <= ord(ch) <= 0xDFFF)
    return f"lone surrogate U+{ord(text[i]):04X} at offset {i} (not valid Unicode)"


def check_id(where: str, value: Any) -> str:
    """A context id or branch name (see the module docstring)."""
    reason = id_problem(value)
    if reason is not None:
        raise InvalidInput(where, reason)
    return value  # type: ignore[no-any-return]


def check_name(where: str, value: Any) -> str:
    """A model name, mode or agent role: like an id, but it may be empty."""
    if isinstance(value, str) and not value:
        return value
    return check_id(where, value)


def check_text(where: str, value: Any, *, optional: bool = False, empty: bool = True) -> Any:
    """A text (see the module docstring); ``optional`` allows ``None``."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidInput(where, f"must be a string, not {_kind(value)}")
    if not value and not empty:
        raise InvalidInput(where, "must not be empty")
    reason = _surrogate_reason(value)
    if reason is not None:
        raise InvalidInput(where, reason)
    if len(value) * 4 > MAX_JSON_BYTES and len(value.encode()) > MAX_JSON_BYTES:
        raise InvalidInput(where, f"is over the limit of {MAX_JSON_BYTES} bytes as UTF-8")
    return value


def check_call_ids(where: str, value: Any) -> list[str]:
    """One tool call id or a list (any iterable but a mapping) of them; at least one."""
    if isinstance(value, str):  # one id (the common case): no ABC checks
        check_text(where, value, empty=False)
        return [value]
    ids = value
    if not isinstance(ids, Iterable) or isinstance(ids, bytes | bytearray | Mapping):
        raise InvalidInput(where, f"must be a tool call id or a list of them, not {_kind(value)}")
    ids = list(ids)
    if not ids:
        raise InvalidInput(where, "give at least one tool call id")
    for i, item in enumerate(ids):
        check_text(f"{where}[{i}]", item, empty=False)
    return ids


def check_count(where: str, value: Any, *, minimum: int, optional: bool = False) -> Any:
    """An ``int`` (not a ``bool``) of at least ``minimum``."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(where, f"must be an integer, not {_kind(value)}")
    if value < minimum:
        raise InvalidInput(where, f"must be >= {minimum}, not {value}")
    return value


MAX_HISTORY_SETTING = 100_000_000
"""The largest number a context's history setting may be (calls or tokens)."""


def check_history_override(where: str, value: Any, *, minimum: int) -> HistoryOverride:
    """A context's own history setting: ``None`` (the engine's), ``"off"``, or
    an ``int`` (not a ``bool``) from ``minimum`` to :data:`MAX_HISTORY_SETTING`."""
    if value is None:
        return None
    if isinstance(value, str) and value == "off":
        return "off"
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(
            where, f'must be an integer, "off" or None (the engine\'s), not {_kind(value)}'
        )
    if not minimum <= value <= MAX_HISTORY_SETTING:
        raise InvalidInput(where, f"must be from {minimum} to {MAX_HISTORY_SETTING:,}, not {value}")
    return value


def check_parameters(where: str, value: Any) -> dict[str, Any]:
    """A JSON object (or ``None`` for an empty one) that a store can hold."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput(where, f"must be a dict (a JSON object), not {_kind(value)}")
    try:
        check_json(value, where)
    except JSONProblem as exc:
        raise InvalidInput(exc.path, exc.reason) from None
    return dict(value)


_PART_FIELDS: dict[type, tuple[str, ...]] = {
    TextPart: ("text",),
    ImagePart: ("url",),
    FilePart: ("name", "mime_type", "data"),
}


def check_content(where: str, content: Any) -> list[Any]:
    """A message: a text with something in it besides white space, or a
    non-empty list (any iterable but a mapping) of content parts."""
    if isinstance(content, str):
        check_text(where, content, empty=False)
        if content.isspace():
            raise InvalidInput(where, "a message needs some text, not only white space")
        return [text_part(content)]
    if not isinstance(content, Iterable) or isinstance(content, bytes | bytearray | Mapping):
        raise InvalidInput(
            where, f"must be a text or a list of content parts, not {_kind(content)}"
        )
    parts = list(content)
    if not parts:
        raise InvalidInput(where, "a message needs at least one content part")
    texts: list[str] = []
    for i, part in enumerate(parts):
        fields = next((f for k, f in _PART_FIELDS.items() if isinstance(part, k)), None)
        if fields is None:
            raise InvalidInput(f"{where}[{i}]", f"not a content part: {_kind(part)}")
        for name in fields:
            texts.append(check_text(f"{where}[{i}].{name}", getattr(part, name, None)))
        detail = getattr(part, "detail", None)
        if isinstance(part, ImagePart) and detail not in (None, "auto", "low", "high"):
            raise InvalidInput(
                f"{where}[{i}].detail", f"must be 'auto', 'low', 'high' or None, not {detail!r}"
            )
    chars = sum(map(len, texts))
    if chars * 4 > MAX_JSON_BYTES and sum(len(t.encode()) for t in texts) > MAX_JSON_BYTES:
        raise InvalidInput(where, f"is over the limit of {MAX_JSON_BYTES} bytes as UTF-8")
    return parts


def check_title(where: str, value: Any) -> str | None:
    """A title: ``None``, or one line of 1 to :data:`~turnfsm.model.MAX_TITLE_LENGTH`
    characters with no control character and no lone surrogate."""
    if value is None:
        return None
    reason = title_problem(value)
    if reason is not None:
        raise InvalidInput(where, reason)
    return value  # type: ignore[no-any-return]


def check_tools(where: str, tools: object, registry: ToolRegistry) -> list[str] | None:
    """An allow-list of tool names: ``None``, or names of ``registry`` (each once)."""
    if tools is None:
        return None
    if isinstance(tools, str | bytes) or not isinstance(tools, Sequence):
        raise InvalidInput(where, f"must be a list of tool names or None, not {tools!r}")
    out: list[str] = []
    for i, name in enumerate(tools):
        if not isinstance(name, str):
            raise InvalidInput(f"{where}[{i}]", f"must be a tool name, not {name!r}")
        if name not in registry:
            known = ", ".join(registry.names) or "(none)"
            raise InvalidInput(
                f"{where}[{i}]", f"the engine has no tool named {name!r} (its tools: {known})"
            )
        if name not in out:
            out.append(name)
    return out


def check_toolsets(toolsets: Iterable[Toolset]) -> tuple[Toolset, ...]:
    """``Engine(toolsets=...)``: a sequence of :class:`~turnfsm.tools.Toolset`."""
    if isinstance(toolsets, str | bytes) or not isinstance(toolsets, Iterable):
        raise InvalidInput("toolsets", "must be a sequence of toolsets")
    sets = tuple(toolsets)
    for i, toolset in enumerate(sets):
        if not isinstance(toolset, Toolset):
            raise InvalidInput(
                f"toolsets[{i}]",
                f"not a toolset (start, aclose, tools, on_change): {toolset!r}",
            )
    return sets
