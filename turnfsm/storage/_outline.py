"""A context without its messages (:class:`ContextOutline`): what a client that
shows or polls a context reads (``GET /api/contexts/{id}``, ``…/state``), at a
cost that does not grow with the conversation.

A store that can read one without loading the context is a
:class:`ContextOutlines` (SQLite, PostgreSQL, files); for any other,
:func:`outline_of` makes one of the loaded context. The pending tool calls
need only the newest messages of the active branch: a store reads a short
tail and a longer one only while the tail it read holds
nothing but tool results (:func:`pending_of_branch`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..model import ApprovalStatus, ChatContext, MessageNode, Role, ToolCallRequest
from ..model._context import newest_tool_batch, open_calls

__all__ = [
    "ContextOutline",
    "ContextOutlines",
    "outline_of",
    "pending_of_branch",
    "pending_of_tail",
]


@dataclass(frozen=True, slots=True)
class ContextOutline:
    """A context as last committed, without its messages."""

    context: ChatContext
    """Every field of the context but its messages: ``message_pool`` is empty,
    and so is each branch's ``message_ids`` (their lengths are in
    ``lengths``). Not a context to run turns on."""
    lengths: dict[str, int]
    """Each branch's number of messages, by branch name."""
    pending_tool_calls: list[ToolCallRequest]
    """What :meth:`ChatContext.pending_tool_calls` says of the whole context:
    the calls of the active branch's newest tool batch that wait for a human
    decision."""


@runtime_checkable
class ContextOutlines(Protocol):
    """A store that reads a context's outline without loading its messages:
    the context's row or metadata, each branch's length, and a short tail of
    the active branch."""

    async def outline(self, context_id: str) -> ContextOutline:
        """The context's outline as last committed; :class:`ContextNotFound`
        for an unknown context."""
        ...


def outline_of(ctx: ChatContext) -> ContextOutline:
    """The outline of a whole context (it shares the context's parts: give it
    a copy the caller owns, such as one a store loaded)."""
    shell = dataclasses.replace(
        ctx,
        message_pool={},
        branches={name: dataclasses.replace(b, message_ids=[]) for name, b in ctx.branches.items()},
    )
    lengths = {name: len(b.message_ids) for name, b in ctx.branches.items()}
    return ContextOutline(shell, lengths, ctx.pending_tool_calls())


TAIL = 8
"""The newest messages a store reads first for the pending calls: a tool batch
with its results is rarely longer."""


def pending_of_branch(
    length: int, tail: Callable[[int], Sequence[MessageNode]]
) -> list[ToolCallRequest]:
    """The pending calls of a branch of ``length`` messages, where ``tail(n)``
    reads its ``n`` newest (oldest first): :data:`TAIL` of them, then four
    times as many while :func:`pending_of_tail` asks for more, at most the
    whole branch."""
    size = TAIL
    while True:
        size = min(size, length)
        found = pending_of_tail(tail(size), whole=size == length)
        if found is not None:
            return found
        size *= 4


def pending_of_tail(tail: Sequence[MessageNode], whole: bool) -> list[ToolCallRequest] | None:
    """The pending calls of a branch from its newest messages ``tail`` (oldest
    first; ``whole``: the branch has no others), or ``None`` when the tail holds
    only tool results and older messages precede it: read a longer one."""
    if not whole and all(
        n.message.role is Role.TOOL and n.message.tool_result is not None for n in tail
    ):
        return None
    batch = newest_tool_batch({n.id: n for n in tail}, [n.id for n in tail])
    return [c for c in open_calls(batch) if c.approval_status is ApprovalStatus.PENDING]
