"""Running the tool calls of one assistant message."""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar

import anyio

from turnfsm.model import ToolCallRequest

from ._outcome import ToolOutcome
from ._registry import ToolRegistry

__all__ = ["current_call", "run_calls"]

_CURRENT: ContextVar[ToolCallRequest | None] = ContextVar("turnfsm_tool_call", default=None)


def current_call() -> ToolCallRequest | None:
    """The tool call being run, inside a tool function (None elsewhere).

    A tool that needs the call's id (for logging, or to look up a recorded
    outcome) reads it here instead of taking it as an argument the model fills.
    """
    return _CURRENT.get()


async def run_calls(registry: ToolRegistry, calls: Sequence[ToolCallRequest]) -> list[ToolOutcome]:
    """Run every call; the outcomes are in the order of ``calls``.

    One call is awaited directly; several run concurrently in one task group. A
    call to a tool not in ``registry``, or whose arguments were not a JSON object
    (``raw_arguments`` is set), gets a failed outcome without running anything.
    Approval is not checked here: pass only the calls that should run.
    """
    if len(calls) == 1:
        return [await _run_one(registry, calls[0])]
    outcomes: list[ToolOutcome | None] = [None] * len(calls)

    async def fill(index: int, call: ToolCallRequest) -> None:
        outcomes[index] = await _run_one(registry, call)

    async with anyio.create_task_group() as group:
        for index, call in enumerate(calls):
            group.start_soon(fill, index, call)
    return [outcome for outcome in outcomes if outcome is not None]


async def _run_one(registry: ToolRegistry, call: ToolCallRequest) -> ToolOutcome:
    found = registry.get(call.tool_name)
    if found is None:
        available = ", ".join(registry.names) or "(none)"
        return ToolOutcome.of(
            False, {"error": f"unknown tool {call.tool_name!r}; available tools: {available}"}
        )
    if call.raw_arguments is not None:
        return ToolOutcome.of(
            False,
            {
                "error": f"invalid arguments for tool {call.tool_name!r}: "
                + (call.arguments_error or "not a JSON object"),
                "raw": call.raw_arguments,
            },
        )
    token = _CURRENT.set(call)
    try:
        return await found.run(call.arguments)
    finally:
        _CURRENT.reset(token)
