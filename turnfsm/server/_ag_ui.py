"""AG-UI: ``POST /ag-ui`` runs an agent turn for an AG-UI client (see ``docs/ag-ui.md``).

The body is AG-UI's ``RunAgentInput`` (``_ag_ui_input.py``); the answer is
AG-UI's event stream over server-sent events (``_ag_ui_events.py``). The
thread is a context of the caller's tenant, made on its first run with the
thread's id as its id (another tenant's thread is a ``404``, as any other
context is). A run sends the last of its ``messages`` (the earlier ones are
matched as ``/v1/chat/completions`` matches a resent history), or gives the
results of the frontend's tool calls (its ``messages`` end with ``tool``
messages), or, with ``resume``, decides the calls the previous run stopped on.
The run's ``tools`` are the frontend's: offered to the model beside the
server's, their calls end the run for the client to run them
(``client_tools`` of the engine). The turn runs in
the app's task group: a client that goes away mid-stream does not cancel it
(each frame's ``id:`` is the engine event's ``seq``, for
``GET /api/contexts/{id}/events`` with ``Last-Event-ID``). Checks, tenancy,
the turn limit and the body limit are the API's, answered as its errors
before the stream starts.
"""

import functools
import re
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from ..engine import Turn
from ..errors import ContextNotFound, InvalidInput, StoreError, ToolNameClash
from ..model import ClientTools
from ._ag_ui_events import Translator
from ._ag_ui_input import (
    Decisions,
    RunAgentIn,
    decisions,
    frontend_tools,
    new_message,
    openai_messages,
)
from ._calls import create_context, decide_calls
from ._deps import HubOf, Tenant
from ._hub import Hub, Job, next_batch
from ._json_body import DocumentRoute
from ._openai_compat import _resent
from ._openai_tools import client_tools_of, continuation

__all__ = ["MEDIA_TYPE", "router"]

MEDIA_TYPE = "text/event-stream"

router = APIRouter(tags=["ag-ui"], route_class=DocumentRoute)


async def _thread(hub: Hub, who: str, thread_id: str) -> None:
    """The thread's context, made in tenant ``who`` on first use (a ``429``
    over the tenant's turn limit first); another tenant's is ContextNotFound."""
    try:
        await hub.check(thread_id, who)
        return
    except ContextNotFound:
        if await _stored(hub, thread_id):
            raise
    async with hub.reserve(who):
        try:
            await create_context(hub, who, context_id=thread_id)
        except StoreError:
            # made meanwhile (a run on the same thread): the caller's, or a 404
            if not await _stored(hub, thread_id):
                raise
            await hub.check(thread_id, who)


async def _stored(hub: Hub, context_id: str) -> bool:
    try:
        await hub.owner(context_id)
    except ContextNotFound:
        return False
    return True


Call = Callable[[], Awaitable[Turn]]


def _client_tools(hub: Hub, body: RunAgentIn) -> ClientTools | None:
    """The run's ``tools`` as the engine's client tools, checked as ``/v1``
    checks its own; a refusal names the field as the body has it
    (``tools[0].name``, where OpenAI's shape has ``tools[0].function.name``)."""
    try:
        return client_tools_of(hub, frontend_tools(body), None, None)
    except ToolNameClash as exc:
        raise ToolNameClash(_field(exc.where), exc.tool_name) from None
    except InvalidInput as exc:
        raise InvalidInput(_field(exc.where), exc.reason) from None


def _field(where: str) -> str:
    return re.sub(r"^(tools\[\d+\])\.function\b", r"\1", where)


def _decided(hub: Hub, cid: str, decided: Decisions) -> Call:
    """The call that gives the ``resume`` entries' decisions: answers and
    denials first, approvals last (the call that leaves none pending runs the
    turn on)."""
    approve, deny, answer = decided
    engine = hub.engine
    others = decide_calls(hub, cid, approve, deny) if approve or deny else None

    async def run() -> Turn:
        turn: Turn | None = None
        for call_id, text in answer:
            turn = await engine.answer(cid, call_id, text)
        if others is not None:
            turn = await others()
        assert turn is not None  # decisions() gives at least one
        return turn

    return run


@router.post(
    "/ag-ui",
    response_class=StreamingResponse,
    responses={200: {"content": {MEDIA_TYPE: {}}, "description": "AG-UI's event stream"}},
)
async def ag_ui(hub: HubOf, body: RunAgentIn, who: Tenant) -> StreamingResponse:
    """Run the agent on an AG-UI thread; AG-UI's events as server-sent events."""
    cid = body.threadId
    client = _client_tools(hub, body)  # checked before anything else
    results = None if body.resume else continuation(openai_messages(body))
    call: Call
    if body.resume:
        decided = decisions(body.resume)
        await hub.check(cid, who)
        call = _decided(hub, cid, decided)
    elif results is not None:  # the results of the frontend's calls
        resent = _resent(results.earlier)
        await hub.check(cid, who)
        call = functools.partial(
            hub.engine.submit_results, cid, results.results, context=resent, client_tools=client
        )
    else:
        text, resent = new_message(body)  # a malformed list is refused before anything is made
        await _thread(hub, who, cid)
        call = functools.partial(
            hub.engine.send,
            cid,
            text,
            message_id=body.messages[-1].id,
            context=resent,
            client_tools=client,
        )

    sub = hub.engine.subscribe(cid)
    try:
        job = await hub.launch(cid, call, wait=False)
    except BaseException:
        await sub.aclose()
        raise
    run = Translator(body.threadId, body.runId)
    heartbeat = hub.config.heartbeat

    async def events(job: Job) -> AsyncIterator[bytes]:
        try:
            yield run.started()
            while True:
                batch, idle = await next_batch(sub, job, heartbeat)
                if idle:
                    yield b": keep-alive\n\n"
                for ev in batch:
                    for out in run.event(ev):
                        yield out
                if job.done.is_set() and not batch:
                    break
        finally:
            await sub.aclose()
        turn = job.turn
        if turn is not None:
            for out in run.settle(turn):
                yield out
        for out in run.finish(turn, None if job.error is None else str(job.error)):
            yield out

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(job), media_type=MEDIA_TYPE, headers=headers)
