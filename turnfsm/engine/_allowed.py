"""The engine's tools as one context sees them (its ``config.tools``)."""

from __future__ import annotations

from ..model import ChatConfig, tool_allowed
from ..tools import ToolRegistry

__all__ = ["usable_tools"]


def usable_tools(registry: ToolRegistry, config: ChatConfig) -> ToolRegistry:
    """The tools of ``registry`` that a context with ``config`` may use.

    The approval policy and the executor get this view: a call to a tool
    outside it is, for them, a call to an unknown tool, so it is let through
    without asking anyone and answered with an error result; nothing runs.
    """
    if config.tools is None:
        return registry
    return ToolRegistry(t for t in registry if tool_allowed(config, t.name))
