"""A Mermaid ``sequenceDiagram`` of one turn, for audit reports.

Participants: ``user``, ``engine``, ``LLM``, ``tools``, ``approver`` (the
human who approves tool calls). Built from the audit records of a context
(:func:`~turnfsm.render.audit_records`: its steps with the messages each one
touched) and the message pool. A turn is a user message and every step after
it until the next one (approvals, retries and cancels included). Each step is
a note on the engine (``seq · trigger → state``) after the arrows that caused it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..audit import AuditRecord
from ..errors import RenderError
from ..model import ApprovalStatus, MessageNode, Role, ToolCallRequest
from ..states import State, Trigger

__all__ = ["PARTICIPANTS", "sequence_diagram", "turn_starts"]

PARTICIPANTS = ("user", "engine", "LLM", "tools", "approver")
_IND = "    "
_PREVIEW = 60
T = Trigger


def _text(value: str, limit: int = _PREVIEW) -> str:
    """Text safe after a Mermaid ``:`` (entity codes for ``#``, ``;``, ``<``, ``>``)."""
    flat = " ".join(value.split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return flat.replace("#", "#35;").replace(";", "#59;").replace("<", "#lt;").replace(">", "#gt;")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _call(call: ToolCallRequest) -> str:
    if call.raw_arguments is not None:
        args = call.raw_arguments
    else:
        args = ", ".join(f"{k}={_json(v)}" for k, v in call.arguments.items())
    return f"{call.tool_name}({args}) [{call.id}]"


def turn_starts(records: Sequence[AuditRecord]) -> list[int]:
    """The indexes of the records that start a turn (``user_message``)."""
    return [i for i, r in enumerate(records) if r.trigger == T.USER_MESSAGE]


class _Book:
    """Looks up calls and results in the message pool."""

    def __init__(self, pool: Mapping[str, MessageNode]) -> None:
        self.pool = pool
        self.calls: dict[str, ToolCallRequest] = {}
        self.results: dict[str, MessageNode] = {}
        for node in pool.values():
            for c in node.message.tool_calls or ():
                self.calls[c.id] = c
            tr = node.message.tool_result
            if tr is not None:
                self.results[tr.request_id] = node

    def batch_calls(self, record: AuditRecord) -> list[ToolCallRequest]:
        for mid in record.message_ids:
            node = self.pool.get(mid)
            if node is not None and node.message.role is Role.ASSISTANT and node.message.tool_calls:
                return list(node.message.tool_calls)
        return []

    def describe(self, call_id: str) -> str:
        call = self.calls.get(call_id)
        return _call(call) if call is not None else f"[{call_id}]"


def sequence_diagram(
    records: Sequence[AuditRecord],
    pool: Mapping[str, MessageNode],
    *,
    turn: int | None = None,
) -> str:
    """The ``sequenceDiagram`` of turn ``turn`` (1 for the first; the last by default)."""
    starts = turn_starts(records)
    if not starts:
        raise RenderError("the conversation has no turn yet (no user message was taken)")
    number = len(starts) if turn is None else turn
    if not 1 <= number <= len(starts):
        raise RenderError(f"there is no turn {number}: the conversation has {len(starts)}")
    first = starts[number - 1]
    end = starts[number] if number < len(starts) else len(records)
    chunk = records[first:end]
    book = _Book(pool)
    cid = chunk[0].context_id
    lines = [
        "sequenceDiagram",
        f"{_IND}%% turnfsm: turn {number} of {len(starts)} of context {_text(cid)}, "
        f"steps {chunk[0].seq} to {chunk[-1].seq}",
        *(f"{_IND}participant {p}" for p in PARTICIPANTS),
    ]
    iteration = 0
    answer = ""
    for rec in chunk:
        if rec.trigger == T.USER_MESSAGE:
            iteration = 1
        elif rec.trigger == T.TOOLS_DONE:
            iteration += 1
        elif rec.trigger in (T.RESPONSE_RECEIVED, T.STREAM_ENDED):
            node = _message(book, rec, Role.ASSISTANT)
            answer = node.message.text if node is not None else ""
        lines += [f"{_IND}{ln}" for ln in _arrows(rec, book, answer)]
        lines.append(f"{_IND}Note over engine: {rec.seq} · {rec.trigger} → {rec.to_state}")
        if rec.to_state == State.AWAITING_LLM_RESPONSE:
            lines.append(
                f"{_IND}engine->>LLM: request (LLM call {iteration}, attempt {rec.attempt})"
            )
    return "\n".join(lines) + "\n"


def _message(book: _Book, rec: AuditRecord, role: Role) -> MessageNode | None:
    for mid in rec.message_ids:
        node = book.pool.get(mid)
        if node is not None and node.message.role is role:
            return node
    return None


def _closed(book: _Book, rec: AuditRecord, why: str) -> list[str]:
    out = []
    for call_id in rec.tool_results:
        node = book.results.get(call_id)
        status = why
        if node is not None and node.message.tool_result is not None:
            result = node.message.tool_result.result
            if isinstance(result, Mapping) and isinstance(result.get("status"), str):
                status = str(result["status"])
        out.append(f"Note over engine,tools: {_text(book.describe(call_id))} closed: {status}")
    return out


def _arrows(rec: AuditRecord, book: _Book, answer: str) -> list[str]:
    trig = rec.trigger
    if trig == T.USER_MESSAGE:
        out = _closed(book, rec, "superseded")
        node = next(
            (
                book.pool[m]
                for m in rec.message_ids
                if m in book.pool
                and book.pool[m].message.role in (Role.USER, Role.FRONTEND_OPERATOR)
            ),
            None,
        )
        if node is None:
            return [*out, "user->>engine: message"]
        who = "[frontend operator] " if node.message.role is Role.FRONTEND_OPERATOR else ""
        text = node.message.text or f"({len(node.message.content)} content parts)"
        return [*out, f"user->>engine: {who}{_text(text)}"]
    if trig == T.PREPARE_FAILED:
        return ["engine-->>user: failed: an enhancer raised"]
    if trig == T.STREAM_STARTED:
        return ["LLM-->>engine: first chunk (streaming)"]
    if trig in (T.RESPONSE_RECEIVED, T.STREAM_ENDED):
        node = _message(book, rec, Role.ASSISTANT)
        if node is None:
            return ["LLM-->>engine: answer"]
        out = []
        if node.message.text:
            out.append(f"LLM-->>engine: {_text(node.message.text)}")
        for call_id in rec.tool_calls:
            out.append(f"LLM-->>engine: tool call {_text(book.describe(call_id))}")
        return out or ["LLM-->>engine: (an empty answer)"]
    if trig == T.NEEDS_APPROVAL:
        out = []
        for c in book.batch_calls(rec):
            if c.decided_by == "policy":
                out.append(f"Note over engine: policy: {c.id} {str(c.approval_status).lower()}")
            else:
                out.append(f"engine->>approver: approve {_text(_call(c))}?")
        return out
    if trig == T.TOOLS_DECIDED:
        decided = [
            f"{c.id} {str(c.approval_status).lower()}"
            if c.decided_by == "policy"
            else f"{c.id} (decided again later)"
            for c in book.batch_calls(rec)
        ]
        return [f"Note over engine: policy: {_text(', '.join(decided) or 'decided')}"]
    if trig == T.APPROVALS_RESOLVED:
        out = []
        for c in book.batch_calls(rec):
            if c.decided_by != "human":
                continue
            if c.approval_status is ApprovalStatus.APPROVED:
                out.append(f"approver->>engine: approve {c.id}")
            else:
                reason = f": {c.reason}" if c.reason else ""
                out.append(f"approver->>engine: deny {_text(c.id + reason)}")
        return out or ["approver->>engine: decisions"]
    if trig == T.OUTCOME_UNKNOWN:
        return [
            f"engine->>approver: outcome unknown, run again? {_text(_call(c))}"
            for c in book.batch_calls(rec)
            if c.outcome_unknown
        ] or ["engine->>approver: outcome unknown"]
    if trig == T.TOOLS_DONE:
        return _tool_runs(rec, book)
    if trig == T.SUBTASK_WAITS:
        return [*_tool_runs(rec, book), "engine->>approver: a sub-task waits for a decision"]
    if trig == T.TURN_COMPLETE:
        out = _closed(book, rec, "not executed")
        if rec.tool_results:  # the iteration limit: the last answer asked for tools
            answer = "stopped: the limit of LLM calls was reached"
        out.append(f"engine-->>user: {_text(answer) if answer else 'turn complete'}")
        return out
    if trig == T.LLM_FAILED_TRANSIENT:
        return ["LLM--xengine: transient error"]
    if trig == T.LLM_FAILED_PERMANENT:
        return ["LLM--xengine: permanent error", "engine-->>user: failed"]
    if trig == T.RETRY:
        if rec.from_state == State.PERMANENT_FAILURE:
            return ["user->>engine: retry"]
        return ["Note over engine: backoff elapsed"]
    if trig == T.GIVE_UP:
        return ["engine-->>user: failed: attempts exhausted"]
    if trig == T.RESET:
        return ["user->>engine: reset"]
    if trig == T.CANCEL:
        return [
            "user->>engine: cancel",
            *_closed(book, rec, "cancelled"),
            "engine-->>user: cancelled",
        ]
    return []


def _tool_runs(rec: AuditRecord, book: _Book) -> list[str]:
    out = []
    for call_id in rec.tool_results:
        call = book.calls.get(call_id)
        node = book.results.get(call_id)
        tr = node.message.tool_result if node is not None else None
        if call is not None and call.approval_status is ApprovalStatus.DENIED:
            reason = f" ({call.reason})" if call.reason else ""
            out.append(f"Note over engine: {_text(call_id + ' denied' + reason)}, not run")
            continue
        out.append(f"engine->>tools: {_text(book.describe(call_id))}")
        if tr is None:
            out.append("tools-->>engine: (no result)")
        elif tr.success:
            out.append(f"tools-->>engine: ok: {_text(_json(tr.result))}")
        else:
            out.append(f"tools--xengine: failed: {_text(_json(tr.result))}")
    return out
