"""Replay scripts with refusals and cut answers: the ``llm`` step's ``refusal``
and ``finish_reason`` give the outcome the provider would, in the turn's
``TurnCompleted``, in the stored message and on the next request."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnfsm import records
from turnfsm.adapters.llm.scripted import AnswerSpec, ScriptedLLM
from turnfsm.errors import InvalidInput
from turnfsm.model import InternalMessage
from turnfsm.replay import run_script
from turnfsm.testing import assert_replays

SCRIPTS = Path(__file__).parent / "scripts"


def _stop_reasons(name: str) -> tuple[list[str], list[dict[str, object]]]:
    result = run_script(SCRIPTS / name)
    assert result.ok, result.report()
    reasons = [str(e["stop_reason"]) for e in result.events if e.get("kind") == "TurnCompleted"]
    return reasons, [n["message"] for n in result.messages]


def test_a_refusal_ends_the_turn_as_a_refusal_and_goes_back_as_one() -> None:
    reasons, messages = _stop_reasons("refusal.json")
    assert reasons == ["refusal", "completed"]
    answer = messages[1]
    assert answer["role"] == "assistant"
    assert answer["refusal"] == "I'm sorry, but I can't help with that."
    assert answer["content"] == []


def test_a_cut_answer_keeps_its_text_and_says_length() -> None:
    reasons, messages = _stop_reasons("length_cut.json")
    assert reasons == ["length"]
    assert messages[-1]["metadata"]["finish_reason"] == "length"


def test_a_cut_tool_call_is_never_run() -> None:
    reasons, messages = _stop_reasons("length_tool_fragment.json")
    assert reasons == ["length"]
    result = messages[-1]["tool_result"]
    assert result["request_id"] == "call_1"
    assert result["success"] is False
    assert result["result"]["status"] == "length"
    call = messages[1]["tool_calls"][0]
    assert (call["approval_status"], call["decided_by"]) == ("Denied", "system")


def test_a_filtered_answer_keeps_what_arrived() -> None:
    reasons, messages = _stop_reasons("content_filter.json")
    assert reasons == ["content_filter"]
    assert messages[-1]["content"] == [{"type": "text", "text": "The armies met at"}]


def test_the_scripted_llm_accepts_refusal_and_refuses_what_cannot_go_with_it() -> None:
    assert AnswerSpec.parse({"refusal": "no"}).response().refusal == "no"
    with pytest.raises(InvalidInput, match="refusal"):
        ScriptedLLM([{"refusal": "no", "tool_calls": [{"id": "c", "name": "t"}]}])
    with pytest.raises(InvalidInput, match="refusal"):
        ScriptedLLM([{}])


def test_a_refusal_script_replays_as_a_helper_would_check_it() -> None:
    assert_replays(SCRIPTS / "refusal.json")


@pytest.mark.anyio
async def test_the_next_request_sends_the_refusal_back_as_chat_expects() -> None:
    import kit

    llm = ScriptedLLM([{"refusal": "No."}, {"text": "Sure."}])
    async with kit.make_engine(llm=llm).engine as engine:
        cid = await engine.create_context()
        first = await engine.send(cid, "Do it")
        await engine.send(cid, "Something else")
    assert str(first.stop_reason) == "refusal"
    assert first.refusal == "No." and first.text == ""
    assert llm.requests[1].messages[1] == {"role": "assistant", "content": None, "refusal": "No."}


@pytest.mark.anyio
async def test_an_incomplete_answer_for_another_reason_ends_incomplete() -> None:
    import kit

    from turnfsm.model import LLMResponse

    llm = ScriptedLLM(
        [LLMResponse(text="So far", finish_reason="interrupted", incomplete_reason="interrupted")]
    )
    async with kit.make_engine(llm=llm).engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Go")
    assert str(turn.stop_reason) == "incomplete"
    answer = turn.messages[-1]
    assert (answer.text, answer.metadata.incomplete_reason) == ("So far", "interrupted")
    assert answer.outcome == "incomplete"


def test_old_stored_messages_load_and_new_fields_stay_out_of_the_json() -> None:
    from turnfsm.model import InternalMessage

    old = {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
        "metadata": {"created_at": "2026-01-01T00:00:00Z", "finish_reason": "stop"},
    }
    msg = records.from_python(InternalMessage, old)
    assert (msg.refusal, msg.reasoning, msg.phase, msg.outcome) == (None, None, None, None)
    dumped = records.to_python(msg)
    for key in ("refusal", "reasoning", "phase"):
        assert key not in dumped
    assert "incomplete_reason" not in dumped["metadata"]
    assert "logprobs" not in dumped["metadata"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "stop"),
    [
        ({"refusal": "No."}, "refusal"),
        ({"finish_reason": "length", "content": [{"type": "text", "text": "cu"}]}, "length"),
        ({"content": [{"type": "text", "text": "fine"}]}, "completed"),
    ],
)
async def test_resumed_in_processing_the_stored_answer_gives_the_outcome(
    answer: dict[str, object], stop: str
) -> None:
    """A context left in ProcessingLLMResponse decides from the stored answer."""
    from datetime import UTC, datetime

    import kit

    from turnfsm.model import Branch, ChatContext, MessageNode

    at = datetime(2026, 1, 1, tzinfo=UTC)
    finish = answer.pop("finish_reason", "stop")
    user = records.from_python(
        InternalMessage,
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi"}],
            "metadata": {"created_at": at},
        },
    )
    reply = records.from_python(
        InternalMessage,
        {"role": "assistant", "metadata": {"created_at": at, "finish_reason": finish}, **answer},
    )
    ctx = ChatContext(
        id="c1",
        created_at=at,
        updated_at=at,
        current_state="ProcessingLLMResponse",
        message_pool={
            "m1": MessageNode(id="m1", message=user),
            "m2": MessageNode(id="m2", message=reply, parent_id="m1"),
        },
        branches={"main": Branch(name="main", message_ids=["m1", "m2"])},
    )
    made = kit.make_engine([])
    async with made.engine as engine:
        await engine.store.create(ctx)
        turn = await engine.resume("c1")
    assert str(turn.stop_reason) == stop
