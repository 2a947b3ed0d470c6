"""The built-in enhancers (turnfsm.enhancers): they shape the request view only."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from turnfsm import records
from turnfsm.enhancers import (
    CurrentMessageMarker,
    Enhancer,
    SystemPromptEnhancer,
    ToolCallHistory,
    ToolDefinitionsEnhancer,
    UserLocale,
)
from turnfsm.enhancers._current import CurrentMessage
from turnfsm.errors import InvalidInput
from turnfsm.model import (
    Branch,
    ChatContext,
    InternalMessage,
    LLMRequest,
    MessageMetadata,
    MessageNode,
    Role,
    SystemPrompt,
    TextPart,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def context(system: str | None = None, user_prompt: str | None = None) -> ChatContext:
    ctx = ChatContext(id="ctx", created_at=T0, updated_at=T0)
    ctx.branches["main"] = Branch(
        name="main",
        system_prompt=SystemPrompt(id="sp", content=system) if system is not None else None,
        user_prompt=user_prompt,
    )
    return ctx


def request(messages: list[dict[str, Any]] | None = None) -> LLMRequest:
    return LLMRequest(
        context_id="ctx",
        model="m",
        messages=messages if messages is not None else [{"role": "user", "content": "hi"}],
    )


@pytest.mark.parametrize(
    "enhancer",
    [SystemPromptEnhancer(), ToolDefinitionsEnhancer([]), ToolCallHistory(1)],
    ids=lambda e: type(e).__name__,
)
def test_builtins_satisfy_the_protocol(enhancer: object) -> None:
    assert isinstance(enhancer, Enhancer)


# --- SystemPromptEnhancer -----------------------------------------------------------------


def test_system_prompt_and_user_prompt_are_joined_first() -> None:
    original = [{"role": "user", "content": "hi"}]
    req = request(original)
    out = SystemPromptEnhancer().enhance(req, context("You help.", "The user is Ada."))
    assert out.messages == [
        {"role": "system", "content": "You help.\n\nThe user is Ada."},
        {"role": "user", "content": "hi"},
    ]
    assert original == [{"role": "user", "content": "hi"}]  # the given list is not mutated


def test_system_prompt_only() -> None:
    out = SystemPromptEnhancer().enhance(request(), context("You help."))
    assert out.messages[0] == {"role": "system", "content": "You help."}
    assert len(out.messages) == 2


def test_user_prompt_only() -> None:
    out = SystemPromptEnhancer().enhance(request(), context(user_prompt="Ada"))
    assert out.messages[0] == {"role": "system", "content": "Ada"}


def test_no_prompt_leaves_the_request_unchanged() -> None:
    original = [{"role": "user", "content": "hi"}]
    req = request(original)
    out = SystemPromptEnhancer().enhance(req, context())
    assert out.messages is original
    assert out.messages == [{"role": "user", "content": "hi"}]


def test_empty_prompts_count_as_none() -> None:
    original = [{"role": "user", "content": "hi"}]
    out = SystemPromptEnhancer().enhance(request(original), context("", ""))
    assert out.messages == original


def test_default_is_used_when_the_branch_has_no_system_prompt() -> None:
    out = SystemPromptEnhancer(default="Default.").enhance(request(), context(user_prompt="Ada"))
    assert out.messages[0] == {"role": "system", "content": "Default.\n\nAda"}


def test_branch_system_prompt_wins_over_default() -> None:
    out = SystemPromptEnhancer(default="Default.").enhance(request(), context("Mine."))
    assert out.messages[0] == {"role": "system", "content": "Mine."}


def test_system_prompt_of_the_active_branch_is_used() -> None:
    ctx = context("main prompt")
    ctx.branches["alt"] = Branch(name="alt", system_prompt=SystemPrompt(id="s2", content="alt"))
    ctx.active_branch_name = "alt"
    out = SystemPromptEnhancer().enhance(request(), ctx)
    assert out.messages[0] == {"role": "system", "content": "alt"}


def test_system_prompt_enhancer_leaves_the_context_alone() -> None:
    ctx = context("You help.", "Ada")
    before = records.to_json(ctx).decode()
    SystemPromptEnhancer().enhance(request(), ctx)
    assert records.to_json(ctx).decode() == before


# --- ToolDefinitionsEnhancer ---------------------------------------------------------------

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
NOW = {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}


def test_tool_definitions_are_offered() -> None:
    defs = [WEATHER, NOW]
    out = ToolDefinitionsEnhancer(defs).enhance(request(), context())
    assert out.tools == [WEATHER, NOW]
    assert out.tools is not defs  # a copy: the request may be changed later
    assert out.messages == [{"role": "user", "content": "hi"}]


def test_tool_definitions_from_a_tuple() -> None:
    out = ToolDefinitionsEnhancer((NOW,)).enhance(request(), context())
    assert out.tools == [NOW]


def test_tool_definitions_from_a_callable_are_read_per_call() -> None:
    current: list[dict[str, Any]] = [WEATHER]
    enhancer = ToolDefinitionsEnhancer(lambda: list(current))
    assert enhancer.enhance(request(), context()).tools == [WEATHER]
    current.append(NOW)
    assert enhancer.enhance(request(), context()).tools == [WEATHER, NOW]


def test_no_tool_definitions() -> None:
    assert ToolDefinitionsEnhancer([]).enhance(request(), context()).tools == []


def test_tool_definitions_enhancer_does_not_mutate_its_source() -> None:
    defs = [WEATHER]
    snapshot = copy.deepcopy(defs)
    out = ToolDefinitionsEnhancer(defs).enhance(request(), context())
    out.tools.append(NOW)
    assert defs == snapshot


# --- ToolCallHistory -----------------------------------------------------------------------


def tc(cid: str, name: str = "get_weather") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}


def round_(n: int, *, text: str | None = None, calls: int = 1) -> list[dict[str, Any]]:
    ids = [f"r{n}c{i}" for i in range(calls)]
    out: list[dict[str, Any]] = [
        {"role": "assistant", "content": text, "tool_calls": [tc(i) for i in ids]}
    ]
    out += [{"role": "tool", "tool_call_id": i, "content": f"result {i}"} for i in ids]
    return out


def history(rounds: int, *, texts: dict[int, str] | None = None) -> list[dict[str, Any]]:
    texts = texts or {}
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q1"},
    ]
    for n in range(rounds):
        out += round_(n, text=texts.get(n), calls=1 + n % 3)
    out.append({"role": "assistant", "content": "final"})
    return out


def assert_valid(messages: list[dict[str, Any]]) -> None:
    """Every tool message answers a call of the assistant message right before its
    run of tool messages; every call is answered before the next non-tool message."""
    open_ids: set[str] = set()
    for i, m in enumerate(messages):
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_ids, f"message {i}: tool message with no open call"
            open_ids.remove(m["tool_call_id"])
            continue
        assert not open_ids, f"message {i}: calls {open_ids} left without a result"
        if m["role"] == "assistant" and m.get("tool_calls"):
            open_ids = {c["id"] for c in m["tool_calls"]}
            assert len(open_ids) == len(m["tool_calls"])
    assert not open_ids


def rounds_in(messages: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [c["id"] for c in m["tool_calls"]]
        for m in messages
        if m["role"] == "assistant" and m.get("tool_calls")
    ]


def calls_in(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Every call of the view as (id, arguments)."""
    return [
        (c["id"], c["function"]["arguments"])
        for m in messages
        if m["role"] == "assistant" and m.get("tool_calls")
        for c in m["tool_calls"]
    ]


def results_in(messages: list[dict[str, Any]]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


def test_negative_calls_are_refused() -> None:
    for bad in [-1, True, "3", None]:
        with pytest.raises(InvalidInput) as info:
            ToolCallHistory(bad)  # type: ignore[arg-type]
        assert info.value.where == "calls"


def test_default_is_ten_calls() -> None:
    assert ToolCallHistory().calls == 10


@pytest.mark.parametrize("keep", [0, 1, 2, 3, 5, 9])
def test_keeps_the_last_n_calls_in_full_and_older_ones_by_name(keep: int) -> None:
    msgs = history(5)  # rounds of 1, 2, 3, 1, 2 calls: 9 calls
    out = ToolCallHistory(keep).enhance(request(msgs), context()).messages
    before, after = calls_in(msgs), calls_in(out)
    assert [cid for cid, _ in after] == [cid for cid, _ in before]  # every call still shown
    cut = max(0, len(before) - keep)
    assert all(args == "{}" for _, args in after[:cut])
    results = results_in(out)
    for cid, _ in before[:cut]:
        assert results[cid] == "[omitted: result of an earlier get_weather call]"
    for cid, _ in before[cut:]:
        assert results[cid] == f"result {cid}"
    names = [c["function"]["name"] for m in out if m.get("tool_calls") for c in m["tool_calls"]]
    assert names == ["get_weather"] * len(before)
    assert_valid(out)
    assert len(out) == len(msgs)


def test_calls_are_counted_one_by_one_inside_an_answer() -> None:
    msgs = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "three at once",
            "tool_calls": [tc("a", "one"), tc("b", "two"), tc("c", "three")],
        },
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "tool", "tool_call_id": "c", "content": "C"},
    ]
    msgs[1]["tool_calls"][2]["function"]["arguments"] = '{"x":1}'
    req = request(msgs)
    out = ToolCallHistory(1).enhance(req, context()).messages
    assert out[1]["content"] == "three at once"
    assert [c["function"]["arguments"] for c in out[1]["tool_calls"]] == ["{}", "{}", '{"x":1}']
    assert results_in(out) == {
        "a": "[omitted: result of an earlier one call]",
        "b": "[omitted: result of an earlier two call]",
        "c": "C",
    }
    assert req.metadata["tool_history"] == {"calls": 3, "full": 1, "name_only": 2}


def test_the_input_list_and_its_dicts_are_not_mutated() -> None:
    msgs = history(4, texts={0: "t0", 1: "t1"})
    snapshot = copy.deepcopy(msgs)
    out = ToolCallHistory(1).enhance(request(msgs), context())
    assert msgs == snapshot
    assert out.messages is not msgs
    out.messages.append({"role": "user", "content": "x"})
    assert msgs == snapshot


def test_nothing_to_cut_returns_the_same_list_and_no_metadata() -> None:
    msgs = history(2)  # 3 calls
    for keep in (3, 10):
        req = request(msgs)
        out = ToolCallHistory(keep).enhance(req, context())
        assert out.messages is msgs
        assert out.metadata == {}


def test_no_tool_calls_at_all() -> None:
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert ToolCallHistory(0).enhance(request(msgs), context()).messages == msgs


def test_call_ids_reused_across_rounds() -> None:
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [tc("call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "first"},
        {"role": "assistant", "content": None, "tool_calls": [tc("call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "second"},
        {"role": "assistant", "content": "done"},
    ]
    out = ToolCallHistory(1).enhance(request(msgs), context()).messages
    assert out[2]["content"] == "[omitted: result of an earlier get_weather call]"
    assert out[4]["content"] == "second"
    assert out[3] is msgs[3]
    assert_valid(out)


def test_name_only_view_is_valid_for_many_shapes() -> None:
    for total in range(6):
        for keep in range(12):
            texts = {n: f"text {n}" for n in range(total) if n % 2}
            msgs = history(total, texts=texts)
            snapshot = copy.deepcopy(msgs)
            out = ToolCallHistory(keep).enhance(request(msgs), context()).messages
            assert msgs == snapshot
            assert_valid(out)
            full = [a for _, a in calls_in(out) if a != "{}"]
            assert len(full) == 0  # history() calls have "{}" arguments
            kept = [v for v in results_in(out).values() if not v.startswith("[omitted")]
            assert len(kept) == min(len(calls_in(msgs)), keep)
            texts_in = [m["content"] for m in msgs if m["role"] == "assistant"]
            texts_out = [m["content"] for m in out if m["role"] == "assistant"]
            assert texts_out == texts_in


def test_shrink_gives_the_smallest_form() -> None:
    msgs = history(1)
    small = ToolCallHistory().shrink(msgs[2])
    assert small["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": "{}"}
    assert ToolCallHistory().shrink(msgs[1]) is msgs[1]


def test_trimmer_leaves_the_context_alone() -> None:
    ctx = context("sys")
    before = records.to_json(ctx).decode()
    ToolCallHistory(0).enhance(request(history(3)), ctx)
    assert records.to_json(ctx).decode() == before


# --- the current message ------------------------------------------------------------------


def _with_current(extra: dict[str, Any]) -> ChatContext:
    """A context whose newest user message carries ``extra``, an answer before it."""
    ctx = context("sys")
    for mid, role, text, flags in (
        ("m1", Role.USER, "earlier", {}),
        ("m2", Role.ASSISTANT, "ok", {}),
        ("m3", Role.USER, "Wetter?", extra),
    ):
        message = InternalMessage(
            role=role,
            content=[TextPart(text=text)],
            metadata=MessageMetadata(created_at=T0, extra=dict(flags)),
        )
        ctx.message_pool[mid] = MessageNode(id=mid, message=message)
        ctx.branches["main"].message_ids.append(mid)
    return ctx


def _view() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "Wetter?"},
    ]


@pytest.mark.parametrize(
    "extra",
    [
        {"current": True, "user_language": "de", "user_timezone": "Europe/Berlin"},
        {"current": True},
        {"user_language": "de"},
        {},
    ],
)
def test_the_engines_current_message_step_is_the_locale_then_the_marker(
    extra: dict[str, Any],
) -> None:
    ctx = _with_current(extra)
    expected = CurrentMessageMarker().enhance(UserLocale().enhance(request(_view()), ctx), ctx)
    got = CurrentMessage().enhance(request(_view()), ctx)
    assert got.messages == expected.messages
    assert got.metadata == expected.metadata
    if extra.get("current"):
        assert got.messages[-1]["content"] == "[CURRENT MESSAGE FROM USER]: Wetter?"
    else:
        assert got.messages == _view() and got.metadata == {}


def test_the_engine_runs_the_current_message_step_once() -> None:
    from turnfsm import Engine

    chain = Engine(llm=None)._d.settings.enhancers
    assert sum(isinstance(e, CurrentMessage) for e in chain) == 1
    assert not any(isinstance(e, UserLocale | CurrentMessageMarker) for e in chain)
