"""Whatever an LLM adapter answers ends in a declared state, and what is stored loads.

Each case goes through the public API: the trace the store recorded, the
typed failure (``Turn.error`` and the ``Failed`` event), an audit that tells
the truth about who decided each tool call, and then a fresh engine on the
same SQLite file that loads the context and continues it (retry, approve, a
new message).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from canonical import ALR, ATA, EXT, IDLE, PLR, PUM, SLR, assert_recorded

from turnfsm import ApprovalStatus, ContentDelta, State, Turn, records
from turnfsm.adapters.llm import LLMRequest, LLMResponse, TextDelta, ThinkingDelta, ToolCallData
from turnfsm.errors import ToolCallNotPending
from turnfsm.events import ToolCallsRequested
from turnfsm.model import MAX_JSON_DEPTH
from turnfsm.testing import ScriptedLLM

from .answers_kit import (
    RUNS,
    Adapter,
    answer,
    assert_chat_pairs_ids,
    assert_events_serialise,
    assert_every_call_answered_once,
    calls_of,
    engine_on,
    results_of,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _clear() -> None:
    RUNS.clear()


# ------------------------------------------------------------------ tool call ids


async def test_duplicate_ids_in_one_answer_are_renamed_and_each_call_decided_alone(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.db"
    llm = ScriptedLLM(
        [
            {
                "tool_calls": [
                    {"id": "d1", "name": "lookup", "arguments": {"city": "Oslo"}},
                    {"id": "d1", "name": "book", "arguments": {"city": "Rome"}},
                ]
            }
        ]
    )
    async with engine_on(db, llm) as engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            turn = await engine.send(cid, "look up Oslo, book Rome")
            events = sub.drain()
        assert turn.state == State.AWAITING_TOOL_APPROVAL
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, PLR, ATA])
        assert [c.id for c in turn.pending_tool_calls] == ["d1-2"]
        ctx = await engine.get_context(cid)
        first, second = calls_of(ctx)
        assert (first.id, first.provider_id, first.tool_name) == ("d1", None, "lookup")
        assert (first.approval_status, first.decided_by) == (ApprovalStatus.APPROVED, "policy")
        assert (second.id, second.provider_id, second.tool_name) == ("d1-2", "d1", "book")
        # the call that needs approval is not recorded as approved by policy
        assert (second.approval_status, second.decided_by) == (ApprovalStatus.PENDING, None)
        note = ctx.history()[-1].message.metadata.extra["conversions"]
        assert note == ["tool_calls[1].id: the id 'd1' was already used; the call is 'd1-2'"]
        (requested,) = [e for e in events if isinstance(e, ToolCallsRequested)]
        assert [c.id for c in requested.calls] == ["d1", "d1-2"]
        # a kept id leaves the stored JSON as it was
        assert "provider_id" not in records.to_json(first).decode()
        assert '"provider_id":"d1"' in records.to_json(second).decode()
        assert RUNS == []

    llm2 = ScriptedLLM([{"text": "done"}])
    async with engine_on(db, llm2, "b-") as engine:
        with pytest.raises(ToolCallNotPending):
            await engine.approve(cid, "d1")
        turn = await engine.approve(cid, "d1-2")
        assert turn.state == State.IDLE
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, PLR, ATA, EXT, ALR, PLR, IDLE])
        assert sorted(RUNS) == [("book", "Rome"), ("lookup", "Oslo")]
        ctx = await engine.get_context(cid)
        assert_every_call_answered_once(ctx)
        assert calls_of(ctx)[1].decided_by == "human"
        assert_chat_pairs_ids(llm2.requests[0])


async def test_an_id_reused_from_history_is_renamed_so_approve_is_not_ambiguous(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.db"
    llm = ScriptedLLM(
        [
            {"tool_calls": [{"id": "call_0", "name": "lookup", "arguments": {"city": "Oslo"}}]},
            {"text": "Oslo found"},
            {"tool_calls": [{"id": "call_0", "name": "book", "arguments": {"city": "Rome"}}]},
        ]
    )
    async with engine_on(db, llm) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "look up Oslo")
        assert turn.state == State.IDLE
        turn = await engine.send(cid, "book Rome")
        assert turn.state == State.AWAITING_TOOL_APPROVAL
        assert [c.id for c in turn.pending_tool_calls] == ["call_0-2"]
        assert turn.pending_tool_calls[0].provider_id == "call_0"
        # the old call_0 is answered; the new one is addressed by its own id
        with pytest.raises(ToolCallNotPending):
            await engine.approve(cid, "call_0")

    llm2 = ScriptedLLM(
        [
            {"text": "booked"},
            {"tool_calls": [{"id": "call_0", "name": "lookup", "arguments": {"city": "Bern"}}]},
            {"text": "Bern found"},
        ]
    )
    async with engine_on(db, llm2, "b-") as engine:
        turn = await engine.approve(cid, "call_0-2")
        assert turn.state == State.IDLE
        turn = await engine.send(cid, "and Bern")
        assert turn.state == State.IDLE
        ctx = await engine.get_context(cid)
        assert [c.id for c in calls_of(ctx)] == ["call_0", "call_0-2", "call_0-3"]
        assert [c.provider_id for c in calls_of(ctx)] == [None, "call_0", "call_0"]
        assert_every_call_answered_once(ctx)
        assert_chat_pairs_ids(llm2.requests[-1])
        assert RUNS == [("lookup", "Oslo"), ("book", "Rome"), ("lookup", "Bern")]


async def test_missing_and_empty_ids_get_ids_that_are_free(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    llm = ScriptedLLM(
        [
            answer(
                (None, "lookup", {"city": "Oslo"}),
                ("", "lookup", {"city": "Rome"}),
                ("call_1", "lookup", {"city": "Bern"}),
            ),
            {"text": "found three"},
        ]
    )
    async with engine_on(db, llm) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "three cities")
        assert turn.state == State.IDLE
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, PLR, EXT, ALR, PLR, IDLE])
    async with engine_on(db, ScriptedLLM([{"text": "hi"}]), "b-") as engine:
        ctx = await engine.get_context(cid)
        calls = calls_of(ctx)
        assert [c.id for c in calls] == ["call_1", "call_2", "call_1-2"]
        assert [c.provider_id for c in calls] == ["", "", "call_1"]
        assert_every_call_answered_once(ctx)
        assert sorted(RUNS) == [("lookup", "Bern"), ("lookup", "Oslo"), ("lookup", "Rome")]
        assert (await engine.send(cid, "thanks")).state == State.IDLE


# ------------------------------------------------------------------ text and arguments


async def test_lone_surrogates_from_the_model_are_replaced_and_noted(tmp_path: Path) -> None:
    db = tmp_path / "c.db"

    async def stream(request: LLMRequest) -> AsyncIterator[Any]:
        if request.iteration > 1:
            yield LLMResponse(text="done")
            return
        yield ThinkingDelta("hm\ud800")
        yield TextDelta("He\ud83d")
        yield TextDelta("llo")
        yield LLMResponse(
            text="He\ud83dllo",
            tool_calls=(
                ToolCallData("c\udc01", "look\udfffup", {}),
                ToolCallData("c2", "lookup", {"city": "Os\ud800lo"}),
                ToolCallData("c3", "lookup", '{"city": "R\udc00'),
                ToolCallData("c4", "nope", {"n": float("nan")}),
            ),
            model="m\ud800",
            finish_reason="tool_calls",
        )

    async with engine_on(db, Adapter(stream)) as engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            turn = await engine.send(cid, "hi")
            events = sub.drain()
        assert turn.state == State.IDLE
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, SLR, PLR, EXT, ALR, PLR, IDLE])
        assert_events_serialise(events)
        deltas = [e.delta for e in events if isinstance(e, ContentDelta)]
        assert deltas == ["hm\ufffd", "He\ufffd", "llo"]
        assert RUNS == [("lookup", "Os\ufffdlo")]

    async with engine_on(db, ScriptedLLM([{"text": "ok"}]), "b-") as engine:
        ctx = await engine.get_context(cid)
        msg = ctx.history()[1].message
        assert msg.text == "He\ufffdllo"
        assert msg.thinking == "hm\ufffd"
        assert msg.metadata.model == "m\ufffd"
        c1, c2, c3, c4 = msg.tool_calls or []
        assert (c1.id, c1.tool_name, c1.provider_id) == ("c\ufffd", "look\ufffdup", None)
        assert c2.arguments == {"city": "Os\ufffdlo"}
        assert c4.arguments == {"n": "NaN"}
        assert c3.raw_arguments == '{"city": "R\ufffd'
        notes = msg.metadata.extra["conversions"]
        assert "text: 1 lone surrogate(s) replaced by U+FFFD" in notes
        assert "thinking: 1 lone surrogate(s) replaced by U+FFFD" in notes
        assert "model: 1 lone surrogate(s) replaced by U+FFFD" in notes
        assert "tool_calls[0].id: 1 lone surrogate(s) replaced by U+FFFD" in notes
        assert "tool_calls[0].name: 1 lone surrogate(s) replaced by U+FFFD" in notes
        assert "tool_calls[1].arguments.city: 1 lone surrogate(s) replaced by U+FFFD" in notes
        assert any(n.startswith("tool_calls[3].arguments.n: NaN") for n in notes)
        assert "tool_calls[2].arguments: 1 lone surrogate(s) replaced by U+FFFD" in notes
        assert_every_call_answered_once(ctx)
        results = results_of(ctx)
        assert "unknown tool" in results["c\ufffd"][0].result["error"]
        assert results["c2"][0].success is True
        assert "not a JSON object" in results["c3"][0].result["error"]
        assert (await engine.send(cid, "more")).state == State.IDLE


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


class NoJSON:
    def __repr__(self) -> str:
        return "<NoJSON>"


BAD_ARGUMENTS: dict[str, tuple[Any, str]] = {
    "too_deep": (nested(MAX_JSON_DEPTH + 6), f"nested deeper than {MAX_JSON_DEPTH} levels"),
    "no_json_form": ({"city": NoJSON()}, "$.city: a NoJSON is not a JSON value"),
    "key_not_a_string": ({("a", "b"): 1}, "is not a string"),
    "a_list": ([1, 2], "not a JSON object"),
    "none": (None, "not a JSON object"),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
async def test_arguments_that_cannot_be_stored_get_an_error_result(
    tmp_path: Path, case: str
) -> None:
    arguments, needle = BAD_ARGUMENTS[case]
    db = tmp_path / "c.db"
    llm = ScriptedLLM([answer(("c1", "book", arguments)), {"text": "I will fix it"}])
    async with engine_on(db, llm) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "book")
        # nothing to ask a human: the call cannot run, and the model is told why
        assert turn.state == State.IDLE
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, PLR, EXT, ALR, PLR, IDLE])
        tool_msg = next(m for m in llm.requests[1].messages if m["role"] == "tool")
        assert needle in tool_msg["content"]
        assert "invalid arguments for tool 'book'" in tool_msg["content"]
    async with engine_on(db, ScriptedLLM([{"text": "ok"}]), "b-") as engine:
        ctx = await engine.get_context(cid)
        (call,) = calls_of(ctx)
        assert call.arguments == {}
        assert call.raw_arguments is not None
        assert len(call.raw_arguments) < 9000
        # the audit says the system let it through, not the tool's approval policy
        assert (call.approval_status, call.decided_by) == (ApprovalStatus.APPROVED, "system")
        assert RUNS == []
        (result,) = results_of(ctx)["c1"]
        assert result.success is False
        assert needle in json.dumps(result.result)
        assert ctx.history()[1].message.metadata.extra["conversions"]
        assert (await engine.send(cid, "again")).state == State.IDLE


async def test_arguments_over_the_size_limit_are_cut_and_answered(tmp_path: Path) -> None:
    from turnfsm.model import MAX_JSON_BYTES

    db = tmp_path / "c.db"
    big = {"city": "x" * (MAX_JSON_BYTES + 10)}
    llm = ScriptedLLM([answer(("c1", "lookup", big)), {"text": "too long, sorry"}])
    async with engine_on(db, llm) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
        assert turn.state == State.IDLE
    async with engine_on(db, ScriptedLLM([]), "b-") as engine:
        ctx = await engine.get_context(cid)
        (call,) = calls_of(ctx)
        assert call.raw_arguments is not None
        assert len(call.raw_arguments) < 9000
        assert "characters in all]" in call.raw_arguments
        assert call.arguments_error is not None
        assert "over the limit" in call.arguments_error
        (result,) = results_of(ctx)["c1"]
        assert "over the limit" in result.result["error"]
        assert RUNS == []


async def test_a_long_argument_text_is_cut(tmp_path: Path) -> None:
    llm = ScriptedLLM([answer(("c1", "lookup", "{" + "y" * 50_000)), {"text": "oops"}])
    async with engine_on(tmp_path / "c.db", llm) as engine:
        cid = await engine.create_context()
        turn: Turn = await engine.send(cid, "go")
        assert turn.state == State.IDLE
        ctx = await engine.get_context(cid)
        (call,) = calls_of(ctx)
        assert call.raw_arguments is not None
        assert call.raw_arguments.startswith("{yyy")
        assert call.raw_arguments.endswith("[cut: 50001 characters in all]")
        assert call.arguments_error is None


async def test_ids_stay_unique_when_a_new_name_is_itself_taken(tmp_path: Path) -> None:
    llm = ScriptedLLM(
        [
            answer(
                ("d1", "lookup", {"city": "A"}),
                ("d1", "lookup", {"city": "B"}),
                ("d1-2", "book", {"city": "C"}),
                ("d1", "book", {"city": "D"}),
            ),
            {"text": "done"},
        ]
    )
    db = tmp_path / "c.db"
    async with engine_on(db, llm) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
        assert turn.state == State.AWAITING_TOOL_APPROVAL
        assert [c.id for c in turn.pending_tool_calls] == ["d1-2-2", "d1-3"]
        assert [c.provider_id for c in turn.pending_tool_calls] == ["d1-2", "d1"]
    async with engine_on(db, llm, "b-") as engine:
        turn = await engine.deny(cid, "d1-3", "not D")
        assert turn.state == State.AWAITING_TOOL_APPROVAL
        turn = await engine.approve(cid, "d1-2-2")
        assert turn.state == State.IDLE
        ctx = await engine.get_context(cid)
        assert [c.id for c in calls_of(ctx)] == ["d1", "d1-2", "d1-2-2", "d1-3"]
        assert [(c.approval_status, c.decided_by) for c in calls_of(ctx)] == [
            (ApprovalStatus.APPROVED, "policy"),
            (ApprovalStatus.APPROVED, "policy"),
            (ApprovalStatus.APPROVED, "human"),
            (ApprovalStatus.DENIED, "human"),
        ]
        assert_every_call_answered_once(ctx)
        assert sorted(RUNS) == [("book", "C"), ("lookup", "A"), ("lookup", "B")]
        assert "denied: not D" in results_of(ctx)["d1-3"][0].result["error"]
        assert_chat_pairs_ids(llm.requests[-1])


async def test_usage_is_cleaned_and_noted(tmp_path: Path) -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "x\ud800": 1.5}
    usage["ratio"] = float("inf")
    db = tmp_path / "c.db"
    async with engine_on(db, ScriptedLLM([LLMResponse(text="hi", usage=usage)])) as engine:
        cid = await engine.create_context()
        assert (await engine.send(cid, "hi")).state == State.IDLE
    async with engine_on(db, ScriptedLLM([]), "b-") as engine:
        msg = (await engine.get_context(cid)).history()[-1].message
        assert msg.metadata.usage is not None
        assert msg.metadata.usage.total_tokens == 5
        extra = records.to_python(msg.metadata.usage, mode="python")
        assert extra["x\ufffd"] == 1.5
        assert extra["ratio"] == "Infinity"
        notes = msg.metadata.extra["conversions"]
        assert any(n.startswith("usage: a key's lone surrogate") for n in notes)
        assert any(n.startswith("usage.ratio: Infinity") for n in notes)
