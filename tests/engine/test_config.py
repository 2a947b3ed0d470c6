"""Config updates, branch prompts and titles: committed change records, not transitions."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from kit import make_engine

from turnfsm import ContextNotFound, Engine, InvalidInput, Mode, NotAtRest, State, StopReason
from turnfsm.audit import audit_jsonl, audit_records, verify_audit_log
from turnfsm.errors import BranchError
from turnfsm.events import ContextChanged
from turnfsm.states import CHANGES, Change
from turnfsm.storage import SQLiteStore, open_store
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

pytestmark = pytest.mark.anyio


def _system(request: Any) -> str | None:
    first = request.messages[0]
    return first["content"] if first["role"] == "system" else None


async def test_update_config_changes_the_fields_given_and_keeps_the_others() -> None:
    engine = make_engine([{"text": "a"}, {"text": "b"}]).engine
    cid = await engine.create_context(model="m1", parameters={"temperature": 0.1}, title="First")
    before = await engine.get_context(cid)
    config = await engine.update_config(cid, model="m2", parameters={"top_p": 0.5})
    after = await engine.get_context(cid)
    assert config == after.config
    assert (after.config.model_id, after.config.parameters) == ("m2", {"top_p": 0.5})
    assert after.config.title == "First" and after.config.mode == before.config.mode
    assert after.version == before.version + 1
    assert after.current_state == "Idle"
    cleared = await engine.update_config(cid, title=None)
    assert cleared.title is None


async def test_a_config_update_that_changes_nothing_commits_nothing() -> None:
    engine = make_engine([]).engine
    cid = await engine.create_context(model="m1")
    before = await engine.get_context(cid)
    await engine.update_config(cid, model="m1")
    await engine.update_config(cid)
    assert (await engine.get_context(cid)).version == before.version
    assert await engine.steps(cid) == []


async def test_the_next_request_uses_the_new_model_and_parameters() -> None:
    made = make_engine([{"text": "one"}, {"text": "two"}])
    engine, llm = made.engine, made.llm
    cid = await engine.create_context(model="m1")
    await engine.send(cid, "hi")
    await engine.update_config(cid, model="m2", parameters={"temperature": 0.0})
    await engine.send(cid, "again")
    first, second = llm.requests
    assert (first.model, second.model) == ("m1", "m2")
    assert second.parameters == {"temperature": 0.0}


async def test_the_change_is_an_event_a_step_record_and_an_audit_line() -> None:
    engine = make_engine([{"text": "a"}]).engine
    cid = await engine.create_context()
    async with engine.subscribe(cid) as sub:
        await engine.send(cid, "hi")
        await engine.update_config(cid, model="m9", title="Trip")
        events = sub.drain()
    [changed] = [e for e in events if isinstance(e, ContextChanged)]
    assert changed.change == "config_updated"
    assert changed.detail == {"model_id": "m9", "title": "Trip"}
    assert changed.state == "Idle"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    steps = await engine.steps(cid)
    assert steps[-1].trigger == Change.CONFIG_UPDATED
    assert (steps[-1].from_state, steps[-1].to_state) == ("Idle", "Idle")
    assert steps[-1].detail == changed.detail
    # the trace lists states entered: a change enters none
    assert await engine.trace(cid) == [
        State.IDLE,
        State.PROCESSING_USER_MESSAGE,
        State.AWAITING_LLM_RESPONSE,
        State.PROCESSING_LLM_RESPONSE,
        State.IDLE,
    ]
    ctx = await engine.get_context(cid)
    log = audit_jsonl(audit_records(cid, steps, ctx.message_pool.values()))
    last = json.loads(log.splitlines()[-1])
    assert last["trigger"] == "config_updated" and last["actor"] == "user"
    assert last["detail"] == {"model_id": "m9", "title": "Trip"}
    assert verify_audit_log(log.splitlines()).ok


async def test_verify_refuses_a_change_record_that_moves_or_is_made_mid_turn() -> None:
    engine = make_engine([{"text": "a"}]).engine
    cid = await engine.create_context()
    await engine.send(cid, "hi")
    await engine.update_config(cid, model="m2")
    ctx, steps = await engine.get_context(cid), await engine.steps(cid)
    lines = audit_jsonl(audit_records(cid, steps, ctx.message_pool.values())).splitlines()
    moved = json.loads(lines[-1]) | {"to": "ProcessingUserMessage"}
    result = verify_audit_log([*lines[:-1], json.dumps(moved)])
    assert not result.ok and "must stay" in (result.reason or "")
    # the same record placed mid-turn (after the first step) is refused
    record = json.loads(lines[-1])
    mid = record | {"from": "ProcessingUserMessage", "to": "ProcessingUserMessage"}
    renumbered = [lines[0], json.dumps(mid | {"seq": 2})] + [
        json.dumps(json.loads(line) | {"seq": n}) for n, line in enumerate(lines[1:-1], 3)
    ]
    result = verify_audit_log(renumbered)
    assert not result.ok and "only at rest" in (result.reason or "")
    by_llm = json.loads(lines[-1]) | {"actor": "llm"}
    result = verify_audit_log([*lines[:-1], json.dumps(by_llm)])
    assert not result.ok and "made by user" in (result.reason or "")


async def test_branches_run_their_own_prompts_side_by_side() -> None:
    made = make_engine([{"text": "main 1"}, {"text": "b 1"}, {"text": "main 2"}])
    engine, llm = made.engine, made.llm
    cid = await engine.create_context(system_prompt="Prompt A", user_prompt="Be brief.")
    await engine.send(cid, "hi")
    turn = await engine.fork(cid, "b", at=-1, system_prompt="Prompt B")
    assert turn.stop_reason is StopReason.BRANCH
    await engine.send(cid, "hi")
    await engine.switch_branch(cid, "main")
    await engine.send(cid, "hi again")
    systems = [_system(r) for r in llm.requests]
    # the fork kept the user prompt it did not replace
    assert systems == ["Prompt A\n\nBe brief.", "Prompt B\n\nBe brief.", "Prompt A\n\nBe brief."]
    ctx = await engine.get_context(cid)
    assert ctx.branches["b"].system_prompt is not None
    assert ctx.branches["b"].system_prompt.content == "Prompt B"
    assert ctx.branches["main"].system_prompt is not None
    assert ctx.branches["main"].system_prompt.content == "Prompt A"
    changes = [(s.trigger, s.detail) for s in await engine.steps(cid) if s.trigger in CHANGES]
    assert changes == [
        (
            "branch_forked",
            {"branch": "b", "at": -1, "forked_from": "main", "system_prompt": "Prompt B"},
        ),
        ("branch_switched", {"branch": "main", "previous": "b"}),
    ]


async def test_set_branch_prompts_sets_removes_and_keeps() -> None:
    made = make_engine([{"text": "1"}, {"text": "2"}, {"text": "3"}])
    engine, llm = made.engine, made.llm
    cid = await engine.create_context(system_prompt="A", user_prompt="U")
    ctx = await engine.set_branch_prompts(cid, "main", system_prompt="A2")
    assert ctx.active_branch.system_prompt is not None
    assert (ctx.active_branch.system_prompt.content, ctx.active_branch.user_prompt) == ("A2", "U")
    await engine.send(cid, "x")
    ctx = await engine.set_branch_prompts(cid, "main", user_prompt=None)
    assert ctx.active_branch.user_prompt is None
    await engine.send(cid, "y")
    ctx = await engine.set_branch_prompts(cid, "main", system_prompt="")
    assert ctx.active_branch.system_prompt is None
    await engine.send(cid, "z")
    assert [_system(r) for r in llm.requests] == ["A2\n\nU", "A2", None]
    version = (await engine.get_context(cid)).version
    same = await engine.set_branch_prompts(cid, "main", system_prompt=None, user_prompt="")
    assert same.version == version  # nothing changed, nothing committed


async def test_prompts_of_a_branch_that_is_not_active_change_at_approval_too() -> None:
    from turnfsm import tool

    @tool(approval="required")
    def act() -> str:
        return "done"

    made = make_engine(
        [{"text": "x"}, {"tool_calls": [{"id": "c1", "name": "act", "arguments": {}}]}], tools=[act]
    )
    engine = made.engine
    cid = await engine.create_context(system_prompt="A")
    await engine.send(cid, "one")
    await engine.fork(cid, "side", at=1)
    await engine.switch_branch(cid, "main")
    turn = await engine.send(cid, "two")
    assert turn.state is State.AWAITING_TOOL_APPROVAL
    ctx = await engine.set_branch_prompts(cid, "side", system_prompt="S")
    assert ctx.current_state == "AwaitingToolApproval"
    assert ctx.branches["side"].system_prompt is not None
    config = await engine.update_config(cid, title="waiting")
    assert config.title == "waiting"


async def test_refused_calls_name_the_argument_and_change_nothing() -> None:
    engine = make_engine([]).engine
    cid = await engine.create_context()
    before = await engine.get_context(cid)
    cases: list[tuple[Any, type[Exception], str]] = [
        (engine.update_config(cid, model=3), InvalidInput, "model"),  # type: ignore[arg-type]
        (engine.update_config(cid, parameters={"a": float("nan")}), InvalidInput, "parameters.a"),
        (engine.update_config(cid, title="two\nlines"), InvalidInput, "title"),
        (engine.update_config(cid, title=""), InvalidInput, "title"),
        (engine.update_config(cid, title="x" * 1001), InvalidInput, "title"),
        (engine.update_config("nope", model="m"), ContextNotFound, ""),
        (engine.set_branch_prompts(cid, "nope", system_prompt="S"), BranchError, ""),
        (engine.set_branch_prompts(cid, "main", system_prompt=5), InvalidInput, "system_prompt"),  # type: ignore[arg-type]
        (engine.fork(cid, "b", -1, user_prompt="\ud800"), InvalidInput, "user_prompt"),
    ]
    for call, error, where in cases:
        with pytest.raises(error) as info:
            await call
        if where:
            assert info.value.where == where  # type: ignore[attr-defined]
    assert await engine.get_context(cid) == before
    assert await engine.steps(cid) == []


async def test_changes_wait_until_a_crashed_turn_is_resumed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    store = open_store(url)
    engine = Engine(llm=ScriptedLLM([]), store=store, clock=FakeClock(), ids=SequentialIds())
    cid = await engine.create_context()
    await engine.aclose()
    # a process that stopped mid-turn left the context in AwaitingLLMResponse
    db = sqlite3.connect(tmp_path / "c.db")
    db.execute("UPDATE contexts SET state = 'AwaitingLLMResponse'")
    db.commit()
    db.close()
    engine = Engine(
        llm=ScriptedLLM([{"text": "ok"}]), store=url, clock=FakeClock(), ids=SequentialIds("r")
    )
    with pytest.raises(NotAtRest) as info:
        await engine.update_config(cid, model="m2")
    assert info.value.state == "AwaitingLLMResponse" and "resume" in str(info.value)
    with pytest.raises(NotAtRest):
        await engine.set_branch_prompts(cid, "main", system_prompt="S")
    await engine.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "files"])
async def test_config_title_prompts_and_change_details_survive_a_reload(
    tmp_path: Path, kind: str
) -> None:
    urls = {
        "memory": None,
        "sqlite": f"sqlite:///{tmp_path / 'c.db'}",
        "files": f"files:///{tmp_path / 'f'}",
    }
    store = open_store(urls[kind]) if urls[kind] else None
    made = make_engine([{"text": "a"}], store=store, modes=[Mode(name="plan")])
    engine = made.engine
    cid = await engine.create_context(title="Trip")
    await engine.send(cid, "hi")
    await engine.update_config(cid, mode="plan", parameters={"n": 1})
    await engine.fork(cid, "b", at=0, user_prompt="Only facts.")
    steps = await engine.steps(cid)
    ctx = await engine.get_context(cid)
    if kind == "memory":
        return
    await engine.aclose()
    again = Engine(llm=ScriptedLLM([]), store=urls[kind], clock=FakeClock())
    assert await again.get_context(cid) == ctx
    assert await again.steps(cid) == steps
    assert ctx.config.title == "Trip" and ctx.config.mode == "plan"
    assert ctx.branches["b"].user_prompt == "Only facts."
    assert [s.detail for s in steps if s.trigger in CHANGES] == [
        {"mode": "plan", "parameters": {"n": 1}},
        {"branch": "b", "at": 0, "forked_from": "main", "user_prompt": "Only facts."},
    ]
    await again.aclose()


async def test_an_older_sqlite_file_gains_the_detail_column_and_keeps_its_steps(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    made = make_engine([{"text": "a"}], store=open_store(url))
    cid = await made.engine.create_context()
    await made.engine.send(cid, "hi")
    steps = await made.engine.steps(cid)
    await made.engine.aclose()
    # the file as a release before change records wrote it: no detail column
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE steps DROP COLUMN detail")
    db.commit()
    db.close()
    store = SQLiteStore(path)
    engine = Engine(llm=ScriptedLLM([]), store=store, clock=FakeClock(), ids=SequentialIds("n"))
    assert await engine.steps(cid) == steps
    await engine.update_config(cid, title="New")
    assert (await engine.steps(cid))[-1].detail == {"title": "New"}
    await engine.aclose()


async def test_a_damaged_detail_is_a_store_error_naming_the_row(tmp_path: Path) -> None:
    from turnfsm import StoreError

    path = tmp_path / "d.db"
    made = make_engine([], store=open_store(f"sqlite:///{path}"))
    cid = await made.engine.create_context()
    await made.engine.update_config(cid, title="T")
    await made.engine.aclose()
    db = sqlite3.connect(path)
    db.execute("UPDATE steps SET detail = '[1, 2]'")
    db.commit()
    db.close()
    store = SQLiteStore(path)
    with pytest.raises(StoreError, match="column detail: not a JSON object"):
        await store.steps(cid)
    await store.aclose()
