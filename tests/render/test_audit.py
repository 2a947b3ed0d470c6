"""Audit logs: exported from real engine runs they verify; tampered with, they do not.

Good logs come from the golden replay scripts, replayed through the real
engine into SQLite, memory and file stores, plus two runs the scripts cannot
express: a crash in ExecutingTools resumed through ``outcome_unknown``, and a
context whose history was imported before its first step.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnfsm import Engine, tool
from turnfsm.audit import (
    Actor,
    audit_jsonl,
    audit_records,
    records_from_audit_lines,
    verify_audit_log,
)
from turnfsm.model import (
    Branch,
    ChatContext,
    InternalMessage,
    MessageMetadata,
    MessageNode,
    Role,
    TextPart,
)
from turnfsm.render import path_from_steps
from turnfsm.states import CHANGES, State
from turnfsm.storage import open_store
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

from ._runs import GOLDEN, Run, replay_into

# ---------------------------------------------------------------------- good logs


def _lines(text: str) -> list[str]:
    return text.split("\n")[:-1]


@pytest.mark.parametrize("script", [p.name for p in GOLDEN])
def test_every_golden_run_exports_a_log_that_verifies(
    golden_runs: dict[str, Run], script: str
) -> None:
    run = golden_runs[script]
    log = run.log
    assert log.endswith("\n") and "\n\n" not in log
    result = verify_audit_log(_lines(log))
    assert result.ok, f"line {result.line}: {result.reason}\n{log}"
    assert result.steps == len(run.steps) > 0
    assert result.final_state == run.ctx.current_state
    recs = [json.loads(line) for line in _lines(log)]
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))
    assert [r["to"] for r in recs if r["trigger"] not in CHANGES] == run.result.trace[1:]
    for r in recs:  # a change record moves nothing
        assert r["trigger"] not in CHANGES or (r["from"] == r["to"] and "detail" in r)
    assert {r["context_id"] for r in recs} == {run.context_id}
    assert list(recs[0]) == [
        "seq",
        "context_id",
        "version",
        "timestamp",
        "from",
        "trigger",
        "to",
        "actor",
        "attempt",
        "message_ids",
        "tool_calls",
        "tool_results",
    ]


@pytest.mark.parametrize("script", [p.name for p in GOLDEN])
def test_every_message_and_tool_call_is_accounted_for(
    golden_runs: dict[str, Run], script: str
) -> None:
    run = golden_runs[script]
    records = run.records
    pool = run.ctx.message_pool
    touched = [m for r in records for m in r.message_ids]
    assert set(touched) == set(pool), "every message is touched by some step"
    calls = [c.id for n in pool.values() for c in n.message.tool_calls or ()]
    results = [n.message.tool_result.request_id for n in pool.values() if n.message.tool_result]
    assert sorted(c for r in records for c in r.tool_calls) == sorted(calls)
    assert sorted(c for r in records for c in r.tool_results) == sorted(results)
    for r in records:
        kinds = {pool[m].message.role for m in r.message_ids}
        if r.trigger in ("response_received", "stream_ended"):
            summaries = [m for m in r.message_ids if "summary" in pool[m].message.metadata.extra]
            [answer] = [pool[m] for m in r.message_ids if m not in summaries]
            assert answer.message.role is Role.ASSISTANT
            assert answer.message.metadata.attempt == r.attempt  # the derived attempt holds
            assert r.actor == Actor.LLM
        if r.trigger == "tools_done":
            assert kinds <= {Role.TOOL} and r.actor == Actor.TOOL
        if r.trigger == "user_message":
            assert pool[r.message_ids[-1]].message.role in (Role.USER, Role.FRONTEND_OPERATOR)
            assert r.actor == Actor.USER


def test_actors_of_a_conversation_with_approval(golden_runs: dict[str, Run]) -> None:
    records = golden_runs["weather_with_approval.json"].records
    assert [(r.trigger, r.actor) for r in records] == [
        ("user_message", "user"),
        ("prompt_ready", "system"),
        ("response_received", "llm"),
        ("needs_approval", "system"),
        ("approvals_resolved", "approver"),
        ("tools_done", "tool"),
        ("stream_started", "llm"),
        ("stream_ended", "llm"),
        ("turn_complete", "system"),
    ]
    assert records[2].tool_calls == ("call_1",) and records[5].tool_results == ("call_1",)


def test_attempts_count_retries(golden_runs: dict[str, Run]) -> None:
    records = golden_runs["retries_exhausted.json"].records
    assert [(r.trigger, r.attempt) for r in records] == [
        ("user_message", 1),
        ("prompt_ready", 1),
        ("llm_failed_transient", 1),
        ("retry", 2),
        ("llm_failed_transient", 2),
        ("retry", 3),
        ("llm_failed_transient", 3),
        ("give_up", 3),
    ]
    manual = golden_runs["manual_retry.json"].records
    retry = next(r for r in manual if r.trigger == "retry")
    assert retry.from_state == State.PERMANENT_FAILURE and retry.actor == Actor.USER
    assert retry.attempt == 1


def test_supersede_and_cancel_close_open_calls(golden_runs: dict[str, Run]) -> None:
    sup = golden_runs["supersede.json"].records
    second = [r for r in sup if r.trigger == "user_message"][1]
    assert second.from_state == State.AWAITING_TOOL_APPROVAL
    assert second.tool_results == ("call_1",)
    can = golden_runs["cancel_at_approval.json"].records
    cancel = next(r for r in can if r.trigger == "cancel")
    assert cancel.tool_results and cancel.actor == Actor.USER and cancel.attempt == 0
    mid = golden_runs["cancel_mid_stream.json"]
    cancel = next(r for r in mid.records if r.trigger == "cancel")
    [partial] = cancel.message_ids
    assert mid.ctx.message_pool[partial].message.metadata.cancelled


def test_frontend_operator_counts_as_user(golden_runs: dict[str, Run]) -> None:
    run = golden_runs["frontend_operator.json"]
    first = run.records[0]
    assert run.ctx.message_pool[first.message_ids[0]].message.role is Role.FRONTEND_OPERATOR
    assert first.actor == Actor.USER


def test_the_log_reads_back(golden_runs: dict[str, Run]) -> None:
    run = golden_runs["parallel_mixed_approval.json"]
    assert records_from_audit_lines(_lines(run.log)) == run.records


@pytest.mark.parametrize("kind", ["memory", "files"])
@pytest.mark.parametrize(
    "script",
    [
        "branch_and_switch.json",
        "parallel_mixed_approval.json",
        "supersede.json",
        "max_iterations.json",
    ],
)
def test_logs_from_other_stores_are_the_same(
    golden_runs: dict[str, Run], tmp_path: Path, kind: str, script: str
) -> None:
    url = "memory://" if kind == "memory" else f"files:///{tmp_path}/store"
    run = replay_into(next(p for p in GOLDEN if p.name == script), url)
    assert run.log == golden_runs[script].log
    assert verify_audit_log(_lines(run.log)).ok


class Crash(BaseException):
    """Stands in for the process dying while a tool runs."""


async def _crash_and_resume(url: str) -> tuple[ChatContext, list[Any]]:
    runs = {"n": 0}

    @tool
    def charge(amount: int) -> dict[str, int]:
        """Charge the card (not idempotent)."""
        runs["n"] += 1
        if runs["n"] == 1:
            raise Crash
        return {"charged": amount}

    answer = {"tool_calls": [{"id": "c1", "name": "charge", "arguments": {"amount": 5}}]}
    first = Engine(
        llm=ScriptedLLM([answer]),
        tools=[charge],
        store=open_store(url),
        clock=FakeClock(),
        ids=SequentialIds(),
    )
    cid = await first.create_context()
    with pytest.raises(Crash):
        await first.send(cid, "Charge me 5")
    await first.aclose()
    second = Engine(
        llm=ScriptedLLM([{"text": "Charged."}]),
        tools=[charge],
        store=open_store(url),
        clock=FakeClock(),
        ids=SequentialIds("b-"),
    )
    assert (await second.resume(cid)).state is State.AWAITING_TOOL_APPROVAL
    assert (await second.approve(cid, "c1")).state is State.IDLE
    ctx, steps = await second.get_context(cid), await second.steps(cid)
    await second.aclose()
    return ctx, steps


def test_a_crash_resumed_through_outcome_unknown_verifies(tmp_path: Path) -> None:
    ctx, steps = anyio.run(_crash_and_resume, f"sqlite:///{tmp_path}/crash.db")
    records = audit_records(ctx.id, path_from_steps(steps).steps, ctx.message_pool.values())
    assert [r.trigger for r in records][3:7] == [
        "tools_decided",
        "outcome_unknown",
        "approvals_resolved",
        "tools_done",
    ]
    unknown = records[4]
    assert unknown.actor == Actor.SYSTEM and unknown.message_ids == records[2].message_ids
    assert records[6].tool_results == ("c1",)
    result = verify_audit_log(_lines(audit_jsonl(records)))
    assert result.ok, result.reason


async def _imported_then_continued(url: str) -> tuple[ChatContext, list[Any]]:
    old = datetime(2024, 5, 1, tzinfo=UTC)

    def node(mid: str, role: Role, text: str, parent: str | None) -> MessageNode:
        return MessageNode(
            id=mid,
            parent_id=parent,
            message=InternalMessage(
                role=role, content=[TextPart(text=text)], metadata=MessageMetadata(created_at=old)
            ),
        )

    pool = {
        "old-1": node("old-1", Role.USER, "Hi, from the old system", None),
        "old-2": node("old-2", Role.ASSISTANT, "Hello from the old system", "old-1"),
    }
    ctx = ChatContext(
        id="imported",
        created_at=old,
        updated_at=old,
        message_pool=pool,
        branches={"main": Branch(name="main", message_ids=["old-1", "old-2"])},
    )
    store = open_store(url)
    await store.create(ctx)
    engine = Engine(
        llm=ScriptedLLM([{"text": "Welcome back."}]),
        store=store,
        clock=FakeClock(),
        ids=SequentialIds(),
    )
    await engine.send("imported", "I am back")
    got, steps = await engine.get_context("imported"), await engine.steps("imported")
    await engine.aclose()
    return got, steps


def test_an_imported_history_is_not_attributed_to_the_first_steps(tmp_path: Path) -> None:
    ctx, steps = anyio.run(_imported_then_continued, f"sqlite:///{tmp_path}/imp.db")
    records = audit_records(ctx.id, path_from_steps(steps).steps, ctx.message_pool.values())
    touched = [m for r in records for m in r.message_ids]
    assert "old-1" not in touched and "old-2" not in touched
    assert ctx.message_pool[records[0].message_ids[0]].message.text == "I am back"
    assert verify_audit_log(_lines(audit_jsonl(records))).ok


def test_an_empty_log_holds() -> None:
    result = verify_audit_log([])
    assert result.ok and result.steps == 0 and result.final_state == "Idle"


def test_a_log_may_end_waiting_for_approval(golden_runs: dict[str, Run]) -> None:
    lines = _lines(golden_runs["weather_with_approval.json"].log)[:4]
    result = verify_audit_log(lines)
    assert result.ok and result.final_state == "AwaitingToolApproval"
    assert result.open_calls == ("call_1",)


# ---------------------------------------------------------------------- tampered logs

# weather_with_approval.json, line by line:
#  1 Idle -user_message-> ProcessingUserMessage
#  2 ProcessingUserMessage -prompt_ready-> AwaitingLLMResponse
#  3 AwaitingLLMResponse -response_received-> ProcessingLLMResponse   tool_calls [call_1]
#  4 ProcessingLLMResponse -needs_approval-> AwaitingToolApproval
#  5 AwaitingToolApproval -approvals_resolved-> ExecutingTools        actor approver
#  6 ExecutingTools -tools_done-> AwaitingLLMResponse                  tool_results [call_1]
#  7 AwaitingLLMResponse -stream_started-> StreamingLLMResponse
#  8 StreamingLLMResponse -stream_ended-> ProcessingLLMResponse
#  9 ProcessingLLMResponse -turn_complete-> Idle

Recs = list[dict[str, Any]]


def renumber(recs: Recs) -> Recs:
    for i, r in enumerate(recs, 1):
        r["seq"] = i
    return recs


def insert(at: int, rec: dict[str, Any], *, fix_seq: bool) -> Callable[[Recs], Recs]:
    def go(recs: Recs) -> Recs:
        recs.insert(at, rec | {"seq": at + 1})
        return renumber(recs) if fix_seq else recs

    return go


def step(src: str, trig: str, dst: str, actor: str, attempt: int = 1) -> dict[str, Any]:
    return {
        "seq": 0,
        "context_id": "id-2",
        "version": 4,
        "timestamp": "2026-01-01T00:00:00+00:00",
        "from": src,
        "trigger": trig,
        "to": dst,
        "actor": actor,
        "attempt": attempt,
        "message_ids": [],
        "tool_calls": [],
        "tool_results": [],
    }


def duplicate(line: int) -> Callable[[Recs], Recs]:
    def go(recs: Recs) -> Recs:
        recs.insert(line, dict(recs[line - 1]))
        return recs

    return go


def remove(line: int, *, fix_seq: bool) -> Callable[[Recs], Recs]:
    def go(recs: Recs) -> Recs:
        del recs[line - 1]
        return renumber(recs) if fix_seq else recs

    return go


def swap(line: int, *, fix_seq: bool) -> Callable[[Recs], Recs]:
    def go(recs: Recs) -> Recs:
        recs[line - 1], recs[line] = recs[line], recs[line - 1]
        return renumber(recs) if fix_seq else recs

    return go


def edit(line: int, **changes: Any) -> Callable[[Recs], Recs]:
    def go(recs: Recs) -> Recs:
        for key, value in changes.items():
            key = {"from_": "from"}.get(key, key)
            if value is ...:
                del recs[line - 1][key]
            else:
                recs[line - 1][key] = value
        return recs

    return go


def chain(*fs: Callable[[Recs], Recs]) -> Callable[[Recs], Recs]:
    def go(recs: Recs) -> Recs:
        for f in fs:
            recs = f(recs)
        return recs

    return go


TAMPERING: dict[str, tuple[Callable[[Recs], Recs], int, str]] = {
    # an inserted edge
    "inserted copy of a line": (duplicate(4), 5, "seq 4 where 5 was expected"),
    "inserted edge, seqs renumbered, breaks continuity": (
        insert(
            2,
            step("ProcessingUserMessage", "prompt_ready", "AwaitingLLMResponse", "system"),
            fix_seq=True,
        ),
        3,
        "starts in ProcessingUserMessage, but line 2 ended in AwaitingLLMResponse",
    ),
    "inserted cancel leaves a tool call open": (
        insert(4, step("AwaitingToolApproval", "cancel", "Idle", "user", 0), fix_seq=True),
        5,
        "enters Idle while tool call 'call_1' (requested on line 3) has no result",
    ),
    "inserted failure and retry, attempt not counted": (
        chain(
            insert(
                2,
                step("AwaitingLLMResponse", "llm_failed_transient", "TransientFailure", "llm"),
                fix_seq=True,
            ),
            insert(
                3, step("TransientFailure", "retry", "AwaitingLLMResponse", "system"), fix_seq=True
            ),
        ),
        4,
        "attempt 1, but the steps so far imply 2",
    ),
    # a removed line
    "removed line": (remove(5, fix_seq=False), 5, "seq 6 where 5 was expected"),
    "removed line, seqs renumbered": (
        remove(5, fix_seq=True),
        5,
        "starts in ExecutingTools, but line 4 ended in AwaitingToolApproval",
    ),
    "removed first line, seqs renumbered": (
        remove(1, fix_seq=True),
        1,
        "the first step starts in ProcessingUserMessage, not in Idle",
    ),
    # a reordered pair
    "reordered pair": (swap(7, fix_seq=False), 7, "seq 8 where 7"),
    "reordered pair, seqs renumbered": (
        swap(7, fix_seq=True),
        7,
        "starts in StreamingLLMResponse, but line 6 ended in AwaitingLLMResponse",
    ),
    # an undeclared edge
    "undeclared destination": (
        edit(9, to="AwaitingToolApproval"),
        9,
        "ProcessingLLMResponse --turn_complete--> AwaitingToolApproval is not a declared edge",
    ),
    "undeclared edge, continuity kept": (
        chain(edit(4, to="ExecutingTools"), remove(5, fix_seq=True)),
        4,
        "ProcessingLLMResponse --needs_approval--> ExecutingTools is not a declared edge",
    ),
    "undeclared trigger": (
        chain(edit(3, trigger="skip_llm")),
        3,
        "'skip_llm' is not a declared trigger",
    ),
    "undeclared state": (
        chain(edit(9, to="Done")),
        9,
        "is not a declared edge",
    ),
    # a changed seq
    "changed seq": (edit(3, seq=7), 3, "seq 7 where 3"),
    "seq as a string": (edit(3, seq="3"), 3, "field 'seq' has the wrong type"),
    # the other fields
    "changed actor": (
        edit(5, actor="system"),
        5,
        "actor 'system', but approvals_resolved is taken by approver",
    ),
    "changed attempt": (edit(7, attempt=2), 7, "attempt 2, but the steps so far imply 1"),
    "tool result removed": (
        edit(6, tool_results=[]),
        6,
        "enters AwaitingLLMResponse while tool call 'call_1' (requested on line 3) has no result",
    ),
    "result for a call never requested": (
        edit(6, tool_results=["call_1", "call_9"]),
        6,
        "a result for tool call 'call_9', which no line requested",
    ),
    "second result": (edit(9, tool_results=["call_1"]), 9, "a second result for tool call"),
    "tool call requested twice": (
        edit(8, tool_calls=["call_1"]),
        8,
        "tool call 'call_1' was already requested on line 3",
    ),
    "tool call on a step that is not an answer": (
        edit(2, tool_calls=["call_0"]),
        2,
        "only an LLM answer asks for tools",
    ),
    "other context": (edit(4, context_id="id-99"), 4, "context_id 'id-99' differs"),
    "time goes back": (
        edit(4, timestamp="2025-12-31T23:59:59+00:00"),
        4,
        "is earlier than the line before",
    ),
    "bad timestamp": (edit(4, timestamp="yesterday"), 4, "is not ISO 8601"),
    "version goes back": (edit(4, version=1), 4, "version 1 is lower than 2"),
    "missing field": (edit(2, actor=...), 2, "missing field 'actor'"),
}


def _tampered(log: str, f: Callable[[Recs], Recs]) -> list[str]:
    recs = [json.loads(line) for line in _lines(log)]
    return [json.dumps(r) for r in f(recs)]


@pytest.mark.parametrize("case", list(TAMPERING))
def test_verify_catches_tampering(golden_runs: dict[str, Run], case: str) -> None:
    f, line, reason = TAMPERING[case]
    log = golden_runs["weather_with_approval.json"].log
    assert verify_audit_log(_lines(log)).ok
    result = verify_audit_log(_tampered(log, f))
    assert not result.ok, case
    assert (result.line, reason in (result.reason or "")) == (line, True), result.reason


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("not json at all", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ("", "empty line"),
    ],
)
def test_verify_reports_malformed_lines(
    golden_runs: dict[str, Run], text: str, reason: str
) -> None:
    lines = _lines(golden_runs["text_answer.json"].log)
    lines.insert(2, text)
    result = verify_audit_log(lines)
    assert result.line == 3 and reason in (result.reason or "")


@pytest.mark.parametrize("script", [p.name for p in GOLDEN])
def test_removing_or_swapping_any_line_is_caught(golden_runs: dict[str, Run], script: str) -> None:
    lines = _lines(golden_runs[script].log)
    for i in range(len(lines) - 1):  # the last line's removal is a shorter log
        dropped = lines[:i] + lines[i + 1 :]
        assert not verify_audit_log(dropped).ok, f"removing line {i + 1}"
        swapped = [*lines[:i], lines[i + 1], lines[i], *lines[i + 2 :]]
        assert not verify_audit_log(swapped).ok, f"swapping lines {i + 1} and {i + 2}"
        if json.loads(lines[i])["trigger"] in CHANGES:
            # a change moves nothing: a log without it, renumbered, is a consistent
            # log of a context that was not changed there (the log is not signed)
            continue
        renumbered = [
            json.dumps(json.loads(line) | {"seq": n}) for n, line in enumerate(dropped, 1)
        ]
        assert not verify_audit_log(renumbered).ok, f"removing line {i + 1} and renumbering"
