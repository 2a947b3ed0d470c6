"""A chat request body answered by the engine (``Engine.send_request``): its
conversation context merged into the context, then one turn on its current
message."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence

from ..adapters.inbound import InboundMessage, InboundRequest, said
from ..errors import HistoryConflict, InvalidInput, SubContextError
from ..model import (
    ClientTools,
    ContentPart,
    InternalMessage,
    MessageNode,
    Role,
    TurnOutput,
    TurnProgress,
)
from ..model._message import extra_of
from ..states import State, Trigger
from . import _calls, _history, _steps
from ._host import Host
from ._runtime import Runtime, require
from ._typed import ERRORS_KEY

__all__ = ["new_context_messages", "send_start", "start_request", "start_send_after"]


def _said(node: MessageNode) -> tuple[Role, str] | None:
    return said(node.message)


def _client_id(node: MessageNode) -> str | None:
    found = extra_of(node.message.metadata).get("message_id")
    return found if isinstance(found, str) else None


def _said_nodes(history: Sequence[MessageNode]) -> list[MessageNode]:
    """The messages of ``history`` a body carries (:func:`_said`), less what a
    client never got of a typed turn: each answer that did not match the
    output type and the message that sent its errors back (``_typed``)."""
    said: list[MessageNode] = []
    for n in history:
        if _said(n) is None:
            continue
        if ERRORS_KEY in extra_of(n.message.metadata) and n.message.role is Role.USER:
            if said and said[-1].message.role is Role.ASSISTANT:
                said.pop()  # the answer whose errors it lists
            continue
        said.append(n)
    return said


def new_context_messages(
    rt: Runtime,
    history: Sequence[InboundMessage],
    where: Callable[[int], str] = lambda i: f"context[{i}]",
    *,
    answers: bool = True,
) -> list[InboundMessage]:
    """The messages of a body's conversation context (``history``) that the
    context does not hold yet, in order; :class:`HistoryConflict` when the body
    disagrees with what the context holds (nothing is stored then).

    The body is laid over what the active branch *said* (its user, assistant,
    system and frontend operator messages with their text; tool messages, tool
    calls with no text, summaries, and a typed turn's answers that were sent
    back with their errors are not in a body), message for message:

    - It starts where its first message with a known id stands (a message is
      known by the id the client gave it, ``metadata.extra["message_id"]``,
      which an answer to a message with one has too: ``X-response``, see
      :func:`~turnfsm.engine._history.answer_id`, or by turnfsm's own id),
      else at the branch's first message: a client that
      keeps ids may resend only the tail of the conversation, one without them
      resends it whole.
    - A message over a stored one must have its role and text; one with an id
      must stand where the message of that id stands, and may not give another
      id to a stored message that has one.
    - The messages past the branch's end are new; their ids must be unknown.

    With ``answers=False`` (the OpenAI ``messages`` list, whose assistant
    messages are the client's copies of completions: one per turn, with a note
    when it waits for a human) only the other messages are laid over the
    branch's; the new part starts at the first of them past the branch's end.

    ``where(i)`` names the body's ``i``-th message in an error.
    """
    ctx = rt.ctx
    said = _said_nodes(ctx.history())
    body = list(enumerate(history))
    if not answers:  # the client's copies of turnfsm's answers are not compared
        said = [n for n in said if n.message.role is not Role.ASSISTANT]
        body = [(i, m) for i, m in body if m.role is not Role.ASSISTANT]
    index: dict[str, int] = {}
    for k, n in enumerate(said):
        index.setdefault(n.id, k)
        cid = _client_id(n)
        if cid is not None:
            index.setdefault(cid, k)
    start = 0
    for k, (_, m) in enumerate(body):
        if m.message_id is not None and m.message_id in index:
            start = index[m.message_id] - k
            break

    def refuse(i: int, reason: str) -> HistoryConflict:
        return HistoryConflict(ctx.id, where(i), history[i].message_id, reason)

    if start < 0:
        raise refuse(body[0][0], "the body has messages before the context's first one")
    for k, (i, m) in enumerate(body):
        pos = start + k
        mid = m.message_id
        if pos >= len(said):  # this one and all after it are new
            seen: set[str] = set()
            for j in range(i, len(history)):
                new_id = history[j].message_id
                if new_id is not None and new_id in index:
                    raise refuse(j, f"it is message {index[new_id]} of the branch, not a new one")
                if new_id is not None and new_id in seen:
                    raise refuse(j, "the body gives this id to two messages")
                if new_id is not None:
                    seen.add(new_id)
            return list(history[i:])
        if mid is not None and mid in index and index[mid] != pos:
            raise refuse(i, f"it is message {index[mid]} of the branch, not message {pos}")
        node = said[pos]
        stored = _said(node)
        assert stored is not None
        if stored != (m.role, m.content):
            what = "its content differs from" if mid is not None and mid in index else "it is not"
            raise refuse(
                i,
                f"{what} message {pos} of the branch ({stored[0].value} {node.id!r}, "
                f"{len(stored[1])} characters)",
            )
        held = _client_id(node)
        if mid is not None and held is not None and mid not in (held, node.id):
            raise refuse(i, f"message {pos} of the branch is {held!r}")
    return []


def _paths(request: InboundRequest) -> tuple[Callable[[int], str], str]:
    """How the body names its context messages, and its current message."""
    if request.format == "legacy":
        return (lambda i: f"messages[{i}]"), f"messages[{len(request.history)}]"
    return (
        lambda i: f"contextManagement.conversationContext[{i}]"
    ), "contextManagement.currentMessage"


async def start_request(
    d: Host, request: InboundRequest, rt: Runtime, *, output: TurnOutput | None = None
) -> None:
    """The ``user_message`` trigger for a request body: the new context
    messages (:func:`new_context_messages`), then the current message (flagged
    ``current``, with the user's language and time zone), appended in the same
    step, each with the body's format (``metadata.extra["request_format"]``).
    When the current message (by its ``messageId``) is already the context's
    last message, unanswered (the body was imported), nothing is appended and
    the turn runs on it; when it is anywhere else, the request was answered:
    InvalidInput; when its content differs, HistoryConflict. Every check comes
    before anything is appended."""
    ctx = rt.ctx
    where, current_where = _paths(request)
    current = request.current
    current_id = current.message_id
    waiting = False  # the current message is stored already, unanswered (an import)
    if current_id is not None:
        ids = ctx.active_branch.message_ids
        for n in ctx.history():
            if current_id not in (_client_id(n), n.id):
                continue
            if _said(n) != (current.role, current.content):
                raise HistoryConflict(
                    ctx.id, current_where, current_id, "its content differs from the stored one"
                )
            if n.id == ids[-1] and n.message.role in (Role.USER, Role.FRONTEND_OPERATOR):
                waiting = True
                break
            raise InvalidInput(
                f"{current_where}.messageId",
                f"{current_id!r} is already a message of context {ctx.id!r}: "
                "a request is answered once",
            )
    fresh = new_context_messages(rt, request.history, where)
    if current_id is not None and any(m.message_id == current_id for m in fresh):
        raise HistoryConflict(
            ctx.id, current_where, current_id, "the body gives this id to two messages"
        )
    state = require(rt, Trigger.USER_MESSAGE)
    d.settings.log.info(
        "request_body",
        context_id=ctx.id,
        format=request.format,
        context_messages=len(request.history),
        appended=0 if waiting else len(fresh) + 1,
    )
    if state is State.AWAITING_TOOL_APPROVAL:
        _steps.close_open_calls(rt, "superseded", lambda _: "superseded by a new user message")
    if not waiting:
        now = d.now()
        fmt = {"request_format": request.format}
        messages: list[InternalMessage] = [
            m.to_message(now, {"request_context": True, **fmt}) for m in fresh
        ]
        (last,) = request.to_messages(now=now)[len(request.history) :]
        last.metadata.extra.update(fmt)
        messages.append(last)
        for message in messages:
            _history.append(rt, message, d.settings.ids())
    rt.ctx.progress = TurnProgress(iteration=1, attempt=1, output=output)
    _steps.fire(rt, Trigger.USER_MESSAGE)


def send_start(
    d: Host,
    parts: list[ContentPart],
    role: Role,
    message_id: str | None,
    context: Sequence[InboundMessage] | None,
    output: TurnOutput | None = None,
    client: ClientTools | None = None,
) -> Callable[[Runtime], Awaitable[None] | None]:
    """The start of ``engine.send`` (its arguments checked): a plain send, or,
    with the client's ``context`` (checked here, before anything is loaded),
    :func:`start_send_after`. ``output`` is the turn's output type."""
    if not context:
        return functools.partial(
            _calls.start_send, d, parts, role, message_id, output=output, client=client
        )
    for i, m in enumerate(context):
        if not isinstance(m, InboundMessage):
            raise InvalidInput(f"context[{i}]", "must be an InboundMessage")
    return functools.partial(
        start_send_after, d, list(context), parts, role, message_id, output=output, client=client
    )


async def start_send_after(
    d: Host,
    context: Sequence[InboundMessage],
    parts: list[ContentPart],
    role: Role,
    message_id: str | None,
    rt: Runtime,
    *,
    output: TurnOutput | None = None,
    client: ClientTools | None = None,
) -> None:
    """:func:`~turnfsm.engine._calls.start_send` after the client's own copy of
    the conversation (``context``; its assistant messages, the client's copies
    of turnfsm's answers, are not compared): what the context does not hold of it is
    appended first (flagged ``request_context``), in the same step; a
    disagreement is a HistoryConflict before anything is stored."""
    fresh = new_context_messages(rt, context, lambda i: f"context[{i}]", answers=False)
    if fresh:
        if rt.ctx.config.archived:  # start_send refuses it: nothing appended before
            raise SubContextError(rt.ctx.id, "it is a finished sub-context: it takes no more input")
        require(rt, Trigger.USER_MESSAGE)  # nothing appended where a send is refused
        if message_id is not None and message_id in rt.ctx.message_pool:
            raise InvalidInput(
                "message_id", f"context {rt.ctx.id!r} already has a message {message_id!r}"
            )
        now = d.now()
        for m in fresh:
            _history.append(rt, m.to_message(now, {"request_context": True}), d.settings.ids())
    _calls.start_send(d, parts, role, message_id, rt, output=output, client=client)
