"""Copies that share nothing mutable: what the engine hands out (docs/architecture.md).

Most records are plain (not frozen) dataclasses, and every record may hold
lists and dicts (a message's content, a call's arguments, a result,
metadata) that can be changed in place. :func:`detached` copies every record
that can change and every dict and list (and tuple) of JSON data; what
cannot change (strings, numbers, enums, and the frozen records: the content
parts, a system prompt, turn progress) is shared. It is much cheaper than ``copy.deepcopy``
and gives the same guarantee: changing the copy cannot change the original.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ._context import Branch, ChatConfig, ChatContext, SystemPrompt, TurnProgress
from ._message import (
    FilePart,
    ImagePart,
    InternalMessage,
    MessageMetadata,
    MessageNode,
    ReasoningItem,
    TextPart,
    TokenUsage,
    ToolCallRequest,
    ToolCallResult,
    extra_of,
)

__all__ = ["detached", "detached_context", "detached_fields"]

T = TypeVar("T")
_new = object.__new__


_SCALARS = frozenset({str, int, float, bool, type(None)})
"""JSON values that cannot change: a dict's are taken as they are, with no call."""


def _json(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        # a loop, not a comprehension calling _json per value: a call's
        # arguments (copied for every rest waiting for a human) are mostly
        # strings and numbers, and before Python 3.12 a comprehension is a
        # call of its own
        out: dict[Any, Any] = {}
        for k, v in value.items():
            out[k] = v if type(v) in _SCALARS else _json(v)
        return out
    if kind is list:
        return [_json(v) for v in value]
    if kind is tuple:
        return tuple(_json(v) for v in value)
    return value


def _usage(u: TokenUsage) -> TokenUsage:
    return TokenUsage(u.prompt_tokens, u.completion_tokens, u.total_tokens, **_json(u.extras))


def _metadata(m: MessageMetadata) -> MessageMetadata:
    return MessageMetadata(
        created_at=m.created_at,
        model=m.model,
        usage=None if m.usage is None else _usage(m.usage),
        attempt=m.attempt,
        iteration=m.iteration,
        finish_reason=m.finish_reason,
        cancelled=m.cancelled,
        extra=_json(extra) if (extra := extra_of(m)) else None,
        incomplete_reason=m.incomplete_reason,
        logprobs=None if m.logprobs is None else _json(m.logprobs),
        provider_reason=m.provider_reason,
    )


def _call(c: ToolCallRequest) -> ToolCallRequest:
    # every field written on the slots (as ``_history.decided`` makes its
    # copy): every rest waiting for a human copies its pending calls, and
    # ``__init__`` matches its ten keywords by name in a frame of its own
    # (tests/test_detach_copies.py holds the copy to the class's fields)
    copy = _new(ToolCallRequest)
    copy.id = c.id
    copy.tool_name = c.tool_name
    copy.arguments = _json(c.arguments)
    copy.approval_status = c.approval_status
    copy.decided_by = c.decided_by
    copy.reason = c.reason
    copy.outcome_unknown = c.outcome_unknown
    copy.raw_arguments = c.raw_arguments
    copy.arguments_error = c.arguments_error
    copy.provider_id = c.provider_id
    return copy


def _result(r: ToolCallResult) -> ToolCallResult:
    return ToolCallResult(request_id=r.request_id, result=_json(r.result), success=r.success)


def _reasoning(r: ReasoningItem) -> ReasoningItem:
    return ReasoningItem(
        id=r.id,
        summary=list(r.summary),
        encrypted_content=r.encrypted_content,
        provider=r.provider,
        data=None if r.data is None else _json(r.data),
        position=r.position,
    )


def _message(m: InternalMessage) -> InternalMessage:
    calls = m.tool_calls
    result = m.tool_result
    reasoning = m.reasoning
    return InternalMessage(
        role=m.role,
        content=list(m.content),  # the parts themselves cannot change
        tool_calls=None if calls is None else [_call(c) for c in calls],
        tool_result=None if result is None else _result(result),
        message_type=m.message_type,
        metadata=_metadata(m.metadata),
        thinking=m.thinking,
        refusal=m.refusal,
        reasoning=None if reasoning is None else [_reasoning(r) for r in reasoning],
        phase=m.phase,
    )


def _node(n: MessageNode) -> MessageNode:
    return MessageNode(id=n.id, message=_message(n.message), parent_id=n.parent_id)


def _branch(b: Branch) -> Branch:
    return Branch(
        name=b.name,
        message_ids=list(b.message_ids),
        parent_message_id=b.parent_message_id,
        forked_from=b.forked_from,
        system_prompt=b.system_prompt,
        user_prompt=b.user_prompt,
    )


def _config(c: ChatConfig) -> ChatConfig:
    return ChatConfig(
        model_id=c.model_id,
        mode=c.mode,
        parameters=_json(c.parameters),
        system_prompt_id=c.system_prompt_id,
        agent_role=c.agent_role,
        workspace_path=c.workspace_path,
        title=c.title,
        tools=None if c.tools is None else list(c.tools),
        archived=c.archived,
        subtask_call=c.subtask_call,
        tool_history=c.tool_history,
        token_budget=c.token_budget,
        compaction=c.compaction,
        frontend_operator_as=c.frontend_operator_as,
    )


def _context(c: ChatContext) -> ChatContext:
    return detached_context(c, c.message_pool, c.branches)


def detached_context(
    c: ChatContext, message_pool: Mapping[str, MessageNode], branches: Mapping[str, Branch]
) -> ChatContext:
    """``detached(c)`` with ``message_pool`` and ``branches`` (copied) in place
    of its own: a store that keeps them beside the context's other fields
    makes its copy without putting them together first."""
    return ChatContext(
        schema_version=c.schema_version,
        id=c.id,
        parent_id=c.parent_id,
        config=_config(c.config),
        message_pool={k: _node(n) for k, n in message_pool.items()},
        branches={k: _branch(b) for k, b in branches.items()},
        active_branch_name=c.active_branch_name,
        current_state=c.current_state,
        created_at=c.created_at,
        updated_at=c.updated_at,
        version=c.version,
        event_seq=c.event_seq,
        progress=_progress(c.progress),
    )


def _progress(p: TurnProgress) -> TurnProgress:
    """Frozen, and its one sequence is a tuple: shared, but for an output
    type's schema (a dict), which is copied."""
    out = p.output
    if out is None:
        return p
    return dataclasses.replace(p, output=dataclasses.replace(out, schema=_json(out.schema)))


def _same(value: T) -> T:
    return value


_COPIERS: dict[type, Callable[[Any], Any]] = {
    dict: _json,
    list: _json,
    tuple: _json,
    InternalMessage: _message,
    MessageNode: _node,
    ToolCallRequest: _call,
    ToolCallResult: _result,
    MessageMetadata: _metadata,
    TokenUsage: _usage,
    ReasoningItem: _reasoning,
    Branch: _branch,
    ChatConfig: _config,
    ChatContext: _context,
    TextPart: _same,
    ImagePart: _same,
    FilePart: _same,
    SystemPrompt: _same,
    TurnProgress: _progress,
}


def detached(value: T) -> T:
    """``value`` copied so that the copy shares nothing that can change with it.

    Records, and dicts, lists and tuples of them or of JSON data, are copied;
    anything else is returned as it is (it must not change in place)."""
    copier = _COPIERS.get(type(value))
    if copier is None:
        return value
    if copier is _json:
        return _items(value)  # type: ignore[no-any-return]
    return copier(value)  # type: ignore[no-any-return]


def _items(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: detached(v) for k, v in value.items()}
    if kind is list:
        return [detached(v) for v in value]
    return tuple(detached(v) for v in value)


def detached_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """An event's fields, each :func:`detached`. ``fields`` is the caller's own
    dict (a ``**fields`` of its own call): when no value needs a copy (strings,
    numbers, enums: most events) it is returned as it is, with no new dict."""
    copiers = _COPIERS
    for value in fields.values():
        if type(value) in copiers:
            return {k: detached(v) for k, v in fields.items()}
    return fields
