"""The engine's calls under ``/api``: health, contexts, messages, the calls on
a turn, branches, audit and diagrams (``docs/server.md``). The event streams
are ``_events.py``; each route's work is the engine's, through the hub and
the shared calls of ``_calls.py``."""

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import anyio
from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from ..engine import UNSET, Turn
from ..errors import InvalidInput, RenderError, StoreError
from ..model import ChatContext, MessageNode
from ._calls import create_from, decide_calls, post_message, run_call, tenant_contexts
from ._deps import HubOf, Owned, Tenant, Wait, cursor_of, digits
from ._errors import ApiError, error_response
from ._hub import Hub
from ._json_body import DocumentRoute
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
    MessageIn,
    MessagePage,
    StateOut,
    SwitchIn,
    TurnOut,
    VerifyOut,
)

__all__ = ["MAX_PAGE", "Accepted", "answered", "router"]

MAX_PAGE = 500
"""Items a page of a list may hold."""

router = APIRouter(route_class=DocumentRoute)

F = TypeVar("F", bound=Callable[..., Any])


def answered(result: Turn | AcceptedOut) -> Response:
    """A call's answer: its Turn (``200``), or accepted and running (``202``)."""
    if isinstance(result, AcceptedOut):
        return Accepted(result)
    return JSONResponse(TurnOut.of(result).model_dump(mode="json"))


class Accepted(Response):
    """``202``, a call accepted and running, with its :class:`AcceptedOut`
    as JSON: what ``Response(json, 202, media_type="application/json")``
    is, with its two headers written here rather than by Starlette's general
    ``init_headers`` (every post of a turn answers one)."""

    media_type = "application/json"

    def __init__(self, accepted: AcceptedOut) -> None:
        body = accepted.model_dump_json().encode()
        self.status_code = 202
        self.background = None
        self.body = body
        self.raw_headers = [(b"content-length", b"%d" % len(body)), _JSON_TYPE]


_JSON_TYPE = (b"content-type", b"application/json")


async def stored(hub: Hub, cid: str) -> ChatContext:
    return await hub.engine.store.load(cid)


def _cursor(cursor: str | None) -> int:
    return cursor_of(cursor) or 0


# ---------------------------------------------------------------------- health


@router.get("/healthz", tags=["health"])
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", tags=["health"])
async def readyz(hub: HubOf) -> Response:
    if not hub.ready:
        return error_response(503, "not_ready", "the server is starting or stopping")
    return JSONResponse({"status": "ready", "running": len(hub.running)})


# ---------------------------------------------------------------------- contexts


@router.get("/api/contexts", tags=["contexts"])
async def list_contexts(
    hub: HubOf,
    who: Tenant,
    state: str | None = None,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE), digits("limit", 1, MAX_PAGE)] = 50,
) -> ContextList:
    start = _cursor(cursor)
    mine = await tenant_contexts(hub, who, state)
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


@router.post("/api/contexts", status_code=201, tags=["contexts"])
async def create_context(hub: HubOf, body: ContextIn, who: Tenant) -> ContextOut:
    cid = await create_from(hub, who, body)
    return ContextOut.of(await hub.outline(cid))


@router.get("/api/contexts/{context_id}", tags=["contexts"])
async def get_context(hub: HubOf, context_id: Owned) -> ContextOut:
    return ContextOut.of(await hub.outline(context_id))


@router.put("/api/contexts/{context_id}", tags=["contexts"])
async def update_context(hub: HubOf, context_id: Owned, body: ContextUpdate) -> ContextOut:
    given = body.model_dump(exclude_unset=True)
    await hub.engine.update_config(
        context_id,
        model=given.get("model", UNSET),
        mode=given.get("mode", UNSET),
        parameters=given.get("parameters", UNSET),
        title=given.get("title", UNSET),
        tool_history=given.get("tool_history", UNSET),
        token_budget=given.get("token_budget", UNSET),
        compaction=given.get("compaction", UNSET),
    )
    return ContextOut.of(await hub.outline(context_id))


@router.delete("/api/contexts/{context_id}", tags=["contexts"])
async def delete_context(hub: HubOf, context_id: Owned) -> dict[str, list[str]]:
    deleted = await hub.engine.delete_context(context_id)
    await hub.tenants.forget(deleted)
    await hub.untap(deleted)
    return {"deleted": deleted}


@router.get("/api/contexts/{context_id}/state", tags=["contexts"])
async def get_state(hub: HubOf, context_id: Owned) -> StateOut:
    # read before the context: a call that ends during the read has committed
    # its rest by then, so "not running" never comes with a state the call
    # has already left (a client polls until running is false)
    running = context_id in hub.running
    found = await hub.outline(context_id)
    return StateOut(
        context_id=context_id,
        state=found.context.current_state,
        version=found.context.version,
        running=running,
        pending_tool_calls=found.pending_tool_calls,
    )


@router.get("/api/contexts/{context_id}/children", tags=["contexts"])
async def children(hub: HubOf, context_id: Owned) -> list[ChildOut]:
    return [
        ChildOut(context_id=c.context_id, state=c.state, title=c.title, finished=c.finished)
        for c in await hub.engine.children(context_id)
    ]


# ---------------------------------------------------------------------- messages


@router.get("/api/contexts/{context_id}/messages", tags=["messages"])
async def list_messages(
    hub: HubOf,
    context_id: Owned,
    branch: str | None = None,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE), digits("limit", 1, MAX_PAGE)] = 50,
) -> MessagePage:
    start = _cursor(cursor)
    name, page = await hub.engine.message_page(
        context_id, branch=branch, offset=start, limit=limit + 1
    )
    more = len(page) > limit
    return MessagePage(
        branch=name,
        messages=page[:limit],
        next_cursor=str(start + limit) if more else None,
    )


@router.get("/api/contexts/{context_id}/messages/{message_id}", tags=["messages"])
async def get_message(hub: HubOf, context_id: Owned, message_id: str) -> MessageNode:
    try:  # the one message (the messages table's row, its file)
        found = await hub.engine.store.load_messages(context_id, [message_id])
    except StoreError:
        found = []  # not held, or damaged: the whole context says which
    if found:
        return found[0]
    node = (await stored(hub, context_id)).message_pool.get(message_id)
    if node is None:
        raise ApiError(
            404, "message_not_found", f"context {context_id!r} has no message {message_id!r}"
        )
    return node


@router.post(
    "/api/contexts/{context_id}/messages",
    tags=["messages"],
    status_code=202,
    responses={200: {"model": TurnOut}, 202: {"model": AcceptedOut}},
    response_model=None,
)
async def send_message(hub: HubOf, context_id: Owned, body: MessageIn, wait: Wait = False) -> Any:
    return answered(
        await post_message(
            hub,
            context_id,
            body.content,
            body.role,
            wait=wait,
            output_schema=body.output_schema,
            output_retries=body.output_retries,
        )
    )


# ---------------------------------------------------------------------- calls on a turn


def _call_route(path: str, summary: str) -> Callable[[F], F]:
    return router.post(
        f"/api/contexts/{{context_id}}/{path}",
        tags=["turns"],
        summary=summary,
        responses={200: {"model": TurnOut}, 202: {"model": AcceptedOut}},
        response_model=None,
    )


@_call_route("tools/approve", "approve some pending calls, deny others with reasons")
async def approve(hub: HubOf, context_id: Owned, body: ApproveIn, wait: Wait = False) -> Response:
    if not body.approve and not body.deny:
        raise InvalidInput("body", "approve or deny at least one tool call")
    fn = decide_calls(hub, context_id, body.approve, [(d.id, d.reason) for d in body.deny])
    return answered(await run_call(hub, context_id, fn, wait))


@_call_route("tools/answer", "answer a question the model asked")
async def answer(hub: HubOf, context_id: Owned, body: AnswerIn, wait: Wait = False) -> Response:
    engine = hub.engine
    return answered(
        await run_call(
            hub, context_id, lambda: engine.answer(context_id, body.call_id, body.text), wait
        )
    )


@_call_route("retry", "try a failed turn again")
async def retry(hub: HubOf, context_id: Owned, wait: Wait = False) -> Response:
    engine = hub.engine
    return answered(await run_call(hub, context_id, lambda: engine.retry(context_id), wait))


@_call_route("resume", "go on with a turn a crash stopped")
async def resume(hub: HubOf, context_id: Owned, wait: Wait = False) -> Response:
    engine = hub.engine
    return answered(await run_call(hub, context_id, lambda: engine.resume(context_id), wait))


@router.post("/api/contexts/{context_id}/cancel", tags=["turns"])
async def cancel(hub: HubOf, context_id: Owned) -> TurnOut:
    job = hub.running.get(context_id)
    turn = await hub.engine.cancel(context_id)
    if job is not None:
        await job.done.wait()
    return TurnOut.of(turn)


@router.post("/api/contexts/{context_id}/reset", tags=["turns"])
async def reset(hub: HubOf, context_id: Owned) -> TurnOut:
    return TurnOut.of(await hub.engine.reset(context_id))


# ---------------------------------------------------------------------- branches


@router.post("/api/contexts/{context_id}/branches", tags=["branches"], status_code=201)
async def fork(hub: HubOf, context_id: Owned, body: BranchIn) -> TurnOut:
    given = body.model_dump(exclude_unset=True)
    turn = await hub.engine.fork(
        context_id,
        body.name,
        body.at,
        system_prompt=given.get("system_prompt", UNSET),
        user_prompt=given.get("user_prompt", UNSET),
    )
    return TurnOut.of(turn)


@router.put("/api/contexts/{context_id}/branches/active", tags=["branches"])
async def switch(hub: HubOf, context_id: Owned, body: SwitchIn) -> TurnOut:
    return TurnOut.of(await hub.engine.switch_branch(context_id, body.name))


# ---------------------------------------------------------------------- audit and diagrams
# turnfsm.audit and turnfsm.render are imported by the first such request:
# a server that is never asked for one does not start with them


async def audit_text(hub: Hub, context_id: str) -> str:
    from ..audit import audit_jsonl, audit_records

    ctx = await stored(hub, context_id)
    steps = await hub.engine.steps(context_id)
    return audit_jsonl(audit_records(context_id, steps, ctx.message_pool.values()))


@router.get(
    "/api/contexts/{context_id}/audit",
    tags=["audit"],
    response_class=PlainTextResponse,
    responses={200: {"content": {"application/jsonl": {}}}},
)
async def audit(hub: HubOf, context_id: Owned) -> Response:
    return Response(await audit_text(hub, context_id), media_type="application/jsonl")


@router.get("/api/contexts/{context_id}/audit/verify", tags=["audit"])
async def audit_verify(hub: HubOf, context_id: Owned) -> VerifyOut:
    from ..audit import verify_audit_log

    lines = [ln for ln in (await audit_text(hub, context_id)).split("\n") if ln]
    result = verify_audit_log(lines)
    return VerifyOut(
        ok=result.ok,
        steps=result.steps,
        line=result.line,
        reason=result.reason,
        final_state=result.final_state,
    )


@router.get(
    "/api/contexts/{context_id}/diagram",
    tags=["audit"],
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}, "image/svg+xml": {}}}},
)
async def diagram(
    hub: HubOf, context_id: Owned, format: Literal["mermaid", "svg"] = "mermaid"
) -> Response:
    from ..render import dot_source, mermaid_state_diagram, path_from_steps, render_svg

    ctx = (await hub.outline(context_id)).context
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
