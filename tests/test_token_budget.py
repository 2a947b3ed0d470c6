"""TokenBudget: the oldest turns leave the view until the request fits."""

from __future__ import annotations

import copy
import math
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from kit import make_engine

from turnfsm.enhancers import (
    BudgetExceeded,
    EstimatingCounter,
    TokenBudget,
    ToolCallHistory,
    calibration,
)
from turnfsm.errors import InvalidInput
from turnfsm.model import (
    Branch,
    ChatContext,
    InternalMessage,
    LLMRequest,
    MessageMetadata,
    MessageNode,
    Role,
    TextPart,
    TokenUsage,
)
from turnfsm.tools import tool

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class WordCounter:
    """A counter that is exact for these tests: one token per word, 2 per message."""

    def count_message(self, message: dict[str, Any]) -> int:
        text = message.get("content") or ""
        for c in message.get("tool_calls") or ():
            text += " " + c["function"]["name"] + " " + c["function"]["arguments"]
        return 2 + len(text.split())

    def count_tools(self, tools: list[dict[str, Any]]) -> int:
        return 10 * len(tools)


def call(cid: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def ctx() -> ChatContext:
    c = ChatContext(id="ctx", created_at=T0, updated_at=T0)
    c.branches["main"] = Branch(name="main")
    return c


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def turn(n: int, *, size: int = 8, tool_round: bool = False) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": words(size, f"u{n}_")}]
    if tool_round:
        out.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    }
                ],
            }
        )
        out.append({"role": "tool", "tool_call_id": f"c{n}", "content": words(size)})
    out.append({"role": "assistant", "content": words(size, f"a{n}_")})
    return out


def view(turns: int, **kw: Any) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "be kind"}]
    for n in range(turns):
        msgs += turn(n, **kw)
    msgs.append({"role": "user", "content": "the current question"})
    return msgs


def fit(budget: TokenBudget, msgs: list[dict[str, Any]]) -> LLMRequest:
    req = LLMRequest(context_id="ctx", model="m", messages=msgs)
    return budget.enhance(req, ctx())


def assert_valid(messages: list[dict[str, Any]]) -> None:
    open_ids: set[str] = set()
    for i, m in enumerate(messages):
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_ids, f"message {i}: orphan tool result"
            open_ids.remove(m["tool_call_id"])
            continue
        assert not open_ids, f"message {i}: calls {open_ids} without a result"
        if m["role"] == "assistant" and m.get("tool_calls"):
            open_ids = {c["id"] for c in m["tool_calls"]}
    assert not open_ids


def test_arguments_are_checked() -> None:
    for kwargs, where in [
        ({"max_input_tokens": -1}, "max_input_tokens"),
        ({"max_input_tokens": True}, "max_input_tokens"),
        ({"max_input_tokens": 100, "reserve_output": 100}, "reserve_output"),
        ({"max_input_tokens": 100, "counter": object()}, "counter"),
    ]:
        with pytest.raises(InvalidInput) as info:
            TokenBudget(**kwargs)
        assert info.value.where == where


def test_a_view_that_fits_is_left_as_it_is() -> None:
    msgs = view(3)
    req = fit(TokenBudget(10_000, counter=WordCounter()), msgs)
    assert req.messages is msgs
    meta = req.metadata["token_budget"]
    assert meta["dropped_messages"] == 0
    assert meta["tokens"] == sum(WordCounter().count_message(m) for m in msgs)


def test_oldest_turns_go_first_and_whole() -> None:
    msgs = view(10)  # each turn: 2 messages of 10 tokens
    budget = TokenBudget(70, reserve_output=10, counter=WordCounter())
    req = fit(budget, msgs)
    out = req.messages
    assert out[0] == msgs[0]  # the system prompt stays
    assert out[-1] == msgs[-1]  # the current user message stays
    # 60 allowed: system 4 + current 5 = 9, then 2 turns of 20 = 49; a third would be 69
    assert out == [msgs[0], *msgs[-5:]]
    assert req.metadata["token_budget"]["dropped_messages"] == 16
    assert req.metadata["token_budget"]["tokens"] <= 60
    assert msgs == view(10)  # the given list is not changed


def test_a_tool_call_is_never_separated_from_its_results() -> None:
    msgs = view(6, tool_round=True)
    for limit in range(20, 200, 7):
        out = fit(TokenBudget(limit, counter=WordCounter()), copy.deepcopy(msgs)).messages
        assert_valid(out)
        assert out[0]["role"] == "system"
        assert out[-1] == {"role": "user", "content": "the current question"}
        # a suffix of whole turns: starts at a user message after the system prompt
        if len(out) > 2:
            assert out[1]["role"] == "user"


def test_the_current_turn_loses_its_oldest_groups_when_alone_too_large() -> None:
    calls = []
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "do many things"},
    ]
    for n in range(5):
        calls.append(f"c{n}")
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    }
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{n}", "content": words(20)})
    req = fit(TokenBudget(60, counter=WordCounter()), msgs)
    out = req.messages
    assert out[:2] == msgs[:2]
    assert out[-2:] == msgs[-2:]  # the newest round stays
    assert_valid(out)
    assert len(out) < len(msgs)
    assert req.metadata["token_budget"]["tokens"] <= 60


def test_what_must_stay_over_the_budget_raises() -> None:
    msgs = [{"role": "system", "content": words(50)}, {"role": "user", "content": "hi"}]
    with pytest.raises(BudgetExceeded, match="over the budget of 40"):
        fit(TokenBudget(50, reserve_output=10, counter=WordCounter()), msgs)


def test_the_tools_count_against_the_budget() -> None:
    msgs = view(5)
    req = LLMRequest(context_id="c", model="m", messages=msgs, tools=[{}, {}, {}])
    out = TokenBudget(80, counter=WordCounter()).enhance(req, ctx())
    # 80 - 30 for the tools - 9 pinned: two turns of 20 fit (49 + 30 = 79)
    assert len(out.messages) == 1 + 4 + 1
    assert out.metadata["token_budget"]["tokens"] == 79


def test_window_never_cuts_what_enhance_would_keep() -> None:
    history = ToolCallHistory(2)
    for turns in range(0, 12):
        for limit in (30, 60, 120, 400):
            msgs = view(turns, tool_round=True)[1:]  # the raw history: no system message
            budget = TokenBudget(limit + 20, counter=WordCounter())
            start = budget.window(msgs, ctx(), history.shrink)
            assert start == 0 or msgs[start]["role"] == "user"
            full = [{"role": "system", "content": "be kind"}, *msgs]
            windowed = [full[0], *msgs[start:]]
            try:
                a = fit(budget, history.enhance(LLMRequest("c", "m", full), ctx()).messages)
            except BudgetExceeded:
                continue
            b = fit(budget, history.enhance(LLMRequest("c", "m", windowed), ctx()).messages)
            # the window changes nothing in the view that is sent
            assert b.messages == a.messages


def _answer(prompt: int, raw: int) -> MessageNode:
    meta = MessageMetadata(
        created_at=T0,
        usage=TokenUsage(prompt_tokens=prompt),
        extra={"view": {"token_budget": {"raw_tokens": raw}}},
    )
    msg = InternalMessage(role=Role.ASSISTANT, content=[TextPart(text="x")], metadata=meta)
    return MessageNode(id=f"m{prompt}-{raw}", message=msg)


def test_calibration_is_the_ratio_of_reported_to_estimated() -> None:
    c = ctx()
    assert calibration(c) == 1.0
    for node in (_answer(150, 100), _answer(330, 200)):
        c.message_pool[node.id] = node
        c.branches["main"].message_ids.append(node.id)
    assert calibration(c) == pytest.approx(480 / 300)
    # held in range
    node = _answer(100_000, 1)
    c.message_pool[node.id] = node
    c.branches["main"].message_ids.append(node.id)
    assert calibration(c) <= 8.0
    assert TokenBudget(100, calibrate=False).factor(c) == 1.0


def test_estimating_counter() -> None:
    counter = EstimatingCounter()
    assert counter.count_message({"role": "user", "content": "x" * 40}) == 4 + 10
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:"}}]}
    assert counter.count_message(image) == 4 + 765
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert counter.count_tools(tools) == counter.count_tools(tools) > 0
    with pytest.raises(InvalidInput):
        EstimatingCounter(chars_per_token=0)


# --- through the engine -------------------------------------------------------------------


def real_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    """The fake provider's count: about 1.3 tokens per word plus framing, a
    different measure from the estimate, which the calibration must learn."""
    total = 3 + 12 * len(tools)
    for m in messages:
        text = m.get("content") or ""
        for c in m.get("tool_calls") or ():
            text += " " + c["function"]["name"] + " " + c["function"]["arguments"]
        total += 4 + math.ceil(len(re.findall(r"\w+|[^\w\s]", text)) * 1.3)
    return total


@tool
def lookup(key: str) -> dict[str, str]:
    """Look a key up."""
    return {"key": key, "value": "the value of " + key + " is long enough to count"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    "messages", [400, pytest.param(5_000, marks=pytest.mark.slow, id="5000")], ids=str
)
async def test_a_long_conversation_always_fits_and_converges(messages: int) -> None:
    """5,000 stored messages (400 in the default run), a 4,000-token budget:
    every request fits by the calibrated count, and once calibrated by the real
    count too."""
    limit = 4_000
    reserve = 500
    seen: list[tuple[int, int, dict[str, Any]]] = []

    def answer(request: LLMRequest) -> dict[str, Any]:
        real = real_tokens(request.messages, request.tools)
        seen.append((real, len(request.messages), request.metadata["token_budget"]))
        assert_valid(request.messages)
        assert request.messages[0]["role"] == "system"
        usage = {"prompt_tokens": real, "completion_tokens": 5, "total_tokens": real + 5}
        if request.messages[-1]["role"] == "user":
            n = len(seen)
            return {
                "tool_calls": [{"id": f"k{n}", "name": "lookup", "arguments": {"key": f"k{n}"}}],
                "usage": usage,
            }
        return {"text": "Here is what I found: " + words(12), "usage": usage}

    engine, _, _ = make_engine(
        answer,
        tools=[lookup],
        tool_history_rounds=4,
        token_budget=TokenBudget(limit, reserve_output=reserve),
    )
    async with engine:
        cid = await engine.create_context(system_prompt="You answer briefly. " + words(40))
        for i in range(messages // 4):  # 4 messages a turn
            await engine.send(cid, f"question {i}: " + words(10))
        ctx = await engine.get_context(cid)
    assert len(ctx.history()) == messages
    for _, _, meta in seen:
        assert meta["tokens"] + reserve <= limit
    calibrated = seen[50:]
    assert max(real for real, _, _ in calibrated) + reserve <= limit
    full = seen[-50:]  # the history is well over the budget by then
    assert min(real for real, _, _ in full) > (limit - reserve) * 0.8  # not wasteful
    assert seen[-1][2]["dropped_messages"] > messages - 200
    # the estimate's error once calibrated
    errors = [abs(m["tokens"] - real) / real for real, _, m in calibrated]
    assert max(errors) < 0.1
