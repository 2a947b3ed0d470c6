"""``step_log`` makes the same record as ``StepLog(...)``, and ``new_lease`` the
same as ``Lease(...)``: the same type, fields, equality, hash, repr and
frozenness, as the engine commits what they make."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from datetime import UTC, datetime

import pytest

from turnfsm.storage import Lease, StepLog
from turnfsm.storage._base import _OpenLease, _OpenStepLog, new_lease, step_log

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


def test_new_lease_makes_the_record_lease_makes() -> None:
    names = [f.name for f in dataclasses.fields(Lease)]
    assert sorted(_OpenLease.__slots__) == sorted(names)
    assert sorted(Lease.__slots__) == sorted(names)  # type: ignore[attr-defined]
    made = new_lease("c1", "engine-a", 7, 1_767_225_630.5)
    plain = Lease("c1", "engine-a", 7, 1_767_225_630.5)
    assert type(made) is Lease
    for name in names:
        assert getattr(made, name) == getattr(plain, name), name
    assert made == plain and repr(made) == repr(plain) and hash(made) == hash(plain)
    assert pickle.loads(pickle.dumps(made)) == plain
    assert copy.deepcopy(made) == plain
    assert dataclasses.replace(made, token=8) == dataclasses.replace(plain, token=8)
    assert made != new_lease("c1", "engine-a", 8, 1_767_225_630.5)
    assert made.expired(1_767_225_630.5) and not made.expired(1_767_225_630.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.token = 9  # type: ignore[misc]
    assert made.token == 7
