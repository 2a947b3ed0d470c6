"""A sub-task as a tool: the parent's model calls it with a ``task``; the engine
runs that task in a child context, finishes it, and the summary is the tool's
result.

The tool needs the engine and the calling context when it runs. The engine
provides them for the duration of its tool runs through a context variable
(:func:`hosting`): each running call sees the engine and context that run it,
so one :class:`Tool` can be shared by several engines and nothing is global.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from turnfsm.errors import ToolDefinitionError

from ._run import current_call
from ._spec import Approval, ApprovalPolicy, Tool, ToolError

__all__ = ["SubtaskHost", "SubtaskSpec", "SubtaskTool", "hosting", "subtask"]


@dataclass(frozen=True, slots=True)
class SubtaskSpec:
    """How a sub-task tool runs its child (see :func:`subtask`)."""

    tool_name: str
    system_prompt: str | None = None
    tools: tuple[str, ...] | None = None
    model: str | None = None
    summarizer: Any = None
    """A summarizer as ``Engine.finish`` takes it (``None``: the LLM summary)."""
    keep: bool = False


class SubtaskTool(Tool):
    """A tool made by :func:`subtask`: its ``spec`` says how it runs its child
    (a recorder writes it down as the script's ``subtask`` tool)."""

    __slots__ = ("spec",)
    spec: SubtaskSpec
    _runs_children: ClassVar[bool] = True

    def __repr__(self) -> str:
        return f"SubtaskTool(name={self.name!r})"


class SubtaskHost(Protocol):
    """What runs a sub-task for a tool call: the engine running the call."""

    async def run_subtask(
        self, parent_id: str, call_id: str, task: str, spec: SubtaskSpec
    ) -> str: ...


_HOST: ContextVar[tuple[SubtaskHost, str] | None] = ContextVar("turnfsm_subtask_host", default=None)


class hosting:
    """Inside this block, sub-task tools run their children with ``host``, as
    children of ``context_id`` (the engine wraps its tool runs in it). A
    class rather than a ``@contextmanager`` generator, as every batch of tool
    calls an engine runs enters one."""

    __slots__ = ("_token", "_value")

    def __init__(self, host: SubtaskHost, context_id: str) -> None:
        self._value = (host, context_id)
        self._token: Token[tuple[SubtaskHost, str] | None] | None = None

    def __enter__(self) -> None:
        self._token = _HOST.set(self._value)

    def __exit__(self, *exc: object) -> None:
        token = self._token
        if token is not None:
            self._token = None
            _HOST.reset(token)


_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "description": "The sub-task, stated completely: the helper sees nothing else.",
        }
    },
    "required": ["task"],
    "additionalProperties": False,
}


def subtask(
    name: str,
    description: str,
    *,
    system_prompt: str | None = None,
    tools: Sequence[str] | None = None,
    model: str | None = None,
    summarizer: Any = None,
    keep: bool = False,
    approval: ApprovalPolicy = Approval.AUTO,
) -> SubtaskTool:
    """A tool that runs its ``task`` argument in a child context.

    When the parent's model calls it, the engine running the call spawns a
    child of the calling context (``system_prompt``; ``tools``, an allow-list of
    the engine's tool names, by default what the parent may use; ``model``, by
    default the parent's; titled with the tool's name), runs the task until the
    child rests, and finishes it with ``summarizer`` (as ``Engine.finish`` takes
    it; the LLM summary by default). The summary is the call's result; the child is then deleted, or
    kept finished with ``keep=True``. A child that waits for a human's approval
    sends the parent to ``AwaitingToolApproval`` with the child's pending calls
    (``subtask_waits``): approving or denying them on the parent lets the child
    go on and this call complete. A child that fails gives an error result
    naming it and is kept as it is. The call has no time limit and is not
    idempotent; run again (after a crash), it continues the same child.
    """
    if tools is not None and (isinstance(tools, str) or not all(isinstance(t, str) for t in tools)):
        raise ToolDefinitionError(f"tool {name!r}: tools must be a list of tool names")
    spec = SubtaskSpec(
        tool_name=name,
        system_prompt=system_prompt,
        tools=None if tools is None else tuple(tools),
        model=model,
        summarizer=summarizer,
        keep=keep,
    )

    async def run(task: str) -> str:
        hosted = _HOST.get()
        if hosted is None:
            raise ToolError(f"the sub-task tool {name!r} runs only inside an engine's tool run")
        host, parent_id = hosted
        call = current_call()
        if call is None:  # pragma: no cover - run_calls always sets it
            raise ToolError(f"the sub-task tool {name!r} runs only as a tool call")
        return await host.run_subtask(parent_id, call.id, task, spec)

    made = SubtaskTool.from_spec(
        name, description, _PARAMETERS, run, approval=approval, timeout=None
    )
    assert isinstance(made, SubtaskTool)
    object.__setattr__(made, "spec", spec)
    return made
