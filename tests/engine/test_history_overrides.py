"""A context's own history settings (``update_config(tool_history=...,
token_budget=..., compaction=...)``): checked, committed as a config change,
applied on its next turn over the engine's, and kept by every store."""

from __future__ import annotations

from typing import Any

import pytest
from kit import make_engine

from turnfsm import InvalidInput, tool
from turnfsm.enhancers import Compaction, TokenBudget
from turnfsm.model import ChatConfig, LLMRequest
from turnfsm.states import Change

pytestmark = pytest.mark.anyio

SENT = "the quick brown fox jumps over the lazy dog while it rains over the old town"


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"the value of {key} is " + "long " * 40


def tool_then_text(request: LLMRequest) -> dict[str, Any]:
    """A call of ``lookup`` for each user message, then an answer."""
    if request.messages[-1]["role"] == "user":
        n = sum(1 for m in request.messages if m["role"] == "user")
        return {"tool_calls": [{"id": f"k{n}", "name": "lookup", "arguments": {"key": f"k{n}"}}]}
    return {"text": "found it"}


def results_in_full(request: LLMRequest) -> int:
    return sum(1 for m in request.messages if m["role"] == "tool" and "long" in m["content"])


async def test_the_overrides_are_checked_and_name_the_field() -> None:
    engine = make_engine([], token_budget=TokenBudget(1_000, reserve_output=200)).engine
    cid = await engine.create_context()
    before = await engine.get_context(cid)
    for kwargs, where, said in [
        ({"tool_history": -1}, "tool_history", "from 0"),
        ({"tool_history": True}, "tool_history", "not bool"),
        ({"tool_history": "all"}, "tool_history", '"off"'),
        ({"token_budget": 0}, "token_budget", "from 1"),
        ({"token_budget": 200}, "token_budget", "output reserve (200)"),
        ({"compaction": 1}, "compaction", "from 2"),
        ({"compaction": 10**9}, "compaction", "100,000,000"),
        ({"compaction": 2.5}, "compaction", "not float"),
    ]:
        with pytest.raises(InvalidInput) as info:
            await engine.update_config(cid, **kwargs)
        assert info.value.where == where, kwargs
        assert said in str(info.value), (kwargs, str(info.value))
    assert (await engine.get_context(cid)).version == before.version


async def test_an_override_is_a_config_change_in_the_audit_trail() -> None:
    engine = make_engine([]).engine
    cid = await engine.create_context()
    config = await engine.update_config(cid, tool_history=3, token_budget="off", compaction=900)
    assert (config.tool_history, config.token_budget, config.compaction) == (3, "off", 900)
    steps = await engine.steps(cid)
    assert steps[-1].trigger == Change.CONFIG_UPDATED
    assert steps[-1].detail == {"tool_history": 3, "token_budget": "off", "compaction": 900}
    # the same again changes nothing; None gives the engine's setting back
    await engine.update_config(cid, tool_history=3)
    assert len(await engine.steps(cid)) == len(steps)
    config = await engine.update_config(cid, token_budget=None)
    assert config.token_budget is None
    assert (await engine.steps(cid))[-1].detail == {"token_budget": None}


async def test_a_context_without_overrides_serialises_as_before() -> None:
    from pydantic import TypeAdapter

    dumped = TypeAdapter(ChatConfig).dump_json(ChatConfig()).decode()
    assert "tool_history" not in dumped and "compaction" not in dumped
    assert "token_budget" not in dumped


async def test_tool_history_of_the_context_replaces_the_engines() -> None:
    made = make_engine(tool_then_text, tools=[lookup])  # the engine shows every call in full
    engine, llm = made.engine, made.llm
    async with engine:
        plain = await engine.create_context()
        own = await engine.create_context()
        await engine.update_config(own, tool_history=0)
        for cid in (plain, own):
            for i in range(3):
                await engine.send(cid, f"question {i}")
    by_context: dict[str, list[LLMRequest]] = {}
    for r in llm.requests:
        by_context.setdefault(r.context_id, []).append(r)
    # the last request of each: three tool results in the history
    assert results_in_full(by_context[plain][-1]) == 3
    assert results_in_full(by_context[own][-1]) == 0
    assert by_context[own][-1].metadata["tool_history"]["full"] == 0


async def test_off_turns_the_engines_setting_off_for_that_context_only() -> None:
    made = make_engine(tool_then_text, tools=[lookup], tool_history_rounds=0)
    engine, llm = made.engine, made.llm
    async with engine:
        plain = await engine.create_context()
        own = await engine.create_context()
        await engine.update_config(own, tool_history="off")
        for cid in (plain, own):
            for i in range(3):
                await engine.send(cid, f"question {i}")
        last = {r.context_id: r for r in llm.requests}
        assert results_in_full(last[plain]) == 0
        assert results_in_full(last[own]) == 3
        # back to the engine's
        await engine.update_config(own, tool_history=None)
        await engine.send(own, "again")
        assert results_in_full(llm.requests[-1]) == 0


async def test_token_budget_of_the_context_drops_turns_the_engine_would_keep() -> None:
    made = make_engine(lambda r: {"text": "answer: " + SENT})
    engine, llm = made.engine, made.llm
    async with engine:
        plain = await engine.create_context()
        own = await engine.create_context()
        await engine.update_config(own, token_budget=120)
        for cid in (plain, own):
            for i in range(10):
                await engine.send(cid, f"question {i}: {SENT}")
    last = {r.context_id: r for r in llm.requests}
    assert len(last[plain].messages) == 19
    assert "token_budget" not in last[plain].metadata
    assert last[own].metadata["token_budget"]["max_input_tokens"] == 120
    assert last[own].metadata["token_budget"]["dropped_messages"] > 0
    assert len(last[own].messages) < 19


async def test_a_context_budget_keeps_the_engines_counter_and_reserve() -> None:
    engine = make_engine([], token_budget=TokenBudget(5_000, reserve_output=100)).engine
    own = engine._d.settings.view(ChatConfig(token_budget=400)).plan.budget
    base = engine._d.settings.view_plan.budget
    assert own is not None and base is not None and own is not base
    assert (own.max_input_tokens, own.reserve_output) == (400, 100)
    assert own.counter is base.counter and own.calibrate == base.calibrate
    # made once per combination: the enhancers keep their caches
    assert engine._d.settings.view(ChatConfig(token_budget=400)).plan.budget is own
    off = engine._d.settings.view(ChatConfig(token_budget="off"))
    assert off.plan.budget is None and all(not isinstance(e, TokenBudget) for e in off.enhancers)


async def test_compaction_of_the_context_summarises_where_the_engine_would_not() -> None:
    summaries: list[str] = []

    def answer(request: LLMRequest) -> dict[str, Any]:
        if request.metadata.get("purpose") == "compaction":
            summaries.append(request.context_id)
            return {"text": "summary"}
        return {"text": "answer: " + SENT}

    engine = make_engine(answer, compaction=Compaction(100_000)).engine
    async with engine:
        plain = await engine.create_context()
        own = await engine.create_context()
        await engine.update_config(own, compaction=300)
        for cid in (plain, own):
            for i in range(12):
                await engine.send(cid, f"question {i}: {SENT}")
    assert summaries and set(summaries) == {own}


async def test_a_stored_setting_the_enhancers_refuse_fails_the_turn_in_prepare() -> None:
    """A config written into a store by hand (a budget of 0): the turn fails
    through prepare_failed, naming the history settings, and nothing crashes."""
    from turnfsm import State

    made = make_engine([{"text": "never"}])
    engine = made.engine
    async with engine:
        cid = await engine.create_context()
        ctx = await engine.store.load(cid)
        store_ctx = engine.store._records[cid].context  # type: ignore[attr-defined]
        store_ctx.config = ChatConfig(token_budget=0)
        assert ctx.config.token_budget is None
        turn = await engine.send(cid, "hi")
    assert turn.state is State.PERMANENT_FAILURE
    assert "history settings" in (turn.error or "")
    assert made.llm.requests == []


async def test_a_sub_context_takes_its_parents_settings() -> None:
    """A child runs on its parent's model and parameters, and so on its
    parent's history settings: spawned, it has them, and its turns use them."""
    made = make_engine(tool_then_text, tools=[lookup])
    engine, llm = made.engine, made.llm
    async with engine:
        parent = await engine.create_context()
        await engine.update_config(parent, tool_history=0, compaction="off")
        plain = await engine.create_context()
        child = await engine.spawn(parent, "question 0")
        await engine.send(child.context_id, "question 1")
        other = await engine.spawn(plain, "question 0")
        config = (await engine.get_context(child.context_id)).config
        assert (config.tool_history, config.token_budget, config.compaction) == (0, None, "off")
        bare = (await engine.get_context(other.context_id)).config
        assert (bare.tool_history, bare.token_budget, bare.compaction) == (None, None, None)
    last = [r for r in llm.requests if r.context_id == child.context_id][-1]
    assert results_in_full(last) == 0 and last.metadata["tool_history"]["full"] == 0
