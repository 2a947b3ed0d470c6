"""The history being built by an importer: messages in order, each tool result
right after the call it answers, missing results given :data:`MISSING_RESULT`;
then the context that holds it (:func:`build_context`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ....errors import InvalidInput
from ....model import (
    ApprovalStatus,
    Branch,
    ChatConfig,
    ChatContext,
    ContentPart,
    InternalMessage,
    MessageMetadata,
    MessageNode,
    MessageType,
    Role,
    SystemPrompt,
    ToolCallRequest,
    ToolCallResult,
)
from ....states import State
from ._checks import Ids, merge_extra, new_id

__all__ = [
    "MISSING_RESULT",
    "History",
    "build_context",
    "require_nonempty",
    "with_source",
]

MISSING_RESULT: dict[str, str] = {
    "error": "no result in the imported history",
    "status": "missing",
}
"""The result given to a tool call whose result is not in the imported source."""
# --- the history being built --------------------------------------------------------------


@dataclass
class _Batch:
    index: int
    """Where the assistant message that asked for the calls is in the history."""
    calls: list[ToolCallRequest]
    open: dict[str, int]
    """Call id -> position in ``calls``, for calls without a result yet."""


@dataclass
class History:
    """Messages in order, checking that every result answers a call just before it."""

    now: datetime
    messages: list[InternalMessage] = field(default_factory=list)
    batch: _Batch | None = None
    asked_at: dict[str, str] = field(default_factory=dict)
    """Call id -> JSON path where it was asked."""
    answered: set[str] = field(default_factory=set)
    synthesized: set[str] = field(default_factory=set)
    """Calls given the missing result when their batch closed."""

    def message(self, msg: InternalMessage, call_paths: Mapping[str, str] | None = None) -> None:
        """Append a message that is not a tool result (this closes the open batch)."""
        self._close()
        calls = msg.tool_calls or []
        paths = call_paths or {}
        for c in calls:
            where = paths.get(c.id, "$")
            if c.id in self.asked_at:
                raise InvalidInput(
                    where, f"duplicate tool call id {c.id!r} (first at {self.asked_at[c.id]})"
                )
            self.asked_at[c.id] = where
        self.messages.append(msg)
        if calls:
            self.batch = _Batch(
                index=len(self.messages) - 1,
                calls=list(calls),
                open={c.id: i for i, c in enumerate(calls)},
            )

    def result(
        self,
        call_id: str,
        result: Any,
        *,
        success: bool,
        at: datetime,
        path: str,
        extra: dict[str, Any] | None = None,
        content: list[ContentPart] | None = None,
        denied: str | None = None,
    ) -> None:
        """Append the result of a call of the newest batch; ``denied`` marks the call
        as refused by a human with that reason."""
        batch = self.batch
        if batch is None or call_id not in batch.open:
            if call_id in self.answered and call_id not in self.synthesized:
                raise InvalidInput(path, f"a second result for tool call {call_id!r}")
            if call_id in self.asked_at:
                raise InvalidInput(
                    path,
                    f"the result for tool call {call_id!r} is not right after the assistant "
                    f"message that asked for it ({self.asked_at[call_id]})",
                )
            raise InvalidInput(path, f"no tool call with id {call_id!r} before this result")
        pos = batch.open.pop(call_id)
        self.answered.add(call_id)
        if denied is not None:
            batch.calls[pos] = dataclasses.replace(
                batch.calls[pos],
                approval_status=ApprovalStatus.DENIED,
                decided_by="human",
                reason=denied,
            )
        self.messages.append(
            InternalMessage(
                role=Role.TOOL,
                content=content or [],
                tool_result=ToolCallResult(request_id=call_id, result=result, success=success),
                message_type=MessageType.TOOL_RESULT,
                metadata=MessageMetadata(created_at=at, extra=extra or {}),
            )
        )

    def _close(self) -> None:
        batch = self.batch
        if batch is None:
            return
        self.batch = None
        for call_id, pos in list(batch.open.items()):
            batch.calls[pos] = dataclasses.replace(
                batch.calls[pos],
                approval_status=ApprovalStatus.DENIED,
                decided_by="system",
                reason="missing",
            )
            self.answered.add(call_id)
            self.synthesized.add(call_id)
            self.messages.append(
                InternalMessage(
                    role=Role.TOOL,
                    tool_result=ToolCallResult(
                        request_id=call_id, result=dict(MISSING_RESULT), success=False
                    ),
                    message_type=MessageType.TOOL_RESULT,
                    metadata=MessageMetadata(created_at=self.now, extra={"synthesized": True}),
                )
            )
        asked = self.messages[batch.index]
        if asked.tool_calls != batch.calls:
            self.messages[batch.index] = dataclasses.replace(asked, tool_calls=batch.calls)

    def finish(self) -> list[InternalMessage]:
        self._close()
        return self.messages


def with_source(
    messages: list[InternalMessage], source: dict[str, Any], path: str
) -> list[InternalMessage]:
    """Keep the source's own fields in ``metadata.extra["source"]`` of the first message."""
    if not source:
        return messages
    if not messages:
        raise InvalidInput(path, "has no message to keep the source's fields on")
    first = messages[0]
    extra = merge_extra(dict(first.metadata.extra), {"source": source}, f"{path}[0]")
    meta = dataclasses.replace(first.metadata, extra=extra)
    return [dataclasses.replace(first, metadata=meta), *messages[1:]]


def build_context(
    messages: list[InternalMessage],
    *,
    now: datetime,
    ids: Ids,
    system_prompt: str | None = None,
    created_at: datetime | None = None,
    updated_at: datetime | None = None,
    model: str | None = None,
    title: str | None = None,
) -> ChatContext:
    ctx_id = new_id(ids)
    prompt = (
        SystemPrompt(id=new_id(ids), content=system_prompt) if system_prompt is not None else None
    )
    pool: dict[str, MessageNode] = {}
    order: list[str] = []
    parent: str | None = None
    for msg in messages:
        mid = new_id(ids)
        if mid in pool or mid == ctx_id:
            raise InvalidInput("ids", f"the id factory returned {mid!r} twice")
        pool[mid] = MessageNode(id=mid, message=msg, parent_id=parent)
        order.append(mid)
        parent = mid
    times = [m.metadata.created_at for m in messages]
    config = ChatConfig(system_prompt_id=prompt.id if prompt else None, title=title)
    if model is not None:
        config = dataclasses.replace(config, model_id=model)
    return ChatContext(
        id=ctx_id,
        config=config,
        message_pool=pool,
        branches={"main": Branch(name="main", message_ids=order, system_prompt=prompt)},
        active_branch_name="main",
        current_state=State.IDLE.value,
        created_at=created_at or (min(times) if times else now),
        updated_at=updated_at or (max(times) if times else now),
    )


def require_nonempty(items: list[Any], path: str) -> None:
    if not items:
        raise InvalidInput(path, "is empty: there is nothing to import")
