"""What the web view's pages show, made from the engine's records: messages
and their tool calls, a branch's path, the audit page's tables (``docs/web.md``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..._numbers import whole_number
from ...engine._output import unfenced
from ...model import ApprovalStatus, MessageNode, Role, ToolCallRequest
from ...model._json import loads_json
from ...model._message import FilePart, ImagePart
from ...states import CHANGES
from ...storage import StepLog
from ...tools import QuestionTool

if TYPE_CHECKING:  # turnfsm.render is imported by the page that shows a path
    from ...render import PathDiff, RunPath

MAX_PAGE_NUMBER = 10**9
"""The largest ``?offset=`` or ``?turn=`` a page reads."""

__all__ = [
    "STATE_WORDS",
    "TRIGGER_WORDS",
    "CallView",
    "MessageView",
    "branch_paths",
    "call_view",
    "diff_rows",
    "int_param",
    "message_view",
    "seconds",
    "status_words",
    "svg_body",
    "verdict_text",
]

STATE_WORDS = {
    "Idle": "ready for a message",
    "ProcessingUserMessage": "reading your message",
    "AwaitingLLMResponse": "waiting for the model",
    "StreamingLLMResponse": "the model is answering",
    "ProcessingLLMResponse": "reading the model's answer",
    "AwaitingToolApproval": "waiting for your decision",
    "ExecutingTools": "running the tools",
    "TransientFailure": "the model's call failed; trying again shortly",
    "PermanentFailure": "the turn failed",
}
"""What a context's page says of each state while a turn runs, in words."""
TRIGGER_WORDS = {
    "turn_complete": "answered",
    "cancel": "stopped",
    "reset": "the failed turn was abandoned",
    "retry": "trying again",
    "give_up": "no more attempts",
    "approvals_resolved": "decided",
    "tools_done": "the tools answered",
    "output_invalid": "the answer did not match its type; asking again",
    "output_failed": "the answer did not match its type",
}
"""What a page adds of the step that led there, for the steps worth saying."""


def branch_paths(steps: Sequence[StepLog], branches: Sequence[str]) -> dict[str, RunPath]:
    """The path each branch went through: the transitions committed while it was
    the active branch, after those of the branch it was forked from up to the
    fork (a fork makes the new branch active; a switch changes the active one).
    The first branch is ``main`` (or the first of ``branches``)."""
    from ...render import path_from_steps

    first = "main" if "main" in branches or not branches else branches[0]
    taken: dict[str, list[StepLog]] = {first: []}
    active = first
    for step in steps:
        if step.trigger in CHANGES:
            detail = step.detail or {}
            name = detail.get("branch")
            if step.trigger == "branch_forked" and isinstance(name, str):
                source = str(detail.get("forked_from") or active)
                taken[name] = list(taken.get(source, []))
                active = name
            elif step.trigger == "branch_switched" and isinstance(name, str):
                taken.setdefault(name, [])
                active = name
            continue
        taken.setdefault(active, []).append(step)
    return {name: path_from_steps(taken.get(name, [])) for name in branches}


def svg_body(svg: bytes) -> str:
    """The ``<svg>`` element of Graphviz's output, for inlining in a page."""
    text = svg.decode("utf-8", "replace")
    start = text.find("<svg")
    return text[start:] if start >= 0 else ""


def seconds(value: float | None) -> str:
    if value is None:
        return ""
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


def _pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=str)


@dataclass
class CallView:
    id: str
    name: str
    arguments: str
    status: str
    decided_by: str | None
    reason: str | None
    pending: bool
    question: str | None = None
    choices: tuple[str, ...] = ()


@dataclass
class MessageView:
    id: str
    role: str
    kind: str
    text: str
    at: str
    model: str | None
    thinking: str | None = None
    reasoning: list[str] = field(default_factory=list)
    refusal: str | None = None
    marks: list[str] = field(default_factory=list)
    attachments: list[str] = field(default_factory=list)
    calls: list[CallView] = field(default_factory=list)
    result_for: str | None = None
    result: str | None = None
    result_ok: bool = True
    output_name: str | None = None
    """The output type an answer was asked for (its schema's name)."""
    output_mode: str | None = None
    output_json: str | None = None
    """The typed answer's JSON, formatted (None: its text is not JSON)."""
    notice: bool = False
    """A notice the engine wrote (``InternalMessage.notice``), not the model's words."""


_OUTCOME_MARK = {
    "refusal": "refused",
    "length": "truncated: cut at the token limit",
    "content_filter": "truncated: cut or withheld by the provider's content filter",
    "incomplete": "incomplete",
}


def call_view(call: ToolCallRequest, tools: Any) -> CallView:
    args = call.raw_arguments if call.raw_arguments is not None else _pretty(call.arguments)
    view = CallView(
        id=call.id,
        name=call.tool_name,
        arguments=args,
        status=str(call.approval_status).lower(),
        decided_by=call.decided_by,
        reason=call.reason,
        pending=call.approval_status is ApprovalStatus.PENDING,
    )
    tool = tools.get(call.tool_name)
    if isinstance(tool, QuestionTool):
        asked = tool.ask(call)
        if asked is not None:
            view.question, view.choices = asked.question, asked.choices
    return view


def message_view(node: MessageNode, tools: Any) -> MessageView:
    msg = node.message
    meta = msg.metadata
    view = MessageView(
        id=node.id,
        role=str(msg.role),
        kind=str(msg.message_type),
        text=msg.text,
        at=meta.created_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
        model=meta.model,
        thinking=msg.thinking or None,
        reasoning=[s for item in msg.reasoning or () for s in item.summary],
        refusal=msg.refusal,
    )
    outcome = msg.outcome
    if outcome is not None and outcome != "refusal":
        mark = _OUTCOME_MARK.get(outcome, outcome)
        if outcome == "incomplete" and meta.incomplete_reason:
            mark += f" ({meta.incomplete_reason})"
        view.marks.append(mark)
    if meta.cancelled:
        view.marks.append("cancelled: the partial text is kept")
    if msg.notice is not None:
        view.notice = True
        view.marks.append("notice: written by turnfsm, not by the model")
    for part in msg.content:
        if isinstance(part, ImagePart):
            view.attachments.append(f"image: {part.url[:200]}")  # named, never loaded
        elif isinstance(part, FilePart):
            view.attachments.append(f"file: {part.name} ({part.mime_type})")
    view.calls = [call_view(c, tools) for c in msg.tool_calls or ()]
    typed = meta.extra.get("output")
    if msg.role is Role.ASSISTANT and isinstance(typed, dict):
        view.output_name = str(typed.get("name"))
        view.output_mode = str(typed.get("mode"))
        try:
            view.output_json = _pretty(loads_json(unfenced(msg.text)))
        except ValueError:
            view.output_json = None
    if isinstance(meta.extra.get("output_errors"), list):
        view.marks.append("sent back: the answer before does not match its output type")
    tr = msg.tool_result
    if tr is not None:
        view.result_for = tr.request_id
        view.result = tr.result if isinstance(tr.result, str) else _pretty(tr.result)
        view.result_ok = tr.success
    return view


def int_param(value: str | None, name: str, default: int) -> int:
    """A page's number parameter (``?offset=``, ``?turn=``), read as every
    number a client gives is (:func:`~turnfsm._numbers.whole_number`):
    ``default`` when it is absent or empty, else :class:`InvalidInput` naming
    it (the ``422`` page) for anything but a whole number in range."""
    if not value:
        return default
    return whole_number(value, name, 0, MAX_PAGE_NUMBER)


@dataclass(frozen=True, slots=True)
class StepCount:
    """How many steps an audit log holds, and how many of them are transitions
    of the table (what the run-path diagram draws); the others are changes
    (config updates, branch changes: :data:`~turnfsm.states.CHANGES`). The
    audit page says it once, from the records, wherever it gives a count."""

    steps: int
    transitions: int

    def __str__(self) -> str:
        changes = self.steps - self.transitions
        if not changes:
            return f"{self.steps} step{'' if self.steps == 1 else 's'}"
        return (
            f"{self.steps} steps: {self.transitions} "
            f"transition{'' if self.transitions == 1 else 's'} and {changes} "
            f"change{'' if changes == 1 else 's'}"
        )


def step_count(records: Sequence[Any]) -> StepCount:
    """The :class:`StepCount` of an audit log's records."""
    return StepCount(len(records), sum(1 for r in records if r.trigger not in CHANGES))


def verdict_text(result: Any, counted: StepCount) -> str:
    """What ``turnfsm audit verify`` prints for the log (docs/cli.md), its
    count of steps split as :class:`StepCount` says."""
    if not result.ok:
        return f"line {result.line}: {result.reason}"
    calls = f"{result.tool_calls} tool calls, all resolved"
    if result.open_calls:
        calls = (
            f"{result.tool_calls} tool calls, {len(result.open_calls)} still waiting in "
            f"{result.final_state}"
        )
    return f"ok: {counted}, declared edges only, ending in {result.final_state}; {calls}"


def diff_rows(a: RunPath, b: RunPath, result: PathDiff) -> list[dict[str, Any]]:
    ea = [(a.states[0], ""), *((s.to_state, s.trigger) for s in a.steps)]
    eb = [(b.states[0], ""), *((s.to_state, s.trigger) for s in b.steps)]
    rows = []
    for i in range(max(len(ea), len(eb))):
        rows.append(
            {
                "index": i,
                "a": f"{ea[i][0]}" + (f" (via {ea[i][1]})" if i < len(ea) and ea[i][1] else "")
                if i < len(ea)
                else "(ended)",
                "b": f"{eb[i][0]}" + (f" (via {eb[i][1]})" if i < len(eb) and eb[i][1] else "")
                if i < len(eb)
                else "(ended)",
                "differs": result.index is not None and i >= result.index,
            }
        )
    return rows


def status_words() -> str:
    """:data:`STATE_WORDS` and :data:`TRIGGER_WORDS` for the page's script (JSON)."""
    return json.dumps({"states": STATE_WORDS, "triggers": TRIGGER_WORDS}, sort_keys=True)
