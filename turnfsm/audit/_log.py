"""Audit logs: a context's committed transitions as JSON Lines, and their check.

One record per committed step, in order (:func:`audit_records`,
:func:`audit_jsonl`)::

    {"seq": 1, "context_id": "id-2", "version": 1,
     "timestamp": "2026-01-01T00:00:00+00:00",
     "from": "Idle", "trigger": "user_message", "to": "ProcessingUserMessage",
     "actor": "user", "attempt": 1,
     "message_ids": ["id-3"], "tool_calls": [], "tool_results": []}

``seq`` counts the steps from 1; ``version`` is the store commit that holds
the step (one commit can hold several steps); ``timestamp`` is that commit's
time.

**actor** is who caused the step. It follows from the trigger alone (and, for
``retry``, its source state), as :data:`ACTORS` says: ``user`` for what a
person sends (``user_message`` — a frontend operator's message too —,
``cancel``, ``reset``, and ``retry`` out of PermanentFailure), ``llm`` for what
the model's answer or failure causes (``stream_started``, ``response_received``,
``stream_ended``, ``llm_failed_transient``, ``llm_failed_permanent``), ``tool``
for ``tools_done``, ``approver`` (the human approver) for
``approvals_resolved``, and ``system`` for the engine's own decisions
(``prompt_ready``, ``prepare_failed``, ``needs_approval``, ``tools_decided``,
``turn_complete``, ``output_invalid``, ``output_failed``, ``outcome_unknown``,
``subtask_waits``, ``client_calls``, ``give_up``, and ``retry`` after the backoff).

**attempt** is the LLM attempt the context's progress counts after the step,
as the engine keeps it: 1 after ``user_message``, ``tools_done``,
``output_invalid`` and a user's ``retry``; one more after each ``retry`` out
of TransientFailure; 0 after ``reset`` and ``cancel``; unchanged otherwise.

**message_ids** are the messages the step added or changed, in order;
**tool_calls** the ids of the calls the step's LLM answer asked for;
**tool_results** the ids of the calls the step gave a result. Steps do not
name their messages in the store, so they are derived: the history is taken
in creation order (stable by ``created_at``; SQLite and memory stores keep
append order) and each trigger takes what the engine appends for it:

- ``user_message``: the results closing still-open calls (superseded), and the
  decision on their batch, then the context messages of a request body
  (``metadata.extra["request_context"]``), then the user's message;
- ``response_received`` / ``stream_ended``: a compaction summary made before
  the call (a ``system`` message with ``metadata.extra["summary"]``), then the
  assistant's answer (its calls are then open);
- ``llm_failed_transient`` / ``llm_failed_permanent``: a compaction summary made
  before the call that failed;
- ``needs_approval``, ``tools_decided``, ``approvals_resolved``,
  ``outcome_unknown``: the open batch's assistant message (decisions change it);
- ``tools_done``: one result per open call;
- ``output_invalid`` / ``output_failed``: the message listing what the answer
  got wrong against the turn's output type (a ``user`` message with
  ``metadata.extra["output_errors"]``);
- ``subtask_waits``: the open batch's assistant message (the waiting calls are
  pending again) and the results of the calls that finished, which follow it;
- ``client_calls``: likewise, the batch and the results of the engine's calls
  that ran before the client's were handed out (from ProcessingLLMResponse:
  the batch only); the client's results come with ``tools_done``;
- ``turn_complete``: with open calls (the iteration limit), the batch, one
  result per call, and the notice saying the turn stopped (an assistant
  message marked as a notice, ``metadata.extra["notice"]``; none when the
  engine stores none);
- ``cancel``: the cancelled partial answer, if any, and the results closing
  open calls;
- ``child_finished`` (a change record): the sub-context's summary, the one
  assistant message whose ``metadata.extra`` holds ``"sub_context"``.

Other change records add no message.

**outcome** (on a ``turn_complete`` record only) is how the turn ended, read
from the stored answer it ended on (``InternalMessage.outcome``):
``completed``, ``refusal``, ``length``, ``content_filter``, ``incomplete``, or
``max_iterations`` when the last allowed call still asked for tools. Logs
written before the field existed have none, and still verify.

Messages that precede the first step (an imported history) are skipped. The
file store lists messages branch by branch: with equal timestamps (a virtual
clock), a conversation that went back to an older branch and went on there can
be attributed out of order.

:func:`verify_audit_log` (:mod:`turnfsm.audit._verify`) checks a log
against the declared table (see there).
It cannot tell a truncated log (last lines cut) from a shorter conversation,
and a forger who rewrites every later line consistently is not detected:
the log is not signed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from ..errors import RenderError
from ..model import (
    CLIENT_CALL,
    SUBTASK_RESUMED,
    SUBTASK_WAITING,
    SUMMARY_KEY,
    MessageNode,
    Role,
)
from ..model._json import MAX_DOCUMENT_DEPTH, loads_json
from ..states import (
    CHANGES,
    Change,
    State,
    Trigger,
)

__all__ = [
    "ACTORS",
    "CHANGE_ACTOR",
    "TOOL_CYCLE",
    "Actor",
    "AuditRecord",
    "CommittedStep",
    "actor_of",
    "audit_jsonl",
    "audit_records",
    "creation_order",
    "records_from_audit_lines",
]

S = State
T = Trigger


class CommittedStep(Protocol):
    """One committed transition, as an audit record starts from it: a store's
    :class:`~turnfsm.storage.StepLog` or a :class:`~turnfsm.render.PathStep`.
    ``version`` is the store commit that holds it; ``at`` is that commit's time."""

    @property
    def from_state(self) -> str: ...
    @property
    def trigger(self) -> str: ...
    @property
    def to_state(self) -> str: ...
    @property
    def at(self) -> datetime | None: ...
    @property
    def version(self) -> int | None: ...


class Actor(StrEnum):
    USER = "user"
    LLM = "llm"
    TOOL = "tool"
    APPROVER = "approver"
    """The human who approves or denies tool calls."""
    SYSTEM = "system"
    """The engine itself: policy, enhancers, backoff, limits."""


ACTORS: Mapping[tuple[State | None, Trigger], Actor] = {
    (None, T.USER_MESSAGE): Actor.USER,
    (None, T.PROMPT_READY): Actor.SYSTEM,
    (None, T.PREPARE_FAILED): Actor.SYSTEM,
    (None, T.STREAM_STARTED): Actor.LLM,
    (None, T.RESPONSE_RECEIVED): Actor.LLM,
    (None, T.STREAM_ENDED): Actor.LLM,
    (None, T.NEEDS_APPROVAL): Actor.SYSTEM,
    (None, T.TOOLS_DECIDED): Actor.SYSTEM,
    (None, T.TURN_COMPLETE): Actor.SYSTEM,
    (None, T.OUTPUT_INVALID): Actor.SYSTEM,
    (None, T.OUTPUT_FAILED): Actor.SYSTEM,
    (None, T.APPROVALS_RESOLVED): Actor.APPROVER,
    (None, T.TOOLS_DONE): Actor.TOOL,
    (None, T.OUTCOME_UNKNOWN): Actor.SYSTEM,
    (None, T.SUBTASK_WAITS): Actor.SYSTEM,
    (None, T.CLIENT_CALLS): Actor.SYSTEM,
    (None, T.LLM_FAILED_TRANSIENT): Actor.LLM,
    (None, T.LLM_FAILED_PERMANENT): Actor.LLM,
    (S.TRANSIENT_FAILURE, T.RETRY): Actor.SYSTEM,
    (S.PERMANENT_FAILURE, T.RETRY): Actor.USER,
    (None, T.GIVE_UP): Actor.SYSTEM,
    (None, T.RESET): Actor.USER,
    (None, T.CANCEL): Actor.USER,
}
"""Who causes each step: by (source state, trigger), else by trigger (source None)."""

CHANGE_ACTOR = Actor.USER
"""Who makes a change record (a config update, a branch forked, switched or
given prompts): the person or program calling the engine."""

TOOL_CYCLE: frozenset[State] = frozenset(
    {S.PROCESSING_LLM_RESPONSE, S.AWAITING_TOOL_APPROVAL, S.EXECUTING_TOOLS}
)
"""The states in which a requested tool call may still lack its result."""

_ANSWER = frozenset({T.RESPONSE_RECEIVED, T.STREAM_ENDED})
_DECISION = frozenset({T.NEEDS_APPROVAL, T.TOOLS_DECIDED, T.APPROVALS_RESOLVED, T.OUTCOME_UNKNOWN})
_INPUT_ROLES = frozenset({Role.USER, Role.FRONTEND_OPERATOR})
_LLM_FAILED = frozenset({T.LLM_FAILED_TRANSIENT, T.LLM_FAILED_PERMANENT})
_OUTPUT = frozenset({T.OUTPUT_INVALID, T.OUTPUT_FAILED})


def actor_of(source: State, trigger: Trigger) -> Actor:
    """Who causes ``trigger`` taken from ``source`` (see :data:`ACTORS`)."""
    found = ACTORS.get((source, trigger)) or ACTORS.get((None, trigger))
    if found is None:  # pragma: no cover - a test keeps ACTORS complete
        raise KeyError(f"no actor declared for {trigger} from {source}")
    return found


def _next_attempt(attempt: int, source: State, trigger: Trigger) -> int:
    if trigger in (T.USER_MESSAGE, T.TOOLS_DONE, T.OUTPUT_INVALID):
        return 1
    if trigger is T.RETRY:
        return attempt + 1 if source is S.TRANSIENT_FAILURE else 1
    if trigger in (T.RESET, T.CANCEL):
        return 0
    return attempt


@dataclass(frozen=True, slots=True)
class AuditRecord:
    seq: int
    context_id: str
    version: int | None
    timestamp: datetime | None
    from_state: str
    trigger: str
    to_state: str
    actor: str
    attempt: int
    message_ids: tuple[str, ...] = ()
    tool_calls: tuple[str, ...] = ()
    tool_results: tuple[str, ...] = ()
    detail: dict[str, Any] | None = None
    """What a change record changed (None for transitions)."""
    outcome: str | None = None
    """How the turn ended, on a ``turn_complete`` record (see the module doc)."""

    def to_json(self) -> dict[str, Any]:
        out = {
            "seq": self.seq,
            "context_id": self.context_id,
            "version": self.version,
            "timestamp": self.timestamp.isoformat() if self.timestamp is not None else None,
            "from": self.from_state,
            "trigger": self.trigger,
            "to": self.to_state,
            "actor": self.actor,
            "attempt": self.attempt,
            "message_ids": list(self.message_ids),
            "tool_calls": list(self.tool_calls),
            "tool_results": list(self.tool_results),
        }
        if self.detail is not None:
            out["detail"] = self.detail
        if self.outcome is not None:
            out["outcome"] = self.outcome
        return out


def _aware(dt: datetime) -> datetime:
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def creation_order(messages: Iterable[MessageNode]) -> list[MessageNode]:
    """Messages in the order they were created: stable by ``created_at``."""
    return sorted(messages, key=lambda n: _aware(n.message.metadata.created_at))


@dataclass(slots=True)
class _Touch:
    message_ids: list[str] = field(default_factory=list)
    tool_calls: list[str] = field(default_factory=list)
    tool_results: list[str] = field(default_factory=list)
    outcome: str | None = None


class _Walk:
    """Gives each step the messages it appended or changed (see the module doc).

    ``strict``: a message expected at the head of the unconsumed history must be
    there, else the walk fails (``failed``) and another start is tried.
    """

    def __init__(self, ordered: Sequence[MessageNode], start: int, strict: bool) -> None:
        self.ordered = ordered
        self.pos = start
        self.strict = strict
        self.consumed: set[str] = {n.id for n in ordered[:start]}
        self.results: dict[str, MessageNode] = {}
        for n in ordered[start:]:
            tr = n.message.tool_result
            if n.message.role is Role.TOOL and tr is not None:
                self.results.setdefault(tr.request_id, n)
        self.batch: MessageNode | None = None
        self.open: list[str] = []
        self.failed = False
        self.answer: MessageNode | None = None

    def head(self) -> MessageNode | None:
        while self.pos < len(self.ordered) and self.ordered[self.pos].id in self.consumed:
            self.pos += 1
        return self.ordered[self.pos] if self.pos < len(self.ordered) else None

    def take_head(self, want: str) -> MessageNode | None:
        node = self.head()
        ok = node is not None and _matches(node, want)
        if not ok:
            if self.strict and want not in _OPTIONAL:
                self.failed = True
            return None
        assert node is not None
        self.consumed.add(node.id)
        return node

    def close_open(self, touch: _Touch) -> None:
        still = []
        for call in self.open:
            node = self.results.get(call)
            if node is None or node.id in self.consumed:
                if self.strict:
                    self.failed = True
                still.append(call)
                continue
            self.consumed.add(node.id)
            touch.message_ids.append(node.id)
            touch.tool_results.append(call)
        self.open = still
        if not still:
            self.batch = None

    def close_at_head(self, touch: _Touch) -> None:
        """``subtask_waits``, ``client_calls``: the results at the head of the
        history for the open calls that did not wait for a sub-task or the
        client (their reason says so)."""
        waited = set()
        if self.batch is not None:
            for c in self.batch.message.tool_calls or ():
                if c.reason and (
                    c.reason == CLIENT_CALL
                    or c.reason.startswith((SUBTASK_WAITING, SUBTASK_RESUMED))
                ):
                    waited.add(c.id)
        while (node := self.head()) is not None:
            tr = node.message.tool_result
            if node.message.role is not Role.TOOL or tr is None or tr.request_id not in self.open:
                break
            if tr.request_id in waited:
                break
            self.consumed.add(node.id)
            self.open.remove(tr.request_id)
            touch.message_ids.append(node.id)
            touch.tool_results.append(tr.request_id)

    def step(self, trigger: str) -> _Touch:
        touch = _Touch()
        take = _STEPS.get(trigger)
        if take is not None:
            take(self, touch)
        return touch

    def _take_into(self, touch: _Touch, want: str) -> MessageNode | None:
        """The head message if it is ``want``, named in ``touch``."""
        node = self.take_head(want)
        if node is not None:
            touch.message_ids.append(node.id)
        return node

    def _touch_batch(self, touch: _Touch) -> None:
        """The open batch's assistant message (a decision or a close changes it)."""
        if self.batch is not None:
            touch.message_ids.append(self.batch.id)

    def _close_batch(self, touch: _Touch) -> None:
        """The open batch and one result per call still open, if any is."""
        if self.open:
            self._touch_batch(touch)
            self.close_open(touch)

    def _user_message(self, touch: _Touch) -> None:
        self._close_batch(touch)
        # a request body's context messages come in the same step, before it
        self.take_while(touch, _request_context)
        self._take_into(touch, "input")

    def _llm_failed(self, touch: _Touch) -> None:
        self.take_while(touch, _summary)

    def _answer(self, touch: _Touch) -> None:
        self.take_while(touch, _summary)  # a compaction summary made before the call
        node = self._take_into(touch, "answer")
        self.answer = node
        if node is not None:
            calls = [c.id for c in node.message.tool_calls or ()]
            if calls:
                touch.tool_calls = calls
                self.batch, self.open = node, list(calls)

    def _tools_done(self, touch: _Touch) -> None:
        self.close_open(touch)

    def _output(self, touch: _Touch) -> None:
        self.take_while(touch, _output_errors)

    def _handed_out(self, touch: _Touch) -> None:
        self._touch_batch(touch)
        self.close_at_head(touch)

    def _child_finished(self, touch: _Touch) -> None:
        self._take_into(touch, "summary")

    def _turn_complete(self, touch: _Touch) -> None:
        found = self.answer.message.outcome if self.answer is not None else None
        touch.outcome = found or ("max_iterations" if self.open else "completed")
        if self.open:
            self._close_batch(touch)
            self._take_into(touch, "notice")

    def _cancel(self, touch: _Touch) -> None:
        self._take_into(touch, "cancelled")
        self._close_batch(touch)

    def take_while(self, touch: _Touch, kind: Callable[[MessageNode], bool]) -> None:
        node = self.head()
        while node is not None and kind(node):
            self.consumed.add(node.id)
            touch.message_ids.append(node.id)
            node = self.head()

    def done(self) -> bool:
        return not self.failed and self.head() is None


_STEPS: dict[str, Callable[[_Walk, _Touch], None]] = {
    T.USER_MESSAGE: _Walk._user_message,
    **dict.fromkeys(_LLM_FAILED, _Walk._llm_failed),
    **dict.fromkeys(_ANSWER, _Walk._answer),
    **dict.fromkeys(_DECISION, _Walk._touch_batch),
    T.TOOLS_DONE: _Walk._tools_done,
    **dict.fromkeys(_OUTPUT, _Walk._output),
    T.SUBTASK_WAITS: _Walk._handed_out,
    T.CLIENT_CALLS: _Walk._handed_out,
    Change.CHILD_FINISHED: _Walk._child_finished,
    T.TURN_COMPLETE: _Walk._turn_complete,
    T.CANCEL: _Walk._cancel,
}
"""What each trigger (or change) takes from the history; any other takes nothing."""


def _output_errors(node: MessageNode) -> bool:
    """The message listing why an answer does not match the turn's output type
    (stored in ``decide``, with ``output_invalid`` or ``output_failed``)."""
    return node.message.role is Role.USER and "output_errors" in node.message.metadata.extra


def _summary(node: MessageNode) -> bool:
    """A compaction summary (stored in ``call_llm``, before the LLM's answer)."""
    return node.message.role is Role.SYSTEM and "summary" in node.message.metadata.extra


def _request_context(node: MessageNode) -> bool:
    """A context message of a request body (stored with its current message)."""
    return node.message.metadata.extra.get("request_context") is True


_OPTIONAL = ("cancelled", "notice")
"""What a step may add or not: a cancelled partial answer, a notice."""


def _matches(node: MessageNode, want: str) -> bool:
    msg = node.message
    if want == "input":
        return msg.role in _INPUT_ROLES
    notice = msg.notice is not None
    if want == "notice":
        return msg.role is Role.ASSISTANT and notice
    summary = SUMMARY_KEY in msg.metadata.extra
    if want == "summary":
        return msg.role is Role.ASSISTANT and summary
    if want == "answer":
        return (
            msg.role is Role.ASSISTANT and not msg.metadata.cancelled and not summary and not notice
        )
    return msg.role is Role.ASSISTANT and msg.metadata.cancelled  # "cancelled"


def _attribute(steps: Sequence[CommittedStep], ordered: Sequence[MessageNode]) -> list[_Touch]:
    # The log's messages are the newest ones; a history imported before the
    # first step comes first. Take the first start at which every message
    # after it is accounted for; failing that (a history the walk cannot
    # explain, e.g. the active branch only), attribute what fits from 0.
    for start in range(len(ordered) + 1):
        walk = _Walk(ordered, start, strict=True)
        touches = []
        for s in steps:
            touches.append(walk.step(s.trigger))
            if walk.failed:
                break
        if walk.done():
            return touches
        if not steps:
            break
    walk = _Walk(ordered, 0, strict=False)
    return [walk.step(s.trigger) for s in steps]


def audit_records(
    context_id: str, steps: Sequence[CommittedStep], messages: Iterable[MessageNode]
) -> list[AuditRecord]:
    """The audit records of a context: its steps (in order) and its messages (any order).

    Pass every message of the pool (``ctx.message_pool.values()``), not one
    branch: a step may have added messages to a branch that is not active now.
    """
    touches = _attribute(steps, creation_order(messages))
    out: list[AuditRecord] = []
    attempt = 0
    for i, (step, touch) in enumerate(zip(steps, touches, strict=True), 1):
        if step.trigger in CHANGES:
            actor = str(CHANGE_ACTOR)
        else:
            try:
                source, trigger = State(step.from_state), Trigger(step.trigger)
            except ValueError:
                actor = "unknown"
            else:
                actor = str(actor_of(source, trigger))
                attempt = _next_attempt(attempt, source, trigger)
        out.append(
            AuditRecord(
                seq=i,
                context_id=context_id,
                version=step.version,
                timestamp=step.at,
                from_state=step.from_state,
                trigger=step.trigger,
                to_state=step.to_state,
                actor=actor,
                attempt=attempt,
                message_ids=tuple(touch.message_ids),
                tool_calls=tuple(touch.tool_calls),
                tool_results=tuple(touch.tool_results),
                detail=getattr(step, "detail", None),
                outcome=touch.outcome,
            )
        )
    return out


def records_from_audit_lines(lines: Iterable[str]) -> list[AuditRecord]:
    """Read an audit log back (blank lines skipped). Not a check: see :func:`verify_audit_log`."""
    out: list[AuditRecord] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = loads_json(line, MAX_DOCUMENT_DEPTH)
            stamp = r.get("timestamp")
            out.append(
                AuditRecord(
                    seq=int(r.get("seq", len(out) + 1)),
                    context_id=str(r.get("context_id", "")),
                    version=r.get("version"),
                    timestamp=datetime.fromisoformat(stamp) if stamp else None,
                    from_state=str(r["from"]),
                    trigger=str(r["trigger"]),
                    to_state=str(r["to"]),
                    actor=str(r.get("actor", "")),
                    attempt=int(r.get("attempt", 0)),
                    message_ids=tuple(str(m) for m in r.get("message_ids") or ()),
                    tool_calls=tuple(str(m) for m in r.get("tool_calls") or ()),
                    tool_results=tuple(str(m) for m in r.get("tool_results") or ()),
                    detail=r.get("detail") if isinstance(r.get("detail"), dict) else None,
                    outcome=r["outcome"] if isinstance(r.get("outcome"), str) else None,
                )
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RenderError(f"line {n} is not an audit record: {exc!r}") from None
    return out


def audit_jsonl(records: Iterable[AuditRecord]) -> str:
    """JSON Lines: one compact object per record, keys in a fixed order."""
    return "".join(
        json.dumps(r.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n" for r in records
    )
