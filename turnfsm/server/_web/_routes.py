"""The web view's routes: login, the contexts page, a context's page and its
forms, its event streams and its audit page (``docs/web.md``).

Pages read the engine and the store directly, and forms call the engine,
through the same shared calls as the API's routes (``_calls.py``), so
tenancy, the turn limit and where a turn runs are the API's own. A page's
event stream is the API's stream (``_events.py``), answered here: an
``EventSource`` cannot send a header, so the page's cookie stands for the
bearer token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import anyio
from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from ...engine._offered import offered_tools, tool_summary
from ...errors import InvalidInput, RenderError
from ...model import ChatContext
from ...states import RESTING
from .._calls import create_from, decide_calls, post_message, run_call, tenant_contexts
from .._deps import hub_of
from .._events import context_events, tenant_events
from .._models import ContextIn
from .._tenants import tenant_of_token
from ._access import (
    COOKIE,
    WEB_DIR,
    PageError,
    check_origin,
    context_form,
    done,
    error,
    form,
    mine,
    owned,
    pages,
    render,
    safe_next,
    tenant_of,
    who,
)
from ._views import (
    branch_paths,
    call_view,
    diff_rows,
    int_param,
    message_view,
    seconds,
    status_words,
    step_count,
    svg_body,
    verdict_text,
)

if TYPE_CHECKING:
    from ...audit import AuditRecord
    from ...render import PathDiff

# turnfsm.audit and turnfsm.render are imported by the first page that shows
# them: a server whose web view is not opened does not start with them

__all__ = ["router"]

ASSETS = {
    "web.css": "text/css; charset=utf-8",
    "web.js": "text/javascript; charset=utf-8",
}
PAGE_SIZE = 20
MAX_TREE = 200
"""Sub-contexts shown in a context's tree, at most."""
RESTING_NAMES = sorted(str(s) for s in RESTING)

router = APIRouter(include_in_schema=False)


def _page_of(context_id: str) -> str:
    return f"/contexts/{quote(context_id, safe='')}"


# ---------------------------------------------------------------------- assets and login


@router.get("/static/{name}")
async def static(name: str) -> Response:
    if name not in ASSETS:
        return Response("not found", status_code=404, media_type="text/plain")
    body = (WEB_DIR / name).read_bytes()
    return Response(
        body,
        media_type=ASSETS[name],
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


@router.get("/login")
@pages
async def login_form(request: Request) -> Response:
    return render(
        request, "login.html", next=safe_next(request.query_params.get("next")), failed=False
    )


@router.post("/login")
@pages
async def login(request: Request) -> Response:
    check_origin(request)
    data = await form(request)
    token = data.get("token", "").strip()
    nxt = safe_next(data.get("next"))
    tokens = hub_of(request).config.tokens
    if not tokens:
        return RedirectResponse(nxt, status_code=303)
    if not token or tenant_of_token(tokens, token) is None:
        return render(request, "login.html", status=401, next=nxt, failed=True)
    resp = RedirectResponse(nxt, status_code=303)
    resp.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="strict",
        path="/",
        secure=request.url.scheme == "https",
    )
    return resp


@router.post("/logout")
@pages
async def logout(request: Request) -> Response:
    check_origin(request)
    to = "/login" if hub_of(request).config.tokens else "/"
    resp = RedirectResponse(to, status_code=303)
    resp.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return resp


# ---------------------------------------------------------------------- the contexts page


@router.get("/")
@pages
async def contexts_page(request: Request) -> Response:
    tenant = who(request)
    wanted = request.query_params.get("state") or None
    offset = int_param(request.query_params.get("offset"), "offset", 0)
    summaries = await tenant_contexts(hub_of(request), tenant)
    running = sorted(s.id for s in summaries if s.state not in RESTING_NAMES)
    shown = sorted(
        (s for s in summaries if wanted is None or s.state == wanted),
        key=lambda s: s.updated_at,
        reverse=True,
    )
    rows = [  # the list's summaries: no context is loaded
        {
            "id": s.id,
            "state": s.state,
            "title": s.title or "",
            "model": s.model or "",
            "updated": s.updated_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
            "parent": s.parent_id,
        }
        for s in shown[offset : offset + PAGE_SIZE]
    ]
    from ...render import declared_nodes

    states = sorted({*(str(n.state) for n in declared_nodes())})
    return render(
        request,
        "contexts.html",
        rows=rows,
        states=states,
        wanted=wanted,
        running=running,
        total=len(shown),
        offset=offset,
        page_size=PAGE_SIZE,
        resting=RESTING_NAMES,
    )


@router.post("/contexts")
@pages
async def create(request: Request) -> Response:
    check_origin(request)
    tenant = who(request)
    data = await form(request)
    fields = {
        key: value for key in ("title", "system_prompt") if (value := data.get(key, "").strip())
    }
    cid = await create_from(hub_of(request), tenant, ContextIn(**fields))
    return RedirectResponse(_page_of(cid), status_code=303)


# ---------------------------------------------------------------------- a context's page


@router.get("/contexts/{context_id}")
@pages
async def context_page(request: Request, context_id: str) -> Response:
    hub = hub_of(request)
    running = context_id in hub.running  # before the context (see the API's get_state)
    ctx = await owned(request, context_id)
    branch = request.query_params.get("branch") or ctx.active_branch_name
    if branch not in ctx.branches:
        raise PageError(404, "No such branch", f"this context has no branch {branch!r}")
    tools = hub.engine.tools
    messages = [message_view(n, tools) for n in ctx.history(branch)]
    pending = (
        [call_view(c, tools) for c in ctx.pending_tool_calls()]
        if ctx.current_state == "AwaitingToolApproval"
        else []
    )
    return render(
        request,
        "context.html",
        ctx=ctx,
        branch=branch,
        branches=sorted(ctx.branches),
        messages=messages,
        approvals=[c for c in pending if c.question is None],
        questions=[c for c in pending if c.question is not None],
        waiting={c.id: c.question is not None for c in pending},
        words=status_words(),
        tree=await _tree(request, context_id),
        offered=[tool_summary(t) for t in offered_tools(hub.engine, ctx)],
        resting=RESTING_NAMES,
        running=running,
    )


async def _tree(request: Request, context_id: str) -> list[dict[str, Any]]:
    engine = hub_of(request).engine
    count = 0

    async def level(cid: str, depth: int) -> list[dict[str, Any]]:
        nonlocal count
        out: list[dict[str, Any]] = []
        if depth > 8:
            return out
        for child in await engine.children(cid):
            count += 1
            if count > MAX_TREE:
                break
            out.append(
                {
                    "id": child.context_id,
                    "state": child.state,
                    "title": child.title or "",
                    "finished": child.finished,
                    "children": await level(child.context_id, depth + 1),
                }
            )
        return out

    return await level(context_id, 0)


@router.post("/contexts/{context_id}/send")
@pages
async def send(request: Request, context_id: str) -> Response:
    content = (await context_form(request, context_id)).get("content", "")
    if not content.strip():
        raise InvalidInput("content", "the message is empty")
    await post_message(hub_of(request), context_id, content)
    return done(request, _page_of(context_id))


@router.post("/contexts/{context_id}/decide")
@pages
async def decide(request: Request, context_id: str) -> Response:
    data = await context_form(request, context_id)
    call_id = data.get("call_id", "")
    decision = data.get("decision", "")
    reason = data.get("reason", "").strip() or None
    if decision == "approve":
        fn = decide_calls(hub_of(request), context_id, [call_id], [])
    elif decision == "deny":
        fn = decide_calls(hub_of(request), context_id, [], [(call_id, reason)])
    else:
        raise InvalidInput("decision", f"approve or deny, not {decision!r}")
    await run_call(hub_of(request), context_id, fn, wait=False)
    return done(request, _page_of(context_id))


@router.post("/contexts/{context_id}/answer")
@pages
async def answer(request: Request, context_id: str) -> Response:
    data = await context_form(request, context_id)
    call_id, text = data.get("call_id", ""), data.get("text", "")
    engine = hub_of(request).engine
    await run_call(
        hub_of(request), context_id, lambda: engine.answer(context_id, call_id, text), wait=False
    )
    return done(request, _page_of(context_id))


@router.post("/contexts/{context_id}/retry")
@pages
async def retry(request: Request, context_id: str) -> Response:
    """A failed turn tried again (the API's ``retry``)."""
    await context_form(request, context_id)
    engine = hub_of(request).engine
    await run_call(hub_of(request), context_id, lambda: engine.retry(context_id), wait=False)
    return done(request, _page_of(context_id))


@router.post("/contexts/{context_id}/reset")
@pages
async def reset(request: Request, context_id: str) -> Response:
    """A failed turn abandoned (the API's ``reset``)."""
    await context_form(request, context_id)
    await hub_of(request).engine.reset(context_id)
    return done(request, _page_of(context_id))


@router.post("/contexts/{context_id}/cancel")
@pages
async def cancel(request: Request, context_id: str) -> Response:
    """The running turn stopped, its partial answer kept (the API's ``cancel``)."""
    await context_form(request, context_id)
    hub = hub_of(request)
    job = hub.running.get(context_id)
    await hub.engine.cancel(context_id)
    if job is not None:
        await job.done.wait()
    return done(request, _page_of(context_id))


@router.post("/contexts/{context_id}/branch")
@pages
async def make_active(request: Request, context_id: str) -> Response:
    name = (await context_form(request, context_id)).get("name", "")
    await hub_of(request).engine.switch_branch(context_id, name)
    return done(request, _page_of(context_id))


# ---------------------------------------------------------------------- event streams


@router.get("/contexts/{context_id}/events")
@pages
async def context_events_page(request: Request, context_id: str) -> Response:
    if tenant_of(request) is None:  # a stream is not sent to the login form
        return error(request, 401, "Log in", "a valid token is required")
    await mine(request, context_id)
    return context_events(hub_of(request), context_id, request.headers.get("last-event-id"))


@router.get("/events")
@pages
async def tenant_events_page(request: Request) -> Response:
    tenant = tenant_of(request)
    if tenant is None:
        return error(request, 401, "Log in", "a valid token is required")
    return tenant_events(hub_of(request), tenant, request.headers.get("last-event-id"))


# ---------------------------------------------------------------------- the audit page


async def _audit(request: Request, ctx: ChatContext) -> tuple[list[AuditRecord], Any]:
    from ...audit import audit_records

    steps = await hub_of(request).engine.steps(ctx.id)
    return audit_records(ctx.id, steps, ctx.message_pool.values()), steps


@router.get("/contexts/{context_id}/audit.jsonl")
@pages
async def audit_download(request: Request, context_id: str) -> Response:
    ctx = await owned(request, context_id)
    from ...audit import audit_jsonl

    records, _ = await _audit(request, ctx)
    return Response(
        audit_jsonl(records),
        media_type="application/jsonl",
        headers={
            "Content-Disposition": f'attachment; filename="audit-{context_id}.jsonl"',
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        },
    )


@router.get("/contexts/{context_id}/audit")
@pages
async def audit_page(request: Request, context_id: str) -> Response:
    from ...audit import audit_jsonl, verify_audit_log
    from ...render import (
        declared_edges,
        declared_nodes,
        diff_paths,
        dot_source,
        path_from_steps,
        render_svg,
        sequence_rows,
        turn_starts,
    )

    ctx = await owned(request, context_id)
    records, steps = await _audit(request, ctx)
    lines = [ln for ln in audit_jsonl(records).split("\n") if ln]
    verdict = verify_audit_log(lines)
    path = path_from_steps(steps, start=ctx.created_at)
    counted = step_count(records)  # the one count the banner and the diagram give
    title = f"context {context_id} (now {ctx.current_state}, {counted})"
    svg, svg_error = "", None
    try:
        svg = svg_body(
            await anyio.to_thread.run_sync(render_svg, dot_source(path, times=True, title=title))
        )
    except RenderError as exc:
        svg_error = str(exc)
    visits, spent = path.visits(), path.time_in_states()
    state_rows = [
        {
            "name": str(n.state),
            "visits": visits[str(n.state)],
            "time": seconds(spent.get(str(n.state))),
            "current": str(n.state) == path.current,
        }
        for n in declared_nodes()
    ]
    counts = path.edge_counts()
    edge_rows = [
        {
            "source": str(e.source),
            "trigger": str(e.trigger),
            "dest": str(e.dest),
            "count": counts[e.key],
            "meaning": e.meaning,
        }
        for e in declared_edges()
        if counts[e.key]
    ]
    # the sequence diagram of one turn (the last by default)
    starts = turn_starts(records)
    turn = int_param(request.query_params.get("turn"), "turn", len(starts))
    seq: dict[str, Any] | None = None
    if starts:
        turn = min(max(turn, 1), len(starts))
        drawn = sequence_rows(records, ctx.message_pool, turn=turn)
        seq = {
            "participants": drawn.participants,
            "rows": drawn.rows,
            "heading": drawn.heading,
            "mermaid": drawn.mermaid(),
        }
    # two branches' paths
    names = sorted(ctx.branches)
    a = request.query_params.get("a") or ctx.active_branch_name
    others = [n for n in names if n != a]
    b = request.query_params.get("b") or (others[0] if others else a)
    diff: dict[str, Any] | None = None
    if a in ctx.branches and b in ctx.branches:
        paths = branch_paths(steps, names)
        result: PathDiff = diff_paths(paths[a], paths[b])
        diff = {
            "a": a,
            "b": b,
            "report": result.report(a, b),
            "rows": diff_rows(paths[a], paths[b], result),
        }
    return render(
        request,
        "audit.html",
        ctx=ctx,
        svg=svg,
        svg_error=svg_error,
        state_rows=state_rows,
        edge_rows=edge_rows,
        verdict=verdict,
        verdict_text=verdict_text(verdict, counted),
        records=records,
        turns=list(range(1, len(starts) + 1)),
        turn=turn,
        seq=seq,
        branches=names,
        diff=diff,
        undeclared=path.undeclared(),
    )
