"""``Turn.messages`` copied when first read (docs/architecture.md, "Records").

A turn the engine returns holds the engine's own message records until its
``messages`` are first read; the copies made then are the messages as the call
left them, even after later calls stored changed versions of them, and share
nothing that can change with the engine. ``text`` and ``refusal`` copy nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
from datetime import UTC, datetime
from typing import Any

import pytest
from kit import make_engine

from turnfsm import ApprovalStatus, State, Turn, records, tool
from turnfsm.engine._turn import _SLOT, Question, StopReason, _Uncopied, new_turn
from turnfsm.model import InternalMessage, MessageMetadata, Role, TextPart, ToolCallRequest

pytestmark = pytest.mark.anyio


@tool(approval="required")
def booked(city: str) -> dict[str, Any]:
    """Book a trip."""
    return {"city": city}


ANSWERS: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "c1", "name": "booked", "arguments": {"city": "Oslo"}}]},
    {"text": "Booked."},
]


async def test_copied_on_first_read_as_the_call_left_them() -> None:
    engine, _, _ = make_engine(ANSWERS, tools=[booked])
    async with engine:
        cid = await engine.create_context()
        asked = await engine.send(cid, "book Oslo")
        assert asked.state is State.AWAITING_TOOL_APPROVAL
        assert type(_SLOT.__get__(asked, Turn)) is _Uncopied  # nothing copied yet
        done = await engine.approve(cid, "c1")  # stores the decided call as a new record
        assert done.text == "Booked."  # read without copying
        assert type(_SLOT.__get__(done, Turn)) is _Uncopied

        # read after the approval: the call as it was when the first call returned
        messages = asked.messages
        calls = messages[1].tool_calls
        assert calls is not None and calls[0].approval_status is ApprovalStatus.PENDING
        assert asked.messages is messages  # copied once, then kept
        ctx = await engine.get_context(cid)
        stored = [ctx.message_pool[i].message for i in asked.message_ids]
        assert stored[1].tool_calls is not None
        assert stored[1].tool_calls[0].approval_status is ApprovalStatus.APPROVED
        assert [m.text for m in messages] == [m.text for m in stored]

        # the copies share nothing with the engine's records
        engine_records = _SLOT.__get__(done, Turn).records
        copies = done.messages
        assert copies == engine_records
        for mine, theirs in zip(copies, engine_records, strict=True):
            assert mine is not theirs and mine.content is not theirs.content
            assert mine.metadata is not theirs.metadata
        before = records.to_json(await engine.get_context(cid))
        copies[-1].content.clear()
        copies[-1].metadata.extra["x"] = 1
        assert records.to_json(await engine.get_context(cid)) == before
        assert done.messages is copies and copies[-1].content == []


def test_a_turn_made_with_messages_behaves_as_a_dataclass() -> None:
    made = Turn(
        context_id="c",
        state=State.IDLE,
        stop_reason=None,
        states=(),
        messages=(),
        message_ids=(),
        pending_tool_calls=(),
    )
    assert made.messages == () and made.text == "" and made.refusal is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.messages = ()  # type: ignore[misc]
    assert [f.name for f in dataclasses.fields(Turn)][4] == "messages"
    assert dataclasses.replace(made, context_id="d").messages == ()
    assert pickle.loads(pickle.dumps(made)) == made
    assert copy.deepcopy(made) == made
    assert "messages=()" in repr(made)


def test_the_engines_turn_is_the_dataclass_made_with_every_field() -> None:
    values: dict[str, Any] = {
        "context_id": "c",
        "state": State.AWAITING_TOOL_APPROVAL,
        "stop_reason": StopReason.AWAITING_APPROVAL,
        "states": (State.PROCESSING_USER_MESSAGE,),
        "messages": (
            InternalMessage(
                role=Role.USER,
                content=[TextPart(text="hi")],
                metadata=MessageMetadata(created_at=datetime(2026, 1, 1, tzinfo=UTC)),
            ),
        ),
        "message_ids": ("m1",),
        "pending_tool_calls": (ToolCallRequest(id="c1", tool_name="booked"),),
        "error": "e",
        "questions": (Question("c2", "ask", "Which?", ("a", "b")),),
        "output": {"x": 1},
        "output_error": None,
        "client_tool_calls": (ToolCallRequest(id="c3", tool_name="client"),),
    }
    assert list(values) == [f.name for f in dataclasses.fields(Turn)]  # every field, in order
    fields = dict(values)
    made = new_turn(records=fields.pop("messages"), **fields)
    assert type(_SLOT.__get__(made, Turn)) is _Uncopied  # copied on first read
    assert made == Turn(**values)
    assert made.messages is not values["messages"] and made.messages == values["messages"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.error = None  # type: ignore[misc]
