"""Session-style chat endpoints: ``/sessions`` and ``POST /chat``.

The shape of a simple file-backed chat backend: a *session* is a context of the
caller's tenant, and a conversation is a list of *records* of the session JSON
format (the ``session`` export of ``turnfsm.adapters.outbound``): message
records and tool call records. ``POST /chat`` runs one turn on the engine, as
``POST /api/contexts/{id}/messages`` does, and streams it as server-sent events
``record``, ``tool_calls_start``, ``tool_result``, ``error`` and ``done``. See
the section "Session endpoints" of ``docs/server.md``.

Nothing is kept twice: the records are made from the messages the engine
stored, found by the turn's events (:class:`_Feed` says how). The turn runs in
a task the app owns, so the engine never waits for the stream, and a client
that goes away does not stop the turn.
"""

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import EventSourceResponse

# the session format's exporters (and the importers they use) are imported by
# the first sessions request that needs them, not by the server's start
from ..engine import Subscription, Turn
from ..errors import ContextNotFound, InvalidInput, TurnFSMError
from ..events import STREAMED_KINDS, Event, EventsMissed, MessageCompleted, StateChanged, ToolResult
from ..model import (
    ApprovalStatus,
    ChatContext,
    ContentPart,
    ImagePart,
    InternalMessage,
    MessageNode,
    Role,
    TextPart,
    ToolCallRequest,
)
from ..states import State
from ._calls import create_context
from ._deps import HubOf, Tenant, cursor_of, digits
from ._errors import ApiError, status_of
from ._flags import Flag
from ._hub import Hub, Job
from ._json_body import DocumentRoute
from ._sse import json_frame
from ._tenants import DEFAULT_TENANT

__all__ = ["ACCEPTED_BINARY", "SESSION_HEADER", "router"]

SESSION_HEADER = "x-turnfsm-session-id"
"""The response header naming the session ``POST /chat`` ran its turn on."""
MAX_SESSION_PAGE = 100
"""Sessions a page of ``GET /sessions`` may hold (each is read from the store)."""
SHUTDOWN_GRACE = 2.0
"""Seconds a chat stream has, once the server stops, to send its last events."""
ACCEPTED_BINARY = (
    "a binary_content item is {'data': <base64>, 'media_type': 'image/png', "
    "'identifier'?: <file name>, 'kind'?: 'binary'} (an image/* media type is "
    "sent as an image, any other as a file), {'url': <https or data URL of an "
    "image>, 'kind'?: 'image-url'}, or a base64 data URL string"
)


class SessionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str | None = None


class SessionOut(BaseModel):
    id: str
    title: str | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, ctx: ChatContext) -> "SessionOut":
        return cls(
            id=ctx.id, title=ctx.config.title, created_at=ctx.created_at, updated_at=ctx.updated_at
        )


class SessionList(BaseModel):
    sessions: list[SessionOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next (older) page")


class SessionRecords(SessionOut):
    state: str
    records: list[dict[str, Any]] = Field(description="the active branch in the session format")
    pending_tool_calls: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the calls that wait for a human's decision, as /chat's done gives them",
    )


class ChatIn(BaseModel):
    """One user message for a session (none: a new session is made)."""

    model_config = ConfigDict(extra="forbid")
    session_id: str | None = None
    message: str
    binary_content: list[Any] | None = Field(
        default=None, description="attachments: images and files (see docs/server.md)"
    )


def _content(body: ChatIn) -> list[ContentPart]:
    """The user message as content parts: its text, then each attachment, read
    as the session format reads a record's ``binary_content``."""
    if not body.message.strip():
        raise InvalidInput("body.message", "must not be empty")
    parts: list[ContentPart] = [TextPart(text=body.message)]
    if not body.binary_content:
        return parts
    record = {"type": "message", "role": "user", "binary_content": body.binary_content}
    from ..adapters.inbound.importers import import_session_records  # few requests attach

    try:
        ctx = import_session_records([record])
    except InvalidInput as exc:
        where = exc.where.replace("$[0].", "body.", 1)
        raise InvalidInput(where, f"{exc.reason}; {ACCEPTED_BINARY}") from None
    attached = ctx.history()[0].message.content
    for j, part in enumerate(attached):
        if isinstance(part, ImagePart) and not part.url.startswith(("https://", "data:")):
            where = f"body.binary_content[{j}]" + (
                "" if isinstance(body.binary_content[j], str) else ".url"
            )
            raise InvalidInput(
                where,
                f"an image URL is https:// or data:, not {part.url[:40]!r}; {ACCEPTED_BINARY}",
            )
    return parts + attached


def _record(msg: InternalMessage) -> dict[str, Any]:
    """A message record; a refusal, which the format has no place for, as ``refusal``."""
    from ..adapters.outbound.exporters import message_record

    record = message_record(msg)
    if msg.refusal is not None:
        record["refusal"] = msg.refusal
    return record


def _thinking_record(msg: InternalMessage) -> dict[str, Any]:
    """An assistant message's thinking, as a message record of its own."""
    from ..adapters.outbound.exporters import message_record

    record = message_record(msg)
    return {**record, "content": msg.thinking, "binary_content": [], "thinking": True}


def _call(call: ToolCallRequest) -> dict[str, Any]:
    arguments = call.raw_arguments if call.raw_arguments is not None else call.arguments
    return {"tool_call_id": call.id, "tool_name": call.tool_name, "arguments": arguments}


def _sse(event: str, data: Any) -> bytes:
    return json_frame(data, event)


class _Feed:
    """The records of the messages the turn stores, each once, in their order.

    The branch is read once when the turn has taken its first step (the user's
    message, and the results that closed calls left pending, are stored then)
    and once when it has ended (the context then rests in memory: no load).
    Between the two, each event of a stored message says which one to send: a
    ``MessageCompleted`` carries the stored answer; a ``ToolResult`` names the
    stored result, read by its id (not the whole context). After an
    ``EventsMissed``, the branch is read again.

    An assistant message asking for tools gives ``tool_calls_start`` once its
    calls are decided (none pending: read again when the context enters
    ``ExecutingTools``): the calls approved, about to run. A turn that stops
    for a human leaves it undecided, and ``done`` lists the pending calls.
    """

    def __init__(self, hub: Hub, cid: str, before: list[MessageNode]) -> None:
        self.hub = hub
        self.cid = cid
        self.start = len(before)
        """Where the turn's messages begin in the branch (``before``: the branch)."""
        self.sent: set[str] = set()
        self.calls: dict[str, ToolCallRequest] = {}
        """The calls whose results may come: the last batch before the turn (a
        new message closes its pending calls), then the turn's own."""
        last = next((n.message for n in reversed(before) if n.message.tool_calls), None)
        if last is not None and last.tool_calls:
            self.calls = {c.id: c for c in last.tool_calls}
        self.undecided: str | None = None
        """The id of an assistant message whose calls are not all decided."""

    async def catch_up(self) -> list[bytes]:
        """Every message the turn stored that was not sent yet (one read of the branch)."""
        out: list[bytes] = []
        for node in await self.hub.engine.messages(self.cid, offset=self.start):
            if node.id == self.undecided:
                out.extend(self._decided(node))
            elif node.id not in self.sent:
                out.extend(self._records(node))
        return out

    async def after(self, events: list[Event]) -> list[bytes]:
        """What these events say was stored, as records."""
        out: list[bytes] = []
        for ev in events:
            if isinstance(ev, EventsMissed):
                out.extend(await self.catch_up())
            elif isinstance(ev, MessageCompleted) and ev.message_id not in self.sent:
                out.extend(self._records(MessageNode(id=ev.message_id, message=ev.message)))
            elif isinstance(ev, ToolResult) and ev.message_id not in self.sent:
                out.extend(self._records(await self._read(ev.message_id)))
            elif (
                isinstance(ev, StateChanged)
                and ev.to_state == State.EXECUTING_TOOLS
                and self.undecided is not None
            ):
                out.extend(self._decided(await self._read(self.undecided)))
        return out

    async def _read(self, message_id: str) -> MessageNode:
        found = await self.hub.engine.store.load_messages(self.cid, [message_id])
        return found[0]

    def _records(self, node: MessageNode) -> list[bytes]:
        self.sent.add(node.id)
        msg = node.message
        if msg.role is Role.TOOL:
            done = msg.tool_result
            call = self.calls.get(done.request_id) if done is not None else None
            if call is None:
                return []  # a result with no call: not a record the format has
            from ..adapters.outbound.exporters import tool_record

            return [_sse("tool_result", tool_record(call, msg, msg))]
        out: list[bytes] = []
        if msg.thinking:
            out.append(_sse("record", _thinking_record(msg)))
        if msg.role is not Role.ASSISTANT or msg.content or not msg.tool_calls:
            out.append(_sse("record", _record(msg)))
        if msg.tool_calls:
            out.extend(self._decided(node))
        return out

    def _decided(self, node: MessageNode) -> list[bytes]:
        calls = node.message.tool_calls or []
        for c in calls:
            self.calls[c.id] = c  # with its stored decision
        if any(c.approval_status is ApprovalStatus.PENDING for c in calls):
            self.undecided = node.id
            return []
        self.undecided = None
        running = [_call(c) for c in calls if c.approval_status is ApprovalStatus.APPROVED]
        return [_sse("tool_calls_start", running)] if running else []


def _final(turn: Turn | None) -> dict[str, Any] | None:
    """The record of the turn's last assistant message with text (None if none)."""
    for msg in reversed(turn.messages if turn is not None else ()):
        if msg.role is Role.ASSISTANT:
            return _record(msg) if msg.content or msg.refusal is not None else None
    return None


def _error_body(job: Job) -> dict[str, Any] | None:
    """The error of a failed turn, as an error response's body (None: it did not fail)."""
    turn, exc = job.turn, job.error
    if exc is not None:
        if not isinstance(exc, TurnFSMError):  # logged by the job; the stream says no more
            return {"error": {"code": "internal_error", "message": "see the server's log"}}
        _, code = status_of(exc)
        return {"error": {"code": code, "message": str(exc)}}
    if turn is not None and (turn.state is State.PERMANENT_FAILURE or turn.error is not None):
        return {"error": {"code": "turn_failed", "message": turn.error or "the turn failed"}}
    return None


router = APIRouter(tags=["sessions"], route_class=DocumentRoute)


async def _session(hub: Hub, session_id: str, who: str) -> str:
    """The tenant's session (or a sub-context of one, as for ``/api``), else
    ``404 session_not_found`` (never a 403)."""
    try:
        await hub.check(session_id, who)
    except ContextNotFound:
        raise ApiError(404, "session_not_found", f"no session {session_id!r}") from None
    return session_id


@router.post("/sessions", status_code=201)
async def create_session(hub: HubOf, who: Tenant, body: SessionIn | None = None) -> SessionOut:
    """A new session (a context of the caller's tenant), with its ``title`` if given."""
    try:
        cid = await create_context(hub, who, title=body.title if body is not None else None)
    except InvalidInput as exc:
        raise InvalidInput(f"body.{exc.where}", exc.reason) from None
    return SessionOut.of(await hub.engine.store.load(cid))


@router.get("/sessions")
async def list_sessions(
    hub: HubOf,
    who: Tenant,
    cursor: str | None = None,
    limit: Annotated[
        int, Query(ge=1, le=MAX_SESSION_PAGE), digits("limit", 1, MAX_SESSION_PAGE)
    ] = 20,
) -> SessionList:
    """The tenant's sessions, newest first (by creation), paged."""
    owners = await hub.tenants.all()
    fallback = DEFAULT_TENANT if not hub.config.tokens else None
    mine = [
        s.id
        for s in await hub.engine.store.list_contexts()  # oldest first
        if s.parent_id is None and owners.get(s.id, fallback) == who
    ]
    given = cursor_of(cursor)
    end = len(mine) if given is None else min(given, len(mine))
    start = max(0, end - limit)
    page: list[SessionOut] = []
    for cid in reversed(mine[start:end]):
        try:
            page.append(SessionOut.of((await hub.outline(cid)).context))
        except ContextNotFound:
            continue  # deleted meanwhile
    return SessionList(sessions=page, next_cursor=str(start) if start > 0 else None)


@router.get("/sessions/{session_id}")
async def get_session(hub: HubOf, session_id: str, who: Tenant) -> SessionRecords:
    """The session and its records (the active branch in the session format)."""
    from ..adapters.outbound.exporters import export_session_records

    ctx = await hub.engine.store.load(await _session(hub, session_id, who))
    exported = export_session_records(ctx)
    waiting = ctx.pending_tool_calls()
    pending = {c.id for c in waiting}
    return SessionRecords(
        **SessionOut.of(ctx).model_dump(),
        state=ctx.current_state,
        records=[
            _pending(r) if r.get("tool_call_id") in pending else r for r in exported["records"]
        ],
        pending_tool_calls=[_call(c) for c in waiting],
    )


def _pending(record: dict[str, Any]) -> dict[str, Any]:
    """A call that waits for a decision: no result yet (the export gives such
    a call the result an import gives a missing one, ``success`` false)."""
    return {**record, "result": None, "success": None, "pending": True}


@router.post(
    "/chat",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def chat(hub: HubOf, body: ChatIn, who: Tenant) -> EventSourceResponse:
    """One turn on a session (none given: a new one), streamed as records."""
    content = _content(body)  # bad input: 422 before anything is stored
    engine = hub.engine
    if body.session_id is not None:
        cid = await _session(hub, body.session_id, who)
        feed = _Feed(hub, cid, await engine.messages(cid))  # in memory when loaded
    else:
        # over the tenant's turn limit: 429 before a session is made
        async with hub.reserve(who):
            cid = await create_context(hub, who, title=None)
        feed = _Feed(hub, cid, [])
    sub = engine.subscribe(cid)
    try:
        job = await hub.launch(cid, lambda: engine.send(cid, content), wait=False)
    except BaseException:
        await sub.aclose()
        raise
    stop = anyio.Event()
    return EventSourceResponse(
        _stream(hub, feed, sub, job, stop),
        headers={SESSION_HEADER: cid},
        ping=hub.config.heartbeat,
        shutdown_event=stop,
        shutdown_grace_period=SHUTDOWN_GRACE,
    )


async def _stream(
    hub: Hub, feed: _Feed, sub: Subscription, job: Job, stop: anyio.Event
) -> AsyncIterator[bytes]:
    """The turn's records as they are stored, then ``error`` (if it failed) and ``done``."""
    try:
        for sse in await feed.catch_up():
            yield sse
        while not (job.done.is_set() or stop.is_set() or hub.closing.is_set()):
            for sse in await feed.after(await _step(sub, job, (stop, hub.closing))):
                yield sse
        for sse in await feed.after(_stored(sub.drain())):
            yield sse
    finally:
        await sub.aclose()
    for sse in await feed.catch_up():  # anything stored with no event (a cancel's partial text)
        yield sse
    error = _error_body(job)
    if error is not None:
        yield _sse("error", error)
    turn = job.turn
    if turn is not None:
        state, stop_reason = str(turn.state), turn.stop_reason
        pending = [_call(c) for c in turn.pending_tool_calls]
        questions = [
            {"tool_call_id": q.call_id, "question": q.question, "choices": list(q.choices)}
            for q in turn.questions
        ]
    else:  # the call raised, or still runs as the server stops: what the store holds
        ctx = await hub.engine.get_context(feed.cid)
        state, stop_reason = ctx.current_state, None
        pending, questions = [_call(c) for c in ctx.pending_tool_calls()], []
    yield _sse(
        "done",
        {
            "session_id": feed.cid,
            "state": state,
            "stop_reason": None if stop_reason is None else str(stop_reason),
            "record": _final(turn),
            "pending_tool_calls": pending,
            "questions": questions,
        },
    )


def _stored(events: list[Event]) -> list[Event]:
    return [ev for ev in events if ev.kind not in STREAMED_KINDS]


async def _step(sub: Subscription, job: Job, stops: tuple[anyio.Event, ...]) -> list[Event]:
    """The next events that say something was stored (a streamed delta says
    nothing yet), all those waiting; none when the turn ends or the server stops."""
    got: list[Event] = []

    async def read(scope: anyio.CancelScope) -> None:
        async for ev in sub:
            if ev.kind not in STREAMED_KINDS:
                got.append(ev)
                break
        else:  # the engine closed: the turn ends too
            await job.done.wait()
        got.extend(_stored(sub.drain()))
        scope.cancel()

    async def watch(event: anyio.Event | Flag, scope: anyio.CancelScope) -> None:
        await event.wait()
        scope.cancel()

    async with anyio.create_task_group() as race:
        race.start_soon(read, race.cancel_scope)
        watched: tuple[anyio.Event | Flag, ...] = (job.done, *stops)
        for event in watched:
            race.start_soon(watch, event, race.cancel_scope)
    return got
