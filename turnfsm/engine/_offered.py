"""The tools a context is offered, for people: what ``turnfsm chat``'s
``/tools`` and ``GET /api/contexts/{id}/tools`` show."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..model import ChatContext
from ..tools import Tool, ToolRegistry
from ._modes import Modes

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["offered_tools", "tool_summary"]


def offered_tools(engine: Engine, ctx: ChatContext) -> ToolRegistry:
    """The tools the model is offered for ``ctx``: the engine's (its MCP
    servers' included), as the context's mode offers them (with its approval
    overrides) and narrowed to the context's own allow-list; the same view a
    turn of ``ctx`` is given."""
    modes = Modes(engine.modes, engine.tools)
    return modes.tools_for(modes.get(ctx.config.mode), ctx.config.tools)


def tool_summary(tool: Tool) -> dict[str, Any]:
    """``name``, ``description``, ``approval`` (``auto``, ``required``,
    ``deny``, or ``per call`` for a policy function) and ``parameters`` (its
    JSON Schema)."""
    approval = tool.approval if isinstance(tool.approval, str) else "per call"
    return {
        "name": tool.name,
        "description": tool.description,
        "approval": str(approval),
        "parameters": tool.parameters,
    }
