"""What sub-contexts commit, each as the first step of a call on one context:
``child_spawned`` on the parent, the summary message with ``child_finished``
on the parent, ``archived`` on a kept child; and how a parent's pending call
names the sub-task child it waits for.

Each is its own commit on its own context: a process killed between two of
them leaves every context loadable and at rest, and calling the same public
method again completes the work (``finish`` notices a summary already on the
parent and does not add a second one).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...errors import NotAtRest, SubContextError
from ...model import (
    SUBTASK_WAITING,
    SUMMARY_KEY,
    ApprovalStatus,
    ChatContext,
    InternalMessage,
    MessageMetadata,
    Role,
    TextPart,
    ToolCallRequest,
    clean_text,
)
from ...states import RESTING, Change, State
from .. import _history, _steps
from .._host import Host
from .._runtime import Runtime
from .._turn import StopReason

__all__ = [
    "find_summary",
    "start_archive",
    "start_child_finished",
    "start_child_spawned",
    "start_still_waiting",
    "waiting_child",
]

# read once for ``waiting_child``, which every rest for a human and every
# decision ask of each call: on Python 3.11 a member read off its enum class
# goes through ``EnumType.__getattr__``'s hook
_PENDING = ApprovalStatus.PENDING


def find_summary(parent: ChatContext, child_id: str) -> str | None:
    """The id of the parent's message that stands for ``child_id``, if there is one."""
    for node in parent.message_pool.values():
        link = node.message.metadata.extra.get(SUMMARY_KEY)
        if isinstance(link, dict) and link.get("child_id") == child_id:
            return node.id
    return None


def _require_idle(rt: Runtime, what: str) -> None:
    state = State(rt.holder.state)
    if state is not State.IDLE:
        if state not in RESTING:
            raise NotAtRest(rt.ctx.id, state, what)
        raise SubContextError(rt.ctx.id, f"{what} needs it at rest in Idle, and it is in {state}")


async def start_child_spawned(host: Host, detail: dict[str, Any], rt: Runtime) -> None:
    """On the parent: the ``child_spawned`` record (any resting state)."""
    state = State(rt.holder.state)
    if state not in RESTING:
        raise NotAtRest(rt.ctx.id, state, "sub-contexts")
    _steps.change(rt, Change.CHILD_SPAWNED, detail)


async def start_child_finished(
    host: Host, child: ChatContext, summary: str, summarizer: str, keep: bool, rt: Runtime
) -> None:
    """On the parent: append the summary (one assistant message) with its
    ``child_finished`` record. Nothing when the summary is already there."""
    ctx = rt.ctx
    if find_summary(ctx, child.id) is not None:
        return
    _require_idle(rt, "a sub-context's summary")
    text, replaced = clean_text(summary)
    link: dict[str, Any] = {
        "child_id": child.id,
        "message_ids": list(child.active_branch.message_ids),
        "summarizer": summarizer,
    }
    if child.config.title is not None:
        link["title"] = child.config.title
    extra: dict[str, Any] = {SUMMARY_KEY: link}
    if replaced:
        extra["conversions"] = [f"$: {replaced} lone surrogate(s) replaced by U+FFFD"]
    node = _history.append(
        rt,
        InternalMessage(
            role=Role.ASSISTANT,
            content=[TextPart(text=text)],
            metadata=MessageMetadata(created_at=host.now(), extra=extra),
        ),
        host.settings.ids(),
    )
    _steps.change(
        rt, Change.CHILD_FINISHED, {"child_id": child.id, "message_id": node.id, "kept": keep}
    )


async def start_archive(host: Host, parent_id: str, message_id: str | None, rt: Runtime) -> None:
    """On a finished child that is kept: mark it finished (``archived``)."""
    ctx = rt.ctx
    if ctx.config.archived:
        return
    _require_idle(rt, "finishing a sub-context")
    ctx.config = dataclasses.replace(ctx.config, archived=True)
    rt.config_changed = True
    _steps.change(rt, Change.ARCHIVED, {"parent_id": parent_id, "message_id": message_id})


def waiting_child(call: ToolCallRequest) -> str | None:
    """The child a pending sub-task call waits for (None: not such a call)."""
    reason = call.reason
    if call.approval_status is not _PENDING or not reason:
        return None
    if not reason.startswith(SUBTASK_WAITING):
        return None
    return reason[len(SUBTASK_WAITING) :]


async def start_still_waiting(host: Host, rt: Runtime) -> None:
    """A context whose decisions all went to its children, which still wait."""
    rt.stop_reason = StopReason.AWAITING_APPROVAL
