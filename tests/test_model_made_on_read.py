"""``MessageMetadata.extra`` made on first read, and the rare fields kept in one slot.

Most messages never have an ``extra``, and a conversation kept in memory held
an empty dict per message for it. The dict is made when ``extra`` is first
read; to a user it is the dict it always was, and the stored JSON is the same.
Likewise the fields few messages have (a refusal, reasoning items, a phase; an
incomplete reason, log probabilities, a provider's reason, a cancel) share one
slot per record, and read, compare, dump and pickle as the fields they were.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import pickle
from datetime import UTC, datetime
from typing import Any

import pytest
from kit import make_engine

from turnfsm import Turn, records, tool
from turnfsm.engine._turn import _SLOT
from turnfsm.model import InternalMessage, MessageMetadata, Role
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


@tool
def weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "temp_c": 15}


@pytest.mark.anyio
async def test_a_tool_loop_turn_keeps_no_empty_extra_per_message() -> None:
    answers: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "c1", "name": "weather", "arguments": {"city": "Oslo"}}]},
        {"text": "15 C."},
    ]
    engine, _, _ = make_engine(answers, tools=[weather])
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "weather in Oslo?")
        assert turn.text == "15 C."
        held: tuple[InternalMessage, ...] = _SLOT.__get__(turn, Turn).records  # the engine's own
        assert [m.role for m in held] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
        for message in held:
            assert _empty_dicts(message.metadata) == []
        # what a user reads is what it was
        assert [m.metadata.extra for m in turn.messages] == [{}, {}, {}, {}]
        ctx = await engine.get_context(cid)
        assert [n.message.metadata.extra for n in ctx.history()] == [{}, {}, {}, {}]


def _slots(cls: type) -> list[str]:
    return [name for c in cls.__mro__ for name in c.__dict__.get("__slots__", ())]


def test_rare_fields_share_one_slot_and_read_as_fields() -> None:
    """A message's and its metadata's rare fields are kept together in
    ``_rare``: eight slots each, none for the rare fields, and to a user they
    are fields as before (set, read, compared, copied, dumped)."""
    assert len(_slots(MessageMetadata)) == 8 and len(_slots(InternalMessage)) == 8
    rare_meta = ("incomplete_reason", "logprobs", "provider_reason", "cancelled", "extra")
    assert not set(rare_meta) & set(_slots(MessageMetadata))
    assert not {"refusal", "reasoning", "phase"} & set(_slots(InternalMessage))
    meta = MessageMetadata(created_at=AT)
    assert (meta.incomplete_reason, meta.logprobs, meta.provider_reason) == (None, None, None)
    assert meta.cancelled is False and meta._rare is None
    meta.cancelled = True
    meta.logprobs = [{"token": "a"}]
    assert meta.cancelled is True and meta.logprobs == [{"token": "a"}]
    assert meta == MessageMetadata(created_at=AT, cancelled=True, logprobs=[{"token": "a"}])
    meta.cancelled = False
    meta.logprobs = None
    assert meta._rare is None and meta == MessageMetadata(created_at=AT)
    message = InternalMessage(role=Role.ASSISTANT, metadata=meta, refusal="no", phase="p")
    assert (message.refusal, message.reasoning, message.phase) == ("no", None, "p")
    assert "refusal='no', reasoning=None, phase='p'" in repr(message)
    message.refusal = None
    message.phase = None
    assert message._rare is None and message.content == []
    assert message == InternalMessage(role=Role.ASSISTANT, metadata=MessageMetadata(created_at=AT))
    message.reasoning = []
    assert message.reasoning == [] and message._rare is not None
    dumped = records.to_json(message)
    assert records.from_json(InternalMessage, dumped) == message


def test_a_record_pickles_as_with_one_slot_per_field() -> None:
    """The state a record pickles with is what it was when each field had a
    slot: every field by name, in order (and the metadata's ``_extra``)."""
    meta = MessageMetadata(created_at=AT, model="m", incomplete_reason="pause_turn", cancelled=True)
    message = InternalMessage(role=Role.ASSISTANT, metadata=meta, refusal="no", thinking="t")
    for record, more in ((meta, ["_extra"]), (message, [])):
        names = [f.name for f in dataclasses.fields(record)] + more
        _, state = record.__reduce_ex__(4)[2]
        assert list(state) == names
        assert state == {name: getattr(record, name) for name in names}
        again = pickle.loads(pickle.dumps(record))
        assert again == record and repr(again) == repr(record)
        assert again._rare == record._rare
