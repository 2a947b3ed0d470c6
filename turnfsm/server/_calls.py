"""The engine calls of the server, shared: the API's routes and the web
view's pages and forms both go through these (one way to list, create, send,
decide and stream; tenancy checked once, by the caller, with
:meth:`~turnfsm.server._hub.Hub.check`)."""

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..engine import Turn
from ..engine._output import schema_output
from ..storage import ContextSummary
from ._handoff import wait_for_rest
from ._hub import Hub, Job
from ._models import AcceptedOut, ContextIn
from ._tenants import DEFAULT_TENANT

__all__ = [
    "create_context",
    "create_from",
    "decide_calls",
    "post_message",
    "run_call",
    "state_of",
    "tenant_contexts",
]

Call = Callable[[], Awaitable[Turn]]


async def tenant_contexts(hub: Hub, who: str, state: str | None = None) -> list[ContextSummary]:
    """The summaries of the contexts of tenant ``who`` (a sub-context is its
    parent's), in the store's order; only those in ``state`` if given."""
    summaries = await hub.engine.store.list_contexts()
    owners = await hub.tenants.all()
    parents = {s.id: s.parent_id for s in summaries}
    fallback = DEFAULT_TENANT if not hub.config.tokens else None

    def owner(cid: str | None) -> str | None:
        for _ in range(100):
            if cid is None:
                return None
            if cid in owners:
                return owners[cid]
            if parents.get(cid) is None:
                return fallback
            cid = parents[cid]
        return None

    return [s for s in summaries if owner(s.id) == who and (state is None or s.state == state)]


async def create_context(hub: Hub, who: str, **fields: Any) -> str:
    """A new context of tenant ``who`` (``fields``: those of
    :meth:`~turnfsm.engine.Engine.create_context`); without a ``model``, the
    server's (``ServerConfig.model``: the name sent upstream)."""
    if fields.get("model") is None:
        fields["model"] = hub.config.model
    cid = await hub.engine.create_context(**fields)
    await hub.adopt(cid, who)
    return cid


async def create_from(hub: Hub, who: str, body: ContextIn) -> str:
    """A new context of tenant ``who`` as ``POST /api/contexts`` makes it
    (``body``'s defaults are the API's). A ``parent_id`` must be the
    tenant's own context (``404`` otherwise, as for any other)."""
    if body.parent_id is not None:
        await hub.check(body.parent_id, who)
    return await create_context(
        hub,
        who,
        system_prompt=body.system_prompt,
        user_prompt=body.user_prompt,
        model=body.model,
        mode=body.mode,
        parameters=body.parameters,
        title=body.title,
        tools=body.tools,
        parent_id=body.parent_id,
        workspace_path=body.workspace_path,
        agent_role=body.agent_role,
    )


async def state_of(hub: Hub, job: Job) -> str:
    """The state a launched call had reached when it was answered."""
    if job.turn is not None:
        return job.turn.state.value
    if job.state is not None:
        return job.state
    return (await hub.outline(job.context_id)).context.current_state


async def run_call(hub: Hub, context_id: str, fn: Call, wait: bool) -> Turn | AcceptedOut:
    """Run ``fn`` (a call on the context's turn) in the app's task group: its
    Turn with ``wait``, else once it took its first step, what to answer
    (``202``)."""
    job = await hub.launch(context_id, fn, wait=wait)
    if wait and job.turn is not None:
        return job.turn
    return AcceptedOut(context_id=context_id, state=await state_of(hub, job))


async def post_message(
    hub: Hub,
    context_id: str,
    content: str,
    role: str = "user",
    *,
    wait: bool = False,
    output_schema: dict[str, Any] | None = None,
    output_retries: int | None = None,
) -> Turn | AcceptedOut:
    """A message on the context: its turn run here, or on the workers
    (``ServerConfig.turns``); the Turn with ``wait``, else what to answer.
    ``output_schema`` (a JSON Schema, checked here: a bad one is an
    ``InvalidInput`` naming its path, before anything runs) is the turn's
    output type; without one the engine's own applies."""
    engine = hub.engine
    typed: dict[str, Any] = {}
    if output_schema is not None:
        typed["output_type"] = schema_output(output_schema, "body.output_schema")
    if output_retries is not None:
        typed["output_retries"] = output_retries
    if hub.config.turns == "workers":  # committed here, run by a worker (docs/workers.md)
        submitted = await engine.submit(context_id, content, role, **typed)
        if wait:
            return await wait_for_rest(engine, context_id, submitted)
        handed = "ProcessingUserMessage"  # what submit committed; a worker goes on
        return AcceptedOut(context_id=context_id, message_id=submitted, state=handed)
    # the message's id is chosen here, so the 202 names it without a read
    mid = engine.new_id()
    job = await hub.launch(
        context_id,
        lambda: engine.send(context_id, content, role, message_id=mid, **typed),
        wait=wait,
    )
    if wait and job.turn is not None:
        return job.turn
    return AcceptedOut(context_id=context_id, message_id=mid, state=await state_of(hub, job))


def decide_calls(
    hub: Hub, context_id: str, approve: Sequence[str], deny: Sequence[tuple[str, str | None]]
) -> Call:
    """The call that approves the calls ``approve`` and denies the ``(id,
    reason)`` of ``deny`` (one engine call per reason, the approvals last)."""
    by_reason: dict[str | None, list[str]] = {}
    for call_id, reason in deny:
        by_reason.setdefault(reason, []).append(call_id)
    engine = hub.engine

    async def decided() -> Turn:
        turn: Turn | None = None
        for reason, ids in by_reason.items():
            turn = await engine.deny(context_id, ids, reason)
        if approve:
            turn = await engine.approve(context_id, list(approve))
        assert turn is not None
        return turn

    return decided
