"""``step_log`` makes the same record as ``StepLog(...)``: the same type, fields,
equality, hash, repr and frozenness, as the engine commits what it makes."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from datetime import UTC, datetime

import pytest

from turnfsm.storage import StepLog
from turnfsm.storage._base import _OpenStepLog, step_log

AT = datetime(2026, 1, 1, 12, 30, 0, 123456, tzinfo=UTC)


def test_the_open_record_has_steplogs_slots_and_no_more() -> None:
    names = [f.name for f in dataclasses.fields(StepLog)]
    assert sorted(_OpenStepLog.__slots__) == sorted(names)
    assert sorted(StepLog.__slots__) == sorted(names)  # type: ignore[attr-defined]


@pytest.mark.parametrize("detail", [None, {"branch": "b", "n": 2}])
def test_step_log_makes_the_record_steplog_makes(detail: dict[str, object] | None) -> None:
    made = step_log(3, "Idle", "user_message", "Preparing", AT, detail)
    plain = StepLog(3, "Idle", "user_message", "Preparing", AT, detail)
    assert type(made) is StepLog
    for f in dataclasses.fields(StepLog):
        assert getattr(made, f.name) == getattr(plain, f.name), f.name
    assert made.lease_token is None and made.lease_owner is None
    assert made == plain and repr(made) == repr(plain)
    if detail is None:  # a detail is a dict: neither record hashes then
        assert hash(made) == hash(plain)
    assert dataclasses.asdict(made) == dataclasses.asdict(plain)
    assert pickle.loads(pickle.dumps(made)) == plain
    assert copy.deepcopy(made) == plain
    assert dataclasses.replace(made, version=4) == dataclasses.replace(plain, version=4)
    assert made != step_log(3, "Idle", "user_message", "Preparing", AT, {"other": 1})


def test_a_made_record_is_frozen() -> None:
    made = step_log(1, "Idle", "user_message", "Preparing", AT)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.version = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del made.at  # type: ignore[misc]
    assert made.version == 1 and made.at == AT
