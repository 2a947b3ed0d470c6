"""A Mermaid ``sequenceDiagram`` of one turn, for audit reports.

Participants: ``user``, ``engine``, ``LLM``, ``tools``, ``approver`` (the
human who approves tool calls). Built from the audit records of a context
(:func:`~turnfsm.render.audit_records`: its steps with the messages each one
touched) and the message pool. A turn is a user message and every step after
it until the next one (approvals, retries and cancels included). Each step is
a note on the engine (``seq · trigger → state``) after the arrows that caused it.

:func:`sequence_rows` gives the diagram as data (a :class:`SequenceTurn` of
:class:`SequenceRow`); :func:`sequence_diagram` is its Mermaid text. The web
view lays the same rows out as a table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..audit import AuditRecord
from ..errors import RenderError
from ..model import CLIENT_CALL, ApprovalStatus, MessageNode, Role, ToolCallRequest
from ..states import State, Trigger

__all__ = [
    "PARTICIPANTS",
    "SequenceRow",
    "SequenceTurn",
    "sequence_diagram",
    "sequence_rows",
    "turn_starts",
]

PARTICIPANTS = ("user", "engine", "LLM", "tools", "approver")
_IND = "    "
_PREVIEW = 60
T = Trigger

_ARROWS = {"call": "->>", "reply": "-->>", "failed": "--x"}
"""A row's style and the Mermaid arrow that draws it."""
_ENTITIES = str.maketrans({"#": "#35;", ";": "#59;", "<": "#lt;", ">": "#gt;"})


def _text(value: str, limit: int = _PREVIEW) -> str:
    """A preview of ``value``: on one line, at most ``limit`` characters."""
    flat = " ".join(value.split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return flat


def _escaped(text: str) -> str:
    """Text safe after a Mermaid ``:`` (entity codes for ``#``, ``;``, ``<``, ``>``)."""
    return text.translate(_ENTITIES)


@dataclass(frozen=True, slots=True)
class SequenceRow:
    """One line of a turn's sequence diagram.

    An ``arrow`` goes from ``source`` to ``target``; its ``style`` is ``call``,
    ``reply`` or ``failed``. A ``note`` is over ``source`` to ``target`` (the
    same participant for a note over one). ``text`` is as shown (no escapes)."""

    kind: Literal["arrow", "note"]
    source: str
    target: str
    text: str
    style: str = ""

    def span(self, participants: Sequence[str]) -> tuple[int, int]:
        """The first column and how many columns the row covers."""
        a, b = participants.index(self.source), participants.index(self.target)
        return min(a, b), abs(a - b) + 1

    def direction(self, participants: Sequence[str]) -> str:
        """``right`` or ``left``: where the arrow points."""
        a, b = participants.index(self.source), participants.index(self.target)
        return "right" if b >= a else "left"

    def mermaid(self) -> str:
        """The row as a line of a Mermaid ``sequenceDiagram``."""
        if self.kind == "note":
            over = self.source if self.source == self.target else f"{self.source},{self.target}"
            return f"Note over {over}: {_escaped(self.text)}"
        return f"{self.source}{_ARROWS[self.style]}{self.target}: {_escaped(self.text)}"


def _call_to(source: str, target: str, text: str) -> SequenceRow:
    return SequenceRow("arrow", source, target, text, "call")


def _reply(source: str, target: str, text: str) -> SequenceRow:
    return SequenceRow("arrow", source, target, text, "reply")


def _failed(source: str, target: str, text: str) -> SequenceRow:
    return SequenceRow("arrow", source, target, text, "failed")


def _note(text: str, over: str = "engine", to: str | None = None) -> SequenceRow:
    return SequenceRow("note", over, to or over, text)


@dataclass(frozen=True, slots=True)
class SequenceTurn:
    """The sequence diagram of one turn: turn ``turn`` of ``turns``, steps
    ``first_seq`` to ``last_seq`` of the context, drawn as ``rows``."""

    context_id: str
    turn: int
    turns: int
    first_seq: int
    last_seq: int
    rows: tuple[SequenceRow, ...]
    participants: tuple[str, ...] = PARTICIPANTS

    def _heading(self, context: str) -> str:
        return (
            f"turnfsm: turn {self.turn} of {self.turns} of context {context}, "
            f"steps {self.first_seq} to {self.last_seq}"
        )

    @property
    def heading(self) -> str:
        """What the diagram shows, in a line (the Mermaid text's comment)."""
        return self._heading(_text(self.context_id))

    def mermaid(self) -> str:
        """The Mermaid ``sequenceDiagram``."""
        lines = [
            "sequenceDiagram",
            f"{_IND}%% {self._heading(_escaped(_text(self.context_id)))}",
            *(f"{_IND}participant {p}" for p in self.participants),
            *(f"{_IND}{row.mermaid()}" for row in self.rows),
        ]
        return "\n".join(lines) + "\n"


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


def sequence_rows(
    records: Sequence[AuditRecord],
    pool: Mapping[str, MessageNode],
    *,
    turn: int | None = None,
) -> SequenceTurn:
    """The sequence diagram of turn ``turn`` (1 for the first; the last by default)."""
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
    rows: list[SequenceRow] = []
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
        rows += _arrows(rec, book, answer)
        rows.append(_note(f"{rec.seq} · {rec.trigger} → {rec.to_state}"))
        if rec.to_state == State.AWAITING_LLM_RESPONSE:
            rows.append(
                _call_to("engine", "LLM", f"request (LLM call {iteration}, attempt {rec.attempt})")
            )
    return SequenceTurn(
        context_id=chunk[0].context_id,
        turn=number,
        turns=len(starts),
        first_seq=chunk[0].seq,
        last_seq=chunk[-1].seq,
        rows=tuple(rows),
    )


def sequence_diagram(
    records: Sequence[AuditRecord],
    pool: Mapping[str, MessageNode],
    *,
    turn: int | None = None,
) -> str:
    """The Mermaid ``sequenceDiagram`` of turn ``turn`` (1 for the first; the
    last by default): :func:`sequence_rows` as text."""
    return sequence_rows(records, pool, turn=turn).mermaid()


def _message(book: _Book, rec: AuditRecord, role: Role) -> MessageNode | None:
    for mid in rec.message_ids:
        node = book.pool.get(mid)
        if node is not None and node.message.role is role:
            return node
    return None


def _closed(book: _Book, rec: AuditRecord, why: str) -> list[SequenceRow]:
    out = []
    for call_id in rec.tool_results:
        node = book.results.get(call_id)
        status = why
        if node is not None and node.message.tool_result is not None:
            result = node.message.tool_result.result
            if isinstance(result, Mapping) and isinstance(result.get("status"), str):
                status = str(result["status"])
        out.append(_note(f"{_text(book.describe(call_id))} closed: {status}", to="tools"))
    return out


_Arrows = Callable[[AuditRecord, "_Book", str], list[SequenceRow]]


def _arrows(rec: AuditRecord, book: _Book, answer: str) -> list[SequenceRow]:
    """The rows of one committed transition (none for those the diagram leaves out)."""
    draw = _DRAWN.get(rec.trigger)
    return draw(rec, book, answer) if draw is not None else []


def _user_message(rec: AuditRecord, book: _Book, answer: str) -> list[SequenceRow]:
    out = _closed(book, rec, "superseded")
    node = next(
        (
            book.pool[m]
            for m in rec.message_ids
            if m in book.pool and book.pool[m].message.role in (Role.USER, Role.FRONTEND_OPERATOR)
        ),
        None,
    )
    if node is None:
        return [*out, _call_to("user", "engine", "message")]
    who = "[frontend operator] " if node.message.role is Role.FRONTEND_OPERATOR else ""
    text = node.message.text or f"({len(node.message.content)} content parts)"
    return [*out, _call_to("user", "engine", f"{who}{_text(text)}")]


def _response(rec: AuditRecord, book: _Book, answer: str) -> list[SequenceRow]:
    node = _message(book, rec, Role.ASSISTANT)
    if node is None:
        return [_reply("LLM", "engine", "answer")]
    out = []
    if node.message.text:
        out.append(_reply("LLM", "engine", _text(node.message.text)))
    for call_id in rec.tool_calls:
        out.append(_reply("LLM", "engine", f"tool call {_text(book.describe(call_id))}"))
    return out or [_reply("LLM", "engine", "(an empty answer)")]


def _needs_approval(rec: AuditRecord, book: _Book, answer: str) -> list[SequenceRow]:
    out = []
    for c in book.batch_calls(rec):
        if c.decided_by == "policy":
            out.append(_note(f"policy: {c.id} {str(c.approval_status).lower()}"))
        else:
            out.append(_call_to("engine", "approver", f"approve {_text(_call(c))}?"))
    return out


def _tools_decided(rec: AuditRecord, book: _Book, answer: str) -> list[SequenceRow]:
    decided = [
        f"{c.id} {str(c.approval_status).lower()}"
        if c.decided_by == "policy"
        else f"{c.id} (decided again later)"
        for c in book.batch_calls(rec)
    ]
    return [_note(f"policy: {_text(', '.join(decided) or 'decided')}")]


def _approvals_resolved(rec: AuditRecord, book: _Book, answer: str) -> list[SequenceRow]:
    out = []
    for c in book.batch_calls(rec):
        if c.decided_by != "human":
            continue
        if c.approval_status is ApprovalStatus.APPROVED:
            out.append(_call_to("approver", "engine", f"approve {c.id}"))
        else:
            reason = f": {c.reason}" if c.reason else ""
            out.append(_call_to("approver", "engine", f"deny {_text(c.id + reason)}"))
    return out or [_call_to("approver", "engine", "decisions")]


def _outcome_unknown(rec: AuditRecord, book: _Book, answer: str) -> list[SequenceRow]:
    return [
        _call_to("engine", "approver", f"outcome unknown, run again? {_text(_call(c))}")
        for c in book.batch_calls(rec)
        if c.outcome_unknown
    ] or [_call_to("engine", "approver", "outcome unknown")]


def _tools_done(rec: AuditRecord, book: _Book, answer: str) -> list[SequenceRow]:
    return _tool_runs(rec, book)


def _subtask_waits(rec: AuditRecord, book: _Book, answer: str) -> list[SequenceRow]:
    waits = _call_to("engine", "approver", "a sub-task waits for a decision")
    return [*_tool_runs(rec, book), waits]


def _client_calls(rec: AuditRecord, book: _Book, answer: str) -> list[SequenceRow]:
    handed = [c.id for c in book.batch_calls(rec) if c.reason == CLIENT_CALL]
    return [
        *_tool_runs(rec, book),
        _reply("engine", "user", _text(f"{', '.join(handed)} handed to the client")),
    ]


def _turn_complete(rec: AuditRecord, book: _Book, answer: str) -> list[SequenceRow]:
    out = _closed(book, rec, "not executed")
    if rec.tool_results:  # the iteration limit: the last answer asked for tools
        answer = "stopped: the limit of LLM calls was reached"
    out.append(_reply("engine", "user", _text(answer) if answer else "turn complete"))
    return out


def _retry(rec: AuditRecord, book: _Book, answer: str) -> list[SequenceRow]:
    if rec.from_state == State.PERMANENT_FAILURE:
        return [_call_to("user", "engine", "retry")]
    return [_note("backoff elapsed")]


def _cancel(rec: AuditRecord, book: _Book, answer: str) -> list[SequenceRow]:
    return [
        _call_to("user", "engine", "cancel"),
        *_closed(book, rec, "cancelled"),
        _reply("engine", "user", "cancelled"),
    ]


def _rows(*make: Callable[[], SequenceRow]) -> _Arrows:
    """A transition drawn the same way every time (the rows made anew each time)."""

    def draw(rec: AuditRecord, book: _Book, answer: str) -> list[SequenceRow]:
        return [m() for m in make]

    return draw


_DRAWN: dict[str, _Arrows] = {
    T.USER_MESSAGE: _user_message,
    T.PREPARE_FAILED: _rows(lambda: _reply("engine", "user", "failed: an enhancer raised")),
    T.STREAM_STARTED: _rows(lambda: _reply("LLM", "engine", "first chunk (streaming)")),
    T.RESPONSE_RECEIVED: _response,
    T.STREAM_ENDED: _response,
    T.NEEDS_APPROVAL: _needs_approval,
    T.TOOLS_DECIDED: _tools_decided,
    T.APPROVALS_RESOLVED: _approvals_resolved,
    T.OUTCOME_UNKNOWN: _outcome_unknown,
    T.TOOLS_DONE: _tools_done,
    T.SUBTASK_WAITS: _subtask_waits,
    T.CLIENT_CALLS: _client_calls,
    T.TURN_COMPLETE: _turn_complete,
    T.OUTPUT_INVALID: _rows(
        lambda: _call_to(
            "engine", "LLM", "the answer does not match the output type: errors sent back"
        )
    ),
    T.OUTPUT_FAILED: _rows(
        lambda: _reply("engine", "user", "failed: the answer does not match the output type")
    ),
    T.LLM_FAILED_TRANSIENT: _rows(lambda: _failed("LLM", "engine", "transient error")),
    T.LLM_FAILED_PERMANENT: _rows(
        lambda: _failed("LLM", "engine", "permanent error"),
        lambda: _reply("engine", "user", "failed"),
    ),
    T.RETRY: _retry,
    T.GIVE_UP: _rows(lambda: _reply("engine", "user", "failed: attempts exhausted")),
    T.RESET: _rows(lambda: _call_to("user", "engine", "reset")),
    T.CANCEL: _cancel,
}
"""How each trigger is drawn; a trigger not here draws nothing."""


def _tool_runs(rec: AuditRecord, book: _Book) -> list[SequenceRow]:
    out = []
    for call_id in rec.tool_results:
        call = book.calls.get(call_id)
        node = book.results.get(call_id)
        tr = node.message.tool_result if node is not None else None
        if call is not None and call.approval_status is ApprovalStatus.DENIED:
            reason = f" ({call.reason})" if call.reason else ""
            out.append(_note(f"{_text(call_id + ' denied' + reason)}, not run"))
            continue
        out.append(_call_to("engine", "tools", _text(book.describe(call_id))))
        if tr is None:
            out.append(_reply("tools", "engine", "(no result)"))
        elif tr.success:
            out.append(_reply("tools", "engine", f"ok: {_text(_json(tr.result))}"))
        else:
            out.append(_failed("tools", "engine", f"failed: {_text(_json(tr.result))}"))
    return out
