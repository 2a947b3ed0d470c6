"""The engine's events as AG-UI's, without a server: what a stream that fell
behind missed still reaches the client when the turn rests, once."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from turnfsm.engine import Turn
from turnfsm.events import ContentDelta, EventsMissed, MessageCompleted, StateChanged
from turnfsm.model import InternalMessage, MessageMetadata, Role, TextPart, ToolCallRequest
from turnfsm.states import State

CID = "c1"


def assistant(text: str, calls: list[ToolCallRequest] | None = None) -> InternalMessage:
    return InternalMessage(
        role=Role.ASSISTANT,
        content=[TextPart(text=text)],
        tool_calls=calls,
        metadata=MessageMetadata(created_at=datetime.now(UTC), attempt=1),
    )


def events_of(frames: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for f in frames:
        text = f.decode()
        assert text.endswith("\n\n") and "\r" not in text
        data = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
        out.append(json.loads(data[0]))
    return out


def test_what_a_lagging_stream_missed_is_sent_when_the_turn_rests() -> None:
    from turnfsm.server._ag_ui_events import Translator

    run = Translator("t", "r")
    frames: list[bytes] = [run.started()]
    seen = [
        StateChanged(
            context_id=CID,
            seq=1,
            timestamp=0,
            from_state="Idle",
            to_state="ProcessingUserMessage",
            trigger="user_message",
        ),
        ContentDelta(
            context_id=CID, seq=2, timestamp=0, message_id="m1", delta="Hel", index=0, attempt=1
        ),
        # "lo there." was dropped for this subscriber, and the rest of the turn
        EventsMissed(context_id=CID, seq=5, timestamp=0, count=3, first_seq=3),
    ]
    for ev in seen:
        frames.extend(run.event(ev))
    call = ToolCallRequest(id="call_1", tool_name="add", arguments={"a": 1})
    turn = Turn(
        context_id=CID,
        state=State.IDLE,
        stop_reason=None,
        states=(State.IDLE,),
        messages=(assistant("Hello there.", [call]),),
        message_ids=("m1",),
        pending_tool_calls=(),
    )
    frames.extend(run.settle(turn))
    frames.extend(run.settle(turn))  # gone over twice: nothing sent twice
    frames.extend(run.finish(turn, None))
    events = events_of(frames)
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Hello there."
    kinds = [e["type"] for e in events]
    assert kinds.count("TEXT_MESSAGE_START") == kinds.count("TEXT_MESSAGE_END") == 1
    assert kinds.count("TOOL_CALL_START") == kinds.count("TOOL_CALL_END") == 1
    args = next(e for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(args["delta"]) == {"a": 1}
    assert kinds[-2:] == ["STEP_FINISHED", "RUN_FINISHED"]


def test_a_completed_message_adds_what_was_not_streamed_of_it() -> None:
    from turnfsm.server._ag_ui_events import Translator

    run = Translator("t", "r")
    done = MessageCompleted(
        context_id=CID, seq=3, timestamp=0, message_id="m2", message=assistant("Whole.")
    )
    events = events_of(list(run.event(done)))
    assert [e["type"] for e in events] == [
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
    ]
    assert events[1]["delta"] == "Whole."
    assert list(run.event(done)) == []  # once
