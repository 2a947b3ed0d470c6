"""The engine's messages without content share one empty list that refuses
every change (``turnfsm.model._message.NO_CONTENT``).

A tool call's answer and a tool's result have no content; a conversation kept
in memory held an empty list for each. What a user reads (copies) has a list
of its own, and the stored JSON is the same as with an empty list.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
from datetime import UTC, datetime
from typing import Any

import pytest
from kit import weather_turn

from turnfsm import records
from turnfsm.model import InternalMessage, MessageMetadata, Role, TextPart
from turnfsm.model._message import NO_CONTENT

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _tool_message(content: list[Any]) -> InternalMessage:
    return InternalMessage(role=Role.TOOL, content=content, metadata=MessageMetadata(created_at=AT))


def test_the_shared_content_refuses_every_change() -> None:
    changes = [
        lambda c: c.append(TextPart(text="x")),
        lambda c: c.extend([TextPart(text="x")]),
        lambda c: c.insert(0, TextPart(text="x")),
        lambda c: c.remove(TextPart(text="x")),
        lambda c: c.pop(),
        lambda c: c.clear(),
        lambda c: c.sort(),
        lambda c: c.reverse(),
        lambda c: c.__setitem__(slice(0, 0), [TextPart(text="x")]),
        lambda c: c.__delitem__(slice(0, 0)),
        lambda c: c.__iadd__([TextPart(text="x")]),
        lambda c: c.__imul__(2),
    ]
    for change in changes:
        with pytest.raises(TypeError, match="cannot change"):
            change(NO_CONTENT)
    assert NO_CONTENT == [] and len(NO_CONTENT) == 0
    assert isinstance(NO_CONTENT, list)


def test_a_message_with_the_shared_content_dumps_copies_and_pickles_as_before() -> None:
    shared, own = _tool_message(NO_CONTENT), _tool_message([])
    assert shared == own and repr(shared) == repr(own)
    assert records.to_json(shared) == records.to_json(own)
    # a copy of the list is the same one list, which cannot change
    assert copy.copy(NO_CONTENT) is NO_CONTENT
    assert copy.deepcopy(shared).content is NO_CONTENT
    two = pickle.loads(pickle.dumps([shared, _tool_message(NO_CONTENT)]))
    assert two[0].content is NO_CONTENT and two[1].content is NO_CONTENT
    # made through the type (asdict), it is a plain list of its own
    dumped = dataclasses.asdict(shared)["content"]
    assert type(dumped) is list and dumped == []
    dumped.append("x")
    assert NO_CONTENT == []


@pytest.mark.anyio
async def test_a_tool_loop_turn_shares_the_empty_content_and_hands_out_lists_of_their_own() -> None:
    async with weather_turn() as (engine, cid, turn, held):
        assert [m.role for m in held] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
        assert [m.content is NO_CONTENT for m in held] == [False, True, True, False]
        # what a user reads has lists of its own, which it can change
        stored = [n.message for n in (await engine.get_context(cid)).history()]
        for messages in (turn.messages, stored):
            assert [m.content for m in messages] == [
                [TextPart(text="weather in Oslo?")],
                [],
                [],
                [TextPart(text="15 C.")],
            ]
            assert all(type(m.content) is list for m in messages)
            messages[1].content.append(TextPart(text="mine"))
        assert NO_CONTENT == []
