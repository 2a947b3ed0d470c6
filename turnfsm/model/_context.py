"""The conversation context: message pool, branches, config, state (see docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from ._message import ApprovalStatus, MessageNode, Role, ToolCallRequest

__all__ = [
    "CLIENT_CALL",
    "SCHEMA_VERSION",
    "SUBTASK_RESUMED",
    "SUBTASK_WAITING",
    "SUMMARY_KEY",
    "Branch",
    "ChatConfig",
    "ChatContext",
    "ClientTool",
    "ClientTools",
    "FrontendOperatorAs",
    "HistoryOverride",
    "SystemPrompt",
    "TurnOutput",
    "TurnProgress",
]

SCHEMA_VERSION = 1
"""The version of the stored context shape written by this release."""

SUMMARY_KEY = "sub_context"
"""The key, in a message's ``metadata.extra``, that marks the summary of a
finished sub-context on its parent: ``{"child_id": ..., "message_ids": [...],
"summarizer": ..., "title": ...}`` (see ``Engine.finish``)."""

SUBTASK_WAITING = "waiting for sub-context "
"""The ``reason`` of a parent's sub-task tool call while the child (its id
follows) waits for a human: the call is pending again (``subtask_waits``)."""
CLIENT_CALL = "run by the client"
"""The ``reason`` of a call of one of the client's tools (approved by
``system``): the client runs it and gives its result (docs/client-tools.md)."""
SUBTASK_RESUMED = "resumed: sub-context "
"""The ``reason`` of such a call once its child no longer waits and the call
runs again (the child's id follows)."""


_FORBID = ConfigDict(extra="forbid")

# The roles and status the open calls are found by, as module constants: on Python 3.11
# reading a member off its enum class goes through ``EnumType.__getattr__``'s
# slow lookup.
_TOOL = Role.TOOL
_ASSISTANT = Role.ASSISTANT
_PENDING = ApprovalStatus.PENDING


@dataclass(slots=True, kw_only=True, frozen=True)
class SystemPrompt:
    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    id: str
    content: str


@dataclass(slots=True, kw_only=True)
class Branch:
    """One line of conversation: an ordered list of message ids in the pool."""

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    name: str
    message_ids: list[str] = field(default_factory=list)
    parent_message_id: str | None = None
    """The message this branch forked after (None for the first branch)."""
    forked_from: str | None = None
    """The branch this one forked from."""
    system_prompt: SystemPrompt | None = None
    user_prompt: str | None = None


def _is_none(value: object) -> bool:
    return value is None


def _is_false(value: object) -> bool:
    return value is False


HistoryOverride = Annotated[int, Field(ge=0)] | Literal["off"] | None
"""A context's own history setting (``ChatConfig.tool_history``,
``token_budget``, ``compaction``): a number, ``"off"`` (none for this
context, whatever the engine's), or ``None`` (the engine's setting)."""


FrontendOperatorAs = Literal["assistant", "user"]
"""How a context's frontend operator messages are sent to the model
(``ChatConfig.frontend_operator_as``)."""


@dataclass(slots=True, kw_only=True)
class ChatConfig:
    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    model_id: str = "scripted"
    mode: str = "chat"
    parameters: dict[str, Any] = field(default_factory=dict)
    system_prompt_id: str | None = None
    agent_role: str = "assistant"
    workspace_path: str | None = None
    title: str | None = None
    """A name for people (lists, the web view); the engine does not read it."""
    tools: Annotated[list[str] | None, Field(exclude_if=_is_none)] = None
    """The names of the engine's tools this context may use (``None``: all of
    them), within what its mode offers. The model is offered only these, and a
    call to any other tool gets an error result and never runs."""
    archived: Annotated[bool, Field(exclude_if=_is_false)] = False
    """A finished sub-context that was kept: it takes no more input."""
    subtask_call: Annotated[str | None, Field(exclude_if=_is_none)] = None
    """The parent's tool call this sub-context runs (the child of a sub-task
    tool): a run of that call again continues this child."""
    tool_history: Annotated[HistoryOverride, Field(exclude_if=_is_none)] = None
    """This context's tool history (the last N calls shown in full; ``"off"``:
    every call in full) instead of the engine's ``tool_history_rounds``."""
    token_budget: Annotated[HistoryOverride, Field(exclude_if=_is_none)] = None
    """This context's token budget (max input tokens; ``"off"``: none) instead
    of the engine's ``token_budget``."""
    compaction: Annotated[HistoryOverride, Field(exclude_if=_is_none)] = None
    """This context's compaction threshold in tokens (``"off"``: none) instead
    of the engine's ``compaction``."""
    frontend_operator_as: Annotated[FrontendOperatorAs | None, Field(exclude_if=_is_none)] = None
    """The role the model sees a frontend operator's message in: ``"user"``
    (a user message named ``frontend_operator``; ``None`` means it too) or
    ``"assistant"`` (an assistant message, as the request formats send one;
    see docs/server.md, "The frontend operator's messages"). Stored history
    keeps the ``frontend_operator`` role either way."""


@dataclass(slots=True, kw_only=True, frozen=True)
class TurnOutput:
    """The output type of the running turn, as its JSON Schema (see
    docs/structured-output.md): ``name``, ``schema`` and ``digest`` as in
    :class:`~turnfsm.model.OutputSpec`; ``retries`` is how many answers that do
    not match it are sent back with their errors before the turn fails;
    ``invalid`` counts those sent back so far."""

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    name: str
    schema: dict[str, Any]
    digest: str
    strict: bool = True
    retries: int = 1
    invalid: int = 0


def _is_empty(value: object) -> bool:
    return not value


@dataclass(slots=True, kw_only=True, frozen=True)
class ClientTool:
    """A tool the client runs: the model is offered it beside the engine's
    tools, and a call of it is handed back to the caller instead of run
    (docs/client-tools.md). ``parameters`` is its JSON Schema."""

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    name: str
    description: Annotated[str, Field(exclude_if=_is_empty)] = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: Annotated[bool | None, Field(exclude_if=_is_none)] = None

    def definition(self) -> dict[str, Any]:
        """The tool in the OpenAI ``tools`` format the model is offered."""
        function: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description:
            function["description"] = self.description
        if self.strict is not None:
            function["strict"] = self.strict
        return {"type": "function", "function": function}


@dataclass(slots=True, kw_only=True, frozen=True)
class ClientTools:
    """The client's tools of one turn, and how the model may call tools:
    ``tool_choice`` (``"auto"``, ``"none"``, ``"required"`` or
    ``{"type": "function", "function": {"name": ...}}``) and
    ``parallel_tool_calls``, sent as the request's parameters when set."""

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    tools: tuple[ClientTool, ...] = ()
    tool_choice: Annotated[str | dict[str, Any] | None, Field(exclude_if=_is_none)] = None
    parallel_tool_calls: Annotated[bool | None, Field(exclude_if=_is_none)] = None


@dataclass(slots=True, kw_only=True, frozen=True)
class TurnProgress:
    """Where the running turn is, so that a reloaded context can resume it.

    ``iteration`` counts LLM calls for the current user message; ``attempt``
    counts attempts of the current LLM call. ``retry_at`` is the clock time at
    which a pending retry is due. ``started_call_ids`` are tool calls whose
    attempt was recorded before they ran. ``client`` are the tools the
    client runs, declared with the turn's message (kept until the next one).
    Frozen: the engine replaces it when it changes, so a store may keep the
    object it was given.
    """

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    iteration: int = 0
    attempt: int = 0
    retry_at: float | None = None
    last_error: str | None = None
    started_call_ids: tuple[str, ...] = ()
    output: Annotated[TurnOutput | None, Field(exclude_if=_is_none)] = None
    """The turn's output type (None: its answer is any text). Kept from the
    turn's start to its end, so that it holds across a rest at
    AwaitingToolApproval, an unload and a crash."""
    client: Annotated[ClientTools | None, Field(exclude_if=_is_none)] = None


class _OpenTurnProgress:
    """TurnProgress's slots, without its frozen ``__setattr__`` (see
    :func:`turn_progress`)."""

    __slots__ = (
        "attempt",
        "client",
        "iteration",
        "last_error",
        "output",
        "retry_at",
        "started_call_ids",
    )
    iteration: int
    attempt: int
    retry_at: float | None
    last_error: str | None
    started_call_ids: tuple[str, ...]
    output: TurnOutput | None
    client: ClientTools | None


_new = object.__new__


def turn_progress(
    *,
    iteration: int,
    attempt: int,
    retry_at: float | None = None,
    last_error: str | None = None,
    started_call_ids: tuple[str, ...] = (),
    output: TurnOutput | None = None,
    client: ClientTools | None = None,
) -> TurnProgress:
    """``TurnProgress(...)``, the same record, made with plain slot writes: a
    frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, several times the cost, and the engine makes a
    new one at each step of a turn (as ``storage._base.step_log`` does for the
    audit records; ``tests/test_open_records.py`` holds the two
    to the same record)."""
    p = _new(_OpenTurnProgress)
    p.iteration = iteration
    p.attempt = attempt
    p.retry_at = retry_at
    p.last_error = last_error
    p.started_call_ids = started_call_ids
    p.output = output
    p.client = client
    # laid out as a TurnProgress (the same slots), it becomes one
    p.__class__ = TurnProgress  # type: ignore[assignment]
    return p  # type: ignore[return-value]


@dataclass(slots=True, kw_only=True)
class ChatContext:
    """A whole conversation; serialisable, and owned by the engine while loaded."""

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID
    schema_version: int = SCHEMA_VERSION
    id: str
    parent_id: str | None = None
    config: ChatConfig = field(default_factory=ChatConfig)
    message_pool: dict[str, MessageNode] = field(default_factory=dict)
    branches: dict[str, Branch] = field(default_factory=dict)
    active_branch_name: str = "main"
    current_state: str = "Idle"
    created_at: datetime
    updated_at: datetime
    version: int = 0
    event_seq: int = 0
    progress: TurnProgress = field(default_factory=TurnProgress)

    @property
    def active_branch(self) -> Branch:
        return self.branches[self.active_branch_name]

    def history(self, branch: str | None = None) -> list[MessageNode]:
        """The messages of a branch (the active one by default), in order."""
        pool = self.message_pool
        ids = self.branches[branch or self.active_branch_name].message_ids
        return [pool[i] for i in ids]

    def last_tool_batch(
        self, message_ids: Sequence[str] | None = None
    ) -> tuple[MessageNode, list[str]] | None:
        """The newest assistant message of the active branch (or of the history
        ``message_ids``), if it asked for tools.

        Returns that message and the ids of its calls that already have a result
        (the tool messages after it). Scans back only to that message.
        """
        ids = (
            self.branches[self.active_branch_name].message_ids
            if message_ids is None
            else message_ids
        )
        return newest_tool_batch(self.message_pool, ids)

    def open_tool_calls(self) -> list[ToolCallRequest]:
        """Calls of the newest tool batch that have no result yet, in the order asked."""
        return _open_calls(self.message_pool, self.branches[self.active_branch_name].message_ids)

    def pending_tool_calls(self) -> list[ToolCallRequest]:
        """Open calls still waiting for a human decision."""
        out = []
        # a loop, not a comprehension: on this interpreter that is a call of its own
        for c in _open_calls(self.message_pool, self.branches[self.active_branch_name].message_ids):
            if c.approval_status is _PENDING:
                out.append(c)
        return out


def _open_calls(pool: Mapping[str, MessageNode], ids: Sequence[str]) -> list[ToolCallRequest]:
    """:func:`open_calls` of :func:`newest_tool_batch`, in one frame: a turn
    that waits for a human reads its open calls several times (its rest, the
    decision, the run), and the answered ids are gathered only when there are
    some."""
    answered: set[str] | None = None
    for mid in reversed(ids):
        msg = pool[mid].message
        result = msg.tool_result
        if result is not None and msg.role is _TOOL:
            if answered is None:
                answered = set()
            answered.add(result.request_id)
            continue
        calls = msg.tool_calls
        if calls and msg.role is _ASSISTANT:
            if answered is None:
                return list(calls)
            return [c for c in calls if c.id not in answered]
        return []
    return []


def newest_tool_batch(
    pool: Mapping[str, MessageNode], ids: Sequence[str]
) -> tuple[MessageNode, list[str]] | None:
    """:meth:`ChatContext.last_tool_batch` of the history ``ids`` (each in
    ``pool``; it needs only the messages from the newest assistant message on)."""
    answered: list[str] = []
    for mid in reversed(ids):
        node = pool[mid]
        msg = node.message
        if msg.role is _TOOL and msg.tool_result is not None:
            answered.append(msg.tool_result.request_id)
            continue
        if msg.role is _ASSISTANT and msg.tool_calls:
            return node, answered
        return None
    return None


def open_calls(batch: tuple[MessageNode, list[str]] | None) -> list[ToolCallRequest]:
    """The calls of a tool batch (:func:`newest_tool_batch`) that have no result
    yet, in the order asked."""
    if batch is None:
        return []
    node, answered = batch
    assert node.message.tool_calls is not None
    done = set(answered)
    # a loop, not a comprehension (a call of its own before Python 3.12):
    # every decision on a batch reads it
    calls: list[ToolCallRequest] = []
    for c in node.message.tool_calls:
        if c.id not in done:
            calls.append(c)
    return calls
