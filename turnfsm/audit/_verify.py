"""The check of an audit log (``turnfsm audit verify``): every record against
the declared table, in order, with the fields :mod:`turnfsm.audit._log`
writes. It cannot tell a truncated log (last lines cut) from a shorter
conversation, and a forger who rewrites every later line consistently is not
detected: the log is not signed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..model._json import MAX_DOCUMENT_DEPTH, JSONTooDeep, loads_json
from ..states import CHANGES, INITIAL, RESTING, State, Trigger, allowed_triggers, next_state
from ._log import _ANSWER, CHANGE_ACTOR, TOOL_CYCLE, _aware, _next_attempt, actor_of

__all__ = ["VerifyResult", "verify_audit_log"]

S = State
T = Trigger


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """The outcome of :func:`verify_audit_log`: ``line`` and ``reason`` of the
    first offence (None when the log holds)."""

    steps: int
    line: int | None = None
    reason: str | None = None
    final_state: str = str(INITIAL)
    tool_calls: int = 0
    """How many tool calls the log requested."""
    open_calls: tuple[str, ...] = ()
    """Calls still without a result at the end (the log ends in the tool cycle)."""

    @property
    def ok(self) -> bool:
        return self.line is None


class _Offence(Exception):
    pass


_FIELDS: dict[str, tuple[type, ...]] = {
    "seq": (int,),
    "context_id": (str,),
    "timestamp": (str,),
    "from": (str,),
    "trigger": (str,),
    "to": (str,),
    "actor": (str,),
    "attempt": (int,),
    "message_ids": (list,),
    "tool_calls": (list,),
    "tool_results": (list,),
}


def _record(line: str) -> dict[str, Any]:
    try:
        rec = loads_json(line, MAX_DOCUMENT_DEPTH)
    except JSONTooDeep:
        raise  # not a record that breaks the rules: a file that cannot be read
    except ValueError as exc:
        raise _Offence(f"not valid JSON ({exc})") from None
    if not isinstance(rec, dict):
        raise _Offence("not a JSON object")
    for key, types in _FIELDS.items():
        if key not in rec:
            raise _Offence(f"missing field {key!r}")
        value = rec[key]
        if not isinstance(value, types) or isinstance(value, bool):
            raise _Offence(f"field {key!r} has the wrong type ({type(value).__name__})")
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            raise _Offence(f"field {key!r} must be a list of ids (strings)")
    version = rec.get("version")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise _Offence("field 'version' must be an integer or null")
    return rec


def verify_audit_log(lines: Sequence[str]) -> VerifyResult:
    """Check an audit log (its lines, without line ends) against the declared table.

    The first offending line (counted from 1) and why, checking in this order:

    - the line is a JSON object with every field, of the right type;
    - ``seq`` is gap-free: 1 on the first line, one more on each next one;
    - one ``context_id`` throughout;
    - continuity: each step starts where the last one ended, the first in Idle;
    - the edge (from, trigger, to) is declared in the table;
    - ``timestamp`` (ISO 8601) and ``version`` never go back;
    - ``actor`` and ``attempt`` are what the trigger implies (see the module doc);
    - tool calls: a call is requested once, only by an LLM answer; a result names
      a call that is open; and a context never leaves the tool cycle
      (ProcessingLLMResponse, AwaitingToolApproval, ExecutingTools) with a
      call that has no result.

    An empty log holds (a context that never moved).
    """
    prev_to = str(INITIAL)
    context_id: str | None = None
    last_time: datetime | None = None
    last_version: int | None = None
    attempt = 0
    requested: dict[str, int] = {}
    open_calls: dict[str, int] = {}
    n = 0
    for n, line in enumerate(lines, 1):
        try:
            if not line.strip():
                raise _Offence("empty line")
            rec = _record(line)
            if rec["seq"] != n:
                raise _Offence(
                    f"seq {rec['seq']} where {n} was expected (a line is missing, added, "
                    "moved or renumbered)"
                )
            if context_id is None:
                context_id = rec["context_id"]
            elif rec["context_id"] != context_id:
                raise _Offence(
                    f"context_id {rec['context_id']!r} differs from {context_id!r} of line 1"
                )
            src, trig, dst = rec["from"], rec["trigger"], rec["to"]
            if src != prev_to:
                if n == 1:
                    raise _Offence(f"the first step starts in {src}, not in {prev_to}")
                raise _Offence(f"starts in {src}, but line {n - 1} ended in {prev_to}")
            try:
                source = State(src)
            except ValueError:
                raise _Offence(f"{src!r} is not a declared state") from None
            if trig in CHANGES:
                _check_change(rec, source)
                last_time, last_version = _check_order(rec, last_time, last_version)
                if rec["attempt"] != attempt:
                    raise _Offence(f"attempt {rec['attempt']}, but a change keeps {attempt}")
                continue
            try:
                trigger = Trigger(trig)
            except ValueError:
                raise _Offence(f"{trig!r} is not a declared trigger") from None
            dest = next_state(source, trigger)
            if dest is None or str(dest) != dst:
                allowed = ", ".join(
                    f"{t} -> {next_state(source, t)}" for t in sorted(allowed_triggers(source))
                )
                raise _Offence(
                    f"{src} --{trig}--> {dst} is not a declared edge (from {src} the table "
                    f"allows: {allowed})"
                )
            last_time, last_version = _check_order(rec, last_time, last_version)
            want_actor = actor_of(source, trigger)
            if rec["actor"] != want_actor:
                raise _Offence(f"actor {rec['actor']!r}, but {trig} is taken by {want_actor}")
            attempt = _next_attempt(attempt, source, trigger)
            if rec["attempt"] != attempt:
                raise _Offence(f"attempt {rec['attempt']}, but the steps so far imply {attempt}")
            _check_calls(rec, n, trigger, dest, requested, open_calls)
            if "outcome" in rec and not (
                trigger is T.TURN_COMPLETE and isinstance(rec["outcome"], str)
            ):
                raise _Offence("field 'outcome' belongs on a turn_complete record, as a string")
        except _Offence as exc:
            return VerifyResult(
                steps=n - 1, line=n, reason=str(exc), final_state=prev_to, tool_calls=len(requested)
            )
        prev_to = dst
    return VerifyResult(
        steps=n, final_state=prev_to, tool_calls=len(requested), open_calls=tuple(open_calls)
    )


def _check_order(
    rec: Mapping[str, Any], last_time: datetime | None, last_version: int | None
) -> tuple[datetime, int | None]:
    """``timestamp`` and ``version`` never go back; returns the new last ones."""
    try:
        at = _aware(datetime.fromisoformat(rec["timestamp"]))
    except ValueError:
        raise _Offence(f"timestamp {rec['timestamp']!r} is not ISO 8601") from None
    if last_time is not None and at < last_time:
        raise _Offence(f"timestamp {rec['timestamp']} is earlier than the line before")
    version = rec.get("version")
    if version is not None and last_version is not None and version < last_version:
        raise _Offence(f"version {version} is lower than {last_version} before it")
    return at, version if version is not None else last_version


def _check_change(rec: Mapping[str, Any], source: State) -> None:
    """A change record: made at rest, by the caller, moving nothing."""
    trig = rec["trigger"]
    if rec["to"] != rec["from"]:
        raise _Offence(f"the change {trig} goes from {rec['from']} to {rec['to']}: it must stay")
    if source not in RESTING:
        raise _Offence(f"the change {trig} in {source}: changes are made only at rest")
    if rec["actor"] != CHANGE_ACTOR:
        raise _Offence(f"actor {rec['actor']!r}, but {trig} is made by {CHANGE_ACTOR}")
    if rec["tool_calls"] or rec["tool_results"]:
        raise _Offence(f"the change {trig} names tool calls or results")
    detail = rec.get("detail")
    if detail is not None and not isinstance(detail, dict):
        raise _Offence("field 'detail' must be an object")


def _check_calls(
    rec: Mapping[str, Any],
    n: int,
    trigger: Trigger,
    dest: State,
    requested: dict[str, int],
    open_calls: dict[str, int],
) -> None:
    calls: list[str] = rec["tool_calls"]
    if calls and trigger not in _ANSWER:
        raise _Offence(f"tool calls {calls} on a {trigger} step: only an LLM answer asks for tools")
    for call in calls:
        if call in requested:
            raise _Offence(f"tool call {call!r} was already requested on line {requested[call]}")
        requested[call] = n
        open_calls[call] = n
    for call in rec["tool_results"]:
        if call not in requested:
            raise _Offence(f"a result for tool call {call!r}, which no line requested")
        if call not in open_calls:
            raise _Offence(f"a second result for tool call {call!r}")
        del open_calls[call]
    if open_calls and dest not in TOOL_CYCLE:
        call, line = next(iter(open_calls.items()))
        raise _Offence(
            f"enters {dest} while tool call {call!r} (requested on line {line}) has no result"
        )
