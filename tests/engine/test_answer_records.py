"""The records a turn makes slot by slot (the user's message, the answers,
their tool calls, the tool results, each with its metadata): every slot of
each is written, and each equals what its class makes from the same values,
defaults included (a field added to a class and not to these fails here)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from kit import make_engine

from turnfsm import tool
from turnfsm.engine._call_llm import StreamRead
from turnfsm.model import (
    ApprovalStatus,
    InternalMessage,
    LLMRequest,
    MessageMetadata,
    MessageType,
    Role,
    TextPart,
    ToolCallRequest,
    ToolCallResult,
)

pytestmark = pytest.mark.anyio


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    return {"city": city, "temp_c": 15}


@tool
def get_odd(city: str) -> dict[Any, Any]:
    """A result with a key that is converted (a conversion note)."""
    return {1: city}


def _slots(cls: type) -> list[str]:
    return [
        name for c in cls.__mro__ for name in getattr(c, "__slots__", ()) if name != "__weakref__"
    ]


def _every_slot_set(obj: Any) -> None:
    for name in _slots(type(obj)):
        getattr(obj, name)  # AttributeError: a slot left unwritten


def _same(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    _every_slot_set(got)
    for f in dataclasses.fields(want):
        assert getattr(got, f.name) == getattr(want, f.name), f.name
    for name in _slots(type(want)):
        assert getattr(got, name) == getattr(want, name), name


async def _turn(tool_obj: Any, arguments: dict[str, Any]) -> list[InternalMessage]:
    answers = [
        {"tool_calls": [{"id": "call_1", "name": tool_obj.name, "arguments": arguments}]},
        {"text": "Done."},
    ]
    made = make_engine(answers, tools=[tool_obj])
    async with made.engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "turn 1")
        assert turn.state.value == "Idle"
        ctx = await engine.get_context(cid)
        return [node.message for node in ctx.history()]


async def test_a_tool_loop_turns_records_are_the_classes_own() -> None:
    user, asked, result, answer = await _turn(get_weather, {"city": "L"})
    at = datetime.fromtimestamp(1_767_225_600.0, UTC)  # FakeClock's start

    _same(user.metadata, MessageMetadata(created_at=at))
    _same(
        user,
        InternalMessage(role=Role.USER, content=[TextPart(text="turn 1")], metadata=user.metadata),
    )

    assert asked.tool_calls is not None and len(asked.tool_calls) == 1
    call = asked.tool_calls[0]
    _same(
        call,
        ToolCallRequest(
            id="call_1",
            tool_name="get_weather",
            arguments={"city": "L"},
            approval_status=call.approval_status,
            decided_by=call.decided_by,
            reason=call.reason,
        ),
    )
    assert call.approval_status is ApprovalStatus.APPROVED
    want_meta = MessageMetadata(
        created_at=at,
        model=asked.metadata.model,
        attempt=1,
        iteration=1,
        finish_reason=asked.metadata.finish_reason,
    )
    _same(asked.metadata, want_meta)
    _same(
        asked,
        InternalMessage(
            role=Role.ASSISTANT,
            tool_calls=[call],
            message_type=MessageType.TOOL_CALL,
            metadata=asked.metadata,
        ),
    )

    assert result.tool_result is not None
    _same(
        result.tool_result, ToolCallResult(request_id="call_1", result={"city": "L", "temp_c": 15})
    )
    _same(result.metadata, MessageMetadata(created_at=at))
    _same(
        result,
        InternalMessage(
            role=Role.TOOL,
            tool_result=result.tool_result,
            message_type=MessageType.TOOL_RESULT,
            metadata=result.metadata,
        ),
    )

    _same(
        answer.metadata,
        MessageMetadata(
            created_at=at,
            model=answer.metadata.model,
            attempt=1,
            iteration=2,
            finish_reason=answer.metadata.finish_reason,
        ),
    )
    _same(
        answer,
        InternalMessage(
            role=Role.ASSISTANT, content=[TextPart(text="Done.")], metadata=answer.metadata
        ),
    )


async def test_a_tool_result_with_conversions_keeps_its_notes() -> None:
    _, _, result, _ = await _turn(get_odd, {"city": "L"})
    assert result.tool_result is not None
    _same(result.tool_result, ToolCallResult(request_id="call_1", result={"1": "L"}))
    notes = result.metadata.extra["conversions"]
    assert notes and "$" in notes[0]
    _same(
        result.metadata,
        MessageMetadata(created_at=result.metadata.created_at, extra={"conversions": notes}),
    )


async def test_a_turns_requests_are_the_classes_own() -> None:
    answers = [
        {"tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": {"city": "L"}}]},
        {"text": "Done."},
    ]
    made = make_engine(answers, tools=[get_weather])
    async with made.engine as engine:
        cid = await engine.create_context()
        await engine.send(cid, "turn 1")
    requests = made.llm.requests
    assert len(requests) == 2
    for iteration, request in enumerate(requests, start=1):
        want = LLMRequest(
            context_id=cid,
            model=request.model,
            messages=request.messages,
            tools=request.tools,
            parameters=request.parameters,
            attempt=1,
            iteration=iteration,
            request_cancel=request.request_cancel,
        )
        _same(request, want)
        assert request.tools and request.metadata == {} and request.output is None


def test_a_stream_read_has_the_fields_call_llm_writes() -> None:
    # call_llm writes each of these on a new StreamRead: a field added to the
    # class and not there would be missing on every attempt's read
    assert [f.name for f in dataclasses.fields(StreamRead)] == [
        "partial",
        "response",
        "failure",
        "streaming",
        "thinking",
        "thinking_fixed",
    ]
    assert [(f.name, f.default) for f in dataclasses.fields(StreamRead)][1:4] == [
        ("response", None),
        ("failure", None),
        ("streaming", False),
    ]
