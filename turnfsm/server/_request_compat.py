"""``POST /api/chat``: a chat request body of either format, answered once.

The body is the ``contextManagement`` body or the legacy ``messages`` body
(parsed by :func:`turnfsm.adapters.inbound.parse_request`); see the section
"The chat request endpoint" of ``docs/server.md``.
"""

from collections.abc import Awaitable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from fastapi.responses import JSONResponse

from ..adapters.inbound import parse_request
from ..engine import Turn
from ..model import Role
from ._calls import create_context
from ._deps import HubOf, Tenant
from ._json_body import DocumentRoute
from ._models import AcceptedOut, TurnOut

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["messages"], route_class=DocumentRoute)

_SPEAKERS = (Role.USER, Role.FRONTEND_OPERATOR)


@router.post(
    "/chat",
    status_code=202,
    responses={200: {"model": TurnOut}, 202: {"model": AcceptedOut}},
    response_model=None,
)
async def chat(
    hub: HubOf,
    body: Annotated[Any, Body(description="a contextManagement or a legacy messages body")],
    who: Tenant,
    context_id: Annotated[
        str | None, Query(description="the tenant's context to add to (none: a new one)")
    ] = None,
    wait: Annotated[bool, Query(description="return the Turn once the context rests")] = False,
) -> JSONResponse:
    parse_request(body)  # a malformed body is refused before anything is stored
    engine = hub.engine
    if context_id is None:
        # over the tenant's turn limit: 429 before a context is made
        async with hub.reserve(who):
            cid = await create_context(
                hub, who, frontend_operator_as=hub.config.frontend_operator_as
            )
    else:
        await hub.check(context_id, who)
        cid = context_id

    def answer() -> Awaitable[Turn]:
        return engine.send_request(body, cid)

    job = await hub.launch(cid, answer, wait=wait)
    if wait and job.turn is not None:
        return JSONResponse(TurnOut.of(job.turn).model_dump(mode="json"))
    ctx = await engine.store.load(cid)
    # the turn took its first step: the request's current message is stored,
    # the branch's last user or frontend operator message (the turn adds none)
    pool = ctx.message_pool
    mid = next(
        (i for i in reversed(ctx.active_branch.message_ids) if pool[i].message.role in _SPEAKERS),
        None,
    )
    return JSONResponse(
        AcceptedOut(context_id=cid, message_id=mid, state=ctx.current_state).model_dump(
            mode="json"
        ),
        status_code=202,
    )
