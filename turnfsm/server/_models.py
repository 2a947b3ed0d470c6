"""The request and response bodies of the HTTP API (they make ``/openapi.json``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

from ..engine import Turn
from ..model import InternalMessage, MessageNode, ToolCallRequest
from ..storage import ContextOutline

__all__ = [
    "AcceptedOut",
    "AnswerIn",
    "ApproveIn",
    "BranchIn",
    "BranchOut",
    "BranchPromptsIn",
    "ChildOut",
    "ContextIn",
    "ContextList",
    "ContextOut",
    "ContextSummaryOut",
    "ContextUpdate",
    "Denial",
    "ErrorBody",
    "ErrorOut",
    "FinishIn",
    "FinishedOut",
    "MessageIn",
    "MessagePage",
    "ModeOut",
    "QuestionOut",
    "SpawnIn",
    "SpawnOut",
    "StateOut",
    "SwitchIn",
    "TreeOut",
    "TurnOut",
    "VerifyOut",
]

_STRICT = ConfigDict(extra="forbid")


class ErrorBody(BaseModel):
    code: str
    message: str
    where: str | None = None


class ErrorOut(BaseModel):
    """Every error response: ``{"error": {"code", "message"}}`` (``where`` for bad input)."""

    error: ErrorBody


class ContextIn(BaseModel):
    model_config = _STRICT
    system_prompt: str | None = None
    user_prompt: str | None = None
    model: str | None = Field(
        default=None, description="the model; none: the server's, the one it calls"
    )
    mode: str = "chat"
    parameters: dict[str, Any] | None = None
    title: str | None = None
    tools: list[str] | None = None
    parent_id: str | None = Field(
        default=None, description="make it a sub-context of this context (yours, not finished)"
    )
    workspace_path: str | None = None
    agent_role: str = "assistant"


class ContextUpdate(BaseModel):
    """The config fields to change; a field left out is kept."""

    model_config = _STRICT
    model: str | None = None
    mode: str | None = None
    parameters: dict[str, Any] | None = None
    title: str | None = None
    tool_history: int | str | None = Field(
        default=None,
        description='this context\'s tool history: the last N tool calls in full (>= 0), "off" '
        "(every call in full), or null (the server's)",
    )
    token_budget: int | str | None = Field(
        default=None,
        description='this context\'s token budget in input tokens (>= 1), "off" (none), or '
        "null (the server's)",
    )
    compaction: int | str | None = Field(
        default=None,
        description='this context\'s compaction threshold in tokens (>= 2), "off" (none), or '
        "null (the server's)",
    )


class BranchOut(BaseModel):
    name: str
    message_count: int
    forked_from: str | None
    system_prompt: str | None
    user_prompt: str | None


class ContextOut(BaseModel):
    id: str
    parent_id: str | None
    state: str
    version: int
    event_seq: int
    title: str | None
    model: str
    mode: str
    parameters: dict[str, Any]
    tool_history: int | Literal["off"] | None = Field(
        default=None, description="the context's own tool history (null: the server's)"
    )
    token_budget: int | Literal["off"] | None = Field(
        default=None, description="the context's own token budget (null: the server's)"
    )
    compaction: int | Literal["off"] | None = Field(
        default=None, description="the context's own compaction threshold (null: the server's)"
    )
    active_branch: str
    branches: list[BranchOut]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, outline: ContextOutline) -> ContextOut:
        ctx, lengths = outline.context, outline.lengths
        return cls(
            id=ctx.id,
            parent_id=ctx.parent_id,
            state=ctx.current_state,
            version=ctx.version,
            event_seq=ctx.event_seq,
            title=ctx.config.title,
            model=ctx.config.model_id,
            mode=ctx.config.mode,
            parameters=ctx.config.parameters,
            tool_history=ctx.config.tool_history,
            token_budget=ctx.config.token_budget,
            compaction=ctx.config.compaction,
            active_branch=ctx.active_branch_name,
            branches=[
                BranchOut(
                    name=b.name,
                    message_count=lengths[b.name],
                    forked_from=b.forked_from,
                    system_prompt=b.system_prompt.content if b.system_prompt else None,
                    user_prompt=b.user_prompt,
                )
                for b in ctx.branches.values()
            ],
            created_at=ctx.created_at,
            updated_at=ctx.updated_at,
        )


class ContextSummaryOut(BaseModel):
    id: str
    state: str
    version: int
    updated_at: datetime
    parent_id: str | None
    title: str | None = None
    model: str | None = None


class ContextList(BaseModel):
    contexts: list[ContextSummaryOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class MessageIn(BaseModel):
    model_config = _STRICT
    content: str
    role: Literal["user", "frontend_operator"] = "user"
    output_schema: dict[str, Any] | None = Field(
        default=None,
        description="a JSON Schema the turn's final answer must match (docs/structured-output.md)",
    )
    output_retries: int | None = Field(
        default=None,
        ge=0,
        description="answers that miss output_schema sent back with their errors (default 1)",
    )


class MessagePage(BaseModel):
    branch: str
    messages: list[MessageNode]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class QuestionOut(BaseModel):
    call_id: str
    tool_name: str
    question: str
    choices: list[str]


class TurnOut(BaseModel):
    """What a call returns once the context rests (``turnfsm.Turn``)."""

    context_id: str
    state: str
    stop_reason: str | None
    states: list[str]
    text: str
    message_ids: list[str]
    messages: list[InternalMessage]
    pending_tool_calls: list[ToolCallRequest]
    questions: list[QuestionOut]
    error: str | None
    output: Any = Field(
        default=None,
        description="the typed answer, validated (null: no output_schema, or no valid answer)",
    )

    @classmethod
    def of(cls, turn: Turn) -> TurnOut:
        return cls(
            context_id=turn.context_id,
            state=str(turn.state),
            stop_reason=None if turn.stop_reason is None else str(turn.stop_reason),
            states=[str(s) for s in turn.states],
            text=turn.text,
            message_ids=list(turn.message_ids),
            messages=list(turn.messages),
            pending_tool_calls=list(turn.pending_tool_calls),
            questions=[
                QuestionOut(
                    call_id=q.call_id,
                    tool_name=q.tool_name,
                    question=q.question,
                    choices=list(q.choices),
                )
                for q in turn.questions
            ],
            error=turn.error,
            output=None if turn.output is None else to_jsonable_python(turn.output),
        )


class AcceptedOut(BaseModel):
    """A call accepted and running server-side; follow it on the event stream."""

    context_id: str
    message_id: str | None = Field(default=None, description="the stored user message")
    state: str


class BranchIn(BaseModel):
    model_config = _STRICT
    name: str
    at: int = Field(
        description="keep the active branch's messages up to this index (-1: none of them)"
    )
    system_prompt: str | None = None
    user_prompt: str | None = None


class SwitchIn(BaseModel):
    model_config = _STRICT
    name: str


class Denial(BaseModel):
    model_config = _STRICT
    id: str
    reason: str | None = None


class ApproveIn(BaseModel):
    """Decisions on pending tool calls: approve some, deny others with reasons."""

    model_config = _STRICT
    approve: list[str] = Field(default_factory=list)
    deny: list[Denial] = Field(default_factory=list)


class AnswerIn(BaseModel):
    model_config = _STRICT
    call_id: str
    text: str


class StateOut(BaseModel):
    context_id: str
    state: str
    version: int
    running: bool = Field(description="a call runs on it in this server now")
    pending_tool_calls: list[ToolCallRequest]


class ChildOut(BaseModel):
    context_id: str
    state: str
    title: str | None
    finished: bool


class VerifyOut(BaseModel):
    ok: bool
    steps: int
    line: int | None
    reason: str | None
    final_state: str


# ---------------------------------------------- sub-contexts, branch prompts, modes


class SpawnIn(BaseModel):
    """A sub-task for a new child context (``Engine.spawn``); a field left out
    is the parent's (the tools: what the parent may use)."""

    model_config = _STRICT
    task: str
    system_prompt: str | None = None
    model: str | None = None
    mode: str | None = None
    tools: list[str] | None = Field(
        default=None, description="an allow-list of tool names, within the parent's"
    )
    title: str | None = None


class SpawnOut(BaseModel):
    """The child made and the turn its task ran (the child is at rest)."""

    context_id: str = Field(description="the child's id")
    parent_id: str
    turn: TurnOut


class FinishIn(BaseModel):
    """How to bring a child back into its parent (``Engine.finish``)."""

    model_config = _STRICT
    summarizer: Literal["llm", "final_answer"] = Field(
        default="llm",
        description="llm: the engine's model summarises the child; "
        "final_answer: the child's last answer as it is",
    )
    prompt: str | None = Field(
        default=None, description="the summary prompt of the llm summarizer (its own by default)"
    )
    keep: bool = Field(default=False, description="keep the child, finished, rather than delete it")


class FinishedOut(BaseModel):
    context_id: str = Field(description="the parent's id")
    child_id: str
    message_id: str = Field(description="the summary message, on the parent's active branch")
    summary: str
    kept: bool


class TreeOut(BaseModel):
    """A context and its sub-contexts, at any depth, children oldest first."""

    id: str
    state: str
    title: str | None
    finished: bool
    children: list[TreeOut]


class BranchPromptsIn(BaseModel):
    """A branch's own prompts: a field left out is kept; ``null`` or ``""`` removes it."""

    model_config = _STRICT
    system_prompt: str | None = None
    user_prompt: str | None = None


class ModeOut(BaseModel):
    """A mode of the server's engine (``PUT /api/contexts/{id}`` chooses one)."""

    name: str
    instructions: str | None = None
    tools: list[str] | None = Field(default=None, description="the tools it offers (all: null)")
    approval: dict[str, str] = Field(default_factory=dict)
    answer_type: str = "Text"


class ToolOut(BaseModel):
    """A tool the model is offered in a context (``GET /api/contexts/{id}/tools``)."""

    name: str
    description: str
    approval: str = Field(description="auto, required, deny, or 'per call' (a policy function)")
    parameters: dict[str, Any] = Field(description="the JSON Schema of its arguments")
