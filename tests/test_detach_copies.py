"""``detached`` of a tool call, whose copy is written field by field: every
field of the class as it is now is copied (a field added to the record and not
to its copy fails here), the arguments as a copy of their own."""

from __future__ import annotations

import dataclasses

from turnfsm.model import ApprovalStatus, ToolCallRequest
from turnfsm.model._detach import detached


def test_a_calls_copy_keeps_every_field() -> None:
    call = ToolCallRequest(id="c1", tool_name="t")
    for f in dataclasses.fields(call):  # a distinct marker in every field
        setattr(call, f.name, object())
    call.arguments = {"city": "Paris", "days": [1, 2], "nested": {"deep": True}}
    copy = detached(call)
    assert type(copy) is ToolCallRequest
    assert copy is not call
    for f in dataclasses.fields(call):
        if f.name != "arguments":
            assert getattr(copy, f.name) is getattr(call, f.name), f.name
    assert copy.arguments == call.arguments
    assert copy.arguments is not call.arguments
    assert copy.arguments["days"] is not call.arguments["days"]
    assert copy.arguments["nested"] is not call.arguments["nested"]


def test_a_calls_copy_equals_the_call() -> None:
    call = ToolCallRequest(
        id="c2",
        tool_name="t",
        arguments={"a": 1},
        approval_status=ApprovalStatus.APPROVED,
        decided_by="human",
        reason="ok",
        raw_arguments='{"a": 1}',
        provider_id="",
    )
    copy = detached(call)
    assert copy == call
    copy.arguments["a"] = 2
    assert call.arguments == {"a": 1}
