"""What the engine's states read of a turn's client tools, as pure functions
(docs/client-tools.md): the tools and parameters its requests carry, which
calls are the client's, and the decisions that hand them to it. The public
call and the checks are in ``_client_tools``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ..model import CLIENT_CALL, ApprovalStatus, ChatContext, ToolCallRequest

__all__ = [
    "client_calls",
    "client_decisions",
    "is_client_call",
    "tool_definitions",
    "turn_parameters",
    "with_client_tools",
]

# ---------------------------------------------------------------------- the request


def tool_definitions(
    engine: Callable[[ChatContext], list[dict[str, Any]]], ctx: ChatContext
) -> list[dict[str, Any]]:
    """The tools the model is offered for ``ctx``: the engine's (``engine(ctx)``),
    then the turn's client tools."""
    offered = engine(ctx)
    client = ctx.progress.client
    if client is None:
        return offered
    return [*offered, *(t.definition() for t in client.tools)]


def with_client_tools(
    engine: Callable[[ChatContext], list[dict[str, Any]]],
) -> Callable[[ChatContext], list[dict[str, Any]]]:
    return functools.partial(tool_definitions, engine)


def turn_parameters(ctx: ChatContext) -> dict[str, Any]:
    """The model parameters of ``ctx``'s next request: the config's, with the
    turn's ``tool_choice`` and ``parallel_tool_calls`` when it sets them."""
    params = ctx.config.parameters
    client = ctx.progress.client
    if client is None or (client.tool_choice is None and client.parallel_tool_calls is None):
        return params
    params = dict(params)
    if client.tool_choice is not None:
        params["tool_choice"] = client.tool_choice
    if client.parallel_tool_calls is not None:
        params["parallel_tool_calls"] = client.parallel_tool_calls
    return params


# ---------------------------------------------------------------------- the calls


def is_client_call(call: ToolCallRequest) -> bool:
    """Whether ``call`` is a call of a client tool, handed to the client."""
    return (
        call.reason == CLIENT_CALL
        and call.decided_by == "system"
        and call.approval_status is ApprovalStatus.APPROVED
    )


def client_calls(
    ctx: ChatContext, open_calls: Sequence[ToolCallRequest] | None = None
) -> list[ToolCallRequest]:
    """The open calls of the newest batch that wait for the client's results
    (``open_calls``: ``ctx.open_tool_calls()``, when the caller has them)."""
    if open_calls is None:
        open_calls = ctx.open_tool_calls()
    return [c for c in open_calls if is_client_call(c)]


def client_decisions(
    calls: Sequence[ToolCallRequest], ctx: ChatContext
) -> dict[str, tuple[ApprovalStatus, str, str | None]]:
    """The engine's decisions on the undecided ``calls`` of the turn's client
    tools: each is handed to the client."""
    client = ctx.progress.client
    if client is None:
        return {}
    names = {t.name for t in client.tools}
    return {
        c.id: (ApprovalStatus.APPROVED, "system", CLIENT_CALL)
        for c in calls
        if c.approval_status is ApprovalStatus.PENDING and c.tool_name in names
    }
