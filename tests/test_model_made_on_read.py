"""``MessageMetadata.extra`` made on first read.

Most messages never have an ``extra``, and a conversation kept in memory held
an empty dict per message for it. The dict is made when ``extra`` is first
read; to a user it is the dict it always was, and the stored JSON is the same.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import pickle
from datetime import UTC, datetime

import pytest
from kit import weather_turn

from turnfsm import records
from turnfsm.model import MessageMetadata, Role
from turnfsm.model._message import extra_of

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _empty_dicts(obj: object) -> list[object]:
    """The empty dicts ``obj``'s slots hold."""
    return [r for r in gc.get_referents(obj) if type(r) is dict and not r]


def test_extra_is_a_dict_a_user_can_change() -> None:
    meta = MessageMetadata(created_at=AT)
    assert extra_of(meta) == {}
    assert _empty_dicts(meta) == []  # reading it with extra_of made nothing
    meta.extra["k"] = 1
    assert meta.extra == {"k": 1}
    assert extra_of(meta) == {"k": 1}
    meta.extra = {"other": True}
    assert meta.extra == {"other": True}
    meta.extra = None  # type: ignore[assignment]  # as the constructor's None: none yet
    assert meta.extra == {}


def test_extra_compares_copies_and_dumps_as_before() -> None:
    bare = MessageMetadata(created_at=AT)
    given = MessageMetadata(created_at=AT, extra={})
    assert bare == given
    assert repr(bare) == repr(given)
    assert records.to_json(bare) == records.to_json(given)
    assert records.to_python(bare)["extra"] == {}
    loaded = records.from_json(MessageMetadata, records.to_json(MessageMetadata(created_at=AT)))
    assert loaded == given
    loaded.extra["k"] = 1
    assert records.to_python(loaded)["extra"] == {"k": 1}
    full = MessageMetadata(created_at=AT, model="m", extra={"a": [1]})
    for other in (copy.copy(full), copy.deepcopy(full), pickle.loads(pickle.dumps(full))):
        assert other == full and other.extra == {"a": [1]}
    assert dataclasses.replace(full, model="n").extra == {"a": [1]}
    fields = {f.name: f for f in dataclasses.fields(MessageMetadata)}
    assert fields["extra"].default_factory is dict
    props = records.adapter(MessageMetadata).json_schema()["properties"]
    assert props["extra"] == {"additionalProperties": True, "title": "Extra", "type": "object"}


@pytest.mark.anyio
async def test_a_tool_loop_turn_keeps_no_empty_extra_per_message() -> None:
    async with weather_turn() as (engine, cid, turn, held):
        assert turn.text == "15 C."
        assert [m.role for m in held] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
        for message in held:
            assert _empty_dicts(message.metadata) == []
        # what a user reads is what it was
        assert [m.metadata.extra for m in turn.messages] == [{}, {}, {}, {}]
        ctx = await engine.get_context(cid)
        assert [n.message.metadata.extra for n in ctx.history()] == [{}, {}, {}, {}]
