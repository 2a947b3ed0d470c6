"""The audit record of the step that ended a turn says how it ended
(``outcome``), read from the stored answer; logs without the field still verify."""

from __future__ import annotations

import json

import kit
import pytest

from turnfsm.audit import audit_jsonl, audit_records, verify_audit_log

pytestmark = pytest.mark.anyio


async def _log(answers: list[dict[str, object]], sends: int = 1) -> list[str]:
    made = kit.make_engine(answers)
    async with made.engine as engine:
        cid = await engine.create_context()
        for n in range(sends):
            await engine.send(cid, f"message {n}")
        ctx = await engine.get_context(cid)
        steps = await engine.steps(cid)
    return audit_jsonl(audit_records(cid, steps, ctx.message_pool.values())).splitlines()


async def test_each_turn_end_carries_its_outcome() -> None:
    lines = await _log(
        [{"refusal": "No."}, {"text": "cut", "finish_reason": "length"}, {"text": "fine"}],
        sends=3,
    )
    ends = [json.loads(x) for x in lines if '"turn_complete"' in x]
    assert [e["outcome"] for e in ends] == ["refusal", "length", "completed"]
    assert all("outcome" not in json.loads(x) for x in lines if '"turn_complete"' not in x)
    assert verify_audit_log(lines).ok


async def test_a_log_without_outcomes_still_verifies_and_a_misplaced_one_does_not() -> None:
    lines = await _log([{"text": "fine"}])
    old = [json.dumps({k: v for k, v in json.loads(x).items() if k != "outcome"}) for x in lines]
    assert verify_audit_log(old).ok
    bad = [json.loads(x) for x in lines]
    bad[0]["outcome"] = "completed"
    result = verify_audit_log([json.dumps(r) for r in bad])
    assert (result.line, "outcome" in (result.reason or "")) == (1, True)
