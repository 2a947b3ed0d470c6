"""Toolsets: tools that come from somewhere outside the program, and change.

A :class:`Toolset` (an MCP server, :mod:`turnfsm.tools.mcp`) is started with the
engine (``async with Engine(toolsets=[...])``) and closed with it. Its tools
join the engine's own; when its list changes, it calls the callbacks given to
:meth:`Toolset.on_change` and the engine offers the new list from the next
request on. :func:`merge_tools` is the one rule for names: a name is used by
one tool only, the first in order (the engine's own tools, then each toolset in
the order given).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from turnfsm.errors import ToolDefinitionError

from ._spec import Tool

__all__ = ["Toolset", "merge_tools"]

_log = logging.getLogger("turnfsm.tools")


@runtime_checkable
class Toolset(Protocol):
    """A source of tools with a lifetime: started before its tools are offered,
    closed when the engine closes."""

    @property
    def name(self) -> str:
        """The toolset's name, in errors and logs."""
        ...

    async def start(self) -> None:
        """Connect and list the tools; raise :class:`~turnfsm.errors.ToolsetError`
        when that is not possible."""
        ...

    async def aclose(self) -> None:
        """Stop: nothing of the toolset (no process, no connection) outlives it,
        even when the calling task is being cancelled (the toolset shields what
        must finish). Called by the task that called :meth:`start`; a second
        call does nothing."""
        ...

    def tools(self) -> Sequence[Tool]:
        """The tools as last listed (empty before :meth:`start`)."""
        ...

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (with no arguments) each time :meth:`tools` changes."""
        ...


def merge_tools(own: Sequence[Tool], toolsets: Sequence[Toolset], *, strict: bool) -> list[Tool]:
    """The engine's own tools, then each toolset's, in order.

    A name is used by one tool only. With ``strict`` (when the engine starts) a
    second tool of the same name is a :class:`~turnfsm.errors.ToolDefinitionError`
    naming both sources; without it (a toolset's list changed while the engine
    runs) the later one is left out and a warning logged.
    """
    out = list(own)
    where = {t.name: "the engine's own tools" for t in own}
    for toolset in toolsets:
        for item in toolset.tools():
            first = where.get(item.name)
            if first is None:
                where[item.name] = f"toolset {toolset.name!r}"
                out.append(item)
                continue
            message = (
                f"two tools are named {item.name!r} ({first} and toolset {toolset.name!r}); "
                "give one of the toolsets a prefix"
            )
            if strict:
                raise ToolDefinitionError(message)
            _log.warning("%s: the one of toolset %r is not offered", message, toolset.name)
    return out
