"""Compaction: older history replaced in the view by a summary the LLM made,
stored once, reused and extended; its call shares the turn's failure edges."""

from __future__ import annotations

from typing import Any

import pytest
from kit import make_engine

from turnfsm import State
from turnfsm.enhancers import SUMMARY_PROMPT, Compaction, summary_of
from turnfsm.errors import InvalidInput
from turnfsm.model import LLMRequest, Role

pytestmark = pytest.mark.anyio

SENT = "the quick brown fox jumps over the lazy dog while it rains over the old town"


def is_summary_call(request: LLMRequest) -> bool:
    return request.metadata.get("purpose") == "compaction"


def test_arguments_are_checked() -> None:
    for kwargs, where in [
        ({"threshold_tokens": 0}, "threshold_tokens"),
        ({"threshold_tokens": 100, "keep_tokens": 100}, "keep_tokens"),
        ({"threshold_tokens": 100, "keep_tokens": -1}, "keep_tokens"),
        ({"threshold_tokens": 100, "prompt": " "}, "prompt"),
        ({"threshold_tokens": 100, "max_summary_input": 0}, "max_summary_input"),
    ]:
        with pytest.raises(InvalidInput) as info:
            Compaction(**kwargs)
        assert info.value.where == where
    assert Compaction(100).keep_tokens == 50


async def test_a_summary_is_made_once_per_crossing_stored_and_extended() -> None:
    made: list[LLMRequest] = []

    def answer(request: LLMRequest) -> dict[str, Any]:
        if is_summary_call(request):
            made.append(request)
            return {"text": f"summary {len(made)}"}
        return {"text": "answer: " + SENT}

    engine, llm, _ = make_engine(answer, compaction=Compaction(300, keep_tokens=100))
    async with engine:
        cid = await engine.create_context(system_prompt="Be brief.")
        for i in range(30):
            await engine.send(cid, f"question {i}: {SENT}")
        ctx = await engine.get_context(cid)

    history = ctx.history()
    summaries = [(i, n) for i, n in enumerate(history) if summary_of(n) is not None]
    assert len(made) == len(summaries) >= 3
    # far fewer calls than turns: one per crossing, never two in a row
    assert len(made) < 30 / 3
    main = [r for r in llm.requests if not is_summary_call(r)]
    assert len(main) == 30
    # stored history keeps every message: 30 turns of 2 messages, and the summaries
    assert len(history) == 60 + len(summaries)
    # each summary covers a prefix ending before it, and extends the one before
    previous = None
    for at, node in summaries:
        covers = summary_of(node)
        assert covers is not None
        assert covers["count"] <= at
        assert history[covers["count"] - 1].id == covers["last_id"]
        assert history[covers["count"]].message.role is Role.USER  # cut at a turn
        if previous is not None:
            assert covers["extends"] == previous.id
            assert covers["count"] > summary_of(previous)["count"]  # type: ignore[index]
        previous = node
    # the summary call: the documented prompt, then the previous summary and only
    # the messages it does not cover yet
    first, second = made[0], made[1]
    assert first.messages[0] == {"role": "system", "content": SUMMARY_PROMPT}
    assert first.messages[1]["content"].startswith("New messages:\nuser: question 0:")
    assert second.messages[1]["content"].startswith("Summary so far:\nsummary 1\n\nNew messages:")
    assert "question 0:" not in second.messages[1]["content"]
    assert first.tools == []
    # the view: system prompt, the newest summary, then what it does not cover
    last = main[-1]
    assert last.messages[0] == {"role": "system", "content": "Be brief."}
    assert last.messages[1]["role"] == "system"
    assert last.messages[1]["content"].startswith('<summary of="the first')
    assert f"summary {len(made)}" in last.messages[1]["content"]
    assert all(m["role"] != "system" for m in last.messages[2:])
    assert last.messages[-1]["content"] == f"question 29: {SENT}"
    assert last.metadata["compaction"]["summary_id"] == summaries[-1][1].id


async def test_a_transient_failure_of_the_summary_call_retries_through_the_table() -> None:
    calls: list[str] = []

    def answer(request: LLMRequest) -> dict[str, Any]:
        if is_summary_call(request):
            calls.append("summary")
            if calls.count("summary") == 1:
                return {"error": {"status": 503}}
            return {"text": "the summary"}
        calls.append("main")
        return {"text": SENT}

    engine, _, _ = make_engine(answer, compaction=Compaction(120, keep_tokens=40))
    async with engine:
        cid = await engine.create_context()
        turn = None
        for i in range(8):
            turn = await engine.send(cid, f"q{i} {SENT}")
            if "summary" in calls:
                break
        assert turn is not None and turn.state is State.IDLE
        trace = await engine.trace(cid)
        ctx = await engine.get_context(cid)
    assert calls[-3:] == ["summary", "summary", "main"]
    # the failed summary call took the call's own transient edge, then retry
    assert trace[-6:] == [
        State.PROCESSING_USER_MESSAGE,
        State.AWAITING_LLM_RESPONSE,
        State.TRANSIENT_FAILURE,
        State.AWAITING_LLM_RESPONSE,
        State.PROCESSING_LLM_RESPONSE,
        State.IDLE,
    ]
    assert sum(1 for n in ctx.history() if summary_of(n) is not None) == 1


async def test_a_permanent_failure_of_the_summary_call_fails_the_turn() -> None:
    def answer(request: LLMRequest) -> dict[str, Any]:
        if is_summary_call(request):
            return {"error": {"status": 400, "message": "too long"}}
        return {"text": SENT}

    engine, _, _ = make_engine(answer, compaction=Compaction(120, keep_tokens=40))
    async with engine:
        cid = await engine.create_context()
        states = []
        for i in range(8):
            turn = await engine.send(cid, f"q{i} {SENT}")
            states.append(turn.state)
            if turn.state is State.PERMANENT_FAILURE:
                break
        ctx = await engine.get_context(cid)
    assert states[-1] is State.PERMANENT_FAILURE
    assert "too long" in (turn.error or "")
    assert not any(summary_of(n) for n in ctx.history())
    # the answer was not asked for: the turn's user message is the last message
    assert ctx.history()[-1].message.role is Role.USER


async def test_the_same_conversation_gives_the_same_requests() -> None:
    async def run() -> list[tuple[Any, ...]]:
        n = 0

        def answer(request: LLMRequest) -> dict[str, Any]:
            nonlocal n
            n += 1
            if is_summary_call(request):
                return {"text": f"summary {n}"}
            return {"text": f"answer {n}: {SENT}"}

        engine, llm, _ = make_engine(answer, compaction=Compaction(200, keep_tokens=60))
        async with engine:
            cid = await engine.create_context(system_prompt="Be brief.")
            for i in range(12):
                await engine.send(cid, f"question {i}: {SENT}")
        return [(r.messages, r.tools, r.metadata) for r in llm.requests]

    first, second = await run(), await run()
    assert any(m.get("purpose") == "compaction" for _, _, m in first)
    assert first == second


async def test_the_audit_accounts_for_the_summaries() -> None:
    from turnfsm.audit import audit_jsonl, audit_records, verify_audit_log
    from turnfsm.render import path_from_steps

    def answer(request: LLMRequest) -> dict[str, Any]:
        if is_summary_call(request):
            return {"text": "a summary"}
        return {"text": SENT}

    engine, _, _ = make_engine(answer, compaction=Compaction(150, keep_tokens=50))
    async with engine:
        cid = await engine.create_context()
        for i in range(10):
            await engine.send(cid, f"q{i} {SENT}")
        ctx = await engine.get_context(cid)
        steps = await engine.steps(cid)
    assert any(summary_of(n) for n in ctx.history())
    records = audit_records(cid, path_from_steps(steps).steps, ctx.message_pool.values())
    assert {m for r in records for m in r.message_ids} == set(ctx.message_pool)
    assert verify_audit_log(audit_jsonl(records).splitlines()).ok


async def test_with_a_token_budget_the_summary_always_stays() -> None:
    from turnfsm.enhancers import TokenBudget

    def answer(request: LLMRequest) -> dict[str, Any]:
        if is_summary_call(request):
            return {"text": "summary: " + SENT}
        return {"text": SENT}

    engine, llm, _ = make_engine(
        answer,
        compaction=Compaction(2_000, keep_tokens=1_500),
        token_budget=TokenBudget(300),
    )
    async with engine:
        cid = await engine.create_context(system_prompt="Be brief.")
        for i in range(60):
            await engine.send(cid, f"question {i}: {SENT}")
    main = [r for r in llm.requests if not is_summary_call(r)]
    assert any("compaction" in r.metadata for r in main)
    for r in main:
        if "compaction" in r.metadata:
            assert r.messages[0] == {"role": "system", "content": "Be brief."}
            assert r.messages[1]["content"].startswith("<summary of=")
            assert r.metadata["token_budget"]["dropped_messages"] > 0
        assert r.metadata["token_budget"]["tokens"] <= 300
        assert r.messages[-1]["content"].startswith("question ")
