"""The set of tools offered to the model, by name."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from turnfsm.errors import ToolDefinitionError

from ._question import QuestionTool
from ._spec import Tool

__all__ = ["ToolRegistry"]


class ToolRegistry:
    """An immutable, ordered set of tools with unique names.

    The OpenAI definitions are computed once; :meth:`definitions` returns the same
    list on every call.
    """

    __slots__ = ("_by_name", "_definitions", "_names", "asks", "hosts")

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        """Raises :class:`~turnfsm.errors.ToolDefinitionError` on a duplicate name."""
        by_name: dict[str, Tool] = {}
        for item in tools:
            if not isinstance(item, Tool):
                hint = " (decorate it with @tool)" if callable(item) else ""
                raise ToolDefinitionError(
                    f"ToolRegistry takes Tool objects, not {type(item).__name__}{hint}"
                )
            if item.name in by_name:
                raise ToolDefinitionError(
                    f"two tools are named {item.name!r}; names must be unique"
                )
            by_name[item.name] = item
        self._by_name = by_name
        self._names = tuple(by_name)
        self._definitions = [item.definition() for item in by_name.values()]
        self.asks = any(isinstance(item, QuestionTool) for item in by_name.values())
        """Some tool is a question tool: without one, no call is a question,
        and every pending call's approval need not ask which tool it calls."""
        self.hosts = any(item._runs_children for item in by_name.values())
        """Some tool is a sub-task tool (:func:`~turnfsm.tools.subtask`): only
        those run children, so a run of the others needs no host for them."""

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or ``None``."""
        return self._by_name.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        """The tool names, in registration order."""
        return self._names

    def definitions(self) -> list[dict[str, Any]]:
        """The OpenAI tool definitions, in order (the same list every call; do not mutate)."""
        return self._definitions

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._by_name

    def __len__(self) -> int:
        return len(self._by_name)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._by_name.values())

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._names)!r})"
