"""Which of the engine's tools a context may use: one rule, read by the tool
definitions offered to the model and by the approval and run path.

A context's ``config.tools`` is an allow-list of tool names (``None``: every
tool of the engine). Other rules that narrow the tools (a mode's, say) compose
here, so that what the model is offered and what may run never disagree.
"""

from __future__ import annotations

from ._context import ChatConfig

__all__ = ["tool_allowed"]


def tool_allowed(config: ChatConfig, name: str) -> bool:
    """Whether a context with ``config`` may offer and run the tool ``name``."""
    allowed = config.tools
    return allowed is None or name in allowed
