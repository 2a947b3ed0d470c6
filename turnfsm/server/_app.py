"""The FastAPI application: the engine's calls under ``/api`` (see ``docs/server.md``)."""

import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import anyio
import structlog
from anyio.streams.memory import MemoryObjectSendStream
from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..audit import audit_jsonl, audit_records, verify_audit_log
from ..engine import UNSET, Engine, Subscription, Turn
from ..errors import ContextNotFound, InvalidInput, RenderError, TurnFSMError
from ..events import Event
from ..model import ChatContext, MessageNode, Role
from ..render import dot_source, mermaid_state_diagram, path_from_steps, render_svg
from ..storage import SQLiteStore
from ._errors import ApiError, error_response, install_handlers
from ._events import add_event_routes, sse_data
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
RECENT_EVENTS = 4096
"""Events kept per context for streams that reconnect (``Last-Event-ID``)."""


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


class _Job:
    """One engine call run in a task the app owns (it outlives the request)."""

    def __init__(self, context_id: str) -> None:
        self.context_id = context_id
        self.done = anyio.Event()
        self.turn: Turn | None = None
        self.error: Exception | None = None

    async def run(
        self, fn: Callable[[], Awaitable[Turn]], hub: "Hub", tenant: str | None = None
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
            self.done.set()


class Hub:
    """The app's engine, tenant table and running calls (set up by the lifespan)."""

    def __init__(self, factory: Callable[[], Engine], config: ServerConfig) -> None:
        self.factory = factory
        self.config = config
        self._engine: Engine | None = None
        self._tenants: TenantTable | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self.running: dict[str, _Job] = {}
        self.turn_limit = TurnLimit(config.max_turns_per_tenant)
        self.ready = False
        self.closing = anyio.Event()
        self.recent: dict[str, deque[Event]] = {}
        """Per context, the last events the server saw (for ``Last-Event-ID``)."""
        self._taps: dict[str, Subscription] = {}
        self._tap_tenant: dict[str, str] = {}
        self.listeners: dict[str, set[MemoryObjectSendStream[Event]]] = {}
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
        store = engine.store
        path = str(store.path) if isinstance(store, SQLiteStore) else None
        self._tenants = await anyio.to_thread.run_sync(TenantTable, path)
        async with engine, anyio.create_task_group() as tg:
            self._engine, self._tg = engine, tg
            for cid, tenant in (await self.tenants.all()).items():
                self.tap(cid, tenant)  # before recover(): its events are kept too
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
        self._engine = None

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

    # ------------------------------------------------------------------ recent events

    def tap(self, context_id: str, tenant: str) -> None:
        """Keep the context's recent events from now on (a reconnecting stream's
        ``Last-Event-ID`` is served from them)."""
        if context_id in self._taps or self._tg is None:
            return
        sub = self.engine.subscribe(context_id)
        self._taps[context_id] = sub
        self._tap_tenant[context_id] = tenant
        self.recent.setdefault(context_id, deque(maxlen=RECENT_EVENTS))

        async def keep() -> None:
            async with sub:
                async for first in sub:
                    await self._write(context_id, self._absorb(context_id, [first, *sub.drain()]))

        self._tg.start_soon(keep)

    def catch_up(self, context_id: str) -> None:
        """Take in every event the engine already sent to the context's tap, so
        that :attr:`recent` holds all of them (it is read by a reconnecting stream)."""
        sub = self._taps.get(context_id)
        if sub is None or self._tg is None:
            return
        durable = self._absorb(context_id, sub.drain())
        if durable:
            self._tg.start_soon(self._write, context_id, durable)

    def _absorb(self, context_id: str, batch: list[Event]) -> list[tuple[int, str, str]]:
        """Events into the ring and the tenant's streams; the durable ones to write."""
        ring = self.recent.setdefault(context_id, deque(maxlen=RECENT_EVENTS))
        tenant = self._tap_tenant.get(context_id, "")
        for ev in batch:
            if ev.kind == "EventsMissed":
                ring.clear()  # a gap: the ring no longer covers what it held
            else:
                ring.append(ev)
            for stream in list(self.listeners.get(tenant, ())):
                with contextlib.suppress(anyio.WouldBlock, anyio.BrokenResourceError):
                    stream.send_nowait(ev)  # a slow tenant stream loses, never waits
        return [
            (ev.seq, ev.kind, sse_data(ev))
            for ev in batch
            if ev.kind not in ("ContentDelta", "EventsMissed")
        ]

    async def _write(self, context_id: str, durable: list[tuple[int, str, str]]) -> None:
        if not durable:
            return
        try:
            await self.tenants.add_events(context_id, durable)
        except Exception as exc:  # the log is a convenience; never fatal
            log.warning("event_log_failed", context_id=context_id, error=str(exc))

    async def untap(self, context_ids: list[str]) -> None:
        for cid in context_ids:
            sub = self._taps.pop(cid, None)
            if sub is not None:
                await sub.aclose()
            self.recent.pop(cid, None)
            self._tap_tenant.pop(cid, None)

    # ------------------------------------------------------------------ calls

    async def launch(
        self, context_id: str, fn: Callable[[], Awaitable[Turn]], *, wait: bool
    ) -> "_Job":
        """Run ``fn`` in the app's task group. With ``wait``, until it returns;
        else until it took its first step (or failed its checks, raised here)."""
        assert self._tg is not None
        job = _Job(context_id)
        tenant = self._tap_tenant.get(context_id)
        if tenant is not None:  # 429 over the tenant's limit (docs/server.md, "Limits")
            self.turn_limit.acquire(tenant)
        sub = self.engine.subscribe(context_id)
        try:
            self._tg.start_soon(job.run, fn, self, tenant)
            if wait:
                await job.done.wait()
            else:
                async with anyio.create_task_group() as race:

                    async def first_step() -> None:
                        async for ev in sub:
                            if ev.kind in ("StateChanged", "ToolResult", "ContextChanged"):
                                break
                        race.cancel_scope.cancel()

                    async def finished() -> None:
                        await job.done.wait()
                        race.cancel_scope.cancel()

                    race.start_soon(first_step)
                    race.start_soon(finished)
        finally:
            await sub.aclose()
        if job.done.is_set() and job.error is not None:
            raise job.error
        return job


# ---------------------------------------------------------------------- middleware


class BodyLimit:
    """``413`` for a request body over ``limit`` bytes (declared or streamed)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = error_response(
            413, "body_too_large", f"the request body is over {self.limit} bytes"
        )
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.limit:
                    await too_big(scope, receive, send)
                    return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooBig
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooBig:
            if not started:
                await too_big(scope, receive, send)


class _TooBig(Exception):
    pass


class AccessLog:
    """One structlog line per request: method, path, status, milliseconds."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 0

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            log.info(
                "request",
                method=scope.get("method"),
                path=scope.get("path"),
                status=status,
                ms=round((time.perf_counter() - start) * 1000, 1),
            )


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

    async def owned(context_id: str, who: Tenant) -> str:
        await hub.check(context_id, who)
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
        job = await hub.launch(
            context_id, lambda: engine.send(context_id, body.content, body.role), wait=wait
        )
        if wait and job.turn is not None:
            return JSONResponse(TurnOut.of(job.turn).model_dump(mode="json"))
        ctx = await stored(context_id)
        mid = next(
            (
                n.id
                for n in reversed(ctx.history())
                if n.message.role in (Role.USER, Role.FRONTEND_OPERATOR)
            ),
            None,
        )
        return JSONResponse(
            AcceptedOut(context_id=context_id, message_id=mid, state=ctx.current_state).model_dump(
                mode="json"
            ),
            status_code=202,
        )

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
        ctx = await stored(context_id)
        return JSONResponse(
            AcceptedOut(context_id=context_id, state=ctx.current_state).model_dump(mode="json"),
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
    app.add_middleware(BodyLimit, limit=config.max_body)
    app.add_middleware(AccessLog)
    return app


def _cursor(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not cursor.isdigit() or len(cursor) > 12:
        raise InvalidInput("cursor", f"not a cursor this server gave: {cursor!r}")
    return int(cursor)
