"""The client's tools over ``POST /v1/chat/completions`` (see "Client tools"
in the section "OpenAI-compatible endpoints" of ``docs/server.md``).

A request's ``tools`` are tools the client runs (``send(client_tools=...)``):
checked at the request (422 with the JSON path; a name of one of the server's
tools is a 422 naming it), with ``tool_choice`` and ``parallel_tool_calls``
sent as the model's parameters. When the model calls one, the completion
answers its calls in ``message.tool_calls`` (``finish_reason: "tool_calls"``).

The client's next request continues the turn: it ends with the assistant
message that carries those calls and one ``tool`` message per call
(:func:`continuation`). Its earlier messages are matched as a resent history,
and the ``tool`` messages become the calls' results
(``engine.submit_results``). Without the ``x-turnfsm-context-id`` header the
context is found by its calls (:func:`find_waiting`): among the tenant's
contexts that rest in AwaitingToolApproval, the one whose waiting client calls
include every ``tool_call_id`` and whose history says what the request's does.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..adapters.inbound import InboundMessage, said
from ..engine import Turn, check_client_tools, check_tool_choice, client_calls
from ..errors import InvalidInput
from ..model import ChatContext, ClientTools, Role
from ..states import State
from ._calls import tenant_contexts
from ._errors import ApiError
from ._hub import Hub

__all__ = [
    "ARGUMENT_PIECE",
    "Continuation",
    "client_tools_of",
    "continuation",
    "find_waiting",
    "handed_out",
    "tool_call_deltas",
    "tool_calls_out",
]

ARGUMENT_PIECE = 8
"""Characters of a call's arguments per streamed chunk."""


def client_tools_of(
    hub: Hub, tools: object, tool_choice: object, parallel: object
) -> ClientTools | None:
    """The request's ``tools``, ``tool_choice`` and ``parallel_tool_calls``,
    checked (:class:`InvalidInput` names the JSON path); None without tools
    (the other two are then ignored, as before)."""
    if tools is None:
        return None
    registry = hub.engine.tools
    checked = check_client_tools("tools", tools, registry)
    if checked is None:
        return None
    names = {t.name for t in checked.tools} | set(registry.names)
    choice = check_tool_choice("tool_choice", tool_choice, names)
    if parallel is not None and not isinstance(parallel, bool):
        raise InvalidInput("parallel_tool_calls", "must be true, false or null")
    return ClientTools(tools=checked.tools, tool_choice=choice, parallel_tool_calls=parallel)


# ---------------------------------------------------------------------- the answer


def handed_out(turn: Turn) -> bool:
    """Whether the completion hands calls to the client: its turn rests on
    client calls and no call waits for a human (the server's calls first)."""
    return bool(turn.client_tool_calls) and not turn.pending_tool_calls


def tool_calls_out(turn: Turn) -> list[dict[str, Any]]:
    """The turn's client calls as OpenAI ``tool_calls`` (arguments as JSON text)."""
    out = []
    for c in turn.client_tool_calls:
        arguments = (
            c.raw_arguments
            if c.raw_arguments is not None
            else json.dumps(c.arguments, ensure_ascii=False)
        )
        out.append(
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.tool_name, "arguments": arguments},
            }
        )
    return out


def tool_call_deltas(calls: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The deltas that stream ``calls`` as OpenAI does: per call, one with its
    ``index``, ``id``, ``type`` and function name (empty arguments), then its
    arguments in pieces."""
    deltas: list[dict[str, Any]] = []
    for index, c in enumerate(calls):
        function = c["function"]
        head = {
            "index": index,
            "id": c["id"],
            "type": "function",
            "function": {"name": function["name"], "arguments": ""},
        }
        deltas.append({"tool_calls": [head]})
        text: str = function["arguments"]
        for start in range(0, len(text), ARGUMENT_PIECE):
            piece = text[start : start + ARGUMENT_PIECE]
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return deltas


# ---------------------------------------------------------------------- the next request


@dataclass(frozen=True, slots=True)
class Continuation:
    """A request that gives the results of a completion's tool calls."""

    earlier: list[dict[str, Any]]
    """The messages before the assistant message with the calls."""
    results: dict[str, str]
    """Per ``tool_call_id``: the ``tool`` message's text."""
    where: dict[str, str]
    """Per ``tool_call_id``: the JSON path of its ``tool`` message."""


def _text(where: str, content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise InvalidInput(f"{where}[{i}]", "a tool message holds text parts only")
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidInput(f"{where}[{i}].text", "must be a string")
            texts.append(text)
        return "".join(texts)
    raise InvalidInput(where, "must be a string or a list of text parts")


def continuation(messages: list[dict[str, Any]]) -> Continuation | None:
    """The results a request's messages end with: ``tool`` messages after the
    assistant message whose ``tool_calls`` they answer (None when the last
    message is not a ``tool`` message)."""
    n = len(messages)
    first = n
    while first > 0 and messages[first - 1].get("role") == "tool":
        first -= 1
    if first == n:
        return None
    k = first - 1
    asked = messages[k] if k >= 0 else {}
    calls = asked.get("tool_calls")
    if asked.get("role") != "assistant" or not isinstance(calls, list) or not calls:
        raise InvalidInput(
            f"messages[{first}]",
            "tool messages must follow the assistant message whose tool_calls they answer",
        )
    ids: list[str] = []
    for i, c in enumerate(calls):
        cid = c.get("id") if isinstance(c, dict) else None
        if not isinstance(cid, str) or not cid:
            raise InvalidInput(f"messages[{k}].tool_calls[{i}].id", "must be a call's id")
        ids.append(cid)
    results: dict[str, str] = {}
    where: dict[str, str] = {}
    for i in range(first, n):
        m = messages[i]
        cid = m.get("tool_call_id")
        if not isinstance(cid, str) or cid not in ids:
            raise InvalidInput(
                f"messages[{i}].tool_call_id", f"must be the id of a call of messages[{k}]"
            )
        if cid in results:
            raise InvalidInput(f"messages[{i}].tool_call_id", f"a second result for {cid!r}")
        results[cid] = _text(f"messages[{i}].content", m.get("content"))
        where[cid] = f"messages[{i}].tool_call_id"
    return Continuation(messages[:k], results, where)


def _said(ctx: ChatContext) -> list[tuple[Role, str]]:
    out = []
    for n in ctx.history():
        found = said(n.message)
        if found is not None and found[0] is not Role.ASSISTANT:
            out.append(found)
    return out


def _waits_for(ctx: ChatContext, cont: Continuation) -> bool:
    """Whether ``ctx`` rests on client calls that include every result's call."""
    if ctx.current_state != State.AWAITING_TOOL_APPROVAL:
        return False
    return set(cont.results) <= {c.id for c in client_calls(ctx)}


async def find_waiting(hub: Hub, who: str, cont: Continuation, resent: list[InboundMessage]) -> str:
    """The tenant's context that this headerless continuation continues: it
    waits for the calls the results answer, and its history says what the
    request's earlier messages say (the assistant messages aside, as for a
    resent history). None, or more than one: a ``409 history_conflict``."""
    given = [(m.role, m.content) for m in resent if m.role is not Role.ASSISTANT]
    found: list[str] = []
    for summary in await tenant_contexts(hub, who, State.AWAITING_TOOL_APPROVAL.value):
        ctx = await hub.engine.get_context(summary.id)
        if _waits_for(ctx, cont) and _said(ctx) == given:
            found.append(ctx.id)
    first = next(iter(cont.results))
    where = cont.where[first]
    if not found:
        raise ApiError(
            409,
            "no_waiting_context",
            f"{where}: no context of yours waits for the result of {first!r} "
            "after this history; nothing was stored",
        )
    if len(found) > 1:
        raise ApiError(
            409,
            "ambiguous_context",
            f"{where}: {len(found)} contexts wait for the result of {first!r} after this "
            "history: name one with the x-turnfsm-context-id header; nothing was stored",
        )
    return found[0]
