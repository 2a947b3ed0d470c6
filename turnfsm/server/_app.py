"""The FastAPI application: the engine's calls under ``/api`` (see ``docs/server.md``)."""

import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import anyio
import structlog
from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..audit import audit_jsonl, audit_records, verify_audit_log
from ..engine import UNSET, Engine, Turn
from ..errors import ContextNotFound, InvalidInput, RenderError, TurnFSMError
from ..events import EVENT_ADAPTER, Event, StateChanged
from ..model import ChatContext, MessageNode
from ..relay import EventRelay
from ..render import dot_source, mermaid_state_diagram, path_from_steps, render_svg
from ..storage._eventlog import LogNote, open_event_log
from ._errors import ApiError, error_response, install_handlers
from ._events import Channel, Listener, add_event_routes
from ._handoff import wait_for_rest
from ._limits import DEFAULT_MAX_TURNS_PER_TENANT, TurnLimit
from ._models import (
    AcceptedOut,
    AnswerIn,
    ApproveIn,
    BranchIn,
    ChildOut,
    ContextIn,
    ContextList,
    ContextOut,
    ContextSummaryOut,
    ContextUpdate,
    ErrorOut,
    MessageIn,
    MessagePage,
    StateOut,
    SwitchIn,
    TurnOut,
    VerifyOut,
)
from ._openai_compat import openai_router
from ._request_compat import request_router
from ._sessions import sessions_router
from ._tenants import DEFAULT_TENANT, TenantTable, tenant_of_token
from ._web import web_router

__all__ = ["Hub", "ServerConfig", "create_app"]

log = structlog.get_logger("turnfsm.server")

DEFAULT_MAX_BODY = 1_000_000
"""Bytes a request body may have (``413`` beyond)."""
MAX_PAGE = 500
IDLE_CHANNELS = 64
"""Channels kept (with their recent events) once no stream and no call uses them."""
KNOWN_OWNERS = 4096
"""Contexts whose tenant the hub remembers for the tenant-wide streams."""


@dataclass
class ServerConfig:
    """How the app runs: ``tokens`` (token -> tenant; empty: one tenant, no
    authentication), the body limit, the CORS origins (none: CORS off), the
    heartbeat of event streams, and whether ``recover()`` runs on start."""

    tokens: dict[str, str] = field(default_factory=dict)
    max_body: int = DEFAULT_MAX_BODY
    cors_origins: list[str] = field(default_factory=list)
    heartbeat: float = 15.0
    recover_on_start: bool = True
    shutdown_grace: float = 5.0
    max_turns_per_tenant: int = DEFAULT_MAX_TURNS_PER_TENANT
    turns: Literal["here", "workers"] = "here"
    """Where a posted message's turn runs: in this process, or on the workers
    of the same store (``docs/workers.md``; the server then runs no
    ``recover()`` on start: the workers claim what a crash left)."""


_FIRST_STEPS = frozenset({"StateChanged", "ToolResult", "ContextChanged"})
"""The events that show a launched call has taken its first step."""


class _Job:
    """One engine call run in a task the app owns (it outlives the request)."""

    def __init__(self, context_id: str) -> None:
        self.context_id = context_id
        self.done = anyio.Event()
        self.turn: Turn | None = None
        self.error: Exception | None = None
        self.started = anyio.Event()
        """Set at the call's first step (or when it returned or failed)."""
        self.state: str | None = None
        """The state the call had reached when :meth:`Hub.launch` returned
        (None: it had taken no step yet)."""

    async def run(
        self,
        fn: Callable[[], Awaitable[Turn]],
        hub: "Hub",
        tenant: str | None = None,
        channel: Channel | None = None,
    ) -> None:
        # a call refused because another runs must not hide that one
        mine = hub.running.setdefault(self.context_id, self) is self
        try:
            self.turn = await fn()
        except Exception as exc:
            self.error = exc
            log.info("call_failed", context_id=self.context_id, error=str(exc))
        finally:
            if mine:
                del hub.running[self.context_id]
            if tenant is not None:
                hub.turn_limit.release(tenant)
            if channel is not None:
                hub.release(channel)
            self.started.set()
            self.done.set()


class Hub:
    """The app's engine, tenant table, event channels and running calls (set
    up by the lifespan).

    Per context, a :class:`~turnfsm.server._events.Channel` puts the events
    of this process's engine and those other processes relayed (the event
    log and its doorbell) in one order, deduplicated by seq, for the streams
    on it. A channel exists while a stream or a running call of this server
    needs it; then it stays among the :data:`IDLE_CHANNELS` most recently
    used (a reconnect just after a turn gets its deltas from the ring), and
    goes: memory does not grow with the contexts ever touched.
    """

    def __init__(self, factory: Callable[[], Engine], config: ServerConfig) -> None:
        self.factory = factory
        self.config = config
        self._engine: Engine | None = None
        self._tenants: TenantTable | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self.running: dict[str, _Job] = {}
        self.starting: dict[str, list[_Job]] = {}
        """Per context, the launched calls waiting for their first step."""
        self.turn_limit = TurnLimit(config.max_turns_per_tenant)
        self.ready = False
        self.closing = anyio.Event()
        self.channels: dict[str, Channel] = {}
        """The channels a stream or a running call uses."""
        self.idle: OrderedDict[str, Channel] = OrderedDict()
        """Channels nobody uses, least recently used first (at most IDLE_CHANNELS)."""
        self.owners: OrderedDict[str, str] = OrderedDict()
        """The tenant of recently seen contexts (at most KNOWN_OWNERS), for the
        tenant-wide streams of events from contexts without a channel."""
        self.listeners: dict[str, set[Listener]] = {}
        """Per tenant, the tenant-wide streams (``/api/events``)."""

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise ApiError(503, "not_ready", "the server is starting or stopping")
        return self._engine

    @property
    def tenants(self) -> TenantTable:
        assert self._tenants is not None
        return self._tenants

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        engine = self.factory()
        event_log = open_event_log(engine.store)
        await event_log.open()
        self._tenants = TenantTable(event_log)
        try:
            async with (
                engine,
                EventRelay(engine, event_log),
                anyio.create_task_group() as tg,
            ):
                self._engine, self._tg = engine, tg
                local = engine.tap(self._on_local)
                tg.start_soon(event_log.listen, self._on_note, self._on_listening)
                if self.config.recover_on_start and self.config.turns == "here":
                    recovery = await engine.recover()
                    log.info(
                        "recovered",
                        resumed=sorted(recovery.resumed),
                        skipped=sorted(recovery.skipped),
                        failed=sorted(recovery.failed),
                    )
                tg.start_soon(self._cancel_on_closing)
                self.ready = True
                try:
                    yield
                finally:
                    self.ready = False
                    self.closing.set()
                    await self._stop_running()
                    tg.cancel_scope.cancel()
                    local.close()
        finally:
            self._engine = None
            await event_log.aclose()

    async def _cancel_on_closing(self) -> None:
        await self.closing.wait()
        self.ready = False
        await self._stop_running()

    async def _stop_running(self) -> None:
        """Cancel the running calls cleanly (each ends at Idle, its text kept)."""
        with anyio.move_on_after(self.config.shutdown_grace):
            for cid, job in list(self.running.items()):
                try:
                    await self.engine.cancel(cid)
                except TurnFSMError as exc:
                    log.info("cancel_on_shutdown_failed", context_id=cid, error=str(exc))
                await job.done.wait()

    # ------------------------------------------------------------------ tenants

    async def owner(self, context_id: str) -> str | None:
        """The tenant of a stored context (a child: its parent's); ContextNotFound."""
        cid: str | None = context_id
        for _ in range(100):
            assert cid is not None
            tenant = await self.tenants.get(cid)
            if tenant is not None:
                return tenant
            ctx = await self.engine.store.load(cid)
            if ctx.parent_id is None:
                return DEFAULT_TENANT if not self.config.tokens else None
            cid = ctx.parent_id
        return None

    async def check(self, context_id: str, tenant: str) -> None:
        """ContextNotFound unless ``tenant`` owns the context (never a 403)."""
        if await self.owner(context_id) != tenant:
            raise ContextNotFound(context_id)
        self.tap(context_id, tenant)

    def tap(self, context_id: str, tenant: str) -> None:
        """Remember the context's tenant (its events then reach the tenant's
        streams even when no channel is open on it)."""
        self.owners[context_id] = tenant
        self.owners.move_to_end(context_id)
        while len(self.owners) > KNOWN_OWNERS:
            self.owners.popitem(last=False)

    # ------------------------------------------------------------------ channels

    def hold(self, context_id: str) -> Channel:
        """The context's channel, used until :meth:`release`."""
        ch = self.channels.get(context_id)
        if ch is None:
            ch = self.idle.pop(context_id, None) or Channel(context_id, self.listeners)
            self.channels[context_id] = ch
        ch.tenant = self.owners.get(context_id, ch.tenant)
        ch.users += 1
        return ch

    def release(self, ch: Channel) -> None:
        ch.users -= 1
        if ch.users > 0 or self.channels.get(ch.context_id) is not ch:
            return
        del self.channels[ch.context_id]
        self.idle[ch.context_id] = ch
        while len(self.idle) > IDLE_CHANNELS:
            self.idle.popitem(last=False)

    def channel(self, context_id: str) -> Channel | None:
        return self.channels.get(context_id) or self.idle.get(context_id)

    def offer(self, context_id: str, item: Event | int) -> None:
        """An event (or a doorbell: a seq to read from the log) of a context,
        from this process's engine or another's."""
        ch = self.channel(context_id)
        if ch is not None:
            if ch.take(item) and self._tg is not None:
                self._tg.start_soon(ch.fill, self)
            return
        if not isinstance(item, int) and self.listeners:
            tenant = self.owners.get(context_id)
            for stream in list(self.listeners.get(tenant or "", ())):
                stream.put(item)

    def _on_local(self, ev: Event) -> bool:
        """An event of this process's engine as it goes out (the engine's tap:
        no queue, no task), to the channels and the tenant streams. True when
        it started a launched call: the engine then lets the request answer
        (its ``202``) before it goes on with the turn."""
        self.offer(ev.context_id, ev)
        if self.starting and ev.kind in _FIRST_STEPS:
            waiting = False
            for job in self.starting.get(ev.context_id, ()):
                if isinstance(ev, StateChanged):
                    job.state = ev.to_state
                if not job.started.is_set():
                    job.started.set()
                    waiting = True
            return waiting
        return False

    def _on_note(self, note: LogNote) -> None:
        """A doorbell from the event log (another process, or this one's echo)."""
        ch = self.channel(note.context_id)
        if ch is None:
            return  # nobody here streams it
        if ch.next is None and note.first is not None and not ch.filling:
            ch.next = note.first  # a new channel: from the first event rung with it
        if note.event is None:
            self.offer(note.context_id, note.seq)
            return
        try:
            if isinstance(note.event, str):
                ev = EVENT_ADAPTER.validate_json(note.event)
            else:
                ev = EVENT_ADAPTER.validate_python(note.event)
        except ValueError:
            self.offer(note.context_id, note.seq)
        else:
            self.offer(note.context_id, ev)

    async def _on_listening(self) -> None:
        """Listening (again): notes rung meanwhile are lost, so each channel
        reads the log up to its newest kept event."""
        ids = [*self.channels, *self.idle]
        if not ids:
            return
        try:
            newest = await self.tenants.log.newest(ids)
        except Exception as exc:  # the next note of each context reads the log anyway
            log.warning("event_log_read_failed", error=str(exc))
            return
        for cid, seq in newest.items():
            self.offer(cid, seq)

    async def untap(self, context_ids: list[str]) -> None:
        for cid in context_ids:
            ch = self.channels.pop(cid, None) or self.idle.pop(cid, None)
            if ch is not None:
                ch.close()
            self.owners.pop(cid, None)

    # ------------------------------------------------------------------ calls

    async def launch(
        self, context_id: str, fn: Callable[[], Awaitable[Turn]], *, wait: bool
    ) -> "_Job":
        """Run ``fn`` in the app's task group. With ``wait``, until it returns;
        else until it took its first step (or failed its checks, raised here)."""
        assert self._tg is not None
        job = _Job(context_id)
        tenant = self.owners.get(context_id)
        if tenant is not None:  # 429 over the tenant's limit (docs/server.md, "Limits")
            self.turn_limit.acquire(tenant)
        if wait:
            self._tg.start_soon(job.run, fn, self, tenant, self.hold(context_id))
            await job.done.wait()
        else:
            # _on_local sets job.started at the call's first step (the job
            # itself when it returned or failed)
            starting = self.starting.setdefault(context_id, [])
            starting.append(job)
            try:
                self._tg.start_soon(job.run, fn, self, tenant, self.hold(context_id))
                await job.started.wait()
            finally:
                starting.remove(job)
                if not starting and self.starting.get(context_id) is starting:
                    del self.starting[context_id]
        if job.done.is_set() and job.error is not None:
            raise job.error
        return job


# ---------------------------------------------------------------------- middleware


class Gate:
    """Every HTTP request's way in: ``413`` for a body over ``limit`` bytes
    (declared or streamed), and one structlog line per request (method, path,
    status, milliseconds). One middleware for both: each layer wraps every
    message of every request."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 0
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooBig
            return message

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            if self._declared(scope) > self.limit:
                await self._too_big(scope, receive, watched)
                return
            try:
                await self.app(scope, counted, watched)
            except _TooBig:
                if not status:
                    await self._too_big(scope, receive, watched)
        finally:
            log.info(
                "request",
                method=scope.get("method"),
                path=scope.get("path"),
                status=status,
                ms=round((time.perf_counter() - start) * 1000, 1),
            )

    @staticmethod
    def _declared(scope: Scope) -> int:
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return 0
        return 0

    async def _too_big(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = error_response(
            413, "body_too_large", f"the request body is over {self.limit} bytes"
        )
        await answer(scope, receive, send)


class _TooBig(Exception):
    pass


# ---------------------------------------------------------------------- the app

_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorOut} for s in (401, 404, 409, 413, 422)
}


def create_app(factory: Callable[[], Engine], config: ServerConfig | None = None) -> FastAPI:
    """The app over the engine ``factory()`` makes (in the app's event loop, on start)."""
    config = config or ServerConfig()
    hub = Hub(factory, config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with hub.lifespan():
            yield

    app = FastAPI(
        title="turnfsm",
        summary="LLM conversations driven by a declared finite-state machine, over HTTP",
        lifespan=lifespan,
        responses=_ERRORS,
    )
    app.state.hub = hub
    install_handlers(app)

    async def tenant(request: Request) -> str:
        if not config.tokens:
            return DEFAULT_TENANT
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        found = (
            tenant_of_token(config.tokens, token.strip()) if scheme.lower() == "bearer" else None
        )
        if found is None:
            raise ApiError(401, "unauthorized", "a valid bearer token is required")
        return found

    Tenant = Annotated[str, Depends(tenant)]

    async def owned(context_id: str, request: Request) -> str:
        # the tenant read here rather than through Depends(tenant): one level
        # of dependency less on every call about a context
        await hub.check(context_id, await tenant(request))
        return context_id

    Owned = Annotated[str, Depends(owned)]
    Wait = Annotated[bool, Query(description="return the Turn once the context rests")]

    def turn_or_accepted(job: Any, wait: bool, state: str) -> Any:
        if wait and job.turn is not None:
            return TurnOut.of(job.turn)
        return JSONResponse(
            AcceptedOut(context_id=job.context_id, state=state).model_dump(mode="json"),
            status_code=202,
        )

    async def stored(cid: str) -> ChatContext:
        return await hub.engine.store.load(cid)

    async def state_of(job: _Job) -> str:
        """The state a launched call had reached when it was answered."""
        if job.turn is not None:
            return job.turn.state.value
        if job.state is not None:
            return job.state
        return (await stored(job.context_id)).current_state

    # -------------------------------------------------------------- health

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    async def readyz() -> Response:
        if not hub.ready:
            return error_response(503, "not_ready", "the server is starting or stopping")
        return JSONResponse({"status": "ready", "running": len(hub.running)})

    # -------------------------------------------------------------- contexts

    @app.get("/api/contexts", tags=["contexts"])
    async def list_contexts(
        who: Tenant,
        state: str | None = None,
        cursor: str | None = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    ) -> ContextList:
        start = _cursor(cursor)
        summaries = await hub.engine.store.list_contexts()
        owners = await hub.tenants.all()
        parents = {s.id: s.parent_id for s in summaries}

        def owner(cid: str | None) -> str | None:
            for _ in range(100):
                if cid is None:
                    return None
                if cid in owners:
                    return owners[cid]
                if parents.get(cid) is None:
                    return DEFAULT_TENANT if not config.tokens else None
                cid = parents[cid]
            return None

        mine = [s for s in summaries if owner(s.id) == who and (state is None or s.state == state)]
        page = mine[start : start + limit]
        more = start + limit < len(mine)
        return ContextList(
            contexts=[
                ContextSummaryOut(
                    id=s.id,
                    state=s.state,
                    version=s.version,
                    updated_at=s.updated_at,
                    parent_id=s.parent_id,
                    title=s.title,
                    model=s.model,
                )
                for s in page
            ],
            next_cursor=str(start + limit) if more else None,
        )

    @app.post("/api/contexts", status_code=201, tags=["contexts"])
    async def create_context(body: ContextIn, who: Tenant) -> ContextOut:
        cid = await hub.engine.create_context(
            system_prompt=body.system_prompt,
            user_prompt=body.user_prompt,
            model=body.model,
            mode=body.mode,
            parameters=body.parameters,
            title=body.title,
            tools=body.tools,
        )
        await hub.tenants.set(cid, who)
        hub.tap(cid, who)
        return ContextOut.of(await stored(cid))

    @app.get("/api/contexts/{context_id}", tags=["contexts"])
    async def get_context(context_id: Owned) -> ContextOut:
        return ContextOut.of(await stored(context_id))

    @app.put("/api/contexts/{context_id}", tags=["contexts"])
    async def update_context(context_id: Owned, body: ContextUpdate) -> ContextOut:
        given = body.model_dump(exclude_unset=True)
        await hub.engine.update_config(
            context_id,
            model=given.get("model", UNSET),
            mode=given.get("mode", UNSET),
            parameters=given.get("parameters", UNSET),
            title=given.get("title", UNSET),
        )
        return ContextOut.of(await stored(context_id))

    @app.delete("/api/contexts/{context_id}", tags=["contexts"])
    async def delete_context(context_id: Owned) -> dict[str, list[str]]:
        deleted = await hub.engine.delete_context(context_id)
        await hub.tenants.forget(deleted)
        await hub.untap(deleted)
        return {"deleted": deleted}

    @app.get("/api/contexts/{context_id}/state", tags=["contexts"])
    async def get_state(context_id: Owned) -> StateOut:
        ctx = await stored(context_id)
        return StateOut(
            context_id=context_id,
            state=ctx.current_state,
            version=ctx.version,
            running=context_id in hub.running,
            pending_tool_calls=ctx.pending_tool_calls(),
        )

    @app.get("/api/contexts/{context_id}/children", tags=["contexts"])
    async def children(context_id: Owned) -> list[ChildOut]:
        return [
            ChildOut(context_id=c.context_id, state=c.state, title=c.title, finished=c.finished)
            for c in await hub.engine.children(context_id)
        ]

    # -------------------------------------------------------------- messages

    @app.get("/api/contexts/{context_id}/messages", tags=["messages"])
    async def list_messages(
        context_id: Owned,
        branch: str | None = None,
        cursor: str | None = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    ) -> MessagePage:
        start = _cursor(cursor)
        page = await hub.engine.messages(context_id, branch=branch, offset=start, limit=limit + 1)
        name = branch if branch is not None else (await stored(context_id)).active_branch_name
        more = len(page) > limit
        return MessagePage(
            branch=name,
            messages=page[:limit],
            next_cursor=str(start + limit) if more else None,
        )

    @app.get("/api/contexts/{context_id}/messages/{message_id}", tags=["messages"])
    async def get_message(context_id: Owned, message_id: str) -> MessageNode:
        ctx = await stored(context_id)
        node = ctx.message_pool.get(message_id)
        if node is None:
            raise ApiError(
                404, "message_not_found", f"context {context_id!r} has no message {message_id!r}"
            )
        return node

    @app.post(
        "/api/contexts/{context_id}/messages",
        tags=["messages"],
        status_code=202,
        responses={200: {"model": TurnOut}, 202: {"model": AcceptedOut}},
        response_model=None,
    )
    async def send_message(context_id: Owned, body: MessageIn, wait: Wait = False) -> Any:
        engine = hub.engine
        if config.turns == "workers":  # committed here, run by a worker (docs/workers.md)
            submitted = await engine.submit(context_id, body.content, body.role)
            if wait:
                turn = await wait_for_rest(engine, context_id, submitted)
                return JSONResponse(TurnOut.of(turn).model_dump(mode="json"))
            handed = "ProcessingUserMessage"  # what submit committed; a worker goes on
            accepted = AcceptedOut(context_id=context_id, message_id=submitted, state=handed)
            return JSONResponse(accepted.model_dump(mode="json"), status_code=202)
        # the message's id is chosen here, so the 202 names it without a read
        mid = engine.new_id()
        job = await hub.launch(
            context_id,
            lambda: engine.send(context_id, body.content, body.role, message_id=mid),
            wait=wait,
        )
        if wait and job.turn is not None:
            return JSONResponse(TurnOut.of(job.turn).model_dump(mode="json"))
        accepted = AcceptedOut(context_id=context_id, message_id=mid, state=await state_of(job))
        return Response(accepted.model_dump_json(), 202, media_type="application/json")

    # -------------------------------------------------------------- calls on a turn

    def call_route(path: str, summary: str) -> Callable[[Any], Any]:
        return app.post(
            f"/api/contexts/{{context_id}}/{path}",
            tags=["turns"],
            summary=summary,
            responses={200: {"model": TurnOut}, 202: {"model": AcceptedOut}},
            response_model=None,
        )

    async def run_call(
        context_id: str, fn: Callable[[], Awaitable[Turn]], wait: bool
    ) -> JSONResponse:
        job = await hub.launch(context_id, fn, wait=wait)
        if wait and job.turn is not None:
            return JSONResponse(TurnOut.of(job.turn).model_dump(mode="json"))
        return JSONResponse(
            AcceptedOut(context_id=context_id, state=await state_of(job)).model_dump(mode="json"),
            status_code=202,
        )

    @call_route("tools/approve", "approve some pending calls, deny others with reasons")
    async def approve(context_id: Owned, body: ApproveIn, wait: Wait = False) -> JSONResponse:
        if not body.approve and not body.deny:
            raise InvalidInput("body", "approve or deny at least one tool call")
        by_reason: dict[str | None, list[str]] = {}
        for d in body.deny:
            by_reason.setdefault(d.reason, []).append(d.id)
        engine = hub.engine

        async def decide() -> Turn:
            turn: Turn | None = None
            for reason, ids in by_reason.items():
                turn = await engine.deny(context_id, ids, reason)
            if body.approve:
                turn = await engine.approve(context_id, body.approve)
            assert turn is not None
            return turn

        return await run_call(context_id, decide, wait)

    @call_route("tools/answer", "answer a question the model asked")
    async def answer(context_id: Owned, body: AnswerIn, wait: Wait = False) -> JSONResponse:
        engine = hub.engine
        return await run_call(
            context_id, lambda: engine.answer(context_id, body.call_id, body.text), wait
        )

    @call_route("retry", "try a failed turn again")
    async def retry(context_id: Owned, wait: Wait = False) -> JSONResponse:
        engine = hub.engine
        return await run_call(context_id, lambda: engine.retry(context_id), wait)

    @call_route("resume", "go on with a turn a crash stopped")
    async def resume(context_id: Owned, wait: Wait = False) -> JSONResponse:
        engine = hub.engine
        return await run_call(context_id, lambda: engine.resume(context_id), wait)

    @app.post("/api/contexts/{context_id}/cancel", tags=["turns"])
    async def cancel(context_id: Owned) -> TurnOut:
        job = hub.running.get(context_id)
        turn = await hub.engine.cancel(context_id)
        if job is not None:
            await job.done.wait()
        return TurnOut.of(turn)

    @app.post("/api/contexts/{context_id}/reset", tags=["turns"])
    async def reset(context_id: Owned) -> TurnOut:
        return TurnOut.of(await hub.engine.reset(context_id))

    # -------------------------------------------------------------- branches

    @app.post("/api/contexts/{context_id}/branches", tags=["branches"], status_code=201)
    async def fork(context_id: Owned, body: BranchIn) -> TurnOut:
        given = body.model_dump(exclude_unset=True)
        turn = await hub.engine.fork(
            context_id,
            body.name,
            body.at,
            system_prompt=given.get("system_prompt", UNSET),
            user_prompt=given.get("user_prompt", UNSET),
        )
        return TurnOut.of(turn)

    @app.put("/api/contexts/{context_id}/branches/active", tags=["branches"])
    async def switch(context_id: Owned, body: SwitchIn) -> TurnOut:
        return TurnOut.of(await hub.engine.switch_branch(context_id, body.name))

    # -------------------------------------------------------------- audit and diagrams

    async def audit_text(context_id: str) -> str:
        ctx = await stored(context_id)
        steps = await hub.engine.steps(context_id)
        return audit_jsonl(audit_records(context_id, steps, ctx.message_pool.values()))

    @app.get(
        "/api/contexts/{context_id}/audit",
        tags=["audit"],
        response_class=PlainTextResponse,
        responses={200: {"content": {"application/jsonl": {}}}},
    )
    async def audit(context_id: Owned) -> Response:
        return Response(await audit_text(context_id), media_type="application/jsonl")

    @app.get("/api/contexts/{context_id}/audit/verify", tags=["audit"])
    async def audit_verify(context_id: Owned) -> VerifyOut:
        lines = [ln for ln in (await audit_text(context_id)).split("\n") if ln]
        result = verify_audit_log(lines)
        return VerifyOut(
            ok=result.ok,
            steps=result.steps,
            line=result.line,
            reason=result.reason,
            final_state=result.final_state,
        )

    @app.get(
        "/api/contexts/{context_id}/diagram",
        tags=["audit"],
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/plain": {}, "image/svg+xml": {}}}},
    )
    async def diagram(context_id: Owned, format: Literal["mermaid", "svg"] = "mermaid") -> Response:
        ctx = await stored(context_id)
        steps = await hub.engine.steps(context_id)
        path = path_from_steps(steps, start=ctx.created_at)
        title = f"context {context_id} (now {ctx.current_state}, {len(steps)} steps)"
        if format == "svg":
            try:
                svg = await anyio.to_thread.run_sync(render_svg, dot_source(path, title=title))
            except RenderError as exc:
                raise ApiError(501, "graphviz_missing", str(exc)) from None
            return Response(svg, media_type="image/svg+xml")
        return PlainTextResponse(mermaid_state_diagram(path, title=title))

    add_event_routes(app, hub, tenant, owned)
    app.include_router(openai_router(hub, tenant))
    app.include_router(request_router(hub, tenant))
    app.include_router(sessions_router(hub, tenant))
    app.include_router(web_router(hub, config))  # the web view at / (docs/web.md)

    if config.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=config.cors_origins,
            allow_methods=["*"],
            allow_headers=["*"],
        )
    app.add_middleware(Gate, limit=config.max_body)
    _hot_routes_first(app)
    return app


HOT_ROUTES = (
    ("POST", "/api/contexts/{context_id}/messages"),
    ("GET", "/api/contexts/{context_id}/events"),
)
"""The routes a conversation uses on every turn."""


def _hot_routes_first(app: FastAPI) -> None:
    """Match :data:`HOT_ROUTES` first. The router tries routes in order, and
    these came after a dozen others (each a regular expression and a scope
    made). No other route's path has their shapes, so no request goes
    elsewhere than before. The OpenAPI document keeps the declared order."""
    declared = list(app.router.routes)

    def hot(route: Any) -> bool:
        methods = getattr(route, "methods", None) or ()
        return any((m, getattr(route, "path", None)) in HOT_ROUTES for m in methods)

    app.router.routes.sort(key=lambda route: not hot(route))  # stable: the rest as declared

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            matched = app.router.routes
            app.router.routes = declared
            try:
                FastAPI.openapi(app)
            finally:
                app.router.routes = matched
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]


def _cursor(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not cursor.isdigit() or len(cursor) > 12:
        raise InvalidInput("cursor", f"not a cursor this server gave: {cursor!r}")
    return int(cursor)
