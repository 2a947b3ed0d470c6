"""The engine's calls that manage what a context is, under ``/api``: its
sub-contexts (spawn, finish, the tree), a branch's own prompts, a switch by
the branch's name, the pending questions, the tools a context is offered and
the engine's modes (``docs/server.md``, "Endpoints"). Each route's work is the engine's."""

from typing import Any

from fastapi import APIRouter

from ..engine import (
    DEFAULT_SUMMARY_PROMPT,
    UNSET,
    ContextTree,
    FinalAnswer,
    LLMSummarizer,
    Turn,
    context_tree,
)
from ..engine._offered import offered_tools, tool_summary
from ..storage import outline_of
from ..tools import QuestionTool
from ._deps import HubOf, Owned
from ._json_body import DocumentRoute
from ._models import (
    BranchPromptsIn,
    ContextOut,
    FinishedOut,
    FinishIn,
    ModeOut,
    QuestionOut,
    SpawnIn,
    SpawnOut,
    ToolOut,
    TreeOut,
    TurnOut,
)

__all__ = ["router"]

router = APIRouter(route_class=DocumentRoute)


# ---------------------------------------------------------------------- sub-contexts


@router.post("/api/contexts/{context_id}/children", tags=["sub-contexts"], status_code=201)
async def spawn(hub: HubOf, context_id: Owned, body: SpawnIn) -> SpawnOut:
    """Run a sub-task in a new child context; answered once the child rests.
    The child's task is a turn of the tenant's (it holds a slot, and the
    parent is busy meanwhile)."""
    engine = hub.engine
    made: list[str] = []

    async def run() -> Turn:
        child = await engine.spawn(
            context_id,
            body.task,
            system_prompt=body.system_prompt,
            model=body.model,
            mode=body.mode,
            tools=body.tools,
            title=body.title,
        )
        made.append(child.context_id)
        return child.turn

    job = await hub.launch(context_id, run, wait=True)
    assert job.turn is not None and made
    return SpawnOut(context_id=made[0], parent_id=context_id, turn=TurnOut.of(job.turn))


@router.post("/api/contexts/{context_id}/finish", tags=["sub-contexts"])
async def finish(hub: HubOf, context_id: Owned, body: FinishIn) -> FinishedOut:
    """Summarise the child ``context_id`` into its parent, then delete it
    (or keep it, finished, with ``keep``)."""
    summarizer: Any
    if body.summarizer == "final_answer":
        summarizer = FinalAnswer()
    else:
        summarizer = LLMSummarizer(
            body.prompt if body.prompt is not None else DEFAULT_SUMMARY_PROMPT
        )
    below = _ids(await context_tree(hub.engine.store, context_id))
    done = await hub.engine.finish(context_id, summarizer=summarizer, keep=body.keep)
    if not done.kept:  # deleted, with its finished (kept) sub-contexts
        await hub.tenants.forget(below)
        await hub.untap(below)
    return FinishedOut(
        context_id=done.context_id,
        child_id=done.child_id,
        message_id=done.message_id,
        summary=done.summary,
        kept=done.kept,
    )


def _ids(node: ContextTree) -> list[str]:
    """The ids of a tree, its root last (the order ``delete_context`` gives)."""
    return [*(i for c in node.children for i in _ids(c)), node.info.context_id]


def _tree(node: ContextTree) -> TreeOut:
    i = node.info
    return TreeOut(
        id=i.context_id,
        state=i.state,
        title=i.title,
        finished=i.finished,
        children=[_tree(c) for c in node.children],
    )


@router.get("/api/contexts/{context_id}/tree", tags=["sub-contexts"])
async def tree(hub: HubOf, context_id: Owned) -> TreeOut:
    return _tree(await context_tree(hub.engine.store, context_id))


# ---------------------------------------------------------------------- branches


@router.put("/api/contexts/{context_id}/branches/{name}/prompts", tags=["branches"])
async def branch_prompts(
    hub: HubOf, context_id: Owned, name: str, body: BranchPromptsIn
) -> ContextOut:
    given = body.model_dump(exclude_unset=True)
    ctx = await hub.engine.set_branch_prompts(
        context_id,
        name,
        system_prompt=given.get("system_prompt", UNSET),
        user_prompt=given.get("user_prompt", UNSET),
    )
    return ContextOut.of(outline_of(ctx))


@router.put("/api/contexts/{context_id}/branches/{name}", tags=["branches"])
async def switch_to(hub: HubOf, context_id: Owned, name: str) -> TurnOut:
    """Make the branch ``name`` active (the design's form; ``/branches/active``
    with ``{"name"}`` does the same, and is the one a branch named ``active``
    needs)."""
    return TurnOut.of(await hub.engine.switch_branch(context_id, name))


# ---------------------------------------------------------------------- questions and modes


@router.get("/api/contexts/{context_id}/questions", tags=["turns"])
async def questions(hub: HubOf, context_id: Owned) -> list[QuestionOut]:
    """The questions the model asked that wait for an answer (``tools/answer``)."""
    out: list[QuestionOut] = []
    for call in (await hub.outline(context_id)).pending_tool_calls:
        tool = hub.engine.tools.get(call.tool_name)
        asked = tool.ask(call) if isinstance(tool, QuestionTool) else None
        if asked is not None:  # as the Turn's questions are found
            out.append(
                QuestionOut(
                    call_id=call.id,
                    tool_name=call.tool_name,
                    question=asked.question,
                    choices=list(asked.choices),
                )
            )
    return out


@router.get("/api/contexts/{context_id}/tools", tags=["contexts"])
async def tools(hub: HubOf, context_id: Owned) -> list[ToolOut]:
    """The tools the model is offered in the context: the engine's (its MCP
    servers' included) as the context's mode offers them, narrowed to the
    context's own allow-list, each with its approval."""
    ctx = await hub.engine.get_context(context_id)
    return [ToolOut.model_validate(tool_summary(t)) for t in offered_tools(hub.engine, ctx)]


@router.get("/api/modes", tags=["contexts"])
async def modes(hub: HubOf) -> list[ModeOut]:
    """The engine's modes, ``chat`` first."""
    return [ModeOut.model_validate(m.to_json()) for m in hub.engine.modes]
