"""A chat request body answered by the engine (``Engine.send_request``): its
conversation context merged into the context, then one turn on its current
message."""

from __future__ import annotations

from ..adapters.inbound import InboundMessage, InboundRequest
from ..errors import InvalidInput
from ..model import InternalMessage, MessageNode, Role, TurnProgress
from ..states import State, Trigger
from . import _history
from ._host import Host
from ._runtime import Runtime, require

__all__ = ["new_context_messages", "start_request"]

_PLAIN = (Role.USER, Role.ASSISTANT, Role.SYSTEM, Role.FRONTEND_OPERATOR)


def _said(node: MessageNode) -> tuple[Role, str] | None:
    """A stored message as a request body's context would carry it: its role and
    text; None for what a body does not carry (tool messages, tool calls with no
    text, summaries)."""
    msg = node.message
    if msg.role not in _PLAIN or (msg.role is Role.SYSTEM and "summary" in msg.metadata.extra):
        return None
    if msg.role is Role.ASSISTANT and msg.tool_calls and not msg.text:
        return None
    return msg.role, msg.text


def new_context_messages(rt: Runtime, request: InboundRequest) -> list[InboundMessage]:
    """The messages of the body's conversation context that the context does not
    hold yet, in order.

    A message with a ``messageId`` is new when no stored message of the active
    branch has that id (``metadata.extra["message_id"]``). The others are
    matched in order against what the branch said (its user, assistant, system
    and frontend operator messages with their text; tool messages, tool calls
    and summaries are not in a body): the body's messages that repeat the
    branch's first ones are skipped, the rest are new.
    """
    ctx = rt.ctx
    history = ctx.history()
    known_ids = {
        n.message.metadata.extra["message_id"]
        for n in history
        if isinstance(n.message.metadata.extra.get("message_id"), str)
    }
    said = [s for s in (_said(n) for n in history) if s is not None]
    out: list[InboundMessage] = []
    position = 0
    for m in request.history:
        if m.message_id is not None and m.message_id in known_ids:
            position += 1
            continue
        if (
            m.message_id is None
            and not out
            and position < len(said)
            and said[position] == (m.role, m.content)
        ):
            position += 1
            continue
        out.append(m)
    return out


async def start_request(d: Host, request: InboundRequest, rt: Runtime) -> None:
    """The ``user_message`` trigger for a request body: the new context
    messages, then the current message (flagged ``current``, with the user's
    language and time zone), appended in the same step. When the current
    message (by its ``messageId``) is already the context's last message,
    unanswered (the body was imported), nothing is appended and the turn runs
    on it; when it is anywhere else, the request was answered: InvalidInput."""
    current_id = request.current.message_id
    waiting = False  # the current message is stored already, unanswered (an import)
    if current_id is not None:
        ids = rt.ctx.active_branch.message_ids
        for n in rt.ctx.history():
            if n.message.metadata.extra.get("message_id") != current_id:
                continue
            if n.id == ids[-1] and n.message.role in (Role.USER, Role.FRONTEND_OPERATOR):
                waiting = True
                break
            raise InvalidInput(
                "currentMessage.messageId",
                f"{current_id!r} is already a message of context {rt.ctx.id!r}: "
                "a request is answered once",
            )
    state = require(rt, Trigger.USER_MESSAGE)
    if state is State.AWAITING_TOOL_APPROVAL:
        d.close_open_calls(rt, "superseded", lambda _: "superseded by a new user message")
    if not waiting:
        now = d.now()
        messages: list[InternalMessage] = [
            m.to_message(now, {"request_context": True}) for m in new_context_messages(rt, request)
        ]
        messages += request.to_messages(now=now)[len(request.history) :]
        for message in messages:
            _history.append(rt, message, d.settings.ids())
    rt.ctx.progress = TurnProgress(iteration=1, attempt=1)
    d.fire(rt, Trigger.USER_MESSAGE)
