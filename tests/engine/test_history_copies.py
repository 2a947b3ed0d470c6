"""The record copies of engine/_history.py, built field by field for speed,
keep every field as ``dataclasses.replace`` does, for each class's fields as
they are now (a field added to a record and not to its copy fails here)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from turnfsm.engine._history import decided, started, with_calls
from turnfsm.model import (
    ApprovalStatus,
    InternalMessage,
    MessageMetadata,
    Role,
    ToolCallRequest,
    TurnProgress,
)


def _marked(obj: Any) -> Any:
    """``obj`` with a distinct marker object in every field."""
    for f in dataclasses.fields(obj):
        setattr(obj, f.name, object())
    return obj


def _same_fields(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    for f in dataclasses.fields(want):
        assert getattr(got, f.name) is getattr(want, f.name), f.name


def test_decided_keeps_every_other_field() -> None:
    call = _marked(ToolCallRequest(id="c1", tool_name="t"))
    got = decided(call, ApprovalStatus.APPROVED, "human", "ok")
    want = dataclasses.replace(
        call, approval_status=ApprovalStatus.APPROVED, decided_by="human", reason="ok"
    )
    _same_fields(got, want)
    assert got is not call


def test_with_calls_keeps_every_other_field() -> None:
    message = _marked(
        InternalMessage(role=Role.ASSISTANT, metadata=MessageMetadata(created_at=datetime.now(UTC)))
    )
    calls = [ToolCallRequest(id="c1", tool_name="t")]
    got = with_calls(message, calls)
    _same_fields(got, dataclasses.replace(message, tool_calls=calls))
    assert got.tool_calls is calls


def test_started_keeps_every_other_field() -> None:
    progress = TurnProgress()
    for f in dataclasses.fields(progress):  # frozen: set as its __init__ does
        object.__setattr__(progress, f.name, object())
    got = started(progress, ("c1",))
    _same_fields(got, dataclasses.replace(progress, started_call_ids=("c1",)))
