"""L2: tool specs, the registry, approval policies and the executor.

Define tools with :func:`tool` (a type-annotated function) or
:meth:`Tool.from_spec` (a hand-written JSON schema), collect them in a
:class:`ToolRegistry`, ask :meth:`Tool.decide` whether a call needs a human, and run
approved calls with :func:`run_calls`. :data:`ask_user` (or :func:`question_tool`) is
the built-in tool the model asks the user with; its calls are answered, never run.
A :class:`Toolset` brings tools from outside and changes them while the engine
runs (:mod:`turnfsm.tools.mcp`: tools of MCP servers).
A sync tool function runs in a worker thread (:func:`tool_threads` bounds them)
unless it is declared ``inline``; an async one is awaited.
Every failure of a tool — invalid arguments, an unknown tool, an exception, a
timeout — is a :class:`ToolOutcome` with ``success=False``, never an exception;
cancellation always propagates.

This package imports only :mod:`turnfsm.model`, :mod:`turnfsm.errors`, pydantic and
anyio.
"""

from typing import TYPE_CHECKING

from ._question import AskedQuestion, QuestionTool, question_tool
from ._registry import ToolRegistry
from ._run import current_call, run_calls
from ._spec import Approval, ApprovalPolicy, Tool, ToolError, ToolOutcome, tool
from ._subtask import SubtaskHost, SubtaskSpec, SubtaskTool, hosting, subtask
from ._threads import tool_threads
from ._toolset import Toolset, merge_tools

if TYPE_CHECKING:
    from ._question import ask_user

__all__ = [
    "Approval",
    "ApprovalPolicy",
    "AskedQuestion",
    "QuestionTool",
    "SubtaskHost",
    "SubtaskSpec",
    "SubtaskTool",
    "Tool",
    "ToolError",
    "ToolOutcome",
    "ToolRegistry",
    "Toolset",
    "ask_user",
    "current_call",
    "hosting",
    "merge_tools",
    "question_tool",
    "run_calls",
    "subtask",
    "tool",
    "tool_threads",
]


def __getattr__(name: str) -> object:
    if name != "ask_user":  # made on first use: see turnfsm.tools._question
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import _question

    value = _question.ask_user
    globals()[name] = value
    return value
