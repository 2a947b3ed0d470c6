"""Tools that run in the client (docs/client-tools.md).

A turn may be given tools the engine does not run (``send(...,
client_tools=[...])``): their definitions go to the model beside the engine's
own tools, and a call of one is handed back to the caller. The engine decides
such a call itself (``approved`` by ``system``, reason :data:`CLIENT_CALL`):
the batch's other calls run first under their own rules, then the context
rests in AwaitingToolApproval (``client_calls``) with the client's calls in
:attr:`Turn.client_tool_calls`, until :meth:`Engine.submit_results` gives one
result per call; then the LLM is called again. The declaration is kept with
the turn (``TurnProgress.client``), so a rest survives an unload and a restart.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ..adapters.inbound import InboundMessage
from ..errors import (
    HistoryConflict,
    IllegalTransition,
    InvalidInput,
    NotAClientCall,
    ToolCallNotPending,
    ToolNameClash,
    UnknownToolCall,
)
from ..model import ApprovalStatus, ClientTool, ClientTools
from ..states import State, Trigger
from ..tools import ToolOutcome, ToolRegistry
from . import _history, _steps
from ._client_view import is_client_call
from ._host import Host
from ._inputs import check_id, check_parameters, check_text
from ._requests import new_context_messages
from ._runtime import Runtime
from ._turn import StopReason

__all__ = [
    "ClientToolsArg",
    "check_client_tools",
    "check_tool_choice",
    "client_outcomes",
    "start_submit",
]

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_CHOICES = ("auto", "none", "required")

ClientToolsArg = ClientTools | Sequence[ClientTool | Mapping[str, Any]] | None
"""What ``send(client_tools=...)`` takes: a :class:`ClientTools`, or a list of
tools (each a :class:`ClientTool` or an OpenAI ``tools`` entry)."""


# ---------------------------------------------------------------------- checks


def _tool(where: str, value: object) -> ClientTool:
    """One tool: a :class:`ClientTool`, or an OpenAI function tool
    (``{"type": "function", "function": {"name", "description", "parameters",
    "strict"}}``)."""
    if isinstance(value, ClientTool):
        tool = value
    elif isinstance(value, Mapping):
        if value.get("type") != "function":
            raise InvalidInput(f"{where}.type", "must be 'function' (the only kind of tool)")
        function = value.get("function")
        where = f"{where}.function"
        if not isinstance(function, Mapping):
            raise InvalidInput(where, "must be an object with the tool's name")
        unknown = sorted(set(function) - {"name", "description", "parameters", "strict"})
        if unknown:
            raise InvalidInput(f"{where}.{unknown[0]}", "is not a field of a function tool")
        name = function.get("name")
        description = function.get("description")
        if description is None:
            description = ""
        elif not isinstance(description, str):
            raise InvalidInput(f"{where}.description", "must be a string")
        parameters = function.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        strict = function.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise InvalidInput(f"{where}.strict", "must be true, false or null")
        tool = ClientTool(
            name=name,  # type: ignore[arg-type]  # checked below
            description=description,
            parameters=parameters,
            strict=strict,
        )
    else:
        raise InvalidInput(where, f"must be a ClientTool or a tool object, not {value!r}")
    name = tool.name
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidInput(
            f"{where}.name", f"must be 1 to 64 letters, digits, '_' or '-', not {name!r}"
        )
    parameters = check_parameters(f"{where}.parameters", tool.parameters)
    check_text(f"{where}.description", tool.description)
    return ClientTool(
        name=name, description=tool.description, parameters=parameters, strict=tool.strict
    )


def check_tool_choice(
    where: str, value: object, names: Collection[str]
) -> str | dict[str, Any] | None:
    """A ``tool_choice``: ``"auto"``, ``"none"``, ``"required"``, None, or
    ``{"type": "function", "function": {"name": N}}`` with N among ``names``."""
    if value is None or (isinstance(value, str) and value in _CHOICES):
        return value
    if isinstance(value, Mapping):
        function = value.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if value.get("type") != "function" or not isinstance(name, str):
            raise InvalidInput(
                where, "must name a tool as {'type': 'function', 'function': {'name': ...}}"
            )
        if name not in names:
            raise InvalidInput(f"{where}.function.name", f"{name!r} is not a tool of this turn")
        return {"type": "function", "function": {"name": name}}
    raise InvalidInput(where, f"must be 'auto', 'none', 'required' or a named tool, not {value!r}")


def check_client_tools(where: str, value: object, engine_tools: ToolRegistry) -> ClientTools | None:
    """The client tools given to a public call as ``where``, checked: each has
    a name of 1 to 64 letters, digits, ``_`` or ``-`` and a JSON Schema, no two
    share a name (:class:`InvalidInput`), and none has the name of one of the
    engine's tools (:class:`~turnfsm.errors.ToolNameClash`). None or an empty
    list: None (the turn has none)."""
    if value is None:
        return None
    if isinstance(value, ClientTools):
        given: Sequence[object] = value.tools
        listed = f"{where}.tools"
    elif isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise InvalidInput(where, "must be a ClientTools or a list of tools")
    else:
        given, listed = value, where
    tools: list[ClientTool] = []
    seen: set[str] = set()
    for i, item in enumerate(given):
        tool = _tool(f"{listed}[{i}]", item)
        named = f"{listed}[{i}]{'' if isinstance(item, ClientTool) else '.function'}.name"
        if tool.name in engine_tools:
            raise ToolNameClash(named, tool.name)
        if tool.name in seen:
            raise InvalidInput(named, f"two tools are named {tool.name!r}")
        seen.add(tool.name)
        tools.append(tool)
    if not tools:
        return None
    if not isinstance(value, ClientTools):
        return ClientTools(tools=tuple(tools))
    parallel = value.parallel_tool_calls
    if parallel is not None and not isinstance(parallel, bool):
        raise InvalidInput(f"{where}.parallel_tool_calls", "must be true, false or None")
    names = {*seen, *engine_tools.names}
    choice = check_tool_choice(f"{where}.tool_choice", value.tool_choice, names)
    return ClientTools(tools=tuple(tools), tool_choice=choice, parallel_tool_calls=parallel)


async def start_submit(
    d: Host,
    results: Mapping[str, ToolOutcome],
    context: Sequence[InboundMessage] | None,
    client: ClientTools | None,
    rt: Runtime,
) -> None:
    """The client's results of its calls: one result each, in the order the
    model asked for them. Once no call waits (for the client or a human), the
    turn goes on as after an approval: ``approvals_resolved``, then the LLM.
    ``context`` (the conversation as the client holds it) must be held by the
    context already; ``client`` replaces the turn's client tools."""
    ctx = rt.ctx
    open_calls = ctx.open_tool_calls()
    by_id = {c.id: c for c in open_calls}
    for cid in results:
        call = by_id.get(cid)
        if call is None:
            found = _history.find_call(ctx, cid)
            if found is None:
                raise UnknownToolCall(ctx.id, cid)
            if not is_client_call(found):
                raise NotAClientCall(ctx.id, cid, found.tool_name)
            raise ToolCallNotPending(ctx.id, cid, _history.call_status(ctx, found))
        if not is_client_call(call):
            raise NotAClientCall(ctx.id, cid, call.tool_name)
    state = rt.holder.current()
    if state is not State.AWAITING_TOOL_APPROVAL:  # client calls wait only there
        raise IllegalTransition(state, Trigger.APPROVALS_RESOLVED, context_id=ctx.id)
    if context:
        where = "context[{}]".format
        fresh = new_context_messages(rt, context, where, answers=False)
        if fresh:
            i = len(context) - len(fresh)
            raise HistoryConflict(
                ctx.id,
                where(i),
                context[i].message_id,
                "the context does not hold it: results come with the history they answer",
            )
    if client is not None:
        ctx.progress = dataclasses.replace(ctx.progress, client=client)
    given = [c for c in open_calls if c.id in results]
    _steps.add_results(rt, given, [results[c.id] for c in given])
    left = [c for c in open_calls if c.id not in results]
    if any(c.approval_status is ApprovalStatus.PENDING for c in left):
        rt.stop_reason = StopReason.AWAITING_APPROVAL
        return
    if any(is_client_call(c) for c in left):
        rt.stop_reason = StopReason.CLIENT_TOOLS
        return
    ctx.progress = _history.started(ctx.progress, ())
    _steps.fire(rt, Trigger.APPROVALS_RESOLVED)


def client_outcomes(results: object) -> dict[str, ToolOutcome]:
    if not isinstance(results, Mapping) or not results:
        raise InvalidInput("results", "must be a non-empty mapping of call id to result")
    out: dict[str, ToolOutcome] = {}
    for cid, value in results.items():
        check_id("results", cid)
        out[cid] = ToolOutcome.of(True, value, "the client")
    return out
